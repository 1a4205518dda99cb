//! Latency histograms, connection gauges and what one answered request
//! learned on its way (its cache status class, the upstream call it made),
//! for `/status`, `GET /metrics` and the access log.
//!
//! Histograms are fixed arrays of relaxed atomics (no lock, no allocation
//! per observation). The class of an answer ([`AnswerClass`], decided by
//! `CacheStatus::class` in the engine) comes back with the answer itself
//! (`proxy::answer::Answer`) to the request's top-level handler, which
//! times the whole answer; the upstream call a request made is noted in a
//! task-local slot ([`note_call`]), since a spawned fetch makes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use calmcache_core::AnswerClass;
use serde::Serialize;

use crate::telemetry::counter::Counter;

/// Upper bounds of the latency buckets, in seconds (then +Inf).
pub(crate) const BOUNDS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Non-cumulative counts, one per bound and one for +Inf.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BOUNDS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Cumulative counts, as Prometheus and `/status` show them.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running
            })
            .collect();
        HistogramSnapshot {
            count: running,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
            buckets,
        }
    }
}

/// A histogram at one instant.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HistogramSnapshot {
    /// Observations.
    pub count: u64,
    /// Sum of the observations, in seconds.
    pub sum_seconds: f64,
    /// Cumulative counts per bound of [`BOUNDS`], then +Inf (= count).
    pub buckets: Vec<u64>,
}

/// Process-wide gauges and histograms (per-route counters live in
/// `stats::Activity`, per-upstream ones in [`UpstreamStats`]).
#[derive(Debug)]
pub struct Metrics {
    /// When the proxy started.
    pub started: Instant,
    /// Client connections open now.
    pub connections_active: AtomicU64,
    /// Client connections accepted since start.
    pub connections_accepted: Counter,
    /// `server.max_connections` slots, taken before each accept.
    pub connection_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Time to the response head of every answer, by [`AnswerClass`]; their
    /// counts are the answers per class (disjoint).
    pub latency: [Histogram; AnswerClass::ALL.len()],
    /// Purge requests served (admin and `PURGE`).
    pub purge_requests: Counter,
    /// Objects removed or marked stale by purges.
    pub purged_objects: Counter,
    /// WebSocket tunnels open now (from the upstream's 101 to the close).
    pub websockets_active: AtomicU64,
    /// WebSocket tunnels opened since start.
    pub websockets_total: Counter,
    /// Reloads applied (SIGHUP, `POST /reload`).
    pub reloads_ok: Counter,
    /// Reloads refused (invalid config, a port taken); the config before stays.
    pub reloads_failed: Counter,
    /// Requests the edge refused (400, 417, 501) before routing.
    pub requests_refused: Counter,
    /// Response bodies held in RAM by fills in progress (`max_inflight_body`).
    pub inflight: Arc<crate::telemetry::inflight::Inflight>,
    /// Client connections closed, and HTTP/2 streams reset, because the
    /// client took no bytes for `server.send_timeout`.
    pub send_timeouts: Counter,
    /// Body bytes sent to clients by `splice` from a paged body, without a
    /// copy (`crate::net::zero_copy`).
    pub spliced_bytes: Counter,
    /// PROXY protocol headers on the listeners that expect one, by
    /// [`ProxyHeader`] (`calmcache_proxy_protocol_total`).
    pub proxy_protocol: [Counter; ProxyHeader::ALL.len()],
}

/// What became of a connection to a listener that expects the PROXY
/// protocol (`net/proxy_protocol.rs`): served with the header's client, or
/// closed and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// A v1 (text) header with a TCP4/TCP6 source: served as that client.
    V1,
    /// A v2 (binary) PROXY header with an IPv4/IPv6 source: served as that client.
    V2,
    /// A v2 LOCAL header (the balancer's own health check): served as the
    /// TCP peer.
    Local,
    /// A header without a usable source (v1 `UNKNOWN`, v2 `UNSPEC` or
    /// `AF_UNIX`): served as the TCP peer, as NGINX does.
    Unknown,
    /// From a source outside `proxy_protocol_from`: closed unread.
    Untrusted,
    /// The first bytes are no PROXY header (plain HTTP, a ClientHello): closed.
    Missing,
    /// A header that does not parse: closed.
    Malformed,
    /// A v1 line past 107 bytes or a v2 header past its limit: closed.
    TooLong,
    /// Not whole within `header_read_timeout`: closed.
    Timeout,
    /// The client closed (or the socket failed) before the header was whole.
    Closed,
}

impl ProxyHeader {
    /// Every result, in the order of their counters.
    pub const ALL: [ProxyHeader; 10] = [
        ProxyHeader::V1,
        ProxyHeader::V2,
        ProxyHeader::Local,
        ProxyHeader::Unknown,
        ProxyHeader::Untrusted,
        ProxyHeader::Missing,
        ProxyHeader::Malformed,
        ProxyHeader::TooLong,
        ProxyHeader::Timeout,
        ProxyHeader::Closed,
    ];

    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyHeader::V1 => "v1",
            ProxyHeader::V2 => "v2",
            ProxyHeader::Local => "local",
            ProxyHeader::Unknown => "unknown",
            ProxyHeader::Untrusted => "untrusted",
            ProxyHeader::Missing => "missing",
            ProxyHeader::Malformed => "malformed",
            ProxyHeader::TooLong => "too_long",
            ProxyHeader::Timeout => "timeout",
            ProxyHeader::Closed => "closed",
        }
    }

    /// A connection with this result is served.
    pub fn serves(self) -> bool {
        matches!(
            self,
            ProxyHeader::V1 | ProxyHeader::V2 | ProxyHeader::Local | ProxyHeader::Unknown
        )
    }
}

impl Metrics {
    /// Counts one PROXY protocol header's fate.
    pub fn proxy_header(&self, result: ProxyHeader) {
        self.proxy_protocol[result as usize].inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            connections_active: AtomicU64::new(0),
            connections_accepted: Counter::default(),
            connection_slots: None,
            latency: Default::default(),
            purge_requests: Counter::default(),
            purged_objects: Counter::default(),
            websockets_active: AtomicU64::new(0),
            websockets_total: Counter::default(),
            reloads_ok: Counter::default(),
            reloads_failed: Counter::default(),
            requests_refused: Counter::default(),
            inflight: Arc::new(crate::telemetry::inflight::Inflight::new(
                crate::config::DEFAULT_MAX_INFLIGHT_BODY,
            )),
            send_timeouts: Counter::default(),
            spliced_bytes: Counter::default(),
            proxy_protocol: Default::default(),
        }
    }
}

impl Metrics {
    /// Counts one answer of class `class` that took `elapsed`.
    pub fn answered(&self, class: AnswerClass, elapsed: Duration) {
        self.latency[class.index()].observe(elapsed);
    }

    /// Metrics whose connections are bounded by `max_connections`.
    pub fn with_max_connections(max_connections: usize) -> Metrics {
        Metrics {
            connection_slots: Some(Arc::new(tokio::sync::Semaphore::new(max_connections))),
            ..Metrics::default()
        }
    }

    /// A connection opened (holding `slot`, if connections are bounded);
    /// the guard closes it in the gauge and frees the slot when dropped.
    pub fn connection(
        self: &Arc<Self>,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> ConnectionGuard {
        self.connections_accepted.inc();
        self.connections_active.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard {
            metrics: self.clone(),
            _slot: slot,
        }
    }
}

/// Decrements the active connections (and frees the connection's slot)
/// when the connection ends.
pub struct ConnectionGuard {
    metrics: Arc<Metrics>,
    /// Released when the guard drops.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl ConnectionGuard {
    /// The metrics this connection is counted in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics
            .connections_active
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    /// A WebSocket tunnel opened; the guard closes it in the gauge when dropped.
    pub fn tunnel(self: &Arc<Self>) -> TunnelGuard {
        self.websockets_total.inc();
        self.websockets_active.fetch_add(1, Ordering::Relaxed);
        TunnelGuard(self.clone())
    }
}

/// Decrements the active WebSocket tunnels when the tunnel ends.
pub struct TunnelGuard(Arc<Metrics>);

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        self.0.websockets_active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Requests, errors and latency (to the response head) of one upstream.
#[derive(Debug, Default)]
pub struct UpstreamStats {
    /// Requests sent.
    pub requests: Counter,
    /// Requests that failed (refused, timed out, broken) or answered 5xx.
    pub errors: Counter,
    /// Time from sending to the response head.
    pub latency: Histogram,
    /// Requests sent to another server because the one round robin chose
    /// was down.
    pub skipped: Counter,
    /// Requests refused at once because every server was down.
    pub all_down: Counter,
    /// The origin budget's figures (`max_inflight`; all 0 without one).
    pub budget: BudgetStats,
}

/// The origin budget of one upstream (`net::budget`): its slots in use, its
/// queue and what it shed. Kept across reloads with the rest of
/// [`UpstreamStats`]; only counted while `max_inflight` is set.
#[derive(Debug, Default)]
pub struct BudgetStats {
    /// Origin slots in use now (every server of the upstream).
    pub inflight: Gauge,
    /// Requests waiting for a slot now.
    pub queued: Gauge,
    /// Requests that waited in the queue (whatever came of it).
    pub queued_total: Counter,
    /// Time spent waiting in the queue, in microseconds.
    pub queue_wait_micros: Counter,
    /// Requests answered from a stale copy because the budget was full.
    pub shed_stale: Counter,
    /// Requests refused (503) after `queue_timeout` in the queue.
    pub shed_busy: Counter,
    /// Background refreshes and warm-ups skipped because the budget was full.
    pub refresh_skipped: Counter,
    /// Fleet-wide slot requests the shared store did not answer (failed open).
    pub shared_unavailable: Counter,
}

/// A level that goes up and down (relaxed atomics).
#[derive(Debug, Default)]
pub struct Gauge(std::sync::atomic::AtomicI64);

impl Gauge {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one away.
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// Current value (never below 0).
    pub fn get(&self) -> u64 {
        u64::try_from(self.0.load(Ordering::Relaxed)).unwrap_or(0)
    }
}

/// One call to an upstream server, for the access log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamCall {
    /// The server as `/status` shows it (`host:port`, `unix:/path`): its
    /// label, shared, not copied.
    pub addr: Option<Arc<str>>,
    /// Time to its response head (or its failure).
    pub elapsed: Duration,
    /// Time the request waited for an origin slot (`max_inflight`) first.
    pub waited: Duration,
    /// Whether the answer came over a new connection or a reused one
    /// (`None`: no answer).
    pub connection: Option<crate::telemetry::upstream_conns::ConnUse>,
}

/// What an answered request learned, attached to the response as an
/// extension when the access log is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Served {
    /// The class of the answer (`None`: nothing noted, e.g. a client gone).
    pub class: Option<AnswerClass>,
    /// The last upstream call made for it, if any.
    pub upstream: Option<UpstreamCall>,
}

/// Where a request's upstream call is noted (only with an access log).
pub(crate) type CallSlot = Arc<Mutex<Option<UpstreamCall>>>;

tokio::task_local! {
    /// Where the request's upstream call is noted (with an access log).
    static CALL: Option<CallSlot>;
}

/// The current request's call slot, to hand to a fill it spawns.
pub(crate) fn call_slot() -> Option<CallSlot> {
    CALL.try_with(Clone::clone).ok().flatten()
}

/// Runs `fut` (one request's answer, or a fetch it spawned) noting its
/// upstream calls in `slot`.
///
/// A flat future over `fut` (one task-local scope around it and nothing
/// else), not an `async fn`: each async layer would hold its own copy of
/// the request's future, and moving those (several KiB each) cost a fifth
/// of the CPU of HTTP/2 hits in perf.
pub(crate) fn with_call_slot<F: std::future::Future>(
    slot: Option<CallSlot>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Option<CallSlot>, F> {
    CALL.scope(slot, fut)
}

/// Notes an upstream call for the access log (no-op, `call` not made,
/// unless one is on).
pub(crate) fn note_call(call: impl FnOnce() -> UpstreamCall) {
    let _ = CALL.try_with(|slot| {
        if let Some(slot) = slot {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(call());
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50)); // <= 0.0001
        h.observe(Duration::from_micros(100)); // == 0.0001
        h.observe(Duration::from_millis(3)); // <= 0.005
        h.observe(Duration::from_secs(60)); // +Inf
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets.len(), BOUNDS.len() + 1);
        assert_eq!(s.buckets[0], 2);
        assert_eq!(s.buckets[4], 2, "0.0025: not yet the 3 ms one");
        assert_eq!(s.buckets[5], 3);
        assert_eq!(s.buckets[15], 3);
        assert_eq!(s.buckets[16], 4);
        assert!((s.sum_seconds - 60.00315).abs() < 1e-9);
    }

    #[tokio::test]
    async fn a_call_noted_in_a_spawned_fetch_reaches_the_request() {
        let slot: CallSlot = Arc::default();
        with_call_slot(Some(slot.clone()), async {
            let handed = call_slot();
            tokio::spawn(with_call_slot(handed, async {
                note_call(|| UpstreamCall {
                    addr: None,
                    elapsed: Duration::from_millis(7),
                    waited: Duration::ZERO,
                    connection: None,
                });
            }))
            .await
            .unwrap();
        })
        .await;
        assert_eq!(
            slot.lock().unwrap().clone().unwrap().elapsed,
            Duration::from_millis(7)
        );
    }
}
