//! Redis' own memory and the breaker's recovery (issue 30, item 5 and the
//! end of item 3): `/status` (`fleet.redis`) and `/metrics` show a real
//! redis-server's `used_memory`, `maxmemory`, policy and `evicted_keys`
//! (rising once it is filled past a small `maxmemory`), a warning for a
//! Redis that refuses writes when full; and after Redis is killed and
//! started again the nodes share again within a second or two, however
//! long it was down.

use std::time::{Duration, Instant};

use calmcache_testkit::redis::Redis;
use calmcache_testkit::{get as get_url, Origin, Proxy, Wire};

use crate::fleet_harness::{breakers, fleet_status, get, is_body_of, three_nodes, total, warm_up};
use crate::wait_until;

/// Redis' INFO is read every 5 s: a change shows within this.
const READ_WITHIN: Duration = Duration::from_secs(15);
/// The issue asks for 1-2 s; this bound is generous for a busy machine.
const REJOIN_WITHIN: Duration = Duration::from_secs(5);

/// `INFO stats`' `evicted_keys`, read from Redis itself.
fn evicted(redis: &Redis) -> u64 {
    let info = redis.command(&["INFO", "stats"]).unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_redis_memory_and_its_evictions() {
    let redis = Redis::start();
    let set = |k: &str, v: &str| redis.command(&["CONFIG", "SET", k, v]).unwrap();
    assert_eq!(set("maxmemory", "4mb"), "+OK");
    assert_eq!(set("maxmemory-policy", "allkeys-lru"), "+OK");
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .admin("listen = \"127.0.0.1:0\"")
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    let read = wait_until(READ_WITHIN, "redis memory in /status", async || {
        let r = proxy.status().await["fleet"]["redis"].clone();
        (r["maxmemory"] == 4 * 1024 * 1024).then_some(r)
    })
    .await;
    assert!(read["used_memory"].as_u64() > Some(0), "{read}");
    assert!(
        read["used_ratio"]
            .as_f64()
            .is_some_and(|r| r > 0.0 && r < 1.0),
        "{read}"
    );
    assert_eq!(read["maxmemory_policy"], "allkeys-lru", "{read}");
    assert_eq!(read["evicted_keys"], 0, "{read}");
    assert_eq!(read["nodes"], 1, "{read}");
    assert!(read["warning"].is_null(), "{read}");
    assert!(read["read_ms_ago"].as_u64() < Some(10_000), "{read}");

    // Fill it past maxmemory (64 KiB values, 25 MiB at most).
    let value = "x".repeat(64 * 1024);
    for i in 0..400 {
        redis
            .command(&["SET", &format!("filler:{i}"), &value])
            .unwrap();
        if i % 20 == 19 && evicted(&redis) > 0 {
            break;
        }
    }
    assert!(evicted(&redis) > 0, "redis did not evict");
    let shown = wait_until(READ_WITHIN, "evictions in /status", async || {
        let n = proxy.status().await["fleet"]["redis"]["evicted_keys"].as_u64();
        n.filter(|n| *n > 0)
    })
    .await;
    let scrape = get_url(&proxy.admin_url("/metrics")).await.body;
    let has = |prefix: &str| scrape.lines().any(|l| l.starts_with(prefix));
    for line in [
        "calmcache_fleet_redis_used_memory_bytes ",
        "calmcache_fleet_redis_maxmemory_bytes 4194304",
        "calmcache_fleet_redis_memory_used_ratio ",
        "calmcache_fleet_redis_evicted_keys_total ",
        "calmcache_fleet_redis_maxmemory_policy{policy=\"allkeys-lru\"} 1",
        "calmcache_fleet_redis_info_age_seconds ",
    ] {
        assert!(has(line), "no {line:?} in\n{scrape}");
    }
    let evictions: u64 = scrape
        .lines()
        .find_map(|l| l.strip_prefix("calmcache_fleet_redis_evicted_keys_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(evictions >= shown, "{evictions} < {shown}");
    assert!(total_ops(&proxy.status().await, "info") > 0);

    // A Redis that refuses writes when full: a warning.
    assert_eq!(set("maxmemory-policy", "noeviction"), "+OK");
    let warning = wait_until(READ_WITHIN, "the noeviction warning", async || {
        let w = proxy.status().await["fleet"]["redis"]["warning"].clone();
        w.as_str().map(str::to_owned)
    })
    .await;
    assert!(warning.contains("noeviction"), "{warning}");
    proxy.stop().await;
}

/// `fleet.ops.<op>.ok`.
fn total_ops(status: &serde_json::Value, op: &str) -> u64 {
    status["fleet"]["ops"][op]["ok"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_maxmemory_is_a_warning() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .admin("listen = \"127.0.0.1:0\"")
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    let read = wait_until(READ_WITHIN, "redis memory in /status", async || {
        let r = proxy.status().await["fleet"]["redis"].clone();
        r["warning"].is_string().then_some(r)
    })
    .await;
    assert_eq!(read["maxmemory"], 0, "{read}");
    assert!(read["used_ratio"].is_null(), "no limit, no ratio: {read}");
    assert!(
        read["warning"]
            .as_str()
            .is_some_and(|w| w.contains("no maxmemory")),
        "{read}"
    );
    proxy.stop().await;
}

/// Issue 30: after Redis came back the nodes stayed apart up to the
/// breaker's pause (6 s seen, 30 s possible), which doubled at every probe
/// that failed while it was down. Down 8 s (the old pause would have
/// reached 8 s), the nodes close their breakers and share a copy again
/// within a bounded wait of its restart; the time it took is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_again_soon_after_redis_is_restarted() {
    let mut redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &redis.url(), "timeout = \"200ms\"", "30s").await;
    warm_up(&nodes).await;

    tokio::task::block_in_place(|| redis.kill9());
    wait_until(Duration::from_secs(10), "every breaker open", async || {
        breakers(&nodes).await.iter().all(|b| b != "closed")
    })
    .await;
    // The test is about time: Redis stays down while the pause would
    // have doubled.
    tokio::time::sleep(Duration::from_secs(8)).await;
    tokio::task::block_in_place(|| redis.restart());
    let restarted = Instant::now();

    wait_until(REJOIN_WITHIN, "every breaker closed", async || {
        breakers(&nodes).await.iter().all(|b| b == "closed")
    })
    .await;
    let closed = restarted.elapsed();
    let before = total(&nodes, &["shared_hits"]).await;
    let mut i = 0;
    wait_until(REJOIN_WITHIN, "a copy shared again", async || {
        i += 1;
        let path = format!("/rejoin/{i}");
        assert!(is_body_of(
            &get(&nodes[0], &Wire::Http1, &path).await,
            &path
        ));
        let r = get(&nodes[1], &Wire::Http1, &path).await;
        assert!(is_body_of(&r, &path));
        total(&nodes, &["shared_hits"]).await > before
    })
    .await;
    eprintln!(
        "redis restarted after 8 s down: every breaker closed after {closed:?}, \
         a copy shared after {:?}",
        restarted.elapsed()
    );
    for node in &nodes {
        let s = fleet_status(node).await;
        assert_eq!(s["breaker"], "closed", "{s}");
        let probe = &s["ops"]["probe"];
        let failed =
            probe["failed"].as_u64().unwrap_or(0) + probe["timed_out"].as_u64().unwrap_or(0);
        assert!(failed > 0, "PINGs while down: {s}");
    }
}
