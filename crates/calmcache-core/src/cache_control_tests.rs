#![allow(clippy::unwrap_used)]
use super::*;
use http::HeaderValue;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn parses_the_directives_a_shared_cache_needs() {
    // RFC 9111 §5.2.2, RFC 5861 §3-4, RFC 8246.
    let cc = CacheControl::parse([
        "public, max-age=60, s-maxage=\"120\", immutable, no-transform",
        "stale-while-revalidate=10, stale-if-error=3600, X-Unknown=1",
    ]);
    assert_eq!(cc.max_age, Some(Duration::from_secs(60)));
    assert_eq!(cc.s_maxage, Some(Duration::from_secs(120)));
    assert!(cc.public && cc.immutable && cc.no_transform);
    assert_eq!(cc.stale_while_revalidate, Some(Duration::from_secs(10)));
    assert_eq!(cc.stale_if_error, Some(Duration::from_secs(3600)));
}

#[test]
fn case_and_spacing_do_not_matter() {
    // RFC 9111 §5.2: directive names are case-insensitive.
    let cc = CacheControl::parse(["No-Store ,PRIVATE,  Must-Revalidate"]);
    assert!(cc.no_store && cc.private && cc.must_revalidate);
}

#[test]
fn bad_delta_seconds_are_ignored() {
    // RFC 9111 §1.2.2: a recipient that cannot parse delta-seconds ignores it.
    let cc = CacheControl::parse(["max-age=-1, s-maxage=abc"]);
    assert_eq!(cc.max_age, None);
    assert_eq!(cc.s_maxage, None);
    let big = CacheControl::parse(["max-age=99999999999999999999999"]);
    assert_eq!(big.max_age, Some(Duration::from_secs(2_147_483_648)));
}

#[test]
fn the_first_of_duplicate_directives_wins() {
    // RFC 9111 §4.2.1: use the first occurrence (or treat as stale).
    let cc = CacheControl::parse(["max-age=1", "max-age=3600"]);
    assert_eq!(cc.max_age, Some(Duration::from_secs(1)));
    let cc = CacheControl::parse(["max-age=x, max-age=5"]);
    assert_eq!(cc.max_age, Some(Duration::from_secs(5)));
}

#[test]
fn qualified_no_cache_and_private_keep_their_field_names() {
    // RFC 9111 §5.2.2.4 and §5.2.2.7: the quoted list may hold commas.
    let cc = CacheControl::parse(["no-cache=\"Set-Cookie, X-A\", private=\"X-User\", max-age=5"]);
    assert!(!cc.no_cache && !cc.private);
    assert_eq!(cc.no_cache_fields, ["set-cookie", "x-a"]);
    assert_eq!(cc.private_fields, ["x-user"]);
    assert_eq!(cc.max_age, Some(Duration::from_secs(5)));
    // Unquoted single name (the token form some servers send).
    let cc = CacheControl::parse(["no-cache=set-cookie"]);
    assert_eq!(cc.no_cache_fields, ["set-cookie"]);
}

#[test]
fn odd_input_does_not_panic() {
    for v in [
        "",
        ",,,",
        "=",
        "max-age=",
        "no-cache=\"unterminated",
        "\"",
        "=5, a=\"\\",
        "ü=ü",
    ] {
        let _ = CacheControl::parse([v]);
        // Regression: this line used to parse the fixed string "x" instead
        // of `v`, so none of these inputs ever reached the request parser.
        // `from_bytes`, not `from_str`: "ü=ü" is obs-text, which a header
        // value may carry but `from_str` refuses.
        let mut h = HeaderMap::new();
        h.insert(
            CACHE_CONTROL,
            HeaderValue::from_bytes(v.as_bytes()).unwrap(),
        );
        let _ = RequestCacheControl::from_headers(&h);
        let _: Vec<_> = directives(v).collect();
    }
    // And the inputs do reach it: a value the loop's inputs resemble parses.
    let mut h = HeaderMap::new();
    h.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=5, =5"));
    assert_eq!(
        RequestCacheControl::from_headers(&h).max_age,
        Some(Duration::from_secs(5))
    );
}

#[test]
fn request_directives() {
    // RFC 9111 §5.2.1.
    let r = RequestCacheControl::from_headers(&headers(&[(
        "cache-control",
        "max-age=5, max-stale, min-fresh=2, only-if-cached, no-store",
    )]));
    assert_eq!(r.max_age, Some(Duration::from_secs(5)));
    assert_eq!(r.max_stale, Some(None));
    assert_eq!(r.min_fresh, Some(Duration::from_secs(2)));
    assert!(r.only_if_cached && r.no_store && !r.no_cache);
    let r = RequestCacheControl::from_headers(&headers(&[("cache-control", "max-stale=10")]));
    assert_eq!(r.max_stale, Some(Some(Duration::from_secs(10))));
    let r = RequestCacheControl::from_headers(&headers(&[("cache-control", "max-stale=x")]));
    assert_eq!(r.max_stale, None);
    assert!(RequestCacheControl::from_headers(&HeaderMap::new()).is_empty());
}

#[test]
fn pragma_no_cache_counts_only_without_cache_control() {
    // RFC 9111 §5.4.
    let r = RequestCacheControl::from_headers(&headers(&[("pragma", "no-cache")]));
    assert!(r.no_cache);
    let r = RequestCacheControl::from_headers(&headers(&[
        ("pragma", "no-cache"),
        ("cache-control", "max-age=10"),
    ]));
    assert!(!r.no_cache);
}

#[test]
fn targeted_fields_win_in_order() {
    // RFC 9213 §2.1: the first valid, non-empty targeted field is used.
    let h = headers(&[
        ("cache-control", "no-store"),
        ("cdn-cache-control", "max-age=60"),
        ("calmcache-cache-control", "max-age=5"),
    ]);
    let (cc, targeted) = CacheControl::for_response(&h);
    assert!(targeted);
    assert_eq!(cc.max_age, Some(Duration::from_secs(5)));
    assert!(!cc.no_store);
    let h = headers(&[
        ("cache-control", "no-store"),
        ("cdn-cache-control", "max-age=60"),
    ]);
    assert_eq!(
        CacheControl::for_response(&h).0.max_age,
        Some(Duration::from_secs(60))
    );
}

#[test]
fn invalid_or_empty_targeted_fields_fall_back() {
    // RFC 9213 §2.1: an invalid (not an RFC 8941 dictionary) or empty field is ignored.
    for bad in ["", "Max-Age=60", "max-age=6 0", "max-age=60, /x"] {
        let h = headers(&[("cache-control", "max-age=7"), ("cdn-cache-control", bad)]);
        let (cc, targeted) = CacheControl::for_response(&h);
        assert!(!targeted, "{bad:?}");
        assert_eq!(cc.max_age, Some(Duration::from_secs(7)), "{bad:?}");
    }
}
