//! Fleet mode when Redis fails, and on a Redis Cluster (issue 14).
//!
//! Three nodes under a bounded load of concurrent clients (HTTP/1.1, h2c
//! and HTTP/2 over TLS; hits, refreshes and cold misses) while their Redis
//! is killed (`kill -9`) and restarted, hung (`SIGSTOP`) for 5 s, cut off
//! by a partition (the link of its network namespace down for 5 s, its
//! connections left open), behind a slow link (50 ms each way with jitter,
//! under the deadline; 200 ms, over it) whose connections are then reset,
//! or, on a cluster, while one master is killed. Every request is answered
//! with a 200 and the right body; every node's breaker opens while Redis
//! fails and closes after, and the fleet stores in and takes from Redis
//! again. The bounds are generous: benchmarks measure latency.
//!
//! On a cluster of three masters the fleet still sends one origin fetch per
//! object, a purge reaches every node, and every key calmcache writes for
//! one object is in one hash slot. The shared-hit and purge paths are the
//! same over every client protocol. Three regression tests pin bugs these
//! tests found in the link to Redis (`src/fleet/link.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use calmcache_testkit::redis::{Redis, RedisCluster};
use calmcache_testkit::{request_with_body, DelayProxy, NetNs, Origin, Proxy, Reply, Wire, Wires};
use http::Method;
use tokio::task::JoinHandle;

const TOKEN: &str = "fleet-faults-token";
/// The fleet's one host name, as a load balancer passes it to every node
/// (the cache key has the host).
const HOST: &str = "fleet.test";

/// Load clients: each goes round the nodes and the wires.
const CLIENTS: usize = 4;
/// Each client's bounds: requests, and time (a load never outlives its test).
const REQUESTS_PER_CLIENT: usize = 3000;
const LOAD_LIMIT: Duration = Duration::from_secs(60);
/// Between two requests of one client.
const PACE: Duration = Duration::from_millis(20);
/// Generous bounds on the breaker: it opens after three failed calls (one
/// deadline each, and a node calls Redis at least every 200 ms); it probes
/// 1 s after opening, then 2 s, 4 s... later.
const OPEN_WITHIN: Duration = Duration::from_secs(3);
const CLOSED_WITHIN: Duration = Duration::from_secs(15);
/// After the breakers close, the fleet stores or takes a copy within this.
const USED_WITHIN: Duration = Duration::from_secs(10);

/// One node of the fleet on `redis` (a URL, or a TOML list for a cluster)
/// with `fleet` keys, in front of `origin`, listening on every wire.
async fn node(origin: &Origin, redis: &str, fleet: &str, ttl: &str) -> Arc<Wires> {
    let proxy = Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(&format!(
            "ttl = {{ 200 = \"{ttl}\" }}\nlock_timeout = \"5s\""
        ))
        .fleet(redis, fleet);
    Arc::new(Wires::start(proxy, "").await)
}

async fn three_nodes(origin: &Origin, redis: &str, fleet: &str, ttl: &str) -> Vec<Arc<Wires>> {
    vec![
        node(origin, redis, fleet, ttl).await,
        node(origin, redis, fleet, ttl).await,
        node(origin, redis, fleet, ttl).await,
    ]
}

/// A GET of `path` on `node` over `wire`, as the load balancer sends it.
async fn get(node: &Wires, wire: &Wire, path: &str) -> Reply {
    node.send(wire, Method::GET, HOST, path, &[], "").await
}

/// The origin's body for `path` (`path=<path> n=<count>`): the right
/// object, whatever its version.
fn is_body_of(reply: &Reply, path: &str) -> bool {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    reply.status == 200 && reply.body.starts_with(&format!("path={path} n="))
}

async fn fleet_status(node: &Wires) -> serde_json::Value {
    node.proxy.status().await["fleet"].clone()
}

/// `fields` summed over every node.
async fn total(nodes: &[Arc<Wires>], fields: &[&str]) -> u64 {
    let mut sum = 0;
    for node in nodes {
        let s = fleet_status(node).await;
        sum += fields
            .iter()
            .map(|f| s[*f].as_u64().unwrap_or(0))
            .sum::<u64>();
    }
    sum
}

/// Copies the fleet stored in Redis or took from it.
async fn used(nodes: &[Arc<Wires>]) -> u64 {
    total(nodes, &["commits", "shared_hits"]).await
}

/// Every node's breaker state.
async fn breakers(nodes: &[Arc<Wires>]) -> Vec<String> {
    let mut states = Vec::new();
    for node in nodes {
        let s = fleet_status(node).await;
        states.push(s["breaker"].as_str().unwrap_or("?").to_owned());
    }
    states
}

async fn breaker_opened(node: &Wires) -> u64 {
    fleet_status(node).await["breaker_opened"]
        .as_u64()
        .unwrap_or(0)
}

async fn all_closed(nodes: &[Arc<Wires>]) -> bool {
    breakers(nodes).await.iter().all(|b| b == "closed")
}

/// Waits (at most `limit`) until every node's breaker is closed and has
/// answered calls: the fleet is on Redis.
async fn wait_connected(nodes: &[Arc<Wires>], limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    loop {
        let mut ready = all_closed(nodes).await;
        for node in nodes {
            ready &= fleet_status(node).await["calls_ok"].as_u64() > Some(0);
        }
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not on redis within {limit:?}: {:?}",
            breakers(nodes).await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits (at most `limit`) until the fleet has stored or taken more than
/// `than` copies in Redis.
async fn wait_used(nodes: &[Arc<Wires>], than: u64, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while used(nodes).await <= than {
        assert!(
            Instant::now() < deadline,
            "{what}: redis not used within {limit:?} (commits + shared hits stay {than})"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Scripts loaded and Redis in use, at full speed: a script's first call
/// takes three round trips (NOSCRIPT, load, call), and the scripts stay
/// loaded. Node 0 stores copies (acquire, commit) until one is in Redis
/// (a call may miss the deadline on a busy machine), node 1 takes it.
async fn warm_up(nodes: &[Arc<Wires>]) {
    wait_connected(nodes, CLOSED_WITHIN, "warm-up").await;
    let deadline = Instant::now() + USED_WITHIN;
    for i in 0.. {
        let path = format!("/warm/{i}");
        assert!(is_body_of(
            &get(&nodes[0], &Wire::Http1, &path).await,
            &path
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        if total(nodes, &["commits"]).await > 0 {
            let r = get(&nodes[1], &Wire::Http1, &path).await;
            assert!(is_body_of(&r, &path));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "warm-up: nothing stored in redis"
        );
    }
}

/// Concurrent clients sending requests to every node over every wire until
/// stopped, or at their count or time bound, and checking each answer.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    /// The slowest answer, in ms (reported, not asserted).
    slowest_ms: Arc<AtomicU64>,
    clients: Vec<JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(nodes: &[Arc<Wires>]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let slowest_ms = Arc::new(AtomicU64::new(0));
        let clients = (0..CLIENTS)
            .map(|c| {
                let counters = (answered.clone(), slowest_ms.clone());
                tokio::spawn(client(c, nodes.to_vec(), stop.clone(), counters))
            })
            .collect();
        Load {
            stop,
            answered,
            slowest_ms,
            clients,
        }
    }

    /// Requests answered so far (right or wrong).
    fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Stops the clients; the requests answered, the slowest, and every
    /// request's failure, if any (a client that panicked, on a connection
    /// error or after 30 s, is one).
    async fn stop(self) -> (u64, Duration, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut failures = Vec::new();
        for client in self.clients {
            match client.await {
                Ok(f) => failures.extend(f),
                Err(e) => failures.push(format!("a client failed: {e}")),
            }
        }
        let slowest = Duration::from_millis(self.slowest_ms.load(Ordering::Relaxed));
        (self.answered.load(Ordering::Relaxed), slowest, failures)
    }
}

/// One load client: a few keys everyone shares (hits, refreshed every
/// second through the fleet) and one cold miss in four (a lease and a
/// commit each).
async fn client(
    c: usize,
    nodes: Vec<Arc<Wires>>,
    stop: Arc<AtomicBool>,
    (answered, slowest_ms): (Arc<AtomicU64>, Arc<AtomicU64>),
) -> Vec<String> {
    let started = Instant::now();
    let mut failures = Vec::new();
    for i in 0..REQUESTS_PER_CLIENT {
        if stop.load(Ordering::Relaxed) || started.elapsed() > LOAD_LIMIT {
            break;
        }
        let node = &nodes[(c + i) % nodes.len()];
        let wire = &node.all[(c + i / nodes.len()) % node.all.len()];
        let path = if i % 4 == 3 {
            format!("/miss/{c}-{i}")
        } else {
            format!("/hot/{}", (c + i) % 5)
        };
        let r = get(node, wire, &path).await;
        if !is_body_of(&r, &path) {
            failures.push(format!(
                "{} GET {path} on node {}: {} {:?}",
                wire.label(),
                (c + i) % nodes.len(),
                r.status,
                r.body
            ));
        }
        answered.fetch_add(1, Ordering::Relaxed);
        let ms = u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX);
        slowest_ms.fetch_max(ms, Ordering::Relaxed);
        tokio::time::sleep(PACE).await;
    }
    failures
}

/// One fault under load, watched from the nodes' `/status`.
struct Watch<'a> {
    name: &'static str,
    nodes: &'a [Arc<Wires>],
    load: &'a Load,
    began: Instant,
    answered: u64,
    /// Each node's `breaker_opened` before the fault.
    opened: Vec<u64>,
}

impl<'a> Watch<'a> {
    /// Before the fault: the fleet is on Redis and using it.
    async fn before(name: &'static str, nodes: &'a [Arc<Wires>], load: &'a Load) -> Watch<'a> {
        wait_connected(nodes, CLOSED_WITHIN, name).await;
        wait_used(nodes, 0, USED_WITHIN, name).await;
        let mut opened = Vec::new();
        for node in nodes {
            opened.push(breaker_opened(node).await);
        }
        Watch {
            name,
            nodes,
            load,
            began: Instant::now(),
            answered: load.answered(),
            opened,
        }
    }

    /// The fault has begun: every node's breaker opens within its bound.
    async fn opens(&self) {
        self.opens_within(OPEN_WITHIN).await;
    }

    /// Every node's breaker opens within `limit` of the fault (counted in
    /// `breaker_opened`, not only seen `open`: on a busy machine a probe's
    /// late answer can close one for a moment, tokio's timeout reading the
    /// answer before the timer when both are ready).
    async fn opens_within(&self, limit: Duration) {
        loop {
            let mut states = Vec::new();
            for (node, before) in self.nodes.iter().zip(&self.opened) {
                let s = fleet_status(node).await;
                let opened = s["breaker_opened"].as_u64().unwrap_or(0) > *before;
                states.push((s["breaker"].as_str().unwrap_or("?").to_owned(), opened));
            }
            if states.iter().all(|(_, opened)| *opened) {
                break;
            }
            assert!(
                self.began.elapsed() < limit,
                "{}: breakers (state, opened since) {states:?} {:?} after the fault began",
                self.name,
                self.began.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        eprintln!(
            "{}: every breaker open after {:?}",
            self.name,
            self.began.elapsed()
        );
    }

    /// Lets the fault last `length` from its beginning; the load went on.
    async fn lasts(&self, length: Duration) {
        tokio::time::sleep_until((self.began + length).into()).await;
        assert!(
            self.load.answered() > self.answered,
            "{}: the load went on during the fault ({} then {})",
            self.name,
            self.answered,
            self.load.answered()
        );
    }

    /// The fault has ended: every breaker closes, and the fleet stores in
    /// or takes from Redis again.
    async fn recovers(self) {
        let ended = Instant::now();
        let deadline = ended + CLOSED_WITHIN;
        while !all_closed(self.nodes).await {
            assert!(
                Instant::now() < deadline,
                "{}: breakers {:?} {CLOSED_WITHIN:?} after the fault ended",
                self.name,
                breakers(self.nodes).await
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let closed = ended.elapsed();
        let before = used(self.nodes).await;
        wait_used(self.nodes, before, USED_WITHIN, self.name).await;
        eprintln!(
            "{}: every breaker closed {closed:?} after the fault ended, redis used again after {:?}; \
             {} requests during the fault; {} waits for another node's lease timed out so far",
            self.name,
            ended.elapsed(),
            self.load.answered() - self.answered,
            total(self.nodes, &["waits_timed_out"]).await
        );
    }
}

/// The load's verdict: every request answered with the right object.
async fn no_failed_request(load: Load, what: &str) {
    let (answered, slowest, failures) = load.stop().await;
    assert!(
        failures.is_empty(),
        "{what}: {} of {answered} requests failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    eprintln!("{what}: {answered} requests, none failed, the slowest took {slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_or_hung_redis_under_load_fails_no_request() {
    let mut redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &redis.url(), "timeout = \"200ms\"", "1s").await;
    let load = Load::start(&nodes);

    // kill -9, then a new (empty) server on the same port.
    let watch = Watch::before("kill -9", &nodes, &load).await;
    tokio::task::block_in_place(|| redis.kill9());
    watch.opens().await;
    watch.lasts(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| redis.restart());
    watch.recovers().await;

    // SIGSTOP for 5 s: connections open, nothing answers.
    let watch = Watch::before("SIGSTOP", &nodes, &load).await;
    redis.pause();
    watch.opens().await;
    watch.lasts(Duration::from_secs(5)).await;
    redis.resume();
    watch.recovers().await;

    no_failed_request(load, "kill -9 and SIGSTOP").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_from_redis_under_load_fails_no_request() {
    // Declared first, dropped last: the server inside must not outlive it.
    let Some(ns) = NetNs::create_or_skip() else {
        return;
    };
    let redis = Redis::start_in(&ns);
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &redis.url(), "timeout = \"200ms\"", "1s").await;
    let load = Load::start(&nodes);

    // The link down for 5 s: packets dropped, no FIN, no RST.
    let watch = Watch::before("partition", &nodes, &load).await;
    tokio::task::block_in_place(|| ns.link_down());
    watch.opens().await;
    watch.lasts(Duration::from_secs(5)).await;
    tokio::task::block_in_place(|| ns.link_up());
    watch.recovers().await;

    no_failed_request(load, "partition").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_to_redis_is_used_under_the_deadline_and_cut_over_it() {
    let redis = Redis::start();
    let link = DelayProxy::start(redis.addr()).await;
    let origin = Origin::start().await;
    // The deadline between the two round trips: 100-140 ms (room for a
    // busy machine), then at least 400 ms.
    let fleet = "timeout = \"350ms\"\nmax_object_size = \"4KiB\"";
    let url = format!("redis://{}", link.addr());
    let nodes = three_nodes(&origin, &url, fleet, "1s").await;
    // At full speed first, the scripts loaded; the third (release) by an
    // object too large for Redis, whose lease is let go.
    warm_up(&nodes).await;
    for i in 0.. {
        let big = format!("/big/{i}?x-origin-body-bytes=8000");
        assert!(is_body_of(&get(&nodes[0], &Wire::Http1, &big).await, &big));
        if total(&nodes, &["too_large"]).await > 0 {
            break;
        }
        assert!(i < 20, "warm-up: never a lease for a large object");
    }
    let load = Load::start(&nodes);

    // 50 ms each way and up to 20 ms more: under the deadline, the fleet
    // goes on using Redis, most calls answered in time. (Not "none late",
    // nor "no breaker opened": on a busy machine a debug build misses
    // deadlines anyway.)
    let opened = total(&nodes, &["breaker_opened"]).await;
    let in_time = total(&nodes, &["calls_ok"]).await;
    let late = total(&nodes, &["calls_timed_out"]).await;
    link.set_delay(Duration::from_millis(50));
    link.set_jitter(Duration::from_millis(20));
    let before = used(&nodes).await;
    let slow = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_used(&nodes, before, USED_WITHIN, "50 ms").await;
    let in_time = total(&nodes, &["calls_ok"]).await - in_time;
    let late = total(&nodes, &["calls_timed_out"]).await - late;
    assert!(
        in_time >= 10 && late < in_time,
        "50 ms: {in_time} calls answered in time, {late} late"
    );
    eprintln!(
        "50 ms: {in_time} calls in time, {late} late, breakers opened {} times; \
         redis used {} times in {:?}",
        total(&nodes, &["breaker_opened"]).await - opened,
        used(&nodes).await - before,
        slow.elapsed(),
    );

    // 200 ms each way: over the deadline, the nodes go on alone.
    link.set_jitter(Duration::ZERO);
    let watch = Watch::before("200 ms", &nodes, &load).await;
    link.set_delay(Duration::from_millis(200));
    watch.opens().await;
    watch.lasts(Duration::from_secs(2)).await;
    link.set_delay(Duration::ZERO);
    watch.recovers().await;

    // Every connection reset (a middlebox that lost its state): the nodes
    // connect again and go on using Redis.
    let before = used(&nodes).await;
    link.reset_all();
    wait_used(&nodes, before, USED_WITHIN, "reset").await;
    wait_connected(&nodes, CLOSED_WITHIN, "reset").await;
    let reconnects = total(&nodes, &["reconnects"]).await;
    eprintln!("reset: redis used again; {reconnects} connections built in all");

    no_failed_request(load, "slow link").await;
}

/// Regression: the breaker's probe paid for a new connection as well as
/// its own call. After a trip the connection is rebuilt; on a link where
/// one round trip fits the deadline but a connection's setup and a call do
/// not (a remote or TLS Redis and a tight deadline), every probe missed
/// the deadline and a node never went back to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_goes_back_to_a_slow_redis_after_its_breaker_opened() {
    let redis = Redis::start();
    let link = DelayProxy::start(redis.addr()).await;
    let origin = Origin::start().await;
    // At 100 ms each way, a round trip takes 200 ms, a connection's setup
    // and a call 400 ms: the deadline is between (and leaves a call room
    // on a busy machine).
    let url = format!("redis://{}", link.addr());
    let nodes = three_nodes(&origin, &url, "timeout = \"390ms\"", "1s").await;
    warm_up(&nodes).await;
    link.set_delay(Duration::from_millis(100));
    let load = Load::start(&nodes);

    let watch = Watch::before("250 ms, then 100 ms", &nodes, &load).await;
    link.set_delay(Duration::from_millis(250));
    watch.opens().await;
    watch.lasts(Duration::from_secs(2)).await;
    link.set_delay(Duration::from_millis(100));
    watch.recovers().await;

    no_failed_request(load, "250 ms, then 100 ms").await;
}

/// Regression: a call that was the breaker's probe, given up by its caller
/// (a fill cancelled when its client went away and no refresh slot was
/// free), left the breaker half-open for good: no call went to Redis
/// again, and the node never rejoined the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_given_up_by_its_caller_does_not_hold_the_breaker_half_open() {
    let redis = Redis::start();
    let link = DelayProxy::start(redis.addr()).await;
    let origin = Origin::start().await;
    let url = format!("redis://{}", link.addr());
    let proxy = Proxy::new(&origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route("ttl = { 200 = \"60s\" }")
        .upstream("refresh_concurrency = 1")
        .fleet(&url, "timeout = \"1s\"");
    let node = Arc::new(Wires::start(proxy, "").await);
    let nodes = std::slice::from_ref(&node);
    wait_connected(nodes, CLOSED_WITHIN, "start").await;
    let h2c = node.all[H2C].clone();
    // The one refresh slot, held by a slow fill its client left: from now
    // on a fill whose client goes away is cancelled.
    let hold = get(&node, &h2c, "/hold?x-origin-delay-ms=30000");
    assert!(tokio::time::timeout(Duration::from_millis(300), hold)
        .await
        .is_err());
    // Redis silent: three calls miss the deadline, the breaker opens.
    link.blackhole();
    let mut misses = Vec::new();
    for i in 0..3 {
        let (node, wire) = (node.clone(), h2c.clone());
        misses.push(tokio::spawn(async move {
            let path = format!("/open/{i}");
            let r = get(&node, &wire, &path).await;
            assert!(is_body_of(&r, &path), "{}", r.body);
        }));
    }
    for miss in misses {
        miss.await.unwrap();
    }
    assert_ne!(breakers(nodes).await, ["closed"]);
    // For 3 s, clients that give up after 100 ms: the call after the
    // breaker's pause, its probe, is most likely one of their fills' (the
    // purge follower calls every 200 ms), cancelled with it.
    let began = Instant::now();
    let mut i = 0;
    while began.elapsed() < Duration::from_secs(3) {
        i += 1;
        let (node, wire) = (node.clone(), h2c.clone());
        tokio::spawn(async move {
            let path = format!("/gone/{i}");
            let gone = get(&node, &wire, &path);
            let _ = tokio::time::timeout(Duration::from_millis(100), gone).await;
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = node.proxy.status().await;
    let cancelled = &status["routes"]["test"]["fills_cancelled"];
    eprintln!("{i} clients gone, {cancelled} fills cancelled");
    assert!(cancelled.as_u64() > Some(0), "no fill was cancelled");
    // Redis answers again: the breaker closes.
    link.unblackhole();
    let deadline = Instant::now() + CLOSED_WITHIN;
    while !all_closed(nodes).await {
        assert!(
            Instant::now() < deadline,
            "{:?} {CLOSED_WITHIN:?} after redis answered again: {}",
            breakers(nodes).await,
            fleet_status(&node).await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

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

/// Purges applied from the stream on `nodes`, each.
async fn applied(nodes: &[Arc<Wires>]) -> Vec<u64> {
    let mut counts = Vec::new();
    for node in nodes {
        counts.push(
            fleet_status(node).await["purges_applied"]
                .as_u64()
                .unwrap_or(0),
        );
    }
    counts
}

/// Waits until every one of `nodes` has applied more purges than `than`.
async fn wait_applied(nodes: &[Arc<Wires>], than: &[u64], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = applied(nodes).await;
        if now.iter().zip(than).all(|(n, t)| n > t) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: purges applied {than:?} then {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn admin_purge(node: &Wires, body: &str) {
    let auth = format!("Bearer {TOKEN}");
    let r = request_with_body(
        Method::POST,
        &node.proxy.admin_url("/purge"),
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_owned(),
    )
    .await;
    assert_eq!(r.status, 200, "{body}: {}", r.body);
}

const HTTP1: usize = 0;
const H2C: usize = 1;
const H2_TLS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_a_redis_cluster_coalesces_purges_and_keeps_an_object_in_one_slot() {
    let cluster = RedisCluster::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(
        &origin,
        &toml_list(&cluster.urls()),
        "timeout = \"1s\"",
        "60s",
    )
    .await;
    wait_connected(&nodes, CLOSED_WITHIN, "cluster").await;

    // A slow page: 30 requests on 3 nodes arrive while the first fetch
    // runs; one fetch. Over http (HTTP/1.1 and h2c share its key), then
    // over https: another object, another slot (perhaps another master).
    let path = "/page?x-origin-delay-ms=300";
    let bodies = burst(&nodes, &[HTTP1, H2C], path, 10).await;
    assert_eq!(origin.hits_for("/page"), 1, "one fetch for 30 requests");
    assert!(bodies.iter().all(|b| b == &bodies[0]), "{bodies:?}");
    let tls = burst(&nodes, &[H2_TLS], path, 10).await;
    assert_eq!(
        origin.hits_for("/page"),
        2,
        "one fetch for the https object"
    );
    assert!(
        tls.iter().all(|b| b == &tls[0] && b != &bodies[0]),
        "{tls:?}"
    );
    assert_eq!(total(&nodes, &["leases_acquired"]).await, 2);
    // Both in Redis: a node that never saw them takes them from there.
    let late = node(
        &origin,
        &toml_list(&cluster.urls()),
        "timeout = \"1s\"",
        "60s",
    )
    .await;
    wait_connected(std::slice::from_ref(&late), CLOSED_WITHIN, "a late node").await;
    let deadline = Instant::now() + USED_WITHIN;
    while total(&nodes, &["commits"]).await < 2 {
        assert!(Instant::now() < deadline, "both objects committed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(get(&late, &late.all[H2C], path).await.body, bodies[0]);
    assert_eq!(get(&late, &late.all[H2_TLS], path).await.body, tls[0]);
    assert_eq!(fleet_status(&late).await["shared_hits"], 2);
    assert_eq!(origin.hits_for("/page"), 2);

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
    assert_eq!(origin.hits_for("/page"), 4, "one fetch per object after");
    assert!(again.iter().all(|b| b == &again[0] && b != &bodies[0]));
    assert!(tls_again.iter().all(|b| b == &tls_again[0] && b != &tls[0]));

    // A prefix purge: the purge epoch (a key of its own slot) and the stream.
    let seen = applied(&all[1..]).await;
    admin_purge(&all[0], r#"{"prefix": "/pa"}"#).await;
    wait_applied(&all[1..], &seen, "prefix purge").await;
    let third = burst(&all, &[H2C], path, 1).await;
    assert_eq!(origin.hits_for("/page"), 5);
    assert!(third.iter().all(|b| b == &third[0] && b != &again[0]));

    // Every key of one object in one slot, on one master: the {H} tag.
    let deadline = Instant::now() + USED_WITHIN;
    while total(&all, &["commits"]).await < 5 {
        assert!(Instant::now() < deadline, "every fill committed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut objects: BTreeMap<String, (BTreeSet<String>, BTreeSet<usize>)> = BTreeMap::new();
    for (master, keys) in cluster_keys(&cluster).into_iter().enumerate() {
        for key in keys {
            let entry = objects.entry(hash_tag(&key).to_owned()).or_default();
            entry.1.insert(master);
            entry.0.insert(key);
        }
    }
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
    tokio::task::block_in_place(|| {
        cluster.nodes[1].restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cluster.ok() {
            assert!(Instant::now() < deadline, "cluster_state not ok again");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    watch.recovers().await;

    no_failed_request(load, "cluster master kill -9").await;
}

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
    let redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &redis.url(), "timeout = \"1s\"", "60s").await;
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
}
