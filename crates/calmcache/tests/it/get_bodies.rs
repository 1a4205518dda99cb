//! Request bodies on GET and HEAD (issue 25, item 7): one rule whatever
//! their framing (`Content-Length`, `chunked`, HTTP/2 DATA), on cached and
//! uncached routes alike. A body is read whole and forwarded with its
//! length, and the answer is never looked up or stored; a malformed or
//! oversized body is refused before anything reaches the origin, and an
//! HTTP/1.1 connection closes after the refusal.

use std::time::Duration;

use calmcache_testkit::raw::h2::{pseudo, H2Conn};
use calmcache_testkit::raw::{RawConn, RawResponse};
use calmcache_testkit::wire::{Wire, TLS_NAME};
use calmcache_testkit::{Origin, Proxy, Reply, Wires};
use http::Method;

/// `/c/...` is cached (60 s), anything else goes through a route without a zone.
async fn start(origin: &Origin) -> Wires {
    let routes = "match = \"^/c/\"\nttl = { 200 = \"60s\" }\n\n\
                  [[routes]]\nname = \"plain\"\nupstream = \"origin\"";
    Wires::start(Proxy::new(origin).route(routes), "").await
}

const ECHO: [(&str, &str); 1] = [("x-origin-echo", "1")];

async fn get(wires: &Wires, wire: &Wire, path: &str, body: &'static str) -> Reply {
    wires
        .send(wire, Method::GET, TLS_NAME, path, &ECHO, body)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_body_is_forwarded_whole_and_never_stored() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    for (i, wire) in wires.all.iter().enumerate() {
        for prefix in ["/c", "/p"] {
            let what = format!("{} {prefix}", wire.label());
            let path = format!("{prefix}/body/{i}");
            let with_body = get(&wires, wire, &path, "q=1").await;
            assert_eq!(with_body.status, 200, "{what}: {}", with_body.body);
            assert!(
                with_body.body.contains("body-bytes: 3\n"),
                "{what}: the origin got the body: {}",
                with_body.body
            );
            assert!(
                with_body.cache_status().contains("detail=request-body"),
                "{what}: {}",
                with_body.cache_status()
            );
            let sent = origin.requests_for(&path);
            assert_eq!(sent[0].header("content-length"), Some("3"), "{what}");
            assert!(!sent[0].has_header("transfer-encoding"), "{what}");
            // What the body fetched was stored for nobody: a bodiless GET
            // is a miss, and its own answer is what later GETs get.
            let plain = get(&wires, wire, &path, "").await;
            assert!(plain.body.contains("body-bytes: 0\n"), "{what}");
            assert_eq!(origin.hits_for(&path), 2, "{what}");
            let again = get(&wires, wire, &path, "q=2").await;
            assert!(again.body.contains("body-bytes: 3\n"), "{what}");
            assert_eq!(origin.hits_for(&path), 3, "{what}: a body always passes");
            if prefix == "/c" {
                let hit = get(&wires, wire, &path, "").await;
                assert_eq!(hit.body, plain.body, "{what}: the bodiless copy");
                assert_eq!(origin.hits_for(&path), 3, "{what}: a hit");
            }
        }
    }
    wires.proxy.stop().await;
}

/// Writes `requests` back to back on one HTTP/1.1 connection (pipelined)
/// and reads up to `answers` responses.
async fn pipelined(wires: &Wires, requests: &[String], answers: usize) -> Vec<RawResponse> {
    let addr = wires.proxy.running().proxy_addrs[0];
    let mut conn = RawConn::connect(addr).await.unwrap();
    let _ = conn.send(requests.concat().as_bytes()).await;
    let mut out = Vec::new();
    for _ in 0..answers {
        let r = conn.read_response(false).await.unwrap();
        let closed = r.closed || r.status == 0;
        out.push(r);
        if closed {
            break;
        }
    }
    out
}

fn request(wires: &Wires, path: &str, fields: &str, body: &str) -> String {
    let h = wires.proxy.host();
    format!("GET {path} HTTP/1.1\r\nHost: {h}\r\nx-origin-echo: 1\r\n{fields}\r\n{body}")
}

/// Regression (issue 25): a chunked GET body was dropped on an uncached
/// route while a sized one was forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_get_body_is_forwarded_like_a_sized_one() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    for prefix in ["/c", "/p"] {
        let path = format!("{prefix}/chunked");
        let after = format!("{prefix}/after-chunked");
        let chunked = "Transfer-Encoding: chunked\r\n";
        let requests = [
            request(&wires, &path, chunked, "2\r\nq=\r\n1\r\n1\r\n0\r\n\r\n"),
            request(&wires, &after, "", ""),
        ];
        let replies = pipelined(&wires, &requests, 2).await;
        assert_eq!(replies.len(), 2, "{prefix}: both answered");
        let body = String::from_utf8_lossy(&replies[0].body).into_owned();
        assert_eq!(replies[0].status, 200, "{prefix}: {}", replies[0].head);
        assert!(body.contains("body-bytes: 3\n"), "{prefix}: {body}");
        assert!(
            replies[0].header("cache-status").contains("request-body"),
            "{prefix}: {}",
            replies[0].head
        );
        let sent = origin.requests_for(&path);
        assert_eq!(sent[0].header("content-length"), Some("3"), "{prefix}");
        assert!(!sent[0].has_header("transfer-encoding"), "{prefix}");
        assert_eq!(replies[1].status, 200, "{prefix}: the pipelined request");
        assert_eq!(origin.hits_for(&after), 1, "{prefix}");
    }
    // An empty chunked body is no body: the GET is cached as any other.
    let empty = [request(
        &wires,
        "/c/empty",
        "Transfer-Encoding: chunked\r\n",
        "0\r\n\r\n",
    )];
    for round in 0..2 {
        let replies = pipelined(&wires, &empty, 1).await;
        assert_eq!(replies[0].status, 200, "{}", replies[0].head);
        assert!(!replies[0].header("cache-status").contains("request-body"));
        assert_eq!(origin.hits_for("/c/empty"), 1, "round {round}: stored once");
    }
    wires.proxy.stop().await;
}

/// Regression (issue 25): a GET with a malformed chunked body got the
/// origin's 200, then the connection closed and the request pipelined
/// behind it was never answered. Now: 400 before the origin is asked, and
/// the connection closes after it (as NGINX does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_get_body_is_refused_before_the_origin() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let chunked = "Transfer-Encoding: chunked\r\n";
    let too_large = "x".repeat(64 * 1024 + 1);
    let cases = [
        ("bad chunk size", chunked, "zz\r\nq=1\r\n0\r\n\r\n", 400),
        (
            "chunk longer than its size",
            chunked,
            "1\r\nq=1\r\n0\r\n\r\n",
            400,
        ),
        (
            "over 64 KiB",
            "Content-Length: 65537\r\n",
            too_large.as_str(),
            413,
        ),
    ];
    for prefix in ["/c", "/p"] {
        for (n, (what, fields, body, status)) in cases.iter().enumerate() {
            let path = format!("{prefix}/bad/{n}");
            let behind = format!("{prefix}/behind/{n}");
            let requests = [
                request(&wires, &path, fields, body),
                request(&wires, &behind, "", ""),
            ];
            let replies = pipelined(&wires, &requests, 2).await;
            let first = &replies[0];
            assert_eq!(first.status, *status, "{prefix} {what}: {}", first.head);
            assert!(first.closed, "{prefix} {what}: the connection closes");
            assert_eq!(replies.len(), 1, "{prefix} {what}");
            assert_eq!(origin.hits_for(&path), 0, "{prefix} {what}");
            assert_eq!(origin.hits_for(&behind), 0, "{prefix} {what}");
        }
    }
    wires.proxy.stop().await;
}

/// The same refusals over HTTP/2 (h2c and TLS): a DATA stream longer than
/// the body's bound, or shorter than its `content-length`; the stream is
/// refused and the origin never asked. The connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_get_body_over_http2_is_refused_before_the_origin() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let authority = wires.proxy.host();
    let too_large = vec![b'x'; 64 * 1024 + 1];
    for (i, wire) in wires.all.iter().enumerate() {
        let (conn, scheme) = match wire {
            Wire::Http1 => continue,
            Wire::H2c => (
                H2Conn::h2c(wires.proxy.running().proxy_addrs[0]).await,
                "http",
            ),
            Wire::H2Tls(config) => {
                let addr = wires.proxy.tls_addr();
                (H2Conn::tls(addr, TLS_NAME, config.clone()).await, "https")
            }
        };
        let mut conn = conn.unwrap();
        let what = wire.label();
        let fields_for = |path: &str, length: Option<&'static str>| {
            let mut fields: Vec<(String, String)> = pseudo("GET", path, &authority)
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect();
            fields[1].1 = scheme.to_owned();
            if let Some(length) = length {
                fields.push(("content-length".to_owned(), length.to_owned()));
            }
            fields
        };
        for prefix in ["/c", "/p"] {
            let big = format!("{prefix}/h2-big/{i}");
            let fields = fields_for(&big, Some("65537"));
            let r = conn.request(&borrowed(&fields), Some(&too_large)).await;
            assert!(r.refused(), "{what} {big}: {}", r.describe());
            if r.status.is_some() {
                assert_eq!(r.status, Some(413), "{what} {big}");
            }
            let short = format!("{prefix}/h2-short/{i}");
            let fields = fields_for(&short, Some("10"));
            let r = conn.request(&borrowed(&fields), Some(b"q=1")).await;
            assert!(r.refused(), "{what} {short}: {}", r.describe());
            assert_eq!(origin.hits_for(&big), 0, "{what} {big}");
            assert_eq!(origin.hits_for(&short), 0, "{what} {short}");
            // A good body on the same connection is forwarded.
            let good = format!("{prefix}/h2-good/{i}");
            let fields = fields_for(&good, None);
            let r = conn.request(&borrowed(&fields), Some(b"q=1")).await;
            assert_eq!(r.status, Some(200), "{what} {good}: {}", r.describe());
            assert_eq!(origin.hits_for(&good), 1, "{what} {good}");
        }
        assert!(
            !conn.closes_within(Duration::from_millis(50)).await,
            "{what}"
        );
    }
    wires.proxy.stop().await;
}

fn borrowed(fields: &[(String, String)]) -> Vec<(&str, &str)> {
    fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// A GET body that stops arriving is the client's 408 after the upstream's
/// `send_timeout` (as a stalled POST body is), before the origin is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_get_body_is_408_before_the_origin() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .upstream("send_timeout = \"300ms\"")
        .start()
        .await;
    let addr = proxy.running().proxy_addrs[0];
    let h = proxy.host();
    let mut conn = RawConn::connect(addr).await.unwrap();
    let head = format!("GET /stalled HTTP/1.1\r\nHost: {h}\r\nContent-Length: 10\r\n\r\nq=1");
    conn.send(head.as_bytes()).await.unwrap();
    let r = conn.read_response(false).await.unwrap();
    assert_eq!(r.status, 408, "{}", r.head);
    assert!(r.closed, "the connection closes");
    assert_eq!(origin.hits_for("/stalled"), 0);
    proxy.stop().await;
}

/// HEAD follows the same rule: its body reaches the origin with its length,
/// and the answer is neither looked up nor stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_body_follows_the_same_rule() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let addr = wires.proxy.running().proxy_addrs[0];
    let h = wires.proxy.host();
    for prefix in ["/c", "/p"] {
        let path = format!("{prefix}/head-body");
        let mut conn = RawConn::connect(addr).await.unwrap();
        let req = format!("HEAD {path} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 3\r\n\r\nq=1");
        conn.send(req.as_bytes()).await.unwrap();
        let r = conn.read_response(true).await.unwrap();
        assert_eq!(r.status, 200, "{prefix}: {}", r.head);
        assert!(
            r.header("cache-status").contains("request-body"),
            "{prefix}"
        );
        let sent = origin.requests_for(&path);
        assert_eq!(sent[0].method, Method::HEAD, "{prefix}");
        assert_eq!(sent[0].header("content-length"), Some("3"), "{prefix}");
    }
    wires.proxy.stop().await;
}
