//! Origin failures: stale-if-error, 502 and 504.

use std::time::Duration;

use calmcache_testkit::{get, get_with, Origin, Proxy};
use http::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_if_error_serves_the_copy_when_the_origin_is_down() {
    let mut origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"\nttl = { 200 = \"200ms\" }\nstale_if_error = \"1h\"")
        .start()
        .await;
    let url = proxy.url("/news");
    let first = get(&url).await;
    origin.stop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stale = get(&url).await;
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body, first.body);
    assert!(
        stale.cache_status().contains("detail=stale-if-error"),
        "{}",
        stale.cache_status()
    );
    // No copy at all: 502.
    let none = get(&proxy.url("/never-cached")).await;
    assert_eq!(none.status, 502);
    assert!(none.body.contains("502"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_if_error_covers_5xx_answers() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"\nttl = { 200 = \"200ms\" }\nstale_if_error = \"1h\"")
        .start()
        .await;
    let url = proxy.url("/flaky");
    get(&url).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = get_with(Method::GET, &url, &[("x-origin-status", "503")]).await;
    assert_eq!(r.status, 200, "served stale instead of the 503");
    assert!(r.cache_status().contains("stale-if-error"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_stale_if_error_a_dead_origin_is_a_502() {
    let mut origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"\nttl = { 200 = \"100ms\" }")
        .start()
        .await;
    let url = proxy.url("/x");
    get(&url).await;
    origin.stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(&url).await.status, 502);
    let status = proxy.status().await;
    assert!(status["totals"]["upstream_errors"].as_u64().unwrap() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_origin_is_a_504_after_read_timeout() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .upstream("read_timeout = \"200ms\"")
        .start()
        .await;
    let r = get_with(
        Method::GET,
        &proxy.url("/slow"),
        &[("x-origin-delay-ms", "2000")],
    )
    .await;
    assert_eq!(r.status, 504);
    assert!(r.elapsed < Duration::from_millis(1500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_of_a_failed_fetch_get_the_error_without_a_second_try() {
    let mut origin = Origin::start().await;
    let addr = origin.addr();
    // max_fails = 0: the origin is back at once here, not after fail_timeout
    // (health.rs has the tests of the back-off).
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"")
        .upstream("max_fails = 0")
        .start()
        .await;
    origin.stop();
    let replies = crate::burst(&proxy.url("/down"), 20, &[]).await;
    assert!(replies.iter().all(|r| r.status == 502));
    // The origin comes back: the next request fetches and stores.
    let origin = Origin::start_on(addr).await;
    assert_eq!(get(&proxy.url("/down")).await.status, 200);
    assert_eq!(origin.hits(), 1);
}
