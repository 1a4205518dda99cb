//! Request bodies on GET and HEAD: one rule whatever their framing
//! (`Content-Length`, `chunked`, HTTP/2 DATA frames).
//!
//! RFC 9110 §9.3.1 gives a GET body no defined semantics, yet some origins
//! read one (search APIs), so a body is never dropped; but a shared cache
//! must not let it change what is stored for others. The rule:
//!
//! ```text
//! GET/HEAD whose body is not empty
//!   read whole first, each frame within the upstream's send_timeout, at most
//!   GET_BODY_MAX ─ malformed or cut short: 400 ─┐ (HTTP/1.x: Connection: close;
//!               ─ stalled: 408               ─┤  nothing reached the origin)
//!               ─ larger: 413                ─┘
//!   └─ passed to the origin with its Content-Length, on every route: never
//!      looked up, coalesced or stored (Cache-Status: detail=request-body)
//! an empty body (`Content-Length: 0`, a lone last chunk): as if none
//! ```
//!
//! Reading it whole before the origin sees anything is what makes a
//! malformed body the client's 400 rather than an origin's answer followed
//! by a closed connection (the framing of what follows can no longer be
//! trusted, RFC 9112 §9.6). The same reader, [`read_up_to`], reads the
//! bodies of requests keyed by their body (body_key.rs), to their own bound.
//! This module must not look anything up.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Request};
use http_body::Body;
use http_body_util::BodyExt;

use crate::http::body::{BodyTimeout, BoxError, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};

/// The largest GET or HEAD body calmcache reads (and forwards); a larger
/// one is refused with 413. Bounded because it is held whole before the
/// origin is asked.
pub(crate) const GET_BODY_MAX: usize = 64 * 1024;

/// True for a GET or HEAD that may carry a body: its framing announced one
/// (a `Content-Length` above 0, `chunked`, an HTTP/2 stream left open).
pub(crate) fn announced<B: Body>(req: &Request<B>) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD) && !req.body().is_end_stream()
}

/// Reads `body` whole, each frame within `limit`, at most
/// [`GET_BODY_MAX`] bytes; `None` when it turned out empty. Errors are the
/// client's: 400 (malformed, cut short), 408 (stalled), 413 (too large).
pub(crate) async fn read_whole<B>(body: B, limit: Duration) -> Result<Option<Bytes>, ProxyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    match read_up_to(body, limit, GET_BODY_MAX).await? {
        Read::Whole(whole) => Ok((!whole.is_empty()).then_some(whole)),
        Read::Over(_) => Err(ProxyError::downstream(
            ErrorKind::BodyTooLarge,
            format!("a GET or HEAD body over {} KiB", GET_BODY_MAX / 1024),
        )),
    }
}

/// A body read up to a bound.
#[derive(Debug)]
pub(crate) enum Read {
    /// All of it, within the bound (maybe empty).
    Whole(Bytes),
    /// What was read when the bound was passed (more than the bound: the
    /// frame that passed it is kept whole); the rest is still in the body.
    Over(Bytes),
}

/// Reads `body` up to `max` bytes, each frame within `limit` (the same
/// rules for every framing); stops at the first frame past `max`, leaving
/// the rest unread. Errors are the client's: 400 (malformed, cut short),
/// 408 (stalled).
pub(crate) async fn read_up_to<B>(body: B, limit: Duration, max: usize) -> Result<Read, ProxyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut body = TimeoutBody::new(body, limit);
    let mut whole = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            let e: BoxError = e;
            let kind = if e.is::<BodyTimeout>() {
                ErrorKind::BodyTimeout
            } else {
                ErrorKind::BadBody
            };
            ProxyError::downstream(kind, format!("the request body: {e}"))
        })?;
        let Ok(data) = frame.into_data() else {
            // Trailers carry nothing a keyed or GET body needs.
            continue;
        };
        whole.extend_from_slice(&data);
        if whole.len() > max {
            return Ok(Read::Over(whole.freeze()));
        }
    }
    Ok(Read::Whole(whole.freeze()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use http_body_util::{Full, StreamBody};

    type Frames =
        futures_util::stream::Iter<std::vec::IntoIter<Result<http_body::Frame<Bytes>, BoxError>>>;

    fn frames(parts: Vec<Result<&'static [u8], &'static str>>) -> StreamBody<Frames> {
        let items: Vec<Result<http_body::Frame<Bytes>, BoxError>> = parts
            .into_iter()
            .map(|p| {
                p.map(|b| http_body::Frame::data(Bytes::from_static(b)))
                    .map_err(|e| e.into())
            })
            .collect();
        StreamBody::new(futures_util::stream::iter(items))
    }

    const LIMIT: Duration = Duration::from_secs(5);

    #[test]
    fn only_get_and_head_with_an_open_body_are_announced() {
        let with = |m: Method, body: &'static str| {
            let req = Request::builder()
                .method(m)
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap();
            announced(&req)
        };
        assert!(with(Method::GET, "q"));
        assert!(with(Method::HEAD, "q"));
        assert!(!with(Method::GET, ""), "an empty body is no body");
        assert!(!with(Method::POST, "q"), "other methods stream as before");
    }

    #[tokio::test]
    async fn a_body_is_read_whole_across_frames() {
        let body = frames(vec![Ok(b"ab"), Ok(b"c")]);
        let read = read_whole(body, LIMIT).await.unwrap();
        assert_eq!(read.as_deref(), Some(&b"abc"[..]));
        let empty = frames(vec![Ok(b"")]);
        assert_eq!(read_whole(empty, LIMIT).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_broken_body_is_the_clients_400() {
        let body = frames(vec![Ok(b"ab"), Err("invalid chunk size")]);
        let e = read_whole(body, LIMIT).await.unwrap_err();
        assert_eq!(e.status(), http::StatusCode::BAD_REQUEST);
        assert!(e.closes_connection());
    }

    #[tokio::test]
    async fn a_body_past_the_bound_is_413() {
        static BIG: [u8; GET_BODY_MAX] = [b'x'; GET_BODY_MAX];
        let exact = frames(vec![Ok(&BIG)]);
        assert!(read_whole(exact, LIMIT).await.is_ok());
        let over = frames(vec![Ok(&BIG), Ok(b"y")]);
        let e = read_whole(over, LIMIT).await.unwrap_err();
        assert_eq!(e.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.closes_connection());
    }
}
