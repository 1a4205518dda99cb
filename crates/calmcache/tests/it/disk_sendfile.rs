//! Disk hits of 64 KiB to 1 MiB (issue 29, written for the `sendfile` path
//! that was measured and not kept: see bench/HISTORY.md, "disk hits sent
//! with sendfile"). Whatever path sends a disk body, a slow reader must get
//! exactly the version it asked for while that object's file is purged
//! (unlinked), refilled (a new file renamed over the path) and evicted under
//! it, and every wire (HTTP/1.1, h2c, HTTP/2 over TLS) gets the same bytes,
//! whole and in ranges, around the sizes where a send path could change.

use std::time::Duration;

use calmcache_testkit::{Origin, Proxy, Wire, Wires};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::purge_integrity::{admin, TOKEN};
use crate::slow_readers::tight_connect;

/// What the test origin sends for `path` on its `n`-th request of it,
/// padded to `len` bytes.
fn origin_body(path: &str, n: u64, len: usize) -> Vec<u8> {
    let mut body = format!("path={path} n={n}").into_bytes();
    body.resize(len, b'.');
    body
}

async fn disk_wires(dir: &std::path::Path) -> (Origin, Wires) {
    let origin = Origin::start().await;
    let builder = Proxy::new(&origin)
        .zone("24MiB", "4MiB")
        .disk_zone(dir, "")
        .admin(&admin())
        .route("ttl = { 200 = \"600s\" }");
    let wires = Wires::start(builder, "").await;
    (origin, wires)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_hits_are_byte_exact_on_every_wire_around_the_sendfile_sizes() {
    let dir = crate::disk_zone::scratch("sendfile-wires");
    let (_origin, wires) = disk_wires(&dir).await;
    // Around the sendfile threshold (64 KiB of file), a stand-in's size
    // (256 KiB: a longer body is several) and the inline limit (1 MiB).
    for len in [65_000usize, 70_000, 262_100, 262_144, 600_001, 1_040_000] {
        let path = format!("/s{len}");
        let size = len.to_string();
        let ask = [("x-origin-body-bytes", size.as_str())];
        for wire in &wires.all {
            // (A TLS request is another key: each wire fills its own.)
            let stored = wires
                .send(wire, Method::GET, "sf.test", &path, &ask, "")
                .await;
            let want = stored.bytes.clone();
            assert_eq!(want.len(), len, "{len} {}: the fill", wire.label());
            let hit = wires
                .send(wire, Method::GET, "sf.test", &path, &ask, "")
                .await;
            assert!(
                hit.cache_status().contains("hit"),
                "{len} {}: {}",
                wire.label(),
                hit.cache_status()
            );
            assert!(
                hit.bytes[..] == want[..],
                "{len} {}: the hit's bytes",
                wire.label()
            );
            let range = [("range", "bytes=1000-60999")];
            let part = wires
                .send(wire, Method::GET, "sf.test", &path, &range, "")
                .await;
            assert_eq!(part.status, 206, "{len} {}", wire.label());
            assert!(
                part.bytes[..] == want[1000..61_000],
                "{len} {}: the range",
                wire.label()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_its_disk_body_while_the_file_is_purged_replaced_and_evicted() {
    let dir = crate::disk_zone::scratch("sendfile-slow");
    let (origin, wires) = disk_wires(&dir).await;
    let proxy = &wires.proxy;
    const LEN: usize = 900_000;
    let size = LEN.to_string();
    let ask = [("x-origin-body-bytes", size.as_str())];
    let stored = wires
        .send(&Wire::Http1, Method::GET, "sf.test", "/slow", &ask, "")
        .await;
    let want = origin_body("/slow", 1, LEN);
    assert!(stored.bytes[..] == want[..], "the first fill");

    // Two slow readers of the hit, each reading only the start.
    let addr = proxy.running().proxy_addrs[0];
    let mut readers = Vec::new();
    for _ in 0..2 {
        let mut tcp = tight_connect(addr).await;
        tcp.write_all(b"GET /slow HTTP/1.1\r\nHost: sf.test\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut first = vec![0u8; 2048];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut first))
            .await
            .expect("the answer starts")
            .unwrap();
        first.truncate(n);
        readers.push((tcp, first));
    }

    // Meanwhile: purge it (its file unlinked), refill it with other bytes
    // (a new file renamed over the path), and push it out with other large
    // objects (a 24 MiB zone, 900 KB each: the manager evicts files).
    let mut round = 0;
    let mut churn = async || {
        round += 1;
        let purged = proxy.purge(TOKEN, r#"{"url": "/slow"}"#).await;
        if round == 1 {
            assert_eq!(purged["purged"], 1, "{purged}");
        }
        let again = wires
            .send(&Wire::Http1, Method::GET, "sf.test", "/slow", &ask, "")
            .await;
        assert_eq!(again.bytes.len(), LEN);
        assert!(again.bytes[..] != want[..], "refilled with other bytes");
        // A hit of the new version, so its file is the one read.
        let hit = wires
            .send(&Wire::Http1, Method::GET, "sf.test", "/slow", &ask, "")
            .await;
        assert!(hit.bytes[..] == again.bytes[..], "the new version's hit");
        for i in 0..40 {
            let path = format!("/filler{round}-{i}");
            let r = wires
                .send(&Wire::Http1, Method::GET, "sf.test", &path, &ask, "")
                .await;
            assert_eq!(r.bytes.len(), LEN);
        }
    };
    churn().await;

    // Read half of each body, slowly; churn again; read the rest. Every
    // byte is the first version's.
    let mut got_all = Vec::new();
    for (mut tcp, mut got) in readers {
        let mut buf = vec![0u8; 4096];
        for _ in 0..20 {
            let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
                .await
                .expect("more bytes")
                .unwrap();
            got.extend_from_slice(&buf[..n]);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut big = vec![0u8; 64 * 1024];
        while got.len() < LEN / 2 {
            let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut big))
                .await
                .expect("more bytes")
                .unwrap();
            assert!(n > 0, "the answer ended early");
            got.extend_from_slice(&big[..n]);
        }
        got_all.push((tcp, got));
    }
    churn().await;
    for (i, (mut tcp, mut got)) in got_all.into_iter().enumerate() {
        tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut got))
            .await
            .expect("the rest in time")
            .unwrap();
        let end = got
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
        assert!(
            head.contains("cache-status: calmcache; hit"),
            "reader {i}: {head}"
        );
        assert_eq!(got.len() - end, LEN, "reader {i}: body length");
        assert!(
            got[end..] == want[..],
            "reader {i}: the body changed under the reader"
        );
    }
    assert!(origin.hits_for("/slow") >= 3);
    let _ = std::fs::remove_dir_all(&dir);
}
