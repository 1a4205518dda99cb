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
//!   ├─ body_key = "json", not JSON, or a Content-Type other than
//!   │  application/json or */*+json ── passed uncached (detail=body-not-json)
//!   └─ key = URI key + \0v + METHOD + ":"
//!            + sha256(Content-Type \0 Content-Encoding \0 body | canonical JSON)
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
//!   the client gets the whole answer.
//! - The body's Content-Type and Content-Encoding are in the digest: the
//!   same bytes sent as `text/plain` (which a GraphQL server answers with
//!   an error, often a 200) never share an entry with them sent as
//!   `application/json`. Each header is taken whole, trimmed and
//!   lower-cased (several fields joined by `,`): two spellings of one media
//!   type (`;charset=utf-8`, `; charset=utf-8`) are two entries, a split of
//!   the cache and never a merge of two requests. A POST is refreshed without validators.
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
use http::{header, HeaderMap, Request};
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
    let max = route.cfg.requests.max_body_key;
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
    let framing = Framing::of(req.headers());
    let Some(digest) = digest(route.cfg.requests.body_key, &framing, &bytes) else {
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

/// How a body is framed: its Content-Type and Content-Encoding, each
/// trimmed and lower-cased (empty when absent). Header values hold no NUL,
/// so `media \0 coding \0 body` is read back one way only.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Framing {
    pub media: String,
    pub coding: String,
}

impl Framing {
    /// The framing `headers` declare.
    pub(crate) fn of(headers: &HeaderMap) -> Framing {
        Framing {
            media: normalised(headers, &header::CONTENT_TYPE),
            coding: normalised(headers, &header::CONTENT_ENCODING),
        }
    }

    /// True for `application/json` and any `*/*+json`, parameters aside.
    fn is_json(&self) -> bool {
        let essence = self.media.split(';').next().unwrap_or_default().trim();
        essence == "application/json" || essence.ends_with("+json")
    }
}

/// Every `name` field of `headers`, joined by `,`, trimmed, lower-cased.
fn normalised(headers: &HeaderMap, name: &header::HeaderName) -> String {
    let mut out = String::new();
    for (i, value) in headers.get_all(name).iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(
            &String::from_utf8_lossy(value.as_bytes())
                .trim()
                .to_ascii_lowercase(),
        );
    }
    out
}

/// The hex SHA-256 of `body` as `how` keys it, framed by `framing`; `None`
/// when `how` is JSON and the body is not JSON (or has an object with a
/// name twice) or is not declared JSON (Content-Type).
pub(crate) fn digest(how: BodyKey, framing: &Framing, body: &[u8]) -> Option<String> {
    let mut sum = Sha256::new();
    sum.update(framing.media.as_bytes());
    sum.update([0]);
    sum.update(framing.coding.as_bytes());
    sum.update([0]);
    match how {
        BodyKey::Bytes => sum.update(body),
        BodyKey::Json if framing.is_json() => {
            sum.update(crate::http::canonical_json::canonical(body)?);
        }
        BodyKey::Json => return None,
    }
    Some(hex(&sum.finalize()))
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

    fn json() -> Framing {
        framing(&[("content-type", "application/json")])
    }

    fn framing(fields: &[(&str, &str)]) -> Framing {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        Framing::of(&headers)
    }

    #[test]
    fn digests_are_hex_sha256_of_the_framing_and_the_body() {
        let d = digest(BodyKey::Bytes, &Framing::default(), b"").unwrap();
        // sha256("\0\0")
        assert_eq!(
            d,
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"
        );
        let bytes = |framing: &Framing, body: &[u8]| digest(BodyKey::Bytes, framing, body);
        assert_ne!(bytes(&json(), b"{\"a\":1}"), bytes(&json(), b"{ \"a\":1}"));
        assert_eq!(
            digest(BodyKey::Json, &json(), b"{\"a\":1}"),
            digest(BodyKey::Json, &json(), b"{ \"a\" : 1 }")
        );
        assert_eq!(digest(BodyKey::Json, &json(), b"{\"a\":1"), None);
    }

    #[test]
    fn the_same_bytes_framed_otherwise_are_another_key() {
        let body = b"{\"query\":\"{ me }\"}";
        let plain = framing(&[("content-type", "text/plain")]);
        let graphql = framing(&[("content-type", "application/graphql")]);
        let gzip = framing(&[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ]);
        let keys = [json(), plain, graphql, gzip, Framing::default()]
            .map(|f| digest(BodyKey::Bytes, &f, body));
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Case and surrounding space aside, one spelling is one key.
        let upper = framing(&[("content-type", " Application/JSON ")]);
        assert_eq!(
            digest(BodyKey::Bytes, &upper, body),
            digest(BodyKey::Bytes, &json(), body)
        );
    }

    #[test]
    fn json_keys_only_bodies_declared_json() {
        let body = b"{\"a\":1}";
        for media in [
            "application/json",
            "application/json; charset=utf-8",
            "application/graphql-response+json",
            "application/vnd.api+json",
        ] {
            let f = framing(&[("content-type", media)]);
            assert!(digest(BodyKey::Json, &f, body).is_some(), "{media}");
        }
        for media in ["text/plain", "application/graphql", "application/jsonx"] {
            let f = framing(&[("content-type", media)]);
            assert_eq!(digest(BodyKey::Json, &f, body), None, "{media}");
        }
        assert_eq!(digest(BodyKey::Json, &Framing::default(), body), None);
    }
}

#[cfg(test)]
#[path = "body_key_props.rs"]
mod props;
