//! What a cached object really costs: RSS growth of this test process (its
//! own binary, one test) per part of an object, built as the proxy builds
//! it, next to the weight a memory zone charges for it.
//!
//! Run with `--nocapture` to see the breakdown.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use calmcache_core::{CacheKey, CachedObject, Freshness, MemoryTier, ObjectMeta, Tier};
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, DATE};
use http::{HeaderMap, HeaderValue, StatusCode};

/// This process's resident memory, in bytes (VmRSS of /proc/self/status).
fn rss() -> isize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<isize>().ok())
        .unwrap_or(0)
        * 1024
}

fn per(label: &str, a: isize, b: isize, n: usize) -> f64 {
    let v = (b - a) as f64 / n as f64;
    println!("{label:<44} {v:>8.1} B of RSS per object");
    v
}

/// The response head as hyper hands it over: four fields the bundled origin
/// sends, each value a slice of the connection's read buffer.
fn incoming(body_len: usize, read_buf: &Bytes) -> HeaderMap {
    let mut h = HeaderMap::new();
    let v = |s: &str| {
        let at = read_buf
            .windows(s.len())
            .position(|w| w == s.as_bytes())
            .unwrap_or(0);
        HeaderValue::from_maybe_shared(read_buf.slice(at..at + s.len()))
            .unwrap_or(HeaderValue::from_static("x"))
    };
    h.insert(CONTENT_TYPE, v("text/html; charset=utf-8"));
    h.insert(CACHE_CONTROL, v("max-age=86400"));
    h.insert(CONTENT_LENGTH, HeaderValue::from(body_len));
    h.insert(DATE, v("Tue, 01 Apr 2025 19:44:10 GMT"));
    h
}

/// The stored copy of the head, as the proxy makes it (`detach_headers`).
fn detach(h: &HeaderMap) -> HeaderMap {
    calmcache_core::object::stored_headers(h, &[])
}

fn meta() -> ObjectMeta {
    ObjectMeta {
        stored_at: tokio::time::Instant::now(),
        freshness: Freshness {
            lifetime: Duration::from_secs(86400),
            initial_age: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            stale_forbidden: false,
            immutable: false,
            source: calmcache_core::LifetimeSource::Route,
        },
        fetch_time: Duration::from_millis(1),
    }
}

fn body(len: usize) -> Bytes {
    // As the proxy collects it: one exactly-sized buffer.
    let mut b = BytesMut::with_capacity(len);
    b.extend_from_slice(&vec![b'x'; len]);
    b.freeze()
}

/// Fills a zone with `n` objects of `body_len` bytes as the proxy does
/// (stored head, collected body, then a first hit's clones); its RSS growth
/// and its accounted size per object. The zone is kept (returned) so that
/// the next fill does not reuse its memory.
fn fill(body_len: usize, n: usize, read_buf: &Bytes) -> (f64, f64, MemoryTier) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let before = rss();
    // Large enough for all (a zone preallocates its index for max_size / 4 KiB).
    let tier = MemoryTier::new((4 * n * (body_len + 4096)) as u64, 1 << 20);
    for i in 0..n {
        let key = CacheKey::new("http", "127.0.0.1:8080", &format!("/o/{i}"));
        let head = detach(&incoming(body_len, read_buf));
        let object = Arc::new(CachedObject::new(
            meta(),
            StatusCode::OK,
            head,
            body(body_len),
        ));
        // The first hit clones the head and the body: a vec-backed `Bytes`
        // is promoted to a shared one on its first clone.
        drop((object.served_headers(), object.body.clone()));
        rt.block_on(tier.insert(key, object)).unwrap();
    }
    let grown = (rss() - before) as f64 / n as f64;
    let accounted = tier.size_bytes() as f64 / n as f64;
    assert_eq!(tier.objects(), n as u64);
    (grown, accounted, tier)
}

/// A memory zone's size is what its objects really take: within 10% of the
/// RSS they add, for small and large bodies, so `max_size` bounds memory.
#[test]
fn a_zone_accounts_what_its_objects_really_cost() {
    let read_buf = Bytes::from_static(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncache-control: max-age=86400\r\ndate: Tue, 01 Apr 2025 19:44:10 GMT\r\n\r\n",
    );
    println!(
        "sizes: CachedObject {} B (in an Arc: +16), HeaderMap {} B, CacheKey {} B, Bytes {} B",
        std::mem::size_of::<CachedObject>(),
        std::mem::size_of::<HeaderMap>(),
        std::mem::size_of::<CacheKey>(),
        std::mem::size_of::<Bytes>(),
    );
    let mut kept = Vec::new();
    for (len, n) in [(1024, 100_000), (16 * 1024, 10_000), (100 * 1024, 2_000)] {
        let (grown, accounted, tier) = fill(len, n, &read_buf);
        println!(
            "{n} objects of {len} B: RSS {grown:.0} B per object, zone accounts {accounted:.0} B ({:.3})",
            accounted / grown
        );
        assert!(
            (accounted / grown - 1.0).abs() <= 0.10,
            "{len} B objects: the zone accounts {accounted:.0} B per object, RSS grew {grown:.0} B"
        );
        kept.push(tier);
    }
    breakdown(&read_buf);
}

/// Where the bytes of a 1 KB object go, part by part (printed).
fn breakdown(read_buf: &Bytes) {
    const N: usize = 100_000;
    let body_len = 1024;
    let s0 = rss();
    let keys: Vec<CacheKey> = (0..N)
        .map(|i| CacheKey::new("http", "127.0.0.1:8080", &format!("/o/{i}")))
        .collect();
    let s1 = rss();
    // As a zone keeps them: head and body in one buffer.
    let objects: Vec<Arc<CachedObject>> = (0..N)
        .map(|_| {
            let head = detach(&incoming(body_len, read_buf));
            let object = CachedObject::new(meta(), StatusCode::OK, head, body(body_len));
            Arc::new(object.packed().unwrap())
        })
        .collect();
    let s2 = rss();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let tier = MemoryTier::new(N as u64 * 4096, 1 << 20);
    for (k, o) in keys.iter().zip(&objects) {
        rt.block_on(tier.insert(k.clone(), o.clone())).unwrap();
    }
    let s3 = rss();
    for o in &objects {
        drop((o.served_headers(), o.body.clone()));
    }
    let s4 = rss();
    println!("where the bytes of {N} objects of {body_len} B go:");
    per("keys (CacheKey text, in a Vec)", s0, s1, N);
    per("objects (Arc + one buffer: head, body)", s1, s2, N);
    per("zone index (+ a key clone per insert)", s2, s3, N);
    per("a hit's headers and body", s3, s4, N);
    per("all of it", s0, s4, N);
    let o = &objects[0];
    println!(
        "one object: memory_cost {} B (CachedObject {} B inline; head {} fields, \
         its buffer shared with the body)",
        o.memory_cost(),
        std::mem::size_of::<CachedObject>(),
        o.head.len(),
    );
    println!(
        "accounted per object: {:.0} B",
        tier.size_bytes() as f64 / N as f64
    );
}
