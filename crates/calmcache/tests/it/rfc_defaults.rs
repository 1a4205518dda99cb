//! The RFC tables under the default refresh policy. The other `rfc_*` files run
//! with `refresh = "lock"`, so they missed what the default (`sus`, with its
//! `sus_stale` window) changes: RFC 9111 §4.2.4 (no stale copy without the
//! origin's permission) and §4.3.4 (a 304 updates the stored headers before
//! the answer). Found by the HTTP cache conformance suite (issue 25,
//! `freshness-max-age-stale`, `304-etag-update-response-*`), which
//! `scripts/conformance` runs under the default config.

use std::time::Duration;

use calmcache_testkit::wire::TLS_NAME;
use calmcache_testkit::{Origin, Proxy, Wires};
use http::Method;

use crate::cases::{get, run, Case, Expect::*};

const V1: &str = "\"v1\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_refresh_policy_serves_no_copy_past_the_origins_lifetime() {
    // Regression: `sus` (the default) served a copy for max(sus_stale, delta)
    // past the origin's own max-age, and answered a revalidation with the
    // stale headers while the 304 landed behind it.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).no_default_ttl().start().await;
    let cases = vec![
        Case::new(
            "RFC 9111 §4.2.4",
            "a copy past the origin's max-age is fetched, not served stale",
        )
        .cc("max-age=1")
        .step(get().fetched(1))
        .after(get().fetched(2).expect(OtherBodyThan(0))),
        Case::new(
            "RFC 9111 §4.2.4",
            "a copy past Expires is fetched, not served stale",
        )
        .respond(format!("Expires: {}", calmcache_testkit::http_date_in(1)))
        .step(get().fetched(1))
        .after(get().fetched(2).expect(OtherBodyThan(0))),
        Case::new(
            "RFC 9111 §4.3.4",
            "a 304 updates the stored headers of the answer it revalidates",
        )
        .step(
            get()
                .cc("max-age=1")
                .respond(format!("ETag: {V1}"))
                .respond("X-Version: 1")
                .fetched(1),
        )
        .after(
            get()
                .cc("max-age=60")
                .respond(format!("ETag: {V1}"))
                .respond("X-Version: 2")
                .expect(NotHit)
                .expect(Param("fwd-status", "304"))
                .expect(Header("x-version", "2".into()))
                .expect(SameBodyAs(0)),
        ),
        Case::new(
            "RFC 5861 §3",
            "the origin's stale-while-revalidate grants the stale window",
        )
        .cc("max-age=1, stale-while-revalidate=30")
        .step(get().fetched(1))
        .after(get().expect(SameBodyAs(0))),
    ];
    run(
        "defaults",
        &proxy,
        &origin,
        cases,
        Duration::from_millis(1600),
    )
    .await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sus_window_applies_to_the_route_ttl_only_on_every_protocol() {
    // One route with a ttl: an answer without a lifetime of its own gets the
    // ttl, and `sus` may serve it up to sus_stale (2 s) past it while it is
    // refreshed; an answer with the origin's max-age never is (RFC 9111
    // §4.2.4). Over HTTP/1.1, h2c and HTTP/2 over TLS.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).route("ttl = { 200 = \"1s\" }");
    let wires = Wires::start(proxy, "").await;
    let send = |wire, path: String| {
        let wires = &wires;
        async move {
            wires
                .send(wire, Method::GET, TLS_NAME, &path, &[], "")
                .await
        }
    };
    let mut first = Vec::new();
    for (i, wire) in wires.all.iter().enumerate() {
        let route = send(wire, format!("/route-ttl-{i}")).await;
        let origin_says = send(
            wire,
            format!("/origin-max-age-{i}?x-origin-cache-control=max-age%3D1"),
        )
        .await;
        assert_eq!(
            (route.status.as_u16(), origin_says.status.as_u16()),
            (200, 200),
            "{}",
            wire.label()
        );
        first.push((route.body, origin_says.body));
    }
    // The test is about time: both copies expire (1 s), neither leaves the
    // 2 s window.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (i, wire) in wires.all.iter().enumerate() {
        let route = send(wire, format!("/route-ttl-{i}")).await;
        assert_eq!(
            route.body,
            first[i].0,
            "{}: the route's ttl is stretched",
            wire.label()
        );
        let origin_says = send(
            wire,
            format!("/origin-max-age-{i}?x-origin-cache-control=max-age%3D1"),
        )
        .await;
        assert_ne!(
            origin_says.body,
            first[i].1,
            "{}: served past the origin's max-age",
            wire.label()
        );
    }
    wires.proxy.stop().await;
}
