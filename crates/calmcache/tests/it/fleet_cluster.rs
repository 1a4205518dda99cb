//! Fleet mode on a Redis Cluster of three masters (issue 14): the fleet
//! still sends one origin fetch per object, a purge reaches every node, and
//! every key calmcache writes for one object is in one hash slot; a master
//! killed under load fails no request; and a node started under traffic
//! before its first connection to the cluster is up does not open its
//! breaker (a regression test).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use calmcache_testkit::redis::RedisCluster;
use calmcache_testkit::{Origin, Wires};
use http::Method;

use crate::fleet_harness::{
    applied, diagnose, fleet_status, get, is_body_of, no_failed_request, node, three_nodes, total,
    wait_applied, wait_connected, Load, Watch, CLOSED_WITHIN, H2C, H2_TLS, HOST, HTTP1, TOKEN,
    USED_WITHIN,
};

/// Regression: a node on a cluster counted the calls made before its
/// first connection was up (in the background) as failures, so a node
/// started under traffic opened its breaker at once and went on alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_under_traffic_on_a_cluster_does_not_open_its_breaker() {
    let cluster = RedisCluster::start();
    let origin = Origin::start().await;
    let urls = toml_list(&cluster.urls());
    let mut nodes = Vec::new();
    let mut tasks = Vec::new();
    for n in 0..3 {
        let node = node(&origin, &urls, "timeout = \"1s\"", "60s").await;
        // Requests at once, before its connection is up.
        for i in 0..5 {
            let (node, wire) = (node.clone(), node.all[HTTP1].clone());
            tasks.push(tokio::spawn(async move {
                let path = format!("/start/{n}-{i}");
                let r = get(&node, &wire, &path).await;
                assert!(is_body_of(&r, &path), "{}", r.body);
            }));
        }
        nodes.push(node);
    }
    for task in tasks {
        task.await.unwrap();
    }
    wait_connected(&nodes, CLOSED_WITHIN, "started").await;
    for node in &nodes {
        let s = fleet_status(node).await;
        assert_eq!(s["breaker_opened"], 0, "{s}");
    }
}

/// The call deadline of the coalescing test. One fetch per object needs
/// every node on Redis; this test failed once in a CI run of the whole
/// suite on 2 cores (at dcd9918; its message was lost), and a breaker
/// opened by a loaded machine, which rightly sends a node to the origin
/// alone, is the likely cause (not proven). A 3 s deadline puts the
/// latency rule's threshold at 2.25 s; `fetches` says what each node's
/// fleet did if a count is off again.
const CALM_TIMEOUT: &str = "timeout = \"3s\"";

/// The origin has had `n` fetches of `/page`; if not, what each node's
/// fleet did (a breaker that opened explains an extra fetch).
async fn fetches(origin: &Origin, nodes: &[Arc<Wires>], n: u64, what: &str) {
    let seen = origin.hits_for("/page");
    if seen != n {
        panic!(
            "{what}: {seen} origin fetches, not {n}:{}",
            diagnose(nodes).await
        );
    }
}

/// `["redis://...", ...]` for the builder.
fn toml_list(urls: &[String]) -> String {
    let quoted: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// `n` GETs of `path` at once on every node, over `wires` in turn; every
/// answer the right object, and the bodies.
async fn burst(nodes: &[Arc<Wires>], wires: &[usize], path: &str, n: usize) -> Vec<String> {
    let mut tasks = Vec::new();
    for node in nodes {
        for i in 0..n {
            let (node, path) = (node.clone(), path.to_owned());
            let wire = node.all[wires[i % wires.len()]].clone();
            tasks.push(tokio::spawn(async move {
                let r = get(&node, &wire, &path).await;
                assert!(
                    is_body_of(&r, &path),
                    "{}: {} {}",
                    wire.label(),
                    r.status,
                    r.body
                );
                r.body
            }));
        }
    }
    let mut bodies = Vec::new();
    for task in tasks {
        bodies.push(task.await.unwrap());
    }
    bodies
}

/// The keys of every cluster node matching `cc:{*}:*`, by node.
fn cluster_keys(cluster: &RedisCluster) -> Vec<Vec<String>> {
    // A script, so the reply is one bulk string the fixture can read.
    let script = "return table.concat(redis.call('KEYS', 'cc:{*}:*'), ' ')";
    cluster
        .nodes
        .iter()
        .map(|n| {
            let reply = n.command(&["EVAL", script, "0"]).unwrap();
            assert!(!reply.starts_with('-'), "KEYS: {reply}");
            reply.split_whitespace().map(str::to_owned).collect()
        })
        .collect()
}

/// `cc:{H}:x` -> `H`.
fn hash_tag(key: &str) -> &str {
    let open = key.find('{').unwrap();
    let close = key.find('}').unwrap();
    &key[open + 1..close]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_a_redis_cluster_coalesces_purges_and_keeps_an_object_in_one_slot() {
    let cluster = RedisCluster::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &toml_list(&cluster.urls()), CALM_TIMEOUT, "60s").await;
    wait_connected(&nodes, CLOSED_WITHIN, "cluster").await;

    // A slow page: 30 requests on 3 nodes arrive while the first fetch
    // runs; one fetch. Over http (HTTP/1.1 and h2c share its key), then
    // over https: another object, another slot (perhaps another master).
    let path = "/page?x-origin-delay-ms=300";
    let bodies = burst(&nodes, &[HTTP1, H2C], path, 10).await;
    fetches(&origin, &nodes, 1, "one fetch for 30 requests").await;
    assert!(bodies.iter().all(|b| b == &bodies[0]), "{bodies:?}");
    let tls = burst(&nodes, &[H2_TLS], path, 10).await;
    fetches(&origin, &nodes, 2, "one fetch for the https object").await;
    assert!(
        tls.iter().all(|b| b == &tls[0] && b != &bodies[0]),
        "{tls:?}"
    );
    let leases = total(&nodes, &["leases_acquired"]).await;
    assert_eq!(leases, 2, "{}", diagnose(&nodes).await);
    // Both in Redis: a node that never saw them takes them from there.
    let late = node(&origin, &toml_list(&cluster.urls()), CALM_TIMEOUT, "60s").await;
    wait_connected(std::slice::from_ref(&late), CLOSED_WITHIN, "a late node").await;
    crate::wait_until(USED_WITHIN, "both objects committed", async || {
        total(&nodes, &["commits"]).await >= 2
    })
    .await;
    assert_eq!(get(&late, &late.all[H2C], path).await.body, bodies[0]);
    assert_eq!(get(&late, &late.all[H2_TLS], path).await.body, tls[0]);
    let late_status = fleet_status(&late).await;
    assert_eq!(late_status["shared_hits"], 2, "late node: {late_status}");
    fetches(&origin, &nodes, 2, "none for the late node").await;

    // A purge on one node (PURGE over h2c: both schemes' objects) reaches
    // the other nodes and Redis: one fetch per object for the fleet after.
    let mut all = nodes.clone();
    all.push(late);
    let seen = applied(&all[1..]).await;
    let purge = Method::from_bytes(b"PURGE").unwrap();
    let r = all[0]
        .send(&all[0].all[H2C], purge, HOST, path, &[], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_applied(&all[1..], &seen, "URL purge").await;
    let again = burst(&all, &[HTTP1, H2C], path, 2).await;
    let tls_again = burst(&all, &[H2_TLS], path, 2).await;
    fetches(&origin, &all, 4, "one fetch per object after").await;
    assert!(again.iter().all(|b| b == &again[0] && b != &bodies[0]));
    assert!(tls_again.iter().all(|b| b == &tls_again[0] && b != &tls[0]));

    // A prefix purge: the purge epoch (a key of its own slot) and the stream.
    let seen = applied(&all[1..]).await;
    all[0].proxy.purge(TOKEN, r#"{"prefix": "/pa"}"#).await;
    wait_applied(&all[1..], &seen, "prefix purge").await;
    let third = burst(&all, &[H2C], path, 1).await;
    fetches(&origin, &all, 5, "one fetch after the prefix purge").await;
    assert!(third.iter().all(|b| b == &third[0] && b != &again[0]));

    // Every key of one object in one slot, on one master: the {H} tag.
    crate::wait_until(USED_WITHIN, "every fill committed", async || {
        total(&all, &["commits"]).await >= 5
    })
    .await;
    let mut objects: BTreeMap<String, (BTreeSet<String>, BTreeSet<usize>)> = BTreeMap::new();
    for (master, keys) in cluster_keys(&cluster).into_iter().enumerate() {
        for key in keys {
            let entry = objects.entry(hash_tag(&key).to_owned()).or_default();
            entry.1.insert(master);
            entry.0.insert(key);
        }
    }
    // The fleet's membership keys share their own tag (fleet_members.rs).
    objects.remove("members");
    assert_eq!(objects.len(), 2, "two objects (http, https): {objects:?}");
    let mut masters = BTreeSet::<usize>::new();
    for (hash, (keys, on)) in &objects {
        let kinds: BTreeSet<&str> = keys.iter().map(|k| &k[k.rfind(':').unwrap()..]).collect();
        assert!(
            kinds.is_superset(&BTreeSet::from([":m", ":f", ":p"])),
            "meta, fence and purge time: {keys:?}"
        );
        assert_eq!(on.len(), 1, "{hash}: on one master: {keys:?} on {on:?}");
        masters.extend(on);
        let named = ["m", "l", "f", "p"].map(|k| format!("cc:{{{hash}}}:{k}"));
        let slots: BTreeSet<u16> = keys.iter().chain(&named).map(|k| cluster.slot(k)).collect();
        assert_eq!(slots.len(), 1, "{hash}: one slot: {keys:?} -> {slots:?}");
    }
    eprintln!("cluster: the two objects on masters {masters:?}");
}

/// A master of the cluster killed (no replicas: its slots are gone, and
/// soon the whole cluster says `cluster_state:fail`), then started again
/// on its port with its cluster config, empty: no request fails, the nodes
/// go on alone and come back to the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_master_under_load_fails_no_request() {
    let mut cluster = RedisCluster::start();
    let origin = Origin::start().await;
    let urls = toml_list(&cluster.urls());
    let nodes = three_nodes(&origin, &urls, "timeout = \"200ms\"", "1s").await;
    let load = Load::start(&nodes);

    let watch = Watch::before("cluster master kill -9", &nodes, &load).await;
    tokio::task::block_in_place(|| cluster.nodes[1].kill9());
    // Calls for the other masters' slots go on until the cluster fails
    // (its node timeout is 1 s).
    watch.opens_within(Duration::from_secs(10)).await;
    watch.lasts(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| cluster.nodes[1].restart());
    crate::wait_until(
        Duration::from_secs(10),
        "cluster_state ok again",
        async || tokio::task::block_in_place(|| cluster.ok()),
    )
    .await;
    watch.recovers().await;

    no_failed_request(load, "cluster master kill -9").await;
}
