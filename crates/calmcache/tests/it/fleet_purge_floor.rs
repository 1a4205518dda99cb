//! Purges that name no key in Redis (issue 30): a prefix purge makes only
//! the copies under its prefix unusable in the shared tier, so the fleet
//! goes on sharing the rest (before, one prefix purge made every copy in
//! Redis unusable and the fleet fetched everything again); a tag purge
//! still takes every copy Redis holds (a copy's tags are not known before
//! it is read). With and without the fleet secret, over every wire.

use std::sync::Arc;

use calmcache_testkit::redis::Redis;
use calmcache_testkit::{Origin, Wires};

use crate::fleet_harness::{
    applied, diagnose, get, is_body_of, signed_keys, three_nodes, total, wait_applied,
    wait_connected, CLOSED_WITHIN, H2C, H2_TLS, HTTP1, TOKEN, USED_WITHIN,
};
use crate::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_purge_leaves_other_prefixes_shared_and_a_tag_purge_does_not() {
    purge_floors("timeout = \"3s\"").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_a_prefix_purge_leaves_other_prefixes_shared() {
    let keys = signed_keys("fleet-purge-floor-signed");
    purge_floors(&keys).await;
}

async fn purge_floors(fleet_keys: &str) {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &redis.url(), fleet_keys, "60s").await;
    wait_connected(&nodes, CLOSED_WITHIN, "purge floors").await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    // Node a fills the fleet with two objects under two prefixes (http:
    // HTTP/1.1 and h2c share the key).
    let kept = get(a, &a.all[H2C], "/kept/1").await;
    let purged = get(a, &a.all[HTTP1], "/gone/1").await;
    assert!(is_body_of(&kept, "/kept/1") && is_body_of(&purged, "/gone/1"));
    committed(&nodes, 2).await;

    // A prefix purge on node b reaches a and c.
    let seen = applied(&[a.clone(), c.clone()]).await;
    b.proxy.purge(TOKEN, r#"{"prefix": "/gone/"}"#).await;
    wait_applied(&[a.clone(), c.clone()], &seen, "prefix purge").await;

    // Node c never had either: the other prefix is a shared hit, on both
    // http wires; the purged one is fetched again.
    for wire in [HTTP1, H2C] {
        let r = get(c, &c.all[wire], "/kept/1").await;
        assert_eq!(
            r.body,
            kept.body,
            "{}: the copy in redis",
            c.all[wire].label()
        );
    }
    assert_eq!(
        origin.hits_for("/kept/1"),
        1,
        "another prefix stays shared:{}",
        diagnose(&nodes).await
    );
    let again = get(c, &c.all[HTTP1], "/gone/1").await;
    assert!(is_body_of(&again, "/gone/1") && again.body != purged.body);
    assert_eq!(
        origin.hits_for("/gone/1"),
        2,
        "the purged prefix is fetched"
    );
    // Node b, which sent the purge, shares /kept/ too (its own rule).
    let r = get(b, &b.all[HTTP1], "/kept/1").await;
    assert_eq!(r.body, kept.body);
    assert_eq!(origin.hits_for("/kept/1"), 1, "{}", diagnose(&nodes).await);

    // https: its own objects, the same rules.
    let tls_kept = get(a, &a.all[H2_TLS], "/kept/2").await;
    committed(&nodes, 4).await;
    let seen = applied(&[b.clone(), c.clone()]).await;
    a.proxy.purge(TOKEN, r#"{"prefix": "/gone/"}"#).await;
    wait_applied(&[b.clone(), c.clone()], &seen, "second prefix purge").await;
    let r = get(c, &c.all[H2_TLS], "/kept/2").await;
    assert_eq!(r.body, tls_kept.body, "https: another prefix stays shared");
    assert_eq!(origin.hits_for("/kept/2"), 1);

    // A tag purge: a copy's tags are not known before it is read, so every
    // copy Redis holds from before it is set aside; node b never had
    // /kept/2 and fetches it.
    let seen = applied(&[a.clone(), b.clone()]).await;
    c.proxy.purge(TOKEN, r#"{"tag": "nothing-has-it"}"#).await;
    wait_applied(&[a.clone(), b.clone()], &seen, "tag purge").await;
    let r = get(b, &b.all[H2_TLS], "/kept/2").await;
    assert!(is_body_of(&r, "/kept/2") && r.body != tls_kept.body);
    assert_eq!(origin.hits_for("/kept/2"), 2, "{}", diagnose(&nodes).await);
}

/// Waits until the fleet has stored `n` copies in Redis.
async fn committed(nodes: &[Arc<Wires>], n: u64) {
    wait_until(USED_WITHIN, "copies committed", async || {
        total(nodes, &["commits"]).await >= n
    })
    .await;
}
