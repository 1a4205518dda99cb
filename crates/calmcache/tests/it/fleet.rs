//! Fleet mode (issue 14): three calmcache nodes on one real redis-server
//! (started by the test on a free loopback port) in front of one counting
//! origin act as one cache: one origin fetch per object lifetime for the
//! fleet, purges on one node reach the others, a bad entry in Redis is never
//! served, and a dead or hung Redis fails no request.

use std::time::Duration;

use calmcache_testkit::client::{request, Reply};
use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::redis::Redis;
use calmcache_testkit::{Origin, Proxy};
use http::Method;

use crate::wait_until;

/// How long a test waits for the fleet to apply, store or recover.
const LIMIT: Duration = Duration::from_secs(15);

pub(crate) const TOKEN: &str = "fleet-token";

/// A node of the fleet on `redis` in front of `origin`.
async fn node(origin: &Origin, redis: &Redis, ttl: &str) -> RunningProxy {
    node_with(origin, redis, ttl, "").await
}

/// The same with more `[fleet]` keys.
pub(crate) async fn node_with(
    origin: &Origin,
    redis: &Redis,
    ttl: &str,
    keys: &str,
) -> RunningProxy {
    node_at(origin, &redis.url(), ttl, keys).await
}

/// A node on `redis`: a URL, or a TOML list of a cluster's.
pub(crate) async fn node_at(origin: &Origin, redis: &str, ttl: &str, keys: &str) -> RunningProxy {
    Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(&format!(
            "ttl = {{ 200 = \"{ttl}\" }}\nlock_timeout = \"5s\""
        ))
        .fleet(redis, &format!("timeout = \"200ms\"\n{keys}"))
        .start()
        .await
}

async fn nodes(origin: &Origin, redis: &Redis, ttl: &str) -> Vec<RunningProxy> {
    vec![
        node(origin, redis, ttl).await,
        node(origin, redis, ttl).await,
        node(origin, redis, ttl).await,
    ]
}

/// `n` requests for `path` at once on every node; every answer must be 200.
pub(crate) async fn burst(nodes: &[RunningProxy], path: &str, n: usize) -> Vec<String> {
    let mut tasks = Vec::new();
    for node in nodes {
        for _ in 0..n {
            let url = node.url(path);
            tasks.push(tokio::spawn(async move { get(&url).await }));
        }
    }
    let mut bodies = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        bodies.push(reply.body);
    }
    bodies
}

/// A GET as a load balancer would send it: the fleet's one host name on
/// every node (the cache key has the host).
pub(crate) async fn get(url: &str) -> Reply {
    request(Method::GET, url, &[("host", "fleet.test")]).await
}

pub(crate) async fn fleet_status(node: &RunningProxy) -> serde_json::Value {
    node.status().await["fleet"].clone()
}

/// Each node's `purges_applied`.
async fn applied_on<'a>(nodes: impl IntoIterator<Item = &'a RunningProxy>) -> Vec<u64> {
    let mut applied = Vec::new();
    for node in nodes {
        applied.push(
            fleet_status(node).await["purges_applied"]
                .as_u64()
                .unwrap_or(0),
        );
    }
    applied
}

pub(crate) async fn sum(nodes: &[RunningProxy], field: &str) -> u64 {
    let mut total = 0;
    for node in nodes {
        total += fleet_status(node).await[field].as_u64().unwrap_or(0);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_send_the_origin_one_fetch_per_lifetime() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let fleet = nodes(&origin, &redis, "2s").await;
    // A slow page: every node's requests arrive while the first fetch runs.
    let path = "/page?x-origin-delay-ms=300";
    let bodies = burst(&fleet, path, 10).await;
    assert_eq!(
        origin.hits_for("/page"),
        1,
        "one fetch for 30 requests on 3 nodes"
    );
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "one answer everywhere"
    );
    assert_eq!(sum(&fleet, "leases_acquired").await, 1);
    assert!(
        sum(&fleet, "leases_held").await >= 1,
        "the others waited for it"
    );
    // Every node has it now (locally or from Redis): no more fetches.
    burst(&fleet, path, 5).await;
    assert_eq!(origin.hits_for("/page"), 1);
    // After its lifetime: one refresh for the fleet again (in the
    // background under the default `sus`: wait for it, then for stragglers).
    tokio::time::sleep(Duration::from_millis(2200)).await; // the 2 s lifetime runs out
    burst(&fleet, path, 10).await;
    wait_until(LIMIT, "the refresh at the origin", async || {
        origin.hits_for("/page") >= 2
    })
    .await;
    // Time for a second refresh to show, were there one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    burst(&fleet, path, 2).await;
    assert_eq!(origin.hits_for("/page"), 2, "one refresh per lifetime");
    for node in &fleet {
        assert_eq!(fleet_status(node).await["breaker"], "closed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_stored_by_one_node_is_a_hit_for_the_others() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let fleet = nodes(&origin, &redis, "30s").await;
    let first = get(&fleet[0].url("/shared")).await;
    assert_eq!(first.status, 200);
    // The commit to Redis is off the request path: give it a moment.
    wait_until(LIMIT, "stored in redis", async || {
        sum(&fleet, "commits").await >= 1
    })
    .await;
    for node in &fleet[1..] {
        let r = get(&node.url("/shared")).await;
        assert_eq!(r.body, first.body, "the same copy");
        // Said as a hit of the shared tier, not a fetch.
        let said = r.cache_status_params();
        assert!(said.has("hit"), "{}", r.cache_status());
        assert_eq!(said.param("detail"), Some("fleet"), "{}", r.cache_status());
        // Then a local hit like any other.
        let again = get(&node.url("/shared")).await;
        assert_eq!(again.cache_status_params().param("detail"), None);
    }
    assert_eq!(
        origin.hits_for("/shared"),
        1,
        "the others took it from redis"
    );
    assert_eq!(sum(&fleet, "shared_hits").await, 2);
    assert_eq!(sum(&fleet, "leases_newer").await, 2);
    assert_eq!(sum(&fleet, "leases_active").await, 0, "no fetch in flight");
    // The node that fetched knows the fleet fetched it once.
    let most = fleet_status(&fleet[0]).await["most_fetched"].clone();
    assert_eq!(most[0]["fleet"], 1, "{most}");
    assert!(
        most[0]["key"].as_str().unwrap().contains("/shared"),
        "{most}"
    );
    // Counted as hits, and as shared hits.
    let metrics = request(Method::GET, &fleet[1].admin_url("/metrics"), &[]).await;
    for line in [
        "calmcache_requests_total{cache_status=\"hit\"} 2",
        "calmcache_fleet_shared_hits_total 1",
        "calmcache_fleet_leases_newer_total 1",
        "calmcache_fleet_object_fetches",
    ] {
        assert!(metrics.body.contains(line), "{line} in {}", metrics.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_on_one_node_reaches_every_node_and_redis() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let fleet = nodes(&origin, &redis, "60s").await;
    for (selector, path) in [
        (r#"{"url": "/p1"}"#, "/p1"),
        (r#"{"prefix": "/pre"}"#, "/prefix-x"),
        (r#"{"all": true}"#, "/every"),
        (r#"{"url": "/s1", "soft": true}"#, "/s1"),
    ] {
        let old = burst(&fleet, path, 1).await;
        let before = origin.hits_for(path);
        assert_eq!(before, 1, "{selector}: one fetch to fill the fleet");
        let applied = applied_on(&fleet[1..]).await;
        let answer = fleet[0].purge(TOKEN, selector).await;
        assert!(answer.get("fleet_pending").is_none(), "{answer}");
        // The other nodes apply it from the stream.
        wait_until(LIMIT, "the purge applied on the other nodes", async || {
            let now = applied_on(&fleet[1..]).await;
            now.iter().zip(&applied).all(|(n, a)| n > a)
        })
        .await;
        let mut bodies = burst(&fleet, path, 1).await;
        if selector.contains("soft") {
            // Soft: marked stale, served while one node refreshes it for
            // the fleet in the background.
            wait_until(LIMIT, "the soft-purge refresh", async || {
                origin.hits_for(path) >= 2
            })
            .await;
            // No counter says every node took the new copy yet.
            tokio::time::sleep(Duration::from_millis(300)).await;
            bodies = burst(&fleet, path, 1).await;
        }
        let after = origin.hits_for(path);
        assert_eq!(
            after, 2,
            "{selector}: one fetch for the fleet after the purge"
        );
        assert!(
            bodies.iter().all(|b| b == &bodies[0] && b != &old[0]),
            "{selector}: every node serves the new copy: {old:?} then {bodies:?}"
        );
    }
    assert!(
        sum(&fleet, "purges_applied").await >= 8,
        "two nodes x four purges"
    );
    assert_eq!(fleet_status(&fleet[0]).await["purges_sent"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_entry_in_redis_is_never_served() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let fleet = nodes(&origin, &redis, "30s").await;
    get(&fleet[0].url("/v")).await;
    wait_until(LIMIT, "stored in redis", async || {
        sum(&fleet, "commits").await >= 1
    })
    .await;
    // Corrupt every stored object's value (the checksum no longer matches).
    let script = "for _, k in ipairs(redis.call('KEYS', 'cc:{*}:m')) do \
                    local b = redis.call('HGET', k, 'blob') \
                    redis.call('HSET', k, 'blob', string.sub(b, 1, #b - 1) .. 'X') \
                  end return 1";
    assert_eq!(redis.command(&["EVAL", script, "0"]).unwrap(), ":1");
    let r = get(&fleet[1].url("/v")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("n=2"),
        "fetched again, not the bad copy: {}",
        r.body
    );
    assert_eq!(sum(&fleet, "bad_entries").await, 1);
    assert_eq!(sum(&fleet, "shared_hits").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_hung_redis_fails_no_request_and_is_used_again_after() {
    let mut redis = Redis::start();
    let origin = Origin::start().await;
    let fleet = nodes(&origin, &redis, "30s").await;
    burst(&fleet, "/warm", 1).await;
    redis.kill9();
    for i in 0..30 {
        let node = &fleet[i % 3];
        let r = get(&node.url(&format!("/dead/{i}"))).await;
        assert_eq!(r.status, 200, "request {i} with redis dead");
    }
    for node in &fleet {
        let s = fleet_status(node).await;
        assert_ne!(s["breaker"], "closed", "{s}");
    }
    redis.restart();
    // The breaker probes after its pause (1 s, then 2 s...).
    let mut i = 0;
    let what = "every node uses redis again after its restart";
    wait_until(Duration::from_secs(20), what, async || {
        i += 1;
        let r = get(&fleet[i % 3].url(&format!("/back/{i}"))).await;
        assert_eq!(r.status, 200);
        let mut all = true;
        for node in &fleet {
            all &= fleet_status(node).await["breaker"] == "closed";
        }
        all
    })
    .await;
    // Hung (SIGSTOP): the same.
    redis.pause();
    for i in 0..30 {
        let node = &fleet[i % 3];
        let r = get(&node.url(&format!("/hung/{i}"))).await;
        assert_eq!(r.status, 200, "request {i} with redis hung");
    }
    redis.resume();
    assert!(sum(&fleet, "calls_timed_out").await >= 3);
    // Per operation: the requests' acquires are among them.
    let mut acquires_timed_out = 0;
    for node in &fleet {
        let ops = &fleet_status(node).await["ops"];
        acquires_timed_out += ops["acquire"]["timed_out"].as_u64().unwrap();
    }
    assert!(acquires_timed_out >= 1, "no acquire timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_made_while_redis_is_out_reaches_the_fleet_when_it_is_back() {
    let mut redis = Redis::start();
    let origin = Origin::start().await;
    let fleet = nodes(&origin, &redis, "60s").await;
    let old = burst(&fleet, "/x", 1).await;
    assert_eq!(origin.hits_for("/x"), 1);
    redis.kill9();
    let answer = fleet[0].purge(TOKEN, r#"{"url": "/x"}"#).await;
    assert_eq!(answer["purged"], 1, "{answer}");
    assert_eq!(
        answer["fleet_pending"], 1,
        "applied here, waiting for redis: {answer}"
    );
    // The purging node itself no longer serves it.
    let here = get(&fleet[0].url("/x")).await;
    assert_ne!(here.body, old[0]);
    // Redis comes back (empty): the purge goes out, the others apply it.
    redis.restart();
    let what = "the purge reached the other nodes after redis came back";
    wait_until(LIMIT, what, async || {
        let pending = fleet_status(&fleet[0]).await["purges_pending"].as_u64();
        let b = fleet_status(&fleet[1]).await["purges_applied"]
            .as_u64()
            .unwrap_or(0);
        let c = fleet_status(&fleet[2]).await["purges_applied"]
            .as_u64()
            .unwrap_or(0);
        pending == Some(0) && b >= 1 && c >= 1
    })
    .await;
    for node in &fleet[1..] {
        let r = get(&node.url("/x")).await;
        assert_eq!(r.status, 200);
        assert_ne!(r.body, old[0], "the purged copy is not served");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_longer_than_the_lease_keeps_it() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(node_with(&origin, &redis, "30s", "lease = \"300ms\"").await);
    }
    // The origin takes three leases' time: the lease is renewed meanwhile,
    // so no other node takes over and fetches too.
    let path = "/slow?x-origin-delay-ms=900";
    burst(&fleet, path, 3).await;
    assert_eq!(origin.hits_for("/slow"), 1);
    assert_eq!(sum(&fleet, "leases_acquired").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uri_whose_responses_vary_is_shared_one_fetch_per_variant() {
    // `Vary: Accept-Language`: each language is fetched once for the
    // fleet, and no node is ever handed another language's answer.
    let redis = Redis::start();
    let origin = Origin::start().await;
    let fleet = nodes(&origin, &redis, "30s").await;
    let path = "/varies?x-origin-delay-ms=300&x-origin-header=Vary:%20Accept-Language";
    let ask = |language: &'static str| {
        let mut tasks = Vec::new();
        for node in &fleet {
            for _ in 0..5 {
                let url = node.url(path);
                tasks.push(tokio::spawn(async move {
                    request(
                        Method::GET,
                        &url,
                        &[("host", "fleet.test"), ("accept-language", language)],
                    )
                    .await
                }));
            }
        }
        tasks
    };
    let mut seen = std::collections::HashMap::new();
    for (round, language) in ["de", "fr", "de", "fr"].into_iter().enumerate() {
        let mut bodies = Vec::new();
        for task in ask(language) {
            let reply = task.await.unwrap();
            assert_eq!(reply.status, 200, "{}", reply.body);
            bodies.push(reply.body);
        }
        assert!(
            bodies.iter().all(|b| b == &bodies[0]),
            "{language}: one answer on every node: {bodies:?}"
        );
        let first = seen.entry(language).or_insert_with(|| bodies[0].clone());
        assert_eq!(
            first, &bodies[0],
            "{language}, round {round}: the same copy"
        );
        let fetched = if round < 2 { round as u64 + 1 } else { 2 };
        assert_eq!(
            origin.hits_for("/varies"),
            fetched,
            "{language}, round {round}: one fetch per variant for the fleet"
        );
        // Let the commit land before the next round. Not a wait on
        // `commits`: counted, the variant index may still be behind (a
        // `de` request then got the `fr` copy on a loaded machine).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(seen["de"], seen["fr"], "two variants");
    assert!(sum(&fleet, "shared_hits").await >= 2, "taken from redis");
    assert_eq!(sum(&fleet, "too_large").await, 0, "nothing kept local");
    // A purge of the URI on one node reaches every variant on every node.
    let others = [&fleet[0], &fleet[2]];
    let applied = applied_on(others).await;
    fleet[1]
        .purge(TOKEN, &format!(r#"{{"url": "http://fleet.test{path}"}}"#))
        .await;
    wait_until(LIMIT, "the purge applied on the other nodes", async || {
        let now = applied_on(others).await;
        now.iter().zip(&applied).all(|(n, a)| n > a)
    })
    .await;
    for task in ask("fr") {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200);
        assert_ne!(reply.body, seen["fr"], "purged: a new copy");
    }
    assert_eq!(origin.hits_for("/varies"), 3, "one fetch after the purge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_streams_is_shared_too_from_memory_and_from_disk() {
    // 600 KB: past the size a fill collects before storing, so its body
    // streams to readers as it arrives (and into a disk zone's file); still
    // under fleet.max_object_size (1 MiB), so it goes to Redis once whole.
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dirs: Vec<_> = (0..3)
        .map(|i| crate::scratch(&format!("fleet-big-{i}")))
        .collect();
    for (kind, fleet) in [
        ("memory", nodes(&origin, &redis, "30s").await),
        ("disk", {
            let mut fleet = Vec::new();
            for dir in &dirs {
                fleet.push(
                    Proxy::new(&origin)
                        .disk_zone(dir, "")
                        .route("ttl = { 200 = \"30s\" }\nlock_timeout = \"5s\"")
                        .fleet(&redis.url(), "timeout = \"200ms\"")
                        .start()
                        .await,
                );
            }
            fleet
        }),
    ] {
        let path = format!("/big-{kind}?x-origin-delay-ms=300&x-origin-body-bytes=600000");
        let bodies = burst(&fleet, &path, 3).await;
        assert!(
            bodies.iter().all(|b| b.len() == 600_000 && b == &bodies[0]),
            "{kind}: one whole answer everywhere"
        );
        assert_eq!(
            origin.hits_for(&format!("/big-{kind}")),
            1,
            "{kind}: one fetch for the fleet"
        );
        assert_eq!(sum(&fleet, "too_large").await, 0, "{kind}");
    }
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}
