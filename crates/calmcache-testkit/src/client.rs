//! One HTTP/1.1 request with timing, on a fresh connection, and the parsed
//! RFC 9211 `Cache-Status` of its reply.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long one request may take before the test fails (never hang a suite).
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// The member name calmcache uses in `Cache-Status`.
pub const CACHE_NAME: &str = "calmcache";

/// What came back.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// Body as text (lossy UTF-8).
    pub body: String,
    /// Body as received, byte for byte (compressed bodies, binary parts).
    pub bytes: Bytes,
    /// Time from sending to the end of the body.
    pub elapsed: Duration,
}

impl Reply {
    /// The `Cache-Status` header (field lines joined with `, `), or "".
    pub fn cache_status(&self) -> String {
        self.header_all("cache-status").join(", ")
    }

    /// A header as text (the first field line), or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Every field line of a header, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }

    /// True when the header is present (even empty).
    pub fn has_header(&self, name: &str) -> bool {
        self.headers.contains_key(name)
    }

    /// Every `Cache-Status` list member, upstream caches first (RFC 9211 §2).
    pub fn cache_status_members(&self) -> Vec<CacheStatusParams> {
        parse_cache_status(&self.cache_status())
    }

    /// calmcache's own `Cache-Status` member (the last one named `calmcache`),
    /// or an empty one (`has` always false) when there is none.
    pub fn cache_status_params(&self) -> CacheStatusParams {
        self.cache_status_members()
            .into_iter()
            .rev()
            .find(|m| m.cache == CACHE_NAME)
            .unwrap_or_default()
    }

    /// True when calmcache answered from its cache (`Cache-Status: hit`).
    pub fn is_hit(&self) -> bool {
        self.cache_status_params().has("hit")
    }

    /// True when calmcache stored the answer or served it from its cache.
    pub fn is_stored_or_hit(&self) -> bool {
        let status = self.cache_status();
        status.contains("stored") || status.contains("hit")
    }
}

/// One `Cache-Status` list member: the cache's name and its parameters, e.g.
/// `calmcache; fwd=uri-miss; fwd-status=200; stored; ttl=60`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStatusParams {
    /// The member's name (the cache that added it); "" when absent.
    pub cache: String,
    /// Parameters in order; a bare parameter (`hit`, `stored`) has no value.
    /// Quoted string values are unquoted.
    pub params: Vec<(String, Option<String>)>,
}

impl CacheStatusParams {
    /// True when the parameter is present, with or without a value.
    pub fn has(&self, name: &str) -> bool {
        self.params.iter().any(|(k, _)| k == name)
    }

    /// A parameter's value (`param("fwd") == Some("uri-miss")`); `None` when
    /// absent or bare.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// `ttl` as seconds (an integer in the current vocabulary; decimals are
    /// accepted too).
    pub fn ttl(&self) -> Option<f64> {
        self.param("ttl")?.parse().ok()
    }

    /// True when `ttl` is present and an integer (RFC 9211 §2.7).
    pub fn ttl_is_integer(&self) -> bool {
        self.param("ttl").is_some_and(|t| t.parse::<i64>().is_ok())
    }
}

impl fmt::Display for CacheStatusParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cache)?;
        for (k, v) in &self.params {
            match v {
                Some(v) => write!(f, "; {k}={v}")?,
                None => write!(f, "; {k}")?,
            }
        }
        Ok(())
    }
}

/// Parses a `Cache-Status` value, an RFC 8941 list: members split on commas
/// outside quoted strings, each a name and `;`-separated parameters.
pub fn parse_cache_status(value: &str) -> Vec<CacheStatusParams> {
    split_outside_quotes(value, ',')
        .into_iter()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|member| {
            let mut parts = split_outside_quotes(member, ';').into_iter();
            let cache = unquote(parts.next().unwrap_or("").trim());
            let params = parts
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.trim().to_string(), Some(unquote(v.trim()))),
                    None => (p.to_string(), None),
                })
                .collect();
            CacheStatusParams { cache, params }
        })
        .collect()
}

fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            out.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&s[start..]);
    out
}

fn unquote(s: &str) -> String {
    let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
        return s.to_string();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// `GET url`.
pub async fn get(url: &str) -> Reply {
    request(Method::GET, url, &[]).await
}

/// A request with a method and headers (same as [`request`]; kept for older tests).
pub async fn get_with(method: Method, url: &str, headers: &[(&str, &str)]) -> Reply {
    request(method, url, headers).await
}

/// A request with any method and headers and no body; panics on connection
/// errors and after 30 s (tests).
pub async fn request(method: Method, url: &str, headers: &[(&str, &str)]) -> Reply {
    request_with_body(method, url, headers, Bytes::new()).await
}

/// A request with any method, headers and a body (sent with its
/// `Content-Length` when not empty); panics on connection errors and after 30 s.
pub async fn request_with_body(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let what = format!("{method} {url}");
    let exchange = exchange(method, url, headers, body.into());
    tokio::time::timeout(REQUEST_LIMIT, exchange)
        .await
        .unwrap_or_else(|_| panic!("{what}: no complete answer within {REQUEST_LIMIT:?}"))
}

async fn exchange(method: Method, url: &str, headers: &[(&str, &str)], body: Bytes) -> Reply {
    let uri: http::Uri = url.parse().expect("url");
    let authority = uri.authority().expect("authority").to_string();
    let started = Instant::now();
    let stream = TcpStream::connect(&authority).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()));
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req = req.header("host", authority);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body)).expect("request");
    let resp = sender.send_request(req).await.expect("send");
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
        elapsed: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_is_the_last_member_named_calmcache() {
        let members = parse_cache_status(
            r#"upstream-cache; hit, calmcache; fwd=uri-miss; fwd-status=200; stored; ttl=60; key="a;b,c\"d""#,
        );
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].cache, "upstream-cache");
        assert!(members[0].has("hit"));
        let ours = &members[1];
        assert_eq!(ours.cache, "calmcache");
        assert_eq!(ours.param("fwd"), Some("uri-miss"));
        assert_eq!(ours.param("fwd-status"), Some("200"));
        assert!(ours.has("stored") && !ours.has("hit"));
        assert_eq!(ours.param("stored"), None);
        assert_eq!(ours.ttl(), Some(60.0));
        assert!(ours.ttl_is_integer());
        assert_eq!(ours.param("key"), Some("a;b,c\"d"));
    }

    #[test]
    fn decimal_ttl_is_read_but_is_not_an_integer() {
        let m = &parse_cache_status("calmcache; hit; ttl=-0.2")[0];
        assert_eq!(m.ttl(), Some(-0.2));
        assert!(!m.ttl_is_integer());
    }
}
