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
