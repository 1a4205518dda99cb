//! Request directives: RFC 9111 §5.2.1 (max-age, max-stale, min-fresh,
//! no-cache, no-store, only-if-cached), §5.4 (Pragma), and the route's
//! `client_cache_control = "honor" | "ignore"`.

use std::time::Duration;

use calmcache_testkit::Origin;

use crate::cases::{get, run, Case, Expect::*};

const CC: &str = "cache-control";

/// Stored fresh for 60 s with an ETag, in the first step.
fn stored(section: &'static str, name: &'static str) -> Case {
    Case::new(section, name)
        .cc("max-age=60")
        .respond("ETag: \"r\"")
        .step(get().fetched(1))
}

/// Stored already 30 s stale (`max-age=10` and `Age: 40`); the origin's
/// `stale-if-error` window is what lets a cache keep it at all.
fn stale(section: &'static str, name: &'static str, extra: &str) -> Case {
    Case::new(section, name)
        .h(
            "x-origin-cache-control",
            format!("max-age=10, stale-if-error=3600{extra}"),
        )
        .respond("Age: 40")
        .step(get().fetched(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_directives_are_honoured_by_default() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let forced = |n| {
        get()
            .expect(Status(200))
            .expect(NotHit)
            .expect(OriginHits("{p}", n))
            .expect(Param("fwd", "request"))
    };
    let cases = vec![
        stored("RFC 9111 §5.2.1.4", "no-cache goes to the origin")
            .step(forced(2).h(CC, "no-cache")),
        stored(
            "RFC 9111 §5.4",
            "Pragma: no-cache without Cache-Control goes to the origin",
        )
        .step(forced(2).h("pragma", "no-cache")),
        stored(
            "RFC 9111 §5.4",
            "Pragma is ignored when Cache-Control is present",
        )
        .step(get().h("pragma", "no-cache").h(CC, "max-age=3600").hit(1)),
        stored("RFC 9111 §5.2.1.1", "max-age=0 goes to the origin")
            .step(forced(2).h(CC, "max-age=0")),
        Case::new(
            "RFC 9111 §5.2.1.1",
            "max-age below the stored age goes to the origin",
        )
        .cc("max-age=60")
        .respond("Age: 30")
        .step(get().fetched(1))
        .step(get().h(CC, "max-age=10").fetched(2)),
        Case::new("RFC 9111 §5.2.1.1", "max-age above the stored age is a hit")
            .cc("max-age=60")
            .respond("Age: 30")
            .step(get().fetched(1))
            .step(get().h(CC, "max-age=100").hit(1)),
        Case::new(
            "RFC 9111 §5.2.1.3",
            "min-fresh beyond what is left goes to the origin",
        )
        .cc("max-age=60")
        .respond("Age: 50")
        .step(get().fetched(1))
        .step(get().h(CC, "min-fresh=30").fetched(2)),
        Case::new(
            "RFC 9111 §5.2.1.3",
            "min-fresh within what is left is a hit",
        )
        .cc("max-age=60")
        .respond("Age: 10")
        .step(get().fetched(1))
        .step(get().h(CC, "min-fresh=5").hit(1)),
        stale(
            "RFC 9111 §5.2.1.2",
            "a stale response is not served without max-stale",
            "",
        )
        .step(get().fetched(2)),
        stale(
            "RFC 9111 §5.2.1.2",
            "max-stale without a value accepts any staleness",
            "",
        )
        .step(get().h(CC, "max-stale").hit(1).expect(SameBodyAs(0))),
        stale(
            "RFC 9111 §5.2.1.2",
            "max-stale=60 accepts 30 s of staleness",
            "",
        )
        .step(get().h(CC, "max-stale=60").hit(1).expect(SameBodyAs(0))),
        stale(
            "RFC 9111 §5.2.1.2",
            "max-stale=10 refuses 30 s of staleness",
            "",
        )
        .step(get().h(CC, "max-stale=10").fetched(2)),
        stale(
            "RFC 9111 §5.2.2.2",
            "must-revalidate overrides max-stale",
            ", must-revalidate",
        )
        .step(get().h(CC, "max-stale").fetched(2)),
        Case::new(
            "RFC 9111 §5.2.1.7",
            "only-if-cached on a miss is a 504 without a fetch",
        )
        .cc("max-age=60")
        .step(
            get()
                .h(CC, "only-if-cached")
                .expect(Status(504))
                .expect(OriginHits("{p}", 0)),
        ),
        stored("RFC 9111 §5.2.1.7", "only-if-cached on a hit is served")
            .step(get().h(CC, "only-if-cached").hit(1).expect(Status(200))),
        Case::new(
            "RFC 9111 §5.2.1.5",
            "no-store in the request: the response is not stored",
        )
        .cc("max-age=60")
        .step(get().h(CC, "no-store").fetched(1).expect(Lacks("stored")))
        .step(get().fetched(2)),
    ];
    run("reqcc", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_client_cache_control_is_served_from_the_cache() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "client_cache_control = \"ignore\"").await;
    let cases = vec![
        stored(
            "calmcache client_cache_control = ignore",
            "no-cache is a hit",
        )
        .step(get().h(CC, "no-cache").hit(1)),
        stored(
            "calmcache client_cache_control = ignore",
            "Pragma: no-cache is a hit",
        )
        .step(get().h("pragma", "no-cache").hit(1)),
        stored(
            "calmcache client_cache_control = ignore",
            "max-age=0 is a hit",
        )
        .step(get().h(CC, "max-age=0").hit(1)),
        Case::new(
            "calmcache client_cache_control = ignore",
            "no-store still lets it be stored",
        )
        .cc("max-age=60")
        .step(get().h(CC, "no-store").fetched(1))
        .step(get().hit(1)),
    ];
    run("reqcc-ignore", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_no_cache_requests_coalesces() {
    // Honoured no-cache still goes through single-flight: 20 concurrent
    // reloads of one key are at most two origin requests, never twenty.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/flood/no-cache");
    let steer = [
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-header", "ETag: \"f\""),
    ];
    crate::burst(&url, 1, &steer).await;
    let flood = [
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-header", "ETag: \"f\""),
        ("x-origin-delay-ms", "300"),
        ("cache-control", "no-cache"),
    ];
    let replies = tokio::time::timeout(Duration::from_secs(20), crate::burst(&url, 20, &flood))
        .await
        .expect("bounded");
    assert!(replies.iter().all(|r| r.status == 200));
    let fetched = origin.hits_for("/flood/no-cache") - 1;
    assert!(
        (1..=2).contains(&fetched),
        "[RFC 9111 §5.2.1.4] 20 concurrent no-cache requests: {fetched} origin requests (want 1 or 2)"
    );
}
