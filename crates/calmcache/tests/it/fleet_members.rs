//! Fleet membership and config fingerprints (issue 30, items 2 and 6):
//! nodes on one real redis-server (or a Redis Cluster) see each other in
//! `/status` from their heartbeats, a node whose route ttl differs is
//! flagged on every node with the part that differs, a node stopped
//! cleanly leaves at once, Redis down makes the members unknown (never
//! empty) while requests go on, and `calmcache check --fleet` compares a
//! config with the running fleet (exit 0 / 3 / 1). With the fleet secret,
//! heartbeats are signed and forged or replayed records are refused.

use std::process::Command;
use std::time::Duration;

use calmcache_testkit::client::request;
use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::redis::{Redis, RedisCluster};
use calmcache_testkit::{Origin, Proxy};
use http::Method;

use crate::fleet::{fleet_status, get, TOKEN};
use crate::wait_until;

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

/// Heartbeats come every 2 s: a few of them, generously.
const SEEN_WITHIN: Duration = Duration::from_secs(15);

/// A clean stop removes the heartbeat: peers see it gone at their next
/// heartbeat (2 s), well before the 6 s a silent member takes to expire.
const GONE_WITHIN: Duration = Duration::from_secs(5);

/// A node's config on `redis` with route `ttl`.
fn builder(origin: &Origin, redis: &str, ttl: &str) -> Proxy {
    Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(&format!("ttl = {{ 200 = \"{ttl}\" }}"))
        .fleet(redis, "timeout = \"500ms\"")
}

/// `/metrics` of `node` (admin token sent).
async fn metrics_of(node: &RunningProxy) -> String {
    let auth = format!("Bearer {TOKEN}");
    let url = node.admin_url("/metrics");
    request(Method::GET, &url, &[("authorization", &auth)])
        .await
        .body
}

/// `/status` `fleet.members` of `node` (`null` when unknown).
async fn members(node: &RunningProxy) -> serde_json::Value {
    fleet_status(node).await["members"].clone()
}

/// Waits until every node lists `n` live members.
async fn wait_members(nodes: &[&RunningProxy], n: usize, what: &str) {
    wait_until(SEEN_WITHIN, what, async || {
        for node in nodes {
            if members(node).await.as_array().map(Vec::len) != Some(n) {
                return false;
            }
        }
        true
    })
    .await;
}

/// The member names `node` flags as differing, with their parts.
async fn flagged(node: &RunningProxy) -> Vec<(String, serde_json::Value)> {
    let list = members(node).await;
    let list = list.as_array().cloned().unwrap_or_default();
    list.into_iter()
        .filter(|m| m["differs"].as_array().is_some_and(|d| !d.is_empty()))
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("?").to_owned(),
                m["differs"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_see_each_other_and_the_one_with_another_ttl_is_flagged_everywhere() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let a = builder(&origin, &redis.url(), "10s").start().await;
    let b = builder(&origin, &redis.url(), "10s").start().await;
    let odd = builder(&origin, &redis.url(), "20s").start().await;
    let nodes = [&a, &b, &odd];
    wait_members(&nodes, 3, "every node lists three members").await;
    let odd_name = fleet_status(&odd).await["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["this_node"] == true))
        .map(|m| m["name"].as_str().unwrap_or("?").to_owned())
        .expect("the odd node marks itself");
    for node in nodes {
        let flagged = flagged(node).await;
        assert_eq!(
            flagged,
            [(odd_name.clone(), serde_json::json!(["routes"]))],
            "every node flags the odd one, in routes"
        );
        let s = fleet_status(node).await;
        let own = s["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["this_node"] == true)
            .count();
        assert_eq!(own, 1, "one member is this node: {s}");
        assert_eq!(s["fingerprint"]["all"].as_str().map(str::len), Some(16));
    }
    assert_eq!(fleet_status(&a).await["config_drift"], "others");
    let odd_status = fleet_status(&odd).await;
    assert_eq!(odd_status["config_drift"], "this_node");
    assert_eq!(
        odd_status["config_drift_parts"],
        serde_json::json!(["routes"])
    );
    let metrics = metrics_of(&odd).await;
    assert!(
        metrics.contains("calmcache_fleet_config_drift 1"),
        "{metrics}"
    );
    assert!(metrics.contains("calmcache_fleet_members 3"), "{metrics}");

    // A clean stop removes the heartbeat at once.
    odd.stop().await;
    wait_members(&[&a, &b], 2, "the stopped node is gone at once").await;
    assert_eq!(fleet_status(&a).await["config_drift"], "none");
}

/// Waits for the odd node to be flagged: `GONE_WITHIN` bounds only the leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_cleanly_leaves_before_its_heartbeat_expires() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let a = builder(&origin, &redis.url(), "10s").start().await;
    let b = builder(&origin, &redis.url(), "10s").start().await;
    wait_members(&[&a, &b], 2, "two members").await;
    b.stop().await;
    wait_until(
        GONE_WITHIN,
        "the stopped node gone from a's list",
        async || members(&a).await.as_array().map(Vec::len) == Some(1),
    )
    .await;
}

/// A reload that changes a route's ttl publishes the new fingerprint under
/// the same name: the peers flag the node, then clear it when it reloads
/// back, and the member count never grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_publishes_the_new_fingerprint_under_the_same_name() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let a = builder(&origin, &redis.url(), "10s").start().await;
    let b = builder(&origin, &redis.url(), "10s").start().await;
    wait_members(&[&a, &b], 2, "two members").await;
    let reload = |ttl: &str| {
        let text = builder(&origin, &redis.url(), ttl).toml();
        calmcache::Config::from_toml(&text, "<test>").unwrap()
    };
    b.running().reloader().apply(reload("20s")).await.unwrap();
    wait_until(SEEN_WITHIN, "a flags b after its reload", async || {
        flagged(&a).await.len() == 1
    })
    .await;
    assert_eq!(members(&a).await.as_array().map(Vec::len), Some(2));
    b.running().reloader().apply(reload("10s")).await.unwrap();
    wait_until(SEEN_WITHIN, "b matches again", async || {
        flagged(&a).await.is_empty()
    })
    .await;
    assert_eq!(members(&a).await.as_array().map(Vec::len), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_makes_the_members_unknown_not_empty_and_requests_go_on() {
    let mut redis = Redis::start();
    let origin = Origin::start().await;
    let a = builder(&origin, &redis.url(), "10s").start().await;
    wait_members(&[&a], 1, "one member").await;
    redis.kill9();
    wait_until(SEEN_WITHIN, "members unknown with redis down", async || {
        let s = fleet_status(&a).await;
        s["members"].is_null() && s["config_drift"] == "unknown"
    })
    .await;
    let metrics = metrics_of(&a).await;
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("calmcache_fleet_members ")),
        "no member count while unknown"
    );
    for i in 0..5 {
        let r = get(&a.url(&format!("/down/{i}"))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    redis.restart();
    wait_members(&[&a], 1, "members known again once redis is back").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_listed_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let origin = Origin::start().await;
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let list = format!("[{}]", urls.join(", "));
    let a = builder(&origin, &list, "10s").start().await;
    let b = builder(&origin, &list, "10s").start().await;
    wait_members(&[&a, &b], 2, "two members on the cluster").await;
    assert_eq!(
        cluster.slot("cc:{members}"),
        cluster.slot("cc:{members}:info"),
        "the member set and its heartbeats share one slot"
    );
}

/// `calmcache check --fleet -c <config>`: exit code, stdout, stderr.
fn run_check_fleet(toml: &str, name: &str) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("cc-members-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--fleet", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `calmcache check --fleet -c <config>`: exit code and output.
fn check_fleet(toml: &str, name: &str) -> (i32, String) {
    let (code, stdout, stderr) = run_check_fleet(toml, name);
    (code, format!("{stdout}{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fleet_passes_for_the_same_config_and_names_the_part_that_differs() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let running = builder(&origin, &redis.url(), "10s");
    let same = running.toml();
    let a = running.start().await;
    wait_members(&[&a], 1, "one member").await;

    let (code, text) = check_fleet(&same, "same.toml");
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("live members: 1") && text.contains("same"),
        "{text}"
    );

    let other = builder(&origin, &redis.url(), "10s")
        .route("key = \"$host$uri\"")
        .toml();
    let (code, text) = check_fleet(&other, "other.toml");
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("differs in keys"), "{text}");

    // A Redis nobody listens on: a clear error, exit 1.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let nowhere = builder(&origin, &format!("redis://127.0.0.1:{port}"), "10s").toml();
    let (code, text) = check_fleet(&nowhere, "nowhere.toml");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("cannot reach the fleet's Redis"), "{text}");
}

/// `check --fleet` reads Redis' `INFO` and warns on stderr when Redis is
/// small for the fleet's large objects, has no `maxmemory` or refuses
/// writes when full (the node's own wording); the exit code stays the
/// fingerprints' (0 here), so a rollout script is not stopped by advice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fleet_weighs_the_fleet_s_large_objects_against_redis_memory() {
    let redis = Redis::start();
    let set =
        |k: &str, v: &str| assert_eq!(redis.command(&["CONFIG", "SET", k, v]).unwrap(), "+OK");
    set("maxmemory", "64mb");
    set("maxmemory-policy", "allkeys-lfu");
    let origin = Origin::start().await;
    let running = builder(&origin, &redis.url(), "10s");
    let same = running.toml();
    let a = running.start().await;
    wait_members(&[&a], 1, "one member").await;

    // The defaults: 64 MiB objects, 256 MiB of pieces in flight per node.
    let (code, stdout, stderr) = run_check_fleet(&same, "small.toml");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("redis memory: used") && stdout.contains("maxmemory 64 MiB"),
        "{stdout}"
    );
    assert!(
        stdout.contains("policy allkeys-lfu, 0 keys evicted"),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "warning: fleet.max_object_size (64 MiB) is over 1/8 of redis' maxmemory (64 MiB)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("fleet.max_pieces_in_flight (256 MiB) x 1 node(s) = 256 MiB"),
        "{stderr}"
    );

    // Room for the fleet: nothing to say.
    set("maxmemory", "1gb");
    let (code, stdout, stderr) = run_check_fleet(&same, "room.toml");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("maxmemory 1 GiB"), "{stdout}");
    // (The config's own warnings, `path: warning: ...`, are not the check's.)
    assert!(!stderr.contains("calmcache: warning"), "{stderr}");

    // Full means refused: the node's own warning, in its words.
    set("maxmemory-policy", "noeviction");
    let (code, stdout, stderr) = run_check_fleet(&same, "noeviction.toml");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("warning: redis maxmemory-policy is noeviction: once full it refuses"),
        "{stderr}"
    );

    set("maxmemory", "0");
    let (code, stdout, stderr) = run_check_fleet(&same, "nolimit.toml");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("no maxmemory"), "{stdout}");
    assert!(
        stderr.contains("warning: redis has no maxmemory"),
        "{stderr}"
    );
}

/// Adds (or refreshes) heartbeat record `name` = `json` in Redis, last
/// seen now (Redis' clock), as a writer to Redis alone could.
pub(crate) fn forge(redis: &Redis, name: &str, json: &str) {
    const SCRIPT: &str = "local t = redis.call('TIME') \
        redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[1]) \
        redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) return 1";
    let reply = redis
        .command(&[
            "EVAL",
            SCRIPT,
            "2",
            "cc:{members}",
            "cc:{members}:info",
            name,
            json,
        ])
        .unwrap();
    assert_eq!(reply, ":1", "forging {name}");
}

/// Issue 30: with `secret_file`, heartbeats are signed. Records forged by
/// a writer to Redis alone (unsigned ones with another config, a real one
/// copied under another name, a stopped node's old one put back) are
/// refused, listed apart and counted; they would otherwise be 4 of 5
/// "members" and make the one real node see itself differ from a
/// majority. The real node sees itself alone, no drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_heartbeats_on_a_signed_fleet_are_refused_and_counted() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = std::env::temp_dir().join(format!("cc-members-signed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("fleet.secret");
    std::fs::write(&secret, "members-secret-0123456789abcdef0123456789abcdef\n").unwrap();
    let signed = |ttl: &str| {
        Proxy::new(&origin)
            .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
            .route(&format!("ttl = {{ 200 = \"{ttl}\" }}"))
            .fleet(
                &redis.url(),
                &format!(
                    "timeout = \"500ms\"\nsecret_file = {:?}",
                    secret.display().to_string()
                ),
            )
    };
    let a_config = signed("10s");
    let a_toml = a_config.toml();
    let a = a_config.start().await;
    let b = signed("30s").start().await;
    wait_members(&[&a, &b], 2, "two signed members").await;
    let listed = members(&a).await;
    let name_of = |this: bool| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["this_node"] == this)
            .unwrap()["name"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (a_name, b_name) = (name_of(true), name_of(false));
    let hget = |name: &str| redis.command(&["HGET", "cc:{members}:info", name]).unwrap();
    let (a_beat, b_beat) = (hget(&a_name), hget(&b_name));
    let b_signed: serde_json::Value = serde_json::from_str(&b_beat).expect("b's heartbeat is JSON");
    assert!(
        b_signed["sig"].is_string() && b_signed["signed_at_ms"].is_u64(),
        "{b_beat}"
    );
    b.stop().await;
    wait_members(&[&a], 1, "b gone").await;
    // The replay window is the time under test: b's captured heartbeat must
    // be older than a member's 6 s life when it is put back.
    tokio::time::sleep(Duration::from_secs(7)).await;

    let unsigned = |name: &str| {
        let mut beat = b_signed.clone();
        let fields = beat.as_object_mut().unwrap();
        fields.remove("sig");
        fields.remove("signed_at_ms");
        fields.insert("name".into(), name.into());
        beat.to_string()
    };
    let forge_all = || {
        forge(&redis, "forged-1", &unsigned("forged-1"));
        forge(&redis, "forged-2", &unsigned("forged-2"));
        forge(&redis, "copy-of-a", &a_beat);
        forge(&redis, &b_name, &b_beat);
    };
    let status = wait_until(
        SEEN_WITHIN,
        "a refuses the four forged records",
        async || {
            forge_all();
            let fleet = fleet_status(&a).await;
            (fleet["refused_members"].as_array().map(Vec::len) == Some(4)).then_some(fleet)
        },
    )
    .await;
    let names: Vec<&str> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [a_name.as_str()], "{status:#}");
    assert_eq!(status["config_drift"], "none", "{status:#}");
    let mut why: Vec<(String, String)> = status["refused_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["why"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    why.sort();
    let mut want = vec![
        ("forged-1".to_owned(), "unsigned".to_owned()),
        ("forged-2".to_owned(), "unsigned".to_owned()),
        // The copy names a: under another name, it is a forgery.
        (a_name.clone(), "forged".to_owned()),
        (b_name.clone(), "replayed".to_owned()),
    ];
    want.sort();
    assert_eq!(why, want, "{status:#}");
    assert!(status["members_refused"].as_u64() >= Some(4), "{status:#}");
    let scrape = metrics_of(&a).await;
    let counted = scrape
        .lines()
        .find_map(|l| l.strip_prefix("calmcache_fleet_members_refused_total "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(counted >= Some(4.0), "{scrape}");

    // check --fleet with the secret: a is the same, the forged are listed
    // apart and not compared.
    forge_all();
    let (code, stdout, stderr) = run_check_fleet(&a_toml, "signed.toml");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("live members: 1"), "{stdout}");
    assert!(stdout.contains("refused heartbeat records"), "{stdout}");
    assert!(stdout.contains("forged-1  unsigned"), "{stdout}");
    a.stop().await;
}
