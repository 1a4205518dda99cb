//! What a fetch in flight tells the requests that waited for it: the
//! object stored, a body still arriving, an error, or the origin's error
//! answer shared with every follower; and what only the request that
//! started it gets ([`OwnFields`]).

use std::sync::Arc;

use bytes::Bytes;
use calmcache_core::CachedObject;
use http::header::VARY;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

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

/// Fields of the origin's answer that the stored copy may not keep but the
/// client whose request fetched it still gets: the origin's `Set-Cookie`
/// on a route that ignores it (`ignore_headers`), and the fields it named
/// in `private="..."` or `no-cache="..."` (RFC 9111 §5.2.2.7, §5.2.2.4
/// restrict storing and reuse, not the answer to the request that asked).
/// Never `Vary`: an ignored Vary is gone for every client alike. Followers
/// and later hits are served from the stored copy, so they never get these.
#[derive(Debug, Default)]
pub(crate) struct OwnFields(Vec<(HeaderName, HeaderValue)>);

impl OwnFields {
    /// The fields of `headers` named in `stripped` (lower-cased, as
    /// [`calmcache_core::Storable::strip_fields`] has them), Vary aside.
    /// Empty (no allocation) when nothing was stripped.
    pub(crate) fn of(headers: &HeaderMap, stripped: &[String]) -> Self {
        let mut own = Vec::new();
        for name in stripped.iter().filter(|name| *name != "vary") {
            let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                continue;
            };
            for value in headers.get_all(&name) {
                own.push((name.clone(), value.clone()));
            }
        }
        OwnFields(own)
    }

    /// Appends the fields to the answer's `headers`, after whatever the
    /// stored copy gave it.
    pub(crate) fn add_to(self, headers: &mut HeaderMap) {
        for (name, value) in self.0 {
            headers.append(name, value);
        }
    }
}
