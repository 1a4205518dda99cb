//! 103 Early Hints (RFC 8297) written into a client connection while its
//! request waits for the origin.
//!
//! hyper 1.x cannot send a 1xx from a server (neither HTTP/1.1 nor HTTP/2),
//! so the hint goes in under it: every client connection's IO
//! (`conn::Clocked`) holds an [`EarlyHints`] injector, the request's future
//! runs inside [`scope`] so that the request path can call [`offer`], and
//! `Clocked` writes the queued bytes at the next IO call of the connection
//! task, at a point where no hyper write is half done:
//!
//! - HTTP/1.1 (never 1.0): `HTTP/1.1 103 Early Hints` and its `Link` lines,
//!   only while the write side is clean ([`EarlyHints::clean`]): false from
//!   the moment hyper hands the IO any byte (whether or not the socket takes
//!   it), true again only when a flush completed with nothing left (hyper's
//!   buffer, a splice pipe, a hint). hyper's HTTP/1 dispatcher reads the
//!   next pipelined request as soon as the previous answer's last byte is in
//!   its own write buffer, which it flushes before it polls that request's
//!   future, and begins this request's answer only when the future returns:
//!   a hint offered while clean therefore goes out between the two.
//! - HTTP/2: hyper does not say which stream a request is, so [`Frames`]
//!   reads the frame headers going both ways and keeps the client streams
//!   that have no response HEADERS yet. A hint is offered only when exactly
//!   one such stream exists (then it is the asking request's), as one HEADERS
//!   frame (END_HEADERS, never END_STREAM) put in at a frame boundary of the
//!   outgoing bytes (never between a HEADERS and its CONTINUATION). Its block
//!   uses only HPACK literals without indexing, so hyper's dynamic table and
//!   the client's stay in step; a client that shrank its table below 4096
//!   (it then expects a size update first) gets no hints.
//!
//! When in doubt, no hint: a missing hint costs nothing, a broken stream
//! costs the page. Owns the bytes and the framing, not which links a
//! request deserves (the request path's). Imports nothing of the crate.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use http::{HeaderValue, Version};

/// The HTTP/2 connection preface a client sends first (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The largest frame payload every HTTP/2 peer takes (RFC 9113 §4.2: no
/// peer may announce a smaller `SETTINGS_MAX_FRAME_SIZE`).
const MAX_FRAME: usize = 16_384;

/// Client streams tracked at most; past it the connection gets no hints.
const MAX_TRACKED: usize = 256;

/// HTTP/2 frame types read here (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;

/// One client connection's hint injector, shared by its IO and its requests.
pub(crate) struct EarlyHints {
    /// HTTP/1: no write since the last completed flush (no answer half out).
    clean: AtomicBool,
    /// A hint waits in `state.pending` (read without the lock).
    queued: AtomicBool,
    state: Mutex<State>,
}

/// What the injector's lock guards.
struct State {
    /// HTTP/2 frame tracking; `None` on an HTTP/1-only connection.
    frames: Option<Frames>,
    /// The hint waiting to be written.
    pending: Option<Pending>,
    /// The connection task, woken when a hint is queued.
    waker: Option<Waker>,
}

/// A hint's bytes, and for HTTP/2 the stream it belongs to.
pub(crate) struct Pending {
    /// What goes on the wire.
    pub bytes: Vec<u8>,
    /// HTTP/2: the stream; 0 for HTTP/1 (written at the next IO call).
    stream: u32,
}

impl EarlyHints {
    /// An injector for a connection that may speak HTTP/2 (`frames`: its
    /// frames are tracked) or only HTTP/1.
    pub(crate) fn new(frames: bool) -> Arc<EarlyHints> {
        Arc::new(EarlyHints {
            clean: AtomicBool::new(true),
            queued: AtomicBool::new(false),
            state: Mutex::new(State {
                frames: frames.then(Frames::default),
                pending: None,
                waker: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// HTTP/1: hyper hands the IO bytes (`false`, on entry of a write) or a
    /// flush completed with nothing left (`true`).
    #[inline]
    pub(crate) fn set_clean(&self, clean: bool) {
        self.clean.store(clean, Relaxed);
    }

    /// Bytes the client sent (HTTP/2 tracking). False once frames are no
    /// longer tracked (the connection is HTTP/1, or the tracker gave up):
    /// the IO then stops calling.
    pub(crate) fn read(&self, bytes: &[u8]) -> bool {
        let mut state = self.lock();
        let Some(frames) = &mut state.frames else {
            return false;
        };
        frames.inbound(bytes);
        let on = frames.on();
        if !on {
            self.drop_pending(&mut state);
        }
        on
    }

    /// Bytes hyper wrote and the IO took (HTTP/2 tracking); false as [`Self::read`].
    pub(crate) fn wrote(&self, bytes: &[u8]) -> bool {
        let mut state = self.lock();
        let Some(frames) = &mut state.frames else {
            return false;
        };
        frames.outbound(bytes);
        let on = frames.on();
        if !on {
            self.drop_pending(&mut state);
        }
        on
    }

    /// Forgets a queued hint (HTTP/2 tracking went off: it cannot be placed).
    fn drop_pending(&self, state: &mut State) {
        state.pending = None;
        self.queued.store(false, Relaxed);
    }

    /// Remembers the connection task to wake when a hint is queued.
    pub(crate) fn park(&self, waker: &Waker) {
        let mut state = self.lock();
        if !state.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            state.waker = Some(waker.clone());
        }
    }

    /// The queued hint, when it may be written now: HTTP/1 at once, HTTP/2
    /// at a frame boundary of the outgoing bytes while its stream still
    /// waits for its answer. A hint whose stream is gone is dropped.
    pub(crate) fn take(&self) -> Option<Pending> {
        if !self.queued.load(Relaxed) {
            return None;
        }
        let mut state = self.lock();
        let stream = state.pending.as_ref()?.stream;
        if stream != 0 {
            // Tracking gone off (a shrunk table, too many streams) or the
            // stream answered or reset: the hint can no longer be placed.
            let frames = state.frames.as_ref();
            let live = frames.is_some_and(|f| f.on() && f.unanswered.contains(&stream));
            let boundary = frames.is_some_and(Frames::at_boundary);
            if !live {
                self.drop_pending(&mut state);
                return None;
            }
            if !boundary {
                return None;
            }
        }
        self.queued.store(false, Relaxed);
        state.pending.take()
    }

    /// Queues a 103 with `links` for the request of `version` now in
    /// progress; false (nothing queued) when it cannot be placed safely.
    fn queue(&self, version: Version, links: &[HeaderValue]) -> bool {
        let mut state = self.lock();
        if state.pending.is_some() {
            return false;
        }
        let pending = match version {
            Version::HTTP_11 if self.clean.load(Relaxed) => Pending {
                bytes: h1_hint(links),
                stream: 0,
            },
            Version::HTTP_2 => {
                let Some(stream) = state.frames.as_ref().and_then(Frames::only_waiting) else {
                    return false;
                };
                let Some(bytes) = h2_hint(stream, links) else {
                    return false;
                };
                Pending { bytes, stream }
            }
            _ => return false,
        };
        state.pending = Some(pending);
        self.queued.store(true, Relaxed);
        if let Some(waker) = &state.waker {
            waker.wake_by_ref();
        }
        true
    }
}

/// The injector and version of the request whose future is running.
#[derive(Clone)]
pub(crate) struct Hinter {
    hints: Arc<EarlyHints>,
    version: Version,
}

tokio::task_local! {
    /// Set by the connection around each request's future ([`scope`]).
    static HINTER: Option<Hinter>;
}

/// Runs `fut` (one request's answer) able to [`offer`] hints on `hints`
/// (`None`: a connection without hints, such as the admin listener's).
pub(crate) fn scope<F: std::future::Future>(
    hints: Option<&Arc<EarlyHints>>,
    version: Version,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Option<Hinter>, F> {
    let hinter = hints.map(|hints| Hinter {
        hints: hints.clone(),
        version,
    });
    HINTER.scope(hinter, fut)
}

/// Sends a 103 Early Hints with `links` (each one `Link` field value) to
/// the client of the request in progress, before its answer. False when
/// it could not be placed (HTTP/1.0, an answer still going out, another
/// HTTP/2 stream waiting, no connection): then nothing was sent.
pub(crate) fn offer(links: &[HeaderValue]) -> bool {
    if links.is_empty() {
        return false;
    }
    HINTER
        .try_with(|h| h.as_ref().is_some_and(|h| h.hints.queue(h.version, links)))
        .unwrap_or(false)
}

/// The protocol version of the request in progress, when it may be hinted
/// (inside [`scope`] on a connection with an injector).
pub(crate) fn version() -> Option<Version> {
    HINTER
        .try_with(|h| h.as_ref().map(|h| h.version))
        .ok()
        .flatten()
}

/// The hint handle of the request in progress ([`scope`]), for a hint
/// that comes from another task (an upstream connection's 1xx callback).
pub(crate) fn current() -> Option<Hinter> {
    HINTER.try_with(Clone::clone).ok().flatten()
}

impl Hinter {
    /// The asking request's protocol version.
    pub(crate) fn version(&self) -> Version {
        self.version
    }

    /// [`offer`] from outside the request's task.
    pub(crate) fn offer(&self, links: &[HeaderValue]) -> bool {
        !links.is_empty() && self.hints.queue(self.version, links)
    }
}

/// The HTTP/1.1 form: a status line, a `Link` line per value, a blank line.
fn h1_hint(links: &[HeaderValue]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + links.iter().map(|l| l.len() + 8).sum::<usize>());
    out.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\n");
    for link in links {
        out.extend_from_slice(b"link: ");
        out.extend_from_slice(link.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The HTTP/2 form: one HEADERS frame (END_HEADERS) on `stream`; `None`
/// when its block would not fit in [`MAX_FRAME`].
fn h2_hint(stream: u32, links: &[HeaderValue]) -> Option<Vec<u8>> {
    let mut block = Vec::with_capacity(8 + links.iter().map(|l| l.len() + 4).sum::<usize>());
    // RFC 7541 §6.2.2: literal without indexing, name from the static table
    // (4-bit prefix): `:status` is index 8, `link` index 45.
    hpack_literal(&mut block, 8, b"103");
    for link in links {
        hpack_literal(&mut block, 45, link.as_bytes());
    }
    if block.len() > MAX_FRAME {
        return None;
    }
    let len = u32::try_from(block.len()).ok()?;
    let mut frame = Vec::with_capacity(9 + block.len());
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.push(HEADERS);
    frame.push(END_HEADERS);
    frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    frame.extend_from_slice(&block);
    Some(frame)
}

/// One header field as a literal without indexing with an indexed name
/// and a raw (not Huffman-coded) value.
fn hpack_literal(out: &mut Vec<u8>, name_index: usize, value: &[u8]) {
    hpack_int(out, 0x00, 4, name_index);
    hpack_int(out, 0x00, 7, value.len());
    out.extend_from_slice(value);
}

/// RFC 7541 §5.1: an integer with an `n`-bit prefix after the bits `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        // Fits the prefix: value < 2^n <= 128.
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// Where one direction's byte stream stands among its frames.
#[derive(Default, Debug)]
struct Reader {
    /// The frame header being read (9 bytes).
    head: [u8; 9],
    /// How much of `head` has arrived.
    have: usize,
    /// Payload bytes of the current frame still to come.
    rest: usize,
    /// The payload being kept (SETTINGS from the client only).
    keep: Option<Vec<u8>>,
    /// A payload to keep was longer than [`MAX_KEPT`]: the tracker gives up.
    overlong: bool,
}

/// The longest payload kept (a SETTINGS frame of 170 settings).
const MAX_KEPT: usize = 1024;

/// One frame header as read.
#[derive(Clone, Copy, Debug)]
struct Head {
    len: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl Reader {
    /// Reads `bytes`, calling `on_head` with each complete frame header
    /// (it says whether to keep the payload) and `on_payload` with each
    /// kept payload once whole.
    fn feed(
        &mut self,
        mut bytes: &[u8],
        mut on_head: impl FnMut(Head) -> bool,
        mut on_payload: impl FnMut(&[u8]),
    ) {
        while !bytes.is_empty() {
            if self.rest > 0 {
                let n = self.rest.min(bytes.len());
                if let Some(keep) = &mut self.keep {
                    keep.extend_from_slice(&bytes[..n]);
                }
                self.rest -= n;
                bytes = &bytes[n..];
                if self.rest == 0 {
                    if let Some(keep) = self.keep.take() {
                        on_payload(&keep);
                    }
                }
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < 9 {
                return;
            }
            self.have = 0;
            let h = &self.head;
            let head = Head {
                len: usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]),
                kind: h[3],
                flags: h[4],
                stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
            };
            self.rest = head.len;
            let keep = on_head(head);
            if head.len == 0 {
                if keep {
                    on_payload(&[]);
                }
            } else if keep && head.len > MAX_KEPT {
                self.overlong = true;
            } else if keep {
                self.keep = Some(Vec::with_capacity(head.len));
            }
        }
    }
}

/// The HTTP/2 frames of one connection, both ways, as far as hints need.
#[derive(Debug)]
struct Frames {
    state: Track,
    inbound: Reader,
    outbound: Reader,
    /// Client streams opened that have no response HEADERS and no reset.
    unanswered: Vec<u32>,
    /// The highest stream the client opened (a HEADERS at or below it is a
    /// trailer section).
    highest: u32,
    /// The last outgoing HEADERS or PUSH_PROMISE lacked END_HEADERS: its
    /// CONTINUATION must come next.
    open_block: bool,
}

/// Whether a connection's frames are being followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Track {
    /// Reading the client preface: how much of it has matched.
    Preface(usize),
    /// Following frames.
    On,
    /// Not HTTP/2, or given up: no hints on HTTP/2 here.
    Off,
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            state: Track::Preface(0),
            inbound: Reader::default(),
            outbound: Reader::default(),
            unanswered: Vec::new(),
            highest: 0,
            open_block: false,
        }
    }
}

impl Frames {
    fn on(&self) -> bool {
        self.state != Track::Off
    }

    /// The one client stream waiting for its answer, if exactly one is.
    fn only_waiting(&self) -> Option<u32> {
        match (self.state, self.unanswered.as_slice()) {
            (Track::On, [one]) => Some(*one),
            _ => None,
        }
    }

    /// Whether a frame may be put in before the next outgoing byte.
    fn at_boundary(&self) -> bool {
        self.state == Track::On
            && self.outbound.have == 0
            && self.outbound.rest == 0
            && !self.open_block
    }

    fn inbound(&mut self, mut bytes: &[u8]) {
        if let Track::Preface(matched) = self.state {
            let n = (PREFACE.len() - matched).min(bytes.len());
            if bytes[..n] != PREFACE[matched..matched + n] {
                self.state = Track::Off;
                return;
            }
            let matched = matched + n;
            self.state = if matched == PREFACE.len() {
                Track::On
            } else {
                Track::Preface(matched)
            };
            bytes = &bytes[n..];
        }
        if self.state != Track::On {
            return;
        }
        let Frames {
            inbound,
            unanswered,
            highest,
            state,
            ..
        } = self;
        inbound.feed(
            bytes,
            |head| {
                match head.kind {
                    HEADERS if head.stream > *highest => {
                        *highest = head.stream;
                        unanswered.push(head.stream);
                    }
                    RST_STREAM => unanswered.retain(|s| *s != head.stream),
                    SETTINGS => return head.flags & ACK == 0,
                    _ => {}
                }
                false
            },
            |settings| {
                let shrunk = settings.chunks_exact(6).any(|s| {
                    u16::from_be_bytes([s[0], s[1]]) == SETTINGS_HEADER_TABLE_SIZE
                        && u32::from_be_bytes([s[2], s[3], s[4], s[5]]) < 4096
                });
                if shrunk {
                    *state = Track::Off;
                }
            },
        );
        if self.unanswered.len() > MAX_TRACKED || self.inbound.overlong {
            self.state = Track::Off;
        }
    }

    fn outbound(&mut self, bytes: &[u8]) {
        if self.state == Track::Off {
            return;
        }
        let Frames {
            outbound,
            unanswered,
            open_block,
            ..
        } = self;
        outbound.feed(
            bytes,
            |head| {
                match head.kind {
                    // Any HEADERS from the server counts as its answer
                    // (a 1xx too): fewer hints, never a misplaced one.
                    HEADERS | RST_STREAM => unanswered.retain(|s| *s != head.stream),
                    _ => {}
                }
                if matches!(head.kind, HEADERS | PUSH_PROMISE | CONTINUATION) {
                    *open_block = head.flags & END_HEADERS == 0;
                }
                false
            },
            |_| {},
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "early_hints_tests.rs"]
mod tests;
