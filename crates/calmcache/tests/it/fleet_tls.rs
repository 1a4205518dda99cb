//! Fleet mode over TLS (issue 14): nodes reach a TLS-only redis-server
//! (started by the test on a free loopback port, certificates of a
//! throw-away CA) by `rediss://`, trusting the CA (`tls_ca`) and showing a
//! client certificate (`tls_cert`, `tls_key`) to a Redis that requires one
//! (its default, `tls-auth-clients yes`), or with an ACL user and password
//! to one that does not; on one instance and on a cluster of three masters.
//! The fleet then works as over plain TCP: one origin fetch, shared hits,
//! purges. A node that cannot get through (it trusts another CA, shows no
//! certificate, or has the wrong password) fails no request: its breaker
//! opens and it goes on alone, the origin answering it.

use std::path::Path;
use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::redis::{ClientCerts, Redis, RedisCluster};
use calmcache_testkit::tls::TestCa;
use calmcache_testkit::Origin;

use crate::fleet::{burst, fleet_status, get, node_at, node_with, sum, TOKEN};
use crate::wait_until;

/// Three nodes on `redis` (a URL, or a TOML list of a cluster's) with
/// `[fleet]` keys `keys`.
async fn three_nodes(origin: &Origin, redis: &str, keys: &str) -> Vec<RunningProxy> {
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(node_at(origin, redis, "30s", keys).await);
    }
    fleet
}

/// `tls_ca`, `tls_cert` and `tls_key` as `[fleet]` lines (any of them).
fn tls_keys(ca: Option<&Path>, client: Option<(&Path, &Path)>) -> String {
    let mut keys = String::new();
    if let Some(ca) = ca {
        keys += &format!("tls_ca = \"{}\"\n", ca.display());
    }
    if let Some((cert, key)) = client {
        keys += &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
            cert.display(),
            key.display()
        );
    }
    keys
}

/// Waits (at most 10 s) until `field` summed over `nodes` reaches `n`.
async fn wait_sum(nodes: &[RunningProxy], field: &str, n: u64) {
    let what = format!("{field} summed to {n}");
    wait_until(Duration::from_secs(10), &what, async || {
        sum(nodes, field).await >= n
    })
    .await;
}

/// Every node's breaker is closed and never opened, its calls answered,
/// and no more of them failed than `failed` (for the fleet).
async fn assert_on_redis(nodes: &[RunningProxy], failed: u64) {
    for node in nodes {
        let s = fleet_status(node).await;
        assert_eq!(s["breaker"], "closed", "{s}");
        assert_eq!(s["breaker_opened"], 0, "{s}");
        assert!(s["calls_ok"].as_u64() > Some(0), "{s}");
    }
    let errors: Vec<serde_json::Value> = last_errors(nodes).await;
    assert_eq!(
        sum(nodes, "calls_failed").await,
        failed,
        "failed calls: {errors:?}"
    );
}

/// Requests on every node of `strays`, which cannot get through to Redis,
/// are all answered (by the origin: each its own fetch) while their calls
/// fail, until their breakers open (a node calls Redis on each miss and
/// polls the purge stream every 200 ms), and after: they go on alone.
async fn goes_on_alone(strays: &[RunningProxy], origin: &Origin, tag: &str) {
    let mut round = 0;
    let what = format!("{tag}: the breakers open");
    wait_until(Duration::from_secs(10), &what, async || {
        round += 1;
        for (i, node) in strays.iter().enumerate() {
            let path = format!("/{tag}/{i}/{round}");
            let r = get(&node.url(&path)).await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            assert!(r.body.starts_with(&format!("path={path} n=")), "{}", r.body);
            assert_eq!(origin.hits_for(&path), 1, "{path}: the origin answered");
        }
        let mut opened = true;
        for node in strays {
            opened &= fleet_status(node).await["breaker_opened"].as_u64() >= Some(1);
        }
        opened
    })
    .await;
    for (i, node) in strays.iter().enumerate() {
        let s = fleet_status(node).await;
        assert_ne!(s["breaker"], "closed", "{s}");
        assert_eq!(s["calls_ok"], 0, "no call got through: {s}");
        assert!(s["calls_failed"].as_u64() > Some(0), "{s}");
        // Why, in /status (not only in a debug log).
        assert!(
            s["last_error"].as_str().is_some_and(|e| !e.is_empty()),
            "{s}"
        );
        let path = format!("/{tag}/{i}/after");
        assert_eq!(get(&node.url(&path)).await.status, 200);
        assert_eq!(origin.hits_for(&path), 1, "{path}: fetched alone");
    }
}

/// The shared-tier checks of plain TCP, over TLS: concurrent requests on
/// every node send the origin one fetch, and a copy one node stored is a
/// hit for the others.
async fn one_fetch_and_shared_hits(fleet: &[RunningProxy], origin: &Origin) {
    // A slow page: every node's requests arrive while the first fetch runs.
    let bodies = burst(fleet, "/page?x-origin-delay-ms=300", 10).await;
    assert_eq!(origin.hits_for("/page"), 1, "one fetch for the fleet");
    assert!(bodies.iter().all(|b| b == &bodies[0]), "one answer");
    assert_eq!(sum(fleet, "leases_acquired").await, 1);
    let commits = sum(fleet, "commits").await;
    let first = get(&fleet[0].url("/shared")).await;
    assert_eq!(first.status, 200);
    wait_sum(fleet, "commits", commits + 1).await;
    let shared_hits = sum(fleet, "shared_hits").await;
    for node in &fleet[1..] {
        assert_eq!(get(&node.url("/shared")).await.body, first.body);
    }
    assert_eq!(origin.hits_for("/shared"), 1, "taken from redis");
    assert_eq!(
        sum(fleet, "shared_hits").await,
        shared_hits + fleet.len() as u64 - 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_over_mutual_tls_act_as_one_cache() {
    let redis = Redis::start_tls(ClientCerts::Required);
    let tls = redis.tls().unwrap();
    let origin = Origin::start().await;
    let keys = tls.fleet_keys();
    let fleet = three_nodes(&origin, &redis.url(), &keys).await;
    one_fetch_and_shared_hits(&fleet, &origin).await;
    assert_on_redis(&fleet, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refused_by_tls_fails_no_request_and_goes_on_alone() {
    let redis = Redis::start_tls(ClientCerts::Required);
    let tls = redis.tls().unwrap();
    let client = (tls.client.cert.as_path(), tls.client.key.as_path());
    let origin = Origin::start().await;
    let good = vec![node_with(&origin, &redis, "30s", &tls.fleet_keys()).await];
    let other_dir = crate::scratch("fleet-tls-other-ca");
    let other = TestCa::new(&other_dir);
    let strays = vec![
        // It trusts another CA (its client certificate is right).
        node_with(
            &origin,
            &redis,
            "30s",
            &tls_keys(Some(&other.ca_pem), Some(client)),
        )
        .await,
        // It trusts the CA but shows no certificate.
        node_with(
            &origin,
            &redis,
            "30s",
            &tls_keys(Some(&tls.ca.ca_pem), None),
        )
        .await,
    ];
    goes_on_alone(&strays, &origin, "alone").await;
    // The node with the right certificates was on Redis all along.
    get(&good[0].url("/good")).await;
    wait_sum(&good, "commits", 1).await;
    assert_on_redis(&good, 0).await;
    let _ = std::fs::remove_dir_all(other_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_a_password_over_tls_shares_and_purges() {
    // Redis asks no client certificate here: the password is the check.
    let redis = Redis::start_tls(ClientCerts::NotAsked);
    let tls = redis.tls().unwrap();
    // The user may touch calmcache's keys only, no pub/sub channel, and
    // no dangerous command (the README's example).
    let user = [
        "ACL",
        "SETUSER",
        "calmcache",
        "on",
        ">s3cret-pw",
        "~cc:*",
        "resetchannels",
        "+@all",
        "-@dangerous",
    ];
    assert_eq!(redis.command(&user).unwrap(), "+OK");
    assert_eq!(
        redis
            .command(&["ACL", "SETUSER", "default", "off"])
            .unwrap(),
        "+OK"
    );
    let dir = crate::scratch("fleet-tls-acl");
    let password = dir.join("redis-password");
    std::fs::write(&password, "s3cret-pw\n").unwrap();
    let ca = tls_keys(Some(&tls.ca.ca_pem), None);
    let keys = format!(
        "{ca}user = \"calmcache\"\npassword_file = \"{}\"\n",
        password.display()
    );
    let origin = Origin::start().await;
    let fleet = vec![
        node_with(&origin, &redis, "30s", &keys).await,
        node_with(&origin, &redis, "30s", &keys).await,
    ];
    one_fetch_and_shared_hits(&fleet, &origin).await;
    // A purge goes through the stream (XADD, XREAD) under the ACL too.
    let answer = fleet[0].purge(TOKEN, r#"{"url": "/shared"}"#).await;
    assert_eq!(answer["purged"], 1, "{answer}");
    wait_sum(&fleet[1..], "purges_applied", 1).await;
    let again = get(&fleet[1].url("/shared")).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        origin.hits_for("/shared"),
        2,
        "fetched anew: {}",
        again.body
    );
    assert_on_redis(&fleet, 0).await;
    // Without +info (the ACL above): Redis' memory is unknown, with a
    // warning that says why, and no call counted failed (issue 30).
    wait_until(Duration::from_secs(10), "the INFO warning", async || {
        let redis = &fleet_status(&fleet[0]).await["redis"];
        redis["warning"]
            .as_str()
            .is_some_and(|w| w.contains("+info"))
            && redis["used_memory"].is_null()
    })
    .await;
    assert_on_redis(&fleet, 0).await;
    // The wrong password: alone, every request answered.
    let wrong = format!("{ca}user = \"calmcache\"\npassword = \"nope\"\n");
    let stray = [node_with(&origin, &redis, "30s", &wrong).await];
    goes_on_alone(&stray, &origin, "wrong-password").await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_a_tls_cluster_act_as_one_cache() {
    let cluster = RedisCluster::start_tls(ClientCerts::Required);
    let tls = cluster.nodes[0].tls().unwrap();
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let seeds = format!("[{}]", urls.join(", "));
    let origin = Origin::start().await;
    let keys = tls.fleet_keys();
    let fleet = three_nodes(&origin, &seeds, &keys).await;
    // A cluster connects in the background: wait until every node's
    // calls (purge polls, every 200 ms) are answered.
    wait_until(
        Duration::from_secs(10),
        "connected to the cluster",
        async || {
            let mut ready = true;
            for node in &fleet {
                ready &= fleet_status(node).await["calls_ok"].as_u64() > Some(0);
            }
            ready
        },
    )
    .await;
    // Calls made before the connection was up count as failed; none after.
    let failed = sum(&fleet, "calls_failed").await;
    one_fetch_and_shared_hits(&fleet, &origin).await;
    assert_on_redis(&fleet, failed).await;
}

/// Each node's last failed Redis call.
async fn last_errors(nodes: &[RunningProxy]) -> Vec<serde_json::Value> {
    let mut errors = Vec::new();
    for node in nodes {
        let s = fleet_status(node).await;
        let failed: Vec<String> = s["ops"]
            .as_object()
            .map(|ops| {
                ops.iter()
                    .filter(|(_, c)| c["failed"].as_u64() > Some(0))
                    .map(|(op, c)| format!("{op}: {} failed", c["failed"]))
                    .collect()
            })
            .unwrap_or_default();
        errors.push(serde_json::json!({"last": s["last_error"], "failed": failed}));
    }
    errors
}
