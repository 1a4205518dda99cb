#![allow(clippy::unwrap_used)]
use super::*;
use http::HeaderValue;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn eval(h: &HeaderMap, rules: StoreRules) -> Result<Freshness, NotStorable> {
    eval_auth(h, rules, false)
}

fn eval_auth(h: &HeaderMap, rules: StoreRules, auth: bool) -> Result<Freshness, NotStorable> {
    let ex = Exchange {
        request_has_authorization: auth,
        status: 200,
        headers: h,
        request_time: t(0),
        response_time: t(0),
    };
    evaluate(&ex, &rules).map(|s| s.freshness)
}

fn ttl(secs: u64) -> StoreRules {
    StoreRules {
        ttl: Some(Duration::from_secs(secs)),
        ..Default::default()
    }
}

#[test]
fn s_maxage_beats_max_age_beats_expires_beats_ttl() {
    // RFC 9111 §4.2.1: "If the cache is shared and the s-maxage response directive
    // is present, use its value, or ... max-age ..., or Expires minus Date".
    let date = httpdate::fmt_http_date(t(0));
    let expires = httpdate::fmt_http_date(t(30));
    let h = headers(&[
        ("cache-control", "max-age=20, s-maxage=10"),
        ("date", &date),
        ("expires", &expires),
    ]);
    assert_eq!(eval(&h, ttl(5)).unwrap().lifetime, Duration::from_secs(10));
    let h = headers(&[
        ("cache-control", "max-age=20"),
        ("date", &date),
        ("expires", &expires),
    ]);
    assert_eq!(eval(&h, ttl(5)).unwrap().lifetime, Duration::from_secs(20));
    let h = headers(&[("date", &date), ("expires", &expires)]);
    assert_eq!(eval(&h, ttl(5)).unwrap().lifetime, Duration::from_secs(30));
    let h = headers(&[("date", &date)]);
    assert_eq!(eval(&h, ttl(5)).unwrap().lifetime, Duration::from_secs(5));
}

#[test]
fn override_origin_uses_the_route_ttl() {
    let h = headers(&[("cache-control", "max-age=600")]);
    let rules = StoreRules {
        override_origin: true,
        ..ttl(1)
    };
    assert_eq!(eval(&h, rules).unwrap().lifetime, Duration::from_secs(1));
}

#[test]
fn invalid_expires_means_already_expired() {
    // RFC 9111 §5.3: "A cache recipient MUST interpret invalid date formats,
    // especially the value "0", as representing a time in the past".
    let h = headers(&[("expires", "0")]);
    assert_eq!(eval(&h, ttl(5)), Err(NotStorable::NoFreshness));
}

#[test]
fn personalised_responses_are_not_shared() {
    for (h, why) in [
        (headers(&[("set-cookie", "s=1")]), NotStorable::SetCookie),
        (
            headers(&[("cache-control", "private, max-age=60")]),
            NotStorable::Private,
        ),
        (
            headers(&[("cache-control", "no-store")]),
            NotStorable::NoStore,
        ),
        (headers(&[("vary", "Cookie, *")]), NotStorable::VaryStar),
    ] {
        assert_eq!(eval(&h, ttl(5)), Err(why));
    }
}

#[test]
fn authorised_requests_are_shared_only_when_the_response_allows() {
    // RFC 9111 §3.5: public, s-maxage or must-revalidate allow it.
    let plain = headers(&[("cache-control", "max-age=60")]);
    assert_eq!(
        eval_auth(&plain, ttl(5), true),
        Err(NotStorable::Authorization)
    );
    for cc in [
        "public, max-age=60",
        "s-maxage=60",
        "must-revalidate, max-age=60",
    ] {
        let h = headers(&[("cache-control", cc)]);
        assert!(eval_auth(&h, ttl(5), true).is_ok(), "{cc}");
    }
}

#[test]
fn age_is_corrected_per_rfc_9111_4_2_3() {
    // corrected_age_value = age + response_delay = 3 + 2 = 5 beats
    // apparent_age = response_time - date (less Date's 1 s resolution) = 3.
    let h = headers(&[
        ("date", &httpdate::fmt_http_date(t(0))),
        ("age", "3"),
        ("cache-control", "max-age=60"),
    ]);
    let ex = Exchange {
        request_has_authorization: false,
        status: 200,
        headers: &h,
        request_time: t(2),
        response_time: t(4),
    };
    let f = evaluate(&ex, &StoreRules::default()).unwrap().freshness;
    assert_eq!(f.initial_age, Duration::from_secs(5));
    assert_eq!(f.fresh_for(), Duration::from_secs(55));
    // Without Age, an old Date dominates: apparent_age = 10 - 1.
    let h = headers(&[
        ("date", &httpdate::fmt_http_date(t(0))),
        ("cache-control", "max-age=60"),
    ]);
    let ex = Exchange {
        response_time: t(10),
        request_time: t(10),
        headers: &h,
        ..ex
    };
    let f = evaluate(&ex, &StoreRules::default()).unwrap().freshness;
    assert_eq!(f.initial_age, Duration::from_secs(9));
}

#[test]
fn route_ttl_counts_from_receipt() {
    // A 1 s microcache must not lose the origin's think time or Date's rounding.
    let h = headers(&[("date", &httpdate::fmt_http_date(t(0)))]);
    let ex = Exchange {
        request_has_authorization: false,
        status: 200,
        headers: &h,
        request_time: t(0),
        response_time: t(1),
    };
    let f = evaluate(&ex, &ttl(1)).unwrap().freshness;
    assert_eq!(f.initial_age, Duration::ZERO);
    assert_eq!(f.fresh_for(), Duration::from_secs(1));
}

#[test]
fn stale_windows_come_from_the_origin_then_the_route() {
    let route = StoreRules {
        stale_while_revalidate: Duration::from_secs(10),
        stale_if_error: Duration::from_secs(60),
        ..ttl(1)
    };
    let f = eval(&headers(&[]), route).unwrap();
    assert_eq!(f.stale_while_revalidate, Duration::from_secs(10));
    let f = eval(
        &headers(&[("cache-control", "max-age=1, stale-while-revalidate=3")]),
        route,
    )
    .unwrap();
    assert_eq!(f.stale_while_revalidate, Duration::from_secs(3));
    assert_eq!(f.stale_if_error, Duration::from_secs(60));
    // RFC 9111 §4.2.4: must-revalidate forbids serving stale without validation.
    let f = eval(
        &headers(&[("cache-control", "max-age=1, must-revalidate")]),
        route,
    )
    .unwrap();
    assert_eq!(f.stale_while_revalidate, Duration::ZERO);
    assert_eq!(f.stale_if_error, Duration::ZERO);
}

#[test]
fn partial_and_informational_responses_are_not_stored() {
    let h = headers(&[("cache-control", "max-age=60")]);
    let ex = Exchange {
        request_has_authorization: false,
        status: 206,
        headers: &h,
        request_time: t(0),
        response_time: t(0),
    };
    assert_eq!(
        evaluate(&ex, &StoreRules::default()),
        Err(NotStorable::Status)
    );
}

#[test]
fn a_huge_age_is_capped_not_a_panic() {
    // Regression: an Age near u64::MAX overflowed Duration addition (RFC 9111
    // §1.2.2 caps delta-seconds at 2^31), panicking the fill or every hit.
    let h = headers(&[
        ("age", "18446744073709551615"),
        ("cache-control", "max-age=60"),
    ]);
    let ex = Exchange {
        request_has_authorization: false,
        status: 200,
        headers: &h,
        request_time: t(0),
        response_time: t(5),
    };
    let rules = StoreRules {
        stale_if_error: Duration::from_secs(60),
        ..ttl(1)
    };
    assert_eq!(
        evaluate(&ex, &rules).unwrap().freshness.fresh_for(),
        Duration::ZERO
    );
    let rules = StoreRules {
        stale_if_error: Duration::from_secs(60),
        ..ttl(1)
    };
    let h = headers(&[("age", "18446744073709551615")]);
    let f = evaluate(&Exchange { headers: &h, ..ex }, &rules)
        .unwrap()
        .freshness;
    assert_eq!(f.initial_age, Duration::from_secs(2_147_483_648));
    let meta = crate::object::ObjectMeta {
        stored_at: tokio::time::Instant::now(),
        freshness: f,
        fetch_time: Duration::ZERO,
    };
    let later = meta.stored_at + Duration::from_secs(3600);
    assert!(meta.age(later) >= Duration::from_secs(2_147_483_648));
    assert!(meta.ttl_left(later) < 0.0);
}

fn heuristics() -> StoreRules {
    StoreRules {
        heuristic_fraction: 0.1,
        heuristic_max: Duration::from_secs(86_400),
        ..Default::default()
    }
}

fn with_status(h: &HeaderMap, status: u16, rules: StoreRules) -> Result<Storable, NotStorable> {
    let ex = Exchange {
        request_has_authorization: false,
        status,
        headers: h,
        request_time: t(0),
        response_time: t(0),
    };
    evaluate(&ex, &rules)
}

#[test]
fn heuristic_freshness_only_for_heuristically_cacheable_statuses() {
    // RFC 9111 §4.2.2: 10% of the time since Last-Modified; RFC 9110 §15.1 lists
    // the statuses that may use it.
    let h = headers(&[
        ("date", &httpdate::fmt_http_date(t(36_000))),
        ("last-modified", &httpdate::fmt_http_date(t(0))),
    ]);
    for status in [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
        let s = with_status(&h, status, heuristics()).unwrap();
        assert_eq!(s.freshness.lifetime, Duration::from_secs(3_600), "{status}");
    }
    for status in [201, 302, 307, 400, 403, 500, 502, 503] {
        assert_eq!(
            with_status(&h, status, heuristics()),
            Err(NotStorable::NoFreshness),
            "{status}"
        );
    }
    // `public` makes any status storable (RFC 9111 §3).
    let p = headers(&[
        ("cache-control", "public"),
        ("date", &httpdate::fmt_http_date(t(36_000))),
        ("last-modified", &httpdate::fmt_http_date(t(0))),
    ]);
    assert!(with_status(&p, 302, heuristics()).is_ok());
    // Capped, and off with a zero fraction (then kept only as a validator).
    let capped = StoreRules {
        heuristic_max: Duration::from_secs(60),
        ..heuristics()
    };
    assert_eq!(
        with_status(&h, 200, capped).unwrap().freshness.lifetime,
        Duration::from_secs(60)
    );
    let off = with_status(&h, 200, StoreRules::default()).unwrap();
    assert_eq!(off.freshness.fresh_for(), Duration::ZERO);
}

#[test]
fn route_ttl_comes_before_heuristics() {
    let h = headers(&[("last-modified", &httpdate::fmt_http_date(t(0)))]);
    let rules = StoreRules {
        ttl: Some(Duration::from_secs(2)),
        ..heuristics()
    };
    let s = with_status(&h, 200, rules).unwrap();
    assert_eq!(s.freshness.lifetime, Duration::from_secs(2));
}

#[test]
fn no_cache_is_stored_for_revalidation_only_with_a_validator() {
    // RFC 9111 §5.2.2.4: no-cache may be stored but must be validated on every use.
    let h = headers(&[("cache-control", "no-cache, max-age=60"), ("etag", "\"a\"")]);
    let f = eval(&h, ttl(5)).unwrap();
    assert_eq!(f.fresh_for(), Duration::ZERO);
    assert!(f.stale_forbidden);
    let h = headers(&[("cache-control", "no-cache, max-age=60")]);
    assert_eq!(eval(&h, ttl(5)), Err(NotStorable::NoCache));
}

#[test]
fn stale_on_arrival_is_kept_when_it_can_be_revalidated() {
    // RFC 9111 §4.3: a stored stale response can be validated with ETag/Last-Modified.
    let h = headers(&[("cache-control", "max-age=0"), ("etag", "\"a\"")]);
    assert_eq!(eval(&h, ttl(5)).unwrap().fresh_for(), Duration::ZERO);
    let h = headers(&[("cache-control", "max-age=0")]);
    assert_eq!(eval(&h, ttl(5)), Err(NotStorable::NoFreshness));
}

#[test]
fn qualified_private_and_no_cache_strip_their_fields() {
    // RFC 9111 §5.2.2.7 and §5.2.2.4 with field names.
    let h = headers(&[
        (
            "cache-control",
            "private=\"x-user\", no-cache=\"Set-Cookie\", max-age=60",
        ),
        ("set-cookie", "s=1"),
    ]);
    let s = with_status(&h, 200, StoreRules::default()).unwrap();
    assert_eq!(s.strip_fields, ["x-user", "set-cookie"]);
    assert_eq!(s.freshness.lifetime, Duration::from_secs(60));
}

#[test]
fn targeted_fields_replace_cache_control_and_expires() {
    // RFC 9213 §2.1.
    let h = headers(&[
        ("cache-control", "no-store"),
        ("cdn-cache-control", "max-age=60"),
    ]);
    assert_eq!(eval(&h, ttl(5)).unwrap().lifetime, Duration::from_secs(60));
    let h = headers(&[
        ("cache-control", "max-age=60"),
        ("cdn-cache-control", "no-store"),
    ]);
    assert_eq!(eval(&h, ttl(5)), Err(NotStorable::NoStore));
    // Expires is ignored when a targeted field is used: the route ttl applies.
    let h = headers(&[
        ("expires", &httpdate::fmt_http_date(t(600))),
        ("date", &httpdate::fmt_http_date(t(0))),
        ("cdn-cache-control", "public"),
    ]);
    assert_eq!(eval(&h, ttl(5)).unwrap().lifetime, Duration::from_secs(5));
}

#[test]
fn not_modified_is_never_stored() {
    // RFC 9111 §4.3.4: a 304 only updates a stored response.
    let h = headers(&[("cache-control", "max-age=60")]);
    assert_eq!(with_status(&h, 304, ttl(5)), Err(NotStorable::Status));
}

#[test]
fn immutable_is_carried() {
    let h = headers(&[("cache-control", "max-age=60, immutable")]);
    assert!(eval(&h, ttl(5)).unwrap().immutable);
}

#[test]
fn age_lists_and_invalid_ages() {
    // RFC 9111 §5.1: Age is a single delta-seconds; of a list only the first
    // member counts, and an unparseable one is ignored (§1.2.2).
    for (age, fresh) in [
        ("7200, 0", false),
        ("0, 7200", true),
        ("old", true),
        ("-7200", true),
        ("7200.0", true),
        ("0", true),
    ] {
        let h = headers(&[("cache-control", "max-age=3600"), ("age", age)]);
        // Stale on arrival without a validator: not stored at all.
        let stored_fresh = eval(&h, StoreRules::default()).is_ok_and(|f| !f.fresh_for().is_zero());
        assert_eq!(stored_fresh, fresh, "Age: {age}");
    }
}

#[test]
fn dates_are_read_leniently() {
    // RFC 9111 §4.2: match dates case-insensitively; RFC 9110 §5.6.7 layouts
    // stay strict.
    let want = httpdate::parse_http_date("Thu, 18 Aug 2050 02:01:18 GMT").unwrap();
    for text in [
        "Thu, 18 Aug 2050 02:01:18 GMT",
        "THU, 18 Aug 2050 02:01:18 GMT",
        "Thu, 18 AUG 2050 02:01:18 GMT",
        "Thu, 18 Aug 2050 02:01:18 gMT",
        "Thu Aug 18 02:01:18 2050",
        "Mon Aug 18 02:01:18 2050",
    ] {
        assert_eq!(parse_date(text.as_bytes()), Some(want), "{text}");
    }
    assert!(parse_date(b"Thu Aug  8 02:01:18 2050").is_some());
    for bad in [
        "0",
        "",
        "Thu, 32 Aug 2050 02:01:18 GMT",
        "Thu, 18 Foo 2050 02:01:18 GMT",
        "Thu, 18 Aug 2050 25:00:00 GMT",
        "Thu, 18 Aug 2050 02:01:18 CET",
        "Thu, 18 Aug 50 02:01:18 GMT",
        "Thu 18 Aug 2050 02:01:18 GMT",
        "Thu, 18  Aug 2050 02:01:18 GMT",
        "Thu, 18-Aug-2050 02:01:18 GMT",
        "Thu, 18 Aug 2050 2:01:18 GMT",
        "MON, 31 Feb 2025 00:00:00 GMT",
        "Thu, 18 Aug 2050 02:01:60 gmt",
        // Multi-byte text of the right length must not split a character.
        "Sun, 06 Nov 1994 1é:00:0 GMT",
        "Sun Nov  6 0é:49:3 1994",
    ] {
        assert_eq!(parse_date(bad.as_bytes()), None, "{bad}");
    }
}

#[test]
fn the_three_http_date_forms_are_read_with_ows_around() {
    // RFC 9110 §5.6.7: "A recipient that parses a timestamp value in an HTTP
    // field MUST accept all three HTTP-date formats." This is the one parser
    // for every date calmcache reads (freshness, preconditions, If-Range).
    let want = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
    for text in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        // RFC 9110 §5.5: OWS around a field value is not part of it.
        " \tSun, 06 Nov 1994 08:49:37 GMT\t ",
        "  Sun Nov  6 08:49:37 1994 ",
    ] {
        assert_eq!(parse_date(text.as_bytes()), Some(want), "{text:?}");
    }
    for bad in [
        &b"Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT"[..],
        b"\"Sun, 06 Nov 1994 08:49:37 GMT\"",
        b"Sun, 06 Nov 1994 08:49:37 GMT\xff",
        b"784111777",
    ] {
        assert_eq!(parse_date(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn must_understand_overrides_no_store_for_known_statuses() {
    // RFC 9111 §5.2.2.3.
    let h = headers(&[("cache-control", "max-age=60, no-store, must-understand")]);
    assert!(with_status(&h, 200, StoreRules::default()).is_ok());
    assert_eq!(
        with_status(&h, 599, StoreRules::default()),
        Err(NotStorable::NoStore)
    );
    let h = headers(&[("cache-control", "max-age=60, must-understand")]);
    assert_eq!(
        with_status(&h, 599, StoreRules::default()),
        Err(NotStorable::Status)
    );
}

#[test]
fn several_expires_lines_mean_expired() {
    // RFC 9111 §4.2.1 / §5.3: a duplicated Expires is invalid.
    let future = httpdate::fmt_http_date(t(600));
    let h = headers(&[("expires", &future), ("expires", &future)]);
    assert_eq!(eval(&h, ttl(5)), Err(NotStorable::NoFreshness));
}

/// (case, response fields, route rules, lifetime source, stale use granted)
type GrantCase<'a> = (
    &'a str,
    &'a [(&'static str, &'a str)],
    StoreRules,
    LifetimeSource,
    bool,
);

/// Regression (issue 25, cache-tests `freshness-max-age-stale`): SUS's stale
/// window served a copy past the origin's own `max-age`. The lifetime's
/// source decides whether stale use was granted (RFC 9111 §4.2.4).
#[test]
fn stale_use_is_granted_by_the_route_ttl_or_the_origin_only() {
    let date = httpdate::fmt_http_date(t(0));
    let expires = httpdate::fmt_http_date(t(30));
    let old = httpdate::fmt_http_date(t(0) - Duration::from_secs(100_000));
    let route_windows = StoreRules {
        stale_while_revalidate: Duration::from_secs(10),
        ..Default::default()
    };
    let route_sie = StoreRules {
        stale_if_error: Duration::from_secs(3600),
        ..Default::default()
    };
    let cases: [GrantCase<'_>; 11] = [
        (
            "origin max-age",
            &[("cache-control", "max-age=60")],
            ttl(5),
            LifetimeSource::Origin,
            false,
        ),
        (
            "origin s-maxage",
            &[("cache-control", "s-maxage=60")],
            ttl(5),
            LifetimeSource::Origin,
            false,
        ),
        (
            "origin Expires",
            &[("date", &date), ("expires", &expires)],
            ttl(5),
            LifetimeSource::Origin,
            false,
        ),
        ("route ttl", &[], ttl(5), LifetimeSource::Route, true),
        (
            "route ttl, must-revalidate",
            &[("cache-control", "must-revalidate")],
            ttl(5),
            LifetimeSource::Route,
            false,
        ),
        (
            "override_origin",
            &[("cache-control", "max-age=60")],
            StoreRules {
                override_origin: true,
                ..ttl(5)
            },
            LifetimeSource::Route,
            true,
        ),
        (
            "origin swr",
            &[("cache-control", "max-age=60, stale-while-revalidate=5")],
            ttl(5),
            LifetimeSource::Origin,
            true,
        ),
        (
            "origin sie",
            &[("cache-control", "max-age=60, stale-if-error=5")],
            ttl(5),
            LifetimeSource::Origin,
            false,
        ),
        (
            "heuristic",
            &[("date", &date), ("last-modified", &old)],
            heuristics(),
            LifetimeSource::Heuristic,
            false,
        ),
        (
            "origin max-age, route swr",
            &[("cache-control", "max-age=60")],
            route_windows,
            LifetimeSource::Origin,
            true,
        ),
        // RFC 5861 §4: stale-if-error is a grant for failures only, not for
        // answering stale while a refresh runs (review of issue 25).
        (
            "origin max-age, route sie",
            &[("cache-control", "max-age=60")],
            route_sie,
            LifetimeSource::Origin,
            false,
        ),
    ];
    for (name, pairs, rules, source, granted) in cases {
        let f = eval(&headers(pairs), rules).expect(name);
        assert_eq!(f.source, source, "{name}");
        assert_eq!(f.stale_use_granted(), granted, "{name}");
    }
}

fn ignoring(fields: &[IgnorableField], ttl_secs: u64) -> StoreRules {
    StoreRules {
        ignored: fields.iter().copied().collect(),
        ..ttl(ttl_secs)
    }
}

fn strip_of(h: &HeaderMap, rules: StoreRules) -> Result<Vec<String>, NotStorable> {
    let ex = Exchange {
        request_has_authorization: false,
        status: 200,
        headers: h,
        request_time: t(0),
        response_time: t(0),
    };
    evaluate(&ex, &rules).map(|s| s.strip_fields)
}

#[test]
fn ignored_fields_do_not_decide_storability_or_lifetime() {
    // NGINX's proxy_ignore_headers, a route's ignore_headers (issue 28).
    use IgnorableField::*;
    let date = httpdate::fmt_http_date(t(0));
    let expires = httpdate::fmt_http_date(t(30));
    let lifetime = |pairs: &[(&'static str, &str)], fields: &[IgnorableField]| {
        eval(&headers(pairs), ignoring(fields, 7)).map(|f| (f.lifetime, f.source))
    };
    let secs = Duration::from_secs;
    let cc = [("cache-control", "max-age=60")];
    assert_eq!(lifetime(&cc, &[]), Ok((secs(60), LifetimeSource::Origin)));
    assert_eq!(
        lifetime(&cc, &[CacheControl]),
        Ok((secs(7), LifetimeSource::Route))
    );
    let private = [("cache-control", "private, no-store")];
    assert_eq!(lifetime(&private, &[]), Err(NotStorable::NoStore));
    assert_eq!(
        lifetime(&private, &[CacheControl]),
        Ok((secs(7), LifetimeSource::Route))
    );
    let both = [("date", date.as_str()), ("expires", expires.as_str())];
    assert_eq!(lifetime(&both, &[]), Ok((secs(30), LifetimeSource::Origin)));
    assert_eq!(
        lifetime(&both, &[Expires]),
        Ok((secs(7), LifetimeSource::Route))
    );
    // Cache-Control ignored does not ignore Expires, nor the reverse.
    assert_eq!(
        lifetime(&both, &[CacheControl]),
        Ok((secs(30), LifetimeSource::Origin))
    );
    let cc_and_exp = [("cache-control", "max-age=60"), ("expires", "0")];
    assert_eq!(
        lifetime(&cc_and_exp, &[Expires]),
        Ok((secs(60), LifetimeSource::Origin))
    );
    // A targeted field is still obeyed with Cache-Control ignored.
    let targeted = [
        ("cache-control", "no-store"),
        ("cdn-cache-control", "max-age=90"),
    ];
    assert_eq!(
        lifetime(&targeted, &[CacheControl]),
        Ok((secs(90), LifetimeSource::Origin))
    );
    // X-Accel-Expires is not read: ignoring it changes nothing.
    assert_eq!(
        lifetime(&cc, &[XAccelExpires]),
        Ok((secs(60), LifetimeSource::Origin))
    );
}

#[test]
fn an_ignored_set_cookie_is_stored_without_it() {
    use IgnorableField::*;
    let h = headers(&[("set-cookie", "session=1"), ("cache-control", "max-age=60")]);
    assert_eq!(strip_of(&h, ignoring(&[], 7)), Err(NotStorable::SetCookie));
    assert_eq!(
        strip_of(&h, ignoring(&[SetCookie], 7)),
        Ok(vec!["set-cookie".to_owned()])
    );
    // Not named twice when the origin also says private="set-cookie".
    let named = headers(&[
        ("set-cookie", "a=1"),
        ("cache-control", "max-age=6, private=\"set-cookie\""),
    ]);
    assert_eq!(
        strip_of(&named, ignoring(&[SetCookie], 7)),
        Ok(vec!["set-cookie".to_owned()])
    );
    // Nothing to strip without one.
    let plain = headers(&[("cache-control", "max-age=60")]);
    assert_eq!(strip_of(&plain, ignoring(&[SetCookie], 7)), Ok(vec![]));
}

#[test]
fn an_ignored_vary_stores_one_answer_without_it() {
    use IgnorableField::*;
    let star = headers(&[("vary", "*"), ("cache-control", "max-age=60")]);
    assert_eq!(
        strip_of(&star, ignoring(&[], 7)),
        Err(NotStorable::VaryStar)
    );
    assert_eq!(
        strip_of(&star, ignoring(&[Vary], 7)),
        Ok(vec!["vary".to_owned()])
    );
    let lang = headers(&[("vary", "accept-language")]);
    assert_eq!(strip_of(&lang, ignoring(&[], 7)), Ok(vec![]));
    assert_eq!(
        strip_of(&lang, ignoring(&[Vary], 7)),
        Ok(vec!["vary".to_owned()])
    );
}
