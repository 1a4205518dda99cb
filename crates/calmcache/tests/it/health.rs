//! Upstream health (issue 12, item 3): passive checks (`max_fails`,
//! `fail_timeout`), skipping down servers, the all-down answer (a stale copy
//! or a 502 at once, no connection attempted), one trial per
//! `fail_timeout`, active checks, and `/status` / `/metrics`.
//!
//! The origins here are [`Flaky`]: a listener that counts every accepted
//! connection and can serve, close each connection at once, or hold it
//! without answering, so a test counts the connection attempts a dead
//! origin would see.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{get, request, request_with_body, Origin, Proxy, Wire, Wires};
use http::{Method, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::wait_until;

/// What a [`Flaky`] does with a connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Mode {
    /// HTTP/1.1: `/healthz` answers the health status, anything else 200.
    Serve = 0,
    /// Accept and close at once (a crashed app behind a live port); a
    /// request on a connection opened before is answered by a close too.
    Close = 1,
    /// Accept and never answer.
    Hang = 2,
    /// Serve the first request of each connection, and close the
    /// connection on the next one without an answer: what a pooled
    /// connection looks like when the origin's keep-alive timeout closes it
    /// just as a request goes out.
    OneShot = 3,
}

/// A loopback origin that counts accepted connections and can be switched
/// between serving, closing and hanging.
struct Flaky {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
    checks: Arc<AtomicU64>,
    mode: Arc<AtomicU8>,
    health: Arc<AtomicU16>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Flaky {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Flaky {
    async fn start(mode: Mode) -> Flaky {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let served = Arc::new(AtomicU64::new(0));
        let checks = Arc::new(AtomicU64::new(0));
        let mode = Arc::new(AtomicU8::new(mode as u8));
        let health = Arc::new(AtomicU16::new(200));
        let (a, m) = (accepted.clone(), mode.clone());
        let counts = (served.clone(), checks.clone(), health.clone());
        let task = tokio::spawn(async move {
            // Connections live in this set: aborting the task closes them all.
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                a.fetch_add(1, Ordering::SeqCst);
                match m.load(Ordering::SeqCst) {
                    1 => drop(stream),
                    2 => {
                        conns.spawn(async move {
                            let _held = stream;
                            std::future::pending::<()>().await;
                        });
                    }
                    _ => {
                        let (counts, m) = (counts.clone(), m.clone());
                        let on_conn = Arc::new(AtomicU64::new(0));
                        let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                            let (counts, m) = (counts.clone(), m.clone());
                            let nth = on_conn.fetch_add(1, Ordering::SeqCst);
                            async move {
                                if nth > 0 && m.load(Ordering::SeqCst) == Mode::OneShot as u8 {
                                    return Err(std::io::Error::other("keep-alive timeout"));
                                }
                                answer(&req, &counts, &m)
                            }
                        });
                        conns.spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
        });
        Flaky {
            addr,
            accepted,
            served,
            checks,
            mode,
            health,
            task,
        }
    }

    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn set_health(&self, status: u16) {
        self.health.store(status, Ordering::SeqCst);
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    fn served(&self) -> u64 {
        self.served.load(Ordering::SeqCst)
    }

    fn checks(&self) -> u64 {
        self.checks.load(Ordering::SeqCst)
    }
}

type Answer = Result<http::Response<Full<Bytes>>, std::io::Error>;

/// Requests served, health checks answered, the health status.
type Counts = (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU16>);

fn answer(req: &http::Request<hyper::body::Incoming>, counts: &Counts, mode: &AtomicU8) -> Answer {
    let (served, checks, health) = counts;
    if ![Mode::Serve as u8, Mode::OneShot as u8].contains(&mode.load(Ordering::SeqCst)) {
        // hyper closes the connection without an answer.
        return Err(std::io::Error::other("origin switched off"));
    }
    let (status, body) = if req.uri().path() == "/healthz" {
        checks.fetch_add(1, Ordering::SeqCst);
        (health.load(Ordering::SeqCst), "health".to_string())
    } else {
        served.fetch_add(1, Ordering::SeqCst);
        (200, format!("copy of {}", req.uri().path()))
    };
    let resp = http::Response::builder()
        .status(status)
        .body(Full::new(Bytes::from(body)))
        .map_err(std::io::Error::other)?;
    Ok(resp)
}

/// `/status` -> `upstreams.origin`.
async fn upstream_status(proxy: &RunningProxy) -> serde_json::Value {
    proxy.status().await["upstreams"]["origin"].clone()
}

/// Polls `/status` every 25 ms until server `i` of `origin` is in `state`;
/// panics after 10 s.
async fn wait_for_state(proxy: &RunningProxy, i: usize, state: &str) {
    let what = format!("server {i} {state}");
    wait_until(Duration::from_secs(10), &what, async || {
        upstream_status(proxy).await["health"][i]["state"] == state
    })
    .await;
}

async fn metrics(proxy: &RunningProxy) -> String {
    get(&proxy.admin_url("/metrics")).await.body
}

/// Sends GETs on three distinct paths under `prefix` at once and checks each
/// gets `status`: what a dead server (accepting but closing, or hanging)
/// does to every URL. One URL failing is blamed on that URL, not the
/// server (`net/blame.rs`): three paths failing while the server answers
/// nothing mark it down.
async fn fail_paths(proxy: &RunningProxy, prefix: &str, status: StatusCode) {
    let urls: Vec<String> = (0..3)
        .map(|i| proxy.url(&format!("{prefix}/{i}")))
        .collect();
    let replies = futures_util::future::join_all(urls.iter().map(|u| get(u))).await;
    for (url, r) in urls.iter().zip(replies) {
        assert_eq!(r.status, status, "{url}: {}", r.body);
    }
}

async fn send(wires: &Wires, wire: &Wire, method: Method, path: &str) -> calmcache_testkit::Reply {
    let host = wires.proxy.host();
    wires.send(wire, method, &host, path, &[], "").await
}

/// The bug: with the origin killed and stale_if_error covering every
/// client, calmcache made ~12,500 connection attempts per second to it.
/// Now the first failure marks the server down; while it is down, stale
/// copies are served with no attempt, and one trial goes per fail_timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_origin_sees_one_attempt_per_fail_timeout_while_stale_copies_are_served() {
    let origin = Flaky::start(Mode::Serve).await;
    let proxy = Proxy::with_upstream(origin.addr)
        .upstream("fail_timeout = \"1s\"")
        .route("refresh = \"lock\"\nttl = { 200 = \"100ms\" }\nstale_if_error = \"1h\"");
    let wires = Arc::new(Wires::start(proxy, "").await);
    let paths: Vec<String> = (0..10).map(|i| format!("/stale/{i}")).collect();
    // Every wire: TLS requests are keyed under https.
    for wire in &wires.all {
        for path in &paths {
            let r = send(&wires, wire, Method::GET, path).await;
            assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        }
    }
    origin.set(Mode::Close);
    // The origin died: requests on several paths find out once it has
    // answered nothing for fail_timeout (net/blame.rs), each served its
    // stale copy. (Requests already on their way when a server fails each
    // make their attempt: up to one per fill in flight, as in NGINX.)
    let dying = Instant::now();
    for n in 0.. {
        if upstream_status(&wires.proxy).await["health"][0]["state"] == "down" {
            break;
        }
        assert!(
            n < 500 && dying.elapsed() < Duration::from_secs(10),
            "never down"
        );
        let r = send(&wires, &Wire::Http1, Method::GET, &paths[n % paths.len()]).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    let before = origin.accepted();
    let counted_before = wires.proxy.status().await["totals"]["upstream_requests"]
        .as_u64()
        .unwrap();

    // A bounded burst: 2,000 requests or 2 s, 12 clients over the three wires.
    let started = Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let mut clients = JoinSet::new();
    for c in 0..12usize {
        let (wires, sent, paths) = (wires.clone(), sent.clone(), paths.clone());
        clients.spawn(async move {
            let mut bad = Vec::new();
            let wire = wires.all[c % wires.all.len()].clone();
            while started.elapsed() < Duration::from_secs(2) {
                let n = sent.fetch_add(1, Ordering::SeqCst);
                if n >= 2_000 {
                    break;
                }
                let path = &paths[n as usize % paths.len()];
                let r = send(&wires, &wire, Method::GET, path).await;
                let stale = r.cache_status().contains("detail=stale-if-error");
                if r.status != StatusCode::OK || r.body != format!("copy of {path}") || !stale {
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
        bad.extend(r.unwrap());
    }
    let elapsed = started.elapsed();
    let requests = sent.load(Ordering::SeqCst).min(2_000);
    assert!(bad.is_empty(), "not the stale copy: {bad:#?}");
    assert!(requests >= 50, "only {requests} requests in {elapsed:?}");
    let attempts = origin.accepted() - before;
    println!("{requests} requests in {elapsed:?}: {attempts} connection attempts");
    // One trial per fail_timeout (1 s), and slack.
    let allowed = 1 + elapsed.as_secs() + 1;
    assert!(
        attempts <= allowed,
        "{attempts} connection attempts for {requests} requests in {elapsed:?} (allowed {allowed})"
    );

    let u = upstream_status(&wires.proxy).await;
    let server = &u["health"][0];
    assert!(
        server["state"] == "down" || server["state"] == "trial",
        "{u:#}"
    );
    assert!(u["all_down"].as_u64().unwrap() > 0, "{u:#}");
    assert!(server["fails_total"].as_u64().unwrap() >= 1, "{u:#}");
    // Requests refused at once never reached the origin: the routes'
    // origin request count (the dashboard's) is the attempts, not the burst.
    let totals = &wires.proxy.status().await["totals"];
    let origin_requests = totals["upstream_requests"].as_u64().unwrap() - counted_before;
    assert!(
        origin_requests <= attempts + 2,
        "{origin_requests} origin requests counted for {attempts} attempts: {totals:#}"
    );
    assert!(
        server["last_failure"].as_str().unwrap().contains("Broken"),
        "{u:#}"
    );
    let text = metrics(&wires.proxy).await;
    let up = format!(
        "calmcache_upstream_server_up{{upstream=\"origin\",server=\"{}\"}} 0",
        origin.addr
    );
    assert!(text.contains(&up), "{up} not in\n{text}");
    assert!(text.contains("calmcache_upstream_all_down_total{upstream=\"origin\"} "));
}

/// Without a stale copy, a request is answered 502 at once while every
/// server is down (here a server that never answers: a real attempt would
/// wait read_timeout), on every wire, for cached routes, pass-through
/// methods and WebSocket handshakes alike, and no connection is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_stale_copy_every_server_down_is_a_502_at_once() {
    let origin = Flaky::start(Mode::Hang).await;
    let proxy =
        Proxy::with_upstream(origin.addr).upstream("read_timeout = \"3s\"\nfail_timeout = \"30s\"");
    let wires = Wires::start(proxy, "").await;
    // The first requests wait for read_timeout and mark the server down
    // (three paths, no answer: the server's fault, not one URL's).
    fail_paths(&wires.proxy, "/first", StatusCode::GATEWAY_TIMEOUT).await;
    let attempts = origin.accepted();
    for wire in &wires.all {
        for (method, path) in [(Method::GET, "/never-seen"), (Method::POST, "/form")] {
            let r = send(&wires, wire, method.clone(), path).await;
            let what = format!("{} {method} {path}", wire.label());
            assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{what}: {}", r.body);
            assert!(
                r.body.contains("every origin server is down"),
                "{what}: {}",
                r.body
            );
            assert!(
                r.elapsed < Duration::from_millis(1500),
                "{what}: {:?}",
                r.elapsed
            );
        }
    }
    let ws = request(
        Method::GET,
        &wires.proxy.url("/socket"),
        &[
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
        ],
    )
    .await;
    assert_eq!(ws.status, StatusCode::BAD_GATEWAY, "{}", ws.body);
    assert!(ws.elapsed < Duration::from_millis(1500), "{:?}", ws.elapsed);
    let posted = request_with_body(Method::POST, &wires.proxy.url("/upload"), &[], "x=1").await;
    assert_eq!(posted.status, StatusCode::BAD_GATEWAY, "{}", posted.body);
    assert_eq!(origin.accepted(), attempts, "no connection while down");

    let u = upstream_status(&wires.proxy).await;
    assert_eq!(u["health"][0]["state"], "down", "{u:#}");
    assert!(u["all_down"].as_u64().unwrap() >= 8, "{u:#}");
    let retry = u["health"][0]["retry_in_seconds"].as_f64().unwrap();
    assert!(retry > 0.0 && retry <= 30.0, "{u:#}");
    assert!(
        u["health"][0]["last_failure"]
            .as_str()
            .unwrap()
            .contains("ReadTimeout"),
        "{u:#}"
    );
}

/// After fail_timeout one request is the trial; when it is answered the
/// server is up again and every request after it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_fail_timeout_one_trial_brings_a_recovered_origin_back() {
    let origin = Flaky::start(Mode::Close).await;
    let proxy = Proxy::with_upstream(origin.addr)
        .upstream("fail_timeout = \"1s\"")
        .start()
        .await;
    fail_paths(&proxy, "/r/0", StatusCode::BAD_GATEWAY).await;
    let failed_at = Instant::now();
    // Closed before the head while up: once more before it counts; three
    // paths before the server is blamed.
    assert_eq!(origin.accepted(), 6);
    origin.set(Mode::Serve);
    // Within fail_timeout: refused without an attempt, even though the
    // origin is back.
    let r = get(&proxy.url("/r/1")).await;
    if failed_at.elapsed() < Duration::from_millis(900) {
        assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.body);
        assert!(r.body.contains("every origin server is down"), "{}", r.body);
        assert_eq!(origin.accepted(), 6);
    }
    tokio::time::sleep(Duration::from_millis(1100).saturating_sub(failed_at.elapsed())).await;
    let trial = get(&proxy.url("/r/2")).await;
    assert_eq!(trial.status, StatusCode::OK, "the trial: {}", trial.body);
    for i in 3..23 {
        let r = get(&proxy.url(&format!("/r/{i}"))).await;
        assert_eq!(r.status, StatusCode::OK, "/r/{i}: {}", r.body);
    }
    let u = upstream_status(&proxy).await;
    assert_eq!(u["health"][0]["state"], "up", "{u:#}");
    assert_eq!(u["health"][0]["fails"], 0, "{u:#}");
    assert!(origin.served() >= 21, "{}", origin.served());
}

/// Two servers, one dead: its first failure is retried on the live one,
/// and after it every request goes to the live one (round robin skips the
/// down server), on every wire. A POST is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_servers_the_dead_one_is_skipped_after_its_first_failure() {
    let dead = Flaky::start(Mode::Close).await;
    let live = Origin::start().await;
    let proxy = Proxy::with_upstream(dead.addr)
        .also_server(live.addr())
        .no_zone();
    let wires = Wires::start(proxy, "").await;
    let mut failures = Vec::new();
    for i in 0..30 {
        let wire = &wires.all[i % wires.all.len()];
        let path = format!("/two/{i}");
        let r = send(&wires, wire, Method::GET, &path).await;
        if r.status != StatusCode::OK {
            failures.push(format!("{} {path}: {} {}", wire.label(), r.status, r.body));
        }
    }
    // The first request round robin sends to the dead server is sent
    // again to the live one (a bodiless GET); none fails.
    assert!(failures.is_empty(), "{failures:#?}");
    // Each failure is tried twice (closed before the head while up), and
    // three paths fail before the server (never answering) is blamed.
    assert!(
        dead.accepted() <= 6,
        "{} attempts on the dead server",
        dead.accepted()
    );
    assert_eq!(live.hits(), 30, "every request on the live server");
    let u = upstream_status(&wires.proxy).await;
    assert_eq!(u["health"][0]["state"], "down", "{u:#}");
    assert_eq!(u["health"][1]["state"], "up", "{u:#}");
    assert!(u["skipped"].as_u64().unwrap() >= 10, "{u:#}");
    assert_eq!(u["all_down"], 0, "{u:#}");
}

/// The false alarm: an origin whose keep-alive timeout closes a pooled
/// connection just as a request goes out on it is not dead. The request is
/// sent once more (a bodiless GET) and the server is never marked down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_closed_by_the_origin_is_not_a_failure() {
    let origin = Flaky::start(Mode::OneShot).await;
    let proxy = Proxy::with_upstream(origin.addr).no_zone().start().await;
    for i in 0..20 {
        let r = get(&proxy.url(&format!("/pooled/{i}"))).await;
        assert_eq!(r.status, StatusCode::OK, "/pooled/{i}: {}", r.body);
    }
    let u = upstream_status(&proxy).await;
    assert_eq!(u["health"][0]["state"], "up", "{u:#}");
    assert_eq!(u["health"][0]["fails_total"], 0, "{u:#}");
    assert_eq!(origin.served(), 20);
}

/// A request with a body is never sent twice: a POST whose server closed
/// the connection is a 502, and the other server sees nothing of it (nor
/// does the failure count against the server: it may have been the body's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_not_retried_on_another_server() {
    let dead = Flaky::start(Mode::Close).await;
    let live = Origin::start().await;
    let proxy = Proxy::with_upstream(dead.addr)
        .also_server(live.addr())
        .no_zone()
        .start()
        .await;
    let r = request_with_body(Method::POST, &proxy.url("/p"), &[], "x=1").await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.body);
    assert_eq!(live.hits(), 0);
    let u = upstream_status(&proxy).await;
    assert_eq!(u["health"][0]["state"], "up", "{u:#}");
}

/// 5xx answers do not count by default (NGINX's); with `fail_statuses`
/// they do: the 503 is relayed, and the server is down after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_statuses_count_listed_answers_as_failures() {
    let origin = Origin::start().await;
    let failing = [("x-origin-status", "503")];
    let plain = Proxy::new(&origin).no_zone().start().await;
    for _ in 0..3 {
        let r = request(Method::GET, &plain.url("/busy"), &failing).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(upstream_status(&plain).await["health"][0]["state"], "up");
    let counting = Proxy::new(&origin)
        .no_zone()
        .upstream("fail_statuses = [503]\nfail_timeout = \"30s\"")
        .start()
        .await;
    let hits = origin.hits();
    let r = request(Method::GET, &counting.url("/busy"), &failing).await;
    assert_eq!(
        r.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "relayed as it came"
    );
    let r = get(&counting.url("/fine")).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.body);
    assert_eq!(origin.hits(), hits + 1);
    let u = upstream_status(&counting).await;
    assert_eq!(u["health"][0]["state"], "down", "{u:#}");
    let last = u["health"][0]["last_failure"].as_str().unwrap();
    assert!(last.contains("answered 503"), "{u:#}");
}

/// health_check: a server whose check fails is skipped until it passes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_health_check_marks_a_server_down_and_up() {
    let a = Flaky::start(Mode::Serve).await;
    let b = Flaky::start(Mode::Serve).await;
    let proxy = Proxy::with_upstream(a.addr)
        .also_server(b.addr)
        .upstream("health_check = { path = \"/healthz\", interval = \"100ms\", timeout = \"1s\" }")
        .no_zone()
        .start()
        .await;
    b.set_health(503);
    wait_for_state(&proxy, 1, "check_failed").await;
    let served_b = b.served();
    for i in 0..20 {
        let r = get(&proxy.url(&format!("/active/{i}"))).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    assert_eq!(
        b.served(),
        served_b,
        "a server failing its check got requests"
    );
    let u = upstream_status(&proxy).await;
    let server = &u["health"][1];
    assert_eq!(server["last_check"], "503 Service Unavailable", "{u:#}");
    assert!(server["checks_failed"].as_u64().unwrap() >= 1, "{u:#}");
    let text = metrics(&proxy).await;
    let checks = format!(
        "calmcache_upstream_server_checks_failed_total{{upstream=\"origin\",server=\"{}\"}}",
        b.addr
    );
    assert!(text.contains(&checks), "{checks} not in\n{text}");

    b.set_health(200);
    wait_for_state(&proxy, 1, "up").await;
    for i in 20..40 {
        let r = get(&proxy.url(&format!("/active/{i}"))).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    assert!(
        b.served() >= served_b + 5,
        "{} after coming back",
        b.served()
    );
}

/// A health check that finds every server down answers 502 at once too,
/// saying why; a check on a dead port counts as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_failing_its_check_is_a_502_naming_the_check() {
    let a = Flaky::start(Mode::Serve).await;
    a.set_health(500);
    let proxy = Proxy::with_upstream(a.addr)
        .upstream("health_check = { path = \"/healthz\", interval = \"100ms\" }")
        .start()
        .await;
    wait_for_state(&proxy, 0, "check_failed").await;
    let served = a.served();
    let r = get(&proxy.url("/x")).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.body);
    assert_eq!(a.served(), served);
}

/// A reload keeps a down server down when its settings are unchanged
/// (no burst of attempts at each reload), starts it afresh when they
/// change, and stops the previous generation's active checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_health_of_unchanged_servers_and_stops_old_checks() {
    let origin = Flaky::start(Mode::Close).await;
    let builder = |keys: &str| {
        Proxy::with_upstream(origin.addr)
            .upstream(keys)
            .route("ttl = { 200 = \"2s\" }")
    };
    let passive = "fail_timeout = \"30s\"";
    let proxy = builder(passive).start().await;
    fail_paths(&proxy, "/dead", StatusCode::BAD_GATEWAY).await;
    assert_eq!(upstream_status(&proxy).await["health"][0]["state"], "down");
    let reload = |keys: &str| {
        let text = builder(keys).toml();
        calmcache::Config::from_toml(&text, "<test>").unwrap()
    };
    let reloader = proxy.running().reloader().clone();
    // The same upstream settings (a route changed): still down, no attempt.
    let mut same = reload(passive);
    same.routes[0].freshness.ttl = Default::default();
    reloader.apply(same).await.unwrap();
    let attempts = origin.accepted();
    let r = get(&proxy.url("/k")).await;
    assert!(r.body.contains("every origin server is down"), "{}", r.body);
    assert_eq!(origin.accepted(), attempts);
    // Other settings (a health check added): the server starts up.
    origin.set(Mode::Serve);
    let checked =
        "fail_timeout = \"30s\"\nhealth_check = { path = \"/healthz\", interval = \"50ms\" }";
    reloader.apply(reload(checked)).await.unwrap();
    assert_eq!(upstream_status(&proxy).await["health"][0]["state"], "up");
    assert_eq!(get(&proxy.url("/k")).await.status, StatusCode::OK);
    wait_until(Duration::from_secs(10), "no health checks", async || {
        origin.checks() >= 2
    })
    .await;
    // The check removed: the previous generation's checks stop.
    reloader.apply(reload(passive)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let checks = origin.checks();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(origin.checks(), checks, "old checks still running");
}

/// A server's own settings (the table form of a `servers` entry) override
/// the upstream's: here `max_fails = 0` keeps a failing server in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_table_overrides_the_upstream_settings() {
    let origin = Flaky::start(Mode::Close).await;
    let builder = Proxy::with_upstream(origin.addr).no_zone();
    let text = builder.toml().replace(
        &format!("servers = [\"{}\"]", origin.addr),
        &format!(
            "servers = [{{ address = \"{}\", max_fails = 0 }}]",
            origin.addr
        ),
    );
    let config = calmcache::Config::from_toml(&text, "<test>").unwrap();
    assert_eq!(config.upstreams[0].servers[0].health.max_fails, 0, "{text}");
    let running = calmcache::start(&config).await.unwrap();
    let url = format!("http://{}/t", running.proxy_addrs[0]);
    for _ in 0..3 {
        let r = get(&url).await;
        assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.body);
        assert!(r.body.contains("broken response"), "{}", r.body);
    }
    // Each request tried (twice: closed before the head), none refused.
    assert_eq!(origin.accepted(), 6);
    running.shutdown(Duration::from_secs(1)).await;
}

/// Bad values of the new keys are reported with their TOML path, exit 2.
#[test]
fn bad_health_settings_are_clear_errors() {
    let text = r#"
[server]
listen = ["127.0.0.1:0"]
[upstreams.app]
servers = ["127.0.0.1:8081"]
max_fails = -1
fail_timeout = "abc"
health_check = { interval = "0s" }
[[routes]]
upstream = "app"
"#;
    let err = calmcache::Config::from_toml(text, "test.toml")
        .unwrap_err()
        .to_string();
    for needle in [
        "upstreams.app.max_fails",
        "upstreams.app.fail_timeout",
        "\"abc\" is not a duration",
        "upstreams.app.health_check.path",
        "upstreams.app.health_check.interval",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}
