//! How often a key was seen lately, in fixed memory: a count-min sketch of
//! 64-bit key hashes (TinyLFU's frequency estimate, Einziger et al. 2017).
//!
//! Each hash bumps one 8-bit counter in each of [`PROBES`] places; its
//! estimate is the least of the four, so it is never below the true count
//! since the last aging (collisions only raise it). Counters stop at
//! [`MAX_COUNT`]; every [`FrequencySketch::new`]'s `period` recordings all
//! counters are halved, so old popularity fades and a key must keep being
//! asked for to keep its count.
//!
//! Lock-free: counters are atomics bumped with relaxed compare-and-swap (no
//! recording is lost); an aging pass races with recordings at worst by one
//! count. It owns counting only: what a count means (admit a new object,
//! promote a copy) is the caller's.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::key::mix64;

/// Counters bumped per recording (and read per estimate).
pub const PROBES: usize = 4;

/// A counter's ceiling: enough to tell "seen once" from "seen often".
pub const MAX_COUNT: u8 = 15;

/// Recent sightings of key hashes, estimated.
pub struct FrequencySketch {
    counters: Box<[AtomicU8]>,
    /// `counters.len() - 1` (a power of two less one).
    mask: u64,
    /// Recordings since the sketch was made.
    recorded: AtomicU64,
    /// Recordings between two agings.
    period: u64,
}

impl FrequencySketch {
    /// A sketch of `2^width_bits` one-byte counters, halved every `period`
    /// recordings (TinyLFU's sample size: about 10x the keys it should tell
    /// apart).
    pub fn new(width_bits: u32, period: u64) -> Self {
        let len = 1usize << width_bits.min(30);
        FrequencySketch {
            counters: (0..len).map(|_| AtomicU8::new(0)).collect(),
            mask: len as u64 - 1,
            recorded: AtomicU64::new(0),
            period: period.max(1),
        }
    }

    /// Bytes the counters take.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }

    /// Counts one sighting of `hash`; its estimate after it.
    pub fn record(&self, hash: u64) -> u8 {
        let mut least = MAX_COUNT;
        for slot in self.slots(hash) {
            let bumped = slot
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                    (c < MAX_COUNT).then_some(c + 1)
                })
                .map_or(MAX_COUNT, |before| before + 1);
            least = least.min(bumped);
        }
        if (self.recorded.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(self.period) {
            self.age();
        }
        least
    }

    /// Sightings of `hash` since the last agings (never fewer than there
    /// were, halved once per aging).
    pub fn estimate(&self, hash: u64) -> u8 {
        self.slots(hash)
            .map(|slot| slot.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// The counters of `hash`: four indexes from two halves of a remixed
    /// hash (Kirsch-Mitzenmacher double hashing).
    fn slots(&self, hash: u64) -> impl Iterator<Item = &AtomicU8> {
        let h = mix64(hash);
        let (a, b) = (h, (h >> 32) | 1);
        (0..PROBES as u64).map(move |i| {
            let index = a.wrapping_add(i.wrapping_mul(b)) & self.mask;
            // `index` is masked to `counters.len() - 1`.
            &self.counters[index as usize]
        })
    }

    /// Halves every counter: popularity fades.
    fn age(&self) {
        for c in self.counters.iter() {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v / 2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift: the same hashes every run.
    fn hashes(seed: u64, n: usize) -> Vec<u64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            })
            .collect()
    }

    #[test]
    fn counts_are_never_underestimated() {
        let sketch = FrequencySketch::new(12, u64::MAX);
        let keys = hashes(7, 500);
        for (i, &k) in keys.iter().enumerate() {
            for _ in 0..(i % 4) {
                sketch.record(k);
            }
        }
        for (i, &k) in keys.iter().enumerate() {
            assert!(sketch.estimate(k) >= (i % 4) as u8, "key {i}");
        }
    }

    #[test]
    fn one_sighting_in_a_sketch_wider_than_the_keys_reads_one() {
        // 2,000 keys once each in 64 Ki counters: collisions on all four
        // probes are rare; a handful at most reads above one.
        let sketch = FrequencySketch::new(16, u64::MAX);
        let keys = hashes(11, 2_000);
        for &k in &keys {
            assert!(sketch.record(k) >= 1);
        }
        let above = keys.iter().filter(|&&k| sketch.estimate(k) > 1).count();
        assert!(above <= 20, "{above} of 2000 read above one");
        let unseen = hashes(12, 2_000);
        let ghosts = unseen.iter().filter(|&&k| sketch.estimate(k) > 0).count();
        assert!(ghosts <= 20, "{ghosts} unseen keys read as seen");
    }

    #[test]
    fn counters_stop_at_the_ceiling() {
        let sketch = FrequencySketch::new(8, u64::MAX);
        for _ in 0..100 {
            sketch.record(42);
        }
        assert_eq!(sketch.estimate(42), MAX_COUNT);
    }

    #[test]
    fn aging_halves_what_was_seen() {
        let sketch = FrequencySketch::new(10, 8);
        for _ in 0..7 {
            sketch.record(1);
        }
        assert_eq!(sketch.estimate(1), 7);
        // The eighth recording ages: 8 / 2.
        assert_eq!(sketch.record(1), 8);
        assert_eq!(sketch.estimate(1), 4);
    }
}
