//! Large objects shared through Redis in pieces (issue 30): a 5 MiB and a
//! 40 MiB body fetched once by the fleet and served byte-exact by the other
//! nodes over every wire; a piece deleted or overwritten in Redis is a
//! miss, fetched again, never served; Redis stopped or killed while the
//! pieces are written leaves no object another node would take; on a
//! Redis Cluster the pieces of one object land on several masters.

use std::sync::Arc;
use std::time::Duration;

use calmcache_testkit::redis::{Redis, RedisCluster};
use calmcache_testkit::{stream_byte, DelayProxy, Origin, Proxy, Reply, Wires};

use crate::fleet_harness::{
    fleet_status, get, total, wait_connected, CLOSED_WITHIN, H2C, H2_TLS, HTTP1, TOKEN,
};
use crate::wait_until;

const MIB: usize = 1024 * 1024;

/// A node whose local zone takes 64 MiB objects, on `redis` with `keys`.
async fn node(origin: &Origin, redis: &str, keys: &str) -> Arc<Wires> {
    let proxy = Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .zone("512MiB", "64MiB")
        .route("ttl = { 200 = \"60s\" }\nlock_timeout = \"5s\"")
        .fleet(redis, keys);
    Arc::new(Wires::start(proxy, "").await)
}

/// A generated body of `len` bytes at `/big/<name>`.
fn big(name: &str, len: usize) -> String {
    format!("/big/{name}?x-origin-stream-bytes={len}")
}

/// The path the origin counts hits under (no query).
fn counted(path: &str) -> &str {
    path.split_once('?').map_or(path, |(p, _)| p)
}

/// `reply` is the whole generated body of `len` bytes, byte for byte.
fn assert_exact(reply: &Reply, len: usize, what: &str) {
    assert_eq!(reply.status, 200, "{what}: {}", reply.cache_status());
    assert_eq!(reply.bytes.len(), len, "{what}: length");
    let wrong = reply
        .bytes
        .iter()
        .enumerate()
        .position(|(i, b)| *b != stream_byte(i as u64));
    assert_eq!(wrong, None, "{what}: the first wrong byte");
}

async fn pieces(node: &Wires, what: &str) -> u64 {
    fleet_status(node).await["pieces"][what]
        .as_u64()
        .unwrap_or(0)
}

/// Waits until the fleet has committed more than `than` objects.
async fn wait_commits(nodes: &[Arc<Wires>], than: u64, what: &str) {
    let awaited = format!("{what}: committed to redis");
    wait_until(Duration::from_secs(20), &awaited, async || {
        total(nodes, &["commits"]).await > than
    })
    .await;
}

/// The piece keys in `redis` (`cc:{H.G.i}:b`), sorted.
fn piece_keys(redis: &Redis) -> Vec<String> {
    // A script, so the reply is one bulk string the fixture can read.
    let script = "return table.concat(redis.call('KEYS', 'cc:*:b'), ' ')";
    let reply = redis.command(&["EVAL", script, "0"]).unwrap_or_default();
    assert!(!reply.starts_with('-'), "KEYS: {reply}");
    let mut keys: Vec<String> = reply.split_whitespace().map(str::to_owned).collect();
    keys.sort();
    keys
}

/// The number of entries (`cc:{H}:m`) in `redis`.
fn entries(redis: &Redis) -> usize {
    let script = "return #redis.call('KEYS', 'cc:*:m')";
    redis
        .command(&["EVAL", script, "0"])
        .unwrap_or_default()
        .trim_start_matches(':')
        .parse()
        .unwrap_or(usize::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_are_fetched_once_and_served_byte_exact_by_every_node_over_every_wire() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let keys = "timeout = \"1s\"";
    let nodes = vec![
        node(&origin, &redis.url(), keys).await,
        node(&origin, &redis.url(), keys).await,
        node(&origin, &redis.url(), keys).await,
    ];
    wait_connected(&nodes, CLOSED_WITHIN, "pieces").await;
    // HTTP/1.1 and h2c share the http key; HTTP/2 over TLS has https's.
    let sizes = [("five", 5 * MIB), ("forty", 40 * MIB)];
    for ((name, len), (wire, sibling)) in sizes
        .iter()
        .flat_map(|s| [(s, (HTTP1, H2C)), (s, (H2_TLS, H2_TLS))])
    {
        let path = big(&format!("{name}-{wire}"), *len);
        let what = format!("{name} over {}", nodes[0].all[wire].label());
        let commits = total(&nodes, &["commits"]).await;
        let first = get(&nodes[0], &nodes[0].all[wire], &path).await;
        assert_exact(&first, *len, &format!("{what}: the fetch"));
        wait_commits(&nodes, commits, &what).await;
        let hits = total(&nodes, &["shared_hits"]).await;
        for (n, wire) in [(1, wire), (2, sibling)] {
            let node = &nodes[n];
            let r = get(node, &node.all[wire], &path).await;
            assert_exact(
                &r,
                *len,
                &format!("{what}: node {n} {}", node.all[wire].label()),
            );
        }
        assert_eq!(origin.hits_for(counted(&path)), 1, "{what}: one fetch");
        assert_eq!(total(&nodes, &["shared_hits"]).await, hits + 2, "{what}");
    }
    let written = pieces(&nodes[0], "written").await;
    assert!(written >= 2 * (5 + 40) * 4, "{written} pieces written");
    assert_eq!(total(&nodes, &["bad_entries"]).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_deleted_from_redis_is_a_miss_fetched_again() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = vec![
        node(&origin, &redis.url(), "timeout = \"1s\"").await,
        node(&origin, &redis.url(), "timeout = \"1s\"").await,
    ];
    wait_connected(&nodes, CLOSED_WITHIN, "deleted piece").await;
    let (path, len) = (big("deleted", 5 * MIB), 5 * MIB);
    assert_exact(
        &get(&nodes[0], &nodes[0].all[HTTP1], &path).await,
        len,
        "fetch",
    );
    wait_commits(&nodes, 0, "deleted piece").await;
    let keys = piece_keys(&redis);
    // The body's pieces (streamed as it arrived: the head is in the manifest).
    assert_eq!(keys.len(), len.div_ceil(256 * 1024), "{keys:?}");
    assert_eq!(redis.command(&["DEL", &keys[3]]).unwrap(), ":1");
    let r = get(&nodes[1], &nodes[1].all[H2C], &path).await;
    assert_exact(&r, len, "node 1, a piece gone");
    assert_eq!(origin.hits_for(counted(&path)), 2, "fetched again");
    assert_eq!(pieces(&nodes[1], "bad").await, 1);
    assert_eq!(total(&nodes, &["shared_hits"]).await, 0);
}

/// With the fleet secret: the manifest is signed, and a piece with other
/// bytes (its length kept) still never verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_overwritten_in_redis_is_never_served() {
    let dir = crate::scratch("fleet-pieces-signed");
    let secret = dir.join("fleet.secret");
    std::fs::write(&secret, "a-fleet-secret-of-at-least-32-bytes-0123456789\n").unwrap();
    let keys = keys_of(&secret);
    let redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = vec![
        node(&origin, &redis.url(), &keys).await,
        node(&origin, &redis.url(), &keys).await,
    ];
    wait_connected(&nodes, CLOSED_WITHIN, "overwritten piece").await;
    let (path, len) = (big("overwritten", 5 * MIB), 5 * MIB);
    assert_exact(
        &get(&nodes[0], &nodes[0].all[HTTP1], &path).await,
        len,
        "fetch",
    );
    wait_commits(&nodes, 0, "overwritten piece").await;
    // Untouched, the copy is shared.
    let r = get(&nodes[1], &nodes[1].all[HTTP1], &path).await;
    assert_exact(&r, len, "node 1");
    assert_eq!(origin.hits_for(counted(&path)), 1);
    // Two bytes of one piece changed (two body bytes in a row can never
    // both be `z`): a third node's read refuses the copy.
    let piece = &piece_keys(&redis)[5];
    let before = redis.command(&["STRLEN", piece]).unwrap();
    redis.command(&["SETRANGE", piece, "1000", "zz"]).unwrap();
    assert_eq!(redis.command(&["STRLEN", piece]).unwrap(), before);
    let third = node(&origin, &redis.url(), &keys).await;
    wait_connected(std::slice::from_ref(&third), CLOSED_WITHIN, "third node").await;
    let r = get(&third, &third.all[H2C], &path).await;
    assert_exact(&r, len, "node 2, a piece changed");
    assert_eq!(origin.hits_for(counted(&path)), 2, "fetched again");
    assert_eq!(pieces(&third, "bad").await, 1);
}

fn keys_of(secret: &std::path::Path) -> String {
    format!(
        "timeout = \"1s\"\nsecret_file = {:?}",
        secret.display().to_string()
    )
}

/// Redis stopped (`kill -STOP` past the call deadline), then killed
/// (`kill -9`), while the leader writes a 40 MiB object's pieces through a
/// slow link: its client got every byte, no entry was committed for the
/// pieces written, and the other node serves the right bytes after Redis
/// returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_or_killed_between_pieces_leaves_no_object_to_take() {
    let mut redis = Redis::start();
    let slow = DelayProxy::start(redis.addr()).await;
    slow.set_delay(Duration::from_millis(10));
    let origin = Origin::start().await;
    let keys = "timeout = \"500ms\"";
    let leader = node(&origin, &format!("redis://{}", slow.addr()), keys).await;
    let other = node(&origin, &redis.url(), keys).await;
    let nodes = vec![leader.clone(), other.clone()];
    wait_connected(&nodes, CLOSED_WITHIN, "between pieces").await;
    let len = 40 * MIB;
    // Stopped while the body arrives and its pieces are written: the
    // piece calls miss their deadline, nothing is committed.
    let path = big("stopped", len);
    let fetch = leader_get(&leader, HTTP1, &path);
    wait_until(Duration::from_secs(20), "some pieces written", async || {
        !piece_keys(&redis).is_empty()
    })
    .await;
    redis.pause();
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.resume();
    assert_exact(&fetch.await.unwrap(), len, "leader");
    assert_eq!(
        entries(&redis),
        0,
        "no entry for a fill whose pieces failed"
    );
    wait_connected(&nodes, CLOSED_WITHIN, "after the stop").await;
    let r = get(&other, &other.all[H2C], &path).await;
    assert_exact(&r, len, "the other node after the stop");
    assert_eq!(origin.hits_for(counted(&path)), 2);
    // Killed: Redis comes back empty; the nodes go on.
    let path = big("killed", len);
    let pieces_before = piece_keys(&redis).len();
    let commits_before = total(&nodes[..1], &["commits"]).await;
    let fetch = leader_get(&leader, H2C, &path);
    wait_until(Duration::from_secs(20), "more pieces written", async || {
        piece_keys(&redis).len() > pieces_before
    })
    .await;
    redis.kill9();
    let commits = total(&nodes[..1], &["commits"]).await;
    assert_eq!(commits, commits_before, "killed before the commit");
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.restart();
    assert_exact(&fetch.await.unwrap(), len, "leader");
    wait_connected(&nodes, CLOSED_WITHIN * 2, "after the kill").await;
    for (n, node) in nodes.iter().enumerate() {
        let r = get(node, &node.all[HTTP1], &path).await;
        assert_exact(&r, len, &format!("node {n} after the kill"));
    }
}

/// `path` fetched from `leader` over `wire` in a task of its own (its
/// pieces go to Redis while the test acts on Redis).
fn leader_get(leader: &Arc<Wires>, wire: usize, path: &str) -> tokio::task::JoinHandle<Reply> {
    let (leader, path) = (leader.clone(), path.to_owned());
    tokio::spawn(async move { get(&leader, &leader.all[wire], &path).await })
}

/// On a Redis Cluster the pieces of one object spread over the masters
/// (each has its own hash tag), and the copy is still shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_spread_over_a_redis_clusters_masters() {
    let cluster = RedisCluster::start();
    let quoted: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let urls = format!("[{}]", quoted.join(", "));
    let origin = Origin::start().await;
    let nodes = vec![
        node(&origin, &urls, "timeout = \"1s\"").await,
        node(&origin, &urls, "timeout = \"1s\"").await,
    ];
    wait_connected(&nodes, CLOSED_WITHIN, "cluster").await;
    let (path, len) = (big("cluster", 5 * MIB), 5 * MIB);
    assert_exact(
        &get(&nodes[0], &nodes[0].all[HTTP1], &path).await,
        len,
        "fetch",
    );
    wait_commits(&nodes, 0, "cluster").await;
    let per_master: Vec<usize> = cluster.nodes.iter().map(|n| piece_keys(n).len()).collect();
    assert_eq!(
        per_master.iter().sum::<usize>(),
        len.div_ceil(256 * 1024),
        "{per_master:?}"
    );
    assert!(
        per_master.iter().filter(|n| **n > 0).count() >= 2,
        "pieces on one master only: {per_master:?}"
    );
    let r = get(&nodes[1], &nodes[1].all[H2C], &path).await;
    assert_exact(&r, len, "node 1");
    assert_eq!(origin.hits_for(counted(&path)), 1);
}
