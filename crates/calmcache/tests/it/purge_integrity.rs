//! Purges that cannot be dodged or lost (issue 12, item 6): a flood of junk
//! `Host` values cannot hide a host from a path purge, a soft purge on a
//! disk zone survives a restart, and the key `Cache-Status` shows is the key
//! a purge by key takes, for default and custom templates and Vary'd URLs.

use std::time::Duration;

use calmcache_testkit::raw::send_raw_keepalive;
use calmcache_testkit::{get_with, Origin, Proxy, Wire, Wires};
use http::Method;

use crate::{scratch, wait_until};

pub(crate) const TOKEN: &str = "purge-integrity-token";

pub(crate) fn admin() -> String {
    format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"")
}

/// Issue 12: a route remembers 10,000 hosts for path purges; after 10,000
/// junk `Host` values `{"url": "/x"}` silently missed the real host. Now a
/// full host set makes the purge scan the route's zones, and say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_purge_after_a_junk_host_flood_still_reaches_the_real_host() {
    let origin = Origin::start().await;
    let builder = Proxy::new(&origin)
        .admin(&admin())
        .route("ttl = { 200 = \"600s\" }\nrefresh = \"lock\"");
    let wires = Wires::start(builder, "").await;
    let proxy = &wires.proxy;
    let addr = proxy.running().proxy_addrs[0];
    // 10,050 junk hosts, each storing /junk: 21 keep-alive connections of
    // 480 requests (under keepalive_requests), four at a time.
    let hosts: Vec<String> = (0..10_050).map(|i| format!("junk{i}.example")).collect();
    let started = std::time::Instant::now();
    let batches: Vec<Vec<Vec<u8>>> = hosts
        .chunks(480)
        .map(|chunk| {
            chunk
                .iter()
                .map(|h| format!("GET /junk HTTP/1.1\r\nHost: {h}\r\n\r\n").into_bytes())
                .collect()
        })
        .collect();
    let mut stored = 0;
    for group in batches.chunks(4) {
        let mut tasks = Vec::new();
        for batch in group {
            let batch = batch.clone();
            tasks.push(tokio::spawn(async move {
                let reqs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                send_raw_keepalive(addr, &reqs).await.unwrap()
            }));
        }
        for t in tasks {
            let replies = tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .expect("bounded")
                .unwrap();
            assert!(replies.iter().all(|r| r.status == 200));
            stored += replies.len();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "flood bounded"
        );
    }
    assert_eq!(stored, 10_050, "every request answered on its connection");
    assert_eq!(origin.hits_for("/junk"), 10_050, "every junk host stored");

    // The real host stores /x over every wire: http and https keys.
    let real = "real.example";
    for wire in &wires.all {
        wires.send(wire, Method::GET, real, "/x", &[], "").await;
        let r = wires.send(wire, Method::GET, real, "/x", &[], "").await;
        assert!(r.is_hit(), "{}: {}", wire.label(), r.cache_status());
    }
    let answer = proxy.purge(TOKEN, r#"{"url": "/x"}"#).await;
    assert_eq!(answer["purged"], 2, "http and https copies: {answer}");
    assert_eq!(answer["scanned"], true, "{answer}");
    // The first request over each scheme misses (h2c shares HTTP/1.1's key,
    // stored again by its miss).
    for wire in [&wires.all[0], &wires.all[2]] {
        let r = wires.send(wire, Method::GET, real, "/x", &[], "").await;
        assert!(
            !r.is_hit(),
            "{}: purged: {}",
            wire.label(),
            r.cache_status()
        );
    }
    // Soft, scanned too: served stale at once.
    let answer = proxy.purge(TOKEN, r#"{"url": "/x", "soft": true}"#).await;
    assert_eq!(answer["purged"], 2, "{answer}");
    let r = wires
        .send(&Wire::Http1, Method::GET, real, "/x", &[], "")
        .await;
    assert!(
        r.cache_status_params().ttl().unwrap() <= 0.0,
        "{}",
        r.cache_status()
    );
    // A purge of everything starts the host set over: no scan after it.
    proxy.purge(TOKEN, r#"{"all": true}"#).await;
    wires
        .send(&Wire::Http1, Method::GET, real, "/x", &[], "")
        .await;
    let answer = proxy.purge(TOKEN, r#"{"url": "/x"}"#).await;
    assert_eq!(answer["purged"], 1, "{answer}");
    assert!(answer.get("scanned").is_none(), "{answer}");
}

/// Object files in the zone `dir` whose header says they expired (no
/// freshness lifetime left of the 600 s they were stored with).
fn marked_files(dir: &std::path::Path) -> usize {
    let mut marked = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if let Ok(summary) = calmcache_core::disk::format::read_summary(&e.path()) {
                marked += usize::from(summary.freshness.lifetime < Duration::from_secs(60));
            }
        }
    }
    marked
}

/// Issue 12: soft purges of disk objects lived only in memory; after a
/// restart the objects came back fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_purge_on_a_disk_zone_survives_a_restart() {
    let origin = Origin::start().await;
    let dir = scratch("soft-restart");
    // The key has no host: the restarted proxy listens on another port.
    let start = || {
        Proxy::new(&origin)
            .admin(&admin())
            .disk_zone(&dir, "")
            .route("ttl = { 200 = \"600s\" }\nkey = \"$uri$is_args$args\"\nrefresh = \"lock\"")
            .start()
    };
    let proxy = start().await;
    for path in ["/s1", "/s2"] {
        get_with(Method::GET, &proxy.url(path), &[]).await;
        assert!(get_with(Method::GET, &proxy.url(path), &[]).await.is_hit());
    }
    let answer = proxy.purge(TOKEN, r#"{"url": "/s1", "soft": true}"#).await;
    assert_eq!(answer["purged"], 1, "{answer}");
    // The mark reaches the file's header on a blocking thread.
    wait_until(Duration::from_secs(5), "the mark in the file", async || {
        marked_files(&dir) == 1
    })
    .await;
    proxy.stop().await;

    let proxy = start().await;
    wait_until(Duration::from_secs(10), "the loader", async || {
        proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
    })
    .await;
    let before = origin.hits_for("/s1");
    let r = get_with(Method::GET, &proxy.url("/s1"), &[]).await;
    assert!(r.is_hit(), "the stale copy is served: {}", r.cache_status());
    assert!(
        r.cache_status_params().ttl().unwrap() <= 0.0,
        "soft-purged before the restart, stale after it: {}",
        r.cache_status()
    );
    // One refresh (stale-while-revalidate), then fresh again.
    wait_until(Duration::from_secs(5), "one refresh of /s1", async || {
        origin.hits_for("/s1") == before + 1
    })
    .await;
    let s2 = origin.hits_for("/s2");
    let r = get_with(Method::GET, &proxy.url("/s2"), &[]).await;
    assert!(r.is_hit() && r.cache_status_params().ttl().unwrap() > 0.0);
    assert_eq!(origin.hits_for("/s2"), s2, "the other object is untouched");
    // Time for a second refresh to show, were there one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        origin.hits_for("/s1"),
        before + 1,
        "one refresh, no stampede"
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: `{"key": K}` with the K a hit shows in `Cache-Status` purged
/// 0 objects with the default key template. Keys are taken from real
/// headers, over every wire, for the default and a custom template, and
/// for a Vary'd URL (its primary key: every variant goes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_purge_takes_the_key_cache_status_shows() {
    for template in ["", "key = \"$host$uri$is_args$args\"\n"] {
        let origin = Origin::start().await;
        let route = format!(
            "ttl = {{ 200 = \"600s\" }}\nrefresh = \"lock\"\ncache_status_key = true\n{template}"
        );
        let builder = Proxy::new(&origin).admin(&admin()).route(&route);
        let wires = Wires::start(builder, "").await;
        let proxy = &wires.proxy;
        for wire in &wires.all {
            let what = format!("{} {template:?}", wire.label());
            let path = format!("/k-{}", wire.label().replace([' ', '/'], "_"));
            let send = async |path: &str, headers: &[(&str, &str)]| {
                wires
                    .send(wire, Method::GET, "calm.test", path, headers, "")
                    .await
            };
            send(&path, &[]).await;
            let hit = send(&path, &[]).await;
            assert!(hit.is_hit(), "{what}: {}", hit.cache_status());
            let key = hit.cache_status_params().param("key").unwrap().to_owned();
            let answer = proxy
                .purge(TOKEN, &serde_json::json!({ "key": key }).to_string())
                .await;
            assert_eq!(answer["purged"], 1, "{what}: {key}: {answer}");
            let r = send(&path, &[]).await;
            assert!(!r.is_hit(), "{what}: purged: {}", r.cache_status());

            // A Vary'd URL: two variants under one primary key.
            let vpath = format!("{path}-vary");
            let vary = ("x-origin-header", "Vary: X-Lang");
            for lang in ["en", "de"] {
                send(&vpath, &[vary, ("x-lang", lang)]).await;
                let r = send(&vpath, &[vary, ("x-lang", lang)]).await;
                assert!(r.is_hit(), "{what} {lang}: {}", r.cache_status());
            }
            let r = send(&vpath, &[vary, ("x-lang", "en")]).await;
            let vkey = r.cache_status_params().param("key").unwrap().to_owned();
            assert!(!vkey.contains('\0') && vkey.ends_with("-vary"), "{vkey}");
            // Soft: the marker and both variants are marked.
            let body = serde_json::json!({ "key": vkey, "soft": true }).to_string();
            assert_eq!(
                proxy.purge(TOKEN, &body).await["purged"],
                3,
                "{what}: {vkey}"
            );
            for lang in ["en", "de"] {
                let r = send(&vpath, &[vary, ("x-lang", lang)]).await;
                assert!(
                    r.cache_status_params().ttl().unwrap() <= 0.0,
                    "{what} {lang}: stale: {}",
                    r.cache_status()
                );
            }
            // Let the refreshes land, then hard: every variant is gone.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let body = serde_json::json!({ "key": vkey }).to_string();
            assert_eq!(proxy.purge(TOKEN, &body).await["purged"], 1, "{what}");
            for lang in ["en", "de"] {
                let r = send(&vpath, &[vary, ("x-lang", lang)]).await;
                assert!(!r.is_hit(), "{what} {lang}: purged: {}", r.cache_status());
            }
        }
    }
}

/// A path purge on a route whose key template renders `$host` (the stored
/// key has no host part of its own) reaches the hosts the route stored
/// objects for, over each wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_purge_reaches_rendered_keys_with_their_host() {
    let origin = Origin::start().await;
    let route = "ttl = { 200 = \"600s\" }\nrefresh = \"lock\"\nkey = \"$host$uri$is_args$args\"\n";
    let builder = Proxy::new(&origin).admin(&admin()).route(route);
    let wires = Wires::start(builder, "").await;
    let proxy = &wires.proxy;
    for wire in &wires.all {
        let what = wire.label();
        let send = async || {
            wires
                .send(wire, Method::GET, "calm.test", "/rendered", &[], "")
                .await
        };
        send().await;
        assert!(send().await.is_hit(), "{what}: stored");
        let answer = proxy.purge(TOKEN, r#"{"url": "/rendered"}"#).await;
        assert_eq!(answer["purged"], 1, "{what}: {answer}");
        assert!(!send().await.is_hit(), "{what}: purged");
    }
    wires.proxy.stop().await;
}
