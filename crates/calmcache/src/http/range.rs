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
pub const MAX_PARTS: usize = 64;

/// One satisfiable byte range, inclusive bounds, already clamped to the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte (0-based).
    pub start: u64,
    /// Last byte, inclusive; `start <= end < len`.
    pub end: u64,
}

impl ByteRange {
    /// Number of bytes in the range.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start).saturating_add(1)
    }

    /// Always false for a range made by [`plan`].
    pub fn is_empty(&self) -> bool {
        self.end < self.start
    }
}

/// What a request gets from a stored full (200) response of `len` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangePlan {
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
pub fn plan(request: &HeaderMap, stored: &HeaderMap, len: u64) -> RangePlan {
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

/// Turns a plan into the response: sets `*status` (206/416), rewrites `headers` (Content-Range, Content-Length, and for Multi Content-Type multipart/byteranges; boundary=...; for 416 Content-Length 0 and `Content-Range: bytes */len`), and returns the body. `Single` must slice `body` without copying (Bytes::slice). For `Full` it returns body unchanged and leaves status/headers alone.
///
/// The complete length written in `Content-Range` is `body.len()`. A plan that
/// does not fit `body` (made for another length) is rendered as `Full`, and a
/// `Multi` of one range as `Single` (RFC 9110 §15.3.7.2: "A server MUST NOT
/// generate a multipart response to a request for a single range").
/// `Multi` moves a `Content-Encoding` from the response into each part, and
/// 416 drops `Content-Type` and `Content-Encoding` (its body is empty).
pub fn render(
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
    format!("bytes {}-{}/{}", r.start, r.end, complete)
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
fn new_boundary() -> String {
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
    for (r, data) in &parts {
        out.put_slice(b"--");
        out.put_slice(boundary.as_bytes());
        out.put_slice(b"\r\n");
        if let Some(ct) = content_type {
            out.put_slice(b"Content-Type: ");
            out.put_slice(ct);
            out.put_slice(b"\r\n");
        }
        if let Some(ce) = content_encoding {
            out.put_slice(b"Content-Encoding: ");
            out.put_slice(ce);
            out.put_slice(b"\r\n");
        }
        out.put_slice(b"Content-Range: ");
        out.put_slice(content_range(*r, complete).as_bytes());
        out.put_slice(b"\r\n\r\n");
        out.put_slice(data);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"--");
    out.put_slice(boundary.as_bytes());
    out.put_slice(b"--\r\n");
    let body = out.freeze();
    Some(Rendered {
        status: StatusCode::PARTIAL_CONTENT,
        remove: vec![CONTENT_RANGE, CONTENT_ENCODING],
        set: vec![
            (
                CONTENT_TYPE,
                HeaderValue::try_from(format!("multipart/byteranges; boundary={boundary}")).ok()?,
            ),
            (CONTENT_LENGTH, HeaderValue::from(body.len())),
        ],
        body,
    })
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
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const LEN: u64 = 1000;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn plan_range(range: &str, len: u64) -> RangePlan {
        plan(&headers(&[("range", range)]), &HeaderMap::new(), len)
    }

    fn check_table(table: &[(&str, u64, RangePlan)]) {
        for (range, len, want) in table {
            assert_eq!(
                &plan_range(range, *len),
                want,
                "Range: {range:?}, len {len}"
            );
        }
    }

    /// The boundary from a `multipart/byteranges; boundary=...` Content-Type.
    fn boundary_of(headers: &HeaderMap) -> String {
        let ct = headers.get(CONTENT_TYPE).unwrap().to_str().unwrap();
        ct.strip_prefix("multipart/byteranges; boundary=")
            .unwrap()
            .to_owned()
    }

    #[test]
    fn rfc9110_14_1_2_single_open_and_suffix_ranges() {
        check_table(&[
            ("bytes=0-499", LEN, RangePlan::Single(r(0, 499))),
            ("bytes=500-999", LEN, RangePlan::Single(r(500, 999))),
            ("bytes=0-0", LEN, RangePlan::Single(r(0, 0))),
            ("bytes=999-999", LEN, RangePlan::Single(r(999, 999))),
            // first-pos "-" with no last-pos: to the end.
            ("bytes=500-", LEN, RangePlan::Single(r(500, 999))),
            ("bytes=0-", LEN, RangePlan::Single(r(0, 999))),
            ("bytes=999-", LEN, RangePlan::Single(r(999, 999))),
            // suffix-range: the last N bytes.
            ("bytes=-500", LEN, RangePlan::Single(r(500, 999))),
            ("bytes=-1", LEN, RangePlan::Single(r(999, 999))),
            ("bytes=-1000", LEN, RangePlan::Single(r(0, 999))),
            // Suffix longer than the representation: all of it.
            ("bytes=-5000", LEN, RangePlan::Single(r(0, 999))),
            (
                "bytes=-18446744073709551615",
                LEN,
                RangePlan::Single(r(0, 999)),
            ),
            ("bytes=-1", 1, RangePlan::Single(r(0, 0))),
            // Leading zeros are still 1*DIGIT.
            ("bytes=007-010", LEN, RangePlan::Single(r(7, 10))),
        ]);
    }

    #[test]
    fn rfc9110_14_1_unit_is_case_insensitive_and_ows_is_allowed() {
        check_table(&[
            ("BYTES=0-1", LEN, RangePlan::Single(r(0, 1))),
            ("Bytes=0-1", LEN, RangePlan::Single(r(0, 1))),
            ("bytes=0-1 ", LEN, RangePlan::Single(r(0, 1))),
            // OWS after "=" (erratum 7306) and around commas (§5.6.1).
            ("bytes= 0-1", LEN, RangePlan::Single(r(0, 1))),
            (
                "bytes=0-1 ,\t5-6 , 9-9",
                LEN,
                RangePlan::Multi(vec![r(0, 1), r(5, 6), r(9, 9)]),
            ),
            // Empty list elements are ignored (§5.6.1).
            ("bytes=,0-1", LEN, RangePlan::Single(r(0, 1))),
            (
                "bytes=0-1,,5-6,",
                LEN,
                RangePlan::Multi(vec![r(0, 1), r(5, 6)]),
            ),
        ]);
    }

    #[test]
    fn rfc9110_14_1_2_last_pos_is_clamped_to_the_length() {
        check_table(&[
            ("bytes=500-5000", LEN, RangePlan::Single(r(500, 999))),
            ("bytes=0-1000", LEN, RangePlan::Single(r(0, 999))),
            (
                "bytes=0-18446744073709551615",
                LEN,
                RangePlan::Single(r(0, 999)),
            ),
            ("bytes=0-10", 5, RangePlan::Single(r(0, 4))),
            (
                "bytes=0-1,990-5000",
                LEN,
                RangePlan::Multi(vec![r(0, 1), r(990, 999)]),
            ),
        ]);
    }

    #[test]
    fn rfc9110_14_2_invalid_syntax_is_ignored() {
        let invalid = [
            "",
            " ",
            "bytes",
            "bytes=",
            "bytes= ",
            "bytes=,",
            "bytes=, ,",
            "bytes=-",
            "bytes=--1",
            "bytes=--",
            "bytes=1-2-3",
            "bytes=1--2",
            "bytes=1",
            "bytes=a-b",
            "bytes=1-b",
            "bytes=+1-2",
            "bytes=1-+2",
            "bytes=-+2",
            "bytes=0x10-20",
            "bytes=1 -2",
            "bytes=1- 2",
            "bytes=- 2",
            "bytes =0-1",
            "bytes==0-1",
            "bytes=0-1;x",
            "bytes 0-1",
            "=0-1",
            "0-1",
            // §14.1.1: last-pos < first-pos makes the whole header invalid.
            "bytes=5-1",
            "bytes=0-1,5-1",
            "bytes=1-0,-5",
            // Numerals no u64 holds: ignored rather than overflowing.
            "bytes=99999999999999999999999-",
            "bytes=0-99999999999999999999999",
            "bytes=-99999999999999999999999",
            "bytes=18446744073709551616-",
            "bytes=0-1,99999999999999999999999-",
        ];
        for range in invalid {
            for len in [0, 1, LEN] {
                assert_eq!(
                    plan_range(range, len),
                    RangePlan::Full,
                    "{range:?} len {len}"
                );
            }
        }
    }

    #[test]
    fn rfc9110_14_2_unknown_unit_is_ignored() {
        for range in ["items=0-1", "byte=0-1", "bytesx=0-1", "none", "x=-5"] {
            assert_eq!(plan_range(range, LEN), RangePlan::Full, "{range:?}");
        }
    }

    #[test]
    fn rfc9110_14_2_range_on_several_field_lines_is_ignored() {
        let request = headers(&[("range", "bytes=0-1"), ("range", "bytes=5-6")]);
        assert_eq!(plan(&request, &HeaderMap::new(), LEN), RangePlan::Full);
    }

    #[test]
    fn rfc9110_14_2_non_ascii_range_is_ignored() {
        let mut request = HeaderMap::new();
        request.insert(RANGE, HeaderValue::from_bytes(b"bytes=0-1\xff").unwrap());
        assert_eq!(plan(&request, &HeaderMap::new(), LEN), RangePlan::Full);
    }

    #[test]
    fn no_range_header_is_full() {
        assert_eq!(
            plan(&HeaderMap::new(), &HeaderMap::new(), LEN),
            RangePlan::Full
        );
    }

    #[test]
    fn rfc9110_14_1_1_unsatisfiable_ranges() {
        check_table(&[
            ("bytes=1000-", LEN, RangePlan::Unsatisfiable),
            ("bytes=1000-1000", LEN, RangePlan::Unsatisfiable),
            ("bytes=5000-6000", LEN, RangePlan::Unsatisfiable),
            // §14.1.2: a suffix-length of 0 is never satisfiable.
            ("bytes=-0", LEN, RangePlan::Unsatisfiable),
            ("bytes=1000-,2000-3000,-0", LEN, RangePlan::Unsatisfiable),
            ("bytes=18446744073709551615-", LEN, RangePlan::Unsatisfiable),
            (
                "bytes=18446744073709551615-18446744073709551615",
                LEN,
                RangePlan::Unsatisfiable,
            ),
            // One satisfiable spec is enough; the others are dropped.
            ("bytes=2000-,0-1", LEN, RangePlan::Single(r(0, 1))),
            ("bytes=-0,-1", LEN, RangePlan::Single(r(999, 999))),
        ]);
    }

    #[test]
    fn rfc9110_14_1_2_zero_length_representation() {
        check_table(&[
            ("bytes=0-", 0, RangePlan::Unsatisfiable),
            ("bytes=0-0", 0, RangePlan::Unsatisfiable),
            ("bytes=0-499", 0, RangePlan::Unsatisfiable),
            ("bytes=-0", 0, RangePlan::Unsatisfiable),
            // The only satisfiable form selects nothing, which no
            // Content-Range can describe: §14.2 lets the Range be ignored.
            ("bytes=-5", 0, RangePlan::Full),
            ("bytes=0-,-5", 0, RangePlan::Full),
        ]);
        let mut status = StatusCode::OK;
        let mut h = headers(&[("content-length", "0")]);
        let body = render(
            &RangePlan::Unsatisfiable,
            &mut status,
            &mut h,
            &Bytes::new(),
        );
        assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(h.get(CONTENT_RANGE).unwrap(), "bytes */0");
        assert!(body.is_empty());
    }

    #[test]
    fn rfc9110_15_3_7_2_several_ranges_keep_request_order() {
        check_table(&[
            (
                "bytes=0-1,5-6",
                LEN,
                RangePlan::Multi(vec![r(0, 1), r(5, 6)]),
            ),
            (
                "bytes=5-6,0-1",
                LEN,
                RangePlan::Multi(vec![r(5, 6), r(0, 1)]),
            ),
            (
                "bytes=-1,0-0,500-900",
                LEN,
                RangePlan::Multi(vec![r(999, 999), r(0, 0), r(500, 900)]),
            ),
        ]);
    }

    #[test]
    fn rfc9110_14_2_overlapping_and_adjacent_ranges_are_coalesced() {
        check_table(&[
            // Overlapping.
            ("bytes=0-5,3-10", LEN, RangePlan::Single(r(0, 10))),
            ("bytes=3-10,0-5", LEN, RangePlan::Single(r(0, 10))),
            ("bytes=0-100,10-20", LEN, RangePlan::Single(r(0, 100))),
            ("bytes=0-0,0-0,0-0", LEN, RangePlan::Single(r(0, 0))),
            // Adjacent.
            ("bytes=0-4,5-9", LEN, RangePlan::Single(r(0, 9))),
            // Covering everything is still a 206 with one part.
            ("bytes=0-499,500-", LEN, RangePlan::Single(r(0, 999))),
            ("bytes=0-,-1", LEN, RangePlan::Single(r(0, 999))),
            // A gap of one byte is not coalesced.
            (
                "bytes=0-4,6-9",
                LEN,
                RangePlan::Multi(vec![r(0, 4), r(6, 9)]),
            ),
            // Merged parts take the place of their earliest spec
            // (§15.3.7.2).
            (
                "bytes=0-1,10-20,15-30,5-5",
                LEN,
                RangePlan::Multi(vec![r(0, 1), r(10, 30), r(5, 5)]),
            ),
            (
                "bytes=15-30,5-5,10-20",
                LEN,
                RangePlan::Multi(vec![r(10, 30), r(5, 5)]),
            ),
        ]);
    }

    #[test]
    fn rfc9110_14_2_many_ranges() {
        let specs = |n: u64| {
            let list: Vec<String> = (0..n).map(|i| format!("{}-{}", i * 2, i * 2)).collect();
            format!("bytes={}", list.join(","))
        };
        // Up to MAX_PARTS disjoint parts are answered.
        let RangePlan::Multi(parts) = plan_range(&specs(MAX_PARTS as u64), LEN) else {
            panic!("expected Multi");
        };
        assert_eq!(parts.len(), MAX_PARTS);
        // More is "many small ranges": ignored.
        assert_eq!(
            plan_range(&specs(MAX_PARTS as u64 + 1), LEN),
            RangePlan::Full
        );
        // Many specs that coalesce into few parts are fine.
        let overlapping: Vec<String> = (0..5000).map(|i| format!("{}-{}", i % 100, 100)).collect();
        assert_eq!(
            plan_range(&format!("bytes={}", overlapping.join(",")), LEN),
            RangePlan::Single(r(0, 100))
        );
        let adjacent: Vec<String> = (0..1000).rev().map(|i| format!("{i}-{i}")).collect();
        assert_eq!(
            plan_range(&format!("bytes={}", adjacent.join(",")), LEN),
            RangePlan::Single(r(0, 999))
        );
    }

    /// If-Range value, stored headers, expected plan for `bytes=0-1`.
    type IfRangeCase<'a> = (&'a str, &'a [(&'a str, &'a str)], RangePlan);

    fn plan_if_range(if_range: &str, stored: &[(&str, &str)]) -> RangePlan {
        let request = headers(&[("range", "bytes=0-1"), ("if-range", if_range)]);
        plan(&request, &headers(stored), LEN)
    }

    const LM: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const LM_850: &str = "Sunday, 06-Nov-94 08:49:37 GMT";
    const LM_ASCTIME: &str = "Sun Nov  6 08:49:37 1994";
    const LM_PLUS_1S: &str = "Sun, 06 Nov 1994 08:49:38 GMT";
    const LM_PLUS_1H: &str = "Sun, 06 Nov 1994 09:49:37 GMT";

    #[test]
    fn rfc9110_13_1_5_if_range_entity_tag_strong_comparison() {
        let hit = RangePlan::Single(r(0, 1));
        let table: &[IfRangeCase] = &[
            // Strong match.
            ("\"abc\"", &[("etag", "\"abc\"")], hit.clone()),
            ("\"\"", &[("etag", "\"\"")], hit.clone()),
            (" \"abc\" ", &[("etag", "\"abc\"")], hit.clone()),
            // Different tag.
            ("\"abd\"", &[("etag", "\"abc\"")], RangePlan::Full),
            ("\"ABC\"", &[("etag", "\"abc\"")], RangePlan::Full),
            // §8.8.3.2: a weak tag on either side never matches.
            ("W/\"abc\"", &[("etag", "\"abc\"")], RangePlan::Full),
            ("\"abc\"", &[("etag", "W/\"abc\"")], RangePlan::Full),
            ("W/\"abc\"", &[("etag", "W/\"abc\"")], RangePlan::Full),
            // No stored ETag, or not a valid one.
            ("\"abc\"", &[], RangePlan::Full),
            ("\"abc\"", &[("last-modified", LM)], RangePlan::Full),
            ("\"abc\"", &[("etag", "abc")], RangePlan::Full),
            // Not a valid entity-tag, or a list of them.
            ("\"abc", &[("etag", "\"abc\"")], RangePlan::Full),
            ("\"a\"bc\"", &[("etag", "\"a\"bc\"")], RangePlan::Full),
            ("\"abc\", \"def\"", &[("etag", "\"abc\"")], RangePlan::Full),
            ("w/\"abc\"", &[("etag", "\"abc\"")], RangePlan::Full),
            // `*` is no entity-tag (nor a date); an unquoted tag is read as a
            // date, and is not one.
            ("*", &[("etag", "\"abc\"")], RangePlan::Full),
            ("abc", &[("etag", "abc")], RangePlan::Full),
            // OWS around the stored ETag is not part of it.
            ("\"abc\"", &[("etag", " \"abc\"\t")], hit.clone()),
        ];
        for (if_range, stored, want) in table {
            assert_eq!(
                &plan_if_range(if_range, stored),
                want,
                "If-Range {if_range:?}, stored {stored:?}"
            );
        }
    }

    #[test]
    fn rfc9110_13_1_5_if_range_date() {
        let hit = RangePlan::Single(r(0, 1));
        let table: &[IfRangeCase] = &[
            // Equal, and §8.8.2.2 strong: Date at least one second later.
            (
                LM,
                &[("last-modified", LM), ("date", LM_PLUS_1H)],
                hit.clone(),
            ),
            (
                LM,
                &[("last-modified", LM), ("date", LM_PLUS_1S)],
                hit.clone(),
            ),
            // The obsolete date forms are dates too (§5.6.7).
            (
                LM_850,
                &[("last-modified", LM), ("date", LM_PLUS_1H)],
                hit.clone(),
            ),
            (
                LM_ASCTIME,
                &[("last-modified", LM), ("date", LM_PLUS_1H)],
                hit.clone(),
            ),
            // Read by the one date parser: names in any case (RFC 9111 §4.2).
            (
                "SUN, 06 NOV 1994 08:49:37 gmt",
                &[("last-modified", LM), ("date", LM_PLUS_1H)],
                hit.clone(),
            ),
            // Equal and no stored Date: a match (documented choice).
            (LM, &[("last-modified", LM)], hit.clone()),
            // Equal but weak: Date not a second after Last-Modified.
            (LM, &[("last-modified", LM), ("date", LM)], RangePlan::Full),
            (
                LM_PLUS_1S,
                &[("last-modified", LM_PLUS_1S), ("date", LM)],
                RangePlan::Full,
            ),
            (
                LM,
                &[("last-modified", LM), ("date", "garbage")],
                RangePlan::Full,
            ),
            // Mismatch, either way.
            (LM_PLUS_1S, &[("last-modified", LM)], RangePlan::Full),
            (
                LM,
                &[("last-modified", LM_PLUS_1S), ("date", LM_PLUS_1H)],
                RangePlan::Full,
            ),
            // No (valid) Last-Modified.
            (LM, &[("date", LM_PLUS_1H)], RangePlan::Full),
            (LM, &[("etag", "\"abc\"")], RangePlan::Full),
            (LM, &[("last-modified", "yesterday")], RangePlan::Full),
            // Unparseable If-Range.
            ("yesterday", &[("last-modified", LM)], RangePlan::Full),
            ("", &[("last-modified", LM)], RangePlan::Full),
        ];
        for (if_range, stored, want) in table {
            assert_eq!(
                &plan_if_range(if_range, stored),
                want,
                "If-Range {if_range:?}, stored {stored:?}"
            );
        }
    }

    #[test]
    fn rfc9110_13_1_5_if_range_needs_a_range_and_wins_over_416() {
        let stored = headers(&[("etag", "\"abc\"")]);
        // If-Range without Range: ignored.
        let request = headers(&[("if-range", "\"abc\"")]);
        assert_eq!(plan(&request, &stored, LEN), RangePlan::Full);
        // §13.2.2: a false If-Range means 200, even for an unsatisfiable Range.
        let request = headers(&[("range", "bytes=5000-"), ("if-range", "\"nope\"")]);
        assert_eq!(plan(&request, &stored, LEN), RangePlan::Full);
        // A true one lets the 416 through.
        let request = headers(&[("range", "bytes=5000-"), ("if-range", "\"abc\"")]);
        assert_eq!(plan(&request, &stored, LEN), RangePlan::Unsatisfiable);
        // If-Range on two field lines is not a validator.
        let request = headers(&[
            ("range", "bytes=0-1"),
            ("if-range", "\"abc\""),
            ("if-range", "\"abc\""),
        ]);
        assert_eq!(plan(&request, &stored, LEN), RangePlan::Full);
    }

    fn sample_body() -> Bytes {
        Bytes::from((0..LEN).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>())
    }

    fn stored_headers() -> HeaderMap {
        headers(&[
            ("content-type", "text/plain"),
            ("content-length", "1000"),
            ("etag", "\"abc\""),
            ("cache-control", "max-age=60"),
        ])
    }

    #[test]
    fn rfc9110_15_3_7_1_render_single_part() {
        let body = sample_body();
        let mut status = StatusCode::OK;
        let mut h = stored_headers();
        let out = render(&RangePlan::Single(r(10, 19)), &mut status, &mut h, &body);
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(h.get(CONTENT_RANGE).unwrap(), "bytes 10-19/1000");
        assert_eq!(h.get(CONTENT_LENGTH).unwrap(), "10");
        assert_eq!(&out[..], &body[10..20]);
        // Zero-copy: the part points into the stored body.
        assert_eq!(out.as_ptr(), body[10..].as_ptr());
        // Other representation fields stay.
        assert_eq!(h.get(CONTENT_TYPE).unwrap(), "text/plain");
        assert_eq!(h.get(ETAG).unwrap(), "\"abc\"");
        assert_eq!(h.get("cache-control").unwrap(), "max-age=60");

        // The whole representation as one range.
        let mut status = StatusCode::OK;
        let mut h = stored_headers();
        let out = render(&RangePlan::Single(r(0, 999)), &mut status, &mut h, &body);
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(h.get(CONTENT_RANGE).unwrap(), "bytes 0-999/1000");
        assert_eq!(out, body);
    }

    #[test]
    fn rfc9110_14_6_render_multipart_byteranges_exact_bytes() {
        let body = Bytes::from_static(b"0123456789abcdefghij");
        let mut status = StatusCode::OK;
        let mut h = headers(&[
            ("content-type", "text/plain"),
            ("content-length", "20"),
            ("etag", "\"abc\""),
        ]);
        let plan = RangePlan::Multi(vec![r(0, 1), r(10, 12), r(19, 19)]);
        let out = render(&plan, &mut status, &mut h, &body);
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        let b = boundary_of(&h);
        assert!(
            b.len() >= 16 && b.bytes().all(|c| c.is_ascii_hexdigit()),
            "{b}"
        );
        let want = format!(
            "--{b}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/20\r\n\r\n01\r\n\
             --{b}\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-12/20\r\n\r\nabc\r\n\
             --{b}\r\nContent-Type: text/plain\r\nContent-Range: bytes 19-19/20\r\n\r\nj\r\n\
             --{b}--\r\n"
        );
        assert_eq!(std::str::from_utf8(&out).unwrap(), want);
        assert_eq!(h.get(CONTENT_LENGTH).unwrap(), &want.len().to_string());
        assert!(h.get(CONTENT_RANGE).is_none());
        assert_eq!(h.get(ETAG).unwrap(), "\"abc\"");

        // No stored Content-Type: the parts have none either.
        let mut status = StatusCode::OK;
        let mut h = HeaderMap::new();
        let plan = RangePlan::Multi(vec![r(5, 5), r(0, 0)]);
        let out = render(&plan, &mut status, &mut h, &body);
        let b = boundary_of(&h);
        let want = format!(
            "--{b}\r\nContent-Range: bytes 5-5/20\r\n\r\n5\r\n\
             --{b}\r\nContent-Range: bytes 0-0/20\r\n\r\n0\r\n\
             --{b}--\r\n"
        );
        assert_eq!(std::str::from_utf8(&out).unwrap(), want);
        assert_eq!(h.get(CONTENT_LENGTH).unwrap(), &want.len().to_string());
    }

    #[test]
    fn rfc9110_14_6_multipart_moves_content_encoding_into_parts() {
        let body = Bytes::from_static(b"0123456789");
        let mut status = StatusCode::OK;
        let mut h = headers(&[("content-type", "text/plain"), ("content-encoding", "gzip")]);
        let plan = RangePlan::Multi(vec![r(0, 0), r(9, 9)]);
        let out = render(&plan, &mut status, &mut h, &body);
        let b = boundary_of(&h);
        let want = format!(
            "--{b}\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Range: bytes 0-0/10\r\n\r\n0\r\n\
             --{b}\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Range: bytes 9-9/10\r\n\r\n9\r\n\
             --{b}--\r\n"
        );
        assert_eq!(std::str::from_utf8(&out).unwrap(), want);
        assert!(h.get(CONTENT_ENCODING).is_none());
    }

    #[test]
    fn rfc9110_14_6_render_multipart_private_boundary_is_exact() {
        let body = Bytes::from_static(b"hello world");
        let out = render_multi(
            &[r(0, 4), r(6, 10)],
            11,
            &headers(&[("content-type", "text/plain")]),
            &body,
            "0123456789abcdef",
        )
        .unwrap();
        assert_eq!(
            &out.body[..],
            &b"--0123456789abcdef\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-4/11\r\n\r\nhello\r\n\
               --0123456789abcdef\r\nContent-Type: text/plain\r\nContent-Range: bytes 6-10/11\r\n\r\nworld\r\n\
               --0123456789abcdef--\r\n"[..]
        );
    }

    #[test]
    fn rfc9110_14_6_boundaries_differ() {
        assert_ne!(new_boundary(), new_boundary());
        assert_eq!(new_boundary().len(), 32);
    }

    #[test]
    fn rfc9110_15_5_17_render_unsatisfiable() {
        let body = sample_body();
        let mut status = StatusCode::OK;
        let mut h = stored_headers();
        let out = render(&RangePlan::Unsatisfiable, &mut status, &mut h, &body);
        assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(h.get(CONTENT_RANGE).unwrap(), "bytes */1000");
        assert_eq!(h.get(CONTENT_LENGTH).unwrap(), "0");
        assert!(h.get(CONTENT_TYPE).is_none());
        assert!(out.is_empty());
    }

    #[test]
    fn render_full_changes_nothing() {
        let body = sample_body();
        let mut status = StatusCode::OK;
        let mut h = stored_headers();
        let out = render(&RangePlan::Full, &mut status, &mut h, &body);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h, stored_headers());
        assert_eq!(out, body);
    }

    #[test]
    fn render_rejects_plans_that_do_not_fit_the_body() {
        let body = Bytes::from_static(b"0123456789");
        let plans = [
            RangePlan::Single(r(0, 10)),
            RangePlan::Single(r(10, 10)),
            RangePlan::Single(r(5, 4)),
            RangePlan::Single(r(u64::MAX, u64::MAX)),
            RangePlan::Multi(vec![r(0, 1), r(5, 100)]),
            RangePlan::Multi(vec![]),
        ];
        for p in plans {
            let mut status = StatusCode::OK;
            let mut h = stored_headers();
            let out = render(&p, &mut status, &mut h, &body);
            assert_eq!(status, StatusCode::OK, "{p:?}");
            assert_eq!(h, stored_headers(), "{p:?}");
            assert_eq!(out, body, "{p:?}");
        }
        // §15.3.7.2: never a multipart for one range.
        let mut status = StatusCode::OK;
        let mut h = HeaderMap::new();
        let out = render(&RangePlan::Multi(vec![r(2, 3)]), &mut status, &mut h, &body);
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(h.get(CONTENT_RANGE).unwrap(), "bytes 2-3/10");
        assert_eq!(&out[..], b"23");
    }

    /// Plan then render, checking the invariants that hold for any input.
    fn check_any(range: &[u8], len: u64) {
        let mut request = HeaderMap::new();
        let Ok(value) = HeaderValue::from_bytes(range) else {
            return;
        };
        request.insert(RANGE, value);
        let p = plan(&request, &HeaderMap::new(), len);
        let ranges = match &p {
            RangePlan::Single(one) => vec![*one],
            RangePlan::Multi(many) => {
                assert!(many.len() >= 2 && many.len() <= MAX_PARTS, "{range:?}");
                many.clone()
            }
            RangePlan::Full | RangePlan::Unsatisfiable => vec![],
        };
        for x in &ranges {
            assert!(x.start <= x.end && x.end < len, "{range:?} {len} {x:?}");
        }
        if len <= 64 {
            let body = Bytes::from(vec![b'x'; len as usize]);
            let mut status = StatusCode::OK;
            let mut h = HeaderMap::new();
            let out = render(&p, &mut status, &mut h, &body);
            if p != RangePlan::Full {
                let cl: usize = h
                    .get(CONTENT_LENGTH)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(cl, out.len(), "{range:?}");
            }
        }
    }

    #[test]
    fn odd_inputs_never_panic() {
        let odd = [
            "bytes=",
            "bytes=-",
            "bytes=--1",
            "bytes=1-2-3",
            "bytes=99999999999999999999999",
            "bytes=99999999999999999999999-",
            "bytes=-99999999999999999999999",
            "bytes=18446744073709551615-",
            "bytes=18446744073709551615-18446744073709551615",
            "bytes=-18446744073709551615",
            "bytes=0-18446744073709551615",
            "bytes=18446744073709551614-18446744073709551615",
            "bytes=,,,,,",
            "bytes=-0,-0",
            "=",
            "==",
            "-",
            ",",
            "bytes=\t",
            "bytes=0-0,-1,1-,2-2,-3",
        ];
        let lens = [0, 1, 2, 10, 64, LEN, u64::MAX - 1, u64::MAX];
        for range in odd {
            for len in lens {
                check_any(range.as_bytes(), len);
            }
        }
        // Deterministic pseudo-random strings over the Range alphabet.
        let alphabet = b"bytes=-,0123456789 \tB9";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let n = (state % 24) as usize;
            let mut s = b"bytes=".to_vec();
            if (state >> 8) & 3 == 0 {
                s.clear();
            }
            let mut k = state;
            for _ in 0..n {
                k = k.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                s.push(alphabet[(k >> 33) as usize % alphabet.len()]);
            }
            for len in [0, 1, 7, 64, u64::MAX] {
                check_any(&s, len);
            }
        }
    }

    #[test]
    fn odd_if_range_values_never_panic() {
        let stored = headers(&[("etag", "\"abc\""), ("last-modified", LM), ("date", LM)]);
        for v in [
            "W/",
            "W/\"",
            "\"",
            "\"\"\"",
            "W",
            "Sun, 06 Nov 1994",
            "\u{7f}",
        ] {
            let mut request = headers(&[("range", "bytes=0-1")]);
            if let Ok(value) = HeaderValue::from_str(v) {
                request.insert(IF_RANGE, value);
            }
            let _ = plan(&request, &stored, LEN);
        }
        let mut request = headers(&[("range", "bytes=0-1")]);
        request.insert(IF_RANGE, HeaderValue::from_bytes(b"\"\xff\"").unwrap());
        let stored = headers(&[]);
        assert_eq!(plan(&request, &stored, LEN), RangePlan::Full);
    }
}
