//! Fleet leases across a node's end (issue 30): waiters follow the lease,
//! not a clock, and a stopping node hands its leases over.
//!
//! - A holder killed (`kill -9`) mid-fetch of a 3 s origin: its lease
//!   lapses, one waiting node takes over, and the third follows that
//!   takeover instead of giving up at its 5 s `lock_timeout`: two origin
//!   fetches for three nodes (it was three).
//! - A holder stopped with SIGTERM mid-fetch finishes the fetch in its
//!   drain and commits it: its client and the peers get the object, one
//!   origin fetch. Stopped with a drain shorter than the fetch, it releases
//!   the lease at once: a peer's takeover begins well before the lease
//!   (10 s here) would have lapsed.
//! - A rolling restart of three nodes (each stopped with SIGTERM, then
//!   started again) under a bounded load fails no request and adds at most
//!   one origin fetch per object.
//!
//! The holders are processes of the real binary (killed, stopped); the
//! waiting peers run in the test and are asked over HTTP/1.1, h2c and
//! HTTP/2 over TLS.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use calmcache_testkit::client::{request, Reply};
use calmcache_testkit::redis::Redis;
use calmcache_testkit::{Origin, Proxy, Wires};
use http::Method;
use tokio::io::AsyncWriteExt;
use tokio::sync::RwLock;

use crate::fleet_harness::{get, is_body_of, HOST, TOKEN};
use crate::fleet_process::{peers_total, peers_waiting, ProcessNode};
use crate::{scratch, signal, wait_until};

/// Redis is not what is tested: a call slower than usual on a loaded
/// machine must not make a node fetch alone.
const FLEET: &str = "timeout = \"1s\"";
/// The route of every node: objects live long (one lifetime per test),
/// and one key whatever the scheme, so that the peers' requests over TLS
/// wait for the same object as the others (the key has the scheme by
/// default: a fleet behind a TLS-terminating balancer sees one).
const ROUTE: &str = "ttl = { 200 = \"60s\" }\nkey = \"$host$uri$is_args$args\"";

/// A node's config: `route` and `fleet` keys, and the admin listener the
/// test reads `/status` on.
fn config(origin: &Origin, redis: &Redis, route: &str, fleet: &str) -> Proxy {
    Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(&format!("lock_timeout = \"5s\"\n{route}"))
        .fleet(&redis.url(), fleet)
}

/// Sends GET `path` to the process node without ever reading the answer
/// (the node dies under it); the connection is returned to be dropped.
async fn unread_get(node: &ProcessNode, path: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", node.port))
        .await
        .unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nhost: {HOST}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// One request per wire to each peer, all at once: every one of them
/// finds the holder's lease.
fn ask_peers(peers: &[Arc<Wires>], path: &str) -> Vec<tokio::task::JoinHandle<(String, Reply)>> {
    let mut asked = Vec::new();
    for (p, peer) in peers.iter().enumerate() {
        for wire in peer.all.clone() {
            let (peer, path) = (peer.clone(), path.to_owned());
            asked.push(tokio::spawn(async move {
                let label = format!("peer {p} over {}", wire.label());
                (label, get(&peer, &wire, &path).await)
            }));
        }
    }
    asked
}

/// Every peer's answer: the object, the same for all.
async fn all_answered(asked: Vec<tokio::task::JoinHandle<(String, Reply)>>, path: &str) {
    let mut bodies = Vec::new();
    for task in asked {
        let (label, reply) = task.await.unwrap();
        assert!(
            is_body_of(&reply, path),
            "{label}: {} {}",
            reply.status,
            reply.body
        );
        bodies.push(reply.body);
    }
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "one object: {bodies:?}"
    );
}

/// A holder (process, with `server` keys) and two waiting peers (in the
/// test) on one Redis, every node with `fleet` keys.
async fn holder_and_peers(
    origin: &Origin,
    redis: &Redis,
    dir: &Path,
    fleet: &str,
    server: &str,
) -> (ProcessNode, Vec<Arc<Wires>>) {
    let holder_config = config(origin, redis, ROUTE, fleet).server(server);
    let holder = ProcessNode::start(&holder_config, &dir.join("holder.toml")).await;
    let mut peers = Vec::new();
    for _ in 0..2 {
        let peer = config(origin, redis, ROUTE, fleet);
        peers.push(Arc::new(Wires::start(peer, "").await));
    }
    holder.wait_on_redis().await;
    (holder, peers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_takeover_is_followed_by_the_third_node() {
    // Issue 30: with the holder killed mid-fetch of a 3 s origin, one node
    // took over once the lease lapsed (up to 3 s), and the third gave up at
    // its 5 s lock_timeout while the takeover was still fetching: three
    // origin fetches for three nodes.
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = scratch("fleet-killed-holder");
    let (holder, peers) = holder_and_peers(&origin, &redis, &dir, FLEET, "").await;
    let path = "/killed?x-origin-delay-ms=3000";
    let _unread = unread_get(&holder, path).await;
    let what = "the holder's fetch began";
    wait_until(Duration::from_secs(10), what, async || {
        origin.hits_for("/killed") == 1
    })
    .await;
    let asked = ask_peers(&peers, path);
    peers_waiting(&peers).await;
    signal(holder.child(), "-KILL");
    all_answered(asked, path).await;
    let (held, acquired, gave_up) = (
        peers_total(&peers, "leases_held").await,
        peers_total(&peers, "leases_acquired").await,
        peers_total(&peers, "waits_timed_out").await,
    );
    let fetches = origin.hits_for("/killed");
    eprintln!(
        "killed holder: {fetches} fetches, {held} waits, {acquired} takeovers, {gave_up} gave up"
    );
    assert_eq!(fetches, 2, "the killed fetch and one takeover");
    assert_eq!(acquired, 1, "one node took over");
    assert_eq!(gave_up, 0, "no wait ended without the copy");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_mid_fetch_commits_in_its_drain() {
    // SIGTERM while the holder's 3 s fetch runs: the drain (30 s by
    // default) lets it finish; its client gets the object, the fill
    // commits, and the waiting peers take the copy: one origin fetch.
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = scratch("fleet-stopped-holder");
    let (mut holder, peers) = holder_and_peers(&origin, &redis, &dir, FLEET, "").await;
    let path = "/stopped?x-origin-delay-ms=3000";
    let url = holder.url(path);
    let own = tokio::spawn(async move { request(Method::GET, &url, &[("host", HOST)]).await });
    let what = "the holder's fetch began";
    wait_until(Duration::from_secs(10), what, async || {
        origin.hits_for("/stopped") == 1
    })
    .await;
    let asked = ask_peers(&peers, path);
    peers_waiting(&peers).await;
    holder.terminate(Duration::from_secs(20)).await;
    let own = own.await.unwrap();
    assert!(
        is_body_of(&own, path),
        "the holder's own client: {} {}",
        own.status,
        own.body
    );
    all_answered(asked, path).await;
    let shared = peers_total(&peers, "shared_hits").await;
    assert_eq!(origin.hits_for("/stopped"), 1, "no extra fetch");
    assert_eq!(shared, 2, "both peers took the committed copy");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_drain_ends_first_hands_its_lease_over_at_once() {
    // The drain (500 ms) ends before the holder's 3 s fetch: the fetch is
    // cut and its lease released as the node stops. Without the release a
    // peer would wait for the lease to lapse: up to 10 s here (renewed
    // every 3.3 s, so at least 6.7 s after the stop).
    const LEASE: Duration = Duration::from_secs(10);
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = scratch("fleet-cut-holder");
    let fleet = format!("{FLEET}\nlease = \"10s\"");
    let drain = "shutdown_timeout = \"500ms\"";
    let (holder, peers) = holder_and_peers(&origin, &redis, &dir, &fleet, drain).await;
    let path = "/cut?x-origin-delay-ms=3000";
    let _unread = unread_get(&holder, path).await;
    let what = "the holder's fetch began";
    wait_until(Duration::from_secs(10), what, async || {
        origin.hits_for("/cut") == 1
    })
    .await;
    let asked = ask_peers(&peers, path);
    peers_waiting(&peers).await;
    let stopped = Instant::now();
    signal(holder.child(), "-TERM");
    // Well under the lease: the release, not the lapse, let it go.
    let within = LEASE / 2;
    wait_until(within, "a peer took over the released lease", async || {
        origin.hits_for("/cut") == 2
    })
    .await;
    let took_over_after = stopped.elapsed();
    all_answered(asked, path).await;
    eprintln!(
        "cut holder: a peer's fetch began {took_over_after:?} after SIGTERM (lease {LEASE:?})"
    );
    assert_eq!(origin.hits_for("/cut"), 2, "the cut fetch and one takeover");
    assert_eq!(peers_total(&peers, "waits_timed_out").await, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Load clients of the rolling restart: each bounded in count and time.
const ROLL_CLIENTS: usize = 3;
const ROLL_REQUESTS: usize = 2_000;
const ROLL_LIMIT: Duration = Duration::from_secs(60);
const ROLL_PACE: Duration = Duration::from_millis(10);
/// Objects of the rolling restart: their number, lifetime, origin delay.
const ROLL_URLS: usize = 12;
const ROLL_TTL: Duration = Duration::from_secs(2);
const ROLL_DELAY_MS: u64 = 100;

/// A node in or out of rotation: a client holds it for a request, the
/// restart takes it whole (as a load balancer drains a node before its
/// stop, so no new request reaches a closing listener).
type Gate = Arc<RwLock<()>>;

async fn roll_client(
    c: usize,
    ports: Vec<u16>,
    gates: Vec<Gate>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    answered: Arc<AtomicU64>,
) -> Vec<String> {
    let began = Instant::now();
    let mut failures = Vec::new();
    let mut n = c;
    for i in 0..ROLL_REQUESTS {
        if stop.load(Ordering::Relaxed) || began.elapsed() > ROLL_LIMIT {
            break;
        }
        // Round robin over the nodes in rotation.
        let (node, _turn) = loop {
            n += 1;
            if let Ok(turn) = gates[n % ports.len()].clone().try_read_owned() {
                break (n % ports.len(), turn);
            }
        };
        let path = format!(
            "/roll/{}?x-origin-delay-ms={ROLL_DELAY_MS}",
            (c * 7 + i) % ROLL_URLS
        );
        let url = format!("http://127.0.0.1:{}{path}", ports[node]);
        let sent = tokio::spawn(async move { request(Method::GET, &url, &[("host", HOST)]).await });
        match sent.await {
            Ok(r) if is_body_of(&r, &path) => {}
            Ok(r) => failures.push(format!(
                "GET {path} on node {node}: {} {}",
                r.status, r.body
            )),
            Err(e) => failures.push(format!("GET {path} on node {node}: {e}")),
        }
        answered.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(ROLL_PACE).await;
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_fails_no_request_and_adds_at_most_one_fetch() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let dir = scratch("fleet-rolling");
    let ttl = format!("ttl = {{ 200 = \"{}s\" }}", ROLL_TTL.as_secs());
    let config = config(&origin, &redis, &ttl, FLEET);
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(ProcessNode::start(&config, &dir.join(format!("node{i}.toml"))).await);
    }
    for node in &nodes {
        node.wait_on_redis().await;
    }
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let gates: Vec<Gate> = (0..3).map(|_| Arc::new(RwLock::new(()))).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let began = Instant::now();
    let clients: Vec<_> = (0..ROLL_CLIENTS)
        .map(|c| {
            let (ports, gates) = (ports.clone(), gates.clone());
            let (stop, answered) = (stop.clone(), answered.clone());
            tokio::spawn(roll_client(c, ports, gates, stop, answered))
        })
        .collect();
    tokio::time::sleep(ROLL_TTL).await;
    for (i, node) in nodes.iter_mut().enumerate() {
        let before = answered.load(Ordering::Relaxed);
        let out = gates[i].write().await;
        node.terminate(Duration::from_secs(35)).await;
        node.start_again().await;
        node.wait_on_redis().await;
        drop(out);
        tokio::time::sleep(ROLL_TTL / 2).await;
        assert!(
            answered.load(Ordering::Relaxed) > before,
            "the load went on while node {i} restarted"
        );
    }
    tokio::time::sleep(ROLL_TTL).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for client in clients {
        failures.extend(client.await.unwrap());
    }
    let length = began.elapsed();
    let total = answered.load(Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} of {total} requests failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    // One fetch per lifetime (a copy lives its TTL less its age on arrival,
    // the origin's delay; counted as in fleet_lifetimes' steady test), and
    // at most one more per object for the three restarts.
    let lifetime = ROLL_TTL - Duration::from_millis(2 * ROLL_DELAY_MS);
    let lifetimes = (length.as_secs_f64() / lifetime.as_secs_f64()).ceil() as u64 + 1;
    let mut fetches = Vec::new();
    for u in 0..ROLL_URLS {
        fetches.push(origin.hits_for(&format!("/roll/{u}")));
    }
    eprintln!(
        "rolling restart: {total} requests in {length:?}, none failed; fetches per object {fetches:?} \
         ({lifetimes} lifetimes)"
    );
    for (u, f) in fetches.iter().enumerate() {
        assert!(
            *f <= lifetimes + 1,
            "/roll/{u}: {f} fetches > {lifetimes} lifetimes + 1"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
