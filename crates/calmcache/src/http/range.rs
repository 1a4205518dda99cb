//! Byte ranges (RFC 9110 §14): `Range` and `If-Range` answered from a stored
//! full response, as a single part, `multipart/byteranges`, or 416.
//!
//! The module is pure: no I/O, no clocks, no async. It is used in two steps:
//!
//! 1. [`plan`] reads the request's `Range` and `If-Range` and the stored
//!    response's `ETag`, `Last-Modified` and `Date`, and decides a
//!    [`RangePlan`]: the whole 200 ([`RangePlan::Full`]), one part
//!    ([`RangePlan::Single`]), several parts ([`RangePlan::Multi`]) or 416
//!    ([`RangePlan::Unsatisfiable`]).
//! 2. [`render`] turns that plan into the status, headers and body to send.
//!    A single part is a zero-copy [`Bytes::slice`] of the stored body.
//!
//! The caller checks the method (GET) and that the stored response is a 200;
//! this module assumes both.
//!
//! # Choices (RFC 9110 leaves room)
//! - Anything about the `Range` header that is not valid `bytes` syntax makes
//!   the whole header ignored (§14.2 "MAY ignore"), including a number too
//!   large for `u64`, a spec whose first-pos is greater than its last-pos,
//!   and a header sent on more than one field line.
//! - Overlapping or adjacent ranges are coalesced (§14.2, §15.3.7.2); parts
//!   keep the order in which the client first asked for them (§15.3.7.2
//!   SHOULD). Ranges separated by a small gap are *not* merged.
//! - More than [`MAX_PARTS`] disjoint ranges after coalescing is treated as
//!   abuse and the header is ignored (§14.2).
//! - A zero-length representation: only a suffix-range with a non-zero
//!   suffix-length is satisfiable (§14.1.2), but no `Content-Range` can
//!   describe the nothing it selects, so such a request gets the (empty)
//!   full 200 (§14.2 "MAY ignore a Range header field when the selected
//!   representation has no content"); any other range is a 416.
//! - `If-Range` with a date and a stored response without `Date`: the dates
//!   must be exactly equal (the strict §8.8.2.2 reading would never match).

use bytes::{BufMut, Bytes, BytesMut};
use calmcache_core::freshness::parse_date;
use http::header::{
    HeaderName, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, DATE, ETAG,
    IF_RANGE, LAST_MODIFIED, RANGE,
};
use http::{HeaderMap, HeaderValue, StatusCode};
use std::time::Duration;

use crate::http::conditional::{Comparison, EntityTag};
use crate::http::headers::trim_ows;

/// Most parts a `multipart/byteranges` answer may have (after coalescing).
/// More than this is "many small ranges" (RFC 9110 §14.2) and is answered
/// with the full representation.
pub(crate) const MAX_PARTS: usize = 64;

/// One satisfiable byte range, inclusive bounds, already clamped to the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteRange {
    /// First byte (0-based).
    pub start: u64,
    /// Last byte, inclusive; `start <= end < len`.
    pub end: u64,
}

/// What a request gets from a stored full (200) response of `len` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RangePlan {
    /// No Range, an invalid/unsupported Range (ignored per RFC 9110 §14.2), or If-Range did not match: send the whole 200.
    Full,
    /// One range: 206 with Content-Range.
    Single(ByteRange),
    /// Several ranges: 206 multipart/byteranges.
    Multi(Vec<ByteRange>),
    /// No range satisfiable: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Decides from the request headers (`Range`, `If-Range`) and the stored response headers (`ETag`, `Last-Modified`, `Date`).
pub(crate) fn plan(request: &HeaderMap, stored: &HeaderMap, len: u64) -> RangePlan {
    // RFC 9110 §13.1.5: "A server MUST ignore an If-Range header field
    // received in a request that does not contain a Range header field."
    let Some(range) = single_value(request, &RANGE) else {
        return RangePlan::Full;
    };
    // RFC 9110 §13.2.2 step 5: when both Range and If-Range are present,
    // If-Range is evaluated first; if false, "ignore the Range header field
    // and respond 200 (OK)" — even when the Range would have been a 416.
    if request.contains_key(IF_RANGE) && !if_range_matches(request, stored) {
        return RangePlan::Full;
    }
    // RFC 9110 §14.2: "A server MAY ignore the Range header field" and "MAY
    // ignore or reject a Range header field that contains an invalid
    // ranges-specifier": invalid syntax or an unknown unit means Full.
    let Some(specs) = parse_range(range) else {
        return RangePlan::Full;
    };
    decide(&specs, len)
}

/// How much of a body whose length is not known yet (it is still arriving,
/// chunked) must arrive before [`plan`] can answer a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// The answer is the whole 200 whatever the length: no (valid) Range,
    /// an If-Range that does not match, or a range from the first byte to
    /// the end (`bytes=0-`), which selects every byte anyway.
    Full,
    /// Every range has its last byte: once this many bytes arrived (or the
    /// body ended), the parts are known without the complete length.
    Through(u64),
    /// A suffix or open-ended range: its bytes are known only at the end.
    AtEnd,
}

/// What [`plan`] needs of a body of unknown length for these request
/// headers (RFC 9110 §14.1.2: a suffix-range and an open int-range are
/// resolved against the current length).
pub(crate) fn extent(request: &HeaderMap, stored: &HeaderMap) -> Extent {
    let Some(range) = single_value(request, &RANGE) else {
        return Extent::Full;
    };
    // RFC 9110 §13.2.2 step 5: If-Range first, as `plan` does.
    if request.contains_key(IF_RANGE) && !if_range_matches(request, stored) {
        return Extent::Full;
    }
    let Some(specs) = parse_range(range) else {
        return Extent::Full;
    };
    let mut through = 0u64;
    for spec in specs {
        match spec {
            Spec::Int {
                first: 0,
                last: None,
            } => return Extent::Full,
            Spec::Int {
                last: Some(last), ..
            } => through = through.max(last.saturating_add(1)),
            Spec::Int { last: None, .. } | Spec::Suffix(_) => return Extent::AtEnd,
        }
    }
    Extent::Through(through)
}

/// Turns a plan into the response: sets `*status` (206/416), rewrites `headers` (Content-Range, Content-Length, and for Multi Content-Type multipart/byteranges; boundary=...; for 416 Content-Length 0 and `Content-Range: bytes */len`), and returns the body. `Single` must slice `body` without copying (Bytes::slice). For `Full` it returns body unchanged and leaves status/headers alone.
///
/// The complete length written in `Content-Range` is `body.len()`. A plan that
/// does not fit `body` (made for another length) is rendered as `Full`, and a
/// `Multi` of one range as `Single` (RFC 9110 §15.3.7.2: "A server MUST NOT
/// generate a multipart response to a request for a single range").
/// `Multi` moves a `Content-Encoding` from the response into each part, and
/// 416 drops `Content-Type` and `Content-Encoding` (its body is empty).
pub(crate) fn render(
    plan: &RangePlan,
    status: &mut StatusCode,
    headers: &mut HeaderMap,
    body: &Bytes,
) -> Bytes {
    let complete = body.len() as u64;
    let rendered = match plan {
        RangePlan::Full => None,
        RangePlan::Single(r) => render_single(*r, complete, body),
        RangePlan::Multi(ranges) => match ranges.as_slice() {
            [] => None,
            [one] => render_single(*one, complete, body),
            _ => render_multi(ranges, complete, headers, body, &new_boundary()),
        },
        RangePlan::Unsatisfiable => render_unsatisfiable(complete),
    };
    let Some(r) = rendered else {
        return body.clone();
    };
    *status = r.status;
    for name in r.remove {
        headers.remove(name);
    }
    for (name, value) in r.set {
        headers.insert(name, value);
    }
    r.body
}

// ---------------------------------------------------------------------------
// Range parsing (RFC 9110 §14.1)

/// One syntactically valid range-spec, before it meets the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spec {
    /// `first-pos "-" [ last-pos ]` (RFC 9110 §14.1.2 int-range).
    Int { first: u64, last: Option<u64> },
    /// `"-" suffix-length` (RFC 9110 §14.1.2 suffix-range).
    Suffix(u64),
}

/// The one value of a field, or `None` when it is absent or sent on more
/// than one field line (`Range`, `If-Range`, `ETag`, `Last-Modified` and
/// `Date` are all singletons, not lists).
fn single_value<'a>(map: &'a HeaderMap, name: &HeaderName) -> Option<&'a [u8]> {
    let mut all = map.get_all(name).iter();
    let first = all.next()?;
    if all.next().is_some() {
        return None;
    }
    Some(first.as_bytes())
}

/// `1*DIGIT` as a `u64`; `None` for an empty string, any non-digit (also a
/// sign), or a value that does not fit. RFC 9110 §14.1.2: "recipients MUST
/// anticipate potentially large decimal numerals and prevent parsing errors
/// due to integer conversion overflows" — such a numeral makes the header
/// invalid here.
fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Parses `Range`; `None` when it is to be ignored (RFC 9110 §14.2).
///
/// RFC 9110 §14.1.1: `ranges-specifier = range-unit "=" range-set`,
/// `range-set = 1#range-spec`. §14.1: "All range unit names are
/// case-insensitive"; only `bytes` is understood (§14.2: "An origin server
/// MUST ignore a Range header field that contains a range unit it does not
/// understand").
fn parse_range(value: &[u8]) -> Option<Vec<Spec>> {
    let value = trim_ows(value);
    let eq = value.iter().position(|&b| b == b'=')?;
    let (unit, set) = (&value[..eq], &value[eq + 1..]);
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let mut specs = Vec::new();
    for element in set.split(|&b| b == b',') {
        // RFC 9110 §5.6.1: list elements are separated by OWS "," OWS, and
        // "A recipient MUST parse and ignore a reasonable number of empty
        // list elements". Trimming also accepts OWS right after "=" (RFC 9110
        // erratum 7306 restores it to the ranges-specifier grammar).
        let element = trim_ows(element);
        if element.is_empty() {
            continue;
        }
        specs.push(parse_spec(element)?);
    }
    // `1#range-spec`: at least one.
    if specs.is_empty() {
        return None;
    }
    Some(specs)
}

/// One `range-spec` of the `bytes` unit (RFC 9110 §14.1.2):
/// `int-range = first-pos "-" [ last-pos ]`, `suffix-range = "-"
/// suffix-length`. No whitespace inside.
fn parse_spec(s: &[u8]) -> Option<Spec> {
    if let Some(suffix) = s.strip_prefix(b"-") {
        return parse_u64(suffix).map(Spec::Suffix);
    }
    let dash = s.iter().position(|&b| b == b'-')?;
    let first = parse_u64(&s[..dash])?;
    let rest = &s[dash + 1..];
    let last = if rest.is_empty() {
        None
    } else {
        Some(parse_u64(rest)?)
    };
    // RFC 9110 §14.1.1: "An int-range is invalid if the last-pos value is
    // present and less than the first-pos", and "A ranges-specifier is
    // invalid if it contains any range-spec that is invalid" (ignored, §14.2).
    if last.is_some_and(|last| last < first) {
        return None;
    }
    Some(Spec::Int { first, last })
}

/// Resolves parsed specs against the representation length.
fn decide(specs: &[Spec], len: u64) -> RangePlan {
    // Satisfiable ranges, with the position of the spec that asked for each.
    let mut ranges: Vec<(ByteRange, usize)> = Vec::new();
    let mut empty_but_satisfiable = false;
    for (index, spec) in specs.iter().enumerate() {
        match *spec {
            // RFC 9110 §14.1.2: an int-range is satisfiable when its
            // first-pos is less than the current length; "If the last-pos
            // value is absent, or if the value is greater than or equal to
            // the current length of the representation data, the byte range
            // is interpreted as the remainder of the representation" (clamp
            // last-pos to len-1).
            Spec::Int { first, last } => {
                if first < len {
                    let end = last.map_or(len - 1, |last| last.min(len - 1));
                    ranges.push((ByteRange { start: first, end }, index));
                }
            }
            // RFC 9110 §14.1.2: a suffix-range is satisfiable when its
            // suffix-length is non-zero; "If the selected representation is
            // shorter than the specified suffix-length, the entire
            // representation is used."
            Spec::Suffix(0) => {}
            Spec::Suffix(n) => {
                if len == 0 {
                    // RFC 9110 §14.1.2: "When a selected representation has
                    // zero length, the only satisfiable form of range-spec in
                    // a GET request is a suffix-range with a non-zero
                    // suffix-length." It selects nothing, which no
                    // Content-Range can describe: use §14.2 "A server MAY
                    // ignore a Range header field when the selected
                    // representation has no content".
                    empty_but_satisfiable = true;
                } else {
                    let start = len - n.min(len);
                    ranges.push((
                        ByteRange {
                            start,
                            end: len - 1,
                        },
                        index,
                    ));
                }
            }
        }
    }
    if empty_but_satisfiable {
        return RangePlan::Full;
    }
    // RFC 9110 §14.1.1: "A valid ranges-specifier is satisfiable if it
    // contains at least one range-spec that is satisfiable"; otherwise 416
    // (§15.5.17).
    if ranges.is_empty() {
        return RangePlan::Unsatisfiable;
    }
    let parts = coalesce(ranges);
    match parts.as_slice() {
        [one] => RangePlan::Single(*one),
        // RFC 9110 §14.2: a server "MAY ignore [...] a set of many small
        // ranges", an indication "of either a broken client or a deliberate
        // denial-of-service attack".
        many if many.len() > MAX_PARTS => RangePlan::Full,
        _ => RangePlan::Multi(parts),
    }
}

/// Merges overlapping or adjacent ranges. RFC 9110 §15.3.7.2: "a server MAY
/// coalesce any of the ranges that overlap [...] regardless of the order in
/// which the corresponding range-spec appeared"; and it "SHOULD send the
/// parts in the same order that the corresponding range-spec appeared in
/// the received Range header field, excluding those ranges that were deemed
/// unsatisfiable or that were coalesced into other ranges" — so each merged
/// part takes the position of the earliest spec it contains.
fn coalesce(mut ranges: Vec<(ByteRange, usize)>) -> Vec<ByteRange> {
    ranges.sort_unstable_by_key(|&(r, index)| (r.start, index));
    let mut merged: Vec<(ByteRange, usize)> = Vec::with_capacity(ranges.len());
    for (r, index) in ranges {
        match merged.last_mut() {
            // Adjacent counts too: 0-4 and 5-9 are one part 0-9.
            Some((cur, first_index)) if r.start <= cur.end.saturating_add(1) => {
                cur.end = cur.end.max(r.end);
                *first_index = (*first_index).min(index);
            }
            _ => merged.push((r, index)),
        }
    }
    merged.sort_unstable_by_key(|&(_, index)| index);
    merged.into_iter().map(|(r, _)| r).collect()
}

// ---------------------------------------------------------------------------
// If-Range (RFC 9110 §13.1.5)

/// Evaluates `If-Range` against the stored response (RFC 9110 §13.1.5).
/// Absent or unparseable validators make the condition false.
fn if_range_matches(request: &HeaderMap, stored: &HeaderMap) -> bool {
    let Some(value) = single_value(request, &IF_RANGE) else {
        return false;
    };
    let value = trim_ows(value);
    // RFC 9110 §13.1.5: "A valid entity-tag can be distinguished from a
    // valid HTTP-date by examining the first three characters for a DQUOTE."
    if value.starts_with(b"\"") || value.starts_with(b"W/\"") {
        // RFC 9110 §13.1.5: "If the entity-tag validator provided exactly
        // matches the ETag field value for the selected representation using
        // the strong comparison function (Section 8.8.3.2), the condition is
        // true." A weak tag on either side never matches.
        let Some(given) = EntityTag::parse_valid(value) else {
            return false;
        };
        let current = single_value(stored, &ETAG).map(trim_ows);
        let Some(current) = current.and_then(EntityTag::parse_valid) else {
            return false;
        };
        return given.matches(current, Comparison::Strong);
    }
    // RFC 9110 §13.1.5: "1. If the HTTP-date validator provided is not a
    // strong validator in the sense defined by Section 8.8.2.2, the condition
    // is false. 2. If the HTTP-date validator provided exactly matches the
    // Last-Modified field value for the selected representation, the
    // condition is true. 3. Otherwise, the condition is false."
    let Some(given) = parse_date(value) else {
        return false;
    };
    let Some(last_modified) = single_value(stored, &LAST_MODIFIED).and_then(parse_date) else {
        return false;
    };
    if given != last_modified {
        return false;
    }
    // RFC 9110 §8.8.2.2: a Last-Modified compared "by an intermediate cache
    // to the validator stored in its cache entry" is strong when "that cache
    // entry includes a Date value which is at least one second after the
    // Last-Modified value". Without a stored Date, exact equality is enough
    // (a choice: see the module documentation).
    match stored.get_all(DATE).iter().count() {
        0 => true,
        _ => single_value(stored, &DATE)
            .and_then(parse_date)
            .and_then(|date| date.duration_since(last_modified).ok())
            .is_some_and(|gap| gap >= Duration::from_secs(1)),
    }
}

// ---------------------------------------------------------------------------
// Rendering (RFC 9110 §14.4, §14.6, §15.3.7, §15.5.17)

/// A rendered answer, applied to the response only when complete.
struct Rendered {
    status: StatusCode,
    remove: Vec<HeaderName>,
    set: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

/// `body[r.start..=r.end]` without copying, or `None` if it does not fit.
fn slice(body: &Bytes, r: ByteRange) -> Option<Bytes> {
    let start = usize::try_from(r.start).ok()?;
    let end = usize::try_from(r.end).ok()?;
    if start > end || end >= body.len() {
        return None;
    }
    Some(body.slice(start..=end))
}

/// RFC 9110 §14.4: `Content-Range: bytes first-pos "-" last-pos "/"
/// complete-length`.
fn content_range(r: ByteRange, complete: u64) -> String {
    content_range_of(r, Some(complete))
}

/// [`content_range`] for a representation whose length may not be known
/// yet: RFC 9110 §14.4 `complete-length / "*"` ("an asterisk character
/// ("*") in place of the complete-length indicates that the representation
/// length was unknown when the header field was generated").
pub(crate) fn content_range_of(r: ByteRange, complete: Option<u64>) -> String {
    match complete {
        Some(n) => format!("bytes {}-{}/{}", r.start, r.end, n),
        None => format!("bytes {}-{}/*", r.start, r.end),
    }
}

/// RFC 9110 §15.3.7.1: "If a single part is being transferred, the server
/// generating the 206 response MUST generate a Content-Range header field,
/// describing what range of the selected representation is enclosed".
/// Other representation fields (ETag, Content-Type, Cache-Control...) stay.
fn render_single(r: ByteRange, complete: u64, body: &Bytes) -> Option<Rendered> {
    let part = slice(body, r)?;
    Some(Rendered {
        status: StatusCode::PARTIAL_CONTENT,
        remove: Vec::new(),
        set: vec![
            (
                CONTENT_RANGE,
                HeaderValue::try_from(content_range(r, complete)).ok()?,
            ),
            (CONTENT_LENGTH, HeaderValue::from(part.len())),
        ],
        body: part,
    })
}

/// A fresh boundary: 32 hex digits from 128 random bits, so content cannot
/// be crafted to contain it (RFC 2046 §5.1.1: the boundary must not appear
/// in the encapsulated data).
pub(crate) fn new_boundary() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// RFC 9110 §15.3.7.2 / §14.6: `multipart/byteranges`. Each part is
/// `--BOUNDARY CRLF [Content-Type CRLF] Content-Range CRLF CRLF data CRLF`,
/// then `--BOUNDARY-- CRLF`: each body part carries its own Content-Range
/// (and the representation's Content-Type, if it has one), and the
/// response's Content-Type is `multipart/byteranges; boundary=...`.
fn render_multi(
    ranges: &[ByteRange],
    complete: u64,
    headers: &HeaderMap,
    body: &Bytes,
    boundary: &str,
) -> Option<Rendered> {
    let parts = ranges
        .iter()
        .map(|&r| slice(body, r).map(|data| (r, data)))
        .collect::<Option<Vec<_>>>()?;
    let content_type = single_value(headers, &CONTENT_TYPE);
    // A Content-Encoding applies to the representation, i.e. to each part's
    // data, not to the multipart body built here: it goes into each part
    // (RFC 2046 §5.1: body parts may carry Content-* fields).
    let content_encoding = single_value(headers, &CONTENT_ENCODING);
    let capacity = parts.iter().fold(boundary.len() + 8, |acc, (_, data)| {
        acc.saturating_add(data.len())
            .saturating_add(boundary.len() + 120)
            .saturating_add(content_type.map_or(0, <[u8]>::len))
            .saturating_add(content_encoding.map_or(0, <[u8]>::len))
    });
    let mut out = BytesMut::with_capacity(capacity);
    let fields = PartFields::of(headers);
    for (r, data) in &parts {
        part_head(&mut out, boundary, &fields, *r, Some(complete));
        out.put_slice(data);
        out.put_slice(b"\r\n");
    }
    multipart_end(&mut out, boundary);
    let body = out.freeze();
    Some(Rendered {
        status: StatusCode::PARTIAL_CONTENT,
        remove: vec![CONTENT_RANGE, CONTENT_ENCODING],
        set: vec![
            (CONTENT_TYPE, multipart_type(boundary)?),
            (CONTENT_LENGTH, HeaderValue::from(body.len())),
        ],
        body,
    })
}

/// The representation's fields each part of a `multipart/byteranges` body
/// repeats: its `Content-Type` and `Content-Encoding`.
pub(crate) struct PartFields {
    content_type: Option<Bytes>,
    content_encoding: Option<Bytes>,
}

impl PartFields {
    /// The fields of the response `headers` describe.
    pub(crate) fn of(headers: &HeaderMap) -> PartFields {
        let field = |name| single_value(headers, name).map(Bytes::copy_from_slice);
        PartFields {
            content_type: field(&CONTENT_TYPE),
            content_encoding: field(&CONTENT_ENCODING),
        }
    }
}

/// `--BOUNDARY CRLF [Content-Type CRLF] [Content-Encoding CRLF]
/// Content-Range CRLF CRLF`: what precedes a part's data (RFC 9110
/// §14.6); `complete` is `None` while the length is unknown.
pub(crate) fn part_head(
    out: &mut BytesMut,
    boundary: &str,
    fields: &PartFields,
    r: ByteRange,
    complete: Option<u64>,
) {
    out.put_slice(b"--");
    out.put_slice(boundary.as_bytes());
    out.put_slice(b"\r\n");
    if let Some(ct) = &fields.content_type {
        out.put_slice(b"Content-Type: ");
        out.put_slice(ct);
        out.put_slice(b"\r\n");
    }
    if let Some(ce) = &fields.content_encoding {
        out.put_slice(b"Content-Encoding: ");
        out.put_slice(ce);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"Content-Range: ");
    out.put_slice(content_range_of(r, complete).as_bytes());
    out.put_slice(b"\r\n\r\n");
}

/// `--BOUNDARY-- CRLF`: the end of a `multipart/byteranges` body.
pub(crate) fn multipart_end(out: &mut BytesMut, boundary: &str) {
    out.put_slice(b"--");
    out.put_slice(boundary.as_bytes());
    out.put_slice(b"--\r\n");
}

/// `multipart/byteranges; boundary=...` (RFC 9110 §14.6).
pub(crate) fn multipart_type(boundary: &str) -> Option<HeaderValue> {
    HeaderValue::try_from(format!("multipart/byteranges; boundary={boundary}")).ok()
}

/// Makes `headers` those of a 416 for a representation of `complete` bytes
/// and returns its status (RFC 9110 §15.5.17; see `render_unsatisfiable`).
pub(crate) fn unsatisfiable(headers: &mut HeaderMap, complete: u64) -> StatusCode {
    let mut status = StatusCode::OK;
    if let Some(r) = render_unsatisfiable(complete) {
        status = r.status;
        for name in r.remove {
            headers.remove(name);
        }
        for (name, value) in r.set {
            headers.insert(name, value);
        }
    }
    status
}

/// RFC 9110 §15.5.17: "A server that generates a 416 response to a
/// byte-range request SHOULD generate a Content-Range header field
/// specifying the current length of the selected representation", i.e.
/// `bytes */complete-length` (§14.4 unsatisfied-range). The body is empty.
fn render_unsatisfiable(complete: u64) -> Option<Rendered> {
    Some(Rendered {
        status: StatusCode::RANGE_NOT_SATISFIABLE,
        remove: vec![CONTENT_TYPE, CONTENT_ENCODING],
        set: vec![
            (
                CONTENT_RANGE,
                HeaderValue::try_from(format!("bytes */{complete}")).ok()?,
            ),
            (CONTENT_LENGTH, HeaderValue::from(0u64)),
        ],
        body: Bytes::new(),
    })
}

#[cfg(test)]
#[path = "range_props.rs"]
mod props;

#[cfg(test)]
#[path = "range_tests.rs"]
mod tests;
