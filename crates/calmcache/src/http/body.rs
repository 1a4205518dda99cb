//! Body types on both sides of the proxy.
//!
//! [`ResponseBody`] is what clients receive: a cached body (a reference-counted
//! `Bytes`, never copied), nothing, or a stream relayed from the origin.
//! [`TimeoutBody`] bounds the wait between two frames of a streamed body.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use tokio::time::{sleep, Instant, Sleep};

use crate::http::paged::{self, PagedSlice};

/// Errors crossing body boundaries.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streamed body from either side.
pub(crate) type StreamBody = BoxBody<Bytes, BoxError>;

/// Body of a response sent to a client.
pub enum ResponseBody {
    /// A whole body held in memory (cached objects, short error pages).
    Full(Option<Bytes>),
    /// A cached body in pages of its own: offered to a plain connection
    /// for a zero-copy send as it is handed to hyper ([`paged`]).
    Paged(Option<PagedSlice>),
    /// A body relayed as it arrives.
    Stream(StreamBody),
}

impl ResponseBody {
    /// No body (HEAD, 304).
    pub fn empty() -> Self {
        ResponseBody::Full(None)
    }

    /// A whole body.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        ResponseBody::Full((!bytes.is_empty()).then_some(bytes))
    }

    /// A streamed body.
    pub fn stream<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        ResponseBody::Stream(body.map_err(Into::into).boxed())
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ResponseBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ResponseBody::Paged(paged) => Poll::Ready(paged.take().map(|p| {
                paged::offer(&p);
                Ok(Frame::data(p.into_bytes()))
            })),
            ResponseBody::Stream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(bytes) => bytes.is_none(),
            ResponseBody::Paged(paged) => paged.is_none(),
            ResponseBody::Stream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseBody::Paged(paged) => {
                SizeHint::with_exact(paged.as_ref().map_or(0, |p| p.len() as u64))
            }
            ResponseBody::Stream(body) => body.size_hint(),
        }
    }
}

/// The peer stopped sending body frames for longer than the limit.
#[derive(Debug, thiserror::Error)]
#[error("no body data for {0:?}")]
pub(crate) struct BodyTimeout(pub Duration);

/// Wraps a body so that waiting longer than `limit` for the next frame is an error.
///
/// The clock runs only while the peer keeps us waiting: it starts at the
/// first poll that finds no frame ready, not when a frame was handed on, so a
/// slow reader on the other side (which delays our polls) never counts
/// against the sender.
pub(crate) struct TimeoutBody<B> {
    inner: B,
    limit: Duration,
    timer: Pin<Box<Sleep>>,
    /// A wait is in progress and `timer` is armed for it.
    waiting: bool,
}

impl<B> TimeoutBody<B> {
    /// Bounds each wait for a frame of `inner` by `limit`.
    pub(crate) fn new(inner: B, limit: Duration) -> Self {
        TimeoutBody {
            inner,
            limit,
            timer: Box::pin(sleep(limit)),
            waiting: false,
        }
    }
}

impl<B> Body for TimeoutBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.waiting = false;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if !this.waiting {
            this.waiting = true;
            let deadline = Instant::now() + this.limit;
            this.timer.as_mut().reset(deadline);
        }
        ready!(this.timer.as_mut().poll(cx));
        Poll::Ready(Some(Err(Box::new(BodyTimeout(this.limit)))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client's request body on its way upstream, watched so that a failure
/// on the client's side (a malformed chunk, a body cut short, a stall past
/// `send_timeout`) is answered as the client's fault (400/408), not as a
/// broken origin (502).
#[derive(Clone, Default)]
pub(crate) struct ClientBody(std::sync::Arc<std::sync::OnceLock<crate::http::error::ProxyError>>);

impl ClientBody {
    /// The body to send upstream (`body` bounded by `limit` between frames)
    /// and the watch that learns whether it failed.
    pub(crate) fn watch<B>(body: B, limit: Duration) -> (StreamBody, ClientBody)
    where
        B: Body<Data = Bytes> + Unpin + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let watch = ClientBody::default();
        let seen = watch.clone();
        let body = TimeoutBody::new(body, limit)
            .map_err(move |e| {
                let kind = if e.is::<BodyTimeout>() {
                    crate::http::error::ErrorKind::BodyTimeout
                } else {
                    crate::http::error::ErrorKind::BadBody
                };
                let _ = seen
                    .0
                    .set(crate::http::error::ProxyError::downstream(kind, &e));
                e
            })
            .boxed();
        (body, watch)
    }

    /// The client's fault, if its body failed.
    pub(crate) fn fault(&self) -> Option<crate::http::error::ProxyError> {
        self.0.get().cloned()
    }
}

/// A body that first yields already-read chunks, then the rest of a stream:
/// used when a response turned out too large to cache mid-read.
pub(crate) struct PrefixedBody<B> {
    prefix: std::collections::VecDeque<Bytes>,
    rest: B,
}

impl<B> PrefixedBody<B> {
    /// Yields `prefix` in order, then `rest`.
    pub(crate) fn new(prefix: Vec<Bytes>, rest: B) -> Self {
        PrefixedBody {
            prefix: prefix.into(),
            rest,
        }
    }
}

impl<B> Body for PrefixedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(chunk) = self.prefix.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.rest.is_end_stream()
    }
}

/// Something a [`ChannelBody`] receives chunks from: a bounded channel (file
/// reads a few chunks ahead) or a growing body's reader (`growing.rs`).
pub(crate) trait ChunkSource: Send + Sync + 'static {
    /// The next chunk, an error, or `None` when the sender is gone.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>>;
}

impl ChunkSource for tokio::sync::mpsc::Receiver<Result<Bytes, BoxError>> {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        self.poll_recv(cx)
    }
}

/// A body fed through a channel: of exactly `left` bytes when the length is
/// known (a channel that closes before them is an error, never a short body
/// passed off as whole), else of whatever comes until the source ends
/// cleanly (sent chunked).
pub(crate) struct ChannelBody<S> {
    source: S,
    left: Option<u64>,
}

impl<S: ChunkSource> ChannelBody<S> {
    /// A body of `len` bytes from `source`.
    pub(crate) fn new(source: S, len: u64) -> Self {
        ChannelBody {
            source,
            left: Some(len),
        }
    }

    /// A body of unknown length from `source`.
    pub(crate) fn open_ended(source: S) -> Self {
        ChannelBody { source, left: None }
    }
}

impl<S: ChunkSource + Unpin> Body for ChannelBody<S> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match ready!(self.source.poll_chunk(cx)) {
            Some(Ok(chunk)) => {
                if let Some(left) = &mut self.left {
                    *left = left.saturating_sub(chunk.len() as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None if self.left.is_some_and(|l| l > 0) => {
                Poll::Ready(Some(Err("body ended early".into())))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        self.left
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::sync::mpsc;

    /// A body fed by a channel, so the test decides when frames arrive.
    struct Chan(mpsc::Receiver<Bytes>);

    impl Body for Chan {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_does_not_count_against_the_sender() {
        // Regression: the clock used to start when a frame was handed on, so a
        // reader that paused longer than the limit cut the stream short.
        let (tx, rx) = mpsc::channel(4);
        tx.send(Bytes::from_static(b"a")).await.unwrap();
        let sender = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5500)).await;
            sender.send(Bytes::from_static(b"b")).await.unwrap();
        });
        let mut body = TimeoutBody::new(Chan(rx), Duration::from_secs(1));
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "a"
        );
        tokio::time::sleep(Duration::from_secs(5)).await; // the reader dawdles
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "b"
        );
        // Now the sender stalls for longer than the limit: that is an error.
        let stalled = body.frame().await.unwrap();
        assert!(stalled.unwrap_err().is::<BodyTimeout>());
        drop(tx);
    }
}
