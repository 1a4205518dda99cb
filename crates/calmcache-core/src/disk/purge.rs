//! Purges on a disk zone: one key (hard: the file goes; soft: the entry is
//! marked and served expired from then on), every object whose key and
//! tags match a predicate (a scan of the files' headers, on the calling
//! blocking thread, one index shard at a time so hits never wait long), or
//! everything.
//!
//! A soft purge takes effect at once through an in-memory mark (key hash
//! -> index version, time), and is written into the file's header on a
//! blocking thread (`disk_format::mark_soft_purged`) so it survives a
//! restart. A mark goes when its entry leaves the index or is replaced
//! ([`DiskTier::unmark_soft`]): the map never holds more than the index.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use super::{key_hash, lock, DiskTier};
use crate::disk::format as disk_format;
use crate::key::{CacheKey, KeyRef};
use crate::tier::PurgeMode;

impl DiskTier {
    /// Purges `key`; true when it was indexed. Called on an async worker:
    /// a soft purge's header rewrite runs on the blocking pool.
    pub(super) fn purge_one(&self, key: &KeyRef<'_>, mode: PurgeMode) -> bool {
        let hash = key_hash(key);
        if mode == PurgeMode::Hard {
            return self.drop_key(key);
        }
        let Some(version) = self.mark_soft(hash, None) else {
            return false;
        };
        let key = key.to_owned_key();
        // `me` is alive while `&self` is (every tier is opened in an Arc).
        let (Some(tier), Ok(handle)) = (self.me.upgrade(), tokio::runtime::Handle::try_current())
        else {
            self.persist_soft(hash, version, Some(&key.as_ref()));
            return true;
        };
        handle.spawn_blocking(move || tier.persist_soft(hash, version, Some(&key.as_ref())));
        true
    }

    /// Purges every indexed object whose key and tags satisfy `pred`,
    /// reading each file's header. Blocking: run it on a blocking thread.
    /// Returns how many were purged. Objects stored while it runs are not
    /// looked at; files the loader has not indexed yet are not either.
    pub(super) fn purge_scan(
        &self,
        mode: PurgeMode,
        pred: &dyn Fn(&CacheKey, &[String]) -> bool,
    ) -> u64 {
        let mut purged = 0;
        for shard in &self.shards {
            for (hash, version) in indexed(shard) {
                let path = self.file_path(hash);
                let Ok(summary) = disk_format::read_summary(&path) else {
                    continue;
                };
                if !pred(&summary.key, &summary.tags) {
                    continue;
                }
                if self.purge_entry(hash, version, mode, Some(&summary.key.as_ref())) {
                    purged += 1;
                }
            }
        }
        purged
    }

    /// Purges every indexed object without reading any file. Blocking.
    pub(super) fn purge_everything(&self, mode: PurgeMode) -> u64 {
        let mut purged = 0;
        for shard in &self.shards {
            for (hash, version) in indexed(shard) {
                if self.purge_entry(hash, version, mode, None) {
                    purged += 1;
                }
            }
        }
        purged
    }

    /// Purges one entry, on the calling (blocking) thread; `key`, when
    /// known, is checked against the file before its header is rewritten.
    fn purge_entry(
        &self,
        hash: u64,
        version: u32,
        mode: PurgeMode,
        key: Option<&KeyRef<'_>>,
    ) -> bool {
        if mode == PurgeMode::Soft {
            let Some(version) = self.mark_soft(hash, Some(version)) else {
                return false;
            };
            self.persist_soft(hash, version, key);
            return true;
        }
        let forgotten = self.forget(hash, Some(version), false);
        if forgotten {
            // Blocking, like the caller.
            let _ = std::fs::remove_file(self.file_path(hash));
        }
        forgotten
    }

    /// Marks the entry `hash` (only version `version`, if given)
    /// soft-purged now; the version marked, if there was such an entry.
    fn mark_soft(&self, hash: u64, version: Option<u32>) -> Option<u32> {
        // Under the shard lock, so an eviction cannot slip between the
        // check and the mark and leave a mark without an entry (lock
        // order: shard, then marks; nothing takes them the other way).
        self.with_shard(hash, |map| {
            let current = map.get(&hash).map(|e| e.version);
            let current = current.filter(|v| version.is_none_or(|w| w == *v))?;
            let mut soft = self.soft.lock().unwrap_or_else(|p| p.into_inner());
            soft.insert(hash, (current, tokio::time::Instant::now()));
            self.soft_len.store(soft.len(), Ordering::Relaxed);
            Some(current)
        })
    }

    /// Writes the soft purge of entry `hash` at `version` into its file's
    /// header, unless a newer copy replaced it meanwhile. Blocking. A
    /// failure only costs the mark's persistence: counted and logged.
    fn persist_soft(&self, hash: u64, version: u32, key: Option<&KeyRef<'_>>) {
        let now = SystemTime::now();
        if self.with_shard(hash, |map| map.get(&hash).map(|e| e.version)) != Some(version) {
            return;
        }
        let path = self.file_path(hash);
        match disk_format::mark_soft_purged(&path, key, now) {
            Ok(_) => {}
            // Gone meanwhile: nothing left to mark.
            Err(disk_format::FormatError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(disk_format::FormatError::Io(e)) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(zone = %self.config.path.display(), error = %e, "soft purge not written to the file; it lasts until a restart");
            }
            // A broken file: the next read finds it so and removes it.
            Err(e) => {
                tracing::debug!(zone = %self.config.path.display(), error = %e, "soft purge of a broken file")
            }
        }
    }

    /// Drops the soft mark of `hash` unless it is for version `current`
    /// (its entry left the index, `None`, or was replaced by `current`).
    /// One relaxed load while nothing is marked.
    pub(super) fn unmark_soft(&self, hash: u64, current: Option<u32>) {
        if self.soft_len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut soft = self.soft.lock().unwrap_or_else(|p| p.into_inner());
        if soft.get(&hash).is_some_and(|(v, _)| Some(*v) != current) {
            soft.remove(&hash);
            self.soft_len.store(soft.len(), Ordering::Relaxed);
        }
    }

    /// Soft marks held in memory (bounded by the index).
    pub fn soft_marks(&self) -> usize {
        self.soft_len.load(Ordering::Relaxed)
    }

    /// When the entry `hash` at `version` was soft-purged, if it was. A hit
    /// pays one relaxed load while nothing is soft-purged.
    pub(super) fn soft_purged_at(&self, hash: u64, version: u32) -> Option<tokio::time::Instant> {
        if self.soft_len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut soft = self.soft.lock().unwrap_or_else(|p| p.into_inner());
        let (v, at) = *soft.get(&hash)?;
        if v == version {
            return Some(at);
        }
        // A newer copy was stored since: the mark is spent.
        soft.remove(&hash);
        self.soft_len.store(soft.len(), Ordering::Relaxed);
        None
    }
}

/// The keys (hash, version) a shard indexes now: taken under its lock,
/// then purged one by one without it (purging reads and removes files).
fn indexed(shard: &std::sync::Mutex<super::Shard>) -> Vec<(u64, u32)> {
    lock(shard)
        .map
        .iter()
        .map(|(h, e)| (*h, e.version))
        .collect()
}
