//! Failures that one request causes never fail other URLs (issue 25,
//! item 1). With the defaults (`max_fails = 1`, `fail_timeout = 10s`) one
//! read timeout or one connection closed before the head used to mark the
//! only server down: every URL got 502 for 10 s. Now a failed exchange
//! blames its URL (`net/blame.rs`); a dead server (nothing listening, or
//! failing on several paths while answering nothing) is still backed off,
//! one attempt per `fail_timeout`.
//!
//! Over HTTP/1.1, h2c and HTTP/2 over TLS, cached (`/c/...`) and uncached
//! (`/p/...`) routes, one- and two-server upstreams.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{Origin, Proxy, Reply, Wire, Wires};
use http::{Method, StatusCode};
use tokio::task::JoinSet;

/// Clients asking for other URLs while the attack runs.
const CLIENTS: usize = 50;
/// Requests each of them sends.
const PER_CLIENT: usize = 6;

/// `servers` behind a cached route for `/c/` and an uncached one for the
/// rest, the default health settings and `upstream` keys.
fn two_routes(servers: &[SocketAddr], upstream: &str) -> Proxy {
    let mut proxy = Proxy::with_upstream(servers[0]).upstream(upstream);
    for s in &servers[1..] {
        proxy = proxy.also_server(*s);
    }
    proxy.route(
        "match = \"^/c/\"\n\n\
         [[routes]]\nname = \"pass\"\nupstream = \"origin\"\n",
    )
}

async fn send(wires: &Wires, wire: &Wire, path: &str) -> Reply {
    let host = wires.proxy.host();
    wires.send(wire, Method::GET, &host, path, &[], "").await
}

/// `/status` -> `upstreams.origin`.
async fn upstream_status(proxy: &RunningProxy) -> serde_json::Value {
    proxy.status().await["upstreams"]["origin"].clone()
}

/// One attacker: hammers `paths` in turn over every wire until `stop` (at
/// most 400 requests), counting the answers that are not 200 (the
/// attack's own failures) in `failed`.
async fn hammer(
    wires: Arc<Wires>,
    paths: [&'static str; 2],
    stop: Arc<AtomicBool>,
    failed: Arc<AtomicU64>,
) {
    for n in 0..400usize {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let wire = &wires.all[n % wires.all.len()];
        let r = send(&wires, wire, paths[n % 2]).await;
        if r.status != StatusCode::OK {
            failed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// [`CLIENTS`] clients, each on one wire, asking [`PER_CLIENT`] URLs of
/// their own, cached and uncached in turn; every answer that is not the
/// origin's 200 for that URL.
async fn other_clients(wires: &Arc<Wires>) -> Vec<String> {
    let mut clients = JoinSet::new();
    for c in 0..CLIENTS {
        let wires = wires.clone();
        clients.spawn(async move {
            let wire = wires.all[c % wires.all.len()].clone();
            let mut bad = Vec::new();
            for i in 0..PER_CLIENT {
                let route = if i % 2 == 0 { "c" } else { "p" };
                let path = format!("/{route}/ok/{c}/{i}");
                let r = send(&wires, &wire, &path).await;
                if r.status != StatusCode::OK || !r.body.starts_with(&format!("path={path} ")) {
                    bad.push(format!(
                        "{} {path}: {} {:?}",
                        wire.label(),
                        r.status,
                        r.body
                    ));
                }
            }
            bad
        });
    }
    let mut bad = Vec::new();
    while let Some(r) = clients.join_next().await {
        bad.extend(r.expect("client task"));
    }
    bad
}

/// The bug: one client hammering a URL whose origin closes the connection
/// (and another one past `read_timeout`) marked the server down with the
/// default `max_fails = 1`, and for `fail_timeout` every other URL got
/// 502. Now the 50 other clients see no failure, on any wire or route,
/// with one server or two, and the servers stay up. (Fails without the
/// fix: 300 of 300 got `502 ... every origin server is down`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_url_and_a_slow_url_never_fail_other_urls() {
    for n_servers in [1, 2] {
        let mut origins = Vec::new();
        for _ in 0..n_servers {
            origins.push(Origin::start().await);
        }
        let addrs: Vec<SocketAddr> = origins.iter().map(|o| o.addr()).collect();
        // 4 s: a loaded test machine must not time out the other clients.
        let proxy = two_routes(&addrs, "read_timeout = \"4s\"");
        let wires = Arc::new(Wires::start(proxy, "").await);
        // A site in use: its origin has answered (a server that answered
        // nothing for fail_timeout and then fails on three paths is taken
        // for dead, see several_paths_failing_...).
        for wire in &wires.all {
            assert_eq!(send(&wires, wire, "/p/home").await.status, StatusCode::OK);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let broken = ["/c/broken?x-origin-close=1", "/p/broken?x-origin-close=1"];
        let slow = [
            "/c/slow?x-origin-delay-ms=5000",
            "/p/slow?x-origin-delay-ms=5000",
        ];
        let (closed, timed_out) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let attacks = [
            tokio::spawn(hammer(wires.clone(), broken, stop.clone(), closed.clone())),
            tokio::spawn(hammer(wires.clone(), slow, stop.clone(), timed_out.clone())),
        ];
        // Both attacks have failed (before the fix, the server was down
        // from here on), and go on while the others ask.
        let what = "the broken and the slow URL never failed";
        crate::wait_until(Duration::from_secs(10), what, async || {
            closed.load(Ordering::SeqCst) >= 1 && timed_out.load(Ordering::SeqCst) >= 1
        })
        .await;
        let bad = other_clients(&wires).await;
        stop.store(true, Ordering::SeqCst);
        for a in attacks {
            a.await.expect("attack task");
        }
        let attack_failures = closed.load(Ordering::SeqCst) + timed_out.load(Ordering::SeqCst);
        let u = upstream_status(&wires.proxy).await;
        assert!(
            bad.is_empty(),
            "{n_servers} server(s): {} of {} other requests failed: {bad:#?}\n{u:#}",
            bad.len(),
            CLIENTS * PER_CLIENT
        );
        assert!(attack_failures >= 2, "the attack never failed: {u:#}");
        let blamed: u64 = (0..n_servers)
            .map(|i| u["health"][i]["url_fails_total"].as_u64().unwrap())
            .sum();
        assert!(blamed >= 2, "{u:#}");
        for i in 0..n_servers {
            assert_eq!(u["health"][i]["state"], "up", "{u:#}");
            assert_eq!(u["health"][i]["fails_total"], 0, "{u:#}");
        }
        assert_eq!(u["all_down"], 0, "{u:#}");
    }
}

/// A dead origin (nothing listening) is backed off as before: one connect
/// per `fail_timeout` however many clients ask, with one server or two,
/// over every wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_origin_gets_one_connect_per_fail_timeout() {
    for n_servers in [1usize, 2] {
        let mut addrs = Vec::new();
        for _ in 0..n_servers {
            // Bound and dropped: nothing listens there (connection refused).
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            addrs.push(l.local_addr().unwrap());
        }
        let proxy = two_routes(&addrs, "fail_timeout = \"1s\"");
        let wires = Arc::new(Wires::start(proxy, "").await);
        // One request finds the servers dead (refused, then the next
        // server tried); the burst's connects are counted from here.
        let first = send(&wires, &Wire::Http1, "/p/first").await;
        assert_eq!(first.status, StatusCode::BAD_GATEWAY, "{}", first.body);
        let before = upstream_status(&wires.proxy).await["requests"]
            .as_u64()
            .unwrap();
        let started = Instant::now();
        let sent = Arc::new(AtomicU64::new(0));
        let mut clients = JoinSet::new();
        for c in 0..12usize {
            let (wires, sent) = (wires.clone(), sent.clone());
            clients.spawn(async move {
                let wire = wires.all[c % wires.all.len()].clone();
                let mut not_502 = Vec::new();
                while started.elapsed() < Duration::from_secs(2) {
                    let n = sent.fetch_add(1, Ordering::SeqCst);
                    if n >= 1_000 {
                        break;
                    }
                    let path = if n % 2 == 0 { "/c/x" } else { "/p/x" };
                    let r = send(&wires, &wire, &format!("{path}/{n}")).await;
                    if r.status != StatusCode::BAD_GATEWAY {
                        not_502.push(format!("{} {path}: {}", wire.label(), r.status));
                    }
                }
                not_502
            });
        }
        let mut bad = Vec::new();
        while let Some(r) = clients.join_next().await {
            bad.extend(r.unwrap());
        }
        let elapsed = started.elapsed();
        let requests = sent.load(Ordering::SeqCst).min(1_000);
        assert!(bad.is_empty(), "{bad:#?}");
        let u = upstream_status(&wires.proxy).await;
        let attempts = u["requests"].as_u64().unwrap() - before;
        println!(
            "{n_servers} dead server(s): {requests} requests in {elapsed:?}, {attempts} connects"
        );
        // Per server: one trial per fail_timeout (1 s), and slack.
        let allowed = n_servers as u64 * (1 + elapsed.as_secs() + 1);
        assert!(
            attempts <= allowed,
            "{attempts} connects for {requests} requests in {elapsed:?} (allowed {allowed}): {u:#}"
        );
        assert!(requests >= 50, "only {requests} requests in {elapsed:?}");
        assert!(u["all_down"].as_u64().unwrap() > 0, "{u:#}");
        for i in 0..n_servers {
            let why = u["health"][i]["last_failure"].as_str().unwrap();
            assert!(why.contains("ConnectFailed"), "{u:#}");
        }
    }
}

/// What the rule still calls a dead server: three paths failing (the
/// connection closed before the head) while the server answers nothing
/// mark it down, on every wire; once it answers other URLs, three paths
/// failing are those URLs' failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_paths_failing_mark_a_silent_server_down_but_not_an_answering_one() {
    for wire_index in 0..3 {
        let origin = Origin::start().await;
        let proxy = two_routes(&[origin.addr()], "");
        let wires = Wires::start(proxy, "").await;
        let wire = &wires.all[wire_index];
        // Answering: /p/ok is served, then three other paths fail.
        assert_eq!(send(&wires, wire, "/p/ok").await.status, StatusCode::OK);
        for path in ["/c/a", "/p/b", "/c/c", "/p/d"] {
            let r = send(&wires, wire, &format!("{path}?x-origin-close=1")).await;
            assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", wire.label());
        }
        let u = upstream_status(&wires.proxy).await;
        assert_eq!(u["health"][0]["state"], "up", "{}: {u:#}", wire.label());
        assert_eq!(send(&wires, wire, "/p/ok2").await.status, StatusCode::OK);

        // Silent: a fresh proxy whose server never answered.
        let proxy = two_routes(&[origin.addr()], "");
        let wires = Wires::start(proxy, "").await;
        let wire = &wires.all[wire_index];
        for path in ["/c/a", "/p/b", "/c/c"] {
            let r = send(&wires, wire, &format!("{path}?x-origin-close=1")).await;
            assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", wire.label());
        }
        let u = upstream_status(&wires.proxy).await;
        assert_eq!(u["health"][0]["state"], "down", "{}: {u:#}", wire.label());
        let r = send(&wires, wire, "/p/ok").await;
        assert!(
            r.body.contains("every origin server is down"),
            "{}: {}",
            wire.label(),
            r.body
        );
    }
}
