//! Admission: which new objects a full disk zone writes.
//!
//! A zone's manager evicts the least recently used files; alone, that lets
//! one pass of a crawler over URLs nobody asks for again (a scan) push the
//! whole hot set out of the zone, one file write per miss. With
//! [`Admission::Frequent`] (the default), once the zone holds 90% of its
//! limit a key it does not hold is written only when its misses were
//! counted at least twice lately ([`FrequencySketch`](crate::sketch::FrequencySketch):
//! TinyLFU's estimate, halved every window of misses): a one-hit wonder is
//! served and not stored, a URL asked for again is stored on its second miss.
//! NGINX's `proxy_cache_min_uses 2`, but only while the zone is full (an
//! empty or roomy zone stores every first answer, as before) and counted in
//! fixed memory.
//!
//! Misses are counted where the index finds no entry (never on a hit); a
//! request that leads a fill looks twice ([`MIN_MISSES`]). A fill's
//! followers miss before they join its flight, so a key asked for by two
//! requests at once is counted enough before the leader's write asks: a
//! refusal never leaves followers to fetch alone. A key the zone holds
//! (a refresh, a revalidation) is always written.
//!
//! Owns the decision and its counts; the zone's size and index are
//! `mod.rs`'s, and what a refusal does to the answer is the caller's
//! ([`CacheError::NotAdmitted`](crate::tier::CacheError::NotAdmitted)).

use std::sync::atomic::Ordering;

use super::DiskTier;
use crate::sketch::FrequencySketch;

/// Which new objects a disk zone writes once it is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Admission {
    /// Every storable answer: the manager's LRU alone decides what stays
    /// (before issue 29).
    All,
    /// Once the zone is 90% full, a key it does not hold is written on its
    /// second request within the sketch's window (or when two ask at once).
    #[default]
    Frequent,
}

impl Admission {
    /// The config spelling (`admission = "..."`).
    pub fn as_str(self) -> &'static str {
        match self {
            Admission::All => "all",
            Admission::Frequent => "frequent",
        }
    }
}

/// Misses counted before a new key may enter a full zone. The proxy looks
/// a key up twice in a request that leads a fill (the lookup, then once
/// more after winning the flight: a fill may have landed in between), once
/// in a request that follows: a request alone counts 2, refused; a second
/// request, or a follower of the first fill, makes 3 or more.
pub(super) const MIN_MISSES: u8 = 3;

/// Bytes of zone per object it could hold, for sizing the sketch: the
/// window of misses is about one zone's worth of 8 KiB objects.
pub(super) const BYTES_PER_OBJECT: u64 = 8 * 1024;
/// Counters per miss of a window: a count-min sketch reads a key seen once
/// as seen twice only when all four of its counters were also bumped by
/// others; with 16 counters per miss that is about 2% of keys (a window
/// as wide as the sketch would admit nine in ten).
const COUNTERS_PER_MISS: u64 = 16;
/// Counters at least (4 KiB of RAM) and at most (4 MiB).
const MIN_WIDTH_BITS: u32 = 12;
const MAX_WIDTH_BITS: u32 = 22;

/// A zone's admission state: nothing for [`Admission::All`], the miss
/// sketch for [`Admission::Frequent`].
pub(super) enum Doorman {
    /// Every answer is written.
    All,
    Frequent(FrequencySketch),
}

impl Doorman {
    /// For a zone of `max_size` bytes: a window of misses of about the
    /// 8 KiB objects it could hold, [`COUNTERS_PER_MISS`] counters per miss
    /// of the window (a power of two, 4 KiB to 4 MiB), halved every window.
    pub(super) fn new(admission: Admission, max_size: u64) -> Self {
        match admission {
            Admission::All => Doorman::All,
            Admission::Frequent => {
                let window = (max_size / BYTES_PER_OBJECT).max(1).next_power_of_two();
                let slots = window.saturating_mul(COUNTERS_PER_MISS);
                let bits = slots.trailing_zeros().clamp(MIN_WIDTH_BITS, MAX_WIDTH_BITS);
                let period = (1u64 << bits) / COUNTERS_PER_MISS;
                Doorman::Frequent(FrequencySketch::new(bits, period))
            }
        }
    }

    /// The index had no entry for `hash`.
    pub(super) fn missed(&self, hash: u64) {
        if let Doorman::Frequent(sketch) = self {
            sketch.record(hash);
        }
    }
}

impl DiskTier {
    /// True when a write of `hash` may go ahead: always for
    /// [`Admission::All`], a key the zone holds, or a zone under 90% of its
    /// limit; else on the key's second counted miss. A refusal is counted.
    pub(super) fn admits(&self, hash: u64) -> bool {
        let Doorman::Frequent(sketch) = &self.doorman else {
            return true;
        };
        let admitted = self.size_bytes() < self.effective_max_size() / 10 * 9
            || sketch.estimate(hash) >= MIN_MISSES
            || self.with_shard(hash, |map| map.contains_key(&hash));
        if !admitted {
            self.stats.not_admitted.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }
}
