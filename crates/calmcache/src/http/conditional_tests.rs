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
    let tags: Vec<EntityTag> = entity_tags(b"\"a,b\", W/\"c\" ,\"d\"").collect();
    let want = [&b"\"a,b\""[..], b"W/\"c\"", b"\"d\""].map(EntityTag::parse);
    assert_eq!(tags, want);
    for odd in [
        &b"\""[..],
        b"W/",
        b",,",
        b"W/\"unterminated",
        b"x",
        b"\xff,\"\xfe\"",
    ] {
        let _: Vec<EntityTag> = entity_tags(odd).collect();
    }
}

/// Matches an If-Match (`Strong`) or If-None-Match (`Weak`) field of
/// `lines` against a representation with the ETag `current`.
fn list(lines: &[&'static str], current: Option<&'static str>, how: Comparison) -> bool {
    let lines: Vec<HeaderValue> = lines.iter().map(|l| HeaderValue::from_static(l)).collect();
    let current = current.map(|c| EntityTag::parse(trim_ows(c.as_bytes())));
    list_matches(lines.iter(), current, how)
}

#[test]
fn entity_tags_compare_strongly_or_weakly() {
    // RFC 9110 §8.8.3.2, its table of examples.
    use Comparison::*;
    let cases = [
        ("W/\"1\"", "W/\"1\"", false, true),
        ("W/\"1\"", "W/\"2\"", false, false),
        ("W/\"1\"", "\"1\"", false, true),
        ("\"1\"", "\"1\"", true, true),
    ];
    for (a, b, strong, weak) in cases {
        let (a, b) = (
            EntityTag::parse(a.as_bytes()),
            EntityTag::parse(b.as_bytes()),
        );
        assert_eq!(a.matches(b, Strong), strong, "{a:?} {b:?}");
        assert_eq!(b.matches(a, Strong), strong, "{a:?} {b:?}");
        assert_eq!(a.matches(b, Weak), weak, "{a:?} {b:?}");
        assert_eq!(b.matches(a, Weak), weak, "{a:?} {b:?}");
    }
    // `W/` is case-sensitive: `w/"1"` is a (malformed) strong tag.
    let lower = EntityTag::parse(b"w/\"1\"");
    assert!(!lower.is_weak() && !lower.is_valid());
    assert!(!lower.matches(EntityTag::parse(b"\"1\""), Weak));
    // Validity: DQUOTE *etagc DQUOTE, obs-text allowed, no space or DQUOTE.
    for (text, valid) in [
        (&b"\"abc\""[..], true),
        (b"W/\"abc\"", true),
        (b"\"\"", true),
        (b"\"a!#~\x80\xff\"", true),
        (b"abc", false),
        (b"\"abc", false),
        (b"\"a b\"", false),
        (b"\"a\"b\"", false),
        (b" \"abc\"", false),
        (b"*", false),
        (b"", false),
        (b"W/", false),
    ] {
        let tag = EntityTag::parse(text);
        assert_eq!(tag.is_valid(), valid, "{:?}", String::from_utf8_lossy(text));
        assert_eq!(EntityTag::parse_valid(text).is_some(), valid);
    }
}

#[test]
fn entity_tag_lists_match_as_both_old_matchers_did() {
    use Comparison::*;
    // Spaces, tabs and empty members around the tags; several field lines.
    assert!(list(&[" \"a\" ,\t\"v1\" "], Some("\"v1\""), Strong));
    assert!(list(&["\"a\",,  ,\"v1\""], Some("\"v1\""), Weak));
    assert!(list(&["\"a\"", "\"v1\""], Some("\"v1\""), Strong));
    assert!(!list(&["\"a\"", "\"b\""], Some("\"v1\""), Weak));
    // A comma inside a quoted tag does not split it.
    assert!(list(&["\"x,v1\""], Some("\"x,v1\""), Strong));
    assert!(!list(&["\"x,v1\""], Some("\"v1\""), Weak));
    // `*` alone matches anything, with or without a current tag...
    assert!(list(&["*"], None, Strong));
    assert!(list(&[" * "], Some("\"v1\""), Weak));
    // ...but is not an entity-tag: in a list, or on one of several
    // lines, it matches nothing.
    assert!(!list(&["*, \"a\""], Some("\"v1\""), Weak));
    assert!(!list(&["*", "\"a\""], Some("\"v1\""), Weak));
    assert!(!list(&["\"a\"", "*"], Some("\"v1\""), Weak));
    // No current tag: only `*` matches.
    assert!(!list(&["\"v1\""], None, Weak));
    // Weak tags: never for If-Match, always for If-None-Match.
    assert!(!list(&["W/\"v1\""], Some("\"v1\""), Strong));
    assert!(!list(&["\"v1\""], Some("W/\"v1\""), Strong));
    assert!(list(&["W/\"v1\""], Some("\"v1\""), Weak));
    assert!(list(&["\"v1\""], Some("W/\"v1\""), Weak));
    // Unquoted tags (malformed, but echoed by clients as the origin sent
    // them) compare as text, as the precondition matcher always did.
    assert!(list(&["abc"], Some("abc"), Strong));
    assert!(list(&["W/abc"], Some("abc"), Weak));
    assert!(!list(&["abc"], Some("\"abc\""), Weak));
    // The stored ETag's OWS is not part of it.
    assert!(list(&["\"v1\""], Some(" \"v1\"\t"), Strong));
}

#[test]
fn obs_text_entity_tags_match() {
    // etagc includes obs-text (RFC 9110 §8.8.3); such tags used to be read
    // as text and dropped by the precondition matcher (If-Range kept them).
    let stored = HeaderMap::from_iter([(
        header::ETAG,
        HeaderValue::from_bytes(b"\"caf\xe9\"").unwrap(),
    )]);
    let mut req = HeaderMap::new();
    req.insert(
        header::IF_NONE_MATCH,
        HeaderValue::from_bytes(b"\"caf\xe9\"").unwrap(),
    );
    assert_eq!(evaluate(&req, &stored), Precondition::NotModified);
    let mut other = HeaderMap::new();
    other.insert(
        header::ETAG,
        HeaderValue::from_bytes(b"W/\"caf\xe9\"").unwrap(),
    );
    assert!(applies_to(&other, &stored));
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

/// Regression (issue 25, cache-tests 0.4.5 `304-etag-update-response-Content-
/// Encoding`, `-Content-Range`, `-Content-MD5`): a 304 replaced the fields that
/// describe the stored bytes, so a stored identity body could be served as
/// gzip. RFC 9111 §3.2 lets a cache keep them "to assure integrity".
#[test]
fn a_304_never_replaces_what_describes_the_stored_bytes() {
    let stored = h(&[
        ("content-encoding", "gzip"),
        ("content-range", "bytes 0-9/10"),
        ("content-md5", "rL0Y20zC+Fzt72VPzMSk2A=="),
        ("content-type", "text/plain"),
    ]);
    let update = h(&[
        ("content-encoding", "br"),
        ("content-range", "bytes 0-4/5"),
        ("content-md5", "N7UdGUp1E+RbVvZSTy1R8g=="),
        ("content-type", "text/plain;charset=utf-8"),
    ]);
    let merged = merge_not_modified(&stored, &update, &[]);
    assert_eq!(merged["content-encoding"], "gzip");
    assert_eq!(merged["content-range"], "bytes 0-9/10");
    assert_eq!(merged["content-md5"], "rL0Y20zC+Fzt72VPzMSk2A==");
    // Everything else is updated (§3.2), Content-Type included.
    assert_eq!(merged["content-type"], "text/plain;charset=utf-8");
}

#[test]
fn a_304_with_another_etag_does_not_apply() {
    // RFC 9111 §4.3.3.
    let stored = h(&[("etag", "\"a\"")]);
    assert!(applies_to(&h(&[("etag", "\"a\"")]), &stored));
    assert!(!applies_to(&h(&[("etag", "\"b\"")]), &stored));
    assert!(applies_to(&HeaderMap::new(), &stored));
    // Weak comparison: W/ on either side, OWS and unquoted tags as before.
    assert!(applies_to(&h(&[("etag", "W/\"a\"")]), &stored));
    assert!(applies_to(&h(&[("etag", "abc")]), &h(&[("etag", " abc")])));
    assert!(!applies_to(&h(&[("etag", "\"a\"")]), &HeaderMap::new()));
}

#[test]
fn revalidation_sends_both_validators() {
    // RFC 9111 §4.3.1.
    let mut req = HeaderMap::new();
    add_validators(&mut req, &h(&[("etag", "\"a\""), ("last-modified", LM)]));
    assert_eq!(req["if-none-match"], "\"a\"");
    assert_eq!(req["if-modified-since"], LM);
}
