//! Origin connection reuse (issue 29 item 4): the connections calmcache
//! opens to an upstream server, why, who closed them, and the reuse figure
//! in /status, /metrics and the JSON access log, against a real origin that
//! counts the connections it accepted. Over HTTP/1.1, h2c and HTTP/2 over
//! TLS (the client's wire does not change reuse: the counts must be the
//! same), and with an origin that misbehaves: one that closes its idle
//! connections, one that answers `Connection: close`, one that drops the
//! connection mid-body. The counters stay right and nothing is reused that
//! must not be. An answer dropped before its end is drained when small
//! (the connection kept) and closed when large, and counted either way.

use std::time::Duration;

use calmcache_testkit::{get_with, Origin, Proxy, Wires};
use http::Method;
use serde_json::Value;

use crate::wait_until;

const HOST: &str = "reuse.test";
const NO_STORE: (&str, &str) = ("x-origin-cache-control", "no-store");

/// The one upstream's figures in /status: (requests, connections opened,
/// reuse %), and its one server's connection block.
fn upstream_of(status: &Value) -> (u64, u64, f64, Value) {
    let (_, u) = status["upstreams"]
        .as_object()
        .and_then(|all| all.iter().next())
        .expect("one upstream");
    (
        u["requests"].as_u64().unwrap(),
        u["connections_opened"].as_u64().unwrap(),
        u["reuse_percent"].as_f64().unwrap(),
        u["connections"][0].clone(),
    )
}

/// A server's closes, both sides together.
fn closed(server: &Value) -> u64 {
    server["closed"]["origin"].as_u64().unwrap() + server["closed"]["calmcache"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_turn_share_one_origin_connection_over_every_wire() {
    let origin = Origin::start().await;
    let node = Wires::start(Proxy::new(&origin), "").await;
    let per_wire = 4;
    for wire in &node.all {
        for i in 0..per_wire {
            let path = format!("/{}/{i}", wire.label().replace(' ', "-"));
            let r = node
                .send(wire, Method::GET, HOST, &path, &[NO_STORE], "")
                .await;
            assert_eq!(r.status, 200, "{}: {}", wire.label(), r.body);
        }
    }
    let sent = per_wire * node.all.len() as u64;
    let (requests, opened, reuse, server) = upstream_of(&node.proxy.status().await);
    assert_eq!(requests, sent);
    assert_eq!(server["requests"], sent);
    assert_eq!(opened, 1, "one connection, reused by every wire: {server}");
    assert_eq!(origin.connections(), 1, "the origin accepted one");
    assert_eq!(server["opened"]["pool_empty"], 1);
    assert_eq!(server["opened"]["tunnel"], 0);
    let expected = 100.0 * (1.0 - 1.0 / sent as f64);
    assert!((reuse - expected).abs() < 1e-9, "{reuse} != {expected}");
    let metrics = get_with(Method::GET, &node.proxy.admin_url("/metrics"), &[])
        .await
        .body;
    let series = |name: &str, extra: &str| {
        let labels = format!(
            "{{upstream=\"origin\",server=\"{}\"{extra}}}",
            origin.addr()
        );
        format!("{name}{labels} ")
    };
    for (name, extra, value) in [
        ("calmcache_upstream_server_requests_total", "", sent),
        (
            "calmcache_upstream_server_connections_opened_total",
            ",reason=\"pool_empty\"",
            1,
        ),
        (
            "calmcache_upstream_server_connections_closed_total",
            ",by=\"origin\"",
            0,
        ),
    ] {
        let line = format!("{}{value}", series(name, extra));
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}

/// The origin closes its idle connections (a keep-alive shorter than the
/// pool's 4 s, or a restart): the pool drops the closed one, counted as
/// closed by the origin, and the next request opens a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_closes_idle_connections_is_counted_and_never_reused() {
    let mut origin = Origin::start().await;
    let addr = origin.addr();
    let proxy = Proxy::new(&origin).start().await;
    let first = get_with(Method::GET, &proxy.url("/a"), &[NO_STORE]).await;
    assert_eq!(first.status, 200, "{}", first.body);
    origin.stop();
    let server = wait_until(Duration::from_secs(10), "the close seen", async || {
        let (_, _, _, server) = upstream_of(&proxy.status().await);
        (server["closed"]["origin"] == 1).then_some(server)
    })
    .await;
    // Its listener went with its connections (one task): the port is free.
    let origin = Origin::start_on(addr).await;
    assert_eq!(server["closed"]["calmcache"], 0, "{server}");
    let second = get_with(Method::GET, &proxy.url("/b"), &[NO_STORE]).await;
    assert_eq!(second.status, 200, "{}", second.body);
    let (requests, opened, _, server) = upstream_of(&proxy.status().await);
    assert_eq!((requests, opened), (2, 2), "{server}");
    assert_eq!(
        origin.connections(),
        1,
        "a new connection to the new origin"
    );
}

/// `Connection: close` on an answer: that connection is not reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_connection_close_ends_its_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    let close = [NO_STORE, ("x-origin-header", "Connection: close")];
    for path in ["/a", "/b"] {
        let r = get_with(Method::GET, &proxy.url(path), &close).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = get_with(Method::GET, &proxy.url("/c"), &[NO_STORE]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = get_with(Method::GET, &proxy.url("/d"), &[NO_STORE]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let server = wait_until(Duration::from_secs(10), "both closes", async || {
        let (_, _, _, server) = upstream_of(&proxy.status().await);
        (closed(&server) == 2).then_some(server)
    })
    .await;
    assert_eq!(origin.connections(), 3, "two closed, the third reused");
    assert_eq!(server["requests"], 4);
    assert_eq!(server["opened"]["pool_empty"], 3, "{server}");
}

/// The origin drops the connection halfway through a body: the client's
/// answer is cut short, the connection is counted closed by the origin,
/// and the next request goes out on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_resets_mid_body_loses_only_that_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    let abort = [
        NO_STORE,
        ("x-origin-trickle-ms", "5"),
        ("x-origin-abort-after-bytes", "4"),
        ("x-origin-body-bytes", "64"),
    ];
    let got = raw_get(proxy.running().proxy_addrs[0], "/cut", &abort).await;
    let text = String::from_utf8_lossy(&got);
    assert!(!text.contains(&".".repeat(40)), "cut short: {text}");
    let server = wait_until(Duration::from_secs(10), "the close seen", async || {
        let (_, _, _, server) = upstream_of(&proxy.status().await);
        (closed(&server) == 1).then_some(server)
    })
    .await;
    assert_eq!(server["closed"]["origin"], 1, "{server}");
    let r = get_with(Method::GET, &proxy.url("/next"), &[NO_STORE]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.connections(), 2, "the cut connection not reused");
    let (requests, opened, _, _) = upstream_of(&proxy.status().await);
    assert_eq!((requests, opened), (2, 2));
}

/// The bytes of an HTTP/1.1 exchange with the proxy at `addr`, read
/// until it closes (bounded: 10 s).
async fn raw_get(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let read = tcp.read_to_end(&mut got);
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    got
}

/// The JSON access log says which answers came over a new connection and
/// which over a reused one; a hit has no upstream connection at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_access_log_tells_new_from_reused() {
    let origin = Origin::start().await;
    let dir = crate::scratch("reuse-log");
    let log = dir.join("access.log");
    let proxy = Proxy::new(&origin).access_log(&log, "json").start().await;
    for path in ["/a", "/b", "/b"] {
        let r = get_with(Method::GET, &proxy.url(path), &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let lines = wait_until(Duration::from_secs(10), "three log lines", async || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (lines.len() == 3).then_some(lines)
    })
    .await;
    let uses: Vec<&Value> = lines.iter().map(|l| &l["upstream_connection"]).collect();
    assert_eq!(uses[0], "new", "{lines:?}");
    assert_eq!(uses[1], "reused", "{lines:?}");
    assert_eq!(*uses[2], Value::Null, "a hit: {lines:?}");
}

/// A client that goes away halfway through an answer calmcache passes
/// through (not stored): before issue 29 the origin connection closed with
/// the unread rest of the body; now a small rest is read and thrown away,
/// and the connection goes back to the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_body_leaves_the_origin_connection_pooled() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    let mut tcp = tokio::net::TcpStream::connect(proxy.running().proxy_addrs[0])
        .await
        .unwrap();
    let req = format!(
        "GET /slow HTTP/1.1\r\nHost: {HOST}\r\nx-origin-cache-control: no-store\r\n\
         x-origin-trickle-ms: 40\r\nx-origin-body-bytes: 4000\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = [0u8; 64];
    let n = tcp.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);
    drop(tcp);
    // Done: the whole body sent (drained), or the connection gone.
    wait_until(Duration::from_secs(10), "the origin done", async || {
        origin.in_progress() == 0
    })
    .await;
    assert_eq!(origin.bodies_trickled(), 1, "the rest read to its end");
    // Nothing outside says when hyper has put the drained connection back
    // in the pool (a task of its own, right after the body's last byte);
    // a tenth of a second is ample for that one step.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = get_with(Method::GET, &proxy.url("/next"), &[NO_STORE]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (requests, opened, _, server) = upstream_of(&proxy.status().await);
    assert_eq!(closed(&server), 0, "the connection kept: {server}");
    assert_eq!((requests, opened), (2, 1), "{server}");
    assert_eq!(origin.connections(), 1);
}

/// Asks for `path` (a `len`-byte answer the origin trickles, uncached) on
/// a connection of its own, reads the start of the answer, and leaves.
async fn ask_and_leave(proxy: &calmcache_testkit::proxy::RunningProxy, path: &str, len: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = proxy.running().proxy_addrs[0];
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {HOST}\r\nx-origin-cache-control: no-store\r\n\
         x-origin-trickle-ms: 40\r\nx-origin-body-bytes: {len}\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = [0u8; 64];
    let n = tcp.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);
}

/// A server's `dropped_answers` count for `outcome`.
fn dropped(server: &Value, outcome: &str) -> u64 {
    server["dropped_answers"][outcome].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_small_answer_is_drained_and_reused_a_large_one_closed_both_counted() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    // 4,000 bytes left at most: read to its end, the connection kept.
    ask_and_leave(&proxy, "/small", 4_000).await;
    let server = wait_until(Duration::from_secs(10), "the drain counted", async || {
        let (_, _, _, server) = upstream_of(&proxy.status().await);
        (dropped(&server, "drained") == 1).then_some(server)
    })
    .await;
    assert_eq!(closed(&server), 0, "{server}");
    // (The pool takes the connection back in a task of its own, right
    // after the body's last byte, as in the test above.)
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = get_with(Method::GET, &proxy.url("/next"), &[NO_STORE]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.connections(), 1, "the drained connection reused");

    // 1 MB declared, most of it left: past DRAIN_MAX at once, closed.
    ask_and_leave(&proxy, "/large", 1_000_000).await;
    let server = wait_until(Duration::from_secs(10), "the close counted", async || {
        let (_, _, _, server) = upstream_of(&proxy.status().await);
        (closed(&server) == 1).then_some(server)
    })
    .await;
    assert_eq!(dropped(&server, "too_large"), 1, "{server}");
    assert_eq!(server["closed"]["calmcache"], 1, "{server}");
    let r = get_with(Method::GET, &proxy.url("/after"), &[NO_STORE]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.connections(), 2, "a new connection after the close");
    let metrics = get_with(Method::GET, &proxy.admin_url("/metrics"), &[])
        .await
        .body;
    for outcome in ["drained", "too_large"] {
        let row = "calmcache_upstream_server_dropped_answers_total{upstream=";
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(row) && l.contains(&format!("outcome=\"{outcome}\"}} 1"))),
            "{outcome}: {metrics}"
        );
    }
    let (_, _, _, server) = upstream_of(&proxy.status().await);
    assert_eq!(
        (dropped(&server, "too_slow"), dropped(&server, "failed")),
        (0, 0)
    );
}
