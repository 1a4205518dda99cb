//! Requests keyed by their body: QUERY (a safe method with a body, IETF
//! httpbis) on every route with a zone, and POST on routes with
//! `cache_post = true` (GraphQL queries, JSON-RPC reads).
//!
//! ```text
//! QUERY, or POST with cache_post, on a route with a zone
//!   read up to max_body_key, each frame within the upstream's send_timeout
//!   ├─ malformed or cut short: 400, stalled: 408 (request_body.rs's rules)
//!   ├─ larger ─────────── passed uncached, what was read + the rest streamed
//!   │                     (Cache-Status: detail=body-too-large)
//!   ├─ body_key = "json", not JSON ── passed uncached (detail=body-not-json)
//!   └─ key = URI key + \0v + METHOD + ":" + sha256(body | canonical JSON)
//!      looked up, coalesced, stored and refreshed like a GET; every fetch
//!      of the key (miss, background refresh, revalidation) re-sends the body
//! ```
//!
//! Decisions, each the safe side of a shared cache:
//! - The method is in the key: a POST answer never serves a GET or a QUERY
//!   of the same URL, nor the reverse; a SHA-256 of the body keeps two
//!   bodies apart. The key lives under the URI's own, as Vary variants do
//!   (calmcache_core::key): purges by URL, prefix and tag reach it.
//! - `Range` and preconditions are dropped from such requests: RFC 9110
//!   defines Range for GET only and leaves POST preconditions to the origin;
//!   the client gets the whole answer. A POST is refreshed without validators.
//! - A POST answer is stored only when fresh by explicit word (fill/send.rs).
//! - On a `cache_post` route POST is a read: it never invalidates (RFC 9111
//!   §4.4), or one large query would purge every cached one. The
//!   invalidation other unsafe requests do reaches the URL's own entry, not
//!   its body variants: finding those is a zone scan, which a client must
//!   not be able to cause (purges, which are the operator's, do scan).
//! - Body-keyed entries stay in this node's zones: the fleet's shared tier
//!   never takes them (fill/fleet.rs).
//!
//! Must not look anything up: it reads, keys, or passes.

use calmcache_core::CacheStatus;
use http::{header, Request};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

use crate::config::BodyKey;
use crate::net::conn::Peer;
use crate::proxy::answer::Answer;
use crate::proxy::fill::FetchBody;
use crate::proxy::pass::{pass_read, refused};
use crate::proxy::request_body::{read_up_to, Read};
use crate::proxy::state::{Proxy, Route};

/// A request's body, read whole and digested for its key.
pub(crate) struct KeyedBody {
    /// What every fetch of the key sends.
    pub fetch: FetchBody,
    /// SHA-256 of the body as keyed, in lower-case hex.
    pub digest: String,
}

/// Reads the body of a request keyed by it ([`Route::keyed_by_body`]) and digests it; or answers
/// it: refused (400, 408), or passed uncached (too large, not JSON).
pub(crate) async fn read<'r>(
    proxy: &Proxy,
    route: &'r Route,
    mut req: Request<Incoming>,
    client: Peer,
) -> Result<(Request<Incoming>, KeyedBody), Answer<'r>> {
    let limit = route.upstream.send_timeout;
    let max = route.cfg.max_body_key;
    let bytes = match read_up_to(req.body_mut(), limit, max).await {
        Ok(Read::Whole(bytes)) => bytes,
        Ok(Read::Over(prefix)) => {
            route.activity.body_key_passed.inc();
            let report = CacheStatus::Bypass.report().detail("body-too-large");
            return Err(pass_read(proxy, route, req, prefix, client, report).await);
        }
        Err(e) => {
            proxy.metrics.requests_refused.inc();
            return Err(Answer::refused(refused(&e, req.version())));
        }
    };
    let Some(digest) = digest(route.cfg.body_key, &bytes) else {
        route.activity.body_key_passed.inc();
        let report = CacheStatus::Bypass.report().detail("body-not-json");
        return Err(pass_read(proxy, route, req, bytes, client, report).await);
    };
    // The whole answer for everyone: no ranges, no preconditions.
    for name in [
        header::RANGE,
        header::IF_RANGE,
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_MATCH,
        header::IF_UNMODIFIED_SINCE,
    ] {
        req.headers_mut().remove(name);
    }
    let fetch = FetchBody {
        method: req.method().clone(),
        bytes,
    };
    Ok((req, KeyedBody { fetch, digest }))
}

/// The hex SHA-256 of `body` as `how` keys it; `None` when `how` is JSON
/// and `body` is not JSON (or has an object with a name twice).
pub(crate) fn digest(how: BodyKey, body: &[u8]) -> Option<String> {
    let sum = match how {
        BodyKey::Bytes => Sha256::digest(body),
        BodyKey::Json => Sha256::digest(crate::http::canonical_json::canonical(body)?),
    };
    Some(hex(&sum))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn digests_are_hex_sha256() {
        let d = digest(BodyKey::Bytes, b"").unwrap();
        assert_eq!(
            d,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(
            digest(BodyKey::Bytes, b"{\"a\":1}"),
            digest(BodyKey::Bytes, b"{ \"a\":1}")
        );
        assert_eq!(
            digest(BodyKey::Json, b"{\"a\":1}"),
            digest(BodyKey::Json, b"{ \"a\" : 1 }")
        );
        assert_eq!(digest(BodyKey::Json, b"{\"a\":1"), None);
    }
}

#[cfg(test)]
#[path = "body_key_props.rs"]
mod props;
