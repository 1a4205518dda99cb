//! A response body still arriving from the origin, shared by every request
//! that waits for it (read-while-write): each reader gets what has arrived
//! so far, then each chunk as it comes, so followers of a miss start
//! receiving at once instead of after the whole object is stored.
//!
//! Memory stays bounded whatever the readers do. Chunks are held once, as
//! shared `Bytes`, and each reader pulls them at its own pace (no per-reader
//! queue). How long a chunk is held depends on what becomes of the body
//! ([`Keeping`]):
//!
//! ```text
//! All   (stored whole: memory zones, Vary'd, compressed or chunked bodies)
//!       every chunk until the end; bounded by max_object_size
//! File  (streamed into a disk zone's file)
//!       until written, then a WINDOW of the newest; a reader further
//!       behind reads the file (on the blocking pool)
//! None  (not stored: too large, the disk write failed)
//!       until every reader had it, a WINDOW at most: a reader further
//!       behind is cut (its body ends in error) unless it is the only
//!       one, in which case the fill waits for it (backpressure to the
//!       origin; `room`)
//! ```
//!
//! A reader may also start at an offset and stop after a length (a byte
//! range, `growing_range.rs`): it waits only for its own bytes and leaves
//! as soon as it has them.
//!
//! The fill never waits for a reader otherwise. Bytes held count in the
//! `max_inflight_body` gauge ([`Held`]) until the body is dropped.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use calmcache_core::tier::Written;
use tokio::task::JoinHandle;

use crate::http::body::{BoxError, ChannelBody, ChunkSource, ResponseBody};
use crate::telemetry::inflight::Held;

/// Bytes of the newest chunks held for readers just behind the stream, and
/// the lag past which a reader of a body that is not kept is cut.
pub(crate) const WINDOW: u64 = 256 * 1024;

/// Bytes read from the file per blocking call by a reader behind the window.
const FILE_READ: u64 = 256 * 1024;

/// What becomes of the body, which decides how long its chunks are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keeping {
    /// Stored whole at the end: every chunk is held (readers share them).
    All,
    /// Written to a file as it arrives: chunks are held until written,
    /// then only the newest [`WINDOW`]; readers behind read the file.
    File,
    /// Not stored: chunks are held until every reader had them.
    None,
}

/// The head of a response whose body is still arriving, for every request
/// that answers from it before the object is stored.
#[derive(Debug)]
pub struct StreamingHead {
    /// Status to send.
    pub status: http::StatusCode,
    /// Headers as they will be stored (hop-by-hop and private fields gone).
    pub headers: http::HeaderMap,
    /// The body.
    pub growing: Arc<Growing>,
    /// The origin's status (for `Cache-Status: fwd-status`).
    pub origin_status: u16,
    /// Seconds of freshness the stored object will have.
    pub ttl: f64,
    /// The Vary names and the leader's selection, so a follower can tell
    /// whether this is its variant.
    pub vary: Option<(Vec<http::HeaderName>, String)>,
    /// A reader registered before the first chunk arrived, for the request
    /// that started the fill: without it, a body that is not kept could
    /// drop (or stop fetching) what that request had not read yet because
    /// it had not asked for its body when the chunks came.
    pub first: FirstReader,
}

/// The reader [`StreamingHead::first`] holds until a request takes it.
#[derive(Default)]
pub struct FirstReader(Mutex<Option<ResponseBody>>);

impl FirstReader {
    /// Holds `body` (a reader at offset 0) for the first taker.
    pub fn new(body: ResponseBody) -> Self {
        FirstReader(Mutex::new(Some(body)))
    }

    /// The held reader, once.
    pub fn take(&self) -> Option<ResponseBody> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl std::fmt::Debug for FirstReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FirstReader")
    }
}

/// A body being filled by one fetch and read by many.
pub struct Growing {
    state: Mutex<State>,
    /// The declared length; `None` for a body without one (chunked), which
    /// readers get chunked and which ends when the origin's body ends cleanly.
    pub len: Option<u64>,
    /// Wakes a fill waiting for its only reader (`Keeping::None`).
    room: tokio::sync::Notify,
    /// Wakes requests waiting for bytes to arrive before they can answer
    /// ([`Growing::arrived`]: a range on a body of unknown length).
    grew: tokio::sync::Notify,
}

/// How far a body has come, for a request deciding its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Bytes received so far.
    pub received: u64,
    /// `None` while bytes still arrive, `Some(true)` once the body is
    /// complete, `Some(false)` once it failed.
    pub ended: Option<bool>,
}

struct State {
    /// Held chunks with their offsets, in order and contiguous.
    chunks: VecDeque<(u64, Bytes)>,
    /// Offset of the first held byte (`received` when none is held).
    start: u64,
    /// Bytes held (the chunks' lengths).
    held: u64,
    /// The same bytes in the `max_inflight_body` gauge.
    gauge: Option<Held>,
    /// Bytes received so far.
    received: u64,
    keeping: Keeping,
    /// What of the body is in its file (`Keeping::File`, or a file write
    /// given up: what it had written stays readable).
    file: Option<Written>,
    /// `Some` once the body is complete (`Ok`) or failed (`Err`).
    done: Option<Result<(), String>>,
    /// Readers by id: where each is, and its waker while it waits.
    readers: HashMap<u64, Slot>,
    next_id: u64,
}

struct Slot {
    at: u64,
    waker: Option<Waker>,
}

/// What a reader at some offset gets next.
enum Next {
    Chunk(Bytes),
    File(Written, u64, usize),
    Wait,
    End,
    Failed(String),
    Cut,
}

impl State {
    /// Drops the chunks no longer needed, as `keeping` says.
    fn trim(&mut self) {
        let min_at = self.readers.values().map(|s| s.at).min();
        let many = self.readers.len() != 1;
        while let Some((off, chunk)) = self.chunks.front() {
            let len = chunk.len() as u64;
            let end = off + len;
            let beyond_window = self.held - len >= WINDOW;
            let drop = match self.keeping {
                Keeping::All => false,
                Keeping::File => beyond_window && self.file.as_ref().is_some_and(|f| end <= f.len),
                Keeping::None => min_at.is_none_or(|m| end <= m) || (many && beyond_window),
            };
            if !drop {
                break;
            }
            self.chunks.pop_front();
            self.start = end;
            self.held -= len;
            if let Some(gauge) = &mut self.gauge {
                gauge.sub(len);
            }
        }
        if self.chunks.is_empty() {
            self.start = self.received;
        }
    }

    fn next(&self, at: u64) -> Next {
        if at < self.start {
            return match &self.file {
                Some(file) if at < file.len => {
                    let n = (file.len.min(self.start) - at).min(FILE_READ);
                    Next::File(file.clone(), at, usize::try_from(n).unwrap_or(0))
                }
                _ => Next::Cut,
            };
        }
        if at < self.received {
            let i = self
                .chunks
                .partition_point(|(off, c)| off + c.len() as u64 <= at);
            if let Some((off, chunk)) = self.chunks.get(i) {
                let from = usize::try_from(at - off).unwrap_or(0);
                return Next::Chunk(chunk.slice(from..));
            }
            return Next::Cut;
        }
        match &self.done {
            None => Next::Wait,
            Some(Ok(())) => Next::End,
            Some(Err(why)) => Next::Failed(why.clone()),
        }
    }

    /// Wakes every waiting reader.
    fn wake_all(&mut self) {
        for slot in self.readers.values_mut() {
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }
}

impl std::fmt::Debug for Growing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Growing({} of {:?} bytes)", self.received(), self.len)
    }
}

impl Growing {
    /// An empty body of `len` bytes to come (`None`: unknown), held as
    /// `keeping` says and counted in `gauge`.
    pub fn new(len: Option<u64>, keeping: Keeping, gauge: Option<Held>) -> Growing {
        Growing {
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                start: 0,
                held: 0,
                gauge,
                received: 0,
                keeping,
                file: None,
                done: None,
                readers: HashMap::new(),
                next_id: 0,
            }),
            len,
            room: tokio::sync::Notify::new(),
            grew: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a chunk (held once, shared by every reader).
    pub fn push(&self, chunk: Bytes) {
        let mut state = self.lock();
        let len = chunk.len() as u64;
        let off = state.received;
        state.received += len;
        state.held += len;
        if let Some(gauge) = &mut state.gauge {
            gauge.add(len);
        }
        state.chunks.push_back((off, chunk));
        state.trim();
        state.wake_all();
        self.grew.notify_waiters();
    }

    /// The body's file now holds `written`: chunks written may go.
    pub fn written(&self, written: Written) {
        let mut state = self.lock();
        state.file = Some(written);
        state.trim();
    }

    /// The body will not be stored (too large, its file failed): chunks are
    /// held only for the readers already there; a reader further behind
    /// than [`WINDOW`] (and not in the file) is cut.
    pub fn stop_keeping(&self) {
        let mut state = self.lock();
        state.keeping = Keeping::None;
        state.trim();
        state.wake_all();
    }

    /// Waits while the body is not kept and its only reader is a window
    /// behind: that reader slows the fill (and the origin) down. Returns at
    /// once otherwise; many readers never make the fill wait.
    pub async fn room(&self) {
        loop {
            {
                let state = self.lock();
                let waits = state.keeping == Keeping::None
                    && state.readers.len() == 1
                    && state.held >= WINDOW
                    && state.done.is_none();
                if !waits {
                    return;
                }
            }
            self.room.notified().await;
        }
    }

    /// The body is complete: readers end after their last chunk.
    pub fn finish(&self) {
        let mut state = self.lock();
        state.done = Some(Ok(()));
        state.wake_all();
        self.grew.notify_waiters();
    }

    /// The fetch failed: every reader ends with an error (its client sees a
    /// cut connection, never a short body presented as whole).
    pub fn fail(&self, why: String) {
        let mut state = self.lock();
        state.done = Some(Err(why));
        state.wake_all();
        self.grew.notify_waiters();
    }

    /// The whole body, when every chunk was kept (`Keeping::All`).
    pub fn kept(&self) -> Option<Vec<Bytes>> {
        let state = self.lock();
        (state.start == 0).then(|| state.chunks.iter().map(|(_, c)| c.clone()).collect())
    }

    /// A body for one more client: from the first byte, read at its pace.
    pub fn reader(self: &Arc<Self>) -> ResponseBody {
        let reader = self.reader_at(0, u64::MAX);
        match self.len {
            Some(len) => ResponseBody::stream(ChannelBody::new(reader, len)),
            None => ResponseBody::stream(ChannelBody::open_ended(reader)),
        }
    }

    /// The `len` bytes from offset `start`, read as they arrive (a byte
    /// range): the reader waits for them, never for the rest of the body,
    /// and leaves as soon as it has them.
    pub(crate) fn range_reader(self: &Arc<Self>, start: u64, len: u64) -> RangeReader {
        RangeReader(self.reader_at(start, start.saturating_add(len)))
    }

    fn reader_at(self: &Arc<Self>, start: u64, end: u64) -> Reader {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.readers.insert(
            id,
            Slot {
                at: start,
                waker: None,
            },
        );
        state.trim();
        drop(state);
        Reader {
            growing: self.clone(),
            id: Some(id),
            at: start,
            end,
            reading: None,
        }
    }

    /// How far the body has come.
    pub(crate) fn progress(&self) -> Progress {
        let state = self.lock();
        Progress {
            received: state.received,
            ended: state.done.as_ref().map(Result::is_ok),
        }
    }

    /// True while byte `at` can still be read: held, in the body's file, or
    /// still to come. False once a body that is not kept dropped it.
    pub(crate) fn readable_from(&self, at: u64) -> bool {
        let state = self.lock();
        at >= state.start || state.file.as_ref().is_some_and(|f| at < f.len)
    }

    /// Waits until at least `bytes` bytes arrived or the body ended (whole
    /// or failed), and says how far it came.
    pub(crate) async fn arrived(&self, bytes: u64) -> Progress {
        loop {
            let grew = self.grew.notified();
            tokio::pin!(grew);
            // Registered before the check, so a push in between is not missed.
            grew.as_mut().enable();
            let now = self.progress();
            if now.received >= bytes || now.ended.is_some() {
                return now;
            }
            grew.await;
        }
    }

    /// True when the body is not kept and no reader is left: nobody can
    /// get the rest (a newcomer could not get the start).
    pub fn abandoned(&self) -> bool {
        let state = self.lock();
        state.keeping == Keeping::None && state.readers.is_empty()
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.lock().received
    }

    /// Bytes held in memory now.
    pub fn held(&self) -> u64 {
        self.lock().held
    }

    /// A reader moved on to `at`, or left (`None`).
    fn moved(&self, id: u64, at: Option<u64>) {
        let mut state = self.lock();
        match at {
            Some(at) => {
                if let Some(slot) = state.readers.get_mut(&id) {
                    slot.at = at;
                }
            }
            None => {
                state.readers.remove(&id);
            }
        }
        if state.keeping == Keeping::None {
            state.trim();
            drop(state);
            self.room.notify_one();
        }
    }
}

/// One client's position in a [`Growing`] body.
struct Reader {
    growing: Arc<Growing>,
    /// `None` once it left (cut, or the body ended).
    id: Option<u64>,
    at: u64,
    /// Where this reader stops (exclusive): the end of its range, or
    /// `u64::MAX` for the whole body.
    end: u64,
    /// A read of the file in progress (the reader is behind the window).
    reading: Option<JoinHandle<std::io::Result<Bytes>>>,
}

impl Reader {
    fn took(&mut self, mut chunk: Bytes) -> Poll<Option<Result<Bytes, BoxError>>> {
        let wanted = self.end.saturating_sub(self.at);
        if chunk.len() as u64 > wanted {
            chunk.truncate(usize::try_from(wanted).unwrap_or(usize::MAX));
        }
        self.at += chunk.len() as u64;
        if let Some(id) = self.id {
            self.growing.moved(id, Some(self.at));
        }
        Poll::Ready(Some(Ok(chunk)))
    }

    fn leave(&mut self) {
        if let Some(id) = self.id.take() {
            self.growing.moved(id, None);
        }
    }
}

impl ChunkSource for Reader {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        if let Some(reading) = &mut self.reading {
            let read = std::task::ready!(std::pin::Pin::new(reading).poll(cx));
            self.reading = None;
            return match read {
                Ok(Ok(chunk)) => self.took(chunk),
                Ok(Err(e)) => {
                    self.leave();
                    Poll::Ready(Some(Err(e.into())))
                }
                Err(e) => {
                    self.leave();
                    Poll::Ready(Some(Err(e.into())))
                }
            };
        }
        if self.at >= self.end {
            // A range reader that has its bytes: gone at once, so it holds
            // nothing back.
            self.leave();
            return Poll::Ready(None);
        }
        let next = {
            let mut state = self.growing.lock();
            let next = state.next(self.at);
            if let (Next::Wait, Some(id)) = (&next, self.id) {
                if let Some(slot) = state.readers.get_mut(&id) {
                    slot.waker = Some(cx.waker().clone());
                }
            }
            next
        };
        match next {
            Next::Chunk(chunk) => self.took(chunk),
            Next::File(file, at, n) => {
                let n = n.min(usize::try_from(self.end - at).unwrap_or(usize::MAX));
                self.reading = Some(tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; n];
                    std::os::unix::fs::FileExt::read_exact_at(
                        &*file.file,
                        &mut buf,
                        file.body_at + at,
                    )?;
                    Ok(Bytes::from(buf))
                }));
                self.poll_chunk(cx)
            }
            Next::Wait => Poll::Pending,
            Next::End => {
                self.leave();
                Poll::Ready(None)
            }
            Next::Failed(why) => {
                self.leave();
                Poll::Ready(Some(Err(why.into())))
            }
            Next::Cut => {
                self.leave();
                Poll::Ready(Some(Err(
                    "reader fell too far behind a body that is not kept".into(),
                )))
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A reader of one byte range of a [`Growing`] body
/// ([`Growing::range_reader`]): its chunks, cut at the range's end.
pub(crate) struct RangeReader(Reader);

impl ChunkSource for RangeReader {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        self.0.poll_chunk(cx)
    }
}

#[cfg(test)]
#[path = "growing_tests.rs"]
mod tests;
