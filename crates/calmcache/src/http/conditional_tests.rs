#![allow(clippy::unwrap_used)]
use super::*;

fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in pairs {
        m.append(*k, HeaderValue::from_static(v));
    }
    m
}

const LM: &str = "Tue, 15 Nov 1994 12:45:26 GMT";
const BEFORE: &str = "Tue, 15 Nov 1994 12:45:25 GMT";
const AFTER: &str = "Tue, 15 Nov 1994 12:45:27 GMT";

#[test]
fn preconditions_in_rfc_9110_order() {
    let stored = h(&[("etag", "\"v1\""), ("last-modified", LM)]);
    let weak = h(&[("etag", "W/\"v1\""), ("last-modified", LM)]);
    use Precondition::*;
    type Case<'a> = (
        &'a str,
        &'a [(&'static str, &'static str)],
        &'a HeaderMap,
        Precondition,
    );
    let cases: &[Case] = &[
        (
            "§13.1.2 If-None-Match matches",
            &[("if-none-match", "\"v1\"")],
            &stored,
            NotModified,
        ),
        (
            "§13.1.2 list with match",
            &[("if-none-match", "\"x\", \"v1\"")],
            &stored,
            NotModified,
        ),
        (
            "§13.1.2 weak comparison",
            &[("if-none-match", "\"v1\"")],
            &weak,
            NotModified,
        ),
        (
            "§13.1.2 W/ in request",
            &[("if-none-match", "W/\"v1\"")],
            &stored,
            NotModified,
        ),
        (
            "§13.1.2 star",
            &[("if-none-match", "*")],
            &stored,
            NotModified,
        ),
        (
            "§13.1.2 no match",
            &[("if-none-match", "\"v2\"")],
            &stored,
            Proceed,
        ),
        (
            "§13.1.3 not modified since",
            &[("if-modified-since", LM)],
            &stored,
            NotModified,
        ),
        (
            "§13.1.3 later date",
            &[("if-modified-since", AFTER)],
            &stored,
            NotModified,
        ),
        (
            "§13.1.3 modified since",
            &[("if-modified-since", BEFORE)],
            &stored,
            Proceed,
        ),
        (
            "§13.1.3 invalid date ignored",
            &[("if-modified-since", "yesterday")],
            &stored,
            Proceed,
        ),
        (
            "§13.2.2 If-None-Match beats If-Modified-Since",
            &[("if-none-match", "\"v2\""), ("if-modified-since", AFTER)],
            &stored,
            Proceed,
        ),
        (
            "§13.1.1 If-Match strong match",
            &[("if-match", "\"v1\"")],
            &stored,
            Proceed,
        ),
        (
            "§13.1.1 If-Match weak never matches",
            &[("if-match", "\"v1\"")],
            &weak,
            Failed,
        ),
        (
            "§13.1.1 If-Match mismatch",
            &[("if-match", "\"v2\"")],
            &stored,
            Failed,
        ),
        (
            "§13.1.4 If-Unmodified-Since passed",
            &[("if-unmodified-since", LM)],
            &stored,
            Proceed,
        ),
        (
            "§13.1.4 If-Unmodified-Since failed",
            &[("if-unmodified-since", BEFORE)],
            &stored,
            Failed,
        ),
    ];
    for (name, req, resp, want) in cases {
        assert_eq!(evaluate(&h(req), resp), *want, "RFC 9110 {name}");
    }
    assert_eq!(
        evaluate(&h(&[("if-none-match", "\"v1\"")]), &HeaderMap::new()),
        Proceed
    );
    // §13.1.1-2: "*" matches any current representation, ETag or not.
    assert_eq!(
        evaluate(&h(&[("if-none-match", "*")]), &HeaderMap::new()),
        NotModified
    );
    assert_eq!(
        evaluate(&h(&[("if-match", "*")]), &HeaderMap::new()),
        Proceed
    );
}

#[test]
fn entity_tag_lists_may_hold_commas() {
    let tags: Vec<&str> = entity_tags("\"a,b\", W/\"c\" ,\"d\"").collect();
    assert_eq!(tags, ["\"a,b\"", "W/\"c\"", "\"d\""]);
    for odd in ["\"", "W/", ",,", "W/\"unterminated", "x"] {
        let _: Vec<&str> = entity_tags(odd).collect();
    }
}

#[test]
fn a_304_replaces_fields_but_not_the_length() {
    // RFC 9111 §3.2: "MUST add each header field in the provided response to the
    // stored response, replacing field values that are already present", except
    // Content-Length.
    let stored = h(&[
        ("content-length", "10"),
        ("x-version", "1"),
        ("cache-control", "max-age=1"),
        ("etag", "\"a\""),
    ]);
    let update = h(&[
        ("content-length", "0"),
        ("x-version", "2"),
        ("cache-control", "max-age=60"),
        ("x-new", "n"),
        ("x-secret", "s"),
    ]);
    let merged = merge_not_modified(&stored, &update, &["x-secret".to_owned()]);
    assert_eq!(merged["content-length"], "10");
    assert_eq!(merged["x-version"], "2");
    assert_eq!(merged["cache-control"], "max-age=60");
    assert_eq!(merged["x-new"], "n");
    assert_eq!(merged["etag"], "\"a\"");
    assert!(!merged.contains_key("x-secret"));
}

#[test]
fn a_304_with_another_etag_does_not_apply() {
    // RFC 9111 §4.3.3.
    let stored = h(&[("etag", "\"a\"")]);
    assert!(applies_to(&h(&[("etag", "\"a\"")]), &stored));
    assert!(!applies_to(&h(&[("etag", "\"b\"")]), &stored));
    assert!(applies_to(&HeaderMap::new(), &stored));
}

#[test]
fn revalidation_sends_both_validators() {
    // RFC 9111 §4.3.1.
    let mut req = HeaderMap::new();
    add_validators(&mut req, &h(&[("etag", "\"a\""), ("last-modified", LM)]));
    assert_eq!(req["if-none-match"], "\"a\"");
    assert_eq!(req["if-modified-since"], LM);
}
