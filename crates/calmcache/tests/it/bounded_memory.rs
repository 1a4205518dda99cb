//! Bounded memory on every path of a fill: a disk streamed fill holds a
//! window in RAM whatever its readers do, a slow reader slows only itself,
//! `max_inflight_body` turns new fills into uncached relays, and a body
//! without a declared length reaches its first client at once.
//!
//! Bodies come from the origin's generator (`x-origin-stream-bytes`), so the
//! test never holds one whole either; every reader checks each byte.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use calmcache_testkit::{get, get_with, stream_byte, Origin, Proxy, RunningProxy, Wires};
use http::Method;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{scratch, wait_until};

/// How long a test waits for a fill to store, hold or give back memory.
const LIMIT: Duration = Duration::from_secs(10);

const MIB: u64 = 1024 * 1024;

/// A client that reads a body at the pace the test decides, through a small
/// receive buffer (so the proxy's writes stall soon), checking each byte
/// against the generator.
struct SlowReader {
    stream: TcpStream,
    /// Body bytes received with the head, not yet checked.
    pending: Vec<u8>,
    /// Body bytes checked so far.
    read: u64,
}

impl SlowReader {
    /// Sends a GET for `path` with `headers` and reads the response head.
    async fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (SlowReader, String) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(16 * 1024).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut piece = [0u8; 4096];
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut piece))
                .await
                .expect("response head within 30 s")
                .unwrap();
            assert!(n > 0, "connection closed before the response head");
            buf.extend_from_slice(&piece[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let reader = SlowReader {
            stream,
            pending: buf[end..].to_vec(),
            read: 0,
        };
        (reader, head)
    }

    /// Reads and checks the next `n` body bytes.
    async fn read(&mut self, n: u64) {
        let mut left = n;
        let mut piece = vec![0u8; 64 * 1024];
        while left > 0 {
            if self.pending.is_empty() {
                let want = piece.len().min(left as usize);
                let got = tokio::time::timeout(
                    Duration::from_secs(30),
                    self.stream.read(&mut piece[..want]),
                )
                .await
                .expect("body bytes within 30 s")
                .unwrap();
                assert!(got > 0, "body ended at {} bytes", self.read);
                self.pending.extend_from_slice(&piece[..got]);
            }
            let take = self.pending.len().min(left as usize);
            for (i, b) in self.pending.drain(..take).enumerate() {
                let at = self.read + i as u64;
                assert_eq!(b, stream_byte(at), "byte {at}");
            }
            self.read += take as u64;
            left -= take as u64;
        }
    }
}

/// Checks a whole body against the generator.
fn check(body: &[u8], len: u64, what: &str) {
    assert_eq!(body.len() as u64, len, "{what}: length");
    if let Some(at) = (0..len).find(|&i| body[i as usize] != stream_byte(i)) {
        panic!("{what}: byte {at} differs");
    }
}

fn stream_headers(len: &str, pause_ms: &str) -> Vec<(&'static str, String)> {
    vec![
        ("x-origin-stream-bytes", len.to_string()),
        ("x-origin-stream-pause-ms", pause_ms.to_string()),
    ]
}

fn refs<'a>(headers: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

async fn gauge(proxy: &RunningProxy) -> u64 {
    proxy.status().await["inflight_body_bytes"]
        .as_u64()
        .unwrap()
}

async fn disk_proxy(origin: &Origin, dir: &Path, max_object_size: &str) -> RunningProxy {
    Proxy::new(origin)
        .disk_zone(dir, "")
        .zone("2GiB", max_object_size)
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await
}

/// Waits (bounded) until the origin has handed out `bytes` of generated body.
async fn origin_sent(origin: &Origin, bytes: u64) {
    wait_until(Duration::from_secs(60), "origin progress", async || {
        origin.bytes_streamed() >= bytes
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_fill_holds_a_window_while_a_200_mb_body_streams_to_a_10_kib_s_reader() {
    // Before: every chunk of a streamed disk fill stayed in RAM until the
    // end (then was concatenated), and a reader's unbounded queue held what
    // it had not read: a 200 MB miss to a slow client cost 400 MB.
    let origin = Origin::start().await;
    let dir = scratch("bounded-200mb");
    let proxy = disk_proxy(&origin, &dir, "300MiB").await;
    let headers = stream_headers(&(200 * MIB).to_string(), "0");
    let addr = proxy.running().proxy_addrs[0];
    let (mut reader, head) = SlowReader::open(addr, "/big", &refs(&headers)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut most = 0;
    // Four seconds at 10 KiB/s, sampling the gauge as we go.
    for _ in 0..16 {
        reader.read(2560).await;
        most = most.max(gauge(&proxy).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    most = most.max(gauge(&proxy).await);
    // The fill went on far ahead of the reader (into the file) ...
    assert!(
        origin.bytes_streamed() > 16 * MIB,
        "fill stalled at {} bytes",
        origin.bytes_streamed()
    );
    // ... holding a window (256 KiB, a 256 KiB write batch and a chunk),
    // never the body: generous slack, far below what arrived.
    assert!(most <= 4 * MIB, "inflight_body_bytes reached {most}");
    assert_eq!(reader.read, 16 * 2560);
    drop(reader);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A slow reader and a fast late joiner on one streamed fill into `proxy`:
/// the joiner gets the whole body while the slow reader holds still, then
/// the slow one gets it all too; both byte-exact. Returns the joiner's
/// `Cache-Status`.
async fn slow_and_fast(origin: &Origin, proxy: &RunningProxy, path: &str) -> String {
    let len = 24 * MIB;
    // About 13 MB/s: the fill is still running when the joiner comes.
    let headers = stream_headers(&len.to_string(), "5");
    let addr = proxy.running().proxy_addrs[0];
    let before = origin.bytes_streamed();
    let (mut slow, head) = SlowReader::open(addr, path, &refs(&headers)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    slow.read(10 * 1024).await;
    origin_sent(origin, before + 4 * MIB).await;
    let fast = get_with(Method::GET, &proxy.url(path), &refs(&headers)).await;
    check(&fast.bytes, len, "late fast joiner");
    assert_eq!(slow.read, 10 * 1024, "the slow reader held still");
    // The fast reader finished at the origin's pace, not the slow one's:
    // the whole body went through while the slow reader had 10 KiB.
    slow.read(len - 10 * 1024).await;
    // The object is stored and hits give the same bytes.
    let hit = get_with(Method::GET, &proxy.url(path), &refs(&headers)).await;
    assert!(hit.cache_status().contains("hit"), "{}", hit.cache_status());
    check(&hit.bytes, len, "hit after the fill");
    fast.cache_status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_slows_only_itself_on_a_disk_fill() {
    let origin = Origin::start().await;
    let dir = scratch("bounded-slow-fast-disk");
    let proxy = disk_proxy(&origin, &dir, "64MiB").await;
    let status = slow_and_fast(&origin, &proxy, "/shared").await;
    assert!(status.contains("collapsed"), "joined the fill: {status}");
    assert_eq!(origin.hits_for("/shared"), 1);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_slows_only_itself_on_a_memory_fill() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .zone("256MiB", "64MiB")
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await;
    let status = slow_and_fast(&origin, &proxy, "/shared").await;
    assert!(status.contains("collapsed"), "joined the fill: {status}");
    assert_eq!(origin.hits_for("/shared"), 1);
}

/// A whole body over HTTP/1.1, or the error that ended it.
async fn fetch(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<bytes::Bytes, Box<dyn std::error::Error + Send + Sync>> {
    let tcp = TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let mut req = http::Request::get(path).header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    Ok(resp.into_body().collect().await?.to_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_of_a_body_too_large_to_keep_is_cut_while_the_fast_one_finishes() {
    // Not stored (a chunked body over max_object_size): nothing keeps the
    // body for a reader far behind, so with another reader going on, the
    // one that stopped reading is cut instead of piling the body up.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .zone("256MiB", "1MiB")
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await;
    let len = 8 * MIB;
    // 30 ms per 64 KiB: the fast reader joins long before 1 MiB arrived.
    let mut headers = stream_headers(&len.to_string(), "30");
    headers.push(("x-origin-chunked", "1".to_string()));
    let addr = proxy.running().proxy_addrs[0];
    let (mut slow, head) = SlowReader::open(addr, "/huge", &refs(&headers)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let fast = fetch(addr, "/huge", &refs(&headers)).await.unwrap();
    check(&fast, len, "fast reader");
    assert_eq!(
        origin.hits_for("/huge"),
        1,
        "the fast reader joined the fill"
    );
    assert!(gauge(&proxy).await <= 4 * MIB);
    // The slow reader (chunked framing and all) never gets the whole body.
    let mut raw = 0u64;
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(30), slow.stream.read(&mut piece))
            .await
            .expect("the slow reader is cut, not left hanging");
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => raw += n as u64,
        }
    }
    assert!(raw < len, "the slow reader got {raw} bytes of {len}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_past_max_inflight_body_stream_through_uncached_and_are_counted() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .server("max_inflight_body = \"1MiB\"")
        .zone("256MiB", "64MiB")
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await;
    // A large fill into the memory zone holds its body until stored.
    let big = stream_headers(&(16 * MIB).to_string(), "5");
    let first = tokio::spawn({
        let url = proxy.url("/first");
        let big = big.clone();
        async move { get_with(Method::GET, &url, &refs(&big)).await }
    });
    wait_until(LIMIT, "the first fill holding 1 MiB", async || {
        gauge(&proxy).await >= MIB
    })
    .await;
    let second = stream_headers(&(2 * MIB).to_string(), "0");
    let over = get_with(Method::GET, &proxy.url("/second"), &refs(&second)).await;
    check(&over.bytes, 2 * MIB, "relayed past the budget");
    let params = over.cache_status_params();
    assert_eq!(
        params.param("detail"),
        Some("inflight-budget"),
        "{}",
        over.cache_status()
    );
    assert!(!params.has("stored"), "{}", over.cache_status());
    let status = proxy.status().await;
    assert_eq!(status["fills_over_budget"], 1, "{status}");
    assert_eq!(status["inflight_body_limit"], MIB, "{status}");
    let metrics = get(&proxy.admin_url("/metrics")).await;
    assert!(
        metrics.body.contains("calmcache_fills_over_budget_total 1"),
        "{}",
        metrics.body
    );
    let first = first.await.unwrap();
    check(&first.bytes, 16 * MIB, "first fill");
    // The budget comes back once the fill is done and read.
    wait_until(
        LIMIT,
        "inflight_body_bytes back to 0 after the fills",
        async || gauge(&proxy).await == 0,
    )
    .await;
    // With room again, the second URL is stored.
    let miss = get_with(Method::GET, &proxy.url("/second"), &refs(&second)).await;
    check(&miss.bytes, 2 * MIB, "second, stored");
    let hit = get_with(Method::GET, &proxy.url("/second"), &refs(&second)).await;
    assert!(hit.cache_status().contains("hit"), "{}", hit.cache_status());
    check(&hit.bytes, 2 * MIB, "second, hit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_storable_response_reaches_its_first_client_at_once_on_every_wire() {
    // Before: a body without Content-Length was collected up to 256 KiB
    // before anything reached the client, so server-sent events and
    // early-flushed HTML on cached routes hung until the end.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"");
    let wires = Wires::start(proxy, "").await;
    let host = wires.proxy.host();
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/events/{i}");
        let headers = [
            ("x-origin-body", "event-one|event-two|"),
            ("x-origin-trickle-ms", "2000"),
            ("x-origin-pieces", "2"),
            ("x-origin-chunked", "1"),
            ("x-origin-header", "Content-Type: text/event-stream"),
        ];
        let done_before = origin.bodies_trickled();
        let resp = wires.open(wire, &host, &path, &headers).await;
        assert_eq!(resp.status(), 200, "{what}");
        let mut body = resp.into_body();
        let mut got = Vec::new();
        while got.len() < 10 {
            let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
                .await
                .unwrap_or_else(|_| panic!("{what}: no first event"))
                .unwrap_or_else(|| panic!("{what}: body ended early"))
                .unwrap();
            if let Ok(data) = frame.into_data() {
                got.extend_from_slice(&data);
            }
        }
        // The first event arrived while the origin still held the second.
        assert_eq!(
            origin.bodies_trickled(),
            done_before,
            "{what}: first event only after the origin finished"
        );
        assert_eq!(&got[..10], b"event-one|", "{what}");
        let rest = body.collect().await.unwrap().to_bytes();
        got.extend_from_slice(&rest);
        assert_eq!(&got[..], b"event-one|event-two|", "{what}");
        // Stored once it ended cleanly: a hit, same bytes, exact length.
        let stored = format!("{what}: stored");
        let hit = wait_until(LIMIT, &stored, async || {
            let reply = wires
                .send(wire, Method::GET, &host, &path, &headers, "")
                .await;
            Some(reply).filter(|r| r.cache_status().contains("hit"))
        })
        .await;
        assert_eq!(hit.body, "event-one|event-two|", "{what}");
        if matches!(wire, calmcache_testkit::Wire::Http1) {
            assert_eq!(hit.header("content-length"), "20", "{what}");
        }
        let head = wires
            .send(wire, Method::HEAD, &host, &path, &headers, "")
            .await;
        assert_eq!(
            head.header("content-length"),
            "20",
            "{what}: HEAD from the cache"
        );
        assert_eq!(origin.hits_for(&path), 1, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_into_a_disk_zone_holds_a_window_and_is_stored_with_its_length() {
    // A body without Content-Length gets its length only at the end: it is
    // spooled to a file (not held whole in RAM) and stored with the exact
    // length once it ended cleanly.
    let origin = Origin::start().await;
    let dir = scratch("bounded-chunked-disk");
    let proxy = disk_proxy(&origin, &dir, "64MiB").await;
    let len = 24 * MIB;
    let mut headers = stream_headers(&len.to_string(), "0");
    headers.push(("x-origin-chunked", "1".to_string()));
    let addr = proxy.running().proxy_addrs[0];
    // A reader that takes the head and a little, then stops reading.
    let (mut stalled, head) = SlowReader::open(addr, "/chunked", &refs(&headers)).await;
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let _ = stalled.stream.read(&mut [0u8; 1024]).await.unwrap();
    let mut most = 0;
    let what = "the origin's whole body past the stalled reader";
    wait_until(Duration::from_secs(60), what, async || {
        most = most.max(gauge(&proxy).await);
        origin.bytes_streamed() >= len
    })
    .await;
    assert_eq!(
        origin.bytes_streamed(),
        len,
        "the stalled reader held the fill"
    );
    assert!(most <= 4 * MIB, "inflight_body_bytes reached {most}");
    let hit = wait_until(LIMIT, "stored after the body ended", async || {
        let reply = get_with(Method::GET, &proxy.url("/chunked"), &refs(&headers)).await;
        Some(reply).filter(|r| r.cache_status().contains("hit"))
    })
    .await;
    assert_eq!(hit.header("content-length"), len.to_string());
    check(&hit.bytes, len, "hit of the spooled body");
    assert_eq!(origin.hits_for("/chunked"), 1);
    drop(stalled);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_compressible_body_streams_then_is_stored_with_its_encodings() {
    // Streaming a body without Content-Length at once must not lose what
    // storing it whole gave: the encodings, Vary, the exact length.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "compress = [\"gzip\"]\nttl = { 200 = \"60s\" }").await;
    let headers = [
        ("x-origin-body-bytes", "8192"),
        ("x-origin-trickle-ms", "100"),
        ("x-origin-pieces", "2"),
        ("x-origin-chunked", "1"),
        ("x-origin-header", "Content-Type: text/html"),
    ];
    let first = get_with(Method::GET, &proxy.url("/page"), &headers).await;
    assert_eq!(first.bytes.len(), 8192);
    let expected = first.body.clone();
    let mut with = headers.to_vec();
    with.push(("accept-encoding", "gzip"));
    let gz = wait_until(LIMIT, "stored after the body ended", async || {
        let reply = get_with(Method::GET, &proxy.url("/page"), &with).await;
        Some(reply).filter(|r| r.cache_status().contains("hit"))
    })
    .await;
    assert_eq!(gz.header("content-encoding"), "gzip", "{:?}", gz.headers);
    assert!(gz.bytes.len() < 8192);
    let plain = get_with(Method::GET, &proxy.url("/page"), &headers).await;
    assert!(
        plain.cache_status().contains("hit"),
        "{}",
        plain.cache_status()
    );
    assert_eq!(plain.body, expected);
    assert_eq!(plain.header("content-length"), "8192");
    assert!(
        plain
            .header_all("vary")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("accept-encoding")),
        "{:?}",
        plain.headers
    );
    let head = get_with(Method::HEAD, &proxy.url("/page"), &headers).await;
    assert_eq!(head.header("content-length"), "8192");
    assert_eq!(origin.hits_for("/page"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_reader_of_a_body_not_kept_paces_the_origin_and_its_leaving_ends_the_fetch() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .zone("256MiB", "1MiB")
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await;
    let len = 256 * MIB;
    let mut headers = stream_headers(&len.to_string(), "0");
    headers.push(("x-origin-chunked", "1".to_string()));
    let addr = proxy.running().proxy_addrs[0];
    let (mut only, head) = SlowReader::open(addr, "/endless", &refs(&headers)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let _ = only.stream.read(&mut [0u8; 1024]).await.unwrap();
    // The reader holds still: the fill waits for it (socket buffers and a
    // window ahead at most), the origin is not drained into memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let paced = origin.bytes_streamed();
    assert!(paced < 64 * MIB, "origin drained to {paced} bytes");
    assert!(gauge(&proxy).await <= 4 * MIB);
    drop(only);
    // Gone: nobody can use the rest, the fetch stops.
    let mut last = origin.bytes_streamed();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = origin.bytes_streamed();
        if now == last {
            break;
        }
        last = now;
    }
    assert!(last < len / 2, "the origin kept streaming: {last} bytes");
}
