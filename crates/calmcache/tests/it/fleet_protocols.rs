//! Fleet mode over every client protocol (issue 14): a copy stored by one
//! node is a shared hit on the others, and a `PURGE` on one node reaches
//! the others, the same over HTTP/1.1, h2c and HTTP/2 over TLS, with the
//! fleet secret (signed entries and purges, issue 25) and without.

use calmcache_testkit::redis::Redis;
use calmcache_testkit::Origin;
use http::Method;

use crate::fleet_harness::{
    applied, get, is_body_of, three_nodes, total, used, wait_applied, wait_connected, wait_used,
    CLOSED_WITHIN, H2C, H2_TLS, HOST, HTTP1, USED_WITHIN,
};

/// The other wire of the same scheme: HTTP/1.1 and h2c share the http
/// key; HTTP/2 over TLS is alone with https.
fn sibling(wire: usize) -> usize {
    match wire {
        HTTP1 => H2C,
        H2C => HTTP1,
        other => other,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_hits_and_purges_are_the_same_over_every_protocol() {
    every_protocol("timeout = \"1s\"").await;
}

/// The same with the fleet secret (issue 25): signed entries and purges
/// are shared as unsigned ones were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_shared_hits_and_purges_are_the_same_over_every_protocol() {
    let dir = crate::scratch("fleet-protocols-signed");
    let secret = dir.join("fleet.secret");
    std::fs::write(&secret, "a-fleet-secret-of-at-least-32-bytes-0123456789\n").unwrap();
    let keys = format!(
        "timeout = \"1s\"\nsecret_file = {:?}",
        secret.display().to_string()
    );
    every_protocol(&keys).await;
}

/// Shared hits and purges over each wire, nodes with `fleet_keys`.
async fn every_protocol(fleet_keys: &str) {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &redis.url(), fleet_keys, "60s").await;
    wait_connected(&nodes, CLOSED_WITHIN, "protocols").await;
    let purge = Method::from_bytes(b"PURGE").unwrap();
    for w in [HTTP1, H2C, H2_TLS] {
        let label = nodes[0].all[w].label();
        let path = format!("/shared/{w}");
        let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
        // Stored by one node, a hit from Redis on the others.
        let used_before = used(&nodes).await;
        let first = get(a, &a.all[w], &path).await;
        assert!(is_body_of(&first, &path), "{label}: {}", first.body);
        wait_used(&nodes, used_before, USED_WITHIN, label).await;
        let hits = total(&nodes, &["shared_hits"]).await;
        let r = get(b, &b.all[w], &path).await;
        assert_eq!(r.body, first.body, "{label}: node 1");
        let r = get(c, &c.all[sibling(w)], &path).await;
        assert_eq!(r.body, first.body, "{label}: node 2");
        assert_eq!(origin.hits_for(&path), 1, "{label}: one fetch");
        assert_eq!(total(&nodes, &["shared_hits"]).await, hits + 2, "{label}");
        // PURGE on one node: every node serves a new copy, one fetch.
        let seen = applied(&nodes[1..]).await;
        let r = a.send(&a.all[w], purge.clone(), HOST, &path, &[], "").await;
        assert_eq!(r.status, 200, "{label}: PURGE: {}", r.body);
        wait_applied(&nodes[1..], &seen, label).await;
        let second = get(b, &b.all[w], &path).await;
        assert!(is_body_of(&second, &path), "{label}: {}", second.body);
        assert_ne!(second.body, first.body, "{label}: purged on node 1");
        for (node, wire) in [(c, w), (a, sibling(w))] {
            let r = get(node, &node.all[wire], &path).await;
            assert_eq!(r.body, second.body, "{label}: one new copy for the fleet");
        }
        assert_eq!(
            origin.hits_for(&path),
            2,
            "{label}: one fetch after the purge"
        );
    }
    let refused = total(
        &nodes,
        &["entries_refused", "purges_refused", "purges_replayed"],
    )
    .await;
    assert_eq!(refused, 0, "nothing refused between nodes of one secret");
}
