//! The manager of a disk zone: once a second (and at once when a write
//! finds no space) it removes objects unused for `inactive`, then the
//! least recently used ones while the zone is over its limit or the file
//! system under `min_free`.
//!
//! The limit is `max_size`, or less once a write found the file system full
//! (ENOSPC, EDQUOT) before the zone reached it: from then on every pass
//! looks at what the file system holds for the zone (its own bytes plus
//! the free space; its own files plus the free inodes, for a file system
//! out of inodes) and keeps a headroom of it free for writes in progress,
//! 5% at first, 5% more (up to 50%) for each pass that finds new failed
//! writes, 5% less after a quiet minute. Those evictions are counted apart
//! (`evictions_nospace`). When the file system has room for `max_size` (and
//! 5% more) again, `max_size` alone bounds the zone.
//!
//! Blocking: a pass runs on the blocking pool, removals inline; each shard
//! lock is held only to copy out that shard's entries.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{lock, DiskTier, NO_FS_BOUND};

/// How often the manager of a started tier ([`Tier::start`](crate::tier::Tier::start))
/// looks at its size and inactivity.
pub const MANAGE_EVERY: Duration = Duration::from_secs(1);

/// Least share of a full file system's capacity kept free (percent).
pub(super) const HEADROOM_MIN_PCT: u64 = 5;
/// Most share kept free, however many writes are in progress at once.
const HEADROOM_MAX_PCT: u64 = 50;
/// Manager passes without a failed write before the headroom shrinks.
const HEADROOM_QUIET_PASSES: u64 = 60;

impl DiskTier {
    /// One pass of the manager: removes objects unused for `inactive`, then
    /// the least recently used ones until the zone is under its limit
    /// ([`DiskTier::effective_max_size`]) and the file system has `min_free`
    /// available. Blocking (file removals run right here, the manager's own
    /// blocking thread); each shard lock is held only to copy out that
    /// shard's entries.
    pub fn manage(&self) {
        self.expire_inactive();
        self.observe_capacity();
        let low_space = || {
            self.config.min_free > 0
                && fs_space(&self.config.path).is_some_and(|fs| fs.bytes < self.config.min_free)
        };
        let mut short = low_space();
        let limit = self.effective_max_size();
        let max_objects = self.effective_max_objects();
        if self.size_bytes() <= limit && self.objects() <= max_objects && !short {
            return;
        }
        let mut all: Vec<(u64, u64, u32)> = Vec::with_capacity(self.objects() as usize);
        for shard in &self.shards {
            let shard = lock(shard);
            let used = |e| shard.used_ms(e);
            all.extend(
                shard
                    .map
                    .iter()
                    .map(|(&hash, e)| (used(e), hash, e.version)),
            );
        }
        all.sort_unstable();
        // Evict to 95% of the limits at once so the next pass is not right
        // behind: bounded overfill, few passes. Free space is looked at again
        // every 64 removals, not per object.
        let target = limit / 20 * 19;
        let objects_target = if max_objects == u64::MAX {
            u64::MAX
        } else {
            max_objects - max_objects / 20
        };
        let max_size_target = self.config.max_size / 20 * 19;
        for (n, (_, hash, version)) in all.into_iter().enumerate() {
            if n % 64 == 63 {
                short = low_space();
            }
            let size = self.size_bytes();
            if size <= target && self.objects() <= objects_target && !short {
                break;
            }
            if self.forget(hash, Some(version), false) {
                let _ = std::fs::remove_file(self.file_path(hash));
                // Counted apart when only the file system's bound asked for it.
                let counter = if size > max_size_target || short {
                    &self.stats.evictions
                } else {
                    &self.stats.evictions_nospace
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Removes objects unused for `inactive`; moves each shard's clock
    /// epoch forward when it is due (shard.rs).
    fn expire_inactive(&self) {
        let now = self.elapsed_ms();
        let inactive = self.config.inactive.max(Duration::from_secs(1)).as_millis();
        let inactive = u64::try_from(inactive).unwrap_or(u64::MAX);
        let mut stale: Vec<(u64, u32)> = Vec::new();
        for shard in &self.shards {
            stale.clear();
            {
                let mut shard = lock(shard);
                shard.keep_clock(now);
                let idle = |e| now.saturating_sub(shard.used_ms(e));
                stale.extend(
                    shard
                        .map
                        .iter()
                        .filter(|(_, e)| idle(e) >= inactive)
                        .map(|(&hash, e)| (hash, e.version)),
                );
            }
            for &(hash, version) in &stale {
                if self.forget(hash, Some(version), false) {
                    let _ = std::fs::remove_file(self.file_path(hash));
                    self.stats.expired_inactive.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Once a write found the file system full: what it holds for the zone
    /// now, in bytes (own bytes + free space) and in files (own files + free
    /// inodes), so the bounds follow space others free or take. The byte
    /// bound ends once there is room for `max_size` and 5% more, the file
    /// bound once half the inodes the zone could use are free (or the file
    /// system has no fixed number of them).
    fn observe_capacity(&self) {
        let bytes_bound = self.fs_capacity.load(Ordering::Relaxed) != NO_FS_BOUND;
        let files_bound = self.fs_file_capacity.load(Ordering::Relaxed) != NO_FS_BOUND;
        if !bytes_bound && !files_bound {
            return;
        }
        let Some(fs) = fs_space(&self.config.path) else {
            return;
        };
        if bytes_bound {
            let capacity = self.size_bytes().saturating_add(fs.bytes);
            let room = self
                .config
                .max_size
                .saturating_add(self.config.max_size / 20);
            if capacity >= room {
                self.fs_capacity.store(NO_FS_BOUND, Ordering::Relaxed);
                tracing::info!(zone = %self.config.path.display(), "disk zone's file system has room for max_size again");
            } else {
                self.fs_capacity.store(capacity, Ordering::Relaxed);
            }
        }
        if files_bound {
            let capacity = self.objects().saturating_add(fs.files);
            if fs.files_total == 0 || fs.files >= capacity / 2 {
                self.fs_file_capacity.store(NO_FS_BOUND, Ordering::Relaxed);
            } else {
                self.fs_file_capacity.store(capacity, Ordering::Relaxed);
            }
        }
        self.adjust_headroom();
    }

    /// Writes still failing: more room for writes in progress (many at
    /// once, or large); a quiet minute: a little less; no bound: back to
    /// the least.
    fn adjust_headroom(&self) {
        if self.fs_capacity().is_none() && self.fs_file_capacity().is_none() {
            self.fs_headroom_pct
                .store(HEADROOM_MIN_PCT, Ordering::Relaxed);
            return;
        }
        let failures = self.stats.write_failures_nospace.load(Ordering::Relaxed);
        let (seen, quiet) = &self.fs_failures_seen;
        let pct = self.fs_headroom_pct.load(Ordering::Relaxed);
        if seen.swap(failures, Ordering::Relaxed) != failures {
            quiet.store(0, Ordering::Relaxed);
            let raised = (pct + HEADROOM_MIN_PCT).min(HEADROOM_MAX_PCT);
            self.fs_headroom_pct.store(raised, Ordering::Relaxed);
        } else if quiet.fetch_add(1, Ordering::Relaxed) + 1 >= HEADROOM_QUIET_PASSES {
            quiet.store(0, Ordering::Relaxed);
            let lowered = pct.saturating_sub(HEADROOM_MIN_PCT).max(HEADROOM_MIN_PCT);
            self.fs_headroom_pct.store(lowered, Ordering::Relaxed);
        }
    }

    /// Runs [`DiskTier::manage`] every `every` on a blocking thread (at once
    /// when a write finds the file system full) until the tier is dropped by
    /// everyone else.
    pub fn spawn_manager(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        let wake = self.wake.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = wake.notified() => {}
                }
                let Some(tier) = weak.upgrade() else {
                    return;
                };
                let _ = tokio::task::spawn_blocking(move || tier.manage()).await;
            }
        });
    }
}

/// True for a write that failed for lack of space: ENOSPC, or EDQUOT (a
/// quota counts as the file system being full for this zone).
pub fn is_no_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || e.raw_os_error() == Some(rustix::io::Errno::DQUOT.raw_os_error())
}

/// What a file system has free for unprivileged users.
struct FsSpace {
    /// Free bytes.
    bytes: u64,
    /// Free inodes.
    files: u64,
    /// Inodes in all; 0 where there is no fixed number (btrfs).
    files_total: u64,
}

/// [`FsSpace`] of the file system holding `path`.
fn fs_space(path: &Path) -> Option<FsSpace> {
    let stat = rustix::fs::statvfs(path).ok()?;
    Some(FsSpace {
        bytes: stat.f_bavail.saturating_mul(stat.f_frsize),
        files: stat.f_favail,
        files_total: stat.f_files,
    })
}
