//! `Cache-Status`: RFC 9211. Ours is the last list member, named `calmcache`
//! (§2: upstream caches' members come first), with `hit` (§2.1), `fwd` (§2.2:
//! `uri-miss`, `vary-miss`, `miss`, `request`, `stale`, `bypass`, `method`),
//! `fwd-status` (§2.3), `ttl` as an integer (§2.4), `stored` (§2.5),
//! `collapsed` (§2.6), `key` only when the route asks (§2.7) and `detail`
//! (§2.8).

use calmcache_testkit::{Origin, Proxy, Reply};
use http::Method;

use crate::cases::{get, method, run, Case, Expect::*};

fn upstream_member_first(r: &Reply) -> Result<(), String> {
    let members = r.cache_status_members();
    let names: Vec<&str> = members.iter().map(|m| m.cache.as_str()).collect();
    match members.as_slice() {
        [upstream, ours]
            if upstream.cache == "upstream-cache"
                && upstream.has("hit")
                && ours.cache == "calmcache" =>
        {
            Ok(())
        }
        _ => Err(format!(
            "members {names:?}, want [upstream-cache; hit, calmcache; ...]"
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_status_says_how_each_response_was_produced() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let cases = vec![
        Case::new(
            "RFC 9211 §2.2, §2.3, §2.5",
            "a first request is a stored uri-miss",
        )
        .cc("max-age=60")
        .step(
            get()
                .expect(Param("fwd", "uri-miss"))
                .expect(Param("fwd-status", "200"))
                .expect(Has("stored"))
                .expect(Lacks("hit"))
                .expect(Lacks("collapsed"))
                .expect(Lacks("key"))
                .expect(TtlInteger)
                .expect(TtlBetween(59.0, 60.0)),
        ),
        Case::new("RFC 9211 §2.1, §2.4", "a hit has no fwd and an integer ttl")
            .cc("max-age=60")
            .step(get().fetched(1))
            .step(
                get()
                    .hit(1)
                    .expect(Lacks("fwd"))
                    .expect(Lacks("stored"))
                    .expect(Lacks("key"))
                    .expect(TtlInteger)
                    .expect(TtlBetween(58.0, 60.0)),
            ),
        Case::new(
            "RFC 9211 §2.2",
            "another variant of a stored URI is a vary-miss",
        )
        .cc("max-age=60")
        .respond("Vary: Accept-Language")
        .step(
            get()
                .h("accept-language", "en")
                .expect(Param("fwd", "uri-miss")),
        )
        .step(
            get()
                .h("accept-language", "fr")
                .expect(Param("fwd", "vary-miss"))
                .expect(Has("stored")),
        ),
        Case::new(
            "RFC 9211 §2.2, §2.3",
            "a revalidated stale response: fwd=stale, fwd-status=304",
        )
        .cc("max-age=1")
        .respond("ETag: \"s\"")
        .step(get().fetched(1))
        .after(
            get()
                .expect(Param("fwd", "stale"))
                .expect(Param("fwd-status", "304"))
                .expect(Has("stored"))
                .expect(TtlInteger),
        ),
        Case::new(
            "RFC 9211 §2.2, §2.3",
            "a refetched stale response: fwd=stale, fwd-status=200",
        )
        .cc("max-age=1")
        .step(get().fetched(1))
        .after(
            get()
                .expect(Param("fwd", "stale"))
                .expect(Param("fwd-status", "200"))
                .expect(Has("stored")),
        ),
        Case::new("RFC 9211 §2.2", "a client no-cache is fwd=request")
            .cc("max-age=60")
            .step(get().fetched(1))
            .step(
                get()
                    .h("cache-control", "no-cache")
                    .expect(Param("fwd", "request")),
            ),
        Case::new("RFC 9211 §2.2", "a POST is fwd=method").step(
            method(Method::POST)
                .expect(Param("fwd", "method"))
                .expect(Lacks("stored"))
                .expect(Lacks("hit")),
        ),
        Case::new(
            "RFC 9211 §2.8",
            "not stored because of no-store: detail=no-store",
        )
        .cc("no-store")
        .step(
            get()
                .expect(Param("fwd", "uri-miss"))
                .expect(Lacks("stored"))
                .expect(Param("detail", "no-store")),
        ),
        Case::new(
            "RFC 9211 §2.8",
            "not stored because private: detail=private",
        )
        .cc("private, max-age=60")
        .step(
            get()
                .expect(Param("fwd", "uri-miss"))
                .expect(Lacks("stored"))
                .expect(Param("detail", "private")),
        ),
        Case::new("RFC 9211 §2.3", "fwd-status is the origin's status")
            .cc("no-store")
            .h("x-origin-status", "404")
            .step(get().expect(Status(404)).expect(Param("fwd-status", "404"))),
        Case::new(
            "RFC 9211 §2.4, §2.8",
            "stale-while-revalidate: a hit with a negative ttl",
        )
        .cc("max-age=1, stale-while-revalidate=30")
        .step(get().fetched(1))
        .after(
            get()
                .expect(Hit)
                .expect(Param("detail", "stale-while-revalidate"))
                .expect(TtlInteger)
                .expect(TtlBetween(-5.0, 0.0)),
        ),
        Case::new(
            "RFC 9211 §2.3, §2.8",
            "stale-if-error: detail and the origin's 503",
        )
        .cc("max-age=1, stale-if-error=3600")
        .step(get().fetched(1))
        .after(
            get()
                .status(503)
                .expect(Status(200))
                .expect(Param("detail", "stale-if-error"))
                .expect(Param("fwd-status", "503")),
        ),
        Case::new(
            "RFC 9211 §2.8",
            "only-if-cached on a miss: 504 with detail=only-if-cached",
        )
        .cc("max-age=60")
        .step(
            get()
                .h("cache-control", "only-if-cached")
                .expect(Status(504))
                .expect(Param("detail", "only-if-cached")),
        ),
        Case::new(
            "RFC 9211 §2",
            "an upstream member is kept and ours comes last",
        )
        .cc("max-age=60")
        .respond("Cache-Status: upstream-cache; hit")
        .step(get().expect(Check("members", upstream_member_first)))
        .step(get().hit(1).expect(Check("members", upstream_member_first))),
    ];
    run("cs", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_another_fetch_is_collapsed() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let steer = [
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-delay-ms", "300"),
    ];
    let replies = crate::burst(&proxy.url("/cs-collapsed"), 10, &steer).await;
    assert_eq!(origin.hits(), 1);
    let params: Vec<_> = replies.iter().map(Reply::cache_status_params).collect();
    let stored = params.iter().filter(|p| p.has("stored")).count();
    let collapsed: Vec<_> = params.iter().filter(|p| p.has("collapsed")).collect();
    let all: Vec<String> = params.iter().map(ToString::to_string).collect();
    assert!(stored >= 1, "[RFC 9211 §2.5] the leader stored it: {all:?}");
    assert!(
        !collapsed.is_empty(),
        "[RFC 9211 §2.6] the others waited: {all:?}"
    );
    for p in collapsed {
        assert_eq!(
            p.param("fwd"),
            Some("uri-miss"),
            "[RFC 9211 §2.2, §2.6] a collapsed miss is still a uri-miss: {p}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_a_zone_is_bypass() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).no_zone().start().await;
    let cases = vec![Case::new("RFC 9211 §2.2", "no zone: fwd=bypass")
        .cc("max-age=60")
        .step(
            get()
                .fetched(1)
                .expect(Param("fwd", "bypass"))
                .expect(Lacks("stored")),
        )
        .step(get().fetched(2).expect(Param("fwd", "bypass")))];
    run("cs-nozone", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_shown_only_when_the_route_asks() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "cache_status_key = true").await;
    let cases = vec![
        Case::new("RFC 9211 §2.7", "cache_status_key = true adds key=")
            .cc("max-age=60")
            .step(get().fetched(1).expect(ParamContains("key", "{p}")))
            .step(get().hit(1).expect(ParamContains("key", "{p}"))),
    ];
    run("cs-key", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
