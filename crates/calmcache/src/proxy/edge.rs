//! The edge: a client request checked and normalised once, when it arrives,
//! into the one trusted view that route matching, the cache key, Vary
//! selection and the upstream request all read. Nothing past the edge reads
//! raw client framing or a field the edge did not pass.
//!
//! ```text
//! admit (before the route is known)
//!   authority   HTTP/1.1: exactly one Host; HTTP/2: :authority (a Host beside it
//!               must agree); absolute-form: its authority (Host must agree);
//!               host[:port] syntax, no userinfo (RFC 9112 §3.2, RFC 9113 §8.3.1);
//!               lower-cased, trailing dot and the scheme's default port dropped,
//!               written back as the request's one Host (so HTTP/2 requests
//!               reach the origin with a Host too)
//!   target      origin-form or absolute-form only; the path normalised (RFC 3986
//!               §6.2.2: unreserved escapes decoded, others upper-cased; §5.2.4:
//!               dot-segments removed; repeated slashes merged); the request's
//!               URI becomes that origin-form. Routes match a stricter form in
//!               which every printable escape (%2F too) is decoded first.
//!               `%00` in the path: 400, as NGINX.
//!   framing     Transfer-Encoding exactly `chunked` (else 501, RFC 9112 §6.1);
//!               Content-Length in plain digits, one value; Expect only
//!               `100-continue` (else 417); HTTP/2 values without leading or
//!               trailing whitespace (RFC 9113 §8.2.1); HTTP/2 cookie crumbs
//!               joined for the HTTP/1.1 origin (RFC 9113 §8.2.3); a GET or HEAD
//!               body is read whole once the route is known (request_body.rs)
//! prepare (once the route is known)
//!   hop-by-hop  removed, with the fields `Connection` names, except Host and
//!               fields the route's key reads (RFC 9110 §7.6.1)
//!   names       with `_` dropped unless the route allows them
//!   forwarding  X-Forwarded-Host/-Proto/..., Forwarded, X-Original-URL,
//!               X-Rewrite-URL dropped unless the client is one of the route's
//!               trusted_proxies or the key reads them; a trusted
//!               X-Forwarded-Proto sets the request's scheme
//! ```
//!
//! Invariant: the hit path pays one pass over the request's fields and
//! allocates nothing when the request needs no rewriting.
//! This module must not look anything up or talk to an upstream.

use std::borrow::Cow;
use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Uri, Version};

use crate::config::RouteConfig;
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::{strip_hop_by_hop_keeping, HOP_BY_HOP};
use crate::net::conn::Peer;

/// What [`admit`] learnt of a request, for [`prepare`] and route matching.
#[derive(Debug, Default)]
pub(crate) struct Admitted {
    /// The path and query routes match, when it is not the request's own.
    match_target: Option<String>,
    /// The origin-form target with repeated slashes kept, for routes with
    /// `merge_slashes = false`; `None` when merging changed nothing.
    unmerged: Option<PathAndQuery>,
    /// What the pass over the fields saw.
    seen: Seen,
    /// The target routes are matched against differs from the one keyed and
    /// forwarded: the route must be the same for both (see [`Admitted::recheck`]).
    forms_differ: bool,
    /// A WebSocket handshake, and which kind.
    pub websocket: Handshake,
}

/// How a request asks to open a WebSocket, if it does.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// Not a WebSocket handshake: an ordinary request.
    #[default]
    None,
    /// HTTP/1.1: `Connection: upgrade`, `Upgrade: websocket` (RFC 6455 §4.1).
    Upgrade,
    /// HTTP/2: `CONNECT` with `:protocol = websocket` (RFC 8441 §4).
    Connect,
}

/// Fields that make [`prepare`] do work; all false for most requests.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    hop_by_hop: bool,
    underscore: bool,
    forwarding: bool,
    expect: bool,
}

impl Admitted {
    /// True when the route chosen for [`Admitted::match_target`] must be
    /// checked against the route of the request's own (forwarded) target:
    /// if they differ, the request is ambiguous (a spelling such as
    /// `/api/me/..%2F..%2Fstatic%2Fa.css` that routes as a cached path while
    /// an origin that does not decode `%2F` serves an uncached one).
    pub(crate) fn recheck(&self) -> bool {
        self.forms_differ
    }

    /// The path and query route matching reads: `own` (the request's
    /// normalised target) unless the stricter matching form differs.
    pub(crate) fn match_target<'a>(&'a self, own: &'a str) -> &'a str {
        self.match_target.as_deref().unwrap_or(own)
    }
}

/// Fields through which a client claims to speak for a proxy in front of
/// calmcache, or asks the origin to serve another URL or method. An origin
/// that reflects them (in links, redirects, or a 400 for a contradiction)
/// would poison a shared key with one request. `X-Forwarded-For` is not
/// here: calmcache appends to it.
const FORWARDING: [&str; 18] = [
    "forwarded",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-server",
    "x-forwarded-ssl",
    "x-forwarded-scheme",
    "x-forwarded-protocol",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-host",
    "x-url-scheme",
    "front-end-https",
    "x-http-method-override",
    "x-real-ip",
    "x-scheme",
];

/// Fields that ask the origin for another URL or method than the request
/// line's: never forwarded unless keyed, not even from trusted proxies.
fn is_override(name: &str) -> bool {
    matches!(
        name,
        "x-original-url"
            | "x-rewrite-url"
            | "x-http-method-override"
            | "x-http-method"
            | "x-method-override"
    )
}

/// True for a field [`FORWARDING`] lists, or any other `X-Forwarded-*`
/// but `X-Forwarded-For`.
fn is_forwarding(name: &str) -> bool {
    if !matches!(name.as_bytes().first(), Some(b'x' | b'f')) {
        return false;
    }
    (name.starts_with("x-forwarded-") && name != "x-forwarded-for")
        || FORWARDING.contains(&name)
        || name == "x-http-method"
        || name == "x-method-override"
}

fn refuse(why: impl std::fmt::Display) -> ProxyError {
    ProxyError::downstream(ErrorKind::BadRequest, why)
}

/// Checks `req` and rewrites it into its trusted form (module doc), or
/// says why it is refused (400, 417, 501).
pub(crate) fn admit<B>(req: &mut Request<B>, peer: Peer) -> Result<Admitted, ProxyError> {
    let h2 = req.version() == Version::HTTP_2;
    let mut admitted = Admitted::default();
    let mut hosts = 0usize;
    let mut cookies = 0usize;
    let mut lengths = 0usize;
    for (name, value) in req.headers() {
        let text = name.as_str();
        if *name == header::HOST {
            hosts += 1;
        } else if *name == header::COOKIE {
            cookies += 1;
        } else if *name == header::CONTENT_LENGTH {
            lengths += 1;
        } else if *name == header::TRANSFER_ENCODING {
            transfer_coding(req.headers())?;
        } else if *name == header::EXPECT {
            admitted.seen.expect = true;
        } else if HOP_BY_HOP.contains(name) {
            admitted.seen.hop_by_hop = true;
        } else if text.contains('_') {
            admitted.seen.underscore = true;
            // `X_Forwarded_Host` is `X-Forwarded-Host` to CGI/WSGI servers.
            admitted.seen.forwarding |= is_forwarding(&text.replace('_', "-"));
        } else if is_forwarding(text) {
            admitted.seen.forwarding = true;
        }
        // RFC 9113 §8.2.1: leading or trailing whitespace makes an HTTP/2
        // request malformed (HTTP/1.1 parsing trims it).
        if h2 && matches!(value.as_bytes(), [b' ' | b'\t', ..] | [.., b' ' | b'\t']) {
            return Err(refuse("an HTTP/2 field value with surrounding whitespace"));
        }
    }
    // hyper reads Transfer-Encoding first; the fields pass also saw it as hop-by-hop.
    if req.headers().contains_key(header::TRANSFER_ENCODING) {
        admitted.seen.hop_by_hop = true;
    }
    if lengths > 0 {
        content_length(req.headers_mut(), lengths)?;
    }
    if admitted.seen.expect {
        let http10 = req.version() <= Version::HTTP_10;
        expect(req.headers_mut(), http10)?;
    }
    if cookies > 1 {
        // RFC 9113 §8.2.3 for HTTP/2 crumbs; HTTP/1.1 clients must send one
        // line (RFC 6265 §5.4), and servers that join lines with `,` would
        // read another cookie than the key does.
        join_cookies(req.headers_mut());
    }
    let scheme = peer.scheme();
    if let Some(host) = authority(req, hosts, scheme)? {
        req.headers_mut().insert(header::HOST, host);
    }
    admitted.websocket = handshake(req, admitted.seen.hop_by_hop)?;
    target(req, &mut admitted)?;
    Ok(admitted)
}

/// Whether `req` opens a WebSocket. RFC 8441 §4: an HTTP/2 `CONNECT` with
/// a `:protocol` (hyper hands it over only when the connection's SETTINGS
/// enabled the extended CONNECT) names the protocol the stream will carry;
/// calmcache tunnels `websocket` only, so another is refused with 501, as
/// a transfer coding it does not know is. A `CONNECT` without `:protocol`
/// is no handshake: its authority-form target is refused below (400).
fn handshake<B>(req: &Request<B>, hop_by_hop: bool) -> Result<Handshake, ProxyError> {
    // The method first: a request that is no CONNECT costs one comparison
    // (h2 refuses `:protocol` on any other method as malformed).
    let protocol = match req.method() == http::Method::CONNECT {
        true => req.extensions().get::<hyper::ext::Protocol>(),
        false => None,
    };
    if let Some(protocol) = protocol {
        // Upgrade tokens are case-insensitive (RFC 9110 §7.8).
        if !protocol.as_str().eq_ignore_ascii_case("websocket") {
            return Err(ProxyError::downstream(
                ErrorKind::UnknownProtocol,
                "an extended CONNECT for a protocol other than websocket",
            ));
        }
        return Ok(Handshake::Connect);
    }
    let upgrade = req.version() == Version::HTTP_11
        && hop_by_hop
        && crate::http::headers::is_websocket_upgrade(req.headers());
    Ok(if upgrade {
        Handshake::Upgrade
    } else {
        Handshake::None
    })
}

/// RFC 9112 §6.1: `chunked` is the only coding calmcache decodes, and it
/// may be applied once (hyper already refused a list that does not end in it).
fn transfer_coding(headers: &HeaderMap) -> Result<(), ProxyError> {
    let mut chunked = 0;
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let text = value
            .to_str()
            .map_err(|_| refuse("Transfer-Encoding is not ASCII"))?;
        for coding in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("chunked") {
                return Err(ProxyError::downstream(
                    ErrorKind::NotImplemented,
                    "a transfer coding other than chunked",
                ));
            }
            chunked += 1;
        }
    }
    if chunked != 1 {
        return Err(refuse("chunked must be applied exactly once"));
    }
    Ok(())
}

/// One Content-Length in plain decimal digits (RFC 9110 §8.6): equal
/// repeats are folded into one, a leading zero is dropped (an origin could
/// read `010` as octal), anything else is refused.
fn content_length(headers: &mut HeaderMap, lines: usize) -> Result<(), ProxyError> {
    let mut value: Option<u64> = None;
    let mut canonical = lines == 1;
    for line in headers.get_all(header::CONTENT_LENGTH) {
        let bytes = line.as_bytes();
        for part in bytes.split(|&b| b == b',') {
            let part = part.trim_ascii();
            let n = parse_digits(part).ok_or_else(|| refuse("Content-Length is not a number"))?;
            canonical &= part.len() == bytes.len() && (part.len() == 1 || part[0] != b'0');
            match value {
                Some(v) if v != n => return Err(refuse("Content-Length values disagree")),
                _ => value = Some(n),
            }
        }
    }
    if !canonical {
        if let Some(n) = value {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
    Ok(())
}

/// A non-empty run of at most 19 ASCII digits as a number.
fn parse_digits(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// RFC 9110 §10.1.1: `100-continue` is the one expectation; hyper answers
/// it when the body is first read. Not forwarded: the body streams to the
/// origin either way. HTTP/1.0 requests' `Expect` is ignored.
fn expect(headers: &mut HeaderMap, http10: bool) -> Result<(), ProxyError> {
    let continue_only = headers.get_all(header::EXPECT).iter().all(|v| {
        v.as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"100-continue")
    });
    if !continue_only && !http10 {
        return Err(ProxyError::downstream(
            ErrorKind::ExpectationFailed,
            "an expectation other than 100-continue",
        ));
    }
    headers.remove(header::EXPECT);
    Ok(())
}

/// RFC 9113 §8.2.3: HTTP/2 may split `cookie` into crumbs; the HTTP/1.1
/// origin gets them as one line, joined with `; `.
fn join_cookies(headers: &mut HeaderMap) {
    let mut joined = Vec::new();
    for value in headers.get_all(header::COOKIE) {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(value.as_bytes());
    }
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, value);
    }
}

/// The request's authority, checked and normalised; `Some` when the Host
/// field must be (re)written with it.
fn authority<B>(
    req: &Request<B>,
    hosts: usize,
    scheme: &str,
) -> Result<Option<HeaderValue>, ProxyError> {
    let field = match hosts {
        // RFC 9112 §3.2: an HTTP/1.1 request without Host is refused, even
        // in absolute-form.
        0 if req.version() == Version::HTTP_11 => return Err(refuse("no Host")),
        0 => None,
        1 => req.headers().get(header::HOST),
        _ => return Err(refuse("more than one Host")),
    };
    let field = field
        .map(|v| v.to_str().map_err(|_| refuse("Host is not ASCII")))
        .transpose()?;
    // HTTP/2's :authority, or an HTTP/1.1 absolute-form target's.
    let in_uri = req.uri().authority().map(|a| a.as_str());
    let raw = match (field, in_uri) {
        (Some(field), Some(uri)) => {
            let (a, b) = (normalise_host(field, scheme)?, normalise_host(uri, scheme)?);
            if a != b {
                return Err(refuse("Host disagrees with the request's authority"));
            }
            field
        }
        (Some(field), None) => field,
        (None, Some(uri)) => uri,
        // HTTP/1.0 without Host (HAProxy's default health check): the key's
        // host is empty, and the origin gets the upstream server's name.
        (None, None) if req.version() <= Version::HTTP_10 => return Ok(None),
        (None, None) => return Err(refuse("no Host")),
    };
    let host = normalise_host(raw, scheme)?;
    match host {
        Cow::Borrowed(same) if field == Some(same) => Ok(None),
        // HTTP/2's :authority as it came: read from the URI until the
        // request goes upstream (`ensure_host`), so a hit allocates nothing.
        Cow::Borrowed(same) if field.is_none() && in_uri == Some(same) => Ok(None),
        host => HeaderValue::from_str(&host)
            .map(Some)
            .map_err(|_| refuse("invalid Host")),
    }
}

/// `host[:port]` (RFC 3986 §3.2.2-3.2.3, without userinfo): a DNS name or
/// IPv4 address of `[A-Za-z0-9._~-]`, or an IPv6 literal in brackets, and a
/// port of at most 5 digits. Lower-cased, one trailing dot and the scheme's
/// default port dropped. Borrowed when already in that form.
pub(crate) fn normalise_host<'a>(raw: &'a str, scheme: &str) -> Result<Cow<'a, str>, ProxyError> {
    let (host, port) = split_authority(raw)?;
    let port = match port {
        None | Some("") => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n == default_port(scheme) => None,
            // `08080` is port 8080: one spelling, one key.
            Ok(_) if p.starts_with('0') => Some(p.trim_start_matches('0')),
            Ok(_) => Some(p),
            Err(_) => return Err(refuse("port out of range in Host")),
        },
    };
    let trimmed = match host.strip_suffix('.') {
        Some(h) if !h.is_empty() && !h.ends_with('.') => h,
        _ => host,
    };
    let same_len = trimmed.len() + port.map_or(0, |p| p.len() + 1) == raw.len();
    if same_len && !trimmed.bytes().any(|b| b.is_ascii_uppercase()) {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out = trimmed.to_ascii_lowercase();
    if let Some(port) = port {
        out.push(':');
        out.push_str(port);
    }
    Ok(Cow::Owned(out))
}

/// `host[:port]` split and checked as [`normalise_host`] describes: the
/// host (an IPv6 literal with its brackets) and the port's digits, if a
/// `:` came (possibly none). The admin listener's Host check reads the same.
pub(crate) fn split_authority(raw: &str) -> Result<(&str, Option<&str>), ProxyError> {
    let (host, port) = if raw.starts_with('[') {
        let end = raw
            .find(']')
            .ok_or_else(|| refuse("unclosed IPv6 literal in Host"))?;
        let inner = &raw[1..end];
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(refuse("invalid IPv6 literal in Host"));
        }
        match &raw[end + 1..] {
            "" => (&raw[..=end], None),
            rest => (
                &raw[..=end],
                Some(
                    rest.strip_prefix(':')
                        .ok_or_else(|| refuse("junk after IPv6 literal"))?,
                ),
            ),
        }
    } else {
        match raw.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (raw, None),
        }
    };
    let name_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    if host.is_empty() || (!host.starts_with('[') && !host.bytes().all(name_ok)) {
        return Err(refuse("invalid host name in Host"));
    }
    if port.is_some_and(|p| p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit())) {
        return Err(refuse("invalid port in Host"));
    }
    Ok((host, port))
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" {
        443
    } else {
        80
    }
}

/// The request target: origin-form (or absolute-form, reduced to it) with
/// its path normalised; the URI is rewritten only when it changes.
fn target<B>(req: &mut Request<B>, admitted: &mut Admitted) -> Result<(), ProxyError> {
    let uri = req.uri();
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(refuse("userinfo in the request target"));
    }
    let path = uri.path();
    if !path.starts_with('/') {
        return Err(refuse("the request target is not a path"));
    }
    let query = uri.query();
    let forward = normalise_path(path, Decode::Unreserved, Slashes::Merge)?;
    // The two forms differ only in which escapes they decode.
    let matching = if path.contains('%') {
        normalise_path(path, Decode::Printable, Slashes::Merge)?
    } else {
        forward.clone()
    };
    if matching != forward {
        admitted.match_target = Some(with_query(&matching, query));
    }
    if forward != path && path.contains("//") {
        let kept = normalise_path(path, Decode::Unreserved, Slashes::Keep)?;
        admitted.unmerged = Some(path_and_query(&with_query(&kept, query))?);
    }
    admitted.forms_differ = admitted.match_target.is_some();
    if forward != path {
        let pq = path_and_query(&with_query(&forward, query))?;
        // The authority goes with the old URI: keep it as the Host.
        if !req.headers().contains_key(header::HOST) {
            if let Some(host) = req.uri().authority().map(|a| a.as_str()) {
                let host = HeaderValue::from_str(host).map_err(|_| refuse("invalid Host"))?;
                req.headers_mut().insert(header::HOST, host);
            }
        }
        *req.uri_mut() = Uri::from(pq);
    }
    Ok(())
}

fn with_query(path: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    }
}

fn path_and_query(text: &str) -> Result<PathAndQuery, ProxyError> {
    PathAndQuery::try_from(text).map_err(|_| refuse("an invalid request target"))
}

/// Which percent-escapes [`normalise_path`] decodes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Decode {
    /// RFC 3986 §2.3 unreserved characters: the same resource either way.
    Unreserved,
    /// Every printable ASCII character but `%`, `?` and `#`: what the most
    /// liberal origin could make of the path (routes match this form).
    Printable,
}

/// Whether [`normalise_path`] merges runs of `/`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Slashes {
    /// `//a///b` becomes `/a/b`.
    Merge,
    /// Kept as sent.
    Keep,
}

/// RFC 3986 §6.2.2 normalisation of an absolute path: percent-escapes
/// decoded as `decode` says (the others upper-cased), slashes merged as
/// `slashes` says, then dot-segments removed (§5.2.4; never above the
/// root). Borrowed when nothing changes.
pub(crate) fn normalise_path(
    path: &str,
    decode: Decode,
    slashes: Slashes,
) -> Result<Cow<'_, str>, ProxyError> {
    let escapes = path.contains('%');
    let doubled = slashes == Slashes::Merge && path.contains("//");
    if !escapes && !doubled && !has_dot_segment(path) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = if escapes {
        Cow::Owned(decode_escapes(path, decode)?)
    } else {
        Cow::Borrowed(path)
    };
    let merged = if slashes == Slashes::Merge && decoded.contains("//") {
        Cow::Owned(merge_slashes(&decoded))
    } else {
        decoded
    };
    let out = if has_dot_segment(&merged) {
        remove_dot_segments(&merged)
    } else {
        merged.into_owned()
    };
    Ok(if out == path {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(out)
    })
}

/// `/path?query` with the path normalised as a request's is by default
/// (unreserved escapes, merged slashes, dot-segments) and the query as
/// given: for targets that do not come through [`admit`] (purge URLs,
/// `Location` fields) but must meet the keys requests made.
pub(crate) fn normalise_target(text: &str) -> Result<String, ProxyError> {
    let (path, query) = match text.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (text, None),
    };
    if !path.starts_with('/') {
        return Err(refuse("the target is not a path"));
    }
    let path = normalise_path(path, Decode::Unreserved, Slashes::Merge)?;
    Ok(with_query(&path, query))
}

fn has_dot_segment(path: &str) -> bool {
    path.contains("/.") && path.split('/').any(|s| s == "." || s == "..")
}

fn decode_escapes(path: &str, decode: Decode) -> Result<String, ProxyError> {
    let bytes = path.as_bytes();
    // Bytes, not chars: a path may hold raw UTF-8 (or other) bytes that
    // must pass through unchanged.
    let mut out: Vec<u8> = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(|| refuse("invalid percent-encoding in the path"))?;
        if hex == 0 {
            // NGINX refuses it too (400): a NUL ends the path for C origins
            // and file systems, so `/a.css%00.php` would be two paths.
            return Err(refuse("a NUL byte (%00) in the path"));
        }
        let unreserved = hex.is_ascii_alphanumeric() || matches!(hex, b'-' | b'.' | b'_' | b'~');
        let printable = (0x21..=0x7e).contains(&hex) && !matches!(hex, b'%' | b'?' | b'#');
        let keep_decoded = match decode {
            Decode::Unreserved => unreserved,
            Decode::Printable => printable,
        };
        if keep_decoded {
            out.push(hex);
        } else {
            out.extend_from_slice(format!("%{hex:02X}").as_bytes());
        }
        i += 3;
    }
    // Only ASCII was decoded, so the UTF-8 of the input is intact.
    String::from_utf8(out).map_err(|_| refuse("invalid percent-encoding in the path"))
}

fn merge_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

/// RFC 3986 §5.2.4 for an absolute path (starting with `/`).
fn remove_dot_segments(path: &str) -> String {
    let segments: Vec<&str> = path.get(1..).unwrap_or("").split('/').collect();
    let last = segments.len().saturating_sub(1);
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    let mut trailing = false;
    for (i, segment) in segments.into_iter().enumerate() {
        match segment {
            "." => trailing |= i == last,
            ".." => {
                out.pop();
                trailing |= i == last;
            }
            other => out.push(other),
        }
    }
    let mut result = String::with_capacity(path.len());
    for segment in &out {
        result.push('/');
        result.push_str(segment);
    }
    if trailing || result.is_empty() {
        result.push('/');
    }
    result
}

/// Applies the route's rules to an admitted request (module doc) and gives
/// the client as the rest of the request path sees it: its scheme is a
/// trusted proxy's `X-Forwarded-Proto` when it came through one.
pub(crate) fn prepare<B>(
    req: &mut Request<B>,
    admitted: &mut Admitted,
    route: &RouteConfig,
    peer: Peer,
) -> Peer {
    if !route.requests.merge_slashes {
        if let Some(unmerged) = admitted.unmerged.take() {
            *req.uri_mut() = Uri::from(unmerged);
            admitted.forms_differ = true;
        }
    }
    let seen = admitted.seen;
    let headers = req.headers_mut();
    if seen.hop_by_hop {
        // RFC 9110 §7.6.1, except that `Connection` cannot remove Host or a
        // field the key reads: the origin must see the request keyed.
        strip_hop_by_hop_keeping(headers, |name| {
            *name == header::HOST || route.storage.key.reads_header(name)
        });
    }
    if seen.underscore && !route.requests.underscores_in_headers {
        remove_where(headers, |name| name.as_str().contains('_'));
    }
    let trusted = trusts(route, peer.addr.ip());
    if seen.forwarding {
        remove_where(headers, |name| {
            let text = name.as_str();
            let dashed = if text.contains('_') {
                Cow::Owned(text.replace('_', "-"))
            } else {
                Cow::Borrowed(text)
            };
            // A trusted proxy's forwarding fields pass; requests to serve
            // another URL or method never do (a proxy in front passes
            // its clients' ones on untouched).
            let passes = (trusted && !is_override(&dashed)) || route.storage.key.reads_header(name);
            is_forwarding(&dashed) && !passes
        });
    }
    peer_of(req, route, peer)
}

/// The client as `route` sees it: its scheme is `https` when a trusted
/// proxy says so in `X-Forwarded-Proto`. Reads the request and leaves it as
/// it came: a route that answers itself takes this instead of [`prepare`]
/// (a file route without the file hands the request on to the next route,
/// which prepares it for itself, its own trusted proxies and fields).
pub(crate) fn peer_of<B>(req: &Request<B>, route: &RouteConfig, peer: Peer) -> Peer {
    let mut peer = peer;
    if trusts(route, peer.addr.ip()) {
        match req
            .headers()
            .get("x-forwarded-proto")
            .map(HeaderValue::as_bytes)
        {
            Some(b"https") => peer.scheme = crate::http::scheme::Scheme::Https,
            Some(b"http") => peer.scheme = crate::http::scheme::Scheme::Http,
            _ => {}
        }
    }
    peer
}

/// Gives `headers` (a request on its way upstream) the request's Host when
/// it has none: an HTTP/2 request keeps its `:authority` in `uri` until
/// then (see `admit`).
pub(crate) fn ensure_host(headers: &mut HeaderMap, uri: &Uri) {
    if headers.contains_key(header::HOST) {
        return;
    }
    if let Some(host) = uri
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        headers.insert(header::HOST, host);
    }
}

/// The client address is in one of the route's `trusted_proxies`.
fn trusts(route: &RouteConfig, ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    route
        .requests
        .trusted_proxies
        .iter()
        .any(|net| net.contains(&ip))
}

/// Removes every field whose name `drop` picks.
fn remove_where(headers: &mut HeaderMap, drop: impl Fn(&HeaderName) -> bool) {
    let doomed: Vec<HeaderName> = headers.keys().filter(|n| drop(n)).cloned().collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// The client a request comes from, as limits and `$remote_addr` see it
/// (NGINX's realip with `real_ip_recursive on`): `peer` itself, unless it is one of the route's
/// `trusted_proxies`; then `X-Forwarded-For` is read from the right, past
/// every trusted address, and the first one not trusted is the client. An
/// entry that is not an address ends the walk at the last address known
/// (a trusted proxy's), so a client behind one cannot pick its own key by
/// writing garbage to the left.
pub(crate) fn client_ip(route: &RouteConfig, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
    if !trusts(route, peer) {
        return peer;
    }
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .flat_map(|v| v.to_str().unwrap_or("").rsplit(','));
    let mut client = peer;
    for hop in hops {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            break;
        };
        client = ip;
        if !trusts(route, ip) {
            break;
        }
    }
    client
}

#[cfg(test)]
#[path = "edge_tests.rs"]
mod tests;
