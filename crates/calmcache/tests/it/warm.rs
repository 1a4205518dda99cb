//! Warm paths (issue 12, item 8): warmed for every scheme the listeners
//! serve, so TLS clients hit them too, and paced when the origin's answer
//! has no freshness lifetime instead of refetched every 10 ms.

use std::time::Duration;

use calmcache_testkit::{get_with, Origin, Proxy, Wires};
use http::Method;

use crate::wait_until;

/// Issue 12: warmed copies were keyed on the plain-HTTP scheme only; the
/// first TLS client missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_paths_give_tls_clients_a_hit_on_their_first_request() {
    // The default key has the scheme: one fetch per scheme. A key without
    // it: one fetch for both.
    for (template, fetches) in [("", 2), ("key = \"$host$uri$is_args$args\"\n", 1)] {
        let origin = Origin::start().await;
        let route = format!(
            "ttl = {{ 200 = \"600s\" }}\nwarm = [\"/w\"]\nwarm_host = \"calm.test\"\n{template}"
        );
        let wires = Wires::start(Proxy::new(&origin).route(&route), "").await;
        wait_until(Duration::from_secs(5), "warm fetches", async || {
            origin.hits_for("/w") >= fetches
        })
        .await;
        // Each wire's first request: a hit.
        for wire in &wires.all {
            let r = wires
                .send(wire, Method::GET, "calm.test", "/w", &[], "")
                .await;
            assert!(
                r.cache_status_params().has("hit"),
                "{} {template:?}: {}",
                wire.label(),
                r.cache_status()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(origin.hits_for("/w"), fetches, "{template:?}");
        // Each fetch says which scheme it is for, as a client's would.
        let mut protos: Vec<String> = origin
            .requests_for("/w")
            .iter()
            .map(|r| r.headers["x-forwarded-proto"].to_str().unwrap().to_owned())
            .collect();
        protos.sort();
        let expected: &[&str] = if fetches == 2 {
            &["http", "https"]
        } else {
            &["http"]
        };
        assert_eq!(protos, expected, "{template:?}");
        wires.proxy.stop().await;
    }
}

/// Behind a TLS terminator (a route with `trusted_proxies`), the plain
/// listener serves https requests too: both schemes are warmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_paths_behind_a_trusted_tls_terminator_are_warmed_for_https() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"600s\" }\nwarm = [\"/t\"]\nwarm_host = \"calm.test\"\ntrusted_proxies = [\"127.0.0.1\"]")
        .start()
        .await;
    wait_until(Duration::from_secs(5), "warm fetches", async || {
        origin.hits_for("/t") >= 2
    })
    .await;
    for proto in ["http", "https"] {
        let r = get_with(
            Method::GET,
            &proxy.url("/t"),
            &[("host", "calm.test"), ("x-forwarded-proto", proto)],
        )
        .await;
        assert!(
            r.cache_status_params().has("hit"),
            "{proto}: {}",
            r.cache_status()
        );
    }
    assert_eq!(origin.hits_for("/t"), 2);
    proxy.stop().await;
}

/// Issue 12: a warmed answer stale on arrival (`no-cache` with an ETag, or
/// `max-age=0`) was refreshed every 10 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_path_without_freshness_is_fetched_a_handful_of_times() {
    let origin = Origin::start().await;
    let no_cache = "/nc?x-origin-cache-control=no-cache&x-origin-header=ETag:%20%22v1%22";
    let max_age_0 = "/ma0?x-origin-cache-control=max-age=0";
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route(&format!("warm = [\"{no_cache}\", \"{max_age_0}\"]"))
        .start()
        .await;
    // Fetches at 0 s and 1 s (then 3 s, 7 s...).
    tokio::time::sleep(Duration::from_millis(2200)).await;
    for path in ["/nc", "/ma0"] {
        let n = origin.hits_for(path);
        assert!((1..=4).contains(&n), "{path}: {n} fetches in 2 s");
    }
    // The no-cache answer is revalidated (its ETag), not refetched whole.
    let conditional = origin
        .requests_for("/nc")
        .iter()
        .filter(|r| r.headers.contains_key("if-none-match"))
        .count();
    assert!(conditional >= 1, "revalidated");
    proxy.stop().await;
}
