//! Response directives: RFC 9111 §5.2.2 (no-cache with and without field
//! names, private with field names, must-revalidate, proxy-revalidate,
//! s-maxage), §4.2.4 (serving stale), RFC 5861 (stale-while-revalidate,
//! stale-if-error).

use calmcache_testkit::{http_date_ago, Origin};

use crate::cases::{get, run, Case, Expect::*};

/// `max-age=1` plus `extra`, stored in the first phase.
fn expiring(section: &'static str, name: &'static str, extra: &str) -> Case {
    let cc = if extra.is_empty() {
        "max-age=1".to_string()
    } else {
        format!("max-age=1, {extra}")
    };
    Case::new(section, name)
        .h("x-origin-cache-control", cc)
        .step(get().fetched(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidate_directives_forbid_stale_while_revalidate() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "stale_while_revalidate = \"10s\"").await;
    // Served from the cache; the background refresh may reach the origin
    // before the reply does, so the origin's count is not checked.
    let served_stale = || {
        get()
            .expect(Hit)
            .expect(SameBodyAs(0))
            .expect(Param("detail", "stale-while-revalidate"))
    };
    let refetched = || get().fetched(2).expect(OtherBodyThan(0));
    let cases = vec![
        expiring(
            "RFC 5861 §3",
            "the route's window serves stale (control)",
            "",
        )
        .after(served_stale()),
        expiring(
            "RFC 9111 §5.2.2.2",
            "must-revalidate forbids serving stale",
            "must-revalidate",
        )
        .after(refetched()),
        expiring(
            "RFC 9111 §5.2.2.8",
            "proxy-revalidate forbids serving stale",
            "proxy-revalidate",
        )
        .after(refetched()),
        Case::new("RFC 9111 §5.2.2.10", "s-maxage forbids serving stale")
            .cc("s-maxage=1")
            .step(get().fetched(1))
            .after(refetched()),
    ];
    run("swr-forbid", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidate_directives_forbid_stale_if_error() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "stale_if_error = \"1h\"").await;
    let failing = || get().status(503);
    let cases = vec![
        expiring(
            "RFC 5861 §4",
            "the route's window serves stale on a 503 (control)",
            "",
        )
        .after(
            failing()
                .expect(Status(200))
                .expect(SameBodyAs(0))
                .expect(Param("detail", "stale-if-error")),
        ),
        expiring(
            "RFC 9111 §5.2.2.2",
            "must-revalidate: the error goes through",
            "must-revalidate",
        )
        .after(failing().expect(Status(503))),
        expiring(
            "RFC 9111 §5.2.2.8",
            "proxy-revalidate: the error goes through",
            "proxy-revalidate",
        )
        .after(failing().expect(Status(503))),
        Case::new("RFC 9111 §5.2.2.10", "s-maxage: the error goes through")
            .cc("s-maxage=1")
            .step(get().fetched(1))
            .after(failing().expect(Status(503))),
    ];
    run("sie-forbid", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_grants_stale_windows_itself() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let cases = vec![
        expiring(
            "RFC 5861 §3",
            "stale-while-revalidate serves stale at once",
            "stale-while-revalidate=30",
        )
        .after(
            get()
                .expect(Hit)
                .expect(SameBodyAs(0))
                .expect(Param("detail", "stale-while-revalidate")),
        ),
        expiring(
            "RFC 5861 §4",
            "stale-if-error serves stale on a 503",
            "stale-if-error=3600",
        )
        .after(
            get()
                .status(503)
                .expect(Status(200))
                .expect(SameBodyAs(0))
                .expect(Param("detail", "stale-if-error")),
        ),
        expiring(
            "RFC 9111 §4.2.4",
            "without a window a stale response is fetched anew",
            "",
        )
        .after(get().fetched(2).expect(OtherBodyThan(0))),
        expiring("RFC 9111 §4.2.4", "without a window a 503 goes through", "")
            .after(get().status(503).expect(Status(503))),
    ];
    run("origin-windows", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cache_responses_are_stored_but_revalidated_before_each_use() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let last_modified = http_date_ago(86_400);
    let revalidated = |n| {
        get()
            .expect(Status(200))
            .expect(OriginHits("{p}", n))
            .expect(SameBodyAs(0))
    };
    let cases = vec![
        Case::new(
            "RFC 9111 §5.2.2.4",
            "no-cache with an ETag: each use sends If-None-Match",
        )
        .cc("max-age=60, no-cache")
        .respond("ETag: \"n1\"")
        .step(get().fetched(1))
        .step(revalidated(2).expect(OriginSaw("{p}", "if-none-match", Some("\"n1\"".into()))))
        .step(revalidated(3).expect(OriginSaw(
            "{p}",
            "if-none-match",
            Some("\"n1\"".into()),
        ))),
        Case::new(
            "RFC 9111 §5.2.2.4",
            "no-cache with Last-Modified: each use sends If-Modified-Since",
        )
        .cc("no-cache")
        .respond(format!("Last-Modified: {last_modified}"))
        .step(get().fetched(1))
        .step(revalidated(2).expect(OriginSaw(
            "{p}",
            "if-modified-since",
            Some(last_modified.clone()),
        ))),
        Case::new(
            "RFC 9111 §5.2.2.4",
            "no-cache without validators: each use is a fetch",
        )
        .cc("max-age=60, no-cache")
        .step(get().fetched(1))
        .step(get().fetched(2).expect(OtherBodyThan(0)))
        .step(get().fetched(3).expect(OtherBodyThan(1))),
    ];
    run("nocache", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qualified_no_cache_and_private_keep_their_fields_out_of_the_cache() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let cases = vec![
        Case::new(
            "RFC 9111 §5.2.2.4",
            "no-cache=\"X-Secret\" is stored; X-Secret is not served from the cache",
        )
        .cc("max-age=60, no-cache=\"X-Secret\"")
        .respond("X-Secret: s3cr3t")
        .respond("X-Other: kept")
        .step(get().fetched(1))
        .step(
            get()
                .hit(1)
                .expect(SameBodyAs(0))
                .expect(NoHeader("x-secret"))
                .expect(Header("x-other", "kept".into())),
        ),
        Case::new(
            "RFC 9111 §5.2.2.4",
            "no-cache with two field names keeps both out",
        )
        .cc("max-age=60, no-cache=\"X-A, X-B\"")
        .respond("X-A: a")
        .respond("X-B: b")
        .respond("X-Other: kept")
        .step(get().fetched(1))
        .step(
            get()
                .hit(1)
                .expect(NoHeader("x-a"))
                .expect(NoHeader("x-b"))
                .expect(Header("x-other", "kept".into())),
        ),
        Case::new(
            "RFC 9111 §5.2.2.7",
            "private=\"X-User\" is stored without X-User",
        )
        .cc("max-age=60, private=\"X-User\"")
        .respond("X-User: alice")
        .respond("X-Other: kept")
        .step(get().fetched(1))
        .step(
            get()
                .hit(1)
                .expect(SameBodyAs(0))
                .expect(NoHeader("x-user"))
                .expect(Header("x-other", "kept".into())),
        ),
        Case::new(
            "RFC 9111 §5.2.2.7",
            "unqualified private is still never stored",
        )
        .cc("max-age=60, private")
        .not_reused(),
    ];
    run("qualified", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
