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

/// Errors crossing body boundaries.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streamed body from either side.
pub type StreamBody = BoxBody<Bytes, BoxError>;

/// Body of a response sent to a client.
pub enum ResponseBody {
    /// A whole body held in memory (cached objects, short error pages).
    Full(Option<Bytes>),
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
            ResponseBody::Stream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(bytes) => bytes.is_none(),
            ResponseBody::Stream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseBody::Stream(body) => body.size_hint(),
        }
    }
}

/// The peer stopped sending body frames for longer than the limit.
#[derive(Debug, thiserror::Error)]
#[error("no body data for {0:?}")]
pub struct BodyTimeout(pub Duration);

/// Wraps a body so that waiting longer than `limit` for the next frame is an error.
pub struct TimeoutBody<B> {
    inner: B,
    limit: Duration,
    timer: Pin<Box<Sleep>>,
}

impl<B> TimeoutBody<B> {
    /// Bounds each wait for a frame of `inner` by `limit`.
    pub fn new(inner: B, limit: Duration) -> Self {
        TimeoutBody {
            inner,
            limit,
            timer: Box::pin(sleep(limit)),
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
            let deadline = Instant::now() + this.limit;
            this.timer.as_mut().reset(deadline);
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
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

/// A body that first yields already-read chunks, then the rest of a stream:
/// used when a response turned out too large to cache mid-read.
pub struct PrefixedBody<B> {
    prefix: std::collections::VecDeque<Bytes>,
    rest: B,
}

impl<B> PrefixedBody<B> {
    /// Yields `prefix` in order, then `rest`.
    pub fn new(prefix: Vec<Bytes>, rest: B) -> Self {
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
