//! Writes one object file of a disk zone while its body is still arriving
//! from the origin, so the file is complete moments after the last byte
//! (NGINX's `use_temp_path=off` behaviour, without NGINX's buffering of the
//! whole response first).
//!
//! The header's length is fixed once the key, status, headers and variant
//! are known (timings and the body length are fixed-width fields), so the
//! body is written straight to its final offset in a temporary file of the
//! zone and the header is written last, with the real timings and length.
//! The file is renamed into place only then: a reader, a restart or the
//! loader never sees a partial object, and a write dropped before
//! [`DiskWrite::finish`] (an aborted origin body, a fault) removes its
//! temporary file.
//!
//! Chunks are batched to [`BATCH`] bytes and each batch is written on the
//! blocking pool, one at a time per object, so a slow origin holds no thread.
//! The file system stays off the fill's critical path: the temporary file is
//! created on the blocking pool as soon as the head is known, while the
//! first bytes are still arriving, and a batch is written while the next one
//! gathers ([`Slot`]): the fill waits for the disk only when a second batch
//! is due before the first is written (at most two batches per object in
//! memory). The last batch, the header and the rename are one blocking call.
//!
//! A body without a declared length gets its `Content-Length` only at the
//! end, which changes the header's length: it is spooled to a temporary file
//! from offset 0 instead, and copied behind the header when it is complete
//! (`copy_file_range`, in the kernel; no user-space buffer), once more disk
//! I/O in exchange for a bounded memory window.
//!
//! What is written can be read back while the body still arrives
//! ([`DiskWrite::written`]: a read-only handle of the temporary file and the
//! body bytes in it), so readers that fall behind the live stream read the
//! file instead of making the fill hold the body in memory; the finished
//! object's body is handed back as a [`LazyBody`] of that same file.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use tokio::task::JoinHandle;

use crate::disk::format::{self as disk_format, FormatError, MAGIC, PREFIX_LEN, VERSION};
use crate::disk::{key_hash, DiskTier};
use crate::key::CacheKey;
use crate::object::{CachedObject, LazyBody};
pub use crate::tier::Written;
use crate::tier::{BodyWrite, CacheError, TierFuture};

/// Bytes gathered before a write goes to the blocking pool.
pub const BATCH: usize = 256 * 1024;

/// The synchronous part: a temporary file filled at the body's offset.
struct FileWriter {
    dir: PathBuf,
    /// `None` for a spooled body (header known only at the end): the body
    /// is written from offset 0 and copied behind the header at `finish`.
    header_len: Option<u32>,
    /// The temporary file, created on the blocking pool as the write
    /// starts (or with the first batch). Written with positioned writes
    /// only, so the same open file is shared with readers of the body while
    /// it is written (it stays readable once renamed or removed), and handed
    /// back as the stored body: no `dup`, no second `open`.
    file: Option<(PathBuf, Arc<File>)>,
    crc: crc32fast::Hasher,
    written: u64,
}

impl FileWriter {
    /// Creates the temporary file (once).
    fn open(&mut self) -> io::Result<&File> {
        if self.file.is_none() {
            let (tmp, file) = disk_format::create_temp(&self.dir)?;
            self.file = Some((tmp, Arc::new(file)));
        }
        match &self.file {
            Some((_, file)) => Ok(file),
            None => Err(io::Error::other("no temporary file")),
        }
    }

    fn write(&mut self, parts: &[Bytes]) -> io::Result<()> {
        let at = self.body_at() + self.written;
        let file = self.open()?;
        write_all_vectored_at(file, parts, at)?;
        for part in parts {
            self.crc.update(part);
            self.written += part.len() as u64;
        }
        Ok(())
    }

    fn body_at(&self) -> u64 {
        self.header_len
            .map_or(0, |len| PREFIX_LEN + u64::from(len) + 4)
    }

    /// Writes the header of `object` (its real timings, the body written so
    /// far), the body CRC, and renames the file to `path`; returns the file's
    /// size and its body, left in the file.
    fn finish(
        mut self,
        path: &Path,
        key: &CacheKey,
        object: &CachedObject,
        stored_at: SystemTime,
    ) -> Result<(u64, LazyBody), FormatError> {
        let header = disk_format::encode_header(key, object, stored_at, self.written)?;
        let Some(header_len) = self.header_len else {
            return self.finish_spooled(path, &header);
        };
        if header.len() != header_len as usize {
            return Err(FormatError::Corrupt("header changed while streaming"));
        }
        self.open()?;
        let Some((tmp, file)) = self.file.take() else {
            return Err(FormatError::Corrupt("no temporary file"));
        };
        let body_at = self.body_at();
        let result = (|| {
            let prefix = file_prefix(&header)?;
            file.write_all_at(&prefix, 0)?;
            let crc = std::mem::take(&mut self.crc).finalize();
            let end = prefix.len() as u64 + self.written;
            file.write_all_at(&crc.to_le_bytes(), end)?;
            disk_format::rename_into(&tmp, path)?;
            Ok((end + 4, crc))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        let (size, crc) = result.map_err(FormatError::Io)?;
        let body = LazyBody {
            file,
            offset: body_at,
            len: self.written,
            crc,
            path: path.to_path_buf(),
        };
        Ok((size, body))
    }

    /// `finish` for a spooled body: a new temporary file gets the prefix
    /// and header, then the spooled body copied in the kernel, then the CRC;
    /// it is renamed to `path` and the spool removed (its readers keep it).
    fn finish_spooled(
        mut self,
        path: &Path,
        header: &[u8],
    ) -> Result<(u64, LazyBody), FormatError> {
        self.open()?;
        let Some((spool, _)) = self.file.take() else {
            return Err(FormatError::Corrupt("no temporary file"));
        };
        let written = self.written;
        let crc = std::mem::take(&mut self.crc).finalize();
        let result = (|| {
            let prefix = file_prefix(header)?;
            let (tmp, mut out) = disk_format::create_temp(&self.dir)?;
            let copied = (|| {
                out.write_all(&prefix)?;
                let mut body = io::Read::take(File::open(&spool)?, written);
                if io::copy(&mut body, &mut out)? != written {
                    return Err(io::Error::other("spooled body shorter than written"));
                }
                out.write_all(&crc.to_le_bytes())?;
                out.flush()?;
                disk_format::rename_into(&tmp, path)
            })();
            if copied.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            copied.map(|()| prefix.len() as u64)
        })();
        let _ = std::fs::remove_file(&spool);
        let body_at = result.map_err(FormatError::Io)?;
        let body = LazyBody {
            file: Arc::new(File::open(path)?),
            offset: body_at,
            len: written,
            crc,
            path: path.to_path_buf(),
        };
        Ok((body_at + written + 4, body))
    }
}

/// Writes `parts` one after the other at `offset`: one `pwritev` per batch
/// (up to 64 parts a call), not one `pwrite` per chunk the origin sent.
fn write_all_vectored_at(file: &File, parts: &[Bytes], mut offset: u64) -> io::Result<()> {
    const MAX_IOVS: usize = 64;
    // The first part not completely written, and how much of it was.
    let (mut first, mut skip) = (0, 0);
    while first < parts.len() {
        let slices: Vec<io::IoSlice<'_>> = parts[first..]
            .iter()
            .take(MAX_IOVS)
            .enumerate()
            .map(|(i, part)| io::IoSlice::new(if i == 0 { &part[skip..] } else { part }))
            .collect();
        let mut n = match rustix::io::pwritev(file, &slices, offset) {
            Ok(0) if slices.iter().any(|s| !s.is_empty()) => {
                return Err(io::ErrorKind::WriteZero.into())
            }
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        offset += n as u64;
        // Advance past what was written.
        while first < parts.len() {
            let left = parts[first].len() - skip;
            if n < left {
                skip += n;
                break;
            }
            n -= left;
            first += 1;
            skip = 0;
        }
    }
    Ok(())
}

/// Magic, version, header length, header and header CRC: everything before
/// the body.
fn file_prefix(header: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(header.len()).map_err(|_| io::Error::other("header too large"))?;
    let mut prefix = Vec::with_capacity(PREFIX_LEN as usize + header.len() + 4);
    prefix.extend_from_slice(&MAGIC);
    prefix.extend_from_slice(&VERSION.to_le_bytes());
    prefix.extend_from_slice(&len.to_le_bytes());
    prefix.extend_from_slice(header);
    prefix.extend_from_slice(&crc32fast::hash(header).to_le_bytes());
    Ok(prefix)
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // Not finished: the temporary file goes (the loader would remove
        // it at the next start anyway).
        if let Some((tmp, _)) = self.file.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Where an object's [`FileWriter`] is: the state that lets the fill go on
/// while the disk works.
enum Slot {
    /// Waiting for the next batch.
    Idle(FileWriter),
    /// Creating the file, or writing a batch, on the blocking pool.
    Busy(JoinHandle<(FileWriter, io::Result<()>)>),
    /// Given up (failed, too large) or handed to `finish`.
    Gone,
}

/// An object file being written as its body arrives. Feed it with
/// [`push`](DiskWrite::push), end it with [`finish`](DiskWrite::finish);
/// dropping it instead discards what was written.
pub struct DiskWrite {
    tier: Arc<DiskTier>,
    key: CacheKey,
    slot: Slot,
    /// What of the body is in the file, as of the last batch that landed.
    landed: Option<Written>,
    /// Body bytes of the batch on the blocking pool.
    in_flight: u64,
    pending: Vec<Bytes>,
    pending_bytes: usize,
    failed: Option<FormatError>,
    /// Bytes of body seen, once over the zone's `max_object_size`.
    too_large: Option<u64>,
}

impl DiskWrite {
    pub(crate) fn new(
        tier: Arc<DiskTier>,
        key: CacheKey,
        head: &CachedObject,
    ) -> Result<DiskWrite, FormatError> {
        let header_len = Self::header_len(&key, head)?;
        Ok(Self::start(tier, key, Some(header_len)))
    }

    /// A write whose header is known only at the end (a body without a
    /// declared length): the body is spooled, then copied behind it.
    pub(crate) fn spooled(
        tier: Arc<DiskTier>,
        key: CacheKey,
        head: &CachedObject,
    ) -> Result<DiskWrite, FormatError> {
        Self::header_len(&key, head)?;
        Ok(Self::start(tier, key, None))
    }

    /// The encoded header's length; an error for what the format cannot
    /// hold.
    fn header_len(key: &CacheKey, head: &CachedObject) -> Result<u32, FormatError> {
        if head.vary_index().is_some() || !head.encodings().is_empty() {
            return Err(FormatError::Corrupt("only plain responses are streamed"));
        }
        let header = disk_format::encode_header(key, head, SystemTime::now(), 0)?;
        u32::try_from(header.len()).map_err(|_| FormatError::Corrupt("header"))
    }

    /// The write, its temporary file already being created on the blocking
    /// pool (when there is a runtime): the first batch finds it open.
    fn start(tier: Arc<DiskTier>, key: CacheKey, header_len: Option<u32>) -> DiskWrite {
        let dir = tier
            .file_path(key_hash(&key.as_ref()))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut writer = FileWriter {
            dir,
            header_len,
            file: None,
            crc: crc32fast::Hasher::new(),
            written: 0,
        };
        let slot = match tokio::runtime::Handle::try_current() {
            Ok(handle) => Slot::Busy(handle.spawn_blocking(move || {
                let opened = writer.open().map(drop);
                (writer, opened)
            })),
            Err(_) => Slot::Idle(writer),
        };
        DiskWrite {
            tier,
            key,
            slot,
            landed: None,
            in_flight: 0,
            pending: Vec::new(),
            pending_bytes: 0,
            failed: None,
            too_large: None,
        }
    }

    /// What of the body is in the file so far (`None` before the first
    /// batch is written, or once the write was given up).
    pub fn written(&self) -> Option<Written> {
        if matches!(self.slot, Slot::Gone) {
            return None;
        }
        self.landed.clone()
    }

    /// True once the write failed or the body outgrew the zone: `finish`
    /// will refuse it.
    pub fn is_abandoned(&self) -> bool {
        self.failed.is_some() || self.too_large.is_some()
    }

    /// Adds a chunk of the body; every [`BATCH`] bytes go to the blocking
    /// pool, waiting only for the batch before (if still being written).
    /// Errors are kept for `finish`.
    pub async fn push(&mut self, chunk: Bytes) {
        if self.take(chunk) {
            self.flush().await;
        }
    }

    /// Adds `chunk` to the batch (or counts it, once the write is given
    /// up); true when the batch is due to be written.
    fn take(&mut self, chunk: Bytes) -> bool {
        if let Some(seen) = &mut self.too_large {
            *seen += chunk.len() as u64;
            return false;
        }
        if self.failed.is_some() {
            return false;
        }
        self.pending_bytes += chunk.len();
        self.pending.push(chunk);
        let written = self.landed.as_ref().map_or(0, |w| w.len);
        let seen = written + self.in_flight + self.pending_bytes as u64;
        if seen > self.tier.config().max_object_size {
            self.too_large = Some(seen);
            self.pending.clear();
            self.give_up();
            return false;
        }
        self.pending_bytes >= BATCH
    }

    /// Nothing more is written: the file goes (on the blocking pool, once
    /// a batch in flight lands).
    fn give_up(&mut self) {
        match std::mem::replace(&mut self.slot, Slot::Gone) {
            Slot::Idle(writer) => discard(writer),
            // The task drops the writer (and its file) when it is done.
            Slot::Busy(_) | Slot::Gone => {}
        }
    }

    /// Waits for the batch in flight; the writer, unless the write failed.
    async fn land(&mut self) -> Option<FileWriter> {
        let handle = match std::mem::replace(&mut self.slot, Slot::Gone) {
            Slot::Idle(writer) => return Some(writer),
            Slot::Gone => return None,
            Slot::Busy(handle) => handle,
        };
        self.in_flight = 0;
        match handle.await {
            Ok((writer, Ok(()))) => {
                if let Some((_, file)) = &writer.file {
                    self.landed = Some(Written {
                        file: file.clone(),
                        body_at: writer.body_at(),
                        len: writer.written,
                    });
                }
                Some(writer)
            }
            Ok((writer, Err(e))) => {
                self.failed = Some(FormatError::Io(e));
                discard(writer);
                None
            }
            Err(join) => {
                self.failed = Some(FormatError::Io(io::Error::other(join.to_string())));
                None
            }
        }
    }

    /// Sends the pending batch to the blocking pool, after the one before.
    async fn flush(&mut self) {
        let Some(mut writer) = self.land().await else {
            return;
        };
        let parts = std::mem::take(&mut self.pending);
        self.in_flight = self.pending_bytes as u64;
        self.pending_bytes = 0;
        self.slot = Slot::Busy(tokio::task::spawn_blocking(move || {
            let result = writer.write(&parts);
            (writer, result)
        }));
    }

    /// The whole body has arrived: writes what is left and the header of
    /// `object` (its metadata, status, headers and variant as given when the
    /// write began), renames the file into place and indexes it, in one
    /// blocking call. `object`'s own body is not written; the file holds the
    /// chunks pushed, and is handed back as the stored object's body.
    pub async fn finish(mut self, object: &CachedObject) -> Result<LazyBody, CacheError> {
        let writer = self.land().await;
        let tier = self.tier.clone();
        if let Some(size) = self.too_large {
            let limit = tier.config().max_object_size;
            return Err(CacheError::TooLarge { size, limit });
        }
        if let Some(e) = self.failed.take() {
            return Err(tier.write_failed(e));
        }
        let Some(mut writer) = writer else {
            return Err(CacheError::Io("disk write lost".into()));
        };
        let parts = std::mem::take(&mut self.pending);
        let hash = key_hash(&self.key.as_ref());
        let path = tier.file_path(hash);
        let stored_at = SystemTime::now()
            .checked_sub(object.meta.resident(tokio::time::Instant::now()))
            .unwrap_or_else(SystemTime::now);
        let key = self.key.clone();
        let head = CachedObject::assemble(
            object.meta.clone(),
            object.status,
            object.headers(),
            Bytes::new(),
            Vec::new(),
            object.variant().map(Box::from),
        );
        let done = tokio::task::spawn_blocking(move || {
            writer.write(&parts)?;
            writer.finish(&path, &key, &head, stored_at)
        })
        .await;
        match done {
            Ok(Ok((size, body))) => {
                tier.indexed(hash, size);
                Ok(body)
            }
            Ok(Err(e)) => Err(tier.write_failed(e)),
            Err(join) => Err(CacheError::Io(join.to_string())),
        }
    }
}

/// The kind-neutral face the proxy streams through
/// ([`Tier::begin_body_write`](crate::tier::Tier::begin_body_write)).
impl BodyWrite for DiskWrite {
    fn push(&mut self, chunk: Bytes) -> TierFuture<'_, ()> {
        if self.take(chunk) {
            TierFuture::boxed(self.flush())
        } else {
            TierFuture::ready(())
        }
    }

    fn written(&self) -> Option<Written> {
        DiskWrite::written(self)
    }

    fn is_abandoned(&self) -> bool {
        DiskWrite::is_abandoned(self)
    }

    fn finish<'a>(
        self: Box<Self>,
        object: &'a CachedObject,
    ) -> TierFuture<'a, Result<LazyBody, CacheError>> {
        TierFuture::boxed(DiskWrite::finish(*self, object))
    }
}

impl Drop for DiskWrite {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// Drops an unfinished writer (unlinking its temporary file) on the blocking
/// pool, never on an async worker.
fn discard(writer: FileWriter) {
    if writer.file.is_none() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(move || drop(writer));
        }
        Err(_) => drop(writer),
    }
}
