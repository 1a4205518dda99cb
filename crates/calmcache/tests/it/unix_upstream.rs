//! Unix-socket upstream servers (issue 28 item 5, NGINX's `server
//! unix:/path;`) against a real origin on a socket in a temp dir, over
//! HTTP/1.1, h2c and HTTP/2 over TLS: cached and uncached answers, the
//! pool's keepalive, the client's Host passed as for TCP, the server shown
//! by its path in /status and /metrics, active health checks (`Host:
//! localhost`), a socket removed mid-run (502, then recovery), a socket
//! absent at start, a path that is a regular file, and a WebSocket tunnel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{get, get_with, Origin, Proxy, Wires};
use futures_util::{SinkExt, StreamExt};
use http::Method;
use tokio_tungstenite::tungstenite::Message;

use crate::wait_until;

const HOST: &str = "unix.test";

/// A socket path in a fresh temp dir (short: sun_path holds 107 bytes).
fn socket_in(name: &str) -> (PathBuf, PathBuf) {
    let dir = crate::scratch(name);
    let path = dir.join("app.sock");
    (dir, path)
}

fn unix_proxy(path: &Path, origin: Option<&Origin>) -> Proxy {
    // The proxy builder wants an origin for its default server; the unix
    // server replaces it.
    let placeholder = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    let proxy = match origin {
        Some(origin) => Proxy::new(origin),
        None => Proxy::with_upstream(placeholder),
    };
    proxy
        .servers(&format!("[\"unix:{}\"]", path.display()))
        .route("ttl = { 200 = \"60s\" }")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_origin_answers_cached_and_uncached_over_every_wire() {
    let (dir, path) = socket_in("unix-wires");
    let origin = Origin::start_unix(&path).await;
    let node = Wires::start(unix_proxy(&path, Some(&origin)), "").await;
    let mut sent = 0;
    for wire in &node.all {
        let label = wire.label();
        let cached = format!("/cached/{}", label.replace(' ', "-"));
        let first = node.send(wire, Method::GET, HOST, &cached, &[], "").await;
        assert_eq!(first.status, 200, "{label}: {}", first.body);
        assert!(
            first.body.starts_with(&format!("path={cached} n=")),
            "{label}: {}",
            first.body
        );
        let again = node.send(wire, Method::GET, HOST, &cached, &[], "").await;
        assert!(again.is_hit(), "{label}: {}", again.cache_status());
        assert_eq!(again.body, first.body, "{label}");
        let uncached = format!("/uncached/{}", label.replace(' ', "-"));
        let no_store = [("x-origin-cache-control", "no-store")];
        let mut bodies = Vec::new();
        for _ in 0..2 {
            let r = node
                .send(wire, Method::GET, HOST, &uncached, &no_store, "")
                .await;
            assert!(
                r.body.starts_with(&format!("path={uncached} n=")),
                "{label}: {}",
                r.body
            );
            bodies.push(r.body);
        }
        assert_ne!(bodies[0], bodies[1], "{label}: each from the origin");
        assert_eq!(origin.hits_for(&cached), 1, "{label}");
        assert_eq!(origin.hits_for(&uncached), 2, "{label}");
        sent += 3;
        // The client's Host reaches the origin, as over TCP.
        let seen = origin.requests_for(&uncached);
        assert_eq!(seen[0].header("host"), Some(HOST), "{label}");
    }
    assert_eq!(origin.hits(), sent);
    // Kept alive and reused: far fewer connections than requests.
    assert!(
        origin.connections() < sent,
        "{} connections for {sent} requests",
        origin.connections()
    );
    // Shown by its path.
    let label = format!("unix:{}", path.display());
    let status = node.proxy.status().await;
    let servers = &status["upstreams"]["origin"]["servers"];
    assert_eq!(servers[0], label.as_str(), "{status:#}");
    assert_eq!(
        status["upstreams"]["origin"]["health"][0]["server"],
        label.as_str()
    );
    let metrics = get(&node.proxy.admin_url("/metrics")).await.body;
    assert!(
        metrics.contains(&format!("server=\"{label}\"")),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

async fn status_of(proxy: &RunningProxy) -> String {
    let status = proxy.status().await;
    status["upstreams"]["origin"]["health"][0]["state"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_removed_mid_run_is_a_502_then_the_server_recovers() {
    let (dir, path) = socket_in("unix-removed");
    let mut origin = Origin::start_unix(&path).await;
    let proxy = unix_proxy(&path, Some(&origin))
        .upstream("max_fails = 1\nfail_timeout = \"1s\"")
        .start()
        .await;
    let no_store = [("x-origin-cache-control", "no-store")];
    let r = get_with(Method::GET, &proxy.url("/a"), &no_store).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The application goes away: its socket with it.
    origin.stop();
    std::fs::remove_file(&path).unwrap();
    let r = get_with(Method::GET, &proxy.url("/b"), &no_store).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(status_of(&proxy).await, "down");
    // It comes back on the same path: served again once fail_timeout passed.
    let origin = Origin::start_unix(&path).await;
    wait_until(
        Duration::from_secs(10),
        "the unix server back",
        async || {
            get_with(Method::GET, &proxy.url("/c"), &no_store)
                .await
                .status
                == 200
        },
    )
    .await;
    assert!(origin.hits_for("/c") >= 1);
    assert_eq!(status_of(&proxy).await, "up");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_absent_at_start_is_a_server_down_until_it_appears() {
    let (dir, path) = socket_in("unix-absent");
    let proxy = unix_proxy(&path, None)
        .upstream("max_fails = 1\nfail_timeout = \"1s\"")
        .start()
        .await;
    let r = get(&proxy.url("/early")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    let origin = Origin::start_unix(&path).await;
    wait_until(Duration::from_secs(10), "the socket up", async || {
        get(&proxy.url("/late")).await.status == 200
    })
    .await;
    assert_eq!(origin.hits_for("/late"), 1, "stored once served");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_is_a_regular_file_is_a_failed_connect() {
    let (dir, path) = socket_in("unix-file");
    std::fs::write(&path, "not a socket\n").unwrap();
    let proxy = unix_proxy(&path, None).start().await;
    let r = get(&proxy.url("/x")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    let health = &proxy.status().await["upstreams"]["origin"]["health"][0];
    let failure = health["last_failure"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(failure.contains("ConnectFailed"), "{health:#}");
    assert!(
        failure.contains(&path.display().to_string()),
        "names the socket: {failure}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_health_checks_reach_a_unix_server_with_host_localhost() {
    let (dir, path) = socket_in("unix-health");
    let origin = Origin::start_unix(&path).await;
    let proxy = unix_proxy(&path, Some(&origin))
        .upstream("health_check = { path = \"/healthz\", interval = \"100ms\", timeout = \"1s\" }")
        .start()
        .await;
    wait_until(Duration::from_secs(10), "a health check", async || {
        origin.hits_for("/healthz") >= 2
    })
    .await;
    let check = &origin.requests_for("/healthz")[0];
    assert_eq!(check.header("host"), Some("localhost"));
    assert_eq!(status_of(&proxy).await, "up");
    // The checks fail once the socket is gone: the server is marked down.
    drop(origin);
    std::fs::remove_file(&path).unwrap();
    wait_until(Duration::from_secs(10), "the check failing", async || {
        status_of(&proxy).await == "check_failed"
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_tunnels_through_a_unix_upstream() {
    let (dir, path) = socket_in("unix-websocket");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() || msg.is_binary() {
                        let _ = ws.send(msg).await;
                    }
                }
            });
        }
    });
    let proxy = unix_proxy(&path, None).start().await;
    let url = format!("ws://{}/ws", proxy.host());
    let (mut ws, resp) = tokio_tungstenite::connect_async(url)
        .await
        .expect("handshake");
    assert_eq!(resp.status(), 101);
    for text in ["over a unix socket", "and back"] {
        ws.send(Message::text(text)).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("an echo within 5 s")
            .expect("a message")
            .expect("no error");
        assert_eq!(got.into_text().unwrap().as_str(), text);
    }
    ws.close(None).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_names_a_unix_server_by_its_path() {
    // NGINX's $upstream_addr for `server unix:/path;` is `unix:/path`.
    let (dir, path) = socket_in("unix-log");
    let origin = Origin::start_unix(&path).await;
    let log = dir.join("access.json");
    let builder = unix_proxy(&path, Some(&origin)).access_log(&log, "json");
    let node = Wires::start(builder, "").await;
    for wire in &node.all {
        let page = format!("/logged/{}", wire.label().replace(' ', "-"));
        for _ in 0..2 {
            let r = node.send(wire, Method::GET, HOST, &page, &[], "").await;
            assert_eq!(r.status, 200, "{}", wire.label());
        }
    }
    let label = format!("unix:{}", path.display());
    let lines = wait_until(Duration::from_secs(10), "six log lines", async || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (lines.len() >= 6).then_some(lines)
    })
    .await;
    for v in &lines {
        match v["cache_status"].as_str() {
            Some("MISS") => assert_eq!(v["upstream_addr"], label.as_str(), "{v}"),
            Some("HIT") => assert_eq!(v["upstream_addr"], serde_json::Value::Null, "{v}"),
            _ => panic!("a miss or a hit: {v}"),
        }
    }
    let misses = lines.iter().filter(|v| v["cache_status"] == "MISS");
    assert_eq!(misses.count(), 3, "one miss per wire");
    let _ = std::fs::remove_dir_all(&dir);
}
