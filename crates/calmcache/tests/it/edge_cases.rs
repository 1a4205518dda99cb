//! Regressions from review: inputs and orders of events the tables do not
//! reach (odd dates, a 304 no client asked for, Vary'd first fetches).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use calmcache_testkit::{get_with, request, Origin};
use http::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_ascii_date_is_invalid_not_a_crash() {
    // RFC 9110 §5.6.7: an invalid HTTP-date; RFC 9110 §13.1.3: an invalid
    // If-Modified-Since is ignored.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/date");
    let cc = ("x-origin-cache-control", "max-age=60");
    let lm = (
        "x-origin-header",
        "Last-Modified: Sun, 06 Nov 1994 1é:00:0 GMT",
    );
    let first = get_with(Method::GET, &url, &[cc, lm]).await;
    assert_eq!(first.status, 200);
    let ims = ("if-modified-since", "Sun, 06 Nov 1994 1é:00:0 GMT");
    let hit = get_with(Method::GET, &url, &[ims]).await;
    assert_eq!(hit.status, 200, "{}", hit.cache_status());
    assert!(hit.cache_status_params().has("hit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sent_no_conditional_never_gets_a_304() {
    // RFC 9111 §4.3.1 validators are only sent when the 304 can be used:
    // a request with no-store cannot store the freshened copy.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/no-store-reval");
    let steer = [
        ("x-origin-cache-control", "max-age=1"),
        ("x-origin-header", "ETag: \"v1\""),
    ];
    assert_eq!(get_with(Method::GET, &url, &steer).await.status, 200);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut with_no_store = steer.to_vec();
    with_no_store.push(("cache-control", "no-store"));
    let r = get_with(Method::GET, &url, &with_no_store).await;
    assert_eq!(r.status, 200, "{}", r.cache_status());
    assert!(!r.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preconditions_do_not_apply_to_a_stored_error() {
    // RFC 9110 §13.2.1: preconditions are ignored when the response is not 2xx.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/gone");
    let steer = [
        ("x-origin-status", "404"),
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-header", "ETag: \"e\""),
    ];
    assert_eq!(get_with(Method::GET, &url, &steer).await.status, 404);
    let r = get_with(Method::GET, &url, &[("if-none-match", "\"e\"")]).await;
    assert_eq!(r.status, 404, "{}", r.cache_status());
    assert!(r.cache_status_params().has("hit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_varying_uri_costs_one_fetch_per_variant() {
    // RFC 9111 §4.1 with coalescing: followers of the URI's first fetch that
    // select another variant join that variant's fetch.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/vary-burst");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let url = url.clone();
        let lang = if i % 2 == 0 { "en" } else { "de" };
        tasks.push(tokio::spawn(async move {
            let steer = [
                ("x-origin-delay-ms", "300"),
                ("x-origin-cache-control", "max-age=60"),
                ("x-origin-header", "Vary: Accept-Language"),
                ("accept-language", lang),
            ];
            get_with(Method::GET, &url, &steer).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().status, 200);
    }
    assert_eq!(origin.hits_for("/vary-burst"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_location_is_invalidated() {
    // RFC 9111 §4.4 with an RFC 3986 §5.2 relative reference.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let cc = ("x-origin-cache-control", "max-age=60");
    let target = proxy.url("/shop/items/7");
    get_with(Method::GET, &target, &[cc]).await;
    assert!(get_with(Method::GET, &target, &[cc])
        .await
        .cache_status_params()
        .has("hit"));
    let post = request(
        Method::POST,
        &proxy.url("/shop/cart/add"),
        &[
            ("x-origin-status", "201"),
            ("x-origin-header", "Location: ../items/7"),
        ],
    )
    .await;
    assert_eq!(post.status, 201);
    let after = get_with(Method::GET, &target, &[cc]).await;
    assert_eq!(after.cache_status_params().param("fwd"), Some("uri-miss"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_does_not_carry_the_first_responses_age() {
    // RFC 9111 §4.2.3 / §3.2: after revalidation the age is the 304's.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/aged");
    let first = [
        ("x-origin-cache-control", "max-age=3601"),
        ("x-origin-header", "Age: 3600"),
        ("x-origin-header", "ETag: \"a\""),
    ];
    get_with(Method::GET, &url, &first).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Stale now; the origin answers the revalidation without an Age.
    let again = [
        ("x-origin-cache-control", "max-age=3601"),
        ("x-origin-header", "ETag: \"a\""),
    ];
    let r = get_with(Method::GET, &url, &again).await;
    assert_eq!(r.cache_status_params().param("fwd-status"), Some("304"));
    let hit = get_with(Method::GET, &url, &again).await;
    assert!(
        hit.cache_status_params().has("hit"),
        "{}",
        hit.cache_status()
    );
    let age: u64 = hit.header("age").parse().unwrap();
    assert!(age < 60, "age {age}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_on_an_object_too_large_to_store_is_passed_through() {
    // RFC 9110 §14.2 through a cache that cannot keep the whole object: the
    // first fetch (without Range) finds it too large, so the client's Range
    // goes to the origin instead of the whole body coming back.
    let origin = Origin::start().await;
    let proxy = calmcache_testkit::Proxy::new(&origin)
        .no_default_ttl()
        .zone("64MiB", "2KiB")
        .start()
        .await;
    let url = proxy.url("/big");
    let steer = [
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-body-bytes", "10000"),
        ("range", "bytes=0-9"),
    ];
    let r = get_with(Method::GET, &url, &steer).await;
    assert!(
        r.cache_status_params().param("detail") == Some("too-large"),
        "{}",
        r.cache_status()
    );
    let seen = origin.requests_for("/big");
    assert_eq!(seen.len(), 2, "one full fetch, then the ranged one");
    assert!(!seen[0].headers.contains_key("range"));
    assert_eq!(seen[1].headers["range"], "bytes=0-9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorised_request_leaves_the_shared_copy_alone() {
    // RFC 9111 §3.5: an answer to an authorised request may not be shared
    // unless it says so, so it cannot refresh (or evict) the shared copy.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/shared");
    let steer = [
        ("x-origin-cache-control", "max-age=1"),
        ("x-origin-header", "ETag: \"s\""),
    ];
    get_with(Method::GET, &url, &steer).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut authorised = steer.to_vec();
    authorised.push(("authorization", "Bearer x"));
    let r = get_with(Method::GET, &url, &authorised).await;
    assert_eq!(r.status, 200);
    assert!(!r.body.is_empty());
    let seen = origin.requests_for("/shared");
    assert!(
        !seen[1].headers.contains_key("if-none-match"),
        "no revalidation on behalf of an authorised request"
    );
    // The shared copy is still there (stale, so revalidated by the next
    // anonymous request rather than refetched).
    let anon = get_with(Method::GET, &url, &steer).await;
    assert_eq!(anon.cache_status_params().param("fwd-status"), Some("304"));
}
