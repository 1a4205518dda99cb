//! Fleet entries and purges signed with the fleet secret (issue 25, item 8):
//! before it, whoever could write to Redis controlled every node (a body
//! replaced with its CRC recomputed was served by every node as `hit;
//! detail=fleet`, one `XADD` of `{"all":true}` purged every node). Real
//! redis-server, real nodes: a forged entry is refused and counted, never
//! served; a forged or replayed purge is not applied; a rotation's nodes
//! read each other's entries and purges as the README says.

use std::time::{Duration, SystemTime};

use calmcache::Config;
use calmcache_core::disk::format::{encode_object, parse_object};
use calmcache_core::{CacheKey, CachedObject};
use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::redis::Redis;
use calmcache_testkit::{Origin, Proxy};

use crate::fleet::{fleet_status, get, node_at, TOKEN};

/// Two fleet secrets (at least 32 bytes each).
const OLD: &str = "old-fleet-secret-0123456789abcdef0123456789abcdef";
const NEW: &str = "new-fleet-secret-fedcba9876543210fedcba9876543210";
/// The host the nodes are asked for (`fleet::get`): the cache key's.
const HOST: &str = "fleet.test";
/// How long a node may take to poll the stream (every 200 ms) or store
/// off the request path: a generous bound on a loaded machine.
const WITHIN: Duration = Duration::from_secs(10);

/// `secret_file = "..."` for a file of `secrets` (one per line) in `dir`.
fn secret_file(dir: &std::path::Path, name: &str, secrets: &[&str]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{}\n", secrets.join("\n"))).unwrap();
    format!("secret_file = {:?}", path.display().to_string())
}

async fn node(origin: &Origin, redis: &Redis, secret: &str) -> RunningProxy {
    node_at(origin, &redis.url(), "60s", secret).await
}

async fn stat(node: &RunningProxy, field: &str) -> u64 {
    fleet_status(node).await[field].as_u64().unwrap_or(0)
}

/// Waits until `node`'s fleet counter `field` reaches `n`.
async fn wait_stat(node: &RunningProxy, field: &str, n: u64) {
    let what = format!("{field} at {n}");
    crate::wait_until(WITHIN, &what, async || stat(node, field).await >= n).await;
}

/// The Redis key of the entry for `path` (the fleet's layout: the key's
/// hash as the hash tag, `:m` the entry).
fn entry_key(path: &str) -> String {
    let key = CacheKey::new("http", HOST, path);
    let hash = calmcache_core::disk::key_hash(&key.as_ref());
    format!("cc:{{{hash:016x}}}:m")
}

async fn redis_conn(redis: &Redis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// How a forger rewrites an entry: the body replaced and the CRCs
/// recomputed (the disk format's own checks pass), then stored plain, or
/// behind the entry's old signature.
#[derive(Clone, Copy, Debug)]
enum Forgery {
    Unsigned,
    OldSignature,
}

/// Replaces the body of the entry for `path` in Redis with `body`.
async fn forge(redis: &Redis, path: &str, how: Forgery, body: &str) {
    let mut conn = redis_conn(redis).await;
    let key = entry_key(path);
    let blob: Vec<u8> = redis::cmd("HGET")
        .arg(&key)
        .arg("blob")
        .query_async(&mut conn)
        .await
        .unwrap();
    // A signed entry: "CCS1", a 32-byte tag, the disk-format blob.
    assert!(blob.starts_with(b"CCS1"), "{key}: the entry is signed");
    let (signature, inner) = blob.split_at(4 + 32);
    let (cache_key, object) = parse_object(inner.to_vec(), None, true).unwrap();
    assert_eq!(cache_key, CacheKey::new("http", HOST, path));
    let forged = CachedObject::assemble(
        object.meta.clone(),
        object.status,
        object.headers(),
        bytes::Bytes::copy_from_slice(body.as_bytes()),
        Vec::new(),
        None,
    );
    let mut forged = encode_object(&cache_key, &forged, SystemTime::now()).unwrap();
    if let Forgery::OldSignature = how {
        forged.splice(0..0, signature.iter().copied());
    }
    let _: i64 = redis::cmd("HSET")
        .arg(&key)
        .arg("blob")
        .arg(forged)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_entry_is_refused_counted_and_never_served() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = crate::scratch("fleet-forged-entry");
    let secret = secret_file(&dir, "secret", &[NEW]);
    let (a, b) = (
        node(&origin, &redis, &secret).await,
        node(&origin, &redis, &secret).await,
    );
    for (i, how) in [Forgery::Unsigned, Forgery::OldSignature]
        .into_iter()
        .enumerate()
    {
        let path = format!("/forged/{i}");
        let first = get(&a.url(&path)).await;
        assert_eq!(first.status, 200, "{how:?}: {}", first.body);
        wait_stat(&a, "commits", i as u64 + 1).await;
        forge(&redis, &path, how, "FORGED").await;
        // Node b has no copy: it asks Redis, refuses the forgery, fetches.
        let r = get(&b.url(&path)).await;
        assert_eq!(r.status, 200, "{how:?}");
        assert!(!r.body.contains("FORGED"), "{how:?}: served the forgery");
        assert!(
            r.body.starts_with(&format!("path={path} ")) && r.body != first.body,
            "{how:?}: fetched again: {}",
            r.body
        );
        assert!(
            !r.cache_status().contains("detail=fleet"),
            "{how:?}: {}",
            r.cache_status()
        );
        assert_eq!(origin.hits_for(&path), 2, "{how:?}");
        assert_eq!(stat(&b, "entries_refused").await, i as u64 + 1, "{how:?}");
    }
    assert_eq!(stat(&b, "shared_hits").await, 0);
    assert_eq!(fleet_status(&b).await["signed"], true);
}

/// `XADD cc:purges <id> field value ...` as a forger (or replayer) sends it.
async fn xadd(redis: &Redis, id: &str, fields: &[(&str, &str)]) {
    let mut conn = redis_conn(redis).await;
    let mut cmd = redis::cmd("XADD");
    cmd.arg("cc:purges").arg(id);
    for (name, value) in fields {
        cmd.arg(*name).arg(*value);
    }
    let _: String = cmd.query_async(&mut conn).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_purges_are_refused_counted_and_not_applied() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = crate::scratch("fleet-forged-purge");
    let secret = secret_file(&dir, "secret", &[NEW]);
    let a = node(&origin, &redis, &secret).await;
    let first = get(&a.url("/kept")).await;
    assert!(first.body.contains("n=1"), "{}", first.body);
    let zeros = "0".repeat(64);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    xadd(
        &redis,
        "*",
        &[("node", "evil"), ("purge", r#"{"all":true}"#)],
    )
    .await;
    xadd(
        &redis,
        "*",
        &[
            ("node", "evil"),
            ("purge", r#"{"url":"/kept"}"#),
            ("at", &now),
            ("sig", &zeros),
        ],
    )
    .await;
    wait_stat(&a, "purges_refused", 2).await;
    let r = get(&a.url("/kept")).await;
    assert_eq!(r.body, first.body, "still the copy the purges aimed at");
    assert_eq!(origin.hits_for("/kept"), 1);
    assert_eq!(stat(&a, "purges_applied").await, 0);
}

/// The fields of the stream's last entry.
async fn last_purge_message(redis: &Redis) -> Vec<(String, String)> {
    let mut conn = redis_conn(redis).await;
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
        .arg("cc:purges")
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    entries.into_iter().next().unwrap().1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_purge_is_refused_and_counted() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = crate::scratch("fleet-replayed-purge");
    let secret = secret_file(&dir, "secret", &[NEW]);
    let (a, b) = (
        node(&origin, &redis, &secret).await,
        node(&origin, &redis, &secret).await,
    );
    assert!(get(&b.url("/r")).await.body.contains("n=1"));
    a.purge(TOKEN, r#"{"url": "/r"}"#).await;
    wait_stat(&b, "purges_applied", 1).await;
    let second = get(&b.url("/r")).await;
    assert!(second.body.contains("n=2"), "{}", second.body);
    // The same signed message copied into the stream two minutes after it
    // was signed (an id in the future stands for the wait).
    let fields = last_purge_message(&redis).await;
    let at: u64 = fields
        .iter()
        .find(|(k, _)| k == "at")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    xadd(&redis, &format!("{}-0", at + 120_000), &fields).await;
    wait_stat(&b, "purges_replayed", 1).await;
    let r = get(&b.url("/r")).await;
    assert_eq!(r.body, second.body, "the replay purged nothing");
    assert_eq!(origin.hits_for("/r"), 2);
    assert_eq!(stat(&b, "purges_applied").await, 1);
    assert_eq!(stat(&b, "purges_refused").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_s_nodes_read_each_other_s_entries_and_purges() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = crate::scratch("fleet-rotation");
    // Not yet rotated; rotated (signs new, accepts old); the first step of
    // a rotation (signs old, accepts new).
    let old = node(&origin, &redis, &secret_file(&dir, "old", &[OLD])).await;
    let rotated = node(&origin, &redis, &secret_file(&dir, "new", &[NEW, OLD])).await;
    let accepting = node(&origin, &redis, &secret_file(&dir, "both", &[OLD, NEW])).await;
    // Written with the old secret: read by both others.
    get(&old.url("/rot/old")).await;
    wait_stat(&old, "commits", 1).await;
    for node in [&rotated, &accepting] {
        let r = get(&node.url("/rot/old")).await;
        assert!(
            r.cache_status().contains("detail=fleet"),
            "{}",
            r.cache_status()
        );
    }
    assert_eq!(origin.hits_for("/rot/old"), 1);
    // Written with the new secret: read by the node that accepts it; the
    // node with only the old one refuses it (why a rotation starts by
    // giving every node the new secret as its second line).
    get(&rotated.url("/rot/new")).await;
    wait_stat(&rotated, "commits", 1).await;
    let r = get(&accepting.url("/rot/new")).await;
    assert!(
        r.cache_status().contains("detail=fleet"),
        "{}",
        r.cache_status()
    );
    let r = get(&old.url("/rot/new")).await;
    assert!(
        !r.cache_status().contains("detail=fleet"),
        "{}",
        r.cache_status()
    );
    assert_eq!(stat(&old, "entries_refused").await, 1);
    assert_eq!(origin.hits_for("/rot/new"), 2);
    // A purge signed with the new secret: applied where it is accepted.
    rotated.purge(TOKEN, r#"{"url": "/rot/old"}"#).await;
    wait_stat(&accepting, "purges_applied", 1).await;
    wait_stat(&old, "purges_refused", 1).await;
    // And one signed with the old secret, by both.
    old.purge(TOKEN, r#"{"url": "/rot/new"}"#).await;
    wait_stat(&rotated, "purges_applied", 1).await;
    wait_stat(&accepting, "purges_applied", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_rotates_the_secret_keeps_the_fleet_and_signs_with_the_new_one() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = crate::scratch("fleet-rotation-reload");
    let file = dir.join("fleet.secret");
    std::fs::write(&file, format!("{OLD}\n")).unwrap();
    let keys = format!(
        "timeout = \"200ms\"\nsecret_file = {:?}",
        file.display().to_string()
    );
    let builder = || {
        Proxy::new(&origin)
            .admin("listen = \"127.0.0.1:0\"")
            .route("ttl = { 200 = \"60s\" }\nlock_timeout = \"5s\"")
            .fleet(&redis.url(), &keys)
    };
    let rotating = builder().start().await;
    let new_only = node(&origin, &redis, &secret_file(&dir, "new", &[NEW])).await;
    let id = fleet_status(&rotating).await["node"].clone();
    get(&rotating.url("/before")).await;
    wait_stat(&rotating, "commits", 1).await;
    let r = get(&new_only.url("/before")).await;
    assert!(!r.cache_status().contains("detail=fleet"), "old secret");
    // Step 2 of a rotation on this node: the new secret signs.
    std::fs::write(&file, format!("{NEW}\n{OLD}\n")).unwrap();
    let config = Config::from_toml(&builder().toml(), "<test>").unwrap();
    rotating.running().reloader().apply(config).await.unwrap();
    assert_eq!(
        fleet_status(&rotating).await["node"],
        id,
        "the same fleet link"
    );
    get(&rotating.url("/after")).await;
    wait_stat(&rotating, "commits", 2).await;
    let r = get(&new_only.url("/after")).await;
    assert!(
        r.cache_status().contains("detail=fleet"),
        "{}",
        r.cache_status()
    );
    assert_eq!(origin.hits_for("/after"), 1);
}
