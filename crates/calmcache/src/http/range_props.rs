//! Property tests for `Range` / `If-Range` (RFC 9110 §14, §13.1.5):
//! arbitrary header bytes never panic and only ever yield ranges inside the
//! body; well-formed `bytes=` sets give exactly the bytes they cover
//! (coalesced, in request order); a single range renders exactly
//! `[a, min(b, n - 1)]`; several render as the exact multipart body; and
//! If-Range keeps the ranges only for a strongly matching entity-tag.

#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, IF_RANGE, RANGE};
use http::{HeaderMap, HeaderValue, StatusCode};
use proptest::prelude::*;

use super::{plan, render, ByteRange, RangePlan, MAX_PARTS};

/// Bytes over the Range alphabet, often starting with a unit.
fn range_soup() -> impl Strategy<Value = Vec<u8>> {
    proptest::string::string_regex(
        r"(bytes=|BYTES=|items=|=)?([0-9]{1,3}|[0-9]{18,21}|[-, \t=]|[a-z]){0,14}",
    )
    .unwrap()
    .prop_map(String::into_bytes)
}

fn lengths() -> impl Strategy<Value = u64> {
    prop_oneof![0..80u64, Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()]
}

fn body(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>())
}

fn parts_of(p: &RangePlan) -> Vec<ByteRange> {
    match p {
        RangePlan::Single(one) => vec![*one],
        RangePlan::Multi(many) => many.clone(),
        RangePlan::Full | RangePlan::Unsatisfiable => Vec::new(),
    }
}

/// A well-formed range-spec.
#[derive(Clone, Copy, Debug)]
enum Spec {
    Int(u64, Option<u64>),
    Suffix(u64),
}

impl Spec {
    fn text(self) -> String {
        match self {
            Spec::Int(first, Some(last)) => format!("{first}-{last}"),
            Spec::Int(first, None) => format!("{first}-"),
            Spec::Suffix(n) => format!("-{n}"),
        }
    }

    /// The bytes it selects in a body of `len`, if satisfiable there.
    fn resolve(self, len: u64) -> Option<(u64, u64)> {
        match self {
            Spec::Int(first, last) if first < len => {
                Some((first, last.map_or(len - 1, |l| l.min(len - 1))))
            }
            Spec::Suffix(n) if n > 0 && len > 0 => Some((len - n.min(len), len - 1)),
            _ => None,
        }
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        (0..120u64, 0..60u64).prop_map(|(a, d)| Spec::Int(a, Some(a + d))),
        (0..120u64).prop_map(|a| Spec::Int(a, None)),
        (0..120u64).prop_map(Spec::Suffix),
    ]
}

/// `specs` as a `Range` value, with list spacing and unit case from `style`.
fn range_text(specs: &[Spec], style: u8) -> String {
    let unit = if style & 1 == 0 { "bytes" } else { "Bytes" };
    let sep = match (style >> 1) & 3 {
        0 => ",",
        1 => ", ",
        2 => " ,\t",
        _ => ",,",
    };
    let set: Vec<String> = specs.iter().map(|s| s.text()).collect();
    format!("{unit}={}", set.join(sep))
}

fn request(range: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(RANGE, HeaderValue::from_bytes(range).unwrap());
    h
}

/// The coalesced parts `specs` must give against `len`, in request order,
/// or `None` when the answer is not a list of parts.
fn model(specs: &[Spec], len: u64) -> Option<Vec<ByteRange>> {
    let resolved: Vec<(usize, (u64, u64))> = specs
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.resolve(len).map(|r| (i, r)))
        .collect();
    let mut covered = vec![None::<usize>; len as usize];
    for &(i, (start, end)) in &resolved {
        for slot in &mut covered[start as usize..=end as usize] {
            *slot = Some(slot.map_or(i, |j| j.min(i)));
        }
    }
    // Maximal runs of covered bytes, each with its earliest spec.
    let mut runs: Vec<(usize, ByteRange)> = Vec::new();
    let mut at = 0;
    while at < covered.len() {
        let Some(first) = covered[at] else {
            at += 1;
            continue;
        };
        let start = at;
        let mut index = first;
        while let Some(Some(i)) = covered.get(at) {
            index = index.min(*i);
            at += 1;
        }
        runs.push((
            index,
            ByteRange {
                start: start as u64,
                end: at as u64 - 1,
            },
        ));
    }
    runs.sort_by_key(|&(index, _)| index);
    let parts: Vec<ByteRange> = runs.into_iter().map(|(_, r)| r).collect();
    (!parts.is_empty() && parts.len() <= MAX_PARTS).then_some(parts)
}

proptest! {
    /// Arbitrary `Range` bytes (and `If-Range` bytes against a stored
    /// validator) never panic; whatever is planned lies inside the body, a
    /// multipart plan has 2 to MAX_PARTS disjoint, non-adjacent parts, and
    /// rendering it sets a Content-Length equal to the body sent.
    #[test]
    fn arbitrary_ranges_never_panic(
        range in prop_oneof![range_soup(), proptest::collection::vec(any::<u8>(), 0..32)],
        if_range in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..32)),
        len in lengths(),
    ) {
        let Ok(value) = HeaderValue::from_bytes(&range) else {
            return Ok(());
        };
        let mut req = HeaderMap::new();
        req.insert(RANGE, value);
        if let Some(Ok(v)) = if_range.as_deref().map(HeaderValue::from_bytes) {
            req.insert(IF_RANGE, v);
        }
        let mut stored = HeaderMap::new();
        stored.insert(ETAG, HeaderValue::from_static("\"v1\""));
        stored.insert(http::header::LAST_MODIFIED, HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"));
        let p = plan(&req, &stored, len);
        let parts = parts_of(&p);
        for r in &parts {
            prop_assert!(r.start <= r.end && r.end < len, "{:?} {} {:?}", range, len, r);
        }
        if let RangePlan::Multi(many) = &p {
            prop_assert!((2..=MAX_PARTS).contains(&many.len()));
            let mut sorted = many.clone();
            sorted.sort_by_key(|r| r.start);
            for w in sorted.windows(2) {
                prop_assert!(w[0].end.saturating_add(1) < w[1].start, "{:?}", many);
            }
        }
        if len <= 256 {
            let body = body(len as usize);
            let mut status = StatusCode::OK;
            let mut h = HeaderMap::new();
            let out = render(&p, &mut status, &mut h, &body);
            if p == RangePlan::Full {
                prop_assert_eq!(status, StatusCode::OK);
                prop_assert_eq!(out, body);
            } else {
                let cl: usize = h[CONTENT_LENGTH].to_str().unwrap().parse().unwrap();
                prop_assert_eq!(cl, out.len());
            }
        }
    }

    /// Well-formed `bytes=` sets against a body of `len` bytes: the parts
    /// are exactly the coalesced union of the satisfiable specs, each part
    /// placed where its earliest spec was; nothing satisfiable is a 416,
    /// and a zero-length body with a suffix range is the full (empty) 200.
    #[test]
    fn well_formed_sets_give_the_bytes_they_cover(
        specs in proptest::collection::vec(spec(), 1..10),
        len in 0..100u64,
        style in any::<u8>(),
    ) {
        let text = range_text(&specs, style);
        let p = plan(&request(text.as_bytes()), &HeaderMap::new(), len);
        let suffix_on_empty = len == 0 && specs.iter().any(|s| matches!(s, Spec::Suffix(n) if *n > 0));
        let want = if suffix_on_empty {
            RangePlan::Full
        } else {
            match model(&specs, len) {
                None if specs.iter().all(|s| s.resolve(len).is_none()) => RangePlan::Unsatisfiable,
                None => RangePlan::Full,
                Some(parts) if parts.len() == 1 => RangePlan::Single(parts[0]),
                Some(parts) => RangePlan::Multi(parts),
            }
        };
        prop_assert_eq!(p, want, "{}", text);
    }

    /// One spec with first-pos `a` against a body of `n` bytes: `a < n`
    /// gives a 206 with exactly the bytes `[a, min(b, n - 1)]`, its
    /// Content-Range and Content-Length; `a >= n` gives a 416 naming `n`.
    #[test]
    fn a_single_range_yields_exactly_its_bytes(
        n in 0..300u64,
        a in 0..320u64,
        span in proptest::option::of(0..400u64),
    ) {
        let b = span.map(|d| a + d);
        let text = match b {
            Some(b) => format!("bytes={a}-{b}"),
            None => format!("bytes={a}-"),
        };
        let body = body(n as usize);
        let p = plan(&request(text.as_bytes()), &HeaderMap::new(), n);
        let mut status = StatusCode::OK;
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        let out = render(&p, &mut status, &mut h, &body);
        if a < n {
            let end = b.map_or(n - 1, |b| b.min(n - 1));
            prop_assert_eq!(&p, &RangePlan::Single(ByteRange { start: a, end }));
            prop_assert_eq!(status, StatusCode::PARTIAL_CONTENT);
            prop_assert_eq!(&out[..], &body[a as usize..=end as usize]);
            prop_assert_eq!(h[CONTENT_RANGE].to_str().unwrap(), format!("bytes {a}-{end}/{n}"));
            prop_assert_eq!(h[CONTENT_LENGTH].to_str().unwrap(), (end - a + 1).to_string());
            prop_assert_eq!(h[CONTENT_TYPE].to_str().unwrap(), "text/plain");
        } else {
            prop_assert_eq!(&p, &RangePlan::Unsatisfiable);
            prop_assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
            prop_assert!(out.is_empty());
            prop_assert_eq!(h[CONTENT_RANGE].to_str().unwrap(), format!("bytes */{n}"));
            prop_assert!(h.get(CONTENT_TYPE).is_none());
        }
    }

    /// Several parts render as exactly `--B CRLF Content-Range CRLF CRLF
    /// data CRLF` per part, then `--B-- CRLF`, with the data sliced from
    /// the body.
    #[test]
    fn multipart_bodies_hold_exactly_their_parts(
        specs in proptest::collection::vec(spec(), 2..8),
        len in 1..100u64,
    ) {
        let text = range_text(&specs, 0);
        let p = plan(&request(text.as_bytes()), &HeaderMap::new(), len);
        let RangePlan::Multi(parts) = &p else {
            return Ok(());
        };
        let body = body(len as usize);
        let mut status = StatusCode::OK;
        let mut h = HeaderMap::new();
        let out = render(&p, &mut status, &mut h, &body);
        prop_assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        let ct = h[CONTENT_TYPE].to_str().unwrap();
        let boundary = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
        let mut want = Vec::new();
        for r in parts {
            want.extend_from_slice(format!("--{boundary}\r\nContent-Range: bytes {}-{}/{len}\r\n\r\n", r.start, r.end).as_bytes());
            want.extend_from_slice(&body[r.start as usize..=r.end as usize]);
            want.extend_from_slice(b"\r\n");
        }
        want.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        prop_assert_eq!(&out[..], &want[..]);
        prop_assert_eq!(h[CONTENT_LENGTH].to_str().unwrap(), out.len().to_string());
    }

    /// One invalid spec (last-pos before first-pos, or not a number)
    /// anywhere in a set makes the whole header ignored (RFC 9110 §14.2).
    #[test]
    fn one_invalid_spec_voids_the_set(
        specs in proptest::collection::vec(spec(), 0..6),
        at in any::<prop::sample::Index>(),
        bad in prop_oneof![
            (1..100u64, 1..50u64).prop_map(|(a, d)| format!("{a}-{}", a - d.min(a))),
            Just("1-2-3".to_owned()),
            Just("x-1".to_owned()),
            Just("-".to_owned()),
            Just("18446744073709551616-".to_owned()),
        ],
        len in 0..100u64,
    ) {
        let mut set: Vec<String> = specs.iter().map(|s| s.text()).collect();
        set.insert(at.index(set.len() + 1), bad.clone());
        let text = format!("bytes={}", set.join(","));
        prop_assert_eq!(plan(&request(text.as_bytes()), &HeaderMap::new(), len), RangePlan::Full, "{}", text);
    }

    /// If-Range with an entity-tag keeps the range only when it strongly
    /// matches the stored ETag (RFC 9110 §13.1.5, §8.8.3.2): same opaque
    /// tag, neither weak.
    #[test]
    fn if_range_keeps_the_range_only_for_a_strong_match(
        given in "[!#-~]{0,8}",
        current in prop_oneof!["[!#-~]{0,8}", Just(String::new())],
        same in any::<bool>(),
        weak_given in any::<bool>(),
        weak_current in any::<bool>(),
    ) {
        let current = if same { given.clone() } else { current };
        let tag = |weak: bool, opaque: &str| {
            HeaderValue::from_str(&format!("{}\"{opaque}\"", if weak { "W/" } else { "" })).unwrap()
        };
        let mut req = request(b"bytes=0-9");
        req.insert(IF_RANGE, tag(weak_given, &given));
        let mut stored = HeaderMap::new();
        stored.insert(ETAG, tag(weak_current, &current));
        let matches = given == current && !weak_given && !weak_current;
        let want = if matches {
            RangePlan::Single(ByteRange { start: 0, end: 9 })
        } else {
            RangePlan::Full
        };
        prop_assert_eq!(plan(&req, &stored, 100), want);
    }
}
