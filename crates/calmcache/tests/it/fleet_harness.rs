//! What the fleet fault tests share (`fleet_kill`, `fleet_partition`,
//! `fleet_cluster`, `fleet_protocols`): three nodes on every wire, a bounded
//! load of concurrent clients that checks every answer, a [`Watch`] of one
//! fault under load (every node's breaker opens, the load goes on, every
//! breaker closes and the fleet uses Redis again), and the waits on the
//! nodes' `/status` `fleet` blocks. The bounds are generous: benchmarks
//! measure latency.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use calmcache_testkit::{Origin, Proxy, Reply, Wire, Wires};
use http::Method;
use tokio::task::JoinHandle;

use crate::wait_until;

pub const TOKEN: &str = "fleet-faults-token";
/// The fleet's one host name, as a load balancer passes it to every node
/// (the cache key has the host).
pub const HOST: &str = "fleet.test";

/// Load clients: each goes round the nodes and the wires.
const CLIENTS: usize = 4;
/// Each client's bounds: requests, and time (a load never outlives its test).
const REQUESTS_PER_CLIENT: usize = 3000;
const LOAD_LIMIT: Duration = Duration::from_secs(60);
/// Between two requests of one client.
const PACE: Duration = Duration::from_millis(20);
/// Generous bounds on the breaker: it opens after five failed calls in a
/// row, or half of 20 in 2 s (one deadline each, overlapping under load,
/// and a node calls Redis at least every 200 ms); it probes 1 s after
/// opening, then 2 s, 4 s... later.
const OPEN_WITHIN: Duration = Duration::from_secs(3);
pub const CLOSED_WITHIN: Duration = Duration::from_secs(15);
/// After the breakers close, the fleet stores or takes a copy within this.
pub const USED_WITHIN: Duration = Duration::from_secs(10);

/// `[fleet]` keys: a 3 s deadline and a fleet secret in a file of scratch
/// directory `name` (signed entries, purges and heartbeats).
pub fn signed_keys(name: &str) -> String {
    let secret = crate::scratch(name).join("fleet.secret");
    std::fs::write(&secret, "a-fleet-secret-of-at-least-32-bytes-0123456789\n").unwrap();
    format!(
        "timeout = \"3s\"\nsecret_file = {:?}",
        secret.display().to_string()
    )
}

/// One node of the fleet on `redis` (a URL, or a TOML list for a cluster)
/// with `fleet` keys, in front of `origin`, listening on every wire.
pub async fn node(origin: &Origin, redis: &str, fleet: &str, ttl: &str) -> Arc<Wires> {
    let proxy = Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(&format!(
            "ttl = {{ 200 = \"{ttl}\" }}\nlock_timeout = \"5s\""
        ))
        .fleet(redis, fleet);
    Arc::new(Wires::start(proxy, "").await)
}

pub async fn three_nodes(origin: &Origin, redis: &str, fleet: &str, ttl: &str) -> Vec<Arc<Wires>> {
    vec![
        node(origin, redis, fleet, ttl).await,
        node(origin, redis, fleet, ttl).await,
        node(origin, redis, fleet, ttl).await,
    ]
}

/// A GET of `path` on `node` over `wire`, as the load balancer sends it.
pub async fn get(node: &Wires, wire: &Wire, path: &str) -> Reply {
    node.send(wire, Method::GET, HOST, path, &[], "").await
}

/// The origin's body for `path` (`path=<path> n=<count>`): the right
/// object, whatever its version.
pub fn is_body_of(reply: &Reply, path: &str) -> bool {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    reply.status == 200 && reply.body.starts_with(&format!("path={path} n="))
}

pub async fn fleet_status(node: &Wires) -> serde_json::Value {
    node.proxy.status().await["fleet"].clone()
}

/// `fields` summed over every node.
pub async fn total(nodes: &[Arc<Wires>], fields: &[&str]) -> u64 {
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

/// What each node's fleet did, for a failed assertion's message: breaker
/// (state, opens and why, the latency it saw), leases, waits, copies and
/// failed calls. A count off by one under a loaded machine says here
/// whether a breaker opened (and the node rightly went on alone).
pub async fn diagnose(nodes: &[Arc<Wires>]) -> String {
    const FIELDS: [&str; 14] = [
        "breaker",
        "breaker_opened",
        "breaker_last_reason",
        "breaker_latency_us",
        "breaker_lag_us",
        "calls_ok",
        "calls_failed",
        "calls_timed_out",
        "calls_skipped",
        "leases_acquired",
        "leases_held",
        "waits_timed_out",
        "commits",
        "shared_hits",
    ];
    let mut out = String::new();
    for (n, node) in nodes.iter().enumerate() {
        let s = fleet_status(node).await;
        let shown: serde_json::Map<String, serde_json::Value> = FIELDS
            .iter()
            .filter(|f| !s[**f].is_null())
            .map(|f| ((*f).to_owned(), s[*f].clone()))
            .collect();
        out.push_str(&format!(
            "\n  node {n}: {}",
            serde_json::Value::Object(shown)
        ));
    }
    out
}

/// Copies the fleet stored in Redis or took from it.
pub async fn used(nodes: &[Arc<Wires>]) -> u64 {
    total(nodes, &["commits", "shared_hits"]).await
}

/// Every node's breaker state.
pub async fn breakers(nodes: &[Arc<Wires>]) -> Vec<String> {
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

pub async fn all_closed(nodes: &[Arc<Wires>]) -> bool {
    breakers(nodes).await.iter().all(|b| b == "closed")
}

/// Waits (at most `limit`) until every node's breaker is closed and has
/// answered calls: the fleet is on Redis.
pub async fn wait_connected(nodes: &[Arc<Wires>], limit: Duration, what: &str) {
    let awaited = format!("{what}: every node on redis");
    wait_until(limit, &awaited, async || {
        let mut ready = all_closed(nodes).await;
        for node in nodes {
            ready &= fleet_status(node).await["calls_ok"].as_u64() > Some(0);
        }
        ready
    })
    .await;
}

/// Waits (at most `limit`) until the fleet has stored or taken more than
/// `than` copies in Redis.
pub async fn wait_used(nodes: &[Arc<Wires>], than: u64, limit: Duration, what: &str) {
    let awaited = format!("{what}: redis used (commits + shared hits past {than})");
    wait_until(limit, &awaited, async || used(nodes).await > than).await;
}

/// Scripts loaded and Redis in use, at full speed: a script's first call
/// takes three round trips (NOSCRIPT, load, call), and the scripts stay
/// loaded. Node 0 stores copies (acquire, commit) until one is in Redis
/// (a call may miss the deadline on a busy machine), node 1 takes it.
pub async fn warm_up(nodes: &[Arc<Wires>]) {
    wait_connected(nodes, CLOSED_WITHIN, "warm-up").await;
    let mut i = 0;
    let path = wait_until(USED_WITHIN, "warm-up: a copy stored in redis", async || {
        i += 1;
        let path = format!("/warm/{i}");
        assert!(is_body_of(
            &get(&nodes[0], &Wire::Http1, &path).await,
            &path
        ));
        (total(nodes, &["commits"]).await > 0).then_some(path)
    })
    .await;
    let r = get(&nodes[1], &Wire::Http1, &path).await;
    assert!(is_body_of(&r, &path));
}

/// Concurrent clients sending requests to every node over every wire until
/// stopped, or at their count or time bound, and checking each answer.
pub struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    /// The slowest answer, in ms (reported, not asserted).
    slowest_ms: Arc<AtomicU64>,
    clients: Vec<JoinHandle<Vec<String>>>,
}

impl Load {
    pub fn start(nodes: &[Arc<Wires>]) -> Load {
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
    pub async fn stop(self) -> (u64, Duration, Vec<String>) {
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
pub struct Watch<'a> {
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
    pub async fn before(name: &'static str, nodes: &'a [Arc<Wires>], load: &'a Load) -> Watch<'a> {
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
    pub async fn opens(&self) {
        self.opens_within(OPEN_WITHIN).await;
    }

    /// Every node's breaker opens within `limit` of the fault (counted in
    /// `breaker_opened`, not only seen `open`: on a busy machine a probe's
    /// late answer can close one for a moment, tokio's timeout reading the
    /// answer before the timer when both are ready).
    pub async fn opens_within(&self, limit: Duration) {
        let what = format!("{}: every breaker opened since the fault", self.name);
        let left = limit.saturating_sub(self.began.elapsed());
        wait_until(left, &what, async || {
            let mut all = true;
            for (node, before) in self.nodes.iter().zip(&self.opened) {
                let s = fleet_status(node).await;
                all &= s["breaker_opened"].as_u64().unwrap_or(0) > *before;
            }
            all
        })
        .await;
        eprintln!(
            "{}: every breaker open after {:?}",
            self.name,
            self.began.elapsed()
        );
    }

    /// Lets the fault last `length` from its beginning; the load went on.
    pub async fn lasts(&self, length: Duration) {
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
    pub async fn recovers(self) {
        let ended = Instant::now();
        let what = format!("{}: every breaker closed after the fault", self.name);
        wait_until(CLOSED_WITHIN, &what, async || all_closed(self.nodes).await).await;
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
pub async fn no_failed_request(load: Load, what: &str) {
    let (answered, slowest, failures) = load.stop().await;
    assert!(
        failures.is_empty(),
        "{what}: {} of {answered} requests failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    eprintln!("{what}: {answered} requests, none failed, the slowest took {slowest:?}");
}

/// Purges applied from the stream on `nodes`, each.
pub async fn applied(nodes: &[Arc<Wires>]) -> Vec<u64> {
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
pub async fn wait_applied(nodes: &[Arc<Wires>], than: &[u64], what: &str) {
    let awaited = format!("{what}: purges applied on every node past {than:?}");
    wait_until(USED_WITHIN, &awaited, async || {
        let now = applied(nodes).await;
        now.iter().zip(than).all(|(n, t)| n > t)
    })
    .await;
}

/// Indexes of a node's wires in `all`: HTTP/1.1, h2c, HTTP/2 over TLS.
pub const HTTP1: usize = 0;
pub const H2C: usize = 1;
pub const H2_TLS: usize = 2;
