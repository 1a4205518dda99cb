//! Disk hits sent from the page cache with `sendfile`: the body of a cached
//! file ([`calmcache_core::CachedObject::cached_file_body`]) goes to a plain
//! HTTP/1.x client without being read into memory or copied into the
//! socket, as NGINX sends it.
//!
//! hyper writes bodies from memory, so the body hands it *stand-in* bytes:
//! a slice of a reserved, never written zeroed region (virtual memory only:
//! the kernel maps no page until it is read, and nothing reads it) whose
//! address names a slot, and the slot holds the file and the offset. When
//! hyper writes the head and the stand-in with one vectored write, the
//! connection's IO ([`crate::net::conn::Clocked`]) sends the slices before
//! it with `MSG_MORE` and the stand-in's file region with `sendfile`
//! (nonblocking socket: as much as the socket takes, hyper writes the rest
//! later from the right offset). The slot is freed when hyper drops the
//! stand-in, so a slice hyper still holds always resolves to its own file.
//!
//! Why it cannot stall a worker: the object is handed out only when the
//! disk read that found it read the whole file with `preadv2(RWF_NOWAIT)`
//! (every page was cached, and the body's checksum is known good: the read
//! checked it, or an earlier one of the same file version did). `sendfile`
//! then reads pages that were cached microseconds before; only reclaim in
//! that window could make it wait for the device. Why it cannot send mixed
//! bytes: the open file keeps its inode whatever happens to the path (a
//! refresh renames a new file over it, an eviction or purge unlinks it), and
//! no writer rewrites a body in place (a soft purge rewrites only the
//! header, which the hit read already).
//!
//! Stand-ins are made only while [`plain_scope`] runs (the body polled by an
//! HTTP/1.x connection on plain TCP, see `net::conn::Tracked`); elsewhere,
//! or when every slot is taken, the body is read without waiting
//! (`RWF_NOWAIT`) or, failing that, streamed on the blocking pool. A
//! stand-in that reaches any other write (TLS, HTTP/2) ends the connection
//! with an error: zeros are never sent as a body.

use std::cell::Cell;
use std::fs::File;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use calmcache_core::LazyBody;
use http_body::{Body, Frame, SizeHint};

use crate::http::body::{BoxError, ResponseBody};

/// Largest stand-in: a longer body is handed to hyper in frames of this.
pub(crate) const SLOT: usize = 256 * 1024;

/// Stand-ins alive at once, over all connections (past this, bodies are
/// read instead). 64 MiB of address space, none of it touched.
const SLOTS: usize = 256;

/// The reserved region: `SLOTS` slots of `SLOT` bytes.
static REGION: OnceLock<&'static [u8]> = OnceLock::new();

/// What each slot's stand-in stands for.
static TABLE: [Mutex<Option<Region>>; SLOTS] = [const { Mutex::new(None) }; SLOTS];

/// Where the next claim starts looking.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// True while a plain HTTP/1.x connection polls a response body.
    static PLAIN: Cell<bool> = const { Cell::new(false) };
}

/// A file region a stand-in stands for (its start).
struct Region {
    file: Arc<File>,
    offset: u64,
}

fn region() -> &'static [u8] {
    // Zeroed by the allocator from fresh pages (calloc / mmap): no RSS
    // until read, and nothing reads it.
    REGION.get_or_init(|| Box::leak(vec![0u8; SLOT * SLOTS].into_boxed_slice()))
}

fn lock(slot: usize) -> std::sync::MutexGuard<'static, Option<Region>> {
    TABLE[slot % SLOTS]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` (a response body's poll) with stand-ins allowed: only for an
/// HTTP/1.x connection on plain TCP, whose IO resolves them.
pub(crate) fn plain_scope<R>(f: impl FnOnce() -> R) -> R {
    let before = PLAIN.with(|p| p.replace(true));
    let out = f();
    PLAIN.with(|p| p.set(before));
    out
}

/// The owner of a stand-in's bytes: frees its slot when hyper drops them.
struct StandIn {
    slot: usize,
    len: usize,
}

impl AsRef<[u8]> for StandIn {
    fn as_ref(&self) -> &[u8] {
        let at = self.slot * SLOT;
        &region()[at..at + self.len]
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        *lock(self.slot) = None;
    }
}

/// A stand-in for `len` (at most [`SLOT`]) bytes of `file` at `offset`;
/// `None` when every slot is taken.
fn stand_in(file: &Arc<File>, offset: u64, len: usize) -> Option<Bytes> {
    debug_assert!(len <= SLOT);
    let start = NEXT.fetch_add(1, Ordering::Relaxed);
    for i in 0..SLOTS {
        let slot = (start + i) % SLOTS;
        let Ok(mut entry) = TABLE[slot].try_lock() else {
            continue;
        };
        if entry.is_none() {
            *entry = Some(Region {
                file: file.clone(),
                offset,
            });
            drop(entry);
            return Some(Bytes::from_owner(StandIn { slot, len }));
        }
    }
    None
}

/// True when `slice` lies (even in part) in the stand-in region.
pub(crate) fn is_stand_in(slice: &[u8]) -> bool {
    let Some(region) = REGION.get() else {
        return false;
    };
    let (start, end) = (region.as_ptr() as usize, region.as_ptr() as usize + region.len());
    let at = slice.as_ptr() as usize;
    !slice.is_empty() && at < end && at + slice.len() > start
}

/// Index of the first stand-in among `bufs`, if any.
pub(crate) fn pick(bufs: &[std::io::IoSlice<'_>]) -> Option<usize> {
    if REGION.get().is_none() {
        return None;
    }
    bufs.iter().position(|b| is_stand_in(b))
}

/// The file and offset a stand-in slice stands for; an error when it
/// lies across slots or its slot is free (neither can happen while hyper
/// holds the bytes: then the connection ends rather than send zeros).
pub(crate) fn resolve(slice: &[u8]) -> std::io::Result<(Arc<File>, u64)> {
    let broken = || std::io::Error::new(std::io::ErrorKind::InvalidData, "stale sendfile stand-in");
    let region = REGION.get().ok_or_else(broken)?;
    let within = (slice.as_ptr() as usize)
        .checked_sub(region.as_ptr() as usize)
        .ok_or_else(broken)?;
    let (slot, at) = (within / SLOT, within % SLOT);
    if slot >= SLOTS || at + slice.len() > SLOT {
        return Err(broken());
    }
    let entry = lock(slot);
    let found = entry.as_ref().ok_or_else(broken)?;
    Ok((found.file.clone(), found.offset + at as u64))
}

/// A cached file body (see the module doc): stand-ins on a plain HTTP/1.x
/// connection, else read without waiting, else streamed.
pub struct FileFrames {
    lazy: LazyBody,
    /// Next byte to hand out, relative to the body.
    at: u64,
    /// End of the part to send, relative to the body.
    end: u64,
    /// The rest streamed from the blocking pool (pages left the cache).
    streaming: Option<Box<ResponseBody>>,
}

impl FileFrames {
    /// `len` bytes of `lazy`'s body from `start`; `lazy` must be a cached
    /// file body (checksum known good).
    pub(crate) fn new(lazy: &LazyBody, start: u64, len: u64) -> FileFrames {
        FileFrames {
            lazy: lazy.clone(),
            at: start,
            end: start.saturating_add(len),
            streaming: None,
        }
    }

    fn next_frame(&mut self) -> Option<Bytes> {
        let left = self.end - self.at;
        if PLAIN.with(Cell::get) {
            let n = usize::try_from(left.min(SLOT as u64)).unwrap_or(SLOT);
            let offset = self.lazy.offset.saturating_add(self.at);
            if let Some(bytes) = stand_in(&self.lazy.file, offset, n) {
                self.at += n as u64;
                return Some(bytes);
            }
        }
        let n = usize::try_from(left).ok()?;
        let bytes = self.lazy.read_nowait_at(self.at, n)?;
        self.at = self.end;
        Some(bytes)
    }
}

impl Body for FileFrames {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(rest) = &mut this.streaming {
            return Pin::new(&mut **rest).poll_frame(cx);
        }
        if this.at >= this.end {
            return Poll::Ready(None);
        }
        if let Some(bytes) = this.next_frame() {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        // A page left the page cache: the rest from the blocking pool
        // (its checksum is known good: no check at the end).
        let rest = crate::http::file_body::file_body(
            &this.lazy,
            this.at,
            this.end - this.at,
            false,
        );
        this.at = this.end;
        let rest = this.streaming.insert(Box::new(rest));
        Pin::new(&mut **rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        match &self.streaming {
            Some(rest) => rest.is_end_stream(),
            None => self.at >= self.end,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.streaming {
            Some(rest) => rest.size_hint(),
            None => SizeHint::with_exact(self.end - self.at),
        }
    }
}
