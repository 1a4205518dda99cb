//! What a fetch in flight tells the requests that waited for it: the
//! object stored, a body still arriving, an error, or the origin's error
//! answer shared with every follower.

use std::sync::Arc;

use bytes::Bytes;
use calmcache_core::CachedObject;
use http::header::VARY;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::http::error::ProxyError;
use crate::http::headers::detach_headers;
use crate::proxy::growing::StreamingHead;

/// What a fetch in flight tells the requests that waited for it.
#[derive(Clone, Debug)]
pub enum FillOutcome {
    /// Stored: serve `object`.
    Stored {
        /// The object as stored (for a Vary'd response, one variant: a
        /// follower that selects another looks up its own).
        object: Arc<CachedObject>,
        /// What the origin answered: 304 on a revalidation (the object
        /// keeps its stored status), for `Cache-Status: fwd-status`.
        origin_status: u16,
    },
    /// Being stored: the head is here and the body arrives as it comes.
    Streaming(Arc<StreamingHead>),
    /// Fetched but not storable (or too large): fetch for yourself.
    NotStored,
    /// The origin failed: answer with this error, or a stale copy if allowed.
    Failed(ProxyError),
    /// The origin answered with an error (5xx) that is not stored: every
    /// follower answers with it (or a stale copy if allowed) instead of
    /// asking the failing origin again.
    Answered(Arc<ErrorAnswer>),
}

/// Who asked for a fetch, as far as sharing its answer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Requester {
    /// No `Cookie` and no `Authorization`: the answer speaks for the URL.
    Anonymous,
    /// Credentials came with the request: the answer may be about them
    /// (a framework's debug page or a WAF page quotes the request, its
    /// cookies included), so it never speaks for other clients.
    Credentialed,
}

/// An origin's error answer (5xx, not storable) as every request that
/// waited for the fetch gets it. The origin's own page is only shared when
/// nothing in it belongs to one client: the leader's request was
/// [`Requester::Anonymous`], and the answer has no `Set-Cookie`, is not
/// `private` or `no-store`, has no `Vary` or `Content-Encoding` that another
/// request might not match; otherwise followers get a plain page with the
/// same status (and `Retry-After`, which tells every client the same thing).
#[derive(Debug)]
pub struct ErrorAnswer {
    /// The origin's status.
    pub status: StatusCode,
    /// End-to-end headers to send (hop-by-hop removed).
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl ErrorAnswer {
    /// The answer for followers of a request answered `status` with
    /// `headers` and, when it was read whole and small, `body`.
    pub(crate) fn for_followers(
        status: StatusCode,
        headers: &HeaderMap,
        body: Option<Bytes>,
        requester: Requester,
    ) -> Self {
        let personal = requester == Requester::Credentialed
            || headers.contains_key(http::header::SET_COOKIE)
            || headers.contains_key(VARY)
            || headers.contains_key(http::header::CONTENT_ENCODING)
            || {
                let (cc, _) = calmcache_core::CacheControl::for_response(headers);
                cc.private || cc.no_store
            };
        match body.filter(|_| !personal) {
            Some(body) => ErrorAnswer {
                status,
                headers: detach_headers(headers, &[]),
                body,
            },
            None => {
                let mut own = HeaderMap::new();
                own.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                if let Some(v) = headers.get(http::header::RETRY_AFTER) {
                    own.insert(http::header::RETRY_AFTER, v.clone());
                }
                let text = format!(
                    "{} {}: the origin answered with an error\n",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or("Error")
                );
                ErrorAnswer {
                    status,
                    headers: own,
                    body: Bytes::from(text),
                }
            }
        }
    }
}
