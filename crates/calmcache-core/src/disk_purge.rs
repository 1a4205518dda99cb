//! Purges on a disk zone: one key (hard: the file goes; soft: the entry is
//! marked and served expired from then on), every object whose key and
//! tags match a predicate (a scan of the files' headers, on the calling
//! blocking thread, one index shard at a time so hits never wait long), or
//! everything.

use std::sync::atomic::Ordering;

use super::{key_hash, lock, DiskTier};
use crate::disk_format;
use crate::key::{CacheKey, KeyRef};

impl DiskTier {
    /// Purges `key`; true when it was indexed.
    pub fn purge_key(&self, key: &KeyRef<'_>, soft: bool) -> bool {
        let hash = key_hash(key);
        if soft {
            self.mark_soft(hash, None)
        } else {
            self.remove(key)
        }
    }

    /// Purges every indexed object whose key and tags satisfy `pred`,
    /// reading each file's header. Blocking: run it on a blocking thread.
    /// Returns how many were purged. Objects stored while it runs are not
    /// looked at; files the loader has not indexed yet are not either.
    pub fn purge_matching(&self, soft: bool, pred: &dyn Fn(&CacheKey, &[String]) -> bool) -> u64 {
        let mut purged = 0;
        for shard in &self.shards {
            let entries: Vec<(u64, u32)> =
                lock(shard).iter().map(|(h, e)| (*h, e.version)).collect();
            for (hash, version) in entries {
                let path = self.file_path(hash);
                let Ok(summary) = disk_format::read_summary(&path) else {
                    continue;
                };
                if !pred(&summary.key, &summary.tags) {
                    continue;
                }
                if self.purge_entry(hash, version, soft) {
                    purged += 1;
                }
            }
        }
        purged
    }

    /// Purges every indexed object without reading any file. Blocking.
    pub fn purge_all(&self, soft: bool) -> u64 {
        let mut purged = 0;
        for shard in &self.shards {
            let entries: Vec<(u64, u32)> =
                lock(shard).iter().map(|(h, e)| (*h, e.version)).collect();
            for (hash, version) in entries {
                if self.purge_entry(hash, version, soft) {
                    purged += 1;
                }
            }
        }
        purged
    }

    fn purge_entry(&self, hash: u64, version: u32, soft: bool) -> bool {
        if soft {
            return self.mark_soft(hash, Some(version));
        }
        let forgotten = self.forget(hash, Some(version), false);
        if forgotten {
            // Blocking, like the caller.
            let _ = std::fs::remove_file(self.file_path(hash));
        }
        forgotten
    }

    /// Marks the entry `hash` (only version `version`, if given) soft-purged now.
    fn mark_soft(&self, hash: u64, version: Option<u32>) -> bool {
        let current = self.with_shard(hash, |map| map.get(&hash).map(|e| e.version));
        let Some(current) = current.filter(|v| version.is_none_or(|w| w == *v)) else {
            return false;
        };
        let mut soft = self.soft.lock().unwrap_or_else(|p| p.into_inner());
        soft.insert(hash, (current, tokio::time::Instant::now()));
        self.soft_len.store(soft.len(), Ordering::Relaxed);
        true
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
