//! Zero-copy sends of large memory-zone bodies (issue 15): a body of 64 KiB
//! or more lies in pages of its own and goes to plain HTTP/1.1 clients by
//! `splice`. Every wire gets the exact bytes (whole, ranges, HEAD, pipelined
//! requests), `/status` counts the spliced bytes on plain HTTP/1.1 only, and
//! a slow reader still gets the body it asked for while that object is
//! purged, refilled with other bytes and evicted under it. A connections
//! limit, which holds its place in the body until it ends, keeps the splice.

use std::time::Duration;

use calmcache_testkit::{Origin, Proxy, RunningProxy, Wire, Wires};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::purge_integrity::admin;
use crate::slow_churn::{slow_readers_keep_their_version, SlowCase};

fn spliced(status: &serde_json::Value) -> u64 {
    status["connections"]["spliced_bytes"]
        .as_u64()
        .expect("connections.spliced_bytes")
}

/// The spliced bytes once they reach `at_least`: the connection counts a
/// splice after its last byte left, which can be after the client read it.
/// Returns the count then (or what it is at the deadline, for the caller's
/// assert to name).
async fn spliced_reaching(proxy: &RunningProxy, at_least: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = spliced(&proxy.status().await);
        if now >= at_least || std::time::Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(calmcache_testkit::wait::POLL).await;
    }
}

async fn wires() -> (Origin, Wires) {
    let origin = Origin::start().await;
    let builder = Proxy::new(&origin)
        .zone("64MiB", "4MiB")
        .admin(&admin())
        .route("ttl = { 200 = \"600s\" }");
    let wires = Wires::start(builder, "").await;
    (origin, wires)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_memory_hits_are_byte_exact_on_every_wire_and_spliced_on_plain_http1() {
    let (_origin, wires) = wires().await;
    let proxy = &wires.proxy;
    // Around the paged threshold (16 KiB: paged, copied), the splice
    // threshold (64 KiB) and the pipe's size (256 KiB).
    for len in [
        16_383usize,
        16_384,
        40_000,
        65_535,
        65_536,
        100_000,
        262_145,
        1_000_003,
    ] {
        let path = format!("/z{len}");
        let size = len.to_string();
        let ask = [("x-origin-body-bytes", size.as_str())];
        // h2c and HTTP/1.1 share a key (same scheme); TLS has its own.
        for wire in &wires.all {
            let first = wires
                .send(wire, Method::GET, "zc.test", &path, &ask, "")
                .await;
            assert_eq!(first.status, 200, "{}", wire.label());
            let want = first.bytes.clone();
            assert_eq!(want.len(), len, "{} {len}", wire.label());
            assert!(want.starts_with(format!("path={path} n=").as_bytes()));
            for _ in 0..3 {
                let before = spliced(&proxy.status().await);
                let hit = wires
                    .send(wire, Method::GET, "zc.test", &path, &ask, "")
                    .await;
                assert!(
                    hit.cache_status_params().has("hit"),
                    "{} {len}: {}",
                    wire.label(),
                    hit.cache_status()
                );
                assert!(
                    hit.bytes == want,
                    "{} {len}: the hit's bytes differ",
                    wire.label()
                );
                let after = match wire {
                    Wire::Http1 if len >= 65_536 => {
                        spliced_reaching(proxy, before + len as u64 / 2).await
                    }
                    _ => spliced(&proxy.status().await),
                };
                match wire {
                    Wire::Http1 if len >= 65_536 => assert!(
                        after - before >= len as u64 / 2,
                        "{len}: plain HTTP/1.1 hit spliced {} bytes",
                        after - before
                    ),
                    Wire::Http1 => assert_eq!(after, before, "{len}: below 64 KiB, copied"),
                    _ => assert_eq!(after, before, "{}: never spliced", wire.label()),
                }
            }
            // A range inside the body, and one across its end.
            let inside_to = 61_000.min(len - 1000);
            for (range, from, to) in [
                (&*format!("bytes=1000-{}", inside_to - 1), 1000, inside_to),
                (
                    &*format!("bytes={}-", len - 70_000.min(len - 1)),
                    len - 70_000.min(len - 1),
                    len,
                ),
            ] {
                let r = wires
                    .send(wire, Method::GET, "zc.test", &path, &[("range", range)], "")
                    .await;
                assert_eq!(r.status, 206, "{} {len} {range}", wire.label());
                assert!(
                    r.bytes[..] == want[from..to],
                    "{} {len} {range}",
                    wire.label()
                );
            }
            let head = wires
                .send(wire, Method::HEAD, "zc.test", &path, &[], "")
                .await;
            assert_eq!(head.status, 200);
            assert!(head.bytes.is_empty(), "{}: HEAD has no body", wire.label());
            assert_eq!(
                head.headers["content-length"].to_str().unwrap(),
                len.to_string()
            );
        }
    }

    // Pipelined: three requests in one write, two large bodies and a small
    // one between them, on one plain connection; each answer exact.
    let addr = proxy.running().proxy_addrs[0];
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let mut asked = Vec::new();
    for path in ["/z1000003", "/small", "/z100000"] {
        asked.extend_from_slice(
            format!("GET {path} HTTP/1.1\r\nHost: zc.test\r\nx-origin-body-bytes: 100\r\n\r\n")
                .as_bytes(),
        );
    }
    asked.extend_from_slice(b"GET /z262145 HTTP/1.1\r\nHost: zc.test\r\nConnection: close\r\n\r\n");
    tcp.write_all(&asked).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut answer))
        .await
        .expect("pipelined answers in time")
        .unwrap();
    let mut rest = &answer[..];
    for (path, len) in [
        ("/z1000003", 1_000_003),
        ("/small", 100),
        ("/z100000", 100_000),
        ("/z262145", 262_145),
    ] {
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        let head = String::from_utf8_lossy(&rest[..end]).to_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(
            head.contains(&format!("content-length: {len}\r\n")),
            "{path}: {head}"
        );
        let body = &rest[end..end + len];
        assert!(
            body.starts_with(format!("path={path} n=").as_bytes()),
            "{path}: {:?}",
            String::from_utf8_lossy(&body[..40.min(len)])
        );
        assert!(
            body[40.min(len)..].iter().all(|b| *b == b'.'),
            "{path}: padding"
        );
        rest = &rest[end + len..];
    }
    assert!(
        rest.is_empty(),
        "{} bytes after the last answer",
        rest.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_its_body_while_the_object_is_purged_refilled_and_evicted() {
    // A 64 MiB zone, 2 MB each: the fillers evict, so pages are unmapped
    // and their addresses reused. The readers read all but the last
    // 100,000 bytes before the second churn: the tail is in the proxy's
    // pipe and socket, the proxy's own reference to the object gone.
    let (origin, wires) = wires().await;
    let case = SlowCase {
        host: "zc.test",
        len: 2_000_000,
        read_before_churn: 2_000_000 - 100_000,
    };
    slow_readers_keep_their_version(&origin, &wires, case).await;
    assert!(
        spliced(&wires.proxy.status().await) > 0,
        "the readers' bodies were spliced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_limit_holds_its_place_without_losing_the_splice() {
    // The place is held until the body ends, in the body itself: a paged
    // body must still be offered for the splice.
    let origin = Origin::start().await;
    let builder = Proxy::new(&origin)
        .zone("64MiB", "4MiB")
        .admin(&admin())
        .route("ttl = { 200 = \"600s\" }\nlimits = [\"conns\"]")
        .tables("[limits.conns]\nconnections = 2");
    let wires = Wires::start(builder, "").await;
    let proxy = &wires.proxy;
    const LEN: usize = 300_000;
    let size = LEN.to_string();
    let ask = [("x-origin-body-bytes", size.as_str())];
    for wire in &wires.all {
        let path = format!("/held-{}", wire.label().replace(' ', "-"));
        let first = wires
            .send(wire, Method::GET, "zc.test", &path, &ask, "")
            .await;
        assert_eq!(first.bytes.len(), LEN, "{}", wire.label());
        for _ in 0..3 {
            let before = spliced(&proxy.status().await);
            let hit = wires
                .send(wire, Method::GET, "zc.test", &path, &ask, "")
                .await;
            assert!(hit.cache_status_params().has("hit"), "{}", wire.label());
            assert!(
                hit.bytes == first.bytes,
                "{}: the hit's bytes",
                wire.label()
            );
            let after = match wire {
                Wire::Http1 => spliced_reaching(proxy, before + LEN as u64 / 2).await,
                _ => spliced(&proxy.status().await),
            };
            match wire {
                Wire::Http1 => assert!(
                    after - before >= LEN as u64 / 2,
                    "a held place lost the splice: {} bytes spliced",
                    after - before
                ),
                _ => assert_eq!(after, before, "{}: never spliced", wire.label()),
            }
        }
    }
    // Every place was left as its body ended.
    calmcache_testkit::wait_until(Duration::from_secs(10), "no client tracked", async || {
        proxy.status().await["limits"]["conns"]["clients"].as_u64() == Some(0)
    })
    .await;
}
