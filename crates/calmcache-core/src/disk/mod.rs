//! The disk tier: one file per object under a zone directory, an index of
//! them in memory, reads and writes on Tokio's blocking thread pool (never on
//! the async workers, but for copies the page cache answers without waiting:
//! `page_cache.rs`), a loader that rebuilds the index at start while the
//! proxy already serves, and a manager that keeps the zone under `max_size`,
//! `min_free` and `inactive`.
//!
//! ```text
//! <path>/<h[0..2]>/<h>      h = 16 hex digits of a stable 64-bit key hash
//! <path>/<h[0..2]>/.tmp-<token>-<n>   writes in progress; token: random per start
//! <path>/.calmcache-zone                marker; flock'd by the process using the zone
//! ```
//! One level of 256 directories: a directory is created at most once per
//! zone, where two levels (65,536 directories, NGINX's `levels=2:2`) cost a
//! `mkdir` for most of the first objects written (a fifth of the write
//! path's time in `bench/cachefill`). A file found under the two-level
//! layout of earlier versions is moved by the loader.
//! A file is written to a temp name in its final directory and renamed into
//! place when complete, so a reader sees a whole object or none. The file
//! carries its key, metadata, lengths and checksums (`format.rs`): a
//! torn, corrupt or foreign file is removed, never served. Faults (ENOSPC,
//! EIO, a read-only or deleted directory) never fail a request: the object
//! is not stored (or is treated as a miss), the fault is counted and logged,
//! and the zone works again once the fault clears (directories are
//! re-created on write).
//!
//! The folder: `load.rs` (the loader), `manage.rs` (the manager),
//! `shard.rs` (an index shard), `format.rs` (the file of one object),
//! `writer.rs` (a file written as its body arrives: the disk's
//! [`BodyWrite`](crate::tier::BodyWrite)), `purge.rs`, and `tier_impl.rs`
//! (the [`Tier`](crate::tier::Tier) face). It imports the trait, keys and
//! objects; `tier.rs` never imports it back.
//!
//! A file system that fills before `max_size` (ENOSPC, EDQUOT) is the
//! manager's business (`manage.rs`): the zone is then bounded by what
//! the file system holds for it, less a headroom for writes in progress.
//! Temp files not
//! named after this start's token are crash leftovers: the loader removes
//! them (one process per directory: `zone_lock.rs`). Warnings that can
//! repeat per request are rate-limited (`warn_limit.rs`); counters keep
//! the exact numbers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use crate::disk::format::{self as disk_format, FormatError};
use crate::disk::writer::DiskWrite;
pub use crate::key::{key_hash, mix64};
use crate::key::{CacheKey, KeyRef};
use crate::object::CachedObject;
use crate::page_cache;
use crate::warn_limit::WarnLimit;
use crate::warn_limited;
use crate::zone_lock::ZoneLock;

mod admission;
pub mod format;
mod load;
mod manage;
mod purge;
mod shard;
mod tier_impl;
pub mod writer;
use crate::tier::CacheError;
pub use admission::Admission;
use admission::Doorman;
use manage::HEADROOM_MIN_PCT;
pub use manage::{is_no_space, MANAGE_EVERY};
use shard::Shard;
pub use tier_impl::DiskSnapshot;

const SHARDS: usize = 64;

/// The file that marks a directory as a calmcache zone.
pub const ZONE_MARKER: &str = ".calmcache-zone";

/// Files at the top of a zone directory whose names start with this belong
/// to calmcache, not to the index (the marker, the fleet's purge stream
/// position): the loader leaves them alone.
pub const RESERVED_PREFIX: &str = ".calmcache-";

/// Bodies above this are not read into memory on a hit: they are streamed
/// from the file in chunks (`CachedObject::lazy_body`).
pub const INLINE_LIMIT: u64 = 1 << 20;

/// What a disk zone is configured with.
#[derive(Clone, Debug)]
pub struct DiskConfig {
    /// The zone directory (created if missing).
    pub path: PathBuf,
    /// Bytes of files the zone may hold.
    pub max_size: u64,
    /// Largest object file.
    pub max_object_size: u64,
    /// Objects unused this long are removed.
    pub inactive: Duration,
    /// Free bytes the zone leaves on its file system.
    pub min_free: u64,
    /// Which new objects a full zone writes (admission.rs).
    pub admission: Admission,
}

/// One object in the index: 16 bytes of payload per object.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// File length in bytes, and [`VERIFIED`] once this process knows the
    /// file's body checksum is right.
    size_bits: u64,
    /// Last use, in milliseconds from its shard's epoch (shard.rs).
    last_use: u32,
    /// Bumped on each rewrite so a late eviction of an old version cannot
    /// remove the new file's entry.
    version: u32,
}

/// The top bit of [`Entry::size_bits`]: set when the file was written by
/// this process or its body checksum has been verified since it was loaded.
/// Later reads check magic, header checksum, key and exact length, but not
/// the body checksum again: a torn or replaced file changes its length or
/// its index version, and the copy checked is the one still on disk.
const VERIFIED: u64 = 1 << 63;

impl Entry {
    fn size(&self) -> u64 {
        self.size_bits & !VERIFIED
    }

    fn verified(&self) -> bool {
        self.size_bits & VERIFIED != 0
    }
}

/// What [`DiskTier::start_read`] found.
enum Read {
    /// Answered without waiting: a miss, or a file the page cache held.
    Done(Option<Arc<CachedObject>>),
    /// The file of entry `hash` at `version` must be read on the blocking pool.
    Blocking {
        hash: u64,
        version: u32,
        path: PathBuf,
    },
}

/// Counters of a disk zone, for `/status`.
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Objects removed to stay under `max_size` / `min_free`.
    pub evictions: AtomicU64,
    /// Objects removed because the file system filled before `max_size`.
    pub evictions_nospace: AtomicU64,
    /// Writes that failed for lack of space (ENOSPC, EDQUOT); also in `errors`.
    pub write_failures_nospace: AtomicU64,
    /// Temp files of earlier starts (crash leftovers) the loader removed.
    pub leftover_temp_files: AtomicU64,
    /// Bytes those leftovers held.
    pub leftover_temp_bytes: AtomicU64,
    /// Objects removed after `inactive`.
    pub expired_inactive: AtomicU64,
    /// New objects a full zone did not write: first misses of their keys
    /// (`admission = "frequent"`).
    pub not_admitted: AtomicU64,
    /// I/O errors (reads, writes, removals, the loader).
    pub errors: AtomicU64,
    /// Files found broken (torn, corrupt, foreign) and removed.
    pub broken_files: AtomicU64,
    /// Files the loader has indexed so far.
    pub loaded: AtomicU64,
    /// True once the loader has scanned the whole directory.
    pub loader_done: AtomicBool,
    /// The URIs of the objects the loader indexed that are stored under a
    /// body key ([`crate::key::is_body_key`]).
    pub body_uris_loaded: crate::body_uris::BodyUris,
}

/// A zone whose objects live in files.
pub struct DiskTier {
    /// This tier, for work that outlives a call through `&self` (a soft
    /// purge written on the blocking pool, a file write, the loader).
    me: Weak<DiskTier>,
    /// Set once [`Tier::start`] ran: the loader and manager run once.
    started: AtomicBool,
    config: DiskConfig,
    shards: Vec<Mutex<Shard>>,
    bytes: AtomicU64,
    objects: AtomicU64,
    versions: AtomicU64,
    opened: std::time::Instant,
    stats: DiskStats,
    /// Milliseconds since `opened` before which the zone counts as failed.
    failed_until_ms: AtomicU64,
    /// Soft-purged entries: key hash -> (index version, when purged).
    soft: Mutex<HashMap<u64, (u32, tokio::time::Instant)>>,
    /// Entries in `soft` (a hit checks this, not the map, when it is 0).
    soft_len: std::sync::atomic::AtomicUsize,
    /// The hosts in the keys of the files the loader indexed (bounded): a
    /// purge by path must reach objects stored before this start.
    loaded_hosts: Mutex<crate::tier::HostsFound>,
    /// Bytes of files the file system holds for this zone, as last seen
    /// (own bytes + free space) once a write found it full; `u64::MAX`
    /// while it never did or has room for `max_size` again.
    fs_capacity: AtomicU64,
    /// The same in files (inodes: own files + free inodes), once a write
    /// found none left on a file system with a fixed number of them.
    fs_file_capacity: AtomicU64,
    /// Percent of `fs_capacity` kept free for writes in progress: 5, raised
    /// by 5 (up to 50) for each manager pass that finds new write failures
    /// for lack of space, lowered by 5 after a minute without any.
    fs_headroom_pct: AtomicU64,
    /// What this zone's file system refused of the nowait reads.
    page_cache: page_cache::Support,
    /// `write_failures_nospace` as the manager last saw it, and passes since
    /// it last changed.
    fs_failures_seen: (AtomicU64, AtomicU64),
    /// Wakes the manager at once when a write finds the file system full,
    /// or takes the zone past its limit.
    /// (Its own `Arc`: the waiting manager must not keep the tier alive.)
    wake: Arc<tokio::sync::Notify>,
    /// Which misses a full zone writes, and what it counts to decide.
    doorman: Doorman,
    /// Repeated warnings, one limit per kind.
    warn: Warnings,
    /// Held while the zone is open: no other process uses the directory.
    _lock: Arc<ZoneLock>,
}

/// One [`WarnLimit`] per kind of repeated warning of a zone.
#[derive(Debug, Default)]
struct Warnings {
    write: WarnLimit,
    nospace: WarnLimit,
    read: WarnLimit,
    broken: WarnLimit,
    scan: WarnLimit,
}

/// A zone directory others can enter (made by an earlier version, or by
/// hand with the usual umask) is narrowed to 0700: the stored answers are
/// the service's alone (private_fs.rs). Said once, at open; a directory
/// calmcache may not change (another owner) is refused, not left open.
fn tighten_zone_dir(dir: &Path) -> std::io::Result<()> {
    let was = crate::private_fs::tighten_dir(dir).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "{}: cannot make the zone directory private (mode 0700): {e}",
                dir.display()
            ),
        )
    })?;
    if let Some(mode) = was {
        tracing::warn!(
            dir = %dir.display(),
            "the zone directory was mode {mode:04o} (others could read cached answers): \
             narrowed to 0700"
        );
    }
    Ok(())
}

/// `fs_capacity` when the file system is not what bounds the zone.
const NO_FS_BOUND: u64 = u64::MAX;

/// How long a zone stays out of a route's hash ring after an I/O error.
pub const FAULT_COOLDOWN: Duration = Duration::from_secs(10);

impl DiskTier {
    /// Opens a zone: creates the directory and checks that a file can be
    /// written in it, so a bad path fails at start, not at the first request.
    pub fn open(config: DiskConfig) -> std::io::Result<Arc<DiskTier>> {
        crate::private_fs::create_dir_all(&config.path)?;
        tighten_zone_dir(&config.path)?;
        // The loader removes files it cannot read as cache objects: it must
        // never run in a directory holding anything else (a typo such as
        // path = "/var/lib"). A zone directory carries a marker file; an
        // existing, non-empty directory without one is refused.
        let marker = config.path.join(ZONE_MARKER);
        if !marker.exists() {
            if std::fs::read_dir(&config.path)?.next().is_some() {
                return Err(std::io::Error::other(format!(
                    "{} is not empty and is not a calmcache zone (no {ZONE_MARKER} file); \
                     give the zone a directory of its own",
                    config.path.display()
                )));
            }
            crate::private_fs::write(&marker, b"calmcache disk zone\n")?;
        }
        let lock = ZoneLock::acquire(&config.path, &marker)?;
        // This start's temp name: the loader leaves it alone.
        let probe = config.path.join(format!(
            "{}{}-probe",
            disk_format::TEMP_PREFIX,
            disk_format::start_token()
        ));
        // Empty: it checks that the directory takes new files. A zone whose
        // file system a previous run filled still opens (no space is not
        // a fault: the manager makes room at the first write that finds none).
        match crate::private_fs::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe)
        {
            Ok(_) => std::fs::remove_file(&probe)?,
            Err(e) if is_no_space(&e) => {}
            Err(e) => return Err(e),
        }
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        let doorman = Doorman::new(config.admission, config.max_size);
        Ok(Arc::new_cyclic(|me| DiskTier {
            me: me.clone(),
            started: AtomicBool::new(false),
            config,
            shards,
            bytes: AtomicU64::new(0),
            objects: AtomicU64::new(0),
            versions: AtomicU64::new(0),
            opened: std::time::Instant::now(),
            stats: DiskStats::default(),
            failed_until_ms: AtomicU64::new(0),
            soft: Mutex::new(HashMap::new()),
            soft_len: std::sync::atomic::AtomicUsize::new(0),
            loaded_hosts: Mutex::new(crate::tier::HostsFound::default()),
            fs_capacity: AtomicU64::new(NO_FS_BOUND),
            fs_file_capacity: AtomicU64::new(NO_FS_BOUND),
            fs_headroom_pct: AtomicU64::new(HEADROOM_MIN_PCT),
            page_cache: page_cache::Support::default(),
            fs_failures_seen: (AtomicU64::new(0), AtomicU64::new(0)),
            wake: Arc::new(tokio::sync::Notify::new()),
            doorman,
            warn: Warnings::default(),
            _lock: lock,
        }))
    }

    /// The zone's configuration.
    pub fn config(&self) -> &DiskConfig {
        &self.config
    }

    /// The hosts of the objects the loader found (see
    /// [`Tier::hosts_found`](crate::tier::Tier::hosts_found)).
    pub fn loaded_hosts(&self) -> crate::tier::HostsFound {
        self.loaded_hosts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The zone's counters.
    pub fn stats(&self) -> &DiskStats {
        &self.stats
    }

    /// Bytes of object files indexed.
    pub fn size_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Objects indexed.
    pub fn objects(&self) -> u64 {
        self.objects.load(Ordering::Relaxed)
    }

    /// The size the manager keeps the zone under: `max_size`, or less while
    /// the file system holds less than that for the zone (what it was last
    /// seen to hold, less a headroom for writes in progress: 5% of it, more
    /// while writes still fail).
    pub fn effective_max_size(&self) -> u64 {
        let capacity = self.fs_capacity.load(Ordering::Relaxed);
        if capacity == NO_FS_BOUND {
            return self.config.max_size;
        }
        self.config.max_size.min(self.less_headroom(capacity))
    }

    /// Bytes the file system holds for this zone (own files + free space),
    /// as last seen after it ran out of space; `None` while `max_size` fits.
    pub fn fs_capacity(&self) -> Option<u64> {
        let capacity = self.fs_capacity.load(Ordering::Relaxed);
        (capacity != NO_FS_BOUND).then_some(capacity)
    }

    /// Files (inodes) the file system holds for this zone (own files + free
    /// inodes), as last seen after it ran out of them; `None` while it has
    /// plenty (or no fixed number of inodes).
    pub fn fs_file_capacity(&self) -> Option<u64> {
        let capacity = self.fs_file_capacity.load(Ordering::Relaxed);
        (capacity != NO_FS_BOUND).then_some(capacity)
    }

    /// The number of objects the manager keeps the zone under: unbounded,
    /// but on a file system that ran out of inodes, what it holds for the
    /// zone less the same headroom as for bytes.
    pub fn effective_max_objects(&self) -> u64 {
        let capacity = self.fs_file_capacity.load(Ordering::Relaxed);
        if capacity == NO_FS_BOUND {
            return u64::MAX;
        }
        self.less_headroom(capacity)
    }

    /// `capacity` less the headroom kept for writes in progress (exact for
    /// small numbers: 40 files less 10% is 36, not 0).
    fn less_headroom(&self, capacity: u64) -> u64 {
        let headroom = self.fs_headroom_pct.load(Ordering::Relaxed).min(100);
        let kept = u128::from(capacity) * u128::from(100 - headroom) / 100;
        u64::try_from(kept).unwrap_or(u64::MAX)
    }

    /// False for [`FAULT_COOLDOWN`] after an I/O error: routes placing keys
    /// over several zones then leave this one out, and try it again after.
    pub fn healthy(&self) -> bool {
        self.elapsed_ms() >= self.failed_until_ms.load(Ordering::Relaxed)
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn fault(&self) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let until = self
            .elapsed_ms()
            .saturating_add(FAULT_COOLDOWN.as_millis() as u64);
        self.failed_until_ms.store(until, Ordering::Relaxed);
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        &self.shards[(hash as usize) % SHARDS]
    }

    /// `f` on the entries of `hash`'s shard, under its lock.
    fn with_shard<R>(&self, hash: u64, f: impl FnOnce(&mut HashMap<u64, Entry>) -> R) -> R {
        f(&mut lock(self.shard(hash)).map)
    }

    /// `f` on `hash`'s shard and the shard's tick for now (a use's
    /// `last_use`), under its lock.
    fn with_shard_now<R>(&self, hash: u64, f: impl FnOnce(&mut Shard, u32) -> R) -> R {
        let now_ms = self.elapsed_ms();
        let mut shard = lock(self.shard(hash));
        let now = shard.tick(now_ms);
        f(&mut shard, now)
    }

    /// The file of the object with key hash `hash`.
    pub fn file_path(&self, hash: u64) -> PathBuf {
        let hex = format!("{:02x}/{hash:016x}", hash >> 56);
        self.config.path.join(hex)
    }

    /// True when the index holds `key` (no I/O).
    pub fn contains(&self, key: &KeyRef<'_>) -> bool {
        let hash = key_hash(key);
        self.with_shard(hash, |map| map.contains_key(&hash))
    }

    /// Looks `key` up in the index and, for a small file the page cache
    /// holds, reads it at once; otherwise says what the blocking pool must
    /// read. A missing, broken or foreign file is a miss (and is removed
    /// from the index).
    fn start_read(&self, key: &KeyRef<'_>) -> Read {
        let hash = key_hash(key);
        let found = self.with_shard_now(hash, |shard, now| {
            shard.map.get_mut(&hash).map(|e| {
                e.last_use = now;
                (e.version, e.size(), e.verified())
            })
        });
        let Some((version, size, verified)) = found else {
            // A miss: counted for admission (never on a hit).
            self.doorman.missed(hash);
            return Read::Done(None);
        };
        let path = self.file_path(hash);
        // Fast path: the file and its path are in memory, so the kernel
        // answers without waiting for the device (page_cache.rs) and the
        // hit costs no thread hop. Otherwise the blocking pool reads it.
        if size <= INLINE_LIMIT {
            if let Some(data) = page_cache::read_whole(&self.page_cache, &path, size) {
                let parsed = disk_format::parse_object(data, Some(key), !verified);
                return Read::Done(self.read_done(hash, version, parsed.map(|(_, object)| object)));
            }
        }
        Read::Blocking {
            hash,
            version,
            path,
        }
    }

    /// Reads the file of `key` (entry `hash` at `version`) on a blocking thread.
    async fn read_blocking(
        &self,
        key: CacheKey,
        hash: u64,
        version: u32,
        path: PathBuf,
    ) -> Option<Arc<CachedObject>> {
        let read = tokio::task::spawn_blocking(move || {
            disk_format::open_object(&path, Some(&key.as_ref()), INLINE_LIMIT)
                .map(|(_, object)| object)
        })
        .await;
        match read {
            Ok(result) => self.read_done(hash, version, result),
            Err(join) => {
                warn_limited!(self.warn.read, "disk read task failed", error = %join);
                None
            }
        }
    }

    fn read_done(
        &self,
        hash: u64,
        version: u32,
        result: Result<CachedObject, FormatError>,
    ) -> Option<Arc<CachedObject>> {
        match result {
            Ok(object) => {
                if object.lazy_body().is_none() {
                    self.mark_verified(hash, version);
                }
                match self.soft_purged_at(hash, version) {
                    Some(at) => Some(Arc::new(object.soft_purged(at))),
                    None => Some(Arc::new(object)),
                }
            }
            Err(FormatError::KeyMismatch) => None,
            Err(e) => {
                self.note_read_error(&e);
                self.forget(hash, Some(version), true);
                None
            }
        }
    }

    fn note_read_error(&self, e: &FormatError) {
        match e {
            FormatError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {}
            FormatError::Io(io) => {
                self.fault();
                warn_limited!(self.warn.read, "disk read failed; served from the origin",
                    zone = %self.config.path.display(), error = %io);
            }
            other => {
                self.stats.broken_files.fetch_add(1, Ordering::Relaxed);
                warn_limited!(self.warn.broken, "broken cache file removed",
                    zone = %self.config.path.display(), error = ?other);
            }
        }
    }

    /// Writes `object` under `key` on a blocking thread and indexes it.
    async fn write(&self, key: CacheKey, object: Arc<CachedObject>) -> Result<(), CacheError> {
        let weight = object.weight() as u64;
        if weight > self.config.max_object_size {
            return Err(CacheError::TooLarge {
                size: weight,
                limit: self.config.max_object_size,
            });
        }
        let hash = key_hash(&key.as_ref());
        if !self.admits(hash) {
            return Err(CacheError::NotAdmitted);
        }
        let path = self.file_path(hash);
        let stored_at = SystemTime::now()
            .checked_sub(object.meta.resident(tokio::time::Instant::now()))
            .unwrap_or_else(SystemTime::now);
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let written = tokio::task::spawn_blocking(move || {
            disk_format::write_object(&dir, &path, &key, &object, stored_at)
        })
        .await;
        let size = match written {
            Ok(Ok(size)) => size,
            Ok(Err(e)) => return Err(self.write_failed(e)),
            Err(join) => return Err(CacheError::Io(join.to_string())),
        };
        self.index(hash, size, true);
        Ok(())
    }

    /// Starts writing the object `head` (metadata, status, headers, variant;
    /// no encodings) under `key` while its body arrives: see
    /// [`DiskWrite`]. Fails only for what the file format cannot hold.
    pub fn begin_write(
        self: &Arc<Self>,
        key: CacheKey,
        head: &CachedObject,
    ) -> Result<DiskWrite, CacheError> {
        DiskWrite::new(self.clone(), key, head).map_err(|e| CacheError::Io(e.to_string()))
    }

    /// Like [`begin_write`](DiskTier::begin_write), for a body without a
    /// declared length: `head`'s headers get their `Content-Length` only at
    /// `finish`, so the body is spooled and copied behind the header then.
    pub fn begin_spooled_write(
        self: &Arc<Self>,
        key: CacheKey,
        head: &CachedObject,
    ) -> Result<DiskWrite, CacheError> {
        DiskWrite::spooled(self.clone(), key, head).map_err(|e| CacheError::Io(e.to_string()))
    }

    /// Counts and logs (rate-limited) a failed write; the error for the caller.
    pub(crate) fn write_failed(&self, e: FormatError) -> CacheError {
        // A full file system is the manager's business, not a failed disk:
        // the zone stays in the ring and makes room.
        if matches!(&e, FormatError::Io(io) if is_no_space(io)) {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            self.stats
                .write_failures_nospace
                .fetch_add(1, Ordering::Relaxed);
            self.no_space();
            warn_limited!(self.warn.nospace,
                "disk zone's file system is full; evicting to make room (object not stored)",
                zone = %self.config.path.display(), error = ?e);
        } else {
            self.fault();
            warn_limited!(self.warn.write, "disk write failed; not stored",
                zone = %self.config.path.display(), error = ?e);
        }
        CacheError::Io(e.to_string())
    }

    /// A write found no space: from now on the file system bounds the zone
    /// (until it has room for `max_size` again), starting from what the zone
    /// holds now; the manager refines it and evicts at once.
    fn no_space(&self) {
        // Out of bytes or of inodes: the manager's next look tells which.
        self.fs_capacity
            .fetch_min(self.size_bytes(), Ordering::Relaxed);
        self.fs_file_capacity
            .fetch_min(self.objects(), Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Indexes a file this process just wrote.
    pub(crate) fn indexed(&self, hash: u64, size: u64) {
        self.index(hash, size, true);
    }

    fn mark_verified(&self, hash: u64, version: u32) {
        self.with_shard(hash, |map| {
            if let Some(e) = map.get_mut(&hash).filter(|e| e.version == version) {
                e.size_bits |= VERIFIED;
            }
        });
    }

    /// Indexes the file of `hash`, `size` bytes; `verified` when its body
    /// checksum need not be checked again (written by this process).
    fn index(&self, hash: u64, size: u64, verified: bool) {
        let version = self.versions.fetch_add(1, Ordering::Relaxed) as u32;
        let old = self.with_shard_now(hash, |shard, now| {
            let entry = Entry {
                size_bits: size | if verified { VERIFIED } else { 0 },
                last_use: now,
                version,
            };
            shard.map.insert(hash, entry)
        });
        let bytes = self.bytes.fetch_add(size, Ordering::Relaxed) + size;
        // A write past the limit wakes the manager now, not at its next
        // second: the zone overshoots by what a pass takes, not by a
        // second of misses (the loader's files wait for the pass).
        if verified && bytes > self.effective_max_size() {
            self.wake.notify_one();
        }
        // A new copy: an older one's soft purge is spent.
        self.unmark_soft(hash, Some(version));
        match old {
            Some(old) => {
                self.bytes.fetch_sub(old.size(), Ordering::Relaxed);
            }
            None => {
                self.objects.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Removes `key`; its file is unlinked on a blocking thread, indexed or
    /// not (the loader may not have reached it yet).
    fn drop_key(&self, key: &KeyRef<'_>) -> bool {
        let hash = key_hash(key);
        if self.forget(hash, None, true) {
            return true;
        }
        self.unlink(self.file_path(hash));
        false
    }

    fn unlink(&self, path: PathBuf) {
        let unlink = move || {
            let _ = std::fs::remove_file(path);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(unlink);
            }
            Err(_) => unlink(),
        }
    }

    /// Marks `key` used now (a hit served from a memory front), so the
    /// manager does not take the hottest objects for the coldest.
    pub fn touch(&self, key: &KeyRef<'_>) {
        let hash = key_hash(key);
        self.with_shard_now(hash, |shard, now| {
            if let Some(e) = shard.map.get_mut(&hash) {
                e.last_use = now;
            }
        });
    }

    /// The version of `key`'s index entry: a copy read before a newer store
    /// or a removal has another (or none).
    fn entry_version(&self, key: &KeyRef<'_>) -> Option<u32> {
        let hash = key_hash(key);
        self.with_shard(hash, |map| map.get(&hash).map(|e| e.version))
    }

    /// Drops the entry `hash` (only version `version`, if given) and, with
    /// `unlink`, its file. True when there was an entry.
    fn forget(&self, hash: u64, version: Option<u32>, unlink: bool) -> bool {
        let removed = self.with_shard(hash, |map| match map.get(&hash) {
            Some(e) if version.is_none_or(|v| v == e.version) => map.remove(&hash),
            _ => None,
        });
        let Some(entry) = removed else {
            return false;
        };
        self.bytes.fetch_sub(entry.size(), Ordering::Relaxed);
        self.objects.fetch_sub(1, Ordering::Relaxed);
        self.unmark_soft(hash, None);
        if unlink {
            // The unlink may race a rewrite of the same key; the version check
            // above keeps the index right, and a lost file is only a miss.
            self.unlink(self.file_path(hash));
        }
        true
    }

    /// Bytes of index memory per object, measured from the map's capacity.
    pub fn index_bytes_per_object(&self) -> f64 {
        let mut capacity = 0usize;
        for shard in &self.shards {
            capacity += lock(shard).map.capacity();
        }
        // hashbrown: one control byte per bucket; buckets = capacity * 8 / 7.
        let slot = std::mem::size_of::<(u64, Entry)>() + 1;
        let bytes = capacity * 8 / 7 * slot;
        bytes as f64 / self.objects().max(1) as f64
    }
}

/// The index holds plain data, so a poisoned lock (a panic elsewhere)
/// leaves it usable.
fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "admission_tests.rs"]
mod admission_tests;
