//! Storing and freshness: RFC 9111 §3 (what may be stored), §4.2.1
//! (explicit lifetime: s-maxage > max-age > Expires - Date), §4.2.2
//! (heuristic freshness from Last-Modified), §5.2 (directive syntax, duplicates),
//! §5.3 (Expires), RFC 8246 (immutable).

use calmcache_testkit::{http_date_ago, http_date_in, Origin};

use crate::cases::{get, run, Case, Expect::*};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_freshness_decides_whether_a_response_is_reused() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let hit_with_ttl = |lo, hi| {
        get()
            .hit(1)
            .expect(SameBodyAs(0))
            .expect(TtlBetween(lo, hi))
    };
    let auth = ("authorization", "Bearer secret");
    let cases = vec![
        Case::new("RFC 9111 §5.2.2.1", "max-age gives the lifetime")
            .cc("max-age=60")
            .step(get().fetched(1))
            .step(hit_with_ttl(58.0, 60.0)),
        Case::new(
            "RFC 9111 §5.2.2.10",
            "s-maxage overrides max-age for a shared cache",
        )
        .cc("max-age=0, s-maxage=60")
        .step(get().fetched(1))
        .step(hit_with_ttl(58.0, 60.0)),
        Case::new("RFC 9111 §5.2.2.10", "s-maxage=0 overrides max-age=60")
            .cc("s-maxage=0, max-age=60")
            .not_reused(),
        Case::new("RFC 9111 §4.2.1", "s-maxage overrides Expires")
            .cc("s-maxage=60")
            .respond(format!("Expires: {}", http_date_ago(3600)))
            .reused(),
        Case::new("RFC 9111 §5.3", "Expires minus Date gives the lifetime")
            .respond(format!("Expires: {}", http_date_in(60)))
            .step(get().fetched(1))
            .step(hit_with_ttl(57.0, 61.0)),
        Case::new("RFC 9111 §5.3", "max-age overrides a past Expires")
            .cc("max-age=60")
            .respond(format!("Expires: {}", http_date_ago(3600)))
            .reused(),
        Case::new("RFC 9111 §5.3", "max-age overrides an invalid Expires")
            .cc("max-age=60")
            .respond("Expires: 0")
            .reused(),
        Case::new("RFC 9111 §5.3", "an Expires in the past is stale")
            .respond(format!("Expires: {}", http_date_ago(3600)))
            .not_reused(),
        Case::new(
            "RFC 9111 §5.3",
            "an invalid Expires (0) means already expired",
        )
        .respond("Expires: 0")
        .not_reused(),
        Case::new("RFC 9111 §4.2.1", "max-age=0 is stale at once")
            .cc("max-age=0")
            .not_reused(),
        Case::new(
            "RFC 9111 §4.2.2",
            "no explicit lifetime and no validator: nothing to reuse",
        )
        .not_reused(),
        Case::new("RFC 9111 §5.2.2.5", "no-store is never stored")
            .cc("max-age=60, no-store")
            .not_reused(),
        Case::new(
            "RFC 9111 §5.2.2.7",
            "private is never stored by a shared cache",
        )
        .cc("private, max-age=60")
        .not_reused(),
        Case::new(
            "RFC 9111 §7.3 (calmcache policy)",
            "a response setting a cookie is never shared",
        )
        .cc("max-age=60")
        .h("x-origin-set-cookie", "session=abc")
        .step(
            get()
                .fetched(1)
                .expect(Header("set-cookie", "session=abc".into())),
        )
        .step(get().fetched(2)),
        Case::new("RFC 9111 §5.2", "directive names are case-insensitive")
            .cc("MAX-AGE=60")
            .reused(),
        Case::new("RFC 9111 §5.2", "a quoted argument is accepted")
            .cc("max-age=\"60\"")
            .reused(),
        Case::new("RFC 9111 §5.2", "directives on two field lines combine")
            .respond("Cache-Control: public")
            .respond("Cache-Control: max-age=60")
            .reused(),
        Case::new(
            "RFC 9111 §5.2",
            "no-store on a second field line still forbids storing",
        )
        .respond("Cache-Control: max-age=60")
        .respond("Cache-Control: no-store")
        .not_reused(),
        Case::new(
            "RFC 9111 §1.2.2",
            "a malformed max-age is ignored and Expires applies",
        )
        .cc("max-age=abc")
        .respond(format!("Expires: {}", http_date_in(60)))
        .step(get().fetched(1))
        .step(hit_with_ttl(57.0, 61.0)),
        Case::new(
            "RFC 9111 §1.2.2",
            "a malformed max-age alone gives no lifetime",
        )
        .cc("max-age=abc")
        .not_reused(),
        Case::new(
            "RFC 8246 §2",
            "immutable does not stop a fresh response being reused",
        )
        .cc("max-age=60, immutable")
        .reused(),
        Case::new(
            "RFC 9111 §3.5",
            "an answer to an authorized request is not shared by default",
        )
        .cc("max-age=60")
        .h(auth.0, auth.1)
        .not_reused(),
        Case::new(
            "RFC 9111 §3.5",
            "public allows sharing an authorized answer",
        )
        .cc("public, max-age=60")
        .h(auth.0, auth.1)
        .reused(),
        Case::new(
            "RFC 9111 §3.5",
            "s-maxage allows sharing an authorized answer",
        )
        .cc("s-maxage=60")
        .h(auth.0, auth.1)
        .reused(),
        Case::new(
            "RFC 9111 §3.5",
            "must-revalidate allows sharing an authorized answer",
        )
        .cc("max-age=60, must-revalidate")
        .h(auth.0, auth.1)
        .reused(),
    ];
    run("fresh", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_lifetime_directives_never_give_the_longer_one() {
    // RFC 9111 §4.2.1: with duplicated or conflicting directives a cache may
    // use the first or treat the response as stale; either way a response
    // saying `max-age=1, max-age=3600` is not reused after 1.5 s.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let stale_later = |section, name, cc: &str| {
        Case::new(section, name)
            .cc(cc)
            .step(get().fetched(1))
            .after(get().fetched(2))
    };
    let cases = vec![
        stale_later(
            "RFC 9111 §4.2.1",
            "duplicate max-age",
            "max-age=1, max-age=3600",
        ),
        stale_later(
            "RFC 9111 §4.2.1",
            "duplicate s-maxage",
            "s-maxage=1, s-maxage=3600",
        ),
        Case::new("RFC 9111 §4.2.1", "duplicate max-age on two field lines")
            .respond("Cache-Control: max-age=1")
            .respond("Cache-Control: max-age=3600")
            .step(get().fetched(1))
            .after(get().fetched(2)),
        stale_later(
            "RFC 9111 §1.2.2",
            "a malformed duplicate is ignored",
            "max-age=1, max-age=abc",
        ),
    ];
    run("dup", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

/// A 10-hour-old `Last-Modified` and no explicit lifetime: 10% of it is 1 h.
fn heuristic(section: &'static str, name: &'static str, status: u16, reused: bool) -> Case {
    let case = Case::new(section, name)
        .h("x-origin-status", status.to_string())
        .respond(format!("Last-Modified: {}", http_date_ago(36_000)));
    if reused {
        case.step(get().fetched(1).expect(Status(status))).step(
            get()
                .hit(1)
                .expect(Status(status))
                .expect(TtlBetween(3_500.0, 3_601.0)),
        )
    } else {
        case.not_reused()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heuristic_freshness_only_for_heuristically_cacheable_statuses() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let s = "RFC 9111 §4.2.2, RFC 9110 §15.1";
    let mut cases = vec![heuristic(
        "RFC 9111 §4.2.2",
        "200 with a 10 h old Last-Modified is fresh for 1 h",
        200,
        true,
    )];
    for (status, name) in [
        (203, "203 is heuristically cacheable"),
        (204, "204 is heuristically cacheable"),
        (300, "300 is heuristically cacheable"),
        (301, "301 is heuristically cacheable"),
        (308, "308 is heuristically cacheable"),
        (404, "404 is heuristically cacheable"),
        (405, "405 is heuristically cacheable"),
        (410, "410 is heuristically cacheable"),
        (414, "414 is heuristically cacheable"),
        (501, "501 is heuristically cacheable"),
    ] {
        cases.push(heuristic(s, name, status, true));
    }
    for (status, name) in [
        (302, "302 is not heuristically cacheable"),
        (303, "303 is not heuristically cacheable"),
        (307, "307 is not heuristically cacheable"),
        (400, "400 is not heuristically cacheable"),
        (403, "403 is not heuristically cacheable"),
        (500, "500 is not heuristically cacheable"),
        (503, "503 is not heuristically cacheable"),
    ] {
        cases.push(heuristic(s, name, status, false));
    }
    cases.push(
        Case::new(
            "RFC 9111 §4.2.2",
            "public without a lifetime uses the heuristic too",
        )
        .cc("public")
        .respond(format!("Last-Modified: {}", http_date_ago(36_000)))
        .step(get().fetched(1))
        .step(get().hit(1).expect(TtlBetween(3_500.0, 3_601.0))),
    );
    cases.push(
        Case::new(
            "RFC 9111 §4.2.2",
            "an explicit (invalid) Expires rules the heuristic out",
        )
        .respond("Expires: 0")
        .respond(format!("Last-Modified: {}", http_date_ago(36_000)))
        .not_reused(),
    );
    cases.push(
        Case::new(
            "RFC 9111 §4.2.2",
            "an explicit max-age=0 rules the heuristic out",
        )
        .cc("max-age=0")
        .respond(format!("Last-Modified: {}", http_date_ago(36_000)))
        .not_reused(),
    );
    run("heur", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heuristic_fraction_and_cap_come_from_the_route() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "heuristic_fraction = 0.5\nheuristic_max = \"1h\"").await;
    let cases = vec![
        Case::new("RFC 9111 §4.2.2", "heuristic_fraction scales the lifetime")
            .respond(format!("Last-Modified: {}", http_date_ago(1_000)))
            .step(get().fetched(1))
            .step(get().hit(1).expect(TtlBetween(480.0, 501.0))),
        Case::new("RFC 9111 §4.2.2", "heuristic_max caps the lifetime")
            .respond(format!("Last-Modified: {}", http_date_ago(100 * 86_400)))
            .step(get().fetched(1))
            .step(get().hit(1).expect(TtlBetween(3_500.0, 3_600.0))),
    ];
    run("heurcfg", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
