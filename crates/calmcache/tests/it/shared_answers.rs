//! What one request's answer may do to others' (issue 25, items 4 and 5),
//! over HTTP/1.1, h2c and HTTP/2 over TLS, with the default refresh mode:
//! a coalesced fetch's error page reaches its waiters only when the leader
//! sent no credentials, and an error the request caused (400, 429...) never
//! marks its URL hit-for-miss.

use std::time::Duration;

use calmcache_testkit::wire::{Wire, TLS_NAME};
use calmcache_testkit::{Origin, Proxy, Reply, Wires};
use http::Method;

use crate::wait_until;

/// Sends a GET for `path` over `wire` with `headers`.
async fn get(wires: &Wires, wire: &Wire, path: &str, headers: &[(&str, &str)]) -> Reply {
    wires
        .send(wire, Method::GET, TLS_NAME, path, headers, "")
        .await
}

/// A 500 after 1 s that quotes its request (a framework's debug page), with
/// a `Retry-After`.
const DEBUG_PAGE: [(&str, &str); 4] = [
    ("x-origin-status", "500"),
    ("x-origin-delay-ms", "1000"),
    ("x-origin-echo", "1"),
    ("x-origin-header", "Retry-After: 9"),
];

/// Regression (issue 25): the leader's 500 page quoted its `Cookie`, and
/// every waiter got it, another client's session id included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_error_page_with_its_cookie_never_reaches_a_waiter() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin), "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        for (n, credential) in [
            ("cookie", "sessionid=s3cr3t-leader"),
            ("authorization", "Bearer s3cr3t-leader"),
        ]
        .into_iter()
        .enumerate()
        {
            let path = format!("/debug/{i}/{n}");
            let mut with = DEBUG_PAGE.to_vec();
            with.push(credential);
            let leader = get(&wires, wire, &path, &with);
            let waiters = async {
                // Joined once the leader's fetch reached the origin.
                wait_until(Duration::from_secs(10), "the leader's fetch", async || {
                    origin.hits_for(&path) == 1
                })
                .await;
                let waiters = (0..4).map(|_| get(&wires, wire, &path, &DEBUG_PAGE));
                futures_util::future::join_all(waiters).await
            };
            let (leader, waiters) = tokio::join!(leader, waiters);
            assert_eq!(origin.hits_for(&path), 1, "{what} {credential:?}");
            assert_eq!(leader.status, 500, "{what}");
            assert!(leader.body.contains("s3cr3t-leader"), "{what}: own page");
            for r in &waiters {
                assert_eq!(r.status, 500, "{what} {credential:?}: {}", r.body);
                assert!(
                    r.cache_status().contains("collapsed"),
                    "{what} {credential:?}: {}",
                    r.cache_status()
                );
                assert!(
                    !r.body.contains("s3cr3t"),
                    "{what} {credential:?}: a waiter got the leader's page: {}",
                    r.body
                );
                assert!(
                    r.body.contains("the origin answered with an error"),
                    "{what}: {}",
                    r.body
                );
                assert_eq!(r.header("retry-after"), "9", "{what}");
            }
        }
    }
    wires.proxy.stop().await;
}

/// The same page from an anonymous leader speaks for the URL: its waiters
/// get it as it came (one origin request for all), over every wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_leaders_error_page_reaches_its_waiters() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin), "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/debug/{i}");
        let leader = get(&wires, wire, &path, &DEBUG_PAGE);
        let waiters = async {
            wait_until(Duration::from_secs(10), "the leader's fetch", async || {
                origin.hits_for(&path) == 1
            })
            .await;
            let waiters = (0..4).map(|_| get(&wires, wire, &path, &DEBUG_PAGE));
            futures_util::future::join_all(waiters).await
        };
        let (leader, waiters) = tokio::join!(leader, waiters);
        assert_eq!(origin.hits_for(&path), 1, "{what}");
        for r in &waiters {
            assert_eq!(r.status, 500, "{what}");
            assert!(r.cache_status().contains("collapsed"), "{what}");
            assert_eq!(r.body, leader.body, "{what}: the origin's own page");
        }
    }
    wires.proxy.stop().await;
}

/// On a route without a zone nothing is coalesced: a cookie-less request
/// beside one with cookies gets its own page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncached_routes_error_pages_are_each_requests_own() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin).no_zone(), "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/debug/{i}");
        let mut with = DEBUG_PAGE.to_vec();
        with.push(("cookie", "sessionid=s3cr3t-first"));
        let (first, second) = tokio::join!(
            get(&wires, wire, &path, &with),
            get(&wires, wire, &path, &DEBUG_PAGE)
        );
        assert_eq!(origin.hits_for(&path), 2, "{what}");
        assert!(first.body.contains("s3cr3t-first"), "{what}");
        assert!(!second.body.contains("s3cr3t"), "{what}: {}", second.body);
        assert_eq!(second.status, 500, "{what}");
    }
    wires.proxy.stop().await;
}

/// Regression (issue 25): a header the origin refused with 400 marked the
/// URL hit-for-miss, so at the next miss every waiting client went to the
/// origin (5 clients, 5 origin requests instead of 1). Statuses a request
/// causes mark nothing; a 404 (about the resource) still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_the_request_caused_leaves_coalescing_on() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin), "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        for status in ["400", "429", "431"] {
            let path = format!("/refused/{i}/{status}");
            let refused = get(&wires, wire, &path, &[("x-origin-status", status)]).await;
            assert_eq!(refused.status.as_str(), status, "{what}");
            // Five clients at the next miss: one origin request.
            let slow = [("x-origin-delay-ms", "500")];
            let stampede = (0..5).map(|_| get(&wires, wire, &path, &slow));
            let replies = futures_util::future::join_all(stampede).await;
            for r in &replies {
                assert_eq!(r.status, 200, "{what} {status}");
                assert!(
                    !r.cache_status().contains("hit-for-miss"),
                    "{what} {status}: {}",
                    r.cache_status()
                );
            }
            assert_eq!(
                origin.hits_for(&path),
                2,
                "{what} {status}: the refused request, then one for five"
            );
        }
        // An answer about the resource still marks it.
        let path = format!("/gone/{i}");
        let not_found = [("x-origin-status", "404")];
        assert_eq!(get(&wires, wire, &path, &not_found).await.status, 404);
        let again = get(&wires, wire, &path, &not_found).await;
        assert!(
            again.cache_status().contains("detail=hit-for-miss"),
            "{what}: {}",
            again.cache_status()
        );
    }
    wires.proxy.stop().await;
}

/// On a route without a zone, a request-caused error is relayed as it came
/// (nothing to mark, nothing coalesced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncached_route_relays_a_request_caused_error() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin).no_zone(), "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let path = format!("/refused/{i}");
        let r = get(&wires, wire, &path, &[("x-origin-status", "400")]).await;
        assert_eq!(r.status, 400, "{}", wire.label());
        assert!(r.body.starts_with(&format!("path={path}")), "{}", r.body);
        let ok = get(&wires, wire, &path, &[]).await;
        assert_eq!(ok.status, 200, "{}", wire.label());
    }
    wires.proxy.stop().await;
}
