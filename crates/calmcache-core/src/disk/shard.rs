//! One shard of a disk zone's index and the clock of its entries' last
//! use: 32 bits of milliseconds each (the entry stays 16 bytes), counted
//! from an epoch of the shard's own that the manager moves forward before
//! they run out (every ~37 days), under the shard's lock, so a use and a
//! move never see two different epochs. Millisecond ticks let eviction tell
//! a hot object from the cold ones written in the same instant: at 100 ms a
//! fast machine wrote a whole file system's worth of objects within one
//! tick and eviction took hot and cold alike.

use std::collections::HashMap;

use super::Entry;

/// Past this many milliseconds from the epoch, the manager moves it.
const MOVE_AT_MS: u64 = (1 << 32) - (1 << 30);
/// How far back the moved epoch lies: uses older than this (~24.8 days)
/// all read as this old afterwards (still the oldest, in no exact order,
/// and an `inactive` longer than this expires them later, never sooner).
const KEEP_MS: u64 = 1 << 31;

/// One shard of the index: entries by key hash.
#[derive(Default)]
pub(super) struct Shard {
    /// Milliseconds since the tier opened that `Entry::last_use` counts from.
    epoch_ms: u64,
    pub(super) map: HashMap<u64, Entry>,
}

impl Shard {
    /// `now_ms` (milliseconds since the tier opened) as an entry's
    /// `last_use`.
    pub(super) fn tick(&self, now_ms: u64) -> u32 {
        u32::try_from(now_ms.saturating_sub(self.epoch_ms)).unwrap_or(u32::MAX)
    }

    /// When `entry` was last used, in milliseconds since the tier opened.
    pub(super) fn used_ms(&self, entry: &Entry) -> u64 {
        self.epoch_ms + u64::from(entry.last_use)
    }

    /// Moves the epoch forward when `now_ms` nears the end of what 32 bits
    /// count from it; every entry keeps its time of use (or [`KEEP_MS`]
    /// before now, if older).
    pub(super) fn keep_clock(&mut self, now_ms: u64) {
        if now_ms.saturating_sub(self.epoch_ms) < MOVE_AT_MS {
            return;
        }
        let epoch = now_ms - KEEP_MS;
        let shift = epoch - self.epoch_ms;
        for entry in self.map.values_mut() {
            let used = u64::from(entry.last_use).saturating_sub(shift);
            entry.last_use = u32::try_from(used).unwrap_or(u32::MAX);
        }
        self.epoch_ms = epoch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(last_use: u32) -> Entry {
        Entry {
            size_bits: 1,
            last_use,
            version: 0,
        }
    }

    #[test]
    fn ticks_are_milliseconds_and_saturate() {
        let shard = Shard::default();
        assert_eq!(shard.tick(0), 0);
        assert_eq!(shard.tick(1), 1);
        assert_eq!(shard.tick(u64::from(u32::MAX) + 5), u32::MAX);
    }

    #[test]
    fn the_epoch_moves_before_ticks_run_out_and_uses_keep_their_order() {
        let mut shard = Shard::default();
        let day = 86_400_000u64;
        // Used at day 1, day 30 and a millisecond apart at day 36.
        let uses = [day, 30 * day, 36 * day, 36 * day + 1];
        for (i, &ms) in uses.iter().enumerate() {
            let t = shard.tick(ms);
            shard.map.insert(i as u64, entry(t));
        }
        // Not yet: 36 days fit.
        shard.keep_clock(36 * day + 2);
        assert_eq!(shard.epoch_ms, 0);
        // Day 40: past 37 days from the epoch, it moves.
        let now = 40 * day;
        shard.keep_clock(now);
        assert_eq!(shard.epoch_ms, now - KEEP_MS);
        let used = |k: u64| shard.used_ms(&shard.map[&k]);
        // Within the kept window: exact, to the millisecond.
        assert_eq!(used(1), 30 * day);
        assert_eq!(used(2), 36 * day);
        assert_eq!(used(3), 36 * day + 1);
        // Older: as old as the window, still the oldest.
        assert_eq!(used(0), now - KEEP_MS);
        assert!(used(0) < used(1));
        // New uses count from the moved epoch; a year on, still exact.
        let later = 400 * day;
        for _ in 0..20 {
            shard.keep_clock(later);
        }
        let t = shard.tick(later);
        shard.map.insert(9, entry(t));
        assert_eq!(shard.used_ms(&shard.map[&9]), later);
        assert!(shard.tick(later) < u32::MAX);
    }
}
