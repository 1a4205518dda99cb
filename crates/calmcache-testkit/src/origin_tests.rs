use http::Method;

use super::Origin;
use crate::client::request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_headers_shape_the_answer() {
    let origin = Origin::start().await;
    let url = format!("http://{}/a?x=1", origin.addr());
    let date = "Sun, 06 Nov 1994 08:49:37 GMT";
    let r = request(
        Method::GET,
        &url,
        &[
            ("x-origin-header", "ETag: \"v1\""),
            ("x-origin-header", &format!("Date: {date}")),
            ("x-origin-header", "Vary: A"),
            ("x-origin-header", "Vary: B"),
            ("x-origin-body", "0123456789"),
            ("x-origin-status", "203"),
        ],
    )
    .await;
    assert_eq!(r.status, 203);
    assert_eq!(r.body, "0123456789");
    assert_eq!(r.header("etag"), "\"v1\"");
    assert_eq!(r.header_all("date"), [date], "one Date, the test's");
    assert_eq!(r.header_all("vary"), ["A", "B"]);
    let seen = origin.requests_for("/a");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path_and_query, "/a?x=1");
    assert_eq!(seen[0].method, Method::GET);
    assert_eq!(origin.hits_for("/a"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_and_other_methods_are_answered() {
    let origin = Origin::start().await;
    let url = format!("http://{}/h", origin.addr());
    let head = request(Method::HEAD, &url, &[("x-origin-body", "hello")]).await;
    assert_eq!(head.status, 200);
    assert!(head.bytes.is_empty());
    assert_eq!(head.header("content-length"), "5");
    for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
        let r = request(m.clone(), &url, &[]).await;
        assert_eq!(r.status, 200, "{m}");
    }
    let methods: Vec<Method> = origin
        .requests_for("/h")
        .into_iter()
        .map(|r| r.method)
        .collect();
    assert_eq!(
        methods,
        [
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::PATCH
        ]
    );
}

/// The status of a GET of `url` with these headers; a 304 must have no
/// body and keep the ETag.
async fn status_of(url: &str, headers: &[(&str, &str)]) -> u16 {
    let mut all = vec![
        ("x-origin-header", "ETag: \"v1\""),
        (
            "x-origin-header",
            "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT",
        ),
    ];
    all.extend_from_slice(headers);
    let r = request(Method::GET, url, &all).await;
    if r.status == 304 {
        assert!(r.bytes.is_empty());
        assert_eq!(r.header("etag"), "\"v1\"");
    }
    r.status.as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditionals_are_answered_like_a_real_server() {
    let origin = Origin::start().await;
    let url = format!("http://{}/c", origin.addr());
    let lm = "Sun, 06 Nov 1994 08:49:37 GMT";
    let before = "Sat, 05 Nov 1994 08:49:37 GMT";
    let inm = "if-none-match";
    let ims = "if-modified-since";
    for (headers, want) in [
        (vec![(inm, "\"v1\"")], 304),
        (vec![(inm, "W/\"v1\"")], 304),
        (vec![(inm, "\"x\", \"v1\"")], 304),
        (vec![(inm, "*")], 304),
        (vec![(inm, "\"v2\"")], 200),
        (vec![(inm, "\"v2\""), (ims, lm)], 200),
        (vec![(ims, lm)], 304),
        (vec![(ims, before)], 200),
        (
            vec![(inm, "\"v1\""), ("x-origin-ignore-conditionals", "1")],
            200,
        ),
    ] {
        assert_eq!(status_of(&url, &headers).await, want, "{headers:?}");
    }
    assert_eq!(origin.hits_for("/c"), 9, "every request counts");
}
