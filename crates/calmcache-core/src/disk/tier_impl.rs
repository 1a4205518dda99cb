//! The disk tier behind the [`Tier`] trait: a read the page cache answers
//! is ready at once, one that waits for the device is a boxed future on the
//! blocking pool; purges, the loader and manager ([`Tier::start`]), the
//! counters for `/status` ([`Tier::detail`], named as `/status` shows them)
//! and streamed writes into a file ([`Tier::begin_body_write`]).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{DiskTier, Read, MANAGE_EVERY};
use crate::disk::writer::DiskWrite;
use crate::key::{CacheKey, KeyRef};
use crate::object::CachedObject;
use crate::tier::{
    BodyWrite, CacheError, LoadState, PurgeFilter, PurgeMode, Tags, Tier, TierDetail, TierFuture,
};

/// A disk zone's counters at one moment, for `/status` and `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct DiskSnapshot {
    /// The zone directory.
    pub path: PathBuf,
    /// Objects removed to stay under max_size / min_free.
    pub evictions: u64,
    /// Objects removed because the file system filled before max_size.
    pub evictions_nospace: u64,
    /// Writes that failed for lack of space (ENOSPC, EDQUOT); also in `errors`.
    pub write_failures_nospace: u64,
    /// The size the zone is kept under ([`DiskTier::effective_max_size`]).
    pub effective_max_size: u64,
    /// [`DiskTier::fs_capacity`].
    pub fs_capacity: Option<u64>,
    /// [`DiskTier::fs_file_capacity`].
    pub fs_file_capacity: Option<u64>,
    /// Temp files of earlier starts (crash leftovers) removed by the loader.
    pub leftover_temp_files: u64,
    /// Bytes those leftovers held.
    pub leftover_temp_bytes: u64,
    /// Objects removed after `inactive`.
    pub inactive_removed: u64,
    /// New objects a full zone did not write (admission).
    pub not_admitted: u64,
    /// I/O errors (reads, writes, removals, the loader).
    pub errors: u64,
    /// Torn, corrupt or foreign files found and removed.
    pub broken_files: u64,
    /// Files indexed by the loader so far.
    pub loaded: u64,
    /// The loader has scanned the whole directory.
    pub loader_done: bool,
}

impl DiskTier {
    /// The zone's counters now.
    pub fn snapshot(&self) -> DiskSnapshot {
        let s = self.stats();
        let load = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
        DiskSnapshot {
            path: self.config.path.clone(),
            evictions: load(&s.evictions),
            evictions_nospace: load(&s.evictions_nospace),
            write_failures_nospace: load(&s.write_failures_nospace),
            effective_max_size: self.effective_max_size(),
            fs_capacity: self.fs_capacity(),
            fs_file_capacity: self.fs_file_capacity(),
            leftover_temp_files: load(&s.leftover_temp_files),
            leftover_temp_bytes: load(&s.leftover_temp_bytes),
            inactive_removed: load(&s.expired_inactive),
            not_admitted: load(&s.not_admitted),
            errors: load(&s.errors),
            broken_files: load(&s.broken_files),
            loaded: load(&s.loaded),
            loader_done: s.loader_done.load(Ordering::Relaxed),
        }
    }

    /// This tier as an `Arc` (it is always opened in one, so this holds
    /// while `&self` is borrowed).
    fn arc(&self) -> Option<Arc<DiskTier>> {
        self.me.upgrade()
    }
}

impl Tier for DiskTier {
    fn kind(&self) -> &'static str {
        "disk"
    }

    fn get<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, Option<Arc<CachedObject>>> {
        match self.start_read(key) {
            Read::Done(found) => TierFuture::ready(found),
            Read::Blocking {
                hash,
                version,
                path,
            } => TierFuture::boxed(self.read_blocking(key.to_owned_key(), hash, version, path)),
        }
    }

    fn insert(
        &self,
        key: CacheKey,
        object: Arc<CachedObject>,
    ) -> TierFuture<'_, Result<(), CacheError>> {
        TierFuture::boxed(self.write(key, object))
    }

    fn remove<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, bool> {
        TierFuture::ready(self.drop_key(key))
    }

    fn purge_key<'a>(&'a self, key: &'a KeyRef<'_>, mode: PurgeMode) -> TierFuture<'a, bool> {
        TierFuture::ready(self.purge_one(key, mode))
    }

    fn purge_matching<'a>(
        &'a self,
        mode: PurgeMode,
        filter: &'a PurgeFilter<'_>,
    ) -> TierFuture<'a, u64> {
        TierFuture::ready(self.purge_scan(mode, &|key, tags| filter(key, Tags::List(tags))))
    }

    fn purge_all(&self, mode: PurgeMode) -> TierFuture<'_, u64> {
        TierFuture::ready(self.purge_everything(mode))
    }

    fn size_bytes(&self) -> u64 {
        DiskTier::size_bytes(self)
    }

    fn objects(&self) -> u64 {
        DiskTier::objects(self)
    }

    fn max_size(&self) -> u64 {
        self.config.max_size
    }

    fn max_object_size(&self) -> u64 {
        self.config.max_object_size
    }

    fn healthy(&self) -> bool {
        DiskTier::healthy(self)
    }

    fn touch(&self, key: &KeyRef<'_>) {
        DiskTier::touch(self, key);
    }

    fn version(&self, key: &KeyRef<'_>) -> Option<u64> {
        self.entry_version(key).map(u64::from)
    }

    fn start(&self) {
        if self.started.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(tier) = self.arc() {
            tier.spawn_loader();
            tier.spawn_manager(MANAGE_EVERY);
        }
    }

    fn hosts_found(&self) -> crate::tier::HostsFound {
        self.loaded_hosts()
    }

    fn body_uri_found(&self, uri: &KeyRef<'_>) -> bool {
        self.stats().body_uris_loaded.may_have(uri)
    }

    fn load_state(&self) -> LoadState {
        let stats = self.stats();
        if stats.loader_done.load(Ordering::Relaxed) {
            LoadState::Loaded {
                found: stats.loaded.load(Ordering::Relaxed),
            }
        } else {
            LoadState::Loading
        }
    }

    /// The `disk` block of `/status`: figures named and ordered as shown
    /// there.
    fn detail(&self) -> TierDetail {
        let d = self.snapshot();
        TierDetail::new("disk")
            .with("path", d.path.display().to_string())
            .with("evictions", d.evictions)
            .with("evictions_nospace", d.evictions_nospace)
            .with("write_failures_nospace", d.write_failures_nospace)
            .with("effective_max_size_bytes", d.effective_max_size)
            .with("fs_capacity_bytes", d.fs_capacity)
            .with("fs_capacity_files", d.fs_file_capacity)
            .with("leftover_temp_files", d.leftover_temp_files)
            .with("leftover_temp_bytes", d.leftover_temp_bytes)
            .with("inactive_removed", d.inactive_removed)
            .with("not_admitted", d.not_admitted)
            .with("errors", d.errors)
            .with("broken_files", d.broken_files)
            .with("loaded", d.loaded)
            .with("loader_done", d.loader_done)
    }

    /// A body without a declared length is spooled: its header, and so
    /// the body's offset, is known only at the end.
    fn begin_body_write(
        &self,
        key: &CacheKey,
        head: &dyn Fn() -> CachedObject,
        body_len: Option<u64>,
    ) -> Option<Box<dyn BodyWrite>> {
        let tier = self.arc()?;
        // Refused: the caller keeps the body and asks again with `insert`
        // when it is whole (by then followers may have counted misses).
        if !self.admits(crate::key::key_hash(&key.as_ref())) {
            return None;
        }
        let (key, head) = (key.clone(), head());
        let write = match body_len {
            Some(_) => DiskWrite::new(tier, key, &head),
            None => DiskWrite::spooled(tier, key, &head),
        };
        Some(Box::new(write.ok()?))
    }
}
