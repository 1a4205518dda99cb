//! WebSocket tunnels (issue 6) against a real WebSocket server and client
//! (tokio-tungstenite): echo of text, binary, fragmented and large messages,
//! ping/pong, the close handshake both ways, the idle timeout, a refused
//! handshake passed through, `websocket = false`, the `/status` counters,
//! handshakes never cached, 2,000 tunnels open at once, tunnels on TLS and
//! h2c listeners, bytes a client sends right behind its handshake, and (on
//! plain, TLS and h2c listeners) an origin that cannot be reached, closes
//! before it answers, refuses, or sends bytes right behind its 101; a
//! client gone during its handshake leaves no tunnel open.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{get_with, Origin, Proxy};
use futures_util::{SinkExt, StreamExt};
use http::Method;
use tokio::net::{TcpListener, TcpStream};

use crate::wait_until;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub(crate) type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What the echo server saw.
#[derive(Default)]
pub(crate) struct Seen {
    /// Handshakes accepted.
    pub(crate) accepted: AtomicUsize,
    /// Handshakes refused (path `/refuse`).
    pub(crate) refused: AtomicUsize,
    /// The last accepted handshake's request headers.
    pub(crate) headers: Mutex<Option<http::HeaderMap>>,
    /// Close frames received: (code, reason).
    pub(crate) closes: Mutex<Vec<(u16, String)>>,
}

/// Small buffers: thousands of sockets in one test process.
pub(crate) fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
}

/// A WebSocket echo server on 127.0.0.1:0: echoes text and binary, answers
/// pings (tungstenite does), answers "close-me" with a close of its own
/// (4000 "done"), and refuses `/refuse` with a 403 and a body.
pub(crate) async fn echo_server() -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(echo(stream, shared.clone()));
        }
    });
    (addr, seen)
}

// tungstenite's callback returns its error response by value.
#[allow(clippy::result_large_err)]
async fn echo(stream: TcpStream, seen: Arc<Seen>) {
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        if req.uri().path() == "/refuse" {
            seen.refused.fetch_add(1, Ordering::SeqCst);
            let body = "no websockets here\n";
            let refusal = http::Response::builder()
                .status(403)
                .header("content-length", body.len())
                .header("cache-control", "max-age=60")
                .header("x-refused-by", "echo")
                .body(Some(body.to_owned()))
                .unwrap();
            return Err(refusal);
        }
        seen.accepted.fetch_add(1, Ordering::SeqCst);
        *seen.headers.lock().unwrap() = Some(req.headers().clone());
        Ok(resp)
    };
    let config = Some(ws_config());
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async_with_config(stream, check, config).await
    else {
        return;
    };
    while let Some(Ok(msg)) = ws.next().await {
        match msg {
            Message::Text(text) if text.as_str() == "close-me" => {
                let frame = CloseFrame {
                    code: CloseCode::from(4000),
                    reason: "done".into(),
                };
                let _ = ws.send(Message::Close(Some(frame))).await;
            }
            Message::Text(_) | Message::Binary(_) => {
                if ws.send(msg).await.is_err() {
                    return;
                }
            }
            Message::Close(frame) => {
                let got = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                seen.closes.lock().unwrap().extend(got);
                // tungstenite queued the reply; reading on flushes it.
            }
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
}

async fn proxy_for(server: SocketAddr, upstream_keys: &str, route_keys: &str) -> RunningProxy {
    Proxy::with_upstream(server)
        .upstream(upstream_keys)
        .route(route_keys)
        .start()
        .await
}

pub(crate) async fn connect(proxy: &RunningProxy, path: &str) -> Client {
    let url = format!("ws://{}{path}", proxy.host());
    let connecting = tokio_tungstenite::connect_async_with_config(url, Some(ws_config()), true);
    let (ws, resp) = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .expect("handshake in time")
        .expect("handshake");
    assert_eq!(resp.status(), 101);
    ws
}

/// The next message that is not a ping or pong, within 5 s.
pub(crate) async fn next<S>(ws: &mut WebSocketStream<S>) -> Message
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a message in time")
            .expect("stream open")
            .expect("no error");
        if !matches!(msg, Message::Ping(_) | Message::Pong(_)) {
            return msg;
        }
    }
}

pub(crate) async fn websockets(proxy: &RunningProxy) -> (u64, u64) {
    let status = proxy.status().await;
    let ws = &status["websockets"];
    (
        ws["active"].as_u64().unwrap(),
        ws["total"].as_u64().unwrap(),
    )
}

/// Polls `/status` until `websockets.active` is `want` (10 s at most).
pub(crate) async fn wait_active(proxy: &RunningProxy, want: u64) {
    let what = format!("websockets.active at {want}");
    wait_until(Duration::from_secs(10), &what, async || {
        websockets(proxy).await.0 == want
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_binary_fragmented_and_large_messages_echo_through_the_proxy() {
    let (server, seen) = echo_server().await;
    let proxy = proxy_for(server, "", "").await;
    let mut ws = connect(&proxy, "/chat?room=1").await;

    ws.send(Message::text("hello")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("hello"));

    let binary: Vec<u8> = (0..=255u8).collect();
    ws.send(Message::binary(binary.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(binary));

    // One text message in three frames (FIN on the last): the server
    // reassembles it, so the echo proves every fragment went through.
    let frames = [
        Frame::message("frag", OpCode::Data(Data::Text), false),
        Frame::message("ment", OpCode::Data(Data::Continue), false),
        Frame::message("ed", OpCode::Data(Data::Continue), true),
    ];
    for frame in frames {
        ws.send(Message::Frame(frame)).await.unwrap();
    }
    assert_eq!(next(&mut ws).await, Message::text("fragmented"));

    // Larger than any buffer on the way.
    let large: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(large.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(large));

    // The handshake reached the server with its headers and X-Forwarded-For.
    let headers = seen.headers.lock().unwrap().clone().unwrap();
    assert!(headers.contains_key("sec-websocket-key"), "{headers:?}");
    assert_eq!(headers["sec-websocket-version"], "13");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    ws.close(None).await.unwrap();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_headers_pass_once_each_way() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, seen) = echo_server().await;
    let proxy = proxy_for(server, "", "").await;
    let mut tcp = TcpStream::connect(proxy.host()).await.unwrap();
    let head = format!(
        "GET /once HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        proxy.host()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed before the 101: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 101"), "{text}");
    // Browsers and Node's ws refuse a doubled accept value.
    assert_eq!(text.matches("sec-websocket-accept:").count(), 1, "{text}");
    assert!(
        text.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{text}"
    );
    let headers = seen.headers.lock().unwrap().clone().unwrap();
    for name in ["sec-websocket-key", "sec-websocket-version", "upgrade"] {
        assert_eq!(
            headers.get_all(name).iter().count(),
            1,
            "{name}: {headers:?}"
        );
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_is_answered_with_pong_through_the_proxy() {
    let (server, _seen) = echo_server().await;
    let proxy = proxy_for(server, "", "").await;
    let mut ws = connect(&proxy, "/").await;
    ws.send(Message::Ping("are you there".into()))
        .await
        .unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("pong in time")
        .unwrap()
        .unwrap();
    assert_eq!(pong, Message::Pong("are you there".into()));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_close_handshake_runs_end_to_end_both_ways() {
    let (server, seen) = echo_server().await;
    let proxy = proxy_for(server, "", "").await;

    // The client closes: the server gets code and reason and echoes them.
    let mut ws = connect(&proxy, "/").await;
    let bye = CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    };
    ws.send(Message::Close(Some(bye))).await.unwrap();
    match next(&mut ws).await {
        Message::Close(Some(frame)) => {
            assert_eq!(
                (frame.code, frame.reason.as_str()),
                (CloseCode::Normal, "bye")
            );
        }
        other => panic!("expected the close reply, got {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    assert!(matches!(end, Ok(None | Some(Err(_)))), "{end:?}");
    assert_eq!(
        seen.closes.lock().unwrap().clone(),
        [(1000, "bye".to_owned())]
    );

    // The server closes: the client gets code and reason.
    let mut ws = connect(&proxy, "/").await;
    ws.send(Message::text("close-me")).await.unwrap();
    match next(&mut ws).await {
        Message::Close(Some(frame)) => {
            assert_eq!(
                (u16::from(frame.code), frame.reason.as_str()),
                (4000, "done")
            );
        }
        other => panic!("expected the server's close, got {other:?}"),
    }
    // Reading on sends our reply, and the connection then ends.
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    assert!(matches!(end, Ok(None | Some(Err(_)))), "{end:?}");
    wait_active(&proxy, 0).await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_after_read_timeout_and_a_busy_one_is_not() {
    let (server, _seen) = echo_server().await;
    let proxy = proxy_for(server, "read_timeout = \"300ms\"", "").await;

    // Traffic every 100 ms keeps a tunnel open well past 300 ms.
    let mut busy = connect(&proxy, "/").await;
    let ticking = tokio::spawn(async move {
        let started = Instant::now();
        let mut i = 0;
        while started.elapsed() < Duration::from_millis(1200) {
            let text = format!("tick {i}");
            busy.send(Message::text(text.clone())).await.unwrap();
            assert_eq!(next(&mut busy).await, Message::text(text));
            tokio::time::sleep(Duration::from_millis(100)).await; // paced ticks for 1.2 s
            i += 1;
        }
        busy
    });

    // Silence: the proxy closes the tunnel after 300 ms, not before.
    let mut idle = connect(&proxy, "/").await;
    let opened = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(5), idle.next())
        .await
        .expect("the proxy closes an idle tunnel");
    let after = opened.elapsed();
    assert!(matches!(end, None | Some(Err(_))), "{end:?}");
    assert!(
        after >= Duration::from_millis(280),
        "closed after {after:?}"
    );
    assert!(after < Duration::from_secs(2), "closed after {after:?}");
    // The busy one is still open after 1.2 s.
    let mut busy = ticking.await.unwrap();
    busy.send(Message::text("still here")).await.unwrap();
    assert_eq!(next(&mut busy).await, Message::text("still here"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_handshake_is_passed_back_as_it_came_and_never_cached() {
    let (server, seen) = echo_server().await;
    let proxy = proxy_for(server, "", "ttl = { any = \"60s\" }").await;
    let url = format!("ws://{}/refuse", proxy.host());
    match tokio_tungstenite::connect_async(url).await {
        Err(WsError::Http(resp)) => assert_eq!(resp.status(), 403),
        other => panic!("expected a refusal, got {:?}", other.map(|(_, r)| r)),
    }
    let handshake = [
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("sec-websocket-version", "13"),
    ];
    let reply = get_with(Method::GET, &proxy.url("/refuse"), &handshake).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body, "no websockets here\n");
    assert_eq!(reply.header("x-refused-by"), "echo");
    // A cacheable refusal, yet every handshake reaches the server.
    assert_eq!(seen.refused.load(Ordering::SeqCst), 2);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_are_never_cached_and_counted_in_status() {
    let (server, seen) = echo_server().await;
    let proxy = proxy_for(server, "", "ttl = { any = \"60s\" }").await;
    assert_eq!(websockets(&proxy).await, (0, 0));
    let mut first = connect(&proxy, "/same").await;
    let mut second = connect(&proxy, "/same").await;
    assert_eq!(
        seen.accepted.load(Ordering::SeqCst),
        2,
        "both reached the server"
    );
    wait_active(&proxy, 2).await;
    assert_eq!(websockets(&proxy).await, (2, 2));
    // A tunnel keeps its client connection counted (and its max_connections slot).
    let status = proxy.status().await;
    assert!(
        status["connections"]["active"].as_u64().unwrap() >= 2,
        "{}",
        status["connections"]
    );
    for ws in [&mut first, &mut second] {
        ws.send(Message::text("x")).await.unwrap();
        assert_eq!(next(ws).await, Message::text("x"));
        ws.close(None).await.unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    }
    wait_active(&proxy, 0).await;
    assert_eq!(websockets(&proxy).await, (0, 2));
    let metrics = get_with(Method::GET, &proxy.admin_url("/metrics"), &[]).await;
    assert!(
        metrics.body.contains("calmcache_websockets_active 0\n"),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("calmcache_websockets_total 2\n"),
        "{}",
        metrics.body
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_websocket_false_an_upgrade_is_a_plain_request() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .no_zone()
        .route("websocket = false")
        .start()
        .await;
    let handshake = [
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("sec-websocket-version", "13"),
    ];
    let reply = get_with(Method::GET, &proxy.url("/plain"), &handshake).await;
    assert_eq!(reply.status, 200);
    let seen = &origin.requests_for("/plain")[0];
    assert!(!seen.has_header("upgrade"), "{:?}", seen.headers);
    assert!(!seen.has_header("connection"), "{:?}", seen.headers);
    assert_eq!(websockets(&proxy).await, (0, 0));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_tunnels_at_once() {
    const TUNNELS: usize = 2000;
    // Each tunnel holds four descriptors in this process (client, both
    // proxy sides, server); start() raises the limit too.
    calmcache::raise_open_files_limit();
    let (server, seen) = echo_server().await;
    let proxy = proxy_for(server, "", "").await;
    let all = async {
        // Open them all (a few hundred handshakes in flight at a time, so
        // the listen backlogs never overflow), then talk on every one.
        let gate = Arc::new(tokio::sync::Semaphore::new(200));
        let mut opening = Vec::with_capacity(TUNNELS);
        for _ in 0..TUNNELS {
            let url = format!("ws://{}/many", proxy.host());
            let gate = gate.clone();
            opening.push(tokio::spawn(async move {
                let _permit = gate.acquire_owned().await.unwrap();
                let config = Some(ws_config());
                tokio_tungstenite::connect_async_with_config(url, config, true)
                    .await
                    .expect("handshake")
                    .0
            }));
        }
        let mut open = Vec::with_capacity(TUNNELS);
        for task in opening {
            open.push(task.await.unwrap());
        }
        wait_active(&proxy, TUNNELS as u64).await;
        let mut talking = Vec::with_capacity(TUNNELS);
        for (i, mut ws) in open.into_iter().enumerate() {
            talking.push(tokio::spawn(async move {
                let text = format!("tunnel {i}");
                ws.send(Message::text(text.clone())).await.unwrap();
                assert_eq!(next(&mut ws).await, Message::text(text));
                ws.close(None).await.unwrap();
                let _ = tokio::time::timeout(Duration::from_secs(10), ws.next()).await;
            }));
        }
        for task in talking {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("2,000 tunnels within 60 s");
    assert_eq!(seen.accepted.load(Ordering::SeqCst), TUNNELS);
    wait_active(&proxy, 0).await;
    assert_eq!(websockets(&proxy).await, (0, TUNNELS as u64));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_gets_an_access_log_line() {
    let (server, _seen) = echo_server().await;
    let dir = std::env::temp_dir().join(format!(
        "calmcache-it-ws-log-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let proxy = Proxy::with_upstream(server)
        .access_log(&path, "json")
        .start()
        .await;
    let mut ws = connect(&proxy, "/logged").await;
    ws.send(Message::text("x")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("x"));
    let line = wait_until(
        Duration::from_secs(5),
        "a line for the tunnel",
        async || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            text.lines()
                .find(|l| l.contains("/logged"))
                .map(str::to_owned)
        },
    )
    .await;
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["status"], 101, "{line}");
    assert_eq!(entry["bytes_sent"], 0, "{line}");
    assert_eq!(entry["cache_status"], "BYPASS", "{line}");
    assert_eq!(entry["upstream_addr"], server.to_string(), "{line}");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_proxy_gives_open_tunnels_the_shutdown_timeout_then_closes_them() {
    let (server, _seen) = echo_server().await;
    let proxy = proxy_for(server, "", "").await;
    let mut ws = connect(&proxy, "/").await;
    ws.send(Message::text("x")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("x"));
    let started = Instant::now();
    let stopping = tokio::spawn(proxy.stop_within(Duration::from_millis(1500)));
    // Within the grace the tunnel still carries messages both ways.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ws.send(Message::text("during")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("during"));
    // At the deadline it is closed, and the stop returns.
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    assert!(matches!(end, Ok(None | Some(Err(_)))), "{end:?}");
    let closed = started.elapsed();
    assert!(closed >= Duration::from_millis(1400), "{closed:?}");
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("stop returns after the deadline")
        .unwrap();
}

/// Echoes on `ws`, then waits for the proxy to close it when idle (its
/// read_timeout is 300 ms): the idle clock runs on this kind of listener.
async fn echo_then_idle<S>(mut ws: WebSocketStream<S>, what: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    for i in 0..3 {
        let text = format!("{what} {i}");
        ws.send(Message::text(text.clone())).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text(text), "{what}");
    }
    let large: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(large.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(large), "{what}");
    let quiet = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: the proxy closes an idle tunnel"));
    assert!(matches!(end, None | Some(Err(_))), "{what}: {end:?}");
    let after = quiet.elapsed();
    assert!(after >= Duration::from_millis(280), "{what}: {after:?}");
}

/// A proxy for `server` with an h2c plain listener and a TLS listener
/// (`localhost`, ALPN up to the client), its CA, and the temp dir to remove.
pub(crate) async fn tls_and_h2c_proxy(
    server: SocketAddr,
    upstream_keys: &str,
) -> (
    RunningProxy,
    calmcache_testkit::tls::TestCa,
    std::path::PathBuf,
) {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-it-ws-tls-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = calmcache_testkit::tls::TestCa::new(&dir);
    let leaf = ca.leaf("ws", &["localhost"]);
    // h2c on the plain listener: its connections are detected, so the
    // tunnel gets hyper's IO as it is; TLS: the tunnel takes the TLS
    // stream back out of hyper.
    let server_keys = format!(
        "h2c = true\ntls_listen = [\"127.0.0.1:0\"]\n[[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string()
    );
    let proxy = Proxy::with_upstream(server)
        .upstream(upstream_keys)
        .server(&server_keys)
        .start()
        .await;
    (proxy, ca, dir)
}

/// An HTTP/1.1 TLS connection to `proxy`'s TLS listener.
async fn tls_to(
    proxy: &RunningProxy,
    ca: &calmcache_testkit::tls::TestCa,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(proxy.tls_addr()).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(ca.client(&[b"http/1.1"]))
        .connect(name, tcp)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnels_on_tls_and_h2c_listeners_echo_and_close_when_idle() {
    let (server, seen) = echo_server().await;
    let (proxy, ca, dir) = tls_and_h2c_proxy(server, "read_timeout = \"300ms\"").await;
    let plain = connect(&proxy, "/h2c-listener").await;
    let tls = tls_to(&proxy, &ca).await;
    let handshake = tokio_tungstenite::client_async_with_config(
        "wss://localhost/tls-listener",
        tls,
        Some(ws_config()),
    );
    let (secure, resp) = tokio::time::timeout(Duration::from_secs(10), handshake)
        .await
        .expect("handshake in time")
        .expect("handshake over TLS");
    assert_eq!(resp.status(), 101);
    wait_active(&proxy, 2).await;
    tokio::join!(
        echo_then_idle(plain, "h2c listener"),
        echo_then_idle(secure, "TLS listener"),
    );
    wait_active(&proxy, 0).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_sent_right_behind_the_handshake_go_through_first() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, _seen) = echo_server().await;
    let proxy = proxy_for(server, "", "").await;
    let mut tcp = TcpStream::connect(proxy.host()).await.unwrap();
    // The handshake and two masked text frames in one write: hyper reads
    // the frames with the head, and the tunnel must pass them on.
    let mut bytes = format!(
        "GET /eager HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        proxy.host()
    )
    .into_bytes();
    let mask = [0x11u8, 0x22, 0x33, 0x44];
    for text in [&b"early"[..], &b"bird"[..]] {
        bytes.extend_from_slice(&[0x81, 0x80 | text.len() as u8]);
        bytes.extend_from_slice(&mask);
        bytes.extend(text.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    }
    tcp.write_all(&bytes).await.unwrap();
    // The 101, then the two echoes (unmasked), in order.
    let want: &[u8] = b"\x81\x05early\x81\x04bird";
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let body = got
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|at| &got[at + 4..]);
        if body.is_some_and(|b| b.len() >= want.len()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(got.starts_with(b"HTTP/1.1 101"), "{got:?}");
    assert_eq!(&got[at + 4..], want);
    proxy.stop().await;
}

/// A hand-written origin on 127.0.0.1:0 that reads one request head per
/// connection and, by path: `/close` closes without an answer, `/refuse`
/// answers 403 with a body, `/switch` answers this key's 101 with a text
/// frame "hello" in the same write (then holds the connection until EOF).
async fn raw_origin() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                let key = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("sec-websocket-key")
                            .then(|| value.trim().to_owned())
                    })
                    .unwrap_or_default();
                let reply = match path.as_str() {
                    "/refuse" => b"HTTP/1.1 403 Forbidden\r\nContent-Length: 19\r\n\
                                   X-Refused-By: raw\r\n\r\nno websockets, raw\n"
                        .to_vec(),
                    "/switch" => {
                        let accept = calmcache::websocket_accept(key.as_bytes());
                        let mut r = format!(
                            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                             Upgrade: websocket\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                        )
                        .into_bytes();
                        r.extend_from_slice(b"\x81\x05hello");
                        r
                    }
                    _ => return, // `/close`: dropped unanswered
                };
                if tcp.write_all(&reply).await.is_err() {
                    return;
                }
                while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// Sends a WebSocket handshake for `path` on `io` and reads until `done`
/// says the bytes so far are enough (or the connection ends, 5 s at most).
async fn raw_handshake<S>(mut io: S, path: &str, done: impl Fn(&[u8]) -> bool) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    io.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done(&got) {
        match tokio::time::timeout_at(deadline, io.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    got
}

/// The same handshake on `both`'s h2c-detecting and TLS listeners and on
/// `plain`'s plain HTTP/1.1 listener: what each read.
async fn on_every_listener(
    (both, ca): (&RunningProxy, &calmcache_testkit::tls::TestCa),
    plain: &RunningProxy,
    path: &str,
    done: impl Fn(&[u8]) -> bool + Copy,
) -> [Vec<u8>; 3] {
    let h2c = TcpStream::connect(both.host()).await.unwrap();
    let tls = tls_to(both, ca).await;
    let direct = TcpStream::connect(plain.host()).await.unwrap();
    [
        raw_handshake(h2c, path, done).await,
        raw_handshake(tls, path, done).await,
        raw_handshake(direct, path, done).await,
    ]
}

fn has_head(got: &[u8]) -> bool {
    got.windows(4).any(|w| w == b"\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_switches_refuses_or_closes_early_is_answered_on_every_listener() {
    let origin = raw_origin().await;
    let (proxy, ca, dir) = tls_and_h2c_proxy(origin, "").await;
    let plain = proxy_for(origin, "", "").await;

    // Bytes the origin sent right behind its 101 reach the client first.
    let hello = |got: &[u8]| got.ends_with(b"\x81\x05hello");
    let all = on_every_listener((&proxy, &ca), &plain, "/switch", hello).await;
    for got in &all {
        let text = String::from_utf8_lossy(got);
        assert!(got.starts_with(b"HTTP/1.1 101"), "{text}");
        assert!(hello(got), "{text}");
    }

    // A refusal is passed back with its body (read over the connection
    // the proxy keeps driving for it).
    let body = |got: &[u8]| got.ends_with(b"no websockets, raw\n");
    let all = on_every_listener((&proxy, &ca), &plain, "/refuse", body).await;
    for got in &all {
        let text = String::from_utf8_lossy(got).to_ascii_lowercase();
        assert!(text.starts_with("http/1.1 403"), "{text}");
        assert!(text.contains("x-refused-by: raw"), "{text}");
        assert!(body(got), "{text}");
    }

    // An origin that closes before it answers: 502, no tunnel.
    let all = on_every_listener((&proxy, &ca), &plain, "/close", has_head).await;
    for got in &all {
        let text = String::from_utf8_lossy(got);
        assert!(got.starts_with(b"HTTP/1.1 502"), "{text}");
    }
    // Only the switched handshakes opened tunnels.
    assert_eq!(websockets(&proxy).await.1, 2);
    assert_eq!(websockets(&plain).await.1, 1);
    plain.stop().await;
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tunnel of an HTTP/1.1 connection is handed to that connection's task
/// (issue 29): a client gone before or while its 101 goes out leaves no
/// tunnel counted and no connection open, on plain and TLS listeners
/// (the handed tunnel finds no upgrade and lets its places go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_during_its_handshake_leaves_no_tunnel_open() {
    use tokio::io::AsyncWriteExt;
    let origin = raw_origin().await;
    let (proxy, ca, dir) = tls_and_h2c_proxy(origin, "").await;
    let plain = proxy_for(origin, "", "").await;
    let head = "GET /switch HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\n\
                Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                Sec-WebSocket-Version: 13\r\n\r\n";
    for _ in 0..10 {
        let mut tcp = TcpStream::connect(plain.host()).await.unwrap();
        tcp.write_all(head.as_bytes()).await.unwrap();
        drop(tcp);
        let mut tls = tls_to(&proxy, &ca).await;
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        drop(tls);
    }
    for p in [&plain, &proxy] {
        wait_active(p, 0).await;
        wait_until(Duration::from_secs(10), "no connection open", async || {
            p.status().await["connections"]["active"].as_u64() == Some(0)
        })
        .await;
    }
    // Both listeners still open tunnels that work.
    let hello = |got: &[u8]| got.ends_with(b"\x81\x05hello");
    let all = on_every_listener((&proxy, &ca), &plain, "/switch", hello).await;
    for got in &all {
        assert!(hello(got), "{}", String::from_utf8_lossy(got));
    }
    proxy.stop().await;
    plain.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_cannot_be_reached_gets_a_502_on_every_listener() {
    // A port that was just free: nothing listens there.
    let gone = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let (proxy, ca, dir) = tls_and_h2c_proxy(gone, "").await;
    let plain = proxy_for(gone, "", "").await;
    let all = on_every_listener((&proxy, &ca), &plain, "/", has_head).await;
    for got in &all {
        let text = String::from_utf8_lossy(got);
        assert!(got.starts_with(b"HTTP/1.1 502"), "{text}");
    }
    let status = proxy.status().await;
    assert_eq!(status["websockets"]["total"].as_u64(), Some(0), "{status}");
    plain.stop().await;
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The origin budget (`max_inflight`, issue 27): a handshake takes an
/// origin slot while it waits for the server, and gives it back at the
/// 101: an open tunnel is not a request in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_holds_an_origin_slot_until_its_101_only() {
    let budget = "max_inflight = 1\nqueue_timeout = \"2s\"";
    let (server, _seen) = echo_server().await;
    let proxy = proxy_for(server, budget, "").await;
    let inflight = async |proxy: &RunningProxy| {
        let status = proxy.status().await;
        status["upstreams"]["origin"]["budget"]["inflight"]
            .as_u64()
            .unwrap()
    };
    // One slot, three tunnels open at once: each handshake got it back.
    let mut tunnels = Vec::new();
    for i in 0..3 {
        let mut ws = connect(&proxy, &format!("/t{i}")).await;
        ws.send(Message::text("hi")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("hi"));
        tunnels.push(ws);
    }
    assert_eq!(inflight(&proxy).await, 0, "open tunnels hold no slot");
    drop(tunnels);
    proxy.stop().await;
    // A server that accepts and never answers: the handshake holds the
    // slot while it waits, and gives it back when its client leaves (or,
    // at the latest, at read_timeout).
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let keys = format!("{budget}\nread_timeout = \"3s\"");
    let proxy = proxy_for(silent.local_addr().unwrap(), &keys, "").await;
    let url = format!("ws://{}/wait", proxy.host());
    let waiting = tokio::spawn(tokio_tungstenite::connect_async(url));
    let (_held, _) = silent.accept().await.unwrap();
    wait_until(
        Duration::from_secs(10),
        "the handshake's slot",
        async || inflight(&proxy).await == 1,
    )
    .await;
    waiting.abort();
    wait_until(Duration::from_secs(10), "the slot given back", async || {
        inflight(&proxy).await == 0
    })
    .await;
    proxy.stop().await;
}

/// Issue 28: a route's `request_headers` reach the upstream on a WebSocket
/// handshake too (NGINX's proxy_set_header on an upgraded location).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_rules_reach_the_upstream_on_the_handshake() {
    let (server, seen) = echo_server().await;
    let rules =
        "request_headers = { set = { Host = \"ws.internal\", \"X-Real-IP\" = \"$remote_addr\" } }";
    let proxy = proxy_for(server, "", rules).await;
    let mut ws = connect(&proxy, "/rules").await;
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("hi"));
    let headers = seen.headers.lock().unwrap().clone().unwrap();
    assert_eq!(headers["host"], "ws.internal", "{headers:?}");
    assert_eq!(headers["x-real-ip"], "127.0.0.1", "{headers:?}");
    assert_eq!(
        headers["upgrade"], "websocket",
        "the handshake itself untouched"
    );
    proxy.stop().await;
}
