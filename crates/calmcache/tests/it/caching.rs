//! What is shared and what is not; the headers a cached answer carries.

use std::time::Duration;

use calmcache_testkit::{get, get_with, Origin, Proxy};
use http::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_carries_cache_status_and_age() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"10s\" }")
        .start()
        .await;
    let url = proxy.url("/a?x=1");
    let miss = get(&url).await;
    // RFC 9211: ours is the calmcache member; a first request is a uri-miss.
    let cs = miss.cache_status_params();
    assert_eq!(cs.param("fwd"), Some("uri-miss"), "{}", miss.cache_status());
    assert!(
        cs.has("stored") && !cs.has("hit"),
        "{}",
        miss.cache_status()
    );
    assert!(cs.ttl_is_integer(), "{}", miss.cache_status());
    assert!(
        (9.0..=10.0).contains(&crate::ttl_of(&miss)),
        "{}",
        miss.cache_status()
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let hit = get(&url).await;
    let cs = hit.cache_status_params();
    assert!(cs.has("hit") && !cs.has("fwd"), "{}", hit.cache_status());
    assert!(cs.ttl_is_integer(), "{}", hit.cache_status());
    let ttl = crate::ttl_of(&hit);
    assert!((7.0..=9.0).contains(&ttl), "{}", hit.cache_status());
    // RFC 9111 §5.1: Age in whole seconds; the sleep was 1.1 s.
    assert!(
        ["1", "2"].contains(&hit.header("age")),
        "age {}",
        hit.header("age")
    );
    assert_eq!(hit.body, miss.body);
    assert_eq!(origin.hits(), 1);
    // The query is part of the key.
    get(&proxy.url("/a?x=2")).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_is_answered_from_the_cache_without_a_body() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"10s\" }")
        .start()
        .await;
    let url = proxy.url("/h");
    let head = get_with(Method::HEAD, &url, &[]).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    let get_reply = get(&url).await;
    assert!(
        get_reply.cache_status().contains("hit"),
        "HEAD filled the cache with a GET"
    );
    assert_eq!(
        head.header("content-length"),
        get_reply.body.len().to_string()
    );
    assert_eq!(origin.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_cookie_responses_are_never_shared() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    let url = proxy.url("/login");
    for _ in 0..3 {
        let r = get_with(Method::GET, &url, &[("x-origin-set-cookie", "session=abc")]).await;
        assert_eq!(r.header("set-cookie"), "session=abc");
        let cs = r.cache_status_params();
        assert_eq!(cs.param("fwd"), Some("uri-miss"), "{}", r.cache_status());
        assert!(!cs.has("stored"), "{}", r.cache_status());
    }
    assert_eq!(origin.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_and_no_store_responses_are_never_shared() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    for cc in ["private, max-age=60", "no-store"] {
        let url = proxy.url(&format!("/{}", cc.len()));
        get_with(Method::GET, &url, &[("x-origin-cache-control", cc)]).await;
        get_with(Method::GET, &url, &[("x-origin-cache-control", cc)]).await;
    }
    assert_eq!(origin.hits(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorized_requests_are_shared_only_when_the_response_allows() {
    // RFC 9111 §3.5.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    let auth = ("authorization", "Bearer secret");
    let url = proxy.url("/me");
    get_with(Method::GET, &url, &[auth]).await;
    get_with(Method::GET, &url, &[auth]).await;
    assert_eq!(
        origin.hits_for("/me"),
        2,
        "not shared without public/s-maxage"
    );
    let url = proxy.url("/catalog");
    let public = ("x-origin-cache-control", "public, max-age=60");
    get_with(Method::GET, &url, &[auth, public]).await;
    let r = get_with(Method::GET, &url, &[auth, public]).await;
    assert!(r.cache_status().contains("hit"));
    assert_eq!(
        origin.hits_for("/catalog"),
        1,
        "shared when the response says public"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_max_age_beats_the_route_ttl_unless_overridden() {
    let origin = Origin::start().await;
    for (extra, expected) in [("", 60.0), ("override_origin = true", 1.0)] {
        let route = format!("ttl = {{ 200 = \"1s\" }}\n{extra}");
        let proxy = Proxy::new(&origin).route(&route).start().await;
        let max_age = ("x-origin-cache-control", "max-age=60");
        let r = get_with(Method::GET, &proxy.url("/m"), &[max_age]).await;
        // RFC 9211 §2.4: ttl is an integer, so one second of slack.
        let ttl = crate::ttl_of(&r);
        assert!(
            ttl <= expected && ttl >= expected - 1.0,
            "{extra}: {}",
            r.cache_status()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_over_the_zone_limit_stream_through_uncached() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).zone("4MiB", "64KiB").start().await;
    let url = proxy.url("/big");
    let big = ("x-origin-body-bytes", "300000");
    let r = get_with(Method::GET, &url, &[big]).await;
    assert_eq!(r.body.len(), 300_000, "the whole body arrives");
    let cs = r.cache_status_params();
    assert_eq!(cs.param("fwd"), Some("uri-miss"), "{}", r.cache_status());
    assert!(!cs.has("stored"), "{}", r.cache_status());
    get_with(Method::GET, &url, &[big]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_dropped_and_forwarding_headers_added() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    // POST is not cacheable: passed through, streaming.
    let r = get_with(
        Method::POST,
        &proxy.url("/form"),
        &[("connection", "keep-alive, x-private")],
    )
    .await;
    assert_eq!(r.status, 200);
    // RFC 9211 §2.2: a method the cache does not handle is fwd=method.
    assert_eq!(
        r.cache_status_params().param("fwd"),
        Some("method"),
        "{}",
        r.cache_status()
    );
    assert_eq!(origin.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_body_does_not_hang_and_is_passed_with_it() {
    // A GET's body is read whole and forwarded with its length; the answer
    // is neither looked up nor stored (request_body.rs, issue 25), so the
    // request can neither hang a fill nor change what others get.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    let addr = proxy.url("").trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!("GET /with-body HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    let read = stream.read_to_string(&mut response);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("answered")
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains("detail=request-body") && !response.contains("stored"),
        "{response}"
    );
    let sent = origin.requests_for("/with-body");
    assert_eq!(sent[0].header("content-length"), Some("5"));
}
