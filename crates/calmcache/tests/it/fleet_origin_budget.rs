//! The fleet-wide origin budget end to end (issue 27): three nodes with
//! `max_inflight = 4` each and `fleet_max_inflight = 4` in front of one
//! origin that counts its peak concurrency; a flood of distinct keys over
//! every wire never has more than 4 requests at the origin at once, and with
//! Redis gone the nodes fail open to their own budgets (at most 3 x 4).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use calmcache_testkit::redis::Redis;
use calmcache_testkit::{Proxy, Wires};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::fleet_harness::{fleet_status, wait_connected, CLOSED_WITHIN, HOST};

/// How long the origin thinks over each request.
const THINK: Duration = Duration::from_millis(100);
/// Distinct paths each node is asked for at once, per wire.
const PER_NODE: usize = 8;

/// An HTTP/1.1 origin (keep-alive) that answers every GET after
/// [`THINK`] and counts the requests it works on at once.
struct CountingOrigin {
    addr: SocketAddr,
    now: Arc<AtomicU64>,
    peak: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingOrigin {
    async fn start() -> CountingOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (now, peak, served) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let counters = (now.clone(), peak.clone(), served.clone());
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, counters.clone()));
            }
        });
        CountingOrigin {
            addr,
            now,
            peak,
            served,
            task,
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    /// Starts a new measurement of the peak.
    fn reset(&self) {
        self.peak
            .store(self.now.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

impl Drop for CountingOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Counters = (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU64>);

/// One connection: request heads (GET, no body) answered in turn.
async fn serve(mut conn: TcpStream, (now, peak, served): Counters) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        buf.drain(..end + 4);
        let working = now.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(working, Ordering::SeqCst);
        tokio::time::sleep(THINK).await;
        now.fetch_sub(1, Ordering::SeqCst);
        let n = served.fetch_add(1, Ordering::SeqCst);
        let body = format!("page {n}");
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncache-control: max-age=60\r\n\r\n",
            body.len()
        );
        if conn.write_all(head.as_bytes()).await.is_err()
            || conn.write_all(body.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

async fn three_nodes(origin: &CountingOrigin, redis: &Redis) -> Vec<Arc<Wires>> {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let proxy = Proxy::with_upstream(origin.addr)
            .admin("listen = \"127.0.0.1:0\"\ntoken = \"fleet-budget-token\"")
            .upstream("max_inflight = 4\nfleet_max_inflight = 4\nqueue_timeout = \"30s\"")
            .route("ttl = { 200 = \"60s\" }")
            .fleet(&redis.url(), "timeout = \"500ms\"");
        nodes.push(Arc::new(Wires::start(proxy, "").await));
    }
    nodes
}

/// Every node asked for [`PER_NODE`] distinct paths at once over `wire`:
/// every answer a 200 from the origin.
async fn flood(nodes: &[Arc<Wires>], wire: usize, tag: &str) {
    let mut asking = tokio::task::JoinSet::new();
    for (n, node) in nodes.iter().enumerate() {
        for i in 0..PER_NODE {
            let node = node.clone();
            let path = format!("/{tag}/{wire}/{n}/{i}");
            asking.spawn(async move {
                let w = &node.all[wire];
                let reply = node.send(w, Method::GET, HOST, &path, &[], "").await;
                (w.label(), path, reply.status, reply.body)
            });
        }
    }
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(done) = asking.join_next().await {
            let (label, path, status, body) = done.unwrap();
            assert_eq!(status, 200, "{label} {path}: {body}");
            assert!(body.starts_with("page "), "{label} {path}: {body}");
        }
    });
    all.await.expect("the flood answered within 60 s");
}

async fn origin_slots(nodes: &[Arc<Wires>], field: &str) -> u64 {
    let mut sum = 0;
    for node in nodes {
        sum += fleet_status(node).await["origin_slots"][field]
            .as_u64()
            .unwrap_or(0);
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_never_send_the_origin_more_than_the_fleet_budget() {
    let redis = Redis::start();
    let origin = CountingOrigin::start().await;
    let nodes = three_nodes(&origin, &redis).await;
    wait_connected(&nodes, CLOSED_WITHIN, "origin budget").await;
    for wire in 0..3 {
        origin.reset();
        flood(&nodes, wire, "flood").await;
        let peak = origin.peak();
        assert!(peak <= 4, "wire {wire}: the origin saw {peak} at once");
    }
    let asked = (3 * 3 * PER_NODE) as u64;
    assert_eq!(origin.served.load(Ordering::SeqCst), asked);
    assert_eq!(origin_slots(&nodes, "granted").await, asked);
    assert_eq!(origin_slots(&nodes, "failed_open").await, 0);
    assert!(
        origin_slots(&nodes, "full").await > 0,
        "the budget was full"
    );
    // A cached answer asks nobody: no slot, no origin request.
    let again = nodes[0]
        .send(&nodes[0].all[0], Method::GET, HOST, "/flood/0/0/0", &[], "")
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(origin_slots(&nodes, "granted").await, asked);
    assert_eq!(origin.served.load(Ordering::SeqCst), asked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_each_node_keeps_its_own_budget() {
    let mut redis = Redis::start();
    let origin = CountingOrigin::start().await;
    let nodes = three_nodes(&origin, &redis).await;
    wait_connected(&nodes, CLOSED_WITHIN, "origin budget").await;
    redis.kill9();
    for wire in 0..3 {
        origin.reset();
        flood(&nodes, wire, "alone").await;
        let peak = origin.peak();
        assert!(peak <= 12, "wire {wire}: the origin saw {peak} at once");
    }
    assert_eq!(origin_slots(&nodes, "granted").await, 0);
    let asked = (3 * 3 * PER_NODE) as u64;
    assert_eq!(origin_slots(&nodes, "failed_open").await, asked);
}
