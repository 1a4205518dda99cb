//! The memory zone under a stream of distinct objects.

use calmcache_testkit::{get_with, Origin, Proxy};
use http::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_zone_stays_under_max_size_while_thousands_of_objects_pass() {
    let origin = Origin::start().await;
    let max = 256 * 1024u64;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"1h\" }")
        .zone("256KiB", "16KiB")
        .start()
        .await;
    let body = ("x-origin-body-bytes", "2000");
    for batch in 0..30 {
        let mut tasks = Vec::new();
        for i in 0..100 {
            let url = proxy.url(&format!("/obj/{batch}/{i}"));
            tasks.push(tokio::spawn(async move {
                get_with(Method::GET, &url, &[body]).await.status
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
        let status = proxy.status().await;
        let size = status["zones"]["ram"]["size_bytes"].as_u64().unwrap();
        assert!(
            size <= max,
            "zone at {size} bytes > {max} after batch {batch}"
        );
    }
    let status = proxy.status().await;
    let objects = status["zones"]["ram"]["objects"].as_u64().unwrap();
    assert!(
        objects >= 50,
        "the zone still holds many objects: {objects}"
    );
    assert_eq!(status["zones"]["ram"]["stores"], 3000);
}

/// Regression (issue 16): zones reached through hash placement (`zones =
/// [...]` on a route) read `requests: 0` in /status and had no counters in
/// /metrics: only a route with a single zone was counted in it. Each placed
/// zone now counts the answers placed on it, over HTTP/1.1, h2c and HTTP/2
/// over TLS alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_placed_zones_count_the_requests_placed_on_them() {
    use calmcache_testkit::Wires;
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).no_zone().route(
        "zones = [\"ram\", \"b\"]\nttl = { 200 = \"1h\" }\n\
         [zones.b]\nkind = \"memory\"\nmax_size = \"8MiB\"",
    );
    let wires = Wires::start(proxy, "").await;
    // 30 paths, each asked twice over each wire: two objects per path (the
    // key has the scheme: http for HTTP/1.1 and h2c, https for TLS), each
    // placed in one zone, each a miss first and a hit after.
    let keys = 30;
    for i in 0..keys {
        for round in 0..2 {
            for wire in &wires.all {
                let path = format!("/spread/{i}");
                let reply = wires
                    .send(wire, Method::GET, "zones.test", &path, &[], "")
                    .await;
                assert_eq!(reply.status, 200, "{} {path} round {round}", wire.label());
            }
        }
    }
    let status = wires.proxy.status().await;
    let count = |zone: &str, field: &str| status["zones"][zone][field].as_u64().unwrap();
    let (mut requests, mut hits, mut misses) = (0, 0, 0);
    for zone in ["ram", "b"] {
        let (r, h, m) = (
            count(zone, "requests"),
            count(zone, "hits"),
            count(zone, "misses"),
        );
        // Both zones got keys (60 over two equal weights); one miss per
        // object placed there, every other answer a hit.
        assert!(m > 0, "{zone}: no key placed\n{status:#}");
        assert_eq!(m, count(zone, "objects"), "{zone}\n{status:#}");
        assert_eq!(h + m, r, "{zone}\n{status:#}");
        (requests, hits, misses) = (requests + r, hits + h, misses + m);
    }
    assert_eq!(requests, keys * 6);
    assert_eq!((hits, misses), (keys * 4, keys * 2));
    // The route's own counters are the sum.
    assert_eq!(
        status["routes"]["test"]["requests"].as_u64(),
        Some(requests)
    );
    // /metrics: the same numbers.
    let metrics = get_with(Method::GET, &wires.proxy.admin_url("/metrics"), &[]).await;
    for zone in ["ram", "b"] {
        for (name, field) in [
            ("calmcache_zone_requests_total", "requests"),
            ("calmcache_zone_hits_total", "hits"),
            ("calmcache_zone_misses_total", "misses"),
        ] {
            let line = format!("{name}{{zone=\"{zone}\"}} {}", count(zone, field));
            assert!(
                metrics.body.lines().any(|l| l == line),
                "missing {line:?} in\n{}",
                metrics.body
            );
        }
    }
    assert_eq!(origin.hits_for("/spread/0"), 2);
}
