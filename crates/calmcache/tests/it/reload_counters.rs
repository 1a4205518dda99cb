//! Counters survive a reload (issue 25, item 11): every counter of a
//! route, a zone and an upstream that the new config still has, in
//! `/status` and in `/metrics`, never goes back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use calmcache::Config;
use calmcache_testkit::{get, Origin};

use crate::{free_port, scratch, wait_until};

fn config(origin: &Origin, port: u16, admin: u16, extra: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nthreads = 2\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [upstreams.origin]\nservers = [\"{}\"]\n\
         [zones.ram]\nkind = \"memory\"\nmax_size = \"16MiB\"\n\
         [zones.ram2]\nkind = \"memory\"\nmax_size = \"16MiB\"\n\
         [[routes]]\nname = \"spread\"\nmatch = \"^/s/\"\nupstream = \"origin\"\n\
         zones = [\"ram\", \"ram2\"]\nttl = {{ 200 = \"1h\" }}\n\
         [[routes]]\nname = \"passed\"\nmatch = \"^/p/\"\nupstream = \"origin\"\n\
         {extra}\
         [[routes]]\nname = \"cached\"\nupstream = \"origin\"\nzone = \"ram\"\n\
         ttl = {{ 200 = \"1h\" }}\n",
        origin.addr()
    )
}

/// Requests from a few clients until stopped (or 20,000 each): misses and
/// hits on the cached and spread routes, passes on the uncached one.
fn load(
    port: u16,
    stop: &Arc<AtomicBool>,
    sent: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4u32)
        .map(|c| {
            let (stop, sent) = (stop.clone(), sent.clone());
            tokio::spawn(async move {
                for i in 0..20_000u32 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let path = match (c + i) % 3 {
                        0 => format!("/c/{}", i % 40),
                        1 => format!("/s/{}", i % 40),
                        _ => format!("/p/{i}"),
                    };
                    let reply = get(&format!("http://127.0.0.1:{port}{path}")).await;
                    assert_eq!(reply.status, 200, "{path}");
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// Every counter of `/status` for routes, zones and upstreams, by path.
fn status_counters(status: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    // The activity counters sit flat in each route's and zone's object,
    // beside gauges (a zone's size and objects) that may go down.
    let gauges = ["size_bytes", "max_size_bytes", "objects"];
    for kind in ["routes", "zones"] {
        for (name, item) in status[kind].as_object().unwrap() {
            for (counter, v) in item.as_object().unwrap() {
                if let (Some(v), false) = (v.as_u64(), gauges.contains(&counter.as_str())) {
                    out.insert(format!("{kind}.{name}.{counter}"), v);
                }
            }
        }
    }
    for (name, u) in status["upstreams"].as_object().unwrap() {
        for counter in ["requests", "errors", "skipped", "all_down"] {
            let v = u[counter].as_u64().unwrap();
            out.insert(format!("upstreams.{name}.{counter}"), v);
        }
    }
    out
}

/// Every sample of a route, zone or upstream counter family (and the
/// upstream latency histogram's counts) in `/metrics` text.
fn metric_counters(text: &str) -> BTreeMap<String, f64> {
    let families = ["calmcache_route_", "calmcache_zone_", "calmcache_upstream_"];
    let counters = ["_total", "_count", "_sum", "_bucket"];
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let name = series.split('{').next().unwrap_or("");
            families.iter().any(|f| name.starts_with(f))
                && counters.iter().any(|c| name.ends_with(c))
        })
        .map(|(series, v)| (series.to_owned(), v.parse().unwrap()))
        .collect()
}

async fn snapshot(admin: u16) -> (BTreeMap<String, u64>, BTreeMap<String, f64>) {
    let status = get(&format!("http://127.0.0.1:{admin}/status")).await;
    let status: serde_json::Value = serde_json::from_str(&status.body).unwrap();
    let metrics = get(&format!("http://127.0.0.1:{admin}/metrics")).await;
    (status_counters(&status), metric_counters(&metrics.body))
}

/// Each counter of `before` is in `after` and not lower, but those of the
/// route `gone` (removed by the reload between them).
fn assert_monotonic<T: PartialOrd + std::fmt::Debug>(
    what: &str,
    before: &BTreeMap<String, T>,
    after: &BTreeMap<String, T>,
    gone: &str,
) {
    let of_gone = |k: &str| {
        !gone.is_empty()
            && (k.starts_with(&format!("routes.{gone}."))
                || k.contains(&format!("route=\"{gone}\"")))
    };
    let back: Vec<String> = before
        .iter()
        .filter(|(k, _)| !of_gone(k))
        .filter(|(k, v)| after.get(*k).is_none_or(|a| a < *v))
        .map(|(k, v)| format!("{k}: {v:?} -> {:?}", after.get(k)))
        .collect();
    assert!(
        back.is_empty(),
        "{what}: counters went back:\n{}",
        back.join("\n")
    );
}

/// Regression: a reload, even of an unchanged file, set every route, zone
/// and upstream counter back to 0 (`calmcache_route_requests_total`,
/// `calmcache_zone_requests_total`, `calmcache_upstream_requests_total`
/// ...), which Prometheus reads as a restart. Under load: an unchanged
/// reload, then one that adds a route and one that removes it again; every
/// counter of every family in /status and /metrics only goes up, and the
/// zone of a removed route keeps what it counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_counter_family_survives_a_reload_under_load() {
    let origin = Origin::start().await;
    let dir = scratch("reload-counters");
    let path = dir.join("calmcache.toml");
    let (port, admin) = (free_port(), free_port());
    std::fs::write(&path, config(&origin, port, admin, "")).unwrap();
    let running = calmcache::start_from(&Config::from_file(&path).unwrap(), Some(path.clone()))
        .await
        .unwrap();
    let (stop, sent) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let clients = load(port, &stop, &sent);
    let extra = "[[routes]]\nname = \"extra\"\nmatch = \"^/c/1\"\nupstream = \"origin\"\n\
                 zone = \"ram\"\nttl = { 200 = \"1h\" }\n";
    // (what, the extra route, the route the reload removes)
    let steps = [
        ("unchanged", "", ""),
        ("a route added", extra, ""),
        ("that route removed", "", "extra"),
    ];
    let mut previous = None;
    for (what, route, gone) in steps {
        let at = sent.load(Ordering::Relaxed);
        wait_until(Duration::from_secs(20), "load runs", async || {
            sent.load(Ordering::Relaxed) >= at + 300
        })
        .await;
        let before = snapshot(admin).await;
        if let Some(earlier) = &previous {
            let (s, m) = earlier;
            assert_monotonic(what, s, &before.0, "");
            assert_monotonic(what, m, &before.1, "");
        }
        std::fs::write(&path, config(&origin, port, admin, route)).unwrap();
        running.reloader().reload_file().await.unwrap();
        let after = snapshot(admin).await;
        assert_monotonic(what, &before.0, &after.0, gone);
        assert_monotonic(what, &before.1, &after.1, gone);
        assert!(after.0["routes.cached.requests"] > 0, "{what}");
        assert!(after.0["upstreams.origin.requests"] > 0, "{what}");
        previous = Some(after);
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        tokio::time::timeout(Duration::from_secs(20), client)
            .await
            .expect("bounded")
            .unwrap();
    }
    let (status, metrics) = snapshot(admin).await;
    let (s, m) = previous.as_ref().unwrap();
    assert_monotonic("after the load", s, &status, "");
    assert_monotonic("after the load", m, &metrics, "");
    for family in [
        "route_requests_total",
        "zone_requests_total",
        "upstream_requests_total",
    ] {
        let name = format!("calmcache_{family}");
        assert!(
            metrics.keys().any(|k| k.starts_with(&name)),
            "{name} missing"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Regression (review of issue 25): a reload folded a removed route's counts
/// into its zone's own counters while it built the new generation, before
/// binding its listeners; when a bind then refused the reload, the running
/// generation still had that route and its zone counted it twice (and a
/// later reload that removed it folded it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_changes_no_counter() {
    let origin = Origin::start().await;
    let dir = scratch("reload-refused-counters");
    let path = dir.join("calmcache.toml");
    let (port, admin) = (free_port(), free_port());
    let extra = "[[routes]]\nname = \"extra\"\nmatch = \"^/c/1\"\nupstream = \"origin\"\n\
                 zone = \"ram\"\nttl = { 200 = \"1h\" }\n";
    std::fs::write(&path, config(&origin, port, admin, extra)).unwrap();
    let running = calmcache::start_from(&Config::from_file(&path).unwrap(), Some(path.clone()))
        .await
        .unwrap();
    for i in 0..20 {
        let reply = get(&format!("http://127.0.0.1:{port}/c/1{}", i % 5)).await;
        assert_eq!(reply.status, 200);
    }
    let zone_requests = |s: &BTreeMap<String, u64>| s["zones.ram.requests"];
    let (before, _) = snapshot(admin).await;
    assert_eq!(before["routes.extra.requests"], 20, "{before:?}");
    // The same config without the extra route, and one more listen address
    // that is taken: the reload is refused at the bind.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap();
    let refused = config(&origin, port, admin, "").replace(
        &format!("listen = [\"127.0.0.1:{port}\"]"),
        &format!("listen = [\"127.0.0.1:{port}\", \"{busy}\"]"),
    );
    std::fs::write(&path, refused).unwrap();
    assert!(
        running.reloader().reload_file().await.is_err(),
        "a taken port refuses the reload"
    );
    let (after_refused, _) = snapshot(admin).await;
    assert_eq!(
        zone_requests(&after_refused),
        zone_requests(&before),
        "a refused reload counted the removed route in its zone again"
    );
    // The same reload without the taken port: the zone keeps the route's
    // counts once.
    std::fs::write(&path, config(&origin, port, admin, "")).unwrap();
    running.reloader().reload_file().await.unwrap();
    let (after, _) = snapshot(admin).await;
    assert_eq!(zone_requests(&after), zone_requests(&before), "{after:?}");
    drop(taken);
    let _ = std::fs::remove_dir_all(&dir);
}
