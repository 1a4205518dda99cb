//! WebSocket over HTTP/2 (RFC 8441, issue 28 item 10): a client built on
//! the `h2` crate opens WebSockets by extended CONNECT on h2c and on TLS
//! (ALPN h2) connections, and tungstenite speaks WebSocket over the stream.
//! The same transparency checks as the HTTP/1.1 tunnels (websocket.rs):
//! text, binary and large messages, the close handshake both ways, the idle
//! timeout, many tunnels on one connection, a tunnel whose client stops
//! reading not stalling the others (flow control), the shutdown deadline;
//! the handshake's fields end to end and the route's request header rules;
//! every refusal's status; the access log's protocol. And headless
//! Chromium opening `wss://` on its page's HTTP/2 connection.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::Proxy;
use futures_util::{SinkExt, StreamExt};
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http::{Method, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::wait_until;
use crate::websocket::{echo_server, next, wait_active, websockets, ws_config};

/// A proxy for `server` with an h2c plain listener and a TLS listener for
/// `localhost`, its CA and its scratch directory.
async fn start(
    server: SocketAddr,
    upstream_keys: &str,
    route_keys: &str,
) -> (
    RunningProxy,
    calmcache_testkit::tls::TestCa,
    std::path::PathBuf,
) {
    let (dir, ca, _, tls_keys) = tls_scratch("ws-h2");
    let server_keys = format!("h2c = true\n{tls_keys}");
    let proxy = Proxy::with_upstream(server)
        .upstream(upstream_keys)
        .route(route_keys)
        .server(&server_keys)
        .access_log(&dir.join("access.log"), "json")
        .start()
        .await;
    (proxy, ca, dir)
}

/// A scratch directory, a CA and its leaf for `localhost`, and the
/// `[server]` keys of a TLS listener that serves the leaf.
fn tls_scratch(
    name: &str,
) -> (
    std::path::PathBuf,
    calmcache_testkit::tls::TestCa,
    calmcache_testkit::tls::Leaf,
    String,
) {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-it-{name}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = calmcache_testkit::tls::TestCa::new(&dir);
    let leaf = ca.leaf("ws", &["localhost"]);
    let keys = format!(
        "tls_listen = [\"127.0.0.1:0\"]\n[[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string()
    );
    (dir, ca, leaf, keys)
}

/// Which of the proxy's listeners a connection goes to.
#[derive(Clone, Copy, Debug)]
enum Over {
    /// The plain listener, prior-knowledge HTTP/2 (h2c).
    H2c,
    /// The TLS listener, ALPN h2.
    Tls,
}

/// One HTTP/2 connection to the proxy, as a browser opens it: a small
/// stream window (64 KiB), a large connection window (so one stream the
/// client does not read leaves room for the others, as Chromium's 15 MB).
/// Returns once the proxy's SETTINGS enabled the extended CONNECT.
async fn h2_to(
    proxy: &RunningProxy,
    ca: &calmcache_testkit::tls::TestCa,
    over: Over,
) -> SendRequest<Bytes> {
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(64 * 1024)
        .initial_connection_window_size(16 * 1024 * 1024);
    let client = match over {
        Over::H2c => {
            let tcp = TcpStream::connect(proxy.host()).await.unwrap();
            let (client, conn) = builder.handshake(tcp).await.unwrap();
            tokio::spawn(conn);
            client
        }
        Over::Tls => {
            let tcp = TcpStream::connect(proxy.tls_addr()).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let tls = tokio_rustls::TlsConnector::from(ca.client(&[b"h2"]))
                .connect(name, tcp)
                .await
                .unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
            let (client, conn) = builder.handshake(tls).await.unwrap();
            tokio::spawn(conn);
            client
        }
    };
    let client = client.ready().await.unwrap();
    // RFC 8441 §3: the server's SETTINGS_ENABLE_CONNECT_PROTOCOL.
    wait_until(Duration::from_secs(5), "the extended CONNECT", async || {
        client.is_extended_connect_protocol_enabled()
    })
    .await;
    client
}

/// Sends an extended CONNECT for `path` (`protocol` as `:protocol`, none
/// for a plain CONNECT) with `fields`; the answer's head and the stream.
async fn connect_h2(
    client: &SendRequest<Bytes>,
    path: &str,
    protocol: Option<&'static str>,
    fields: &[(&str, &str)],
) -> (http::response::Parts, H2Io) {
    let uri = match protocol {
        Some(_) => format!("https://localhost{path}"),
        None => "localhost:443".to_owned(),
    };
    let mut req = http::Request::builder().method(Method::CONNECT).uri(uri);
    for (name, value) in fields {
        req = req.header(*name, *value);
    }
    let mut req = req.body(()).unwrap();
    if let Some(p) = protocol {
        req.extensions_mut()
            .insert(h2::ext::Protocol::from_static(p));
    }
    let mut client = client.clone().ready().await.unwrap();
    let (resp, send) = client.send_request(req, false).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("an answer in time")
        .expect("an answer");
    let (parts, recv) = resp.into_parts();
    let io = H2Io {
        send,
        recv,
        buf: Bytes::new(),
    };
    (parts, io)
}

/// A WebSocket over an extended CONNECT for `path` (RFC 8441 §5).
async fn open(client: &SendRequest<Bytes>, path: &str) -> WebSocketStream<H2Io> {
    let fields = [("sec-websocket-version", "13")];
    let (head, io) = connect_h2(client, path, Some("websocket"), &fields).await;
    assert_eq!(head.status, StatusCode::OK, "{head:?}");
    WebSocketStream::from_raw_socket(io, Role::Client, Some(ws_config())).await
}

/// An HTTP/2 stream as a byte stream (the client's side of the tunnel).
struct H2Io {
    send: SendStream<Bytes>,
    recv: RecvStream,
    /// Received, not yet read.
    buf: Bytes,
}

impl AsyncRead for H2Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.buf.is_empty() {
            match std::task::ready!(self.recv.poll_data(cx)) {
                None => return Poll::Ready(Ok(())),
                Some(Ok(data)) => self.buf = data,
                Some(Err(e)) => return Poll::Ready(Err(std::io::Error::other(e))),
            }
        }
        let n = self.buf.len().min(out.remaining());
        out.put_slice(&self.buf[..n]);
        self.buf.advance(n);
        // Read: the window opens again (the stream's and the connection's).
        let _ = self.recv.flow_control().release_capacity(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Io {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.send.reserve_capacity(buf.len());
        let room = match std::task::ready!(self.send.poll_capacity(cx)) {
            Some(Ok(room)) => room,
            Some(Err(e)) => return Poll::Ready(Err(std::io::Error::other(e))),
            None => return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        };
        let n = room.min(buf.len());
        let data = Bytes::copy_from_slice(&buf[..n]);
        self.send
            .send_data(data, false)
            .map_err(std::io::Error::other)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let _ = self.send.send_data(Bytes::new(), true);
        Poll::Ready(Ok(()))
    }
}

/// The access log's lines for `path`, once there are `want` of them.
async fn logged(dir: &std::path::Path, path: &str, want: usize) -> Vec<serde_json::Value> {
    let file = dir.join("access.log");
    wait_until(Duration::from_secs(5), "access log lines", async || {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter(|l| l.contains(path))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines.len() >= want).then_some(lines)
    })
    .await
}

/// Echoes text, binary and a 2 MB message on `ws`, closes it from the
/// client's side, and checks the origin saw the close.
async fn echo_and_close(mut ws: WebSocketStream<H2Io>, what: &str) {
    for i in 0..3 {
        let text = format!("{what} {i}");
        ws.send(Message::text(text.clone())).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text(text), "{what}");
    }
    let binary: Vec<u8> = (0..=255u8).collect();
    ws.send(Message::binary(binary.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(binary), "{what}");
    let large: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(large.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(large), "{what}");
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: what.to_owned().into(),
    };
    ws.send(Message::Close(Some(frame))).await.unwrap();
    // The origin's reply to the close, then the end of the stream.
    let reply = next(&mut ws).await;
    assert!(matches!(reply, Message::Close(_)), "{what}: {reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_over_h2c_and_tls_echo_and_close_end_to_end() {
    let (server, seen) = echo_server().await;
    let (proxy, ca, dir) = start(server, "", "").await;
    let h2c = h2_to(&proxy, &ca, Over::H2c).await;
    let tls = h2_to(&proxy, &ca, Over::Tls).await;
    let (a, b) = tokio::join!(open(&h2c, "/over-h2c"), open(&tls, "/over-tls"));
    wait_active(&proxy, 2).await;
    tokio::join!(echo_and_close(a, "h2c"), echo_and_close(b, "tls"));
    wait_active(&proxy, 0).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    let mut closes = seen.closes.lock().unwrap().clone();
    closes.sort();
    assert_eq!(closes, [(1000, "h2c".to_owned()), (1000, "tls".to_owned())]);
    // The origin closes: the client gets its close frame.
    let mut ws = open(&tls, "/origin-closes").await;
    ws.send(Message::text("close-me")).await.unwrap();
    match next(&mut ws).await {
        Message::Close(Some(f)) => {
            assert_eq!((u16::from(f.code), f.reason.as_str()), (4000, "done"))
        }
        other => panic!("{other:?}"),
    }
    // Reading on sends the client's reply; then the stream ends.
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    assert!(matches!(end, Ok(None | Some(Err(_)))), "{end:?}");
    wait_active(&proxy, 0).await;
    // The access log: HTTP/2, CONNECT, 200, never cached.
    for path in ["/over-h2c", "/over-tls"] {
        let line = &logged(&dir, path, 1).await[0];
        assert_eq!(line["protocol"], "HTTP/2.0", "{line}");
        assert_eq!(line["method"], "CONNECT", "{line}");
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(line["cache_status"], "BYPASS", "{line}");
    }
    assert_eq!(websockets(&proxy).await, (0, 3));
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_fields_pass_end_to_end_and_the_key_is_calmcaches() {
    let (server, seen) = echo_server().await;
    let (proxy, ca, dir) = start(server, "", "").await;
    let client = h2_to(&proxy, &ca, Over::H2c).await;
    let fields = [
        ("sec-websocket-version", "13"),
        ("sec-websocket-protocol", "chat, superchat"),
        ("sec-websocket-extensions", "x-unknown"),
        ("origin", "https://localhost"),
    ];
    let (head, io) = connect_h2(&client, "/fields?room=1", Some("websocket"), &fields).await;
    assert_eq!(head.status, StatusCode::OK, "{head:?}");
    // RFC 8441 §5: no Accept (the key was calmcache's), no hop-by-hop.
    for name in ["sec-websocket-accept", "upgrade", "connection"] {
        assert!(!head.headers.contains_key(name), "{name}: {head:?}");
    }
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Client, Some(ws_config())).await;
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("hi"));
    let got = seen.headers.lock().unwrap().clone().unwrap();
    for (name, value) in [
        ("sec-websocket-version", "13"),
        ("sec-websocket-protocol", "chat, superchat"),
        ("sec-websocket-extensions", "x-unknown"),
        ("origin", "https://localhost"),
        ("upgrade", "websocket"),
        ("connection", "upgrade"),
        ("host", "localhost"),
    ] {
        let all: Vec<_> = got.get_all(name).iter().collect();
        assert_eq!(all, [value], "{name}: {got:?}");
    }
    // A fresh 16-byte key in base64 (RFC 6455 §4.1), one per handshake.
    let key = got["sec-websocket-key"].to_str().unwrap().to_owned();
    assert_eq!(key.len(), 24, "{key}");
    let _second = open(&client, "/fields").await;
    let again = seen.headers.lock().unwrap().clone().unwrap();
    assert_ne!(again["sec-websocket-key"], key);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_h2_tunnel_is_closed_after_read_timeout() {
    let (server, _seen) = echo_server().await;
    let (proxy, ca, dir) = start(server, "read_timeout = \"300ms\"", "").await;
    for over in [Over::H2c, Over::Tls] {
        let client = h2_to(&proxy, &ca, over).await;
        let mut ws = open(&client, "/idle").await;
        ws.send(Message::text("x")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("x"));
        let end = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap_or_else(|_| panic!("{over:?}: the proxy closes an idle tunnel"));
        assert!(matches!(end, None | Some(Err(_))), "{over:?}: {end:?}");
        wait_active(&proxy, 0).await;
        // The connection lives on: another stream on it works.
        let mut ws = open(&client, "/after-idle").await;
        ws.send(Message::text("y")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("y"), "{over:?}");
    }
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tunnels_share_one_connection_and_a_stalled_reader_stalls_only_itself() {
    let (server, seen) = echo_server().await;
    let (proxy, ca, dir) = start(server, "", "").await;
    let client = h2_to(&proxy, &ca, Over::Tls).await;
    // A tunnel whose client never reads: 1 MB echoed back at it stays
    // behind its 64 KiB stream window.
    let mut stalled = open(&client, "/stalled").await;
    let chunk = vec![7u8; 64 * 1024];
    for _ in 0..16 {
        stalled.send(Message::binary(chunk.clone())).await.unwrap();
    }
    // 50 more tunnels on the same connection echo meanwhile.
    let tunnels = futures_util::future::join_all((0..50).map(|_| open(&client, "/many"))).await;
    wait_active(&proxy, 51).await;
    let echoes = tunnels
        .into_iter()
        .enumerate()
        .map(|(i, mut ws)| async move {
            for round in 0..3 {
                let text = format!("{i}.{round}");
                ws.send(Message::text(text.clone())).await.unwrap();
                assert_eq!(next(&mut ws).await, Message::text(text));
            }
            ws.close(None).await.unwrap();
        });
    futures_util::future::join_all(echoes).await;
    wait_active(&proxy, 1).await;
    // The stalled one still holds all its bytes: reading now gets them.
    for _ in 0..16 {
        assert_eq!(next(&mut stalled).await, Message::binary(chunk.clone()));
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 51);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_handshakes_get_their_status_on_both_h2_listeners() {
    let (server, seen) = echo_server().await;
    let (proxy, ca, dir) = start(server, "", "").await;
    for over in [Over::H2c, Over::Tls] {
        let client = h2_to(&proxy, &ca, over).await;
        let version: &'static [(&str, &str)] = &[("sec-websocket-version", "13")];
        // The origin refuses: its status, fields and body, never cached.
        for _ in 0..2 {
            let (head, mut io) = connect_h2(&client, "/refuse", Some("websocket"), version).await;
            assert_eq!(head.status, StatusCode::FORBIDDEN, "{over:?}");
            assert_eq!(head.headers["x-refused-by"], "echo");
            assert_eq!(body(&mut io).await, "no websockets here\n");
        }
        let refusals: [Refusal; 3] = [
            // RFC 8441 §4: calmcache tunnels websocket only.
            (Some("webtransport"), version, StatusCode::NOT_IMPLEMENTED),
            // RFC 6455 §4.1: the version is required.
            (Some("websocket"), &[], StatusCode::BAD_REQUEST),
            // A plain CONNECT keeps its answer (not a path).
            (None, version, StatusCode::BAD_REQUEST),
        ];
        for (protocol, fields, want) in refusals {
            let (head, _) = connect_h2(&client, "/ws", protocol, fields).await;
            assert_eq!(head.status, want, "{over:?} {protocol:?} {fields:?}");
        }
        // The connection is still good.
        let mut ws = open(&client, "/still").await;
        ws.send(Message::text("ok")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("ok"));
    }
    assert_eq!(seen.refused.load(Ordering::SeqCst), 4);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A handshake calmcache refuses: its `:protocol`, fields, and status.
type Refusal = (
    Option<&'static str>,
    &'static [(&'static str, &'static str)],
    StatusCode,
);

/// The body of a refusal, read whole.
async fn body(io: &mut H2Io) -> String {
    use tokio::io::AsyncReadExt;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), io.read_to_string(&mut text))
        .await
        .expect("the body in time")
        .expect("the body");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_websocket_refuses_an_h2_handshake_with_403() {
    let (server, seen) = echo_server().await;
    let (proxy, ca, dir) = start(server, "", "websocket = false").await;
    for over in [Over::H2c, Over::Tls] {
        let client = h2_to(&proxy, &ca, over).await;
        let version = [("sec-websocket-version", "13")];
        let (head, _) = connect_h2(&client, "/off", Some("websocket"), &version).await;
        assert_eq!(head.status, StatusCode::FORBIDDEN, "{over:?}");
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 0);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_is_no_websocket_server_or_is_down_gets_502() {
    // An HTTP origin that answers the handshake with a 200: a 2xx would
    // open the client's stream, so the client gets a 502.
    let origin = calmcache_testkit::Origin::start().await;
    let (proxy, ca, dir) = start(origin.addr(), "", "").await;
    let client = h2_to(&proxy, &ca, Over::H2c).await;
    let version = [("sec-websocket-version", "13")];
    let (head, _) = connect_h2(&client, "/plain", Some("websocket"), &version).await;
    assert_eq!(head.status, StatusCode::BAD_GATEWAY, "{head:?}");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    // Nothing listens there.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    let (proxy, ca, dir) = start(addr, "", "").await;
    let client = h2_to(&proxy, &ca, Over::Tls).await;
    let (head, _) = connect_h2(&client, "/down", Some("websocket"), &version).await;
    assert_eq!(head.status, StatusCode::BAD_GATEWAY, "{head:?}");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The page Chromium loads: it opens `wss://<same origin>/ws`, sends a
/// message, logs the echo and closes. One line (a TOML inline table), no
/// `$` (route bodies expand variables).
const PAGE: &str = "<!doctype html><title>ws</title><script>\
    const ws = new WebSocket('wss://' + location.host + '/ws');\
    ws.onopen = () => ws.send('hello over h2');\
    ws.onmessage = (e) => { console.log('WSECHO ' + e.data); ws.close(1000, 'bye'); };\
    ws.onerror = () => console.log('WSERROR');\
    ws.onclose = (e) => console.log('WSCLOSE ' + e.code);\
    </script>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_opens_a_websocket_over_http2_through_the_proxy() {
    let (server, seen) = echo_server().await;
    let (dir, _ca, leaf, server_keys) = tls_scratch("ws-h2-chromium");
    // The page answers itself; /ws goes to the echo server.
    let page = format!(
        "[[routes]]\nname = \"page\"\n\
         return = {{ status = 200, content_type = \"text/html\", body = \"{PAGE}\" }}\n"
    );
    let proxy = Proxy::with_upstream(server)
        .route("path = \"^/ws$\"")
        .server(&server_keys)
        .access_log(&dir.join("access.log"), "json")
        .tables(&page)
        .start()
        .await;
    let url = format!("https://localhost:{}/", proxy.tls_addr().port());
    let spki = crate::early_hints::spki_hash(&leaf);
    let extra = [format!("--ignore-certificate-errors-spki-list={spki}")];
    // Headless Chromium's virtual time may run out before the socket opens
    // on a loaded machine: up to 3 loads (a broken tunnel fails them all).
    let mut failures = Vec::new();
    for _ in 0..3 {
        let run = crate::dashboard::chromium(&url, 10_000, &extra).await;
        let console = run.console.join("\n");
        if console.contains("WSECHO hello over h2") {
            break;
        }
        failures.push(format!("{console}\n{}", run.stderr));
    }
    assert!(failures.len() < 3, "{failures:#?}");
    // The origin got the message and the page's close.
    assert!(seen.accepted.load(Ordering::SeqCst) >= 1);
    wait_until(Duration::from_secs(5), "the page's close", async || {
        seen.closes
            .lock()
            .unwrap()
            .contains(&(1000, "bye".to_owned()))
    })
    .await;
    // Over HTTP/2: an extended CONNECT answered 200, not an HTTP/1.1 101.
    let line = &logged(&dir, "/ws", 1).await[0];
    assert_eq!(line["protocol"], "HTTP/2.0", "{line}");
    assert_eq!(line["method"], "CONNECT", "{line}");
    assert_eq!(line["status"], 200, "{line}");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_proxy_gives_h2_tunnels_the_shutdown_timeout_then_closes_them() {
    let (server, _seen) = echo_server().await;
    let (proxy, ca, dir) = start(server, "", "").await;
    let client = h2_to(&proxy, &ca, Over::Tls).await;
    let mut ws = open(&client, "/stopping").await;
    ws.send(Message::text("x")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("x"));
    let started = std::time::Instant::now();
    let stopping = tokio::spawn(proxy.stop_within(Duration::from_millis(1500)));
    // Within the grace the tunnel still carries messages both ways (time
    // is the subject here).
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
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_rules_reach_the_upstream_on_an_h2_handshake() {
    let (server, seen) = echo_server().await;
    let rules =
        "request_headers = { set = { Host = \"ws.internal\", \"X-Real-IP\" = \"$remote_addr\" } }";
    let (proxy, ca, dir) = start(server, "", rules).await;
    for over in [Over::H2c, Over::Tls] {
        let client = h2_to(&proxy, &ca, over).await;
        let mut ws = open(&client, "/rules").await;
        ws.send(Message::text("hi")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("hi"));
        let headers = seen.headers.lock().unwrap().clone().unwrap();
        assert_eq!(headers["host"], "ws.internal", "{over:?} {headers:?}");
        assert_eq!(headers["x-real-ip"], "127.0.0.1", "{over:?} {headers:?}");
        assert_eq!(headers["upgrade"], "websocket", "the handshake untouched");
    }
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
