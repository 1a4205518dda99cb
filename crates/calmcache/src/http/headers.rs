//! Header rewriting: hop-by-hop removal (RFC 9110 §7.6.1), `X-Forwarded-*`,
//! the cache's own `Age` and `Cache-Status` (RFC 9111 §5.1, RFC 9211),
//! the targeted fields and cache tags a client is not shown (RFC 9213), and
//! what makes a WebSocket handshake (RFC 6455 §4.1).

use std::net::IpAddr;

use calmcache_core::Report;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The RFC 9211 `Cache-Status` header.
pub(crate) static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1).
pub(crate) static HOP_BY_HOP: [HeaderName; 10] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("http2-settings"),
];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip_hop_by_hop_keeping(headers, |_| false);
}

/// [`strip_hop_by_hop`], except that `Connection` cannot remove the fields
/// `keep` picks (a request's Host and keyed fields: edge.rs).
pub(crate) fn strip_hop_by_hop_keeping(
    headers: &mut HeaderMap,
    keep: impl Fn(&HeaderName) -> bool,
) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        // The usual tokens name fields removed below anyway: no allocation.
        .filter(|t| {
            !["keep-alive", "close", "upgrade", "te"]
                .iter()
                .any(|k| t.eq_ignore_ascii_case(k))
        })
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .filter(|name| !keep(name))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// `token` among the comma-separated values of field `name`, whatever the
/// case (an `Upgrade` protocol's version, `websocket/13`, is ignored).
pub(crate) fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let protocol = t.split('/').next().unwrap_or(t);
            protocol.trim().eq_ignore_ascii_case(token)
        })
}

/// Appends the client address to `X-Forwarded-For` and sets `X-Forwarded-Proto`.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, client: IpAddr, proto: &'static str) {
    let value = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {client}"),
        None => client.to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR.clone(), value);
    }
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
}

/// A field value without the OWS around it (RFC 9110 §5.6.3: OWS is
/// `*( SP / HTAB )`).
pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Adds our `Cache-Status` member after any an upstream cache put there
/// (RFC 9211 §2: the last member is the cache closest to the client).
pub(crate) fn set_cache_status(headers: &mut HeaderMap, report: &Report, key: Option<&str>) {
    let mut value = String::with_capacity(64);
    for prior in headers.get_all(&CACHE_STATUS) {
        if let Ok(prior) = prior.to_str() {
            value.push_str(prior);
            value.push_str(", ");
        }
    }
    report.write_member(key, &mut value);
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(CACHE_STATUS.clone(), value);
    }
}

/// Sets `Age` in whole seconds (RFC 9111 §5.1).
pub(crate) fn set_age(headers: &mut HeaderMap, age_secs: u64) {
    headers.insert(header::AGE, HeaderValue::from(age_secs));
}

/// The `Host` the client asked for.
pub(crate) fn host_of<B>(req: &http::Request<B>) -> &str {
    req.headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("")
}

/// Copies header values out of hyper's read buffer and drops the fields that
/// must not be stored: [`calmcache_core::object::stored_headers`].
pub(crate) fn detach_headers(headers: &http::HeaderMap, strip: &[String]) -> http::HeaderMap {
    calmcache_core::object::stored_headers(headers, strip)
}

/// True for a WebSocket handshake: `Connection` has the `upgrade` token and
/// `Upgrade` names `websocket` (both case-insensitive, in token lists).
pub(crate) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    has_token(headers, &header::CONNECTION, "upgrade")
        && has_token(headers, &header::UPGRADE, "websocket")
}

/// Which of the cache's own response fields a client is shown (a route's
/// `forward_targeted_cache_control` and `expose_cache_tags`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shown {
    /// The RFC 9213 targeted fields (`CDN-Cache-Control`,
    /// `Calmcache-Cache-Control`).
    pub targeted_cache_control: bool,
    /// The cache tags (`Cache-Tag`, `Surrogate-Key`).
    pub cache_tags: bool,
}

/// Removes the RFC 9213 targeted fields and the cache tags from a
/// response to a client, unless `shown` keeps them.
pub(crate) fn strip_targeted(headers: &mut HeaderMap, shown: Shown) {
    if !shown.targeted_cache_control {
        for name in calmcache_core::cache_control::TARGETED {
            headers.remove(name);
        }
    }
    if !shown.cache_tags {
        for name in calmcache_core::object::TAG_FIELDS {
            headers.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::CONTENT_TYPE));
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        add_forwarded(&mut h, "127.0.0.1".parse().unwrap(), "http");
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
    }

    #[test]
    fn cache_status_is_appended_after_upstream_members() {
        // RFC 9211 §2: members are ordered from the origin to the client.
        let mut h = HeaderMap::new();
        h.insert("cache-status", HeaderValue::from_static("upstream; hit"));
        let report = calmcache_core::Report {
            ttl: Some(3),
            ..calmcache_core::CacheStatus::Hit.report()
        };
        set_cache_status(&mut h, &report, None);
        assert_eq!(h["cache-status"], "upstream; hit, calmcache; hit; ttl=3");
    }
}
