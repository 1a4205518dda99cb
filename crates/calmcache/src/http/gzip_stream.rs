//! A body gzipped as it streams: the encoder of `compress_passed`
//! (answers the cache does not store, compressed on the fly).
//!
//! Owns [`GzipBody`] and nothing else: when to compress is
//! `compress_passed.rs`'s decision. Bounded memory and bounded work per
//! poll: each poll compresses at most [`PIECE`] bytes of input (a larger
//! origin frame is taken in pieces, yielding to the runtime between them),
//! and output is handed on as soon as it exists. Whenever the origin has
//! nothing more ready (its body is `Pending`), what was compressed so far
//! is flushed (zlib's sync flush), so a slow or event-streaming origin's
//! bytes reach the client as promptly as without compression, while a fast
//! origin's body is compressed in long runs without per-frame flushes.
//! Imports nothing of the crate but `body.rs`'s error type.

use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::buf::Writer;
use bytes::{BufMut as _, Bytes, BytesMut};
use flate2::write::GzEncoder;
use http::HeaderMap;
use http_body::{Body, Frame};

use crate::http::body::BoxError;

/// The most input compressed in one poll (an HTTP/2 DATA frame's worth):
/// at gzip level 1 about 0.45 ms of a loaded core (flate2's default
/// backend measured 35 MB/s on this project's docs, a 2-core machine at
/// load average 8; level 6 ran at 8 MB/s), so one large answer being
/// compressed never holds a worker (and the other connections on it)
/// for long: it yields between pieces.
pub(crate) const PIECE: usize = 16 * 1024;

/// gzip level of passed answers: NGINX's `gzip_comp_level` default. Level 1
/// runs several times faster than zlib's default 6 for output ~10 % larger
/// on HTML, which is the right trade for work done on every request (stored
/// objects are encoded once, at level 6, by `compress.rs`).
pub(crate) const LEVEL: u32 = 1;

/// What one poll of the body answers.
type Polled = Poll<Option<Result<Frame<Bytes>, BoxError>>>;

/// Where the encoder is.
enum State {
    /// Taking input from the origin's body.
    Reading,
    /// The origin's body ended (with these trailers, if any): the gzip
    /// trailer is still to be written.
    Ending(Option<HeaderMap>),
    /// The gzip stream is complete; the origin's trailers, if any, go next.
    Trailers(Option<HeaderMap>),
    /// Everything was handed on.
    Done,
}

/// `inner`, gzip-encoded as it arrives (see the module doc).
pub(crate) struct GzipBody<B> {
    inner: B,
    encoder: GzEncoder<Writer<BytesMut>>,
    /// Input taken from the origin and not compressed yet (the rest of a
    /// frame larger than [`PIECE`]).
    input: Bytes,
    /// Input was compressed since the last flush.
    unflushed: bool,
    state: State,
}

impl<B> GzipBody<B> {
    /// Encodes `inner` with gzip at [`LEVEL`].
    pub(crate) fn new(inner: B) -> Self {
        let out = BytesMut::with_capacity(8 * 1024).writer();
        GzipBody {
            inner,
            encoder: GzEncoder::new(out, flate2::Compression::new(LEVEL)),
            input: Bytes::new(),
            unflushed: false,
            state: State::Reading,
        }
    }

    /// The output written so far, taken (None when there is none).
    fn take_output(&mut self) -> Option<Bytes> {
        let out = self.encoder.get_mut().get_mut();
        (!out.is_empty()).then(|| out.split().freeze())
    }

    /// Compresses the next piece of pending input.
    fn compress_piece(&mut self) -> std::io::Result<()> {
        let n = self.input.len().min(PIECE);
        let piece = self.input.split_to(n);
        self.encoder.write_all(&piece)?;
        self.unflushed = true;
        Ok(())
    }
}

impl<B> Body for GzipBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = self.get_mut();
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Done => return Poll::Ready(None),
                State::Trailers(trailers) => {
                    return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
                }
                State::Ending(trailers) => {
                    this.state = State::Trailers(trailers);
                    if let Err(e) = this.encoder.try_finish() {
                        return Poll::Ready(Some(Err(e.into())));
                    }
                    if let Some(out) = this.take_output() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                State::Reading => {
                    this.state = State::Reading;
                    if let Some(step) = this.read_step(cx) {
                        return step;
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

impl<B> GzipBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// One step while reading: compress a piece of pending input, or take
    /// the next frame of `inner`. None: go round again (the state moved on).
    fn read_step(&mut self, cx: &mut Context<'_>) -> Option<Polled> {
        if !self.input.is_empty() {
            if let Err(e) = self.compress_piece() {
                return Some(Poll::Ready(Some(Err(e.into()))));
            }
            if let Some(out) = self.take_output() {
                return Some(Poll::Ready(Some(Ok(Frame::data(out)))));
            }
            // Nothing to hand on yet: let other tasks run before the next piece.
            cx.waker().wake_by_ref();
            return Some(Poll::Pending);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Pending => Some(self.flush_while_waiting()),
            Poll::Ready(None) => {
                self.state = State::Ending(None);
                None
            }
            Poll::Ready(Some(Err(e))) => Some(Poll::Ready(Some(Err(e.into())))),
            Poll::Ready(Some(Ok(frame))) => {
                match frame.into_data() {
                    Ok(data) => self.input = data,
                    Err(frame) => self.state = State::Ending(frame.into_trailers().ok()),
                }
                None
            }
        }
    }

    /// The origin has nothing ready: flush what was compressed since the
    /// last flush and hand it on (the origin's waker is registered, so the
    /// body is polled again when it has more).
    fn flush_while_waiting(&mut self) -> Polled {
        if !self.unflushed {
            return Poll::Pending;
        }
        self.unflushed = false;
        if let Err(e) = self.encoder.flush() {
            return Poll::Ready(Some(Err(e.into())));
        }
        match self.take_output() {
            Some(out) => Poll::Ready(Some(Ok(Frame::data(out)))),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
#[path = "gzip_stream_tests.rs"]
mod tests;
