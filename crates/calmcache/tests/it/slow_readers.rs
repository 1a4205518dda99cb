//! Slow readers cannot hold the proxy (issue 12, item 4): clients that ask
//! for a cached 1 MB object and never read it are cut after `send_timeout`
//! (HTTP/1.1 plain and TLS, h2c and HTTP/2 over TLS with the connection
//! stalled), new clients are served meanwhile, and `/status` counts the
//! cuts; an HTTP/2 stream stuck on a zero window is reset while another
//! stream of the same connection is served; keepalive PINGs keep a
//! connection that answers them and close one that does not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::raw::h2::{code, flag, frame, pseudo, H2Conn, PREFACE};
use calmcache_testkit::tls::TestCa;
use calmcache_testkit::{get, Origin, Proxy};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::wait_until;

/// Slow HTTP/1.1 clients over plain TCP.
const SLOW_PLAIN: usize = 300;
/// Slow clients of each other kind (TLS HTTP/1.1, h2c, HTTP/2 over TLS).
const SLOW_OTHER: usize = 4;
/// The cached object.
const BIG: usize = 1_000_000;

/// TLS keys for a listener with one certificate for `localhost`.
fn tls_keys(dir: &std::path::Path) -> (String, Arc<rustls::ClientConfig>, TestCa) {
    let ca = TestCa::new(dir);
    let leaf = ca.leaf("slow", &["localhost"]);
    let keys = format!(
        "tls_listen = [\"127.0.0.1:0\"]\n[[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string()
    );
    let h1 = ca.client(&[b"http/1.1"]);
    (keys, h1, ca)
}

/// A TCP connection with a small receive buffer and a small segment size,
/// so that the proxy's writes stall after a few KiB. (On loopback the
/// segment is 64 KiB and the kernel grows the proxy's send buffer to
/// twenty of them: a whole 1 MB answer would fit, and no write would wait.)
pub(crate) async fn tight_connect(addr: std::net::SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.set_mss(536).unwrap();
    socket.set_nonblocking(true).unwrap();
    let socket = TcpSocket::from_std_stream(socket.into());
    tokio::time::timeout(Duration::from_secs(5), socket.connect(addr))
        .await
        .expect("connect in time")
        .unwrap()
}

fn big_request(host: &str) -> String {
    format!("GET /big HTTP/1.1\r\nHost: {host}\r\n\r\n")
}

/// Stores `/big` (1 MB) under both keys the clients use: plain HTTP on
/// the proxy's address, and TLS for `localhost` (the scheme is in the key).
async fn store_big(proxy: &RunningProxy, tls: Arc<rustls::ClientConfig>) {
    let body_bytes = BIG.to_string();
    let headers = [("x-origin-body-bytes", body_bytes.as_str())];
    let first = calmcache_testkit::get_with(http::Method::GET, &proxy.url("/big"), &headers).await;
    assert_eq!(first.body.len(), BIG);
    let hit = get(&proxy.url("/big")).await;
    assert!(hit.cache_status().contains("hit"), "{}", hit.cache_status());
    assert_eq!(hit.body.len(), BIG);
    for round in ["miss", "hit"] {
        let tcp = TcpStream::connect(proxy.tls_addr()).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let connector = tokio_rustls::TlsConnector::from(tls.clone());
        let mut s = connector.connect(name, tcp).await.unwrap();
        let request = format!(
            "GET /big HTTP/1.1\r\nHost: localhost\r\nx-origin-body-bytes: {BIG}\r\n\
             Connection: close\r\n\r\n"
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
        // A close without TLS close_notify is an error once everything came.
        let _ = read.expect("the TLS answer in time");
        assert!(
            answer.len() > BIG,
            "{round}: {} bytes over TLS",
            answer.len()
        );
    }
}

/// Reads what the proxy sent until it closes (EOF or reset): the bytes
/// read, or `None` when the connection is still open after `limit`.
async fn read_to_close<S: AsyncRead + Unpin>(stream: &mut S, limit: Duration) -> Option<usize> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut total = 0;
    let mut buf = vec![0u8; 64 * 1024];
    // Bounded by the deadline: each round reads or ends.
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(total),
            Ok(Ok(n)) => total += n,
        }
    }
}

/// `/status` `connections` field `name`.
async fn connections(proxy: &RunningProxy, name: &str) -> u64 {
    proxy.status().await["connections"][name].as_u64().unwrap()
}

/// Waits until `connections.send_timeouts` reaches `want`; the count then.
async fn wait_for_cuts(proxy: &RunningProxy, want: u64, limit: Duration) -> u64 {
    let what = format!("{want} send_timeouts");
    wait_until(limit, &what, async || {
        let cuts = connections(proxy, "send_timeouts").await;
        (cuts >= want).then_some(cuts)
    })
    .await
}

/// An h2c or TLS HTTP/2 client that opens a large window, asks for `/big`
/// and then never reads: the proxy's writes stall on the connection.
async fn h2_slow(conn: &mut H2Conn, authority: &str) {
    // SETTINGS_INITIAL_WINDOW_SIZE 16 MiB and as much for the connection:
    // flow control never stops the proxy, the socket does.
    assert!(conn.settings(&[(0x4, 16 << 20)]).await);
    assert!(conn.window_update(0, 16 << 20).await);
    let stream = conn.next_stream();
    assert!(
        conn.headers(stream, &pseudo("GET", "/big", authority), true)
            .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_are_cut_after_send_timeout_and_others_are_served() {
    let started = Instant::now();
    let origin = Origin::start().await;
    let dir = crate::scratch("slow-readers");
    let (tls, h1_tls, ca) = tls_keys(&dir);
    let slots = SLOW_PLAIN + 3 * SLOW_OTHER + 20;
    let proxy = Proxy::new(&origin)
        .zone("64MiB", "2MiB")
        .route("ttl = { 200 = \"60s\" }")
        .server(&format!(
            "send_timeout = \"1s\"\nmax_connections = {slots}\nh2c = true\n{tls}"
        ))
        .start()
        .await;
    let addr = proxy.running().proxy_addrs[0];
    let host = proxy.host();
    // The object, cached (1 MB).
    let url = proxy.url("/big");
    store_big(&proxy, h1_tls.clone()).await;

    // 300 plain HTTP/1.1 clients ask for it and never read.
    let first_slow = Instant::now();
    let mut plain = Vec::with_capacity(SLOW_PLAIN);
    for _ in 0..SLOW_PLAIN {
        let mut s = tight_connect(addr).await;
        s.write_all(big_request(&host).as_bytes()).await.unwrap();
        plain.push(s);
    }
    // A few over TLS (HTTP/1.1), h2c and HTTP/2 over TLS.
    let connector = tokio_rustls::TlsConnector::from(h1_tls);
    let mut tls_h1 = Vec::new();
    for _ in 0..SLOW_OTHER {
        let tcp = tight_connect(proxy.tls_addr()).await;
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut s = connector.connect(name, tcp).await.unwrap();
        s.write_all(big_request("localhost").as_bytes())
            .await
            .unwrap();
        s.flush().await.unwrap();
        tls_h1.push(s);
    }
    let mut h2 = Vec::new();
    let connector = tokio_rustls::TlsConnector::from(ca.client(&[b"h2"]));
    for i in 0..2 * SLOW_OTHER {
        let mut conn = if i % 2 == 0 {
            H2Conn::handshake(Box::new(tight_connect(addr).await))
                .await
                .unwrap()
        } else {
            let tcp = tight_connect(proxy.tls_addr()).await;
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let tls = connector.connect(name, tcp).await.unwrap();
            H2Conn::handshake(Box::new(tls)).await.unwrap()
        };
        let authority = if i % 2 == 0 {
            host.as_str()
        } else {
            "localhost"
        };
        h2_slow(&mut conn, authority).await;
        h2.push(conn);
    }
    let slow = (SLOW_PLAIN + 3 * SLOW_OTHER) as u64;

    // Meanwhile new clients are served, over plain HTTP and TLS.
    let active = connections(&proxy, "active").await;
    if first_slow.elapsed() < Duration::from_millis(900) {
        // (Some may still wait in the backlog to be accepted.)
        assert!(
            active >= slow / 2,
            "slow clients hold connections: {active}"
        );
    }
    let other = get(&url).await;
    assert_eq!((other.status.as_u16(), other.body.len()), (200, BIG));
    let reply = calmcache_testkit::tls::tls_get(
        proxy.tls_addr(),
        "localhost",
        ca.client(&[b"http/1.1"]),
        Some("/small"),
    )
    .await
    .unwrap();
    assert!(
        reply.response.starts_with("HTTP/1.1 200"),
        "{}",
        reply.response
    );

    // Nobody is cut before send_timeout (checked only when this point came
    // early enough to tell).
    let early = connections(&proxy, "send_timeouts").await;
    if first_slow.elapsed() < Duration::from_millis(900) {
        assert_eq!(early, 0, "cut before send_timeout");
    }

    // All of them are cut after send_timeout: counted, slots freed.
    let cuts = wait_for_cuts(&proxy, slow, Duration::from_secs(8)).await;
    assert!(cuts >= slow, "{cuts} cuts, want {slow}");
    wait_until(
        Duration::from_secs(5),
        "3 connections open at most",
        async || connections(&proxy, "active").await <= 3,
    )
    .await;
    // One cut each: a stalled HTTP/2 connection is cut once, its streams
    // are not reset one by one as well.
    assert_eq!(connections(&proxy, "send_timeouts").await, slow);

    // Each slow client, reading at last, finds its answer cut short.
    let whole = BIG + 100;
    for (i, s) in plain.iter_mut().enumerate() {
        let read = read_to_close(s, Duration::from_secs(5)).await;
        let read = read.unwrap_or_else(|| panic!("plain client {i} still open"));
        assert!(
            read < whole,
            "plain client {i} got the whole answer ({read})"
        );
    }
    for (i, s) in tls_h1.iter_mut().enumerate() {
        let read = read_to_close(s, Duration::from_secs(5)).await;
        let read = read.unwrap_or_else(|| panic!("TLS client {i} still open"));
        assert!(read < whole, "TLS client {i} got the whole answer ({read})");
    }
    for (i, conn) in h2.iter_mut().enumerate() {
        assert!(
            conn.closes_within(Duration::from_secs(5)).await,
            "HTTP/2 client {i} still open"
        );
    }
    // /metrics has the counter too.
    let metrics = get(&proxy.admin_url("/metrics")).await.body;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("calmcache_send_timeouts_total "))
        .unwrap_or_else(|| panic!("no calmcache_send_timeouts_total in\n{metrics}"));
    let counted: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(counted >= slow as f64, "{line}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Which way an HTTP/2 test connects.
enum Via {
    H2c,
    Tls(Arc<rustls::ClientConfig>),
}

async fn h2_connect(proxy: &RunningProxy, via: &Via) -> H2Conn {
    match via {
        Via::H2c => H2Conn::h2c(proxy.running().proxy_addrs[0]).await.unwrap(),
        Via::Tls(config) => H2Conn::tls(proxy.tls_addr(), "localhost", config.clone())
            .await
            .unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_without_window_is_reset_while_its_connection_serves_others() {
    let origin = Origin::start().await;
    let dir = crate::scratch("slow-streams");
    let (tls, _, ca) = tls_keys(&dir);
    let proxy = Proxy::new(&origin)
        .zone("64MiB", "2MiB")
        .route("ttl = { 200 = \"60s\" }")
        .server(&format!(
            "send_timeout = \"1s\"\nh2c = true\nhttp2_keepalive_interval = \"300ms\"\n\
             http2_keepalive_timeout = \"1s\"\n{tls}"
        ))
        .start()
        .await;
    store_big(&proxy, ca.client(&[b"http/1.1"])).await;
    let mut resets = 0;
    for via in [Via::H2c, Via::Tls(ca.client(&[b"h2"]))] {
        let (label, host) = match via {
            Via::H2c => ("h2c", proxy.host()),
            Via::Tls(_) => ("h2", "localhost".to_string()),
        };
        let mut conn = h2_connect(&proxy, &via).await;
        // Every stream starts with no window; the client opens only the
        // small one's.
        assert!(conn.settings(&[(0x4, 0)]).await);
        // The stuck stream's clock starts after this (a timer never fires
        // early): a lower bound that cannot flake.
        let t0 = Instant::now();
        let stuck = conn.next_stream();
        assert!(
            conn.headers(stuck, &pseudo("GET", "/big", &host), true)
                .await
        );
        let served = conn.next_stream();
        assert!(
            conn.headers(served, &pseudo("GET", "/small", &host), true)
                .await
        );
        assert!(conn.window_update(served, 1 << 20).await);
        let small = conn.outcome(served, Duration::from_secs(5)).await;
        assert_eq!(small.status, Some(200), "{label}: {}", small.describe());
        assert!(small.body.starts_with(b"path=/small"), "{label}");
        // The stuck stream: its head, no body, then a reset after
        // send_timeout; the connection stays (it answers the PINGs).
        let big = conn.outcome(stuck, Duration::from_secs(5)).await;
        assert_eq!(big.rst, Some(code::CANCEL), "{label}: {}", big.describe());
        assert_eq!(big.status, Some(200), "{label}");
        assert!(
            big.body.is_empty(),
            "{label}: {} body bytes",
            big.body.len()
        );
        assert!(
            !big.closed && conn.goaway.is_none(),
            "{label}: connection kept"
        );
        assert!(
            t0.elapsed() >= Duration::from_millis(900),
            "{label}: too soon"
        );
        resets += 1;
        // Keepalive PINGs came (and were answered) while it waited.
        let pings = conn.frames_seen.get(&frame::PING).copied().unwrap_or(0);
        assert!(pings >= 1, "{label}: no keepalive PING");
        // The same connection serves a new stream.
        let again = conn.next_stream();
        assert!(
            conn.headers(again, &pseudo("GET", "/small", &host), true)
                .await
        );
        assert!(conn.window_update(again, 1 << 20).await);
        let after = conn.outcome(again, Duration::from_secs(5)).await;
        assert_eq!(after.status, Some(200), "{label}: {}", after.describe());
        // A client PING is answered.
        assert!(conn.ping(*b"calmping").await);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut acked = false;
        while !acked {
            let Some(f) = conn.read_frame_until(deadline).await else {
                break;
            };
            acked = f.kind == frame::PING && f.flags & flag::ACK != 0 && f.payload == b"calmping";
        }
        assert!(acked, "{label}: PING not answered");
    }
    let cuts = wait_for_cuts(&proxy, resets, Duration::from_secs(3)).await;
    assert!(cuts >= resets, "{cuts} send_timeouts, want {resets}");

    // A client that never answers PINGs (it never reads) is closed after
    // interval + timeout, long before keepalive_timeout or header_read_timeout.
    let mut silent = TcpStream::connect(proxy.running().proxy_addrs[0])
        .await
        .unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend([0, 0, 0, frame::SETTINGS, 0, 0, 0, 0, 0]);
    silent.write_all(&hello).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await; // the subject: ping interval + timeout
    let closed = read_to_close(&mut silent, Duration::from_secs(4)).await;
    assert!(
        closed.is_some(),
        "a client that never answers PINGs stays open"
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A WebSocket upstream that accepts one handshake per connection and then
/// sends bytes as fast as the proxy takes them (at most 64 MiB); it counts
/// the connections that ended (the proxy closed them).
async fn flooding_upstream() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = ended.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let key = text
                    .lines()
                    .find_map(|l| l.strip_prefix("sec-websocket-key:"))
                    .map(str::trim)
                    .unwrap_or_default()
                    .to_string();
                // The key is case-sensitive: take it from the original head.
                let at = text.find(&key).unwrap_or(0);
                let key = String::from_utf8_lossy(&head[at..at + key.len()]).into_owned();
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                     Connection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                    calmcache::websocket_accept(key.as_bytes())
                );
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![0x82u8; 64 * 1024];
                for _ in 0..1024 {
                    let wrote =
                        tokio::time::timeout(Duration::from_secs(10), s.write_all(&chunk)).await;
                    if !matches!(wrote, Ok(Ok(()))) {
                        break;
                    }
                }
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    (addr, ended)
}

/// A WebSocket client that stops reading is cut after the server's
/// `send_timeout` and counted, whether its stall began in a copied write or
/// in a spliced burst (plain TCP, net/tunnel.rs). Regression (issue 30):
/// the spliced path went around the client's write clock, so the client was
/// held for the upstream's 60 s and never counted; which path the stall
/// took depended on how much the proxy's socket took before the client's
/// window closed, so the test failed after loopback transfers had left TCP
/// metrics for 127.0.0.1 (`ip tcp_metrics`), and passed after a flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_client_that_stops_reading_is_cut_after_send_timeout() {
    let (upstream, ended) = flooding_upstream().await;
    // The upstream's own send_timeout (60 s) is not what cuts it.
    let proxy = Proxy::with_upstream(upstream)
        .no_zone()
        .server("send_timeout = \"1s\"")
        .start()
        .await;
    let mut client = tight_connect(proxy.running().proxy_addrs[0]).await;
    let handshake = format!(
        "GET /ws HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        proxy.host()
    );
    client.write_all(handshake.as_bytes()).await.unwrap();
    let t0 = Instant::now();
    let cuts = wait_for_cuts(&proxy, 1, Duration::from_secs(8)).await;
    assert_eq!(cuts, 1, "the tunnel's client side was not cut");
    assert!(t0.elapsed() < Duration::from_secs(8));
    wait_until(Duration::from_secs(5), "the tunnel's end", async || {
        ended.load(std::sync::atomic::Ordering::SeqCst) != 0
    })
    .await;
    assert_eq!(
        ended.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the upstream side still open"
    );
    let read = read_to_close(&mut client, Duration::from_secs(5)).await;
    let read = read.expect("the client side still open");
    assert!(read < 64 * 1024 * 1024, "{read}");
    let head = proxy.status().await;
    assert_eq!(head["websockets"]["active"].as_u64(), Some(0), "{head}");
    proxy.stop().await;
}

/// `connections.send_timeouts` from the admin listener on `admin`.
async fn send_timeouts_at(admin: u16) -> u64 {
    let reply = get(&format!("http://127.0.0.1:{admin}/status")).await;
    let status: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    status["connections"]["send_timeouts"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_new_connections_the_new_send_timeout() {
    let origin = Origin::start().await;
    // Fixed ports: a reload keeps a listener only at the same address.
    let (port, admin) = (crate::free_port(), crate::free_port());
    let before = Proxy::new(&origin)
        .zone("64MiB", "2MiB")
        .route("ttl = { 200 = \"60s\" }")
        .admin(&format!("listen = \"127.0.0.1:{admin}\""))
        .server("send_timeout = \"30s\"");
    let text = before
        .toml()
        .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    let config = calmcache::Config::from_toml(&text, "<test>").unwrap();
    let running = calmcache::start(&config).await.unwrap();
    let addr = running.proxy_addrs[0];
    let host = addr.to_string();
    let body_bytes = BIG.to_string();
    let headers = [("x-origin-body-bytes", body_bytes.as_str())];
    let url = format!("http://{addr}/big");
    let stored = calmcache_testkit::get_with(http::Method::GET, &url, &headers).await;
    assert_eq!(stored.body.len(), BIG);
    // A client of the old config stops reading.
    let mut old = tight_connect(addr).await;
    old.write_all(big_request(&host).as_bytes()).await.unwrap();
    // The same config with send_timeout 1s.
    let text = text.replace("send_timeout = \"30s\"", "send_timeout = \"1s\"");
    let config = calmcache::Config::from_toml(&text, "<test>").unwrap();
    assert_eq!(config.server.send_timeout, Duration::from_secs(1));
    running.reloader().apply(config).await.unwrap();
    // A client of the new one stops reading: cut after 1 s; the old one
    // keeps its 30 s.
    let mut new = tight_connect(addr).await;
    new.write_all(big_request(&host).as_bytes()).await.unwrap();
    wait_until(
        Duration::from_secs(8),
        "the new connection cut",
        async || send_timeouts_at(admin).await != 0,
    )
    .await;
    assert_eq!(
        send_timeouts_at(admin).await,
        1,
        "the new connection was not cut"
    );
    // Past the new 1 s, within the old 30 s: the old one must still be open.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(send_timeouts_at(admin).await, 1, "the old one was cut too");
    assert!(read_to_close(&mut new, Duration::from_secs(5))
        .await
        .is_some());
    drop(old);
    running.shutdown(Duration::from_secs(1)).await;
}
