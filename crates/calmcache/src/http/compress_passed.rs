//! Compression of answers the cache does not store (a route's
//! `compress_passed`, NGINX's `gzip on`): the route's settings, the
//! decision (a pure function of the request's and the answer's headers),
//! and the answer rewritten around a [`GzipBody`].
//!
//! Stored objects are compressed once, at store time, by `compress.rs`
//! (the `compress` key); this module never touches them. The decision
//! follows NGINX's gzip filter: only statuses 200, 403 and 404 (so never a
//! 206, 204 or 304), not an answer with `Content-Encoding`, not one whose
//! known `Content-Length` is below `min_length`, only the configured media
//! types; plus what NGINX leaves out: not a request with `Range`, not an
//! answer with `Cache-Control: no-transform` (RFC 9110 §7.7), not an answer
//! with `Content-Range`. An answer that qualifies gets
//! `Vary: Accept-Encoding` whoever asked (as NGINX's `gzip_vary`: the
//! identity answer varies too), and for a client whose `Accept-Encoding`
//! takes gzip (q-values, `compress::negotiate`) it is encoded: no
//! `Content-Length` nor `Accept-Ranges`, `Content-Encoding: gzip`, the
//! `ETag` made weak (RFC 9110 §8.8.3). A HEAD gets the `Vary` and nothing
//! else (its answer has no body to encode).
//!
//! Must not import anything of the crate outside `http/`.

use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, ETAG, RANGE, VARY,
};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::http::body::ResponseBody;
use crate::http::compress::{self, Coding};
use crate::http::gzip_stream::GzipBody;

/// A route's `compress_passed`, `compress_passed_types` and
/// `compress_passed_min_length`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PassedCompression {
    /// Codings made on the fly, in preference order; empty: off (the
    /// default: a passed answer is relayed exactly as the origin sent it).
    pub codings: Vec<Coding>,
    /// Media types compressed (`text/html`, `text/*`, or `*` for any).
    pub types: Vec<MediaRange>,
    /// Answers whose `Content-Length` is below this are sent as they are
    /// (NGINX's `gzip_min_length`); an answer of unknown length is
    /// compressed whatever its size.
    pub min_length: u64,
}

/// One entry of `compress_passed_types`, lower-cased at parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaRange {
    /// `*`: any type, and an answer without `Content-Type`.
    Any,
    /// `text/*`: any subtype of this type.
    Type(String),
    /// `text/html`: this type and subtype (parameters ignored).
    Exact(String),
}

impl MediaRange {
    /// Parses `type/subtype`, `type/*` or `*`; None for anything else.
    pub fn parse(text: &str) -> Option<MediaRange> {
        let text = text.trim().to_ascii_lowercase();
        if text == "*" || text == "*/*" {
            return Some(MediaRange::Any);
        }
        let (ty, sub) = text.split_once('/')?;
        let token = |s: &str| !s.is_empty() && s.bytes().all(is_tchar);
        if !token(ty) || ty == "*" {
            return None;
        }
        if sub == "*" {
            return Some(MediaRange::Type(ty.to_owned()));
        }
        token(sub).then(|| MediaRange::Exact(text.clone()))
    }

    /// Whether `essence` (`type/subtype`, lower case) is in this range.
    fn covers(&self, essence: &str) -> bool {
        match self {
            MediaRange::Any => true,
            MediaRange::Type(ty) => essence
                .split_once('/')
                .is_some_and(|(t, _)| t == ty.as_str()),
            MediaRange::Exact(exact) => essence == exact.as_str(),
        }
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// What the request allows: read before it is sent upstream (the request
/// itself is gone by the time the answer comes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    /// The request asked for a body this coding may encode.
    Takes(Coding),
    /// Identity for this client (no acceptable coding, a `Range`, a HEAD).
    Identity,
}

/// What is done to one passed answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Passed {
    /// Relayed as it is (compression off, or the answer does not qualify).
    Untouched,
    /// Identity for this client, but the answer varies by Accept-Encoding.
    Varies,
    /// Encoded with this coding.
    Encode(Coding),
}

impl PassedCompression {
    /// Off: no coding configured.
    pub(crate) fn is_off(&self) -> bool {
        self.codings.is_empty()
    }

    /// The request side of the decision: `headers` are the client's,
    /// `head_only` whether the answer has no body (HEAD).
    pub(crate) fn client(&self, ask: ClientAsk<'_>) -> Client {
        if self.is_off() || ask.head_only || ask.headers.contains_key(RANGE) {
            return Client::Identity;
        }
        let accept = ask.headers.get_all(ACCEPT_ENCODING).iter();
        match compress::negotiate(accept, &self.codings) {
            Some(coding) => Client::Takes(coding),
            None => Client::Identity,
        }
    }

    /// The decision for an answer with `status` and `headers`, to a client
    /// as [`PassedCompression::client`] found it.
    pub(crate) fn decide(&self, client: Client, status: StatusCode, headers: &HeaderMap) -> Passed {
        if self.is_off() || !self.qualifies(status, headers) {
            return Passed::Untouched;
        }
        match client {
            Client::Takes(coding) => Passed::Encode(coding),
            Client::Identity => Passed::Varies,
        }
    }

    /// The answer side: status, codings, length, type (see the module doc).
    fn qualifies(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        // NGINX's gzip filter: 200, 403 and 404 only.
        let status_ok = matches!(status.as_u16(), 200 | 403 | 404);
        status_ok
            && !headers.contains_key(CONTENT_ENCODING)
            && !headers.contains_key(CONTENT_RANGE)
            && !no_transform(headers)
            && self.long_enough(headers)
            && self.type_listed(headers)
    }

    fn long_enough(&self, headers: &HeaderMap) -> bool {
        let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
        match lengths
            .next()
            .map(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        {
            None => true,
            Some(Some(len)) => len >= self.min_length,
            // An unreadable length: leave the answer alone.
            Some(None) => false,
        }
    }

    fn type_listed(&self, headers: &HeaderMap) -> bool {
        let mut types = headers.get_all(CONTENT_TYPE).iter();
        let (Some(value), None) = (types.next(), types.next()) else {
            // No type (only `*` takes it) or several (RFC 9110 §5.3: not a list).
            return headers.get(CONTENT_TYPE).is_none() && self.types.contains(&MediaRange::Any);
        };
        let Ok(text) = value.to_str() else {
            return false;
        };
        let essence = text
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        self.types.iter().any(|range| range.covers(&essence))
    }

    /// Applies the decision to `resp`: the answer, compressed or with its
    /// `Vary`, or as it was.
    pub(crate) fn apply(
        &self,
        client: Client,
        resp: Response<ResponseBody>,
    ) -> Response<ResponseBody> {
        let passed = self.decide(client, resp.status(), resp.headers());
        if passed == Passed::Untouched {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        add_vary(&mut parts.headers);
        match passed {
            Passed::Encode(Coding::Gzip) => {
                encoded_headers(&mut parts.headers, Coding::Gzip);
                Response::from_parts(parts, ResponseBody::stream(GzipBody::new(body)))
            }
            // br is refused by validation (not made on the fly): identity.
            Passed::Encode(Coding::Br) | Passed::Varies | Passed::Untouched => {
                Response::from_parts(parts, body)
            }
        }
    }
}

/// The request side's inputs.
pub(crate) struct ClientAsk<'a> {
    /// The client's request headers.
    pub headers: &'a HeaderMap,
    /// The answer has no body (HEAD).
    pub head_only: bool,
}

/// `Cache-Control: no-transform` (or a line that cannot be read, so
/// cannot be shown not to say it).
fn no_transform(headers: &HeaderMap) -> bool {
    headers.get_all(CACHE_CONTROL).iter().any(|line| {
        line.to_str().map_or(true, |line| {
            line.split(',').any(|d| {
                let name = d.split('=').next().unwrap_or("");
                name.trim().eq_ignore_ascii_case("no-transform")
            })
        })
    })
}

/// Adds `Accept-Encoding` to `Vary` unless it (or `*`) is there already.
fn add_vary(headers: &mut HeaderMap) {
    let listed = headers.get_all(VARY).iter().any(|line| {
        String::from_utf8_lossy(line.as_bytes())
            .split(',')
            .map(str::trim)
            .any(|name| name == "*" || name.eq_ignore_ascii_case("accept-encoding"))
    });
    if !listed {
        headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

/// The head of an encoded answer: its length unknown until the end, no
/// ranges of the encoded bytes offered, the coding named, the ETag weak.
fn encoded_headers(headers: &mut HeaderMap, coding: Coding) {
    headers.remove(CONTENT_LENGTH);
    headers.remove(ACCEPT_RANGES);
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.as_str()));
    // RFC 9110 §8.8.3: other bytes, so no longer the strong validator.
    let weak = headers.get(ETAG).map(compress::weak_etag);
    match weak {
        Some(Some(weak)) => {
            headers.insert(ETAG, weak);
        }
        Some(None) => {
            headers.remove(ETAG);
        }
        None => {}
    }
}

#[cfg(test)]
#[path = "compress_passed_tests.rs"]
mod tests;
