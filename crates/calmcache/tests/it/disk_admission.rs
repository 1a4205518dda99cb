//! A disk zone's admission through the proxy (core disk/admission.rs), over
//! HTTP/1.1, h2c and HTTP/2 over TLS: under the default (`admission =
//! "frequent"`) a roomy zone stores every first answer as before; a full
//! one serves a new URL's first miss without storing it, so a scan of
//! one-time URLs leaves the hot set in place, and stores its second. A
//! fleet node's full zone treats a copy taken from Redis the same way, and
//! still shares a first miss it did not keep.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use calmcache_testkit::wire::{Wire, Wires};
use calmcache_testkit::{Origin, Proxy};
use http::Method;

/// Body of every answer here: a few KiB, so a 128 KiB zone holds ~28.
const BODY: &str = "4000";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-it-admission-{name}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn start(origin: &Origin, dir: &std::path::Path, zone_keys: &str) -> Wires {
    let proxy = Proxy::new(origin)
        .zone("128KiB", "8KiB")
        .disk_zone(dir, zone_keys)
        .route("ttl = { 200 = \"60s\" }");
    Wires::start(proxy, "").await
}

/// A fleet node on `redis` with a small RAM zone and a 128 KiB disk zone
/// in `dir`.
async fn fleet_node(
    origin: &Origin,
    redis: &calmcache_testkit::redis::Redis,
    dir: &std::path::Path,
) -> Wires {
    let proxy = Proxy::new(origin)
        .zone("128KiB", "8KiB")
        .disk_zone(dir, "")
        .route("ttl = { 200 = \"60s\" }")
        .fleet(&redis.url(), "timeout = \"200ms\"");
    Wires::start(proxy, "").await
}

/// GET `path` over `wire`; (status, Cache-Status).
async fn fetch(wires: &Wires, wire: &Wire, path: &str) -> (u16, String) {
    let headers = [("x-origin-body-bytes", BODY)];
    let r = wires
        .send(wire, Method::GET, "calm.test", path, &headers, "")
        .await;
    (r.status.as_u16(), r.cache_status())
}

async fn zone_figure(wires: &Wires, pointer: &str) -> u64 {
    let status = wires.proxy.status().await;
    status["zones"]["ram"]
        .pointer(pointer)
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("no {pointer} in {status}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_default_a_first_answer_is_stored_while_the_zone_has_room() {
    let origin = Origin::start().await;
    let dir = scratch("roomy");
    let wires = start(&origin, &dir, "").await;
    for wire in &wires.all {
        let path = format!("/first/{}", wire.label().replace(' ', "-"));
        let (status, cs) = fetch(&wires, wire, &path).await;
        assert_eq!(status, 200, "{}", wire.label());
        assert!(cs.contains("stored"), "{}: {cs}", wire.label());
        let (_, cs) = fetch(&wires, wire, &path).await;
        assert!(cs.contains("hit"), "{}: {cs}", wire.label());
        assert_eq!(origin.hits_for(&path), 1, "{}", wire.label());
    }
    assert_eq!(zone_figure(&wires, "/disk/not_admitted").await, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Fills the zone past 90% with a hot set asked for twice each; its paths.
async fn fill_hot(wires: &Wires, wire: &Wire, prefix: &str) -> Vec<String> {
    let max = 128 * 1024;
    let mut hot = Vec::new();
    while zone_figure(wires, "/size_bytes").await <= max / 10 * 9 {
        assert!(hot.len() < 40, "the zone never filled");
        let path = format!("{prefix}/hot/{}", hot.len());
        for _ in 0..2 {
            assert_eq!(fetch(wires, wire, &path).await.0, 200);
        }
        hot.push(path);
    }
    hot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_does_not_evict_the_hot_set_of_a_full_zone() {
    let origin = Origin::start().await;
    for (n, wire_label) in ["HTTP/1.1", "h2c", "HTTP/2"].iter().enumerate() {
        // A fresh zone per protocol: each fills its own.
        let dir = scratch(&format!("scan-{n}"));
        let wires = start(&origin, &dir, "").await;
        let wire = &wires.all[n];
        let label = wire.label().replace(' ', "-");
        let hot = fill_hot(&wires, wire, &format!("/{label}")).await;
        let held = zone_figure(&wires, "/objects").await;
        // A crawler: 60 URLs (twice what the zone holds) once each.
        for i in 0..60 {
            let (status, cs) = fetch(&wires, wire, &format!("/{label}/scan/{i}")).await;
            assert_eq!(status, 200, "{wire_label}");
            assert!(!cs.contains("stored"), "{wire_label}: {cs}");
            assert!(cs.contains("not-admitted"), "{wire_label}: {cs}");
        }
        assert_eq!(zone_figure(&wires, "/disk/not_admitted").await, 60);
        assert_eq!(zone_figure(&wires, "/objects").await, held);
        // Every hot URL is still a hit: the origin sees none of them.
        for path in &hot {
            let (_, cs) = fetch(&wires, wire, path).await;
            assert!(cs.contains("hit"), "{wire_label} {path}: {cs}");
            assert_eq!(origin.hits_for(path), 1, "{wire_label} {path}");
        }
        // A scanned URL asked for again is stored on this second miss.
        let again = format!("/{label}/scan/7");
        let (_, cs) = fetch(&wires, wire, &again).await;
        assert!(cs.contains("stored"), "{wire_label}: {cs}");
        let (_, cs) = fetch(&wires, wire, &again).await;
        assert!(cs.contains("hit"), "{wire_label}: {cs}");
        drop(wires);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_all_stores_every_miss_as_before() {
    let origin = Origin::start().await;
    let dir = scratch("all");
    let wires = start(&origin, &dir, "admission = \"all\"").await;
    let wire = &wires.all[0];
    fill_hot(&wires, wire, "/all").await;
    let (_, cs) = fetch(&wires, wire, "/all/scan/0").await;
    assert!(cs.contains("stored"), "{cs}");
    assert_eq!(zone_figure(&wires, "/disk/not_admitted").await, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fleet node's disk zone (issue 29, "features meet defaults": the fleet
/// and admission). Node B's zone is full; node A, roomy, fetches a new URL
/// and shares it through Redis. B's first request for it is a hit of the
/// shared tier (the origin asked once for the fleet), and B's zone decides
/// as for any new URL: not stored on that first miss, stored on the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_node_admits_what_it_takes_from_redis_as_any_new_url() {
    let redis = calmcache_testkit::redis::Redis::start();
    let origin = Origin::start().await;
    let (dir_a, dir_b) = (scratch("fleet-a"), scratch("fleet-b"));
    let a = fleet_node(&origin, &redis, &dir_a).await;
    let b = fleet_node(&origin, &redis, &dir_b).await;
    let wire = &Wire::Http1;
    fill_hot(&b, wire, "/b").await;
    let (_, cs) = fetch(&a, wire, "/new").await;
    assert!(cs.contains("stored"), "A stores it: {cs}");
    crate::wait_until(
        std::time::Duration::from_secs(10),
        "A's commit to redis",
        async || crate::fleet::sum(std::slice::from_ref(&a.proxy), "commits").await >= 1,
    )
    .await;
    let refused = zone_figure(&b, "/disk/not_admitted").await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (status, cs) = fetch(&b, wire, "/new").await;
        assert_eq!(status, 200);
        seen.push(cs);
    }
    // First miss: from Redis, refused by B's full zone (counted); second:
    // from Redis again, now stored; third: B's own hit.
    assert!(
        seen[0].contains("hit") && seen[0].contains("detail=fleet"),
        "{seen:?}"
    );
    assert!(
        seen[1].contains("hit") && seen[1].contains("detail=fleet"),
        "{seen:?}"
    );
    assert!(
        seen[2].contains("hit") && !seen[2].contains("detail"),
        "{seen:?}"
    );
    let refused_after = zone_figure(&b, "/disk/not_admitted").await;
    assert_eq!(refused_after, refused + 1, "{seen:?}");
    assert_eq!(
        origin.hits_for("/new"),
        1,
        "one fetch for the fleet: {seen:?}"
    );
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
}

/// The other way round: node A's full zone keeps a first miss out of its
/// disk, but not out of the fleet. The copy still goes to Redis under A's
/// lease, so node B (and every other node) takes it from there: the origin
/// is asked once for the fleet, over every wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_miss_a_full_zone_does_not_admit_is_still_shared() {
    let redis = calmcache_testkit::redis::Redis::start();
    let origin = Origin::start().await;
    let (dir_a, dir_b) = (scratch("shared-a"), scratch("shared-b"));
    let a = fleet_node(&origin, &redis, &dir_a).await;
    let b = fleet_node(&origin, &redis, &dir_b).await;
    fill_hot(&a, &Wire::Http1, "/a").await;
    for (n, wire) in a.all.iter().enumerate() {
        let path = format!("/cold/{n}");
        let commits = crate::fleet::sum(std::slice::from_ref(&a.proxy), "commits").await;
        let (status, cs) = fetch(&a, wire, &path).await;
        assert_eq!(status, 200, "{}", wire.label());
        assert!(cs.contains("not-admitted"), "{}: {cs}", wire.label());
        crate::wait_until(
            std::time::Duration::from_secs(10),
            "A's commit of a copy its zone did not keep",
            async || crate::fleet::sum(std::slice::from_ref(&a.proxy), "commits").await > commits,
        )
        .await;
        let (status, cs) = fetch(&b, &b.all[n], &path).await;
        assert_eq!(status, 200, "{}", wire.label());
        assert!(
            cs.contains("hit") && cs.contains("detail=fleet"),
            "{}: B takes A's copy: {cs}",
            wire.label()
        );
        assert_eq!(origin.hits_for(&path), 1, "{}: one fetch", wire.label());
    }
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
}
