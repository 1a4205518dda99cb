//! The admin API of issue 5 through real sockets: `/status` and `/metrics`
//! after known traffic, health and readiness, the admin token, and purges
//! (URL, prefix, tag, all; hard and soft; memory and disk zones; `PURGE`).

use crate::{scratch, wait_until};

/// How long a test waits for a commit, a poll or a refresh to land.
const LIMIT: Duration = Duration::from_secs(10);
use std::path::PathBuf;
use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{get, get_with, request, request_with_body, Origin, Proxy, Reply};
use http::Method;

const TOKEN: &str = "s3cret-token-for-tests";

async fn purged(proxy: &RunningProxy, body: &str) -> u64 {
    let r = proxy.purge_request(TOKEN, body).await;
    assert_eq!(r.status, 200, "{body}: {}", r.body);
    let json: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    json["purged"].as_u64().unwrap()
}

/// A GET whose fill stores the object with cache tags `tags`.
async fn get_tagged(proxy: &RunningProxy, path: &str, tags: &str) -> Reply {
    let tag = format!("Cache-Tag: {tags}");
    get_with(Method::GET, &proxy.url(path), &[("x-origin-header", &tag)]).await
}

/// Every sample is `calmcache_<name>[{labels}] <number>` of a declared
/// family, declared once.
fn assert_well_formed(body: &str) {
    let typed: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    for (i, family) in typed.iter().enumerate() {
        assert!(!typed[..i].contains(family), "{family} declared twice");
    }
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
        let name = name_labels.split('{').next().unwrap();
        assert!(name.starts_with("calmcache_"), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(f)))
            .unwrap_or(name);
        assert!(typed.contains(&family), "{line}: no # TYPE");
    }
}

/// The value of the sample `name{labels}` (exactly as rendered) in `body`.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in\n{body}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_count_known_traffic() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await;
    for path in ["/a", "/b", "/c"] {
        for _ in 0..3 {
            assert_eq!(get(&proxy.url(path)).await.status, 200);
        }
    }
    let s = proxy.status().await;
    assert_eq!(s["totals"]["requests"], 9, "{s:#}");
    assert_eq!(s["cache_status"]["hit"], 6);
    assert_eq!(s["cache_status"]["miss"], 3);
    assert_eq!(s["cache_status"]["stale"], 0);
    assert_eq!(s["cache_status"]["revalidated"], 0);
    assert_eq!(s["cache_status"]["bypass"], 0);
    assert_eq!(s["upstreams"]["origin"]["requests"], 3);
    assert_eq!(s["upstreams"]["origin"]["errors"], 0);
    assert_eq!(
        s["upstreams"]["origin"]["servers"][0],
        origin.addr().to_string()
    );
    assert_eq!(s["latency"]["le"].as_array().unwrap().len(), 16);
    let hit = &s["latency"]["by_cache_status"]["hit"];
    assert_eq!(hit["count"], 6);
    assert_eq!(hit["buckets"].as_array().unwrap().len(), 17);
    assert_eq!(hit["buckets"][16], 6);
    assert_eq!(s["latency"]["by_upstream"]["origin"]["count"], 3);
    assert!(s["connections"]["accepted"].as_u64().unwrap() >= 9);
    assert!(s["connections"]["active"].as_u64().is_some());
    assert_eq!(s["zones"]["ram"]["kind"], "memory");
    assert_eq!(s["zones"]["ram"]["objects"], 3);
    assert_eq!(s["zones"]["ram"]["memory"]["evictions"], 0);
    assert!(s["zones"]["ram"].get("disk").is_none(), "{s:#}");
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert!(s["uptime_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(s["purges"]["requests"], 0);

    let m = get(&proxy.admin_url("/metrics")).await;
    assert_eq!(m.status, 200);
    assert!(m
        .header("content-type")
        .starts_with("text/plain; version=0.0.4"));
    for line in [
        "calmcache_requests_total{cache_status=\"hit\"} 6",
        "calmcache_requests_total{cache_status=\"miss\"} 3",
        "calmcache_route_hits_total{route=\"test\"} 6",
        "calmcache_route_misses_total{route=\"test\"} 3",
        "calmcache_route_requests_total{route=\"test\"} 9",
        "calmcache_upstream_requests_total{upstream=\"origin\"} 3",
        "calmcache_upstream_errors_total{upstream=\"origin\"} 0",
        "calmcache_upstream_response_seconds_count{upstream=\"origin\"} 3",
        "calmcache_request_duration_seconds_count{cache_status=\"hit\"} 6",
        "calmcache_request_duration_seconds_bucket{cache_status=\"hit\",le=\"+Inf\"} 6",
        "calmcache_zone_objects{zone=\"ram\",kind=\"memory\"} 3",
        "calmcache_zone_evictions_total{zone=\"ram\"} 0",
        "calmcache_purges_total 0",
    ] {
        assert!(
            m.body.lines().any(|l| l == line),
            "missing {line:?} in\n{}",
            m.body
        );
    }
    assert_well_formed(&m.body);
    assert!(
        !m.body.contains("calmcache_fleet_"),
        "no fleet block without [fleet]"
    );
    assert!(s.get("fleet").is_none(), "{s:#}");

    let health = get(&proxy.admin_url("/healthz")).await;
    assert_eq!(
        (health.status.as_u16(), health.body.as_str()),
        (200, "ok\n")
    );
    assert_eq!(get(&proxy.admin_url("/readyz")).await.status, 200);
    let page = get(&proxy.admin_url("/")).await;
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").starts_with("text/html"));
    proxy.stop().await;
}

/// Fleet mode (issue 14) on /metrics: the `calmcache_fleet_*` families of a
/// node on a real redis-server after a fill (acquire, commit), a purge
/// (purge, publish) and the purge stream's polls, with Redis calls per
/// operation summing to the node's totals in /status.
/// A memory zone full of objects counts what it evicts to stay under
/// max_size, in /status and /metrics: the objects it holds and those it
/// evicted add up to those it stored (the evicted ones are misses again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_zone_counts_its_evictions() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .zone("256KiB", "16KiB")
        .route("ttl = { 200 = \"60s\" }")
        .start()
        .await;
    const STORED: u64 = 100;
    for i in 0..STORED {
        let path = format!("/e{i}?x-origin-body-bytes=8000");
        assert_eq!(get(&proxy.url(&path)).await.status, 200);
    }
    let s = proxy.status().await;
    let zone = &s["zones"]["ram"];
    let evictions = zone["memory"]["evictions"].as_u64().unwrap();
    let objects = zone["objects"].as_u64().unwrap();
    assert!(evictions > 0, "100 x 8 KB is over 256 KiB: {zone:#}");
    assert_eq!(objects + evictions, STORED, "{zone:#}");
    assert!(zone["size_bytes"].as_u64().unwrap() <= 256 * 1024);
    let m = get(&proxy.admin_url("/metrics")).await;
    assert_eq!(
        sample(&m.body, "calmcache_zone_evictions_total{zone=\"ram\"}"),
        evictions as f64
    );
    assert_well_formed(&m.body);
    // A kept object is a hit; an evicted one is fetched again (asked
    // second: storing it again may evict another).
    let last = get(&proxy.url(&format!("/e{}?x-origin-body-bytes=8000", STORED - 1))).await;
    assert!(last.is_hit(), "the newest stays: {}", last.cache_status());
    let first = get(&proxy.url("/e0?x-origin-body-bytes=8000")).await;
    assert!(
        !first.is_hit(),
        "the oldest went first: {}",
        first.cache_status()
    );
    assert_eq!(origin.hits_for("/e0"), 2, "fetched again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_exposes_the_fleet_block_in_fleet_mode() {
    let redis = calmcache_testkit::redis::Redis::start();
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    assert_eq!(get(&proxy.url("/f")).await.status, 200);
    // The commit to Redis runs off the request path.
    wait_until(LIMIT, "the commit to redis", async || {
        proxy.status().await["fleet"]["commits"] == 1
    })
    .await;
    assert_eq!(purged(&proxy, r#"{"url": "/f"}"#).await, 1);
    // Polls of the purge stream run every 200 ms: two of them, and the
    // purge published.
    wait_until(LIMIT, "two polls and the purge published", async || {
        let ops = &proxy.status().await["fleet"]["ops"];
        ops["poll"]["ok"].as_u64() >= Some(2) && ops["publish"]["ok"].as_u64() >= Some(1)
    })
    .await;

    let s = proxy.status().await;
    let f = &s["fleet"];
    assert_eq!(f["commits"], 1, "{s:#}");
    for (op, at_least) in [
        ("acquire", 1),
        ("commit", 1),
        ("purge", 1),
        ("publish", 1),
        ("poll", 2),
    ] {
        let c = &f["ops"][op];
        assert!(c["ok"].as_u64().unwrap() >= at_least, "{op}: {c}");
        assert!(c["total_us"].as_u64().unwrap() > 0, "{op}: {c}");
        assert!(c["mean_us"].as_u64().unwrap() > 0, "{op}: {c}");
        assert_eq!(c["timed_out"], 0, "{op}: {c}");
    }
    assert_eq!(f["ops"]["release"]["ok"], 0, "committed: nothing released");
    // Each call counts under one operation (a poll may land between the
    // two reads of one snapshot); the breaker's sentinel PINGs count under
    // theirs only, not in the totals.
    let ops_ok: u64 = f["ops"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(op, _)| *op != "sentinel")
        .map(|(_, c)| c["ok"].as_u64().unwrap())
        .sum();
    let calls_ok = f["calls_ok"].as_u64().unwrap();
    assert!(
        ops_ok.abs_diff(calls_ok) <= 2,
        "{ops_ok} vs {calls_ok}: {f:#}"
    );

    let m = get(&proxy.admin_url("/metrics")).await;
    assert_eq!(m.status, 200);
    assert_well_formed(&m.body);
    let body = &m.body;
    for (series, want) in [
        ("calmcache_fleet_breaker_state{state=\"closed\"}", 1.0),
        ("calmcache_fleet_breaker_state{state=\"open\"}", 0.0),
        ("calmcache_fleet_breaker_state{state=\"half_open\"}", 0.0),
        (
            "calmcache_fleet_breaker_opened_total{reason=\"consecutive\"}",
            0.0,
        ),
        (
            "calmcache_fleet_breaker_opened_total{reason=\"ratio\"}",
            0.0,
        ),
        (
            "calmcache_fleet_breaker_opened_total{reason=\"latency\"}",
            0.0,
        ),
        ("calmcache_fleet_breaker_closed_total", 0.0),
        ("calmcache_fleet_leases_acquired_total", 1.0),
        ("calmcache_fleet_leases_held_total", 0.0),
        ("calmcache_fleet_shared_hits_total", 0.0),
        ("calmcache_fleet_commits_total{result=\"stored\"}", 1.0),
        ("calmcache_fleet_commits_total{result=\"refused\"}", 0.0),
        ("calmcache_fleet_purges_sent_total", 1.0),
        ("calmcache_fleet_purges_applied_total", 0.0),
        (
            "calmcache_fleet_redis_calls_total{op=\"commit\",result=\"ok\"}",
            1.0,
        ),
        (
            "calmcache_fleet_redis_calls_total{op=\"publish\",result=\"ok\"}",
            1.0,
        ),
        (
            "calmcache_fleet_redis_calls_total{op=\"acquire\",result=\"timed_out\"}",
            0.0,
        ),
        (
            "calmcache_fleet_redis_calls_total{op=\"release\",result=\"ok\"}",
            0.0,
        ),
    ] {
        assert_eq!(sample(body, series), want, "{series}");
    }
    for op in ["acquire", "commit", "purge", "publish", "poll"] {
        let ok = sample(
            body,
            &format!("calmcache_fleet_redis_calls_total{{op=\"{op}\",result=\"ok\"}}"),
        );
        let seconds = sample(
            body,
            &format!("calmcache_fleet_redis_call_seconds_total{{op=\"{op}\"}}"),
        );
        assert!(ok >= 1.0 && seconds > 0.0, "{op}: {ok} calls, {seconds} s");
        assert!(seconds / ok < 0.5, "{op}: mean {} s", seconds / ok);
    }
    assert!(
        body.lines()
            .any(|l| l.starts_with("calmcache_fleet_info{node=\"")),
        "{body}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_purges_and_non_loopback_listeners() {
    let origin = Origin::start().await;
    let with_token = Proxy::new(&origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .start()
        .await;
    let url = with_token.admin_url("/purge");
    let all = r#"{"all": true}"#.to_owned();
    for auth in [None, Some("Bearer wrong-token"), Some("Basic czNjcmV0")] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let r = request_with_body(Method::POST, &url, &headers, all.clone()).await;
        assert_eq!(r.status, 401, "{auth:?}");
        assert!(r.header("www-authenticate").starts_with("Bearer"));
    }
    assert_eq!(with_token.purge_request(TOKEN, &all).await.status, 200);
    // Loopback: reads need no token.
    assert_eq!(get(&with_token.admin_url("/status")).await.status, 200);
    // Bad bodies are 400 with the reason.
    let r = with_token
        .purge_request(TOKEN, r#"{"url": "/a", "tag": "t"}"#)
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("exactly one"), "{}", r.body);
    with_token.stop().await;

    // No token configured: purges are refused, saying why.
    let without = Proxy::new(&origin).start().await;
    let r = without.purge_request(TOKEN, &all).await;
    assert_eq!(r.status, 401);
    assert!(
        r.body.contains("no admin token is configured"),
        "{}",
        r.body
    );
    without.stop().await;

    // Not on loopback: every endpoint but the page and /healthz needs it.
    let open = Proxy::new(&origin)
        .admin(&format!("listen = \"0.0.0.0:0\"\ntoken = \"{TOKEN}\""))
        .start()
        .await;
    assert_eq!(get(&open.admin_url("/status")).await.status, 401);
    assert_eq!(get(&open.admin_url("/metrics")).await.status, 401);
    let auth = format!("Bearer {TOKEN}");
    let r = request(
        Method::GET,
        &open.admin_url("/status"),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(get(&open.admin_url("/healthz")).await.status, 200);
    assert_eq!(get(&open.admin_url("/")).await.status, 200);
    open.stop().await;
}

#[test]
fn a_non_loopback_admin_listener_needs_a_token() {
    let base = "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.o]\nservers = [\"127.0.0.1:9\"]\n\
                [[routes]]\nupstream = \"o\"\n[admin]\n";
    let err =
        calmcache::Config::from_toml(&format!("{base}listen = \"0.0.0.0:9090\"\n"), "calm.toml")
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("admin.listen") && err.contains("no token"),
        "{err}"
    );
    let file = scratch("ops-token").join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let text = format!(
        "{base}listen = \"0.0.0.0:9090\"\ntoken_file = {:?}\n",
        file.display().to_string()
    );
    let config = calmcache::Config::from_toml(&text, "calm.toml").unwrap();
    assert_eq!(config.admin.unwrap().token.as_deref(), Some(TOKEN));
    let missing = format!("{base}token_file = \"/nonexistent/token\"\nlisten = \"127.0.0.1:1\"\n");
    let err = calmcache::Config::from_toml(&missing, "calm.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("admin.token_file"), "{err}");
    let _ = std::fs::remove_file(file);
}

/// The proxy of the purge tests: a memory or a disk zone, a token.
async fn purge_proxy(origin: &Origin, disk: Option<&PathBuf>, route: &str) -> RunningProxy {
    let mut builder = Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(route);
    if let Some(dir) = disk {
        builder = builder.disk_zone(dir, "");
    }
    builder.start().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_by_url_prefix_tag_and_all_on_memory_and_disk_zones() {
    for disk in [false, true] {
        let origin = Origin::start().await;
        let dir = scratch("ops-purge");
        let proxy = purge_proxy(
            &origin,
            disk.then_some(&dir),
            "ttl = { 200 = \"60s\" }\nrefresh = \"lock\"",
        )
        .await;
        let store = async |path: &str, tags: &str| {
            let r = get_tagged(&proxy, path, tags).await;
            assert_eq!(r.status, 200);
            assert!(!r.has_header("cache-tag"), "tags are not shown to clients");
            assert!(get(&proxy.url(path)).await.is_hit(), "{path} stored");
        };
        store("/blog/1", "post-1, blog").await;
        store("/blog/2", "post-2,blog").await;
        store("/news/1", "news").await;
        store("/other", "misc").await;
        let hit = async |path: &str| get(&proxy.url(path)).await.is_hit();

        // URL (a path: on every host the route stored it for).
        assert_eq!(
            purged(&proxy, r#"{"url": "/blog/1"}"#).await,
            1,
            "disk={disk}"
        );
        assert!(!hit("/blog/1").await, "purged");
        assert!(hit("/blog/2").await && hit("/news/1").await);
        // Tag: /blog/1 was stored again above, without tags this time.
        assert_eq!(purged(&proxy, r#"{"tag": "blog"}"#).await, 1);
        assert!(!hit("/blog/2").await);
        assert!(hit("/blog/1").await && hit("/news/1").await);
        // Prefix.
        assert_eq!(purged(&proxy, r#"{"prefix": "/news/"}"#).await, 1);
        assert!(!hit("/news/1").await);
        assert!(hit("/other").await);
        // An absolute URL on another host purges nothing.
        assert_eq!(
            purged(&proxy, r#"{"url": "http://elsewhere.example/other"}"#).await,
            0
        );
        assert!(hit("/other").await);
        // All: /blog/1, /blog/2, /news/1 (re-stored by the misses) and /other.
        assert_eq!(purged(&proxy, r#"{"all": true}"#).await, 4);
        assert!(!hit("/other").await);
        let s = proxy.status().await;
        assert_eq!(s["purges"]["requests"], 5);
        assert_eq!(s["purges"]["objects"], 7);
        proxy.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_purge_under_load_reaches_the_origin_once_per_object() {
    for (disk, refresh) in [
        (false, "lock"),
        (true, "lock"),
        (false, "sus"),
        (false, "none"),
    ] {
        let origin = Origin::start().await;
        let dir = scratch("ops-soft");
        let route = format!("ttl = {{ 200 = \"60s\" }}\nrefresh = \"{refresh}\"");
        let proxy = purge_proxy(&origin, disk.then_some(&dir), &route).await;
        for path in ["/hot/1", "/hot/2"] {
            get_tagged(&proxy, path, "hot").await;
        }
        let before = origin.hits();
        assert_eq!(purged(&proxy, r#"{"tag": "hot", "soft": true}"#).await, 2);
        // 40 concurrent clients per object while each refresh takes 300 ms.
        let mut clients = Vec::new();
        for i in 0..80 {
            let url = proxy.url(if i % 2 == 0 { "/hot/1" } else { "/hot/2" });
            clients.push(tokio::spawn(async move {
                get_with(Method::GET, &url, &[("x-origin-delay-ms", "300")]).await
            }));
        }
        for c in clients {
            let r = c.await.unwrap();
            assert_eq!(r.status, 200);
            assert!(
                r.cache_status_params().has("hit"),
                "served stale at once: {}",
                r.cache_status()
            );
        }
        // The two refreshes land; then fresh copies, and nothing more.
        wait_until(LIMIT, "the two refreshes stored", async || {
            let mut fresh = true;
            for path in ["/hot/1", "/hot/2"] {
                let r = get(&proxy.url(path)).await;
                fresh &= r.is_hit() && r.cache_status_params().param("detail").is_none();
            }
            fresh
        })
        .await;
        assert_eq!(
            origin.hits() - before,
            2,
            "one refresh per object (disk={disk})"
        );
        for path in ["/hot/1", "/hot/2"] {
            let r = get(&proxy.url(path)).await;
            assert!(
                r.is_hit() && r.cache_status_params().param("detail").is_none(),
                "{}",
                r.cache_status()
            );
        }
        assert_eq!(origin.hits() - before, 2);
        proxy.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_method_works_from_allowed_networks_only() {
    let origin = Origin::start().await;
    let proxy = purge_proxy(&origin, None, "ttl = { 200 = \"60s\" }\nrefresh = \"lock\"").await;
    let purge_method = Method::from_bytes(b"PURGE").unwrap();
    get(&proxy.url("/p")).await;
    let r = request(purge_method.clone(), &proxy.url("/p"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.trim(), r#"{"purged":1}"#);
    assert!(!get(&proxy.url("/p")).await.is_hit());
    // Soft: still served (stale) while it refreshes.
    let r = request(
        purge_method.clone(),
        &proxy.url("/p"),
        &[("calmcache-purge", "soft")],
    )
    .await;
    assert_eq!(r.body.trim(), r#"{"purged":1}"#);
    let r = get(&proxy.url("/p")).await;
    assert_eq!(
        r.cache_status_params().param("detail"),
        Some("stale-while-revalidate"),
        "{}",
        r.cache_status()
    );
    proxy.stop().await;

    let closed = Proxy::new(&origin)
        .admin("listen = \"127.0.0.1:0\"\npurge_allow = [\"10.0.0.0/8\"]")
        .start()
        .await;
    let r = request(purge_method, &closed.url("/p"), &[]).await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("admin.purge_allow"), "{}", r.body);
    closed.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_tags_reach_clients_only_when_exposed() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"60s\" }\nexpose_cache_tags = true")
        .start()
        .await;
    let first = get_tagged(&proxy, "/t", "a, b").await;
    assert_eq!(first.header("cache-tag"), "a, b");
    let hit = get(&proxy.url("/t")).await;
    assert!(hit.is_hit());
    assert_eq!(hit.header("cache-tag"), "a, b");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_keeps_extra_clients_waiting_without_errors() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .server("max_connections = 3")
        .route("ttl = { 200 = \"60s\" }")
        .start()
        .await;
    // 24 clients at once, each on its own connection, each answer taking
    // 100 ms at the origin: at most 3 are served at a time, none fails.
    let mut clients = Vec::new();
    for i in 0..24 {
        let url = proxy.url(&format!("/slow/{i}"));
        clients.push(tokio::spawn(async move {
            get_with(Method::GET, &url, &[("x-origin-delay-ms", "100")]).await
        }));
    }
    let mut most = 0;
    while clients.iter().any(|c| !c.is_finished()) {
        let active = proxy.status().await["connections"]["active"]
            .as_u64()
            .unwrap();
        most = most.max(active);
        // Sampling the gauge every 10 ms: finer than wait_until's poll.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for c in clients {
        assert_eq!(c.await.unwrap().status, 200);
    }
    assert!(most <= 3, "{most} connections served at once");
    assert!(most >= 1);
    let s = proxy.status().await;
    assert!(
        s["connections"]["accepted"].as_u64().unwrap() >= 24,
        "{s:#}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_requests_closes_the_connection_and_big_heads_get_431() {
    use http_body_util::BodyExt;
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .server("keepalive_requests = 2\nmax_header_size = \"16KiB\"")
        .start()
        .await;
    let addr = proxy
        .url("/")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    for i in 1..=2 {
        let req = http::Request::get(format!("/k{i}"))
            .header("host", &addr)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        // The first answer's body may still be finishing on the connection task.
        sender.ready().await.unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let close = resp
            .headers()
            .get("connection")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap();
        assert_eq!(close.as_deref(), (i == 2).then_some("close"), "request {i}");
    }
    // The proxy closed the connection after the second answer.
    tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("connection closed")
        .unwrap()
        .unwrap();

    let big = "x".repeat(20 * 1024);
    let r = request(Method::GET, &proxy.url("/big-head"), &[("x-big", &big)]).await;
    assert_eq!(r.status, 431);
    let fits = "x".repeat(8 * 1024);
    let r = request(Method::GET, &proxy.url("/ok-head"), &[("x-big", &fits)]).await;
    assert_eq!(r.status, 200);
    proxy.stop().await;
}
