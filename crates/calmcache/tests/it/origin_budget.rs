//! The origin budget (issue 27): `max_inflight` requests at each server at
//! once, counted across fills, refreshes and passes; a request with no
//! copy waits in arrival order up to `queue_timeout`, then gets a 503 with
//! `Retry-After`; one with a stale copy inside `stale_if_busy` gets it at
//! once (`detail=origin-busy`); a background refresh is skipped, never
//! queued; a slot comes back when a client leaves mid-body or the origin
//! breaks; `max_inflight = 0` changes nothing. Over HTTP/1.1, h2c and
//! HTTP/2 over TLS.

use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::wire::{Wire, TLS_NAME};
use calmcache_testkit::{Origin, Proxy, Reply, Wires};
use http::Method;

use crate::{scratch, wait_until, STALE_WAIT};

/// The upstream's `budget` block of `/status`.
async fn budget(proxy: &RunningProxy) -> serde_json::Value {
    proxy.status().await["upstreams"]["origin"]["budget"].clone()
}

fn figure(b: &serde_json::Value, name: &str) -> u64 {
    b[name]
        .as_u64()
        .unwrap_or_else(|| panic!("budget.{name} in {b}"))
}

/// Waits until `budget.<name>` satisfies `ok` (10 s at most).
async fn wait_budget(proxy: &RunningProxy, name: &str, ok: impl Fn(u64) -> bool) {
    let what = format!("budget.{name}");
    wait_until(Duration::from_secs(10), &what, async || {
        ok(figure(&budget(proxy).await, name))
    })
    .await;
}

/// A GET over `wire` with `headers`.
async fn get(wires: &Wires, wire: &Wire, path: &str, headers: &[(&str, &str)]) -> Reply {
    wires
        .send(wire, Method::GET, TLS_NAME, path, headers, "")
        .await
}

/// Holds one origin slot for `ms` (a slow answer the client waits for).
async fn hold(wires: &Wires, wire: &Wire, path: String, ms: &str) -> Reply {
    let headers = [
        ("x-origin-delay-ms", ms),
        ("x-origin-cache-control", "no-store"),
    ];
    get(wires, wire, &path, &headers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_never_sees_more_than_the_budget_and_every_request_is_answered() {
    let origin = Origin::start().await;
    let log = scratch("budget-log").join("access.json");
    let proxy = Proxy::new(&origin)
        .upstream("max_inflight = 2\nqueue_timeout = \"30s\"")
        .access_log(&log, "json");
    let wires = Wires::start(proxy, "").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let paths: Vec<String> = (0..20).map(|i| format!("/many/{w}/{i}")).collect();
        let tasks = paths
            .iter()
            .map(|path| get(&wires, wire, path, &[("x-origin-delay-ms", "50")]));
        let replies = futures_util::future::join_all(tasks).await;
        for r in &replies {
            assert_eq!(r.status, 200, "{what}: {}", r.body);
        }
        assert!(
            origin.peak_in_progress() <= 2,
            "{what}: the origin saw {} at once",
            origin.peak_in_progress()
        );
    }
    assert_eq!(origin.hits(), 60);
    wait_budget(&wires.proxy, "inflight", |n| n == 0).await;
    let b = budget(&wires.proxy).await;
    assert_eq!(figure(&b, "queued"), 0, "{b}");
    assert!(figure(&b, "queued_total") > 0, "some waited: {b}");
    assert_eq!(figure(&b, "max_inflight"), 2, "{b}");
    assert_eq!(figure(&b, "limit"), 2, "{b}");
    assert_eq!(figure(&b, "shed_busy"), 0, "{b}");
    let metrics = calmcache_testkit::get(&wires.proxy.admin_url("/metrics")).await;
    // The access log tells how long a request waited for its slot.
    wait_until(
        Duration::from_secs(10),
        "a line with origin_wait_ms",
        async || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines().any(|line| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                v["origin_wait_ms"].as_u64().is_some_and(|ms| ms > 0)
            })
        },
    )
    .await;
    for line in [
        "calmcache_upstream_inflight{upstream=\"origin\"} 0",
        "calmcache_upstream_inflight_limit{upstream=\"origin\"} 2",
        "calmcache_upstream_queue_length{upstream=\"origin\"} 0",
        "calmcache_upstream_shed_total{upstream=\"origin\",reason=\"busy\"} 0",
    ] {
        assert!(metrics.body.contains(line), "{line} in\n{}", metrics.body);
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_queue_timeout_a_request_without_a_copy_gets_a_503_with_retry_after() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).upstream("max_inflight = 1\nqueue_timeout = \"200ms\"");
    let wires = Wires::start(proxy, "").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let held = hold(&wires, wire, format!("/hold/{w}"), "3000");
        let shed = async {
            wait_budget(&wires.proxy, "inflight", |n| n == 1).await;
            for i in 0..3 {
                let r = get(&wires, wire, &format!("/shed/{w}/{i}"), &[]).await;
                assert_eq!(r.status, 503, "{what}: {}", r.body);
                assert_eq!(r.header("retry-after"), "1", "{what}");
                let status = r.cache_status();
                assert!(status.contains("detail=origin-busy"), "{what}: {status}");
            }
            // Requests waiting for one fetch share its 503 (a shared failure).
            let hot = format!("/shared/{w}");
            let flight = (0..5).map(|_| get(&wires, wire, &hot, &[]));
            for r in futures_util::future::join_all(flight).await {
                assert_eq!(r.status, 503, "{what}: {}", r.body);
                assert!(r.has_header("retry-after"), "{what}");
                let status = r.cache_status();
                assert!(status.contains("detail=origin-busy"), "{what}: {status}");
            }
        };
        let (held, ()) = tokio::join!(held, shed);
        assert_eq!(held.status, 200, "{what}: the held request got through");
        wait_budget(&wires.proxy, "inflight", |n| n == 0).await;
        // The slot is back: a new request gets through.
        let r = get(&wires, wire, &format!("/after/{w}"), &[]).await;
        assert_eq!(r.status, 200, "{what}: {}", r.body);
    }
    let b = budget(&wires.proxy).await;
    // 3 requests alone and at least one flight of 5, per wire.
    assert!(figure(&b, "shed_busy") >= 12, "{b}");
    assert!(figure(&b, "shed_busy") < 24, "followers shared a 503: {b}");
    // No request reached the origin for the shed ones.
    assert_eq!(origin.hits_for("/shed/1/0"), 0);
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_within_stale_if_busy_is_served_at_once_while_the_origin_is_busy() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .upstream("max_inflight = 1\nqueue_timeout = \"10s\"")
        .route("refresh = \"lock\"\nstale_if_busy = \"1h\"");
    let wires = Wires::start(proxy, "").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let hot = format!("/hot/{w}");
        assert_eq!(get(&wires, wire, &hot, &[]).await.status, 200);
        // Time is the subject: the copy's 1 s lifetime must pass.
        tokio::time::sleep(STALE_WAIT).await;
        let held = hold(&wires, wire, format!("/busy/{w}"), "3000");
        let stale = async {
            wait_budget(&wires.proxy, "inflight", |n| n == 1).await;
            let stale = get(&wires, wire, &hot, &[]).await;
            // A client that asked for a fresh answer waits its turn instead.
            let forced = get(&wires, wire, &hot, &[("cache-control", "no-cache")]).await;
            (stale, forced)
        };
        let (held, (stale, forced)) = tokio::join!(held, stale);
        assert_eq!(forced.status, 200, "{what}");
        assert!(
            !forced.cache_status().contains("origin-busy"),
            "{what}: {}",
            forced.cache_status()
        );
        assert_eq!(held.status, 200, "{what}");
        assert_eq!(stale.status, 200, "{what}: {}", stale.body);
        let status = stale.cache_status();
        assert!(
            status.contains("fwd=stale") && status.contains("detail=origin-busy"),
            "{what}: {status}"
        );
        assert_eq!(
            origin.hits_for(&hot),
            2,
            "{what}: the first fill and the forced fetch; the stale copy, not the origin"
        );
    }
    let b = budget(&wires.proxy).await;
    assert_eq!(figure(&b, "shed_stale"), 3, "{b}");
    wires.proxy.stop().await;
}

/// A copy served past its lifetime because the origin is busy is
/// refreshed in the budget's `Ahead` lane: before the requests that were
/// already waiting (a crawler's first fetches), so a hot object does not
/// age out of `stale_if_busy` while the budget stays full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refresh_of_a_copy_served_stale_goes_ahead_of_the_queue() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .upstream("max_inflight = 1\nqueue_timeout = \"10s\"")
        .route("refresh = \"lock\"\nstale_if_busy = \"1h\"");
    let wires = Wires::start(proxy, "").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let hot = format!("/hot-ahead/{w}");
        let cold = format!("/cold/{w}");
        assert_eq!(get(&wires, wire, &hot, &[]).await.status, 200);
        // Time is the subject: the copy's 1 s lifetime must pass.
        tokio::time::sleep(STALE_WAIT).await;
        let held = hold(&wires, wire, format!("/busy-ahead/{w}"), "1500");
        let queued = async {
            wait_budget(&wires.proxy, "inflight", |n| n == 1).await;
            get(&wires, wire, &cold, &[]).await
        };
        let stale = async {
            wait_budget(&wires.proxy, "queued", |n| n == 1).await;
            // Served at once; its refresh queues ahead of the cold fetch.
            let stale = get(&wires, wire, &hot, &[]).await;
            let follower = get(&wires, wire, &hot, &[]).await;
            (stale, follower)
        };
        let (held, queued, (stale, follower)) = tokio::join!(held, queued, stale);
        assert_eq!(held.status, 200, "{what}");
        assert_eq!(queued.status, 200, "{what}: {}", queued.body);
        for r in [&stale, &follower] {
            assert_eq!(r.status, 200, "{what}");
            assert!(
                r.cache_status().contains("detail=origin-busy"),
                "{what}: {}",
                r.cache_status()
            );
        }
        wait_until(Duration::from_secs(10), "the hot refresh", async || {
            origin.hits_for(&hot) == 2
        })
        .await;
        let order: Vec<String> = origin
            .requests()
            .iter()
            .map(|r| r.path().to_owned())
            .filter(|p| *p == hot || *p == cold)
            .collect();
        assert_eq!(order, [hot.clone(), hot.clone(), cold.clone()], "{what}");
        let fresh = get(&wires, wire, &hot, &[]).await;
        assert!(fresh.is_hit(), "{what}: {}", fresh.cache_status());
    }
    let b = budget(&wires.proxy).await;
    assert_eq!(figure(&b, "shed_busy"), 0, "{b}");
    assert_eq!(figure(&b, "refresh_skipped"), 0, "{b}");
    wires.proxy.stop().await;
}

/// A revalidation whose 304 does not fit the stored copy is sent again
/// without validators: the 304's slot goes back first, so a budget of one
/// does not stall the fill on itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_that_does_not_fit_gives_its_slot_back_before_the_refetch() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .upstream("max_inflight = 1\nqueue_timeout = \"3s\"")
        .route("refresh = \"lock\"");
    let wires = Wires::start(proxy, "").await;
    let modified = "Last-Modified: Sat, 01 Jan 2000 00:00:00 GMT";
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/refit/{w}");
        let first = get(&wires, wire, &path, &[("x-origin-header", modified)]).await;
        assert_eq!(first.status, 200, "{what}");
        // Time is the subject: the copy's 1 s lifetime must pass.
        tokio::time::sleep(STALE_WAIT).await;
        // The origin's 304 now names an entity-tag the copy never had.
        let headers = [
            ("x-origin-header", modified),
            ("x-origin-header", "ETag: \"other\""),
        ];
        let again = get(&wires, wire, &path, &headers).await;
        // Held, the refetch waits out queue_timeout on its own slot: 503.
        assert_eq!(again.status, 200, "{what}: {}", again.cache_status());
        let sent = origin.requests_for(&path);
        assert_eq!(sent.len(), 3, "{what}: fill, 304, refetch");
        assert!(sent[1].headers.contains_key("if-modified-since"), "{what}");
        assert!(!sent[2].headers.contains_key("if-modified-since"), "{what}");
    }
    let b = budget(&wires.proxy).await;
    assert_eq!(figure(&b, "shed_busy"), 0, "{b}");
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_refresh_is_skipped_and_counted_when_the_budget_is_full() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .upstream("max_inflight = 1\nqueue_timeout = \"10s\"")
        .route("refresh = \"lock\"\nstale_while_revalidate = \"1h\"");
    let wires = Wires::start(proxy, "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/swr/{i}");
        assert_eq!(get(&wires, wire, &path, &[]).await.status, 200);
        // Time is the subject: the copy's 1 s lifetime must pass.
        tokio::time::sleep(STALE_WAIT).await;
        let held = hold(&wires, wire, format!("/busy/{i}"), "2000");
        let swr = async {
            wait_budget(&wires.proxy, "inflight", |n| n == 1).await;
            let r = get(&wires, wire, &path, &[]).await;
            wait_budget(&wires.proxy, "refresh_skipped", |n| n > i as u64).await;
            r
        };
        let (held, swr) = tokio::join!(held, swr);
        assert_eq!(held.status, 200, "{what}");
        assert_eq!(swr.status, 200, "{what}");
        assert!(
            swr.cache_status().contains("stale-while-revalidate"),
            "{what}: {}",
            swr.cache_status()
        );
        assert_eq!(origin.hits_for(&path), 1, "{what}: the refresh never went");
    }
    let b = budget(&wires.proxy).await;
    assert_eq!(figure(&b, "queued_total"), 0, "refreshes never queue: {b}");
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_take_slots_too() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).upstream("max_inflight = 1\nqueue_timeout = \"200ms\"");
    let wires = Wires::start(proxy, "").await;
    for wire in &wires.all {
        let what = wire.label();
        let slow_post = async {
            let headers = [("x-origin-delay-ms", "2000")];
            wires
                .send(wire, Method::POST, TLS_NAME, "/form", &headers, "a=1")
                .await
        };
        let refused = async {
            wait_budget(&wires.proxy, "inflight", |n| n == 1).await;
            wires
                .send(wire, Method::POST, TLS_NAME, "/form2", &[], "b=2")
                .await
        };
        let (slow, refused) = tokio::join!(slow_post, refused);
        assert_eq!(slow.status, 200, "{what}");
        assert_eq!(refused.status, 503, "{what}: {}", refused.body);
        assert!(refused.has_header("retry-after"), "{what}");
    }
    assert_eq!(origin.hits_for("/form2"), 0);
    wait_budget(&wires.proxy, "inflight", |n| n == 0).await;
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_comes_back_when_the_client_leaves_mid_body_or_the_origin_breaks() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).upstream("max_inflight = 1\nqueue_timeout = \"5s\"");
    let wires = Wires::start(proxy, "").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        // A body of 8 pieces 300 ms apart, not stored: relayed as it comes.
        let slow_body = [
            ("x-origin-trickle-ms", "300"),
            ("x-origin-body-bytes", "8000"),
            ("x-origin-cache-control", "no-store"),
        ];
        let resp = wires
            .open(wire, TLS_NAME, &format!("/leave/{w}"), &slow_body)
            .await;
        assert_eq!(resp.status(), 200, "{what}");
        wait_budget(&wires.proxy, "inflight", |n| n == 1).await;
        drop(resp);
        wait_budget(&wires.proxy, "inflight", |n| n == 0).await;
        // The origin breaks mid-body.
        let broken = [
            ("x-origin-trickle-ms", "20"),
            ("x-origin-body-bytes", "8000"),
            ("x-origin-abort-after-bytes", "3000"),
            ("x-origin-cache-control", "no-store"),
        ];
        let resp = wires
            .open(wire, TLS_NAME, &format!("/break/{w}"), &broken)
            .await;
        // The body breaks off: the error is the point.
        let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
        wait_budget(&wires.proxy, "inflight", |n| n == 0).await;
        let r = get(&wires, wire, &format!("/next/{w}"), &[]).await;
        assert_eq!(r.status, 200, "{what}: a new request gets through");
    }
    let b = budget(&wires.proxy).await;
    assert_eq!(figure(&b, "shed_busy"), 0, "{b}");
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_max_inflight_nothing_changes() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin), "").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let paths: Vec<String> = (0..10).map(|i| format!("/free/{w}/{i}")).collect();
        let tasks = paths
            .iter()
            .map(|path| get(&wires, wire, path, &[("x-origin-delay-ms", "300")]));
        for r in futures_util::future::join_all(tasks).await {
            assert_eq!(r.status, 200, "{what}");
        }
    }
    let b = budget(&wires.proxy).await;
    for name in [
        "max_inflight",
        "limit",
        "inflight",
        "queued_total",
        "shed_busy",
    ] {
        assert_eq!(figure(&b, name), 0, "{name}: {b}");
    }
    // Nothing held them back: more than one request was at the origin at once.
    assert!(
        origin.peak_in_progress() > 1,
        "{}",
        origin.peak_in_progress()
    );
    wires.proxy.stop().await;
}
