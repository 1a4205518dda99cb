//! Compression of stored objects: each text-like object the origin sends
//! uncompressed is encoded once per configured coding when it is stored, and
//! every client gets the best encoding its `Accept-Encoding` allows.
//!
//! The pieces, in the order a request meets them:
//!
//! - A route with `compress = [...]` asks the origin without
//!   `Accept-Encoding`; a route without it forwards
//!   [`normalise_accept_encoding`], which is also the `Vary` secondary key, so
//!   client spellings collapse to three variants (`br`, `gzip`, identity).
//! - At store time, [`compressible`] decides from the response headers
//!   whether the object is worth it (text-like, not already encoded, no
//!   `no-transform`, not partial), and [`encode_all`] (blocking: run it under
//!   `spawn_blocking`) makes each configured encoding once, keeping only those
//!   smaller than the identity body and none for bodies under [`MIN_SIZE`].
//! - At serve time, [`negotiate`] picks among the stored encodings from the
//!   client's `Accept-Encoding` (RFC 9110 §12.5.3); the response then carries
//!   `Content-Encoding`, `Vary: Accept-Encoding` and the [`weak_etag`] of the
//!   stored `ETag` (RFC 9110 §8.8.3).
//!
//! Nothing here panics on any header input: unparsable values mean "don't
//! compress" or "identity".

/// A content coding calmcache can produce (`compress = ["br", "gzip"]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    /// Brotli (RFC 7932), `Content-Encoding: br`.
    Br,
    /// gzip (RFC 1952), `Content-Encoding: gzip`.
    Gzip,
}

impl Coding {
    /// Every coding, in the spelling the config and `Content-Encoding` use.
    pub const ALL: [Coding; 2] = [Coding::Br, Coding::Gzip];

    /// The `Content-Encoding` token.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// Parses a config or header token (case-insensitive).
    pub fn parse(token: &str) -> Option<Coding> {
        Coding::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(token.trim()))
    }
}

use std::io::Write as _;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_ENCODING, CONTENT_RANGE, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};

/// Smallest body worth compressing (below it the framing overhead wins).
///
/// gzip adds 18 bytes of header and trailer plus block framing, brotli a few
/// bytes, and the variant costs ~45 bytes more of response headers
/// (`Content-Encoding: gzip` and `Vary: Accept-Encoding`). A ~350-byte HTML
/// fragment shrinks to ~150 bytes with br and ~190 with gzip (measured by the
/// `bench_encode_100k` test), so around 256 bytes the saving is clearly
/// positive; much below it the net win is a few dozen bytes at best, while
/// each stored encoding still costs an allocation and a cache entry's
/// bookkeeping. Smaller bodies are stored identity-only
/// (nginx's `gzip_min_length` default of 20 is too low to pay off, and
/// thresholds around 1 KB give up real savings on small JSON replies).
pub(crate) const MIN_SIZE: usize = 256;

/// Brotli quality used for the one-off encode at store time.
///
/// Quality 5 is the usual "dynamic content" setting: on HTML/JS/JSON it
/// compresses about as well as or better than gzip -9 while running at a speed
/// comparable to gzip -6. Qualities 10-11 save a further ~10 % but are one to
/// two orders of magnitude slower, which would tie up a blocking thread (and
/// delay the store) for every large miss; they belong to build-time
/// pre-compression, not to a proxy encoding on first fill.
const BROTLI_QUALITY: i32 = 5;

/// Brotli window (log2): 22 = 4 MiB, the reference encoder's default.
///
/// Every brotli decoder supports it (RFC 7932 allows up to 24 without the
/// large-window extension), and a decoder never allocates more than
/// min(window, content size), so it costs clients nothing on small bodies.
const BROTLI_LGWIN: i32 = 22;

/// gzip level: 6 is zlib's default and the usual speed/ratio knee; levels 7-9
/// cost much more CPU for ~1 % smaller output.
const GZIP_LEVEL: u32 = 6;

/// True when a response with these headers is worth compressing.
///
/// That is: no `Content-Encoding` (or only `identity`), no
/// `Cache-Control: no-transform` (RFC 9110 §7.7, RFC 9111 §5.2.2.6), no
/// `Content-Range` (a partial body is not a representation we can encode), and
/// exactly one `Content-Type` that is text-like: `text/*`, `application/json`,
/// `application/*+json`, `application/javascript`, `application/x-javascript`,
/// `application/ecmascript`, `application/xml`, `application/*+xml`,
/// `image/svg+xml`, `application/wasm`, `application/manifest+json`,
/// `font/ttf`, `font/otf`, `application/vnd.ms-fontobject`. Media type
/// parameters (e.g. `charset`) are ignored and matching is case-insensitive.
/// Anything unparsable answers `false`: compressing is an optimisation, never
/// a risk worth taking.
pub(crate) fn compressible(headers: &HeaderMap) -> bool {
    if headers.contains_key(CONTENT_RANGE) {
        return false;
    }
    for line in headers.get_all(CONTENT_ENCODING) {
        let Ok(line) = line.to_str() else {
            return false;
        };
        let only_identity = line
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .all(|t| t.eq_ignore_ascii_case("identity"));
        if !only_identity {
            return false;
        }
    }
    for line in headers.get_all(CACHE_CONTROL) {
        // A line that is not visible ASCII cannot be read, so it cannot be
        // shown not to say no-transform: leave such a response alone.
        let Ok(line) = line.to_str() else {
            return false;
        };
        let no_transform = line.split(',').any(|directive| {
            let name = directive.split('=').next().unwrap_or("");
            name.trim().eq_ignore_ascii_case("no-transform")
        });
        if no_transform {
            return false;
        }
    }
    let mut types = headers.get_all(CONTENT_TYPE).iter();
    let (Some(content_type), None) = (types.next(), types.next()) else {
        // Missing, or several field lines (RFC 9110 §5.3: not a list field).
        return false;
    };
    content_type.to_str().is_ok_and(text_like)
}

/// Whether a `Content-Type` value names a text-like media type.
fn text_like(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    let Some((ty, subtype)) = essence.split_once('/') else {
        return false;
    };
    let (ty, subtype) = (ty.trim(), subtype.trim());
    if ty.is_empty() || subtype.is_empty() {
        return false;
    }
    let is = |s: &str, want: &str| s.eq_ignore_ascii_case(want);
    let suffix = |want: &str| {
        subtype.len() > want.len()
            && subtype
                .get(subtype.len() - want.len()..)
                .is_some_and(|s| s.eq_ignore_ascii_case(want))
    };
    if is(ty, "text") {
        return true;
    }
    if is(ty, "application") {
        // `manifest+json` is also covered by the `+json` suffix rule.
        const APPLICATION: [&str; 8] = [
            "json",
            "javascript",
            "x-javascript",
            "ecmascript",
            "xml",
            "wasm",
            "manifest+json",
            "vnd.ms-fontobject",
        ];
        return APPLICATION.iter().any(|s| is(subtype, s)) || suffix("+json") || suffix("+xml");
    }
    if is(ty, "image") {
        return is(subtype, "svg+xml");
    }
    if is(ty, "font") {
        return is(subtype, "ttf") || is(subtype, "otf");
    }
    false
}

/// Encodes `body` with `coding`.
///
/// CPU-bound and blocking (a 100 KB page takes a few milliseconds):
/// callers run it on a blocking thread (`tokio::task::spawn_blocking`), never
/// on an async worker. Brotli uses quality 5 and a 4 MiB window, gzip level 6;
/// see `BROTLI_QUALITY`, `BROTLI_LGWIN` and `GZIP_LEVEL` for why. The
/// output is deterministic (the gzip header carries no mtime or file name).
pub(crate) fn encode(coding: Coding, body: &[u8]) -> std::io::Result<Bytes> {
    // Text usually shrinks 3-5x; start there and let the Vec grow if not.
    let mut out = Vec::with_capacity(body.len() / 3 + 64);
    match coding {
        Coding::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: BROTLI_QUALITY,
                lgwin: BROTLI_LGWIN,
                size_hint: body.len(),
                ..Default::default()
            };
            let mut input = body;
            brotli::BrotliCompress(&mut input, &mut out, &params)?;
        }
        Coding::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(out, flate2::Compression::new(GZIP_LEVEL));
            encoder.write_all(body)?;
            out = encoder.finish()?;
        }
    }
    Ok(Bytes::from(out))
}

/// Encodes `body` with each coding in `codings` and keeps those that come out
/// smaller than the body, in the order of `codings` (the route's preference).
///
/// Bodies shorter than [`MIN_SIZE`] get no encoding at all, a coding listed
/// twice is encoded once, and a coding whose encoder fails is logged and left
/// out (the identity body is always there to serve). Blocking, like
/// [`encode`].
pub(crate) fn encode_all(codings: &[Coding], body: &[u8]) -> Vec<(Coding, Bytes)> {
    let mut out: Vec<(Coding, Bytes)> = Vec::with_capacity(codings.len());
    if body.len() < MIN_SIZE {
        return out;
    }
    for &coding in codings {
        if out.iter().any(|(c, _)| *c == coding) {
            continue;
        }
        match encode(coding, body) {
            Ok(encoded) if encoded.len() < body.len() => out.push((coding, encoded)),
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(coding = coding.as_str(), %error, "compression failed");
            }
        }
    }
    out
}

/// A q-value in thousandths (RFC 9110 §12.4.2: 0..=1 with up to 3 decimals).
type Q = u16;

/// The parts of an `Accept-Encoding` request header calmcache cares about.
///
/// Each slot holds the weight of the first member naming that coding; a later
/// duplicate (`gzip;q=0, gzip`) is ignored, as nginx does. Codings we cannot
/// produce are parsed and dropped: they neither help nor hinder, since `*`
/// only stands for codings *not listed* and we never produce unlisted ones
/// except br/gzip, which have their own slots.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct AcceptEncoding {
    /// At least one `Accept-Encoding` field line was present.
    present: bool,
    br: Option<Q>,
    /// `gzip` or its RFC 9110 §8.4.1.3 alias `x-gzip`.
    gzip: Option<Q>,
    identity: Option<Q>,
    star: Option<Q>,
}

impl AcceptEncoding {
    /// Parses every field line (RFC 9110 §12.5.3; the field is a list, so
    /// several lines are one comma-separated list). Never fails: a member
    /// that does not parse (bad weight such as `br;q=abc`, `q=2`, `q=0.1234`)
    /// is ignored as if it were not there, which is what a recipient should do
    /// with an invalid list element (RFC 9110 §5.6.1.2) and keeps a typo from
    /// either forcing or forbidding a coding. Bytes that are not UTF-8 make
    /// tokens that match nothing.
    fn parse<'a>(lines: impl Iterator<Item = &'a HeaderValue>) -> Self {
        let mut ae = AcceptEncoding::default();
        for line in lines {
            ae.present = true;
            let text = String::from_utf8_lossy(line.as_bytes());
            for member in text.split(',') {
                let Some((coding, q)) = parse_member(member) else {
                    continue;
                };
                let slot = if coding.eq_ignore_ascii_case("br") {
                    &mut ae.br
                } else if coding.eq_ignore_ascii_case("gzip")
                    || coding.eq_ignore_ascii_case("x-gzip")
                {
                    &mut ae.gzip
                } else if coding.eq_ignore_ascii_case("identity") {
                    &mut ae.identity
                } else if coding == "*" {
                    &mut ae.star
                } else {
                    continue;
                };
                if slot.is_none() {
                    *slot = Some(q);
                }
            }
        }
        ae
    }

    /// The weight of `coding`: its own member, else `*`, else not acceptable.
    fn q(&self, coding: Coding) -> Q {
        let own = match coding {
            Coding::Br => self.br,
            Coding::Gzip => self.gzip,
        };
        own.or(self.star).unwrap_or(0)
    }
}

/// Parses one list member `coding *( OWS ";" OWS param )` into its token and
/// weight (default 1). None for an empty member or an invalid weight.
/// Parameters other than `q` are not in the grammar; they are skipped rather
/// than failing the member.
fn parse_member(member: &str) -> Option<(&str, Q)> {
    let mut parts = member.split(';');
    let coding = parts.next()?.trim();
    if coding.is_empty() {
        return None;
    }
    let mut q = 1000;
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("q") {
            q = parse_qvalue(value.trim())?;
        }
    }
    Some((coding, q))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in
/// thousandths.
fn parse_qvalue(value: &str) -> Option<Q> {
    let (int, frac) = match value.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (value, ""),
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (mut thousandths, mut scale): (Q, Q) = (0, 100);
    for digit in frac.bytes() {
        thousandths += Q::from(digit - b'0') * scale;
        scale /= 10;
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// RFC 9110 §12.5.3: picks the coding to send a client.
///
/// `available` are the encodings of the stored object, in the route's order
/// of preference; `accept_encoding` are the request's `Accept-Encoding` field
/// lines. Returns None for identity (the uncompressed body).
///
/// - No `Accept-Encoding` at all: None. The RFC lets us send any coding then,
///   but a client that says nothing may not decode anything, so identity it is.
/// - An empty field value: None ("does not want any content coding").
/// - A coding is acceptable when listed with q > 0 (`x-gzip` counts as
///   `gzip`), or not listed and matched by `*` with q > 0. `q=0` means not
///   acceptable. Field lines are combined, tokens and `q` are
///   case-insensitive, the first member naming a coding wins, and a member
///   with an invalid weight (`br;q=abc`, `q=2`, `q=0.1234`) is ignored as if
///   absent (RFC 9110 §5.6.1.2), so `*` may still cover that coding.
/// - The highest q wins; ties go to the earlier coding in `available`.
/// - Identity competes only when the client gave it a weight (explicitly or
///   through `*`): it wins only with a strictly higher q than every available
///   coding (`gzip;q=0.5, identity` gets identity); ties go to the encoding.
/// - When no available coding is acceptable, the answer is None even if the
///   client excluded identity (`identity;q=0`, or `*;q=0` without
///   `identity`): RFC 9110 §12.5.3 would allow a 415, but serving the
///   unencoded body is what every origin does and what clients handle.
pub(crate) fn negotiate<'a>(
    accept_encoding: impl Iterator<Item = &'a HeaderValue>,
    available: &[Coding],
) -> Option<Coding> {
    let ae = AcceptEncoding::parse(accept_encoding);
    if !ae.present {
        return None;
    }
    let mut best: Option<(Coding, Q)> = None;
    for &coding in available {
        let q = ae.q(coding);
        // q must be > 0 (acceptable) and beat the best so far (ties: first).
        if q > best.map_or(0, |(_, best_q)| best_q) {
            best = Some((coding, q));
        }
    }
    let (coding, q) = best?;
    match ae.identity.or(ae.star) {
        Some(identity_q) if identity_q > q => None,
        _ => Some(coding),
    }
}

/// The normalised `Accept-Encoding`, used as the `Vary` secondary key and sent
/// upstream when a route does not compress itself.
///
/// `"br"` when br is acceptable, else `"gzip"` when gzip (or `x-gzip`) is,
/// else `""` (identity only, also the answer without any `Accept-Encoding`).
/// Acceptable means listed with q > 0, or matched by `*` with q > 0 when not
/// listed. Client preference between br and gzip is deliberately collapsed:
/// br wins whenever it is acceptable, so the cache holds at most three
/// variants per URL instead of one per distinct header spelling. Same
/// parsing as [`negotiate`]: all field lines, case-insensitive, invalid
/// members ignored, the first member for a coding wins.
pub(crate) fn normalise_accept_encoding<'a>(
    accept_encoding: impl Iterator<Item = &'a HeaderValue>,
) -> &'static str {
    let ae = AcceptEncoding::parse(accept_encoding);
    if ae.q(Coding::Br) > 0 {
        Coding::Br.as_str()
    } else if ae.q(Coding::Gzip) > 0 {
        Coding::Gzip.as_str()
    } else {
        ""
    }
}

/// The `ETag` of an encoded variant.
///
/// RFC 9110 §8.8.3: a strong validator must change when the content coding
/// does (the bytes differ), so the encoded variant gets the weak form of the
/// stored tag: `"abc"` becomes `W/"abc"`; a weak tag stays as it is (weak
/// comparison ignores the coding, which is what `If-None-Match` uses). Returns
/// None for a value that is not a valid entity-tag
/// (`[ W/ ] DQUOTE *etagc DQUOTE`, `W` case-sensitive): the caller then sends
/// the variant without an `ETag`.
pub(crate) fn weak_etag(etag: &HeaderValue) -> Option<HeaderValue> {
    let tag = crate::http::conditional::EntityTag::parse_valid(etag.as_bytes())?;
    if tag.is_weak() {
        return Some(etag.clone());
    }
    let mut out = Vec::with_capacity(etag.len() + 2);
    out.extend_from_slice(b"W/");
    out.extend_from_slice(etag.as_bytes());
    HeaderValue::from_bytes(&out).ok()
}

#[cfg(test)]
#[path = "compress_tests.rs"]
mod tests;
