//! Ranges on a miss (issue 25, item 12): a `Range` request for an object
//! that is not stored yet gets its 206 whatever the object's size. Headless
//! Chromium got `200` and the whole file for `bytes=0-1023` of an uncached
//! file over 256 KiB (the size from which a fill streams, read-while-write),
//! while the second request was a correct 206. Now a client asking for
//! 1 KB gets that KB as it arrives, never the rest, while the fill goes on
//! for the cache; waiters that join the fill get their own ranges; the
//! follow-up hit is a 206 and the origin was asked once. Over HTTP/1.1, h2c
//! and HTTP/2 over TLS, into a memory zone and a disk zone, for a small
//! object, a large one and a chunked one, with bad ranges too.

use std::time::Duration;

use calmcache_testkit::{stream_byte, Origin, Proxy, Reply, Wire, Wires};
use http::Method;

/// Larger than the 256 KiB a fill collects before it stores, and than the
/// 1 MiB from which a disk hit streams from its file.
const BIG: u64 = 2_000_000;
/// The small object: collected whole, then served.
const SMALL: u64 = 10_000;
/// Pause after each 64 KiB piece of a slow body: BIG takes 1.5 s at least.
const PAUSE_MS: u64 = 50;

/// Bytes `from..=to` of a generated body.
fn bytes_of(from: u64, to: u64) -> Vec<u8> {
    (from..=to).map(stream_byte).collect()
}

/// The origin's generated body of `len` bytes, its Content-Length sent or
/// not (`chunked`), slowly or not.
fn target(path: &str, len: u64, chunked: bool, slow: bool) -> String {
    let mut t = format!("{path}?x-origin-stream-bytes={len}&x-origin-header=ETag:%20%22v1%22");
    if chunked {
        t.push_str("&x-origin-chunked=1");
    }
    if slow {
        t.push_str(&format!("&x-origin-stream-pause-ms={PAUSE_MS}"));
    }
    t
}

struct Bench {
    wires: Wires,
    origin: Origin,
    zone: &'static str,
}

impl Bench {
    async fn send(&self, wire: &Wire, target: &str, headers: &[(&str, &str)]) -> Reply {
        (self.wires)
            .send(wire, Method::GET, "calm.test", target, headers, "")
            .await
    }

    async fn range(&self, wire: &Wire, target: &str, range: &str) -> Reply {
        self.send(wire, target, &[("range", range)]).await
    }

    /// Waits until `target` is stored: `only-if-cached` never reaches the
    /// origin and answers 504 until then (RFC 9111 §5.2.1.7).
    async fn stored(&self, wire: &Wire, target: &str) {
        let what = format!("{target} stored");
        crate::wait_until(Duration::from_secs(30), &what, async || {
            let r = self
                .send(
                    wire,
                    target,
                    &[("cache-control", "only-if-cached"), ("range", "bytes=0-0")],
                )
                .await;
            r.status != 504
        })
        .await;
    }
}

async fn bench(zone: &'static str) -> (Bench, Option<std::path::PathBuf>) {
    let origin = Origin::start().await;
    let mut proxy = Proxy::new(&origin)
        .zone("64MiB", "8MiB")
        .route("ttl = { 200 = \"60s\" }");
    let dir = (zone == "disk").then(|| crate::scratch("range-fill"));
    if let Some(dir) = &dir {
        proxy = proxy.disk_zone(dir, "");
    }
    let wires = Wires::start(proxy, "").await;
    (
        Bench {
            wires,
            origin,
            zone,
        },
        dir,
    )
}

/// A 206 of exactly `from..=to` with `content_range`.
fn assert_part(r: &Reply, from: u64, to: u64, content_range: &str, what: &str) {
    assert_eq!(
        r.status,
        206,
        "{what}: {} {:?}",
        r.cache_status(),
        r.headers
    );
    assert_eq!(r.header("content-range"), content_range, "{what}");
    assert_eq!(
        r.header("content-length"),
        (to - from + 1).to_string(),
        "{what}"
    );
    assert!(r.bytes[..] == bytes_of(from, to)[..], "{what}: wrong bytes");
}

/// The first KB of an object not stored yet, then the follow-up hit.
async fn first_kb_then_hit(b: &Bench, wire: &Wire, name: &str, len: u64, chunked: bool) {
    let label = format!("{} {} {name}", b.zone, wire.label());
    let path = format!("/{}/{}/{name}", b.zone, wire.label().replace(' ', "-"));
    let slow = len > SMALL;
    let t = target(&path, len, chunked, slow);
    let before = b.origin.bytes_streamed();
    let r = b.range(wire, &t, "bytes=0-1023").await;
    let sent = b.origin.bytes_streamed() - before;
    let complete = if chunked && slow {
        "*".to_string()
    } else {
        len.to_string()
    };
    assert_part(&r, 0, 1023, &format!("bytes 0-1023/{complete}"), &label);
    if slow {
        // The KB came while the origin was still sending the rest.
        assert!(
            sent < len,
            "{label}: the client waited for the whole object"
        );
    }
    b.stored(wire, &t).await;
    let again = b.range(wire, &t, "bytes=1000-1999").await;
    assert_part(
        &again,
        1000,
        1999,
        &format!("bytes 1000-1999/{len}"),
        &label,
    );
    assert!(
        again.cache_status_params().has("hit"),
        "{label}: {}",
        again.cache_status()
    );
    assert_eq!(
        b.origin.hits_for(&path),
        1,
        "{label}: the origin asked once"
    );
}

/// Two clients with different ranges of one slow miss: the leader and a
/// waiter that joins its fill each get their own part.
async fn waiter_gets_its_own_range(b: &Bench, wire: &Wire) {
    let label = format!("{} {} waiter", b.zone, wire.label());
    let path = format!("/{}/{}/waiter", b.zone, wire.label().replace(' ', "-"));
    let t = target(&path, BIG, false, true);
    let (lead, follow) = tokio::join!(b.range(wire, &t, "bytes=0-1023"), async {
        // Joins once the leader's fetch is under way.
        let what = format!("{label}: the leader's fetch");
        crate::wait_until(Duration::from_secs(10), &what, async || {
            b.origin.hits_for(&path) > 0
        })
        .await;
        b.range(wire, &t, "bytes=500000-500999").await
    });
    assert_part(&lead, 0, 1023, &format!("bytes 0-1023/{BIG}"), &label);
    assert_part(
        &follow,
        500_000,
        500_999,
        &format!("bytes 500000-500999/{BIG}"),
        &label,
    );
    assert_eq!(b.origin.hits_for(&path), 1, "{label}: one fetch");
}

/// Bad and odd ranges on a miss of a large object.
async fn bad_ranges(b: &Bench, wire: &Wire) {
    let label = format!("{} {}", b.zone, wire.label());
    let base = format!("/{}/{}", b.zone, wire.label().replace(' ', "-"));
    // Past the end of a known length: 416 with the length (RFC 9110 §15.5.17).
    let t = target(&format!("{base}/past"), BIG, false, false);
    let r = b.range(wire, &t, "bytes=5000000-").await;
    assert_eq!(r.status, 416, "{label} past: {}", r.cache_status());
    assert_eq!(
        r.header("content-range"),
        format!("bytes */{BIG}"),
        "{label}"
    );
    // The stored copy answers the same (a large disk file: its length).
    b.stored(wire, &t).await;
    let r = b.range(wire, &t, "bytes=5000000-").await;
    assert_eq!(r.status, 416, "{label} past, hit");
    assert_eq!(
        r.header("content-range"),
        format!("bytes */{BIG}"),
        "{label} hit"
    );
    // Not bytes syntax: ignored, the whole 200 (RFC 9110 §14.2).
    let t = target(&format!("{base}/junk"), BIG, false, false);
    for junk in ["bytes=abc", "bytes=10-5", "items=0-9"] {
        let r = b.range(wire, &t, junk).await;
        assert_eq!(r.status, 200, "{label} {junk}");
        assert_eq!(r.bytes.len() as u64, BIG, "{label} {junk}");
    }
    // If-Range: another tag is the whole 200, the stored one a 206.
    let t = target(&format!("{base}/ifrange"), BIG, false, true);
    let hdrs = [("range", "bytes=0-9"), ("if-range", "\"v1\"")];
    let (yes, no) = tokio::join!(
        b.send(wire, &t, &hdrs),
        b.send(wire, &t, &[("range", "bytes=0-9"), ("if-range", "\"v0\"")])
    );
    assert_part(&yes, 0, 9, &format!("bytes 0-9/{BIG}"), &label);
    assert_eq!(no.status, 200, "{label} if-range other");
    assert_eq!(no.bytes.len() as u64, BIG, "{label} if-range other");
    // Chunked: a suffix is known at the end; past the end is 416 then.
    let t = target(&format!("{base}/suffix"), BIG, true, false);
    let r = b.range(wire, &t, "bytes=-100").await;
    let (from, to) = (BIG - 100, BIG - 1);
    assert_part(&r, from, to, &format!("bytes {from}-{to}/{BIG}"), &label);
    let t = target(&format!("{base}/chunked-past"), BIG, true, false);
    let r = b.range(wire, &t, "bytes=3000000-3000010").await;
    assert_eq!(r.status, 416, "{label} chunked past: {}", r.cache_status());
    assert_eq!(
        r.header("content-range"),
        format!("bytes */{BIG}"),
        "{label}"
    );
    // Several ranges: multipart/byteranges, parts in the asked order.
    let t = target(&format!("{base}/multi"), BIG, false, true);
    let r = b.range(wire, &t, "bytes=100000-100009,0-9").await;
    assert_eq!(r.status, 206, "{label} multi");
    let ct = r.header("content-type").to_owned();
    assert!(ct.starts_with("multipart/byteranges"), "{label}: {ct}");
    assert!((r.bytes.len() as u64) < 1000, "{label}: only the parts");
    let text = String::from_utf8_lossy(&r.bytes);
    let first = text.find(&format!("bytes 100000-100009/{BIG}")).unwrap();
    let second = text.find(&format!("bytes 0-9/{BIG}")).unwrap();
    assert!(first < second, "{label}: parts in the asked order");
}

async fn every_case(zone: &'static str) {
    let (b, dir) = bench(zone).await;
    for wire in &b.wires.all {
        first_kb_then_hit(&b, wire, "small", SMALL, false).await;
        first_kb_then_hit(&b, wire, "big", BIG, false).await;
        first_kb_then_hit(&b, wire, "chunked", BIG, true).await;
        waiter_gets_its_own_range(&b, wire).await;
        bad_ranges(&b, wire).await;
    }
    drop(b);
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_on_a_miss_is_a_206_in_a_memory_zone() {
    every_case("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_on_a_miss_is_a_206_in_a_disk_zone() {
    every_case("disk").await;
}

/// On a route without a zone nothing is stored or streamed through a fill:
/// the client's `Range` (and `If-Range`) go to the origin as sent, over
/// every wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncached_route_sends_the_range_on() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin).no_zone(), "").await;
    for wire in &wires.all {
        let path = format!("/pass/{}", wire.label().replace(' ', "-"));
        let t = target(&path, BIG, false, false);
        let hdrs = [("range", "bytes=0-1023"), ("if-range", "\"v1\"")];
        let r = wires
            .send(wire, Method::GET, "calm.test", &t, &hdrs, "")
            .await;
        assert_eq!(
            r.status,
            200,
            "{}: the test origin ignores Range",
            wire.label()
        );
        let seen = origin.requests_for(&path);
        assert_eq!(seen.len(), 1, "{}", wire.label());
        assert_eq!(
            seen[0].header("range"),
            Some("bytes=0-1023"),
            "{}",
            wire.label()
        );
        assert_eq!(
            seen[0].header("if-range"),
            Some("\"v1\""),
            "{}",
            wire.label()
        );
    }
}
