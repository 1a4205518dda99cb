//! Fleet mode over time (issue 14): three nodes under steady load send the
//! origin at most one fetch per object lifetime with no client waiting on
//! it; a leader killed mid-fetch lets exactly one other node take over once
//! its lease lapses; a node restarted on its disk zone catches up with the
//! purges made while it was away (or, when it cannot know them, marks what
//! it holds stale).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use calmcache_testkit::client::{request, Reply};
use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::redis::Redis;
use calmcache_testkit::{Origin, Proxy};
use http::Method;
use tokio::io::AsyncWriteExt;

use crate::{scratch, signal, wait_listening, Child};

const TOKEN: &str = "fleet-token";
const HOST: &str = "fleet.test";

/// A node's config: `route` keys, `[fleet]` keys, and a disk zone in `disk`.
fn builder(origin: &Origin, redis: &Redis, route: &str, fleet: &str, disk: Option<&Path>) -> Proxy {
    let mut proxy = Proxy::new(origin)
        .no_default_ttl()
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(&format!("lock_timeout = \"5s\"\n{route}"))
        .fleet(&redis.url(), &with_default_timeout(fleet));
    if let Some(dir) = disk {
        proxy = proxy.disk_zone(dir, "");
    }
    proxy
}

/// The fleet keys, with `timeout = "200ms"` unless they name their own.
fn with_default_timeout(fleet: &str) -> String {
    if fleet.contains("timeout") {
        fleet.to_owned()
    } else {
        format!("timeout = \"200ms\"\n{fleet}")
    }
}

/// A node as a process of the real binary (to be killed with -9), on
/// fixed loopback ports: (process, proxy port, admin port).
async fn process(proxy: &Proxy, config: &Path) -> (Child, u16, u16) {
    let (port, admin) = crate::fleet_process::write_on_free_ports(proxy, config);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_calmcache"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let child = Child(child);
    wait_listening(port).await;
    wait_listening(admin).await;
    (child, port, admin)
}

/// A hit as such: served from the cache, not stale, not from the fleet.
fn plain_hit(reply: &Reply) -> bool {
    let params = reply.cache_status_params();
    params.has("hit") && params.param("detail").is_none()
}

async fn get(url: &str) -> Reply {
    request(Method::GET, url, &[("host", HOST)]).await
}

async fn fleet_of(status_url: &str) -> serde_json::Value {
    let r = request(Method::GET, status_url, &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["fleet"].clone()
}

/// The fleet counter `field` once it reaches `n` (10 s at most).
async fn reaches(status_url: &str, field: &str, n: u64) -> u64 {
    let what = format!("{field} at {n}");
    crate::wait_until(Duration::from_secs(10), &what, async || {
        let now = fleet_of(status_url).await[field].as_u64().unwrap_or(0);
        (now >= n).then_some(now)
    })
    .await
}

/// One client stream: `rate` requests a second for `path` on `node` for
/// `length`, each request on its own task (a slow answer does not slow the
/// pace); every answer with when it was sent and how long it took.
async fn paced(
    node: Arc<RunningProxy>,
    path: String,
    rate: u32,
    length: Duration,
) -> Vec<(Duration, Duration, Reply)> {
    let began = Instant::now();
    let every = Duration::from_secs(1) / rate;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = Vec::new();
    let count = (length.as_secs_f64() * f64::from(rate)) as usize;
    for _ in 0..count {
        tick.tick().await;
        let url = node.url(&path);
        let at = began.elapsed();
        sent.push(tokio::spawn(async move {
            let start = Instant::now();
            let reply = get(&url).await;
            (at, start.elapsed(), reply)
        }));
    }
    let mut answers = Vec::new();
    for task in sent {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_steady_load_the_fleet_fetches_once_per_lifetime_and_no_client_waits() {
    // Clients on all three nodes at 10 and 100 requests a second per node
    // on one key, with objects living 1 s and 3 s (four keys at once), for
    // 30 s, under the default `sus`. After warm-up every answer must come
    // from the cache (a client answered by a fetch waited on the origin);
    // the slowest is reported, not asserted (timing is for benchmarks).
    // Beside them, one node alone
    // (no fleet) takes the same three nodes' traffic on its own keys: what
    // one cache sends the origin, the fleet must not exceed.
    const LENGTH: Duration = Duration::from_secs(30);
    const DELAY_MS: u64 = 200;
    const WARM_UP: Duration = Duration::from_secs(2);
    let redis = Redis::start();
    let origin = Origin::start().await;
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Arc::new(
            builder(&origin, &redis, "", "", None).start().await,
        ));
    }
    let alone = Arc::new(
        Proxy::new(&origin)
            .no_default_ttl()
            .route("lock_timeout = \"5s\"")
            .start()
            .await,
    );
    // The origin allows stale use (stale-while-revalidate): without it
    // `sus` may not serve a copy past the origin's own max-age (RFC 9111
    // §4.2.4, issue 25), and a client arriving after an expiry that no
    // early refresh covered waits for the fetch.
    let path_of = |key: &str, ttl: u64| {
        format!(
            "{key}?x-origin-delay-ms={DELAY_MS}\
             &x-origin-cache-control=max-age%3D{ttl}%2C%20stale-while-revalidate%3D1"
        )
    };
    let mut streams = Vec::new();
    for rate in [10, 100] {
        for ttl in [1, 3] {
            let key = format!("/steady-{rate}-{ttl}");
            for node in &nodes {
                let task = tokio::spawn(paced(node.clone(), path_of(&key, ttl), rate, LENGTH));
                streams.push((key.clone(), rate, ttl, task));
            }
            let key = format!("/alone-{rate}-{ttl}");
            let task = tokio::spawn(paced(alone.clone(), path_of(&key, ttl), rate * 3, LENGTH));
            streams.push((key, rate * 3, ttl, task));
        }
    }
    let mut waited = Vec::new();
    let mut answers: std::collections::BTreeMap<String, usize> = Default::default();
    let mut slowest_after_warm_up = Duration::ZERO;
    for (key, rate, ttl, task) in streams {
        for (at, took, reply) in task.await.unwrap() {
            assert_eq!(reply.status, 200, "{key}: {}", reply.body);
            *answers.entry(key.clone()).or_default() += 1;
            if at >= WARM_UP {
                slowest_after_warm_up = slowest_after_warm_up.max(took);
                // Answered by a fetch (its own or one it waited for), not
                // from the cache: `fwd=...` instead of `hit`.
                if !reply.cache_status_params().has("hit") {
                    waited.push(format!(
                        "{key} ({rate}/s, ttl {ttl}s) sent at {at:?} took {took:?}: {}",
                        reply.cache_status()
                    ));
                }
            }
        }
    }
    let mut fetches = Vec::new();
    for rate in [10, 100] {
        for ttl in [1u64, 3] {
            let key = format!("/steady-{rate}-{ttl}");
            let hits = origin.hits_for(&key);
            let alone = origin.hits_for(&format!("/alone-{rate}-{ttl}"));
            // One per lifetime plus the warm-up fill. A copy's lifetime is
            // its TTL less its age on arrival (RFC 9111 §4.2.3 counts the
            // origin's delay), and `sus` refreshes one fetch time early.
            let lifetime = Duration::from_secs(ttl) - Duration::from_millis(2 * DELAY_MS);
            let bound = (LENGTH.as_secs_f64() / lifetime.as_secs_f64()).ceil() as u64 + 1;
            fetches.push(format!(
                "{key}: {hits} fetches (one node alone: {alone}, bound {bound})"
            ));
            assert!(hits <= bound, "{key}: {hits} origin fetches > {bound}");
            // Two counts of ~35 refreshes, each set by where requests land in
            // the refresh windows, differ by a couple from run to run: the
            // fleet sent 37 against 35 alone on an idle machine, and the old
            // bound (alone + 1) failed CI runs now and then. A tenth more is
            // that drift; a fleet that fetched twice per lifetime (a lease
            // not honoured) is far past it.
            assert!(
                hits <= alone + alone / 10 + 1,
                "{key}: the fleet sent {hits}, one node alone {alone}"
            );
            assert!(hits >= 2, "{key}: it was refreshed ({hits})");
        }
    }
    eprintln!(
        "steady load: {answers:?} answers; {fetches:?}; slowest after warm-up {slowest_after_warm_up:?}"
    );
    assert!(
        waited.is_empty(),
        "{} clients waited on the origin after warm-up: {:#?}",
        waited.len(),
        &waited[..waited.len().min(20)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_fetch_lets_one_other_node_take_over() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = scratch("fleet-leader");
    // Redis is not what is tested here: a call slower than the usual 200 ms
    // on a loaded machine would make a node fetch alone (CI saw one).
    let fleet_keys = "lease = \"2s\"\ntimeout = \"1s\"";
    let leader = builder(&origin, &redis, "ttl = { 200 = \"60s\" }", fleet_keys, None);
    let (child, port, _) = process(&leader, &dir.join("leader.toml")).await;
    let b = builder(&origin, &redis, "ttl = { 200 = \"60s\" }", fleet_keys, None)
        .start()
        .await;
    let c = builder(&origin, &redis, "ttl = { 200 = \"60s\" }", fleet_keys, None)
        .start()
        .await;
    // Long enough to kill the leader mid-fetch, short enough that the
    // takeover (lease lapse + this) ends well inside the followers' 5 s.
    let path = "/lead?x-origin-delay-ms=1000";
    // The leader's client: sent, never read (the leader dies under it).
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: {HOST}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    crate::wait_until(
        Duration::from_secs(10),
        "the leader's fetch began",
        async || origin.hits_for("/lead") == 1,
    )
    .await;
    signal(&child, "-KILL");
    drop(child);
    // The others: they find its lease, wait, and once it lapses one of
    // them fetches for both.
    let others = [b, c];
    let bodies = crate::fleet::burst(&others, path, 5).await;
    let (fb, fc) = (
        others[0].status().await["fleet"].clone(),
        others[1].status().await["fleet"].clone(),
    );
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "one answer: {fb} {fc}"
    );
    assert_eq!(
        origin.hits_for("/lead"),
        2,
        "the dead leader's fetch and one takeover: {fb} {fc}"
    );
    let acquired =
        fb["leases_acquired"].as_u64().unwrap() + fc["leases_acquired"].as_u64().unwrap();
    assert_eq!(acquired, 1, "one node took over: {fb} {fc}");
    let timed_out =
        fb["waits_timed_out"].as_u64().unwrap() + fc["waits_timed_out"].as_u64().unwrap();
    assert_eq!(timed_out, 0, "no wait ran out: {fb} {fc}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_on_its_disk_zone_catches_up_with_the_purges_it_missed() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = scratch("fleet-restart");
    let zone = dir.join("zone");
    let route = "ttl = { 200 = \"60s\" }";
    let away = builder(&origin, &redis, route, "", Some(&zone));
    let config = dir.join("away.toml");
    let other = builder(&origin, &redis, route, "", None).start().await;
    let (child, port, admin) = process(&away, &config).await;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let _ = admin;
    for path in ["/gone", "/kept"] {
        assert_eq!(get(&url(path)).await.status, 200);
        let again = get(&url(path)).await;
        assert!(plain_hit(&again), "{}", again.cache_status());
    }
    // The files are written off the request path: let them land.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let position = zone.join(".calmcache-fleet-position");
    crate::wait_until(
        Duration::from_secs(10),
        "the purge stream position is saved",
        async || position.exists(),
    )
    .await;
    signal(&child, "-KILL");
    drop(child);
    // While it is away: one URL is purged on another node.
    other
        .purge(TOKEN, &format!(r#"{{"url": "http://{HOST}/gone"}}"#))
        .await;
    let (child, port, admin) = process(&away, &config).await;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let status_url = format!("http://127.0.0.1:{admin}/status");
    let applied = reaches(&status_url, "purges_applied", 1).await;
    assert_eq!(applied, 1, "the missed purge was applied after the restart");
    let gone = get(&url("/gone")).await;
    assert!(
        !plain_hit(&gone),
        "purged while away: {}",
        gone.cache_status()
    );
    assert_eq!(origin.hits_for("/gone"), 2, "fetched again");
    let kept = get(&url("/kept")).await;
    assert!(
        plain_hit(&kept),
        "not purged: still a hit: {} {}",
        kept.cache_status(),
        fleet_of(&status_url).await
    );
    let f = fleet_of(&status_url).await;
    assert_eq!(f["purge_gaps"], 0, "{f}");
    // Without its saved position it cannot know what it missed: what its
    // zone holds is marked stale (each object revalidated once).
    signal(&child, "-KILL");
    drop(child);
    std::fs::remove_file(&position).unwrap();
    let (_child, port, admin) = process(&away, &config).await;
    let status_url = format!("http://127.0.0.1:{admin}/status");
    let gaps = reaches(&status_url, "purge_gaps", 1).await;
    assert_eq!(gaps, 1, "no position: one gap");
    let kept = get(&format!("http://127.0.0.1:{port}/kept")).await;
    assert_eq!(kept.status, 200);
    assert!(
        !plain_hit(&kept),
        "marked stale, not a plain hit: {}",
        kept.cache_status()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
