//! One slow-reader test for every zone kind: two clients read a large hit
//! slowly while that object is purged, refilled with other bytes and pushed
//! out by other large objects, twice; each must still get exactly the first
//! version's bytes. `zero_copy` runs it on a memory zone (spliced pages),
//! `disk_sendfile` on a disk zone (the file unlinked, renamed over and
//! evicted). Only the test bodies that call it say which zone it is.

use std::time::Duration;

use calmcache_testkit::{Origin, Wire, Wires};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::purge_integrity::TOKEN;
use crate::slow_readers::tight_connect;

/// What the test origin sends for `path` on its `n`-th request of it,
/// padded to `len` bytes.
pub(crate) fn origin_body(path: &str, n: u64, len: usize) -> Vec<u8> {
    let mut body = format!("path={path} n={n}").into_bytes();
    body.resize(len, b'.');
    body
}

/// The object the slow readers read, and how far they read before the
/// second churn.
pub(crate) struct SlowCase {
    /// The Host asked for.
    pub host: &'static str,
    /// The body's length: large enough that the zone holds only a few.
    pub len: usize,
    /// Bytes each reader has read before the second churn.
    pub read_before_churn: usize,
}

/// Runs the test on `wires` (whose proxy has the zone under test and the
/// purge token of `purge_integrity`) and returns once both readers got the
/// first version whole.
pub(crate) async fn slow_readers_keep_their_version(
    origin: &Origin,
    wires: &Wires,
    case: SlowCase,
) {
    let size = case.len.to_string();
    let ask = [("x-origin-body-bytes", size.as_str())];
    let stored = wires
        .send(&Wire::Http1, Method::GET, case.host, "/slow", &ask, "")
        .await;
    assert_eq!(stored.bytes.len(), case.len);
    let want = origin_body("/slow", 1, case.len);
    assert!(stored.bytes[..] == want[..], "the first fill");

    let mut readers = Vec::new();
    for _ in 0..2 {
        readers.push(start_reader(wires, case.host).await);
    }
    let mut round = 0;
    churn(wires, &case, &want, &mut round).await;
    // Read part of each body, slowly at first; churn again (the proxy's
    // own reference to the object may be gone by then); read the rest.
    let mut got_all = Vec::new();
    for (mut tcp, mut got) in readers {
        read_slowly(&mut tcp, &mut got, case.read_before_churn).await;
        got_all.push((tcp, got));
    }
    churn(wires, &case, &want, &mut round).await;
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
        assert_eq!(got.len() - end, case.len, "reader {i}: body length");
        assert!(
            got[end..] == want[..],
            "reader {i}: the body changed under the reader"
        );
    }
    assert!(origin.hits_for("/slow") >= 3);
}

/// A client with a tiny receive buffer that asked for `/slow` and read the
/// start of the answer.
async fn start_reader(wires: &Wires, host: &str) -> (TcpStream, Vec<u8>) {
    let addr = wires.proxy.running().proxy_addrs[0];
    let mut tcp = tight_connect(addr).await;
    let ask = format!("GET /slow HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tcp.write_all(ask.as_bytes()).await.unwrap();
    let mut first = vec![0u8; 2048];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut first))
        .await
        .expect("the answer starts")
        .unwrap();
    first.truncate(n);
    (tcp, first)
}

/// Reads 20 small pieces 5 ms apart, then large ones until `got` holds
/// `upto` bytes.
async fn read_slowly(tcp: &mut TcpStream, got: &mut Vec<u8>, upto: usize) {
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
    while got.len() < upto {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut big))
            .await
            .expect("more bytes")
            .unwrap();
        assert!(n > 0, "the answer ended early");
        got.extend_from_slice(&big[..n]);
    }
}

/// Purges `/slow`, refills it with other bytes (n=2, n=3...), reads a hit of
/// the new version (so a disk zone reads its new file), and pushes it out
/// with 40 other objects of the same size.
async fn churn(wires: &Wires, case: &SlowCase, first: &[u8], round: &mut u32) {
    *round += 1;
    let size = case.len.to_string();
    let ask = [("x-origin-body-bytes", size.as_str())];
    let purged = wires.proxy.purge(TOKEN, r#"{"url": "/slow"}"#).await;
    // (The second time, the fillers of the first have evicted it.)
    if *round == 1 {
        assert_eq!(purged["purged"], 1, "{purged}");
    }
    let again = wires
        .send(&Wire::Http1, Method::GET, case.host, "/slow", &ask, "")
        .await;
    assert_eq!(again.bytes.len(), case.len);
    assert!(
        again.bytes[..] != first[..],
        "refilled with other bytes: {:?}",
        String::from_utf8_lossy(&again.bytes[..20])
    );
    let hit = wires
        .send(&Wire::Http1, Method::GET, case.host, "/slow", &ask, "")
        .await;
    assert!(hit.bytes[..] == again.bytes[..], "the new version's hit");
    for i in 0..40 {
        let path = format!("/filler{round}-{i}");
        let r = wires
            .send(&Wire::Http1, Method::GET, case.host, &path, &ask, "")
            .await;
        assert_eq!(r.bytes.len(), case.len);
    }
}
