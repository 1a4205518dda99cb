//! A failing or slow origin under a stampede: one origin request, its answer
//! handed to every waiter; keys that cannot be stored skip the queue
//! (hit-for-miss); waiters wait for a leader that makes progress; SUS keeps
//! a stale window so that no client waits at short TTLs.

use std::time::Duration;

use calmcache_testkit::wire::TLS_NAME;
use calmcache_testkit::{get_with, Origin, Proxy, Wires};
use http::Method;

use crate::{burst, wait_until, CLIENTS};

/// A 503 after 1.5 s (longer than it takes to open 100 connections on a
/// busy machine, so that every request joins the first flight), with a page
/// of its own.
const FAILING: [(&str, &str); 3] = [
    ("x-origin-status", "503"),
    ("x-origin-delay-ms", "1500"),
    ("x-origin-header", "Retry-After: 7"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_origin_gets_one_request_from_a_stampede() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin).route("refresh = \"lock\""), "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let path = format!("/down/{i}");
        let before = origin.hits();
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS / 2 {
            let (wire, path) = (wire.clone(), path.clone());
            let wires = &wires;
            tasks.push(async move {
                wires
                    .send(&wire, Method::GET, TLS_NAME, &path, &FAILING, "")
                    .await
            });
        }
        let replies = futures_util::future::join_all(tasks).await;
        let what = wire.label();
        assert_eq!(
            origin.hits() - before,
            1,
            "{what}: one request reached the failing origin"
        );
        for r in &replies {
            assert_eq!(r.status, 503, "{what}: {}", r.body);
            assert_eq!(r.header("retry-after"), "7", "{what}");
            // The origin's own page, not one of calmcache's.
            assert!(
                r.body.starts_with(&format!("path={path} n=")),
                "{what}: {}",
                r.body
            );
            assert!(
                r.elapsed < Duration::from_secs(5),
                "{what}: {:?}",
                r.elapsed
            );
        }
        let collapsed = replies
            .iter()
            .filter(|r| r.cache_status().contains("collapsed"))
            .count();
        assert!(collapsed >= 1, "{what}: waiters got the leader's answer");
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_personal_error_page_reaches_waiters_as_a_plain_one() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"")
        .start()
        .await;
    let url = proxy.url("/down");
    let replies = burst(
        &url,
        50,
        &[
            ("x-origin-status", "502"),
            ("x-origin-delay-ms", "300"),
            ("x-origin-set-cookie", "session=leader-only"),
        ],
    )
    .await;
    assert_eq!(origin.hits(), 1);
    let with_cookie = replies
        .iter()
        .filter(|r| !r.header("set-cookie").is_empty())
        .count();
    assert_eq!(with_cookie, 1, "only the leader gets its cookie");
    for r in &replies {
        assert_eq!(r.status, 502);
        if r.header("set-cookie").is_empty() {
            assert!(
                r.body.contains("the origin answered with an error"),
                "{}",
                r.body
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_origin_connection_is_one_attempt_for_all_waiters() {
    // An origin that accepts, holds the connection 300 ms, and drops it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let server = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                // The origin's behaviour under test: hold, then hang up.
                tokio::time::sleep(Duration::from_millis(300)).await;
                drop(conn);
            });
        }
    });
    let proxy = Proxy::with_upstream(addr)
        .route("refresh = \"lock\"")
        .start()
        .await;
    let replies = burst(&proxy.url("/gone"), 100, &[]).await;
    assert!(replies.iter().all(|r| r.status == 502), "{:?}", replies[0]);
    // The leader's GET, and its one retry of a connection closed before the
    // head (an origin closing a pooled connection as the request left looks
    // the same); then the server is down and nobody else tries it.
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_cannot_be_stored_skip_the_queue_until_they_can() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route("refresh = \"lock\"\nhit_for_miss = \"30s\"")
        .start()
        .await;
    let url = proxy.url("/me");
    let private = [
        ("x-origin-cache-control", "private"),
        ("x-origin-delay-ms", "300"),
    ];
    let first = get_with(Method::GET, &url, &private).await;
    assert_eq!(first.status, 200);
    assert!(
        first.cache_status().contains("detail=private"),
        "{}",
        first.cache_status()
    );
    // Now marked: 40 concurrent requests go to the origin side by side.
    let replies = burst(&url, 40, &private).await;
    assert_eq!(origin.hits(), 41);
    for r in &replies {
        assert_eq!(r.status, 200);
        assert!(
            r.cache_status().contains("detail=hit-for-miss"),
            "{}",
            r.cache_status()
        );
        assert!(!r.cache_status().contains("collapsed"));
    }
    // Each got its own answer, none another's.
    let mut bodies: Vec<_> = replies.iter().map(|r| r.body.clone()).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 40);
    let status = proxy.status().await;
    assert_eq!(status["totals"]["hit_for_miss"], 40);
    // A storable answer ends the mark: stored, then coalesced and hit.
    let cacheable = [
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-delay-ms", "300"),
    ];
    let stored = get_with(Method::GET, &url, &cacheable).await;
    assert!(
        stored.cache_status_params().has("stored"),
        "{}",
        stored.cache_status()
    );
    let hits = burst(&url, 20, &cacheable).await;
    assert!(hits.iter().all(|r| r.cache_status().contains("hit")));
    assert_eq!(origin.hits(), 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_hit_for_miss_waiters_queue_behind_the_leader() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route("refresh = \"lock\"\nhit_for_miss = \"0s\"")
        .start()
        .await;
    let url = proxy.url("/me");
    let private = [("x-origin-cache-control", "private")];
    get_with(Method::GET, &url, &private).await;
    let second = get_with(Method::GET, &url, &private).await;
    assert!(!second.cache_status().contains("hit-for-miss"));
    assert_eq!(proxy.status().await["totals"]["hit_for_miss"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wait_for_a_slow_leader_past_lock_timeout() {
    for policy in ["lock", "sus"] {
        let origin = Origin::start().await;
        let proxy = Proxy::new(&origin)
            .route(&format!("refresh = \"{policy}\"\nlock_timeout = \"200ms\""))
            .start()
            .await;
        let replies = burst(&proxy.url("/slow"), 100, &[("x-origin-delay-ms", "1500")]).await;
        assert_eq!(origin.hits(), 1, "{policy}: one origin request");
        for r in &replies {
            assert_eq!(r.status, 200, "{policy}");
            assert!(r.body.contains("n=1"), "{policy}: {}", r.body);
        }
        proxy.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sus_serves_a_just_expired_copy_without_a_wait_by_default() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"sus\"\nttl = { 200 = \"1s\" }")
        .start()
        .await;
    let url = proxy.url("/short");
    let slow = [("x-origin-delay-ms", "200")];
    assert!(get_with(Method::GET, &url, &slow)
        .await
        .cache_status_params()
        .has("stored"));
    // Expired 500 ms ago: beyond one delta (200 ms), inside the default 2 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stale = get_with(Method::GET, &url, &slow).await;
    assert!(
        stale.cache_status().contains("stale-while-revalidate"),
        "{}",
        stale.cache_status()
    );
    assert!(stale.body.contains("n=1"));
    // The refresh ran in the background.
    let fresh = wait_until(Duration::from_secs(10), "the refreshed copy", async || {
        Some(get_with(Method::GET, &url, &slow).await).filter(|r| r.body.contains("n=2"))
    })
    .await;
    assert!(fresh.body.contains("n=2"), "{}", fresh.body);
    assert_eq!(origin.hits(), 2);
    proxy.stop().await;

    // sus_stale = "0s": the old behaviour, the expired copy is fetched in the path.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"sus\"\nttl = { 200 = \"1s\" }\nsus_stale = \"0s\"")
        .start()
        .await;
    let url = proxy.url("/short");
    get_with(Method::GET, &url, &slow).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let waited = get_with(Method::GET, &url, &slow).await;
    assert!(waited.body.contains("n=2"), "{}", waited.body);
    assert!(
        !waited.cache_status().contains("stale-while-revalidate"),
        "{}",
        waited.cache_status()
    );
}

/// Hit-for-miss over each wire, and never from an answer to a request with
/// `Authorization` or `Cookie` (it says nothing about other requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hit_for_miss_over_every_wire_and_never_from_credentialed_requests() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route("refresh = \"lock\"");
    let wires = Wires::start(proxy, "").await;
    let private = [("x-origin-cache-control", "private")];
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/private/{i}");
        let send = async |headers: &[(&str, &str)]| {
            wires
                .send(wire, Method::GET, TLS_NAME, &path, headers, "")
                .await
        };
        let first = send(&private).await;
        assert!(!first.cache_status().contains("hit-for-miss"), "{what}");
        let second = send(&private).await;
        assert!(
            second.cache_status().contains("detail=hit-for-miss"),
            "{what}: {}",
            second.cache_status()
        );
        // A private answer to a request with credentials marks nothing: one
        // logged-in client must not turn coalescing off for everyone.
        for (n, credential) in [("authorization", "Bearer x"), ("cookie", "session=1")]
            .into_iter()
            .enumerate()
        {
            let personal_path = format!("/personal/{i}/{n}");
            let with = [("x-origin-cache-control", "private"), credential];
            for _ in 0..2 {
                let r = wires
                    .send(wire, Method::GET, TLS_NAME, &personal_path, &with, "")
                    .await;
                assert!(
                    !r.cache_status().contains("hit-for-miss"),
                    "{what} {credential:?}: {}",
                    r.cache_status()
                );
            }
            // An anonymous request after it is not sent past the queue either.
            let anonymous = wires
                .send(wire, Method::GET, TLS_NAME, &personal_path, &private, "")
                .await;
            assert!(!anonymous.cache_status().contains("hit-for-miss"), "{what}");
        }
    }
    wires.proxy.stop().await;
}
