//! The `/status` model: one snapshot of the running proxy (totals, per
//! route, zone and upstream, latency histograms) that `GET /status` sends as
//! JSON and `GET /metrics` renders for Prometheus.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use calmcache_core::{AnswerClass, Figure, TierDetail, Zone};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::net::upstream::Upstream;
use crate::proxy::state::{AnsweringRoute, Proxy, Route};
use crate::telemetry::metrics::{HistogramSnapshot, Metrics, BOUNDS};
use crate::telemetry::stats::ActivitySnapshot;
use crate::telemetry::upstream_conns::{reuse_percent, Closed, Dropped, Opened, ServerConns};

/// The `/status` document.
#[derive(Serialize, Debug)]
pub(crate) struct Status {
    /// calmcache's version.
    pub version: &'static str,
    /// Seconds since start.
    pub uptime_seconds: f64,
    /// Client connections (proxy listeners).
    pub connections: Connections,
    /// WebSocket tunnels.
    pub websockets: Websockets,
    /// Sum over all routes.
    pub totals: ActivitySnapshot,
    /// Answers by class, disjoint: they sum to `totals.requests` (give or
    /// take requests in progress).
    pub cache_status: BTreeMap<&'static str, u64>,
    /// Time to the response head, by class and by upstream.
    pub latency: Latency,
    /// Per upstream.
    pub upstreams: BTreeMap<String, UpstreamStatus>,
    /// Purges served.
    pub purges: Purges,
    /// Config reloads.
    pub reloads: Reloads,
    /// Requests refused at the edge (malformed or ambiguous: 400, 417, 501),
    /// counted in no route.
    pub requests_refused: u64,
    /// Bytes of response bodies held in RAM by fills in progress now.
    pub inflight_body_bytes: u64,
    /// `server.max_inflight_body`: past it, new fills stream through uncached.
    pub inflight_body_limit: u64,
    /// Fills that streamed through uncached because the budget was spent.
    pub fills_over_budget: u64,
    /// The access log, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<AccessLogStatus>,
    /// Per route, by name.
    pub routes: BTreeMap<String, RouteStatus>,
    /// Per zone, by name.
    pub zones: BTreeMap<String, ZoneStatus>,
    /// Fetches in flight right now.
    pub fetches_in_flight: usize,
    /// Fleet mode (`[fleet]`), when on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetStatus>,
    /// Per limit (`[limits.*]`), by name; absent when there are none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, LimitStatus>,
}

/// One per-client limit (net/limit/).
#[derive(Serialize, Debug)]
pub(crate) struct LimitStatus {
    /// `rate` or `connections`.
    pub kind: &'static str,
    /// `all` or `origin`: which requests it counts.
    pub applies_to: &'static str,
    /// Requests refused.
    pub rejected: u64,
    /// Requests delayed to the rate (within the burst).
    pub delayed: u64,
    /// Clients tracked now.
    pub clients: u64,
    /// `max_clients`.
    pub max_clients: u64,
}

/// This node's part in the fleet.
#[derive(Serialize, Debug)]
pub(crate) struct FleetStatus {
    /// This node's id (in lease tokens and purge messages).
    pub node: String,
    /// `closed` (Redis in use), `open` (skipped after failures) or
    /// `half_open` (one probe out).
    pub breaker: crate::fleet::BreakerState,
    /// Times the breaker opened.
    pub breaker_opened: u64,
    /// The same by the rule that opened it: `consecutive` (5 failed calls
    /// in a row), `ratio` (half of at least 20 calls in 2 s failed),
    /// `latency` (the sentinel's PINGs over 3/4 of `fleet.timeout` on
    /// average).
    pub breaker_opened_by: crate::fleet::OpenedBy,
    /// Times a probe closed it.
    pub breaker_closed: u64,
    /// The rule that opened it last (`null`: never opened).
    pub breaker_last_reason: Option<crate::fleet::OpenReason>,
    /// The latency rule's average of Redis' round trip (the sentinel's
    /// PINGs) since the breaker last closed, in microseconds.
    pub breaker_latency_us: u64,
    /// How late this node's timers fire (average), in microseconds: how
    /// busy the node is (shown only; the latency rule judges the
    /// sentinel's PINGs).
    pub breaker_lag_us: u64,
    /// Redis calls answered in time, failed, past the deadline, and not
    /// made (breaker open).
    pub calls_ok: u64,
    /// Calls that failed.
    pub calls_failed: u64,
    /// Calls past `fleet.timeout`.
    pub calls_timed_out: u64,
    /// Calls skipped while the breaker was open.
    pub calls_skipped: u64,
    /// Mean latency of the answered calls, in microseconds.
    pub call_mean_us: u64,
    /// Connections (re)built.
    pub reconnects: u64,
    /// Local misses answered from Redis (another node's copy).
    pub shared_hits: u64,
    /// Leases taken (this node fetched for the fleet).
    pub leases_acquired: u64,
    /// Fetches that waited for another node's lease.
    pub leases_held: u64,
    /// Fetches that found a newer copy in Redis instead of fetching (the
    /// same count as `shared_hits`).
    pub leases_newer: u64,
    /// Leases this node holds now (its fetches for the fleet in flight).
    pub leases_active: u64,
    /// Leases lost before storing (expired: renewals failed, another node
    /// took over).
    pub leases_lost: u64,
    /// Leases released once Redis answered again (given up while it was
    /// out of reach).
    pub leases_released_late: u64,
    /// Waits that ended without a copy (fetched alone).
    pub waits_timed_out: u64,
    /// Objects stored in Redis.
    pub commits: u64,
    /// Stores refused (a purge or a later lease came first).
    pub commits_refused: u64,
    /// Objects kept local: over `fleet.max_object_size`.
    pub too_large: u64,
    /// Entries in Redis that failed verification.
    pub bad_entries: u64,
    /// Shared entries and purges are signed: `fleet.secret_file` is set.
    pub signed: bool,
    /// Entries (or Vary markers) in Redis without a valid signature:
    /// refused, fetched from the origin instead.
    pub entries_refused: u64,
    /// Purge messages without a valid signature: not applied.
    pub purges_refused: u64,
    /// Signed purge messages put in the stream long after they were signed
    /// (a replay): not applied.
    pub purges_replayed: u64,
    /// Purges sent to the fleet.
    pub purges_sent: u64,
    /// Purges from other nodes applied here.
    pub purges_applied: u64,
    /// Their mean lag from being sent (Redis' clock) to applied here, ms.
    pub purge_lag_mean_ms: u64,
    /// The longest lag, ms.
    pub purge_lag_max_ms: u64,
    /// Summed lag, ms (for `/metrics`).
    #[serde(skip)]
    pub purge_lag_sum_ms: u64,
    /// Times this node could not know which purges it missed and marked
    /// every local object stale instead.
    pub purge_gaps: u64,
    /// This node's purges waiting for Redis (out of reach when made).
    pub purges_pending: usize,
    /// The fleet-wide origin budget (`fleet_max_inflight`): slots granted,
    /// answered full, failed open (Redis out: the local budget alone),
    /// held now, lost.
    pub origin_slots: crate::fleet::OriginSlots,
    /// Large objects shared as pieces: written, read, bad, over budget.
    pub pieces: crate::fleet::FleetPieces,
    /// Redis calls per operation (acquire, commit, release, renew, purge,
    /// publish, poll, origin_take, origin_renew, origin_release): they sum
    /// to the `calls_*` totals.
    pub ops: BTreeMap<&'static str, crate::fleet::OpSnapshot>,
    /// The objects this node fetched for the fleet lately that the fleet
    /// fetched most: origin fetches summed over every node.
    pub most_fetched: Vec<crate::fleet::ObjectFetches>,
    /// The last failed Redis call (`op: error`), if any: why the breaker
    /// opened (a TLS or password problem shows here).
    pub last_error: Option<String>,
    /// Fleet membership (heartbeats in Redis, fleet/members.rs): this
    /// node's config `fingerprint`, the live `members` (`null`: unknown,
    /// Redis did not answer), `config_drift` (unknown, none, this_node,
    /// others, split) and `config_drift_parts` (where this node differs
    /// from the majority).
    #[serde(flatten)]
    pub membership: crate::fleet::members::Membership,
    /// Redis' own memory and evictions (`INFO`, read every 5 s; a
    /// cluster: summed over its masters, the fullest one's ratio), and a
    /// warning when it has no `maxmemory` or refuses writes when full.
    pub redis: crate::fleet::RedisMemory,
}

/// Client connections.
#[derive(Serialize, Debug)]
pub(crate) struct Connections {
    /// Open now.
    pub active: u64,
    /// Accepted since start.
    pub accepted: u64,
    /// Closed (or, on HTTP/2, one stream reset) because the client took no
    /// bytes for `server.send_timeout`.
    pub send_timeouts: u64,
    /// Body bytes of large cached objects sent without a copy (`splice`,
    /// plain HTTP/1.x only).
    pub spliced_bytes: u64,
    /// PROXY protocol headers on the listeners that expect one, by result
    /// (`v1`, `v2`, `local`, `unknown` served; the others closed).
    pub proxy_protocol: std::collections::BTreeMap<&'static str, u64>,
}

/// WebSocket tunnels (an upgraded connection counts here, no longer in
/// `connections.active`).
#[derive(Serialize, Debug)]
pub(crate) struct Websockets {
    /// Open now.
    pub active: u64,
    /// Opened since start.
    pub total: u64,
}

/// Latency histograms (cumulative bucket counts for the bounds in `le`).
#[derive(Serialize, Debug)]
pub(crate) struct Latency {
    /// Bucket upper bounds in seconds (a last bucket, +Inf, follows).
    pub le: &'static [f64],
    /// Answers, by class.
    pub by_cache_status: BTreeMap<&'static str, HistogramSnapshot>,
    /// Upstream responses (to their head), by upstream.
    pub by_upstream: BTreeMap<String, HistogramSnapshot>,
}

/// One upstream's counters.
#[derive(Serialize, Debug)]
pub(crate) struct UpstreamStatus {
    /// Requests sent.
    pub requests: u64,
    /// Failed or 5xx.
    pub errors: u64,
    /// Its servers.
    pub servers: Vec<String>,
    /// How a server is chosen (`balance`, as configured).
    pub balance: &'static str,
    /// With `balance = "hash"`, the `hash_key` template (else null).
    pub hash_key: Option<String>,
    /// Requests sent to another server because the one round robin chose
    /// was down.
    pub skipped: u64,
    /// Requests refused at once (502, or a stale copy) because every
    /// server was down.
    pub all_down: u64,
    /// Each server's health, in `servers` order.
    pub health: Vec<crate::net::health::ServerStatus>,
    /// The origin budget (`max_inflight`; all 0 without one).
    pub budget: BudgetStatus,
    /// Connections opened to its servers (every reason).
    pub connections_opened: u64,
    /// Requests that found a connection to reuse, in percent:
    /// `100 x (1 - connections_opened / requests)`, the servers' requests
    /// (active health checks included).
    pub reuse_percent: f64,
    /// Each server's connections, in `servers` order.
    pub connections: Vec<ServerConnStatus>,
}

/// One upstream server's connections (`telemetry::upstream_conns`).
#[derive(Serialize, Debug)]
pub(crate) struct ServerConnStatus {
    /// `host:port` or `unix:/path`.
    pub server: String,
    /// Requests sent to it, active health checks included.
    pub requests: u64,
    /// Connections opened, by reason (`pool_empty`, `tunnel`).
    pub opened: BTreeMap<&'static str, u64>,
    /// Pooled connections ended, by side (`origin`, `calmcache`).
    pub closed: BTreeMap<&'static str, u64>,
    /// As the upstream's `reuse_percent`, for this server.
    pub reuse_percent: f64,
    /// Answers dropped before their end, by outcome: `drained` (the
    /// connection kept), `too_large`, `too_slow`, `failed` (closed).
    pub dropped_answers: BTreeMap<&'static str, u64>,
}

/// One upstream's origin budget (`net::budget`).
#[derive(Serialize, Debug, Default)]
pub(crate) struct BudgetStatus {
    /// `max_inflight`: slots per server (0: no limit).
    pub max_inflight: u64,
    /// `fleet_max_inflight`: fleet-wide slots per server (0: off).
    pub fleet_max_inflight: u64,
    /// The budget's whole limit: `max_inflight` times the servers (0: none).
    pub limit: u64,
    /// Slots in use now.
    pub inflight: u64,
    /// Requests waiting for a slot now.
    pub queued: u64,
    /// Requests that waited in the queue.
    pub queued_total: u64,
    /// Seconds spent waiting in the queue, in all.
    pub queue_wait_seconds_total: f64,
    /// Requests answered from a stale copy because the budget was full.
    pub shed_stale: u64,
    /// Requests refused (503) after `queue_timeout` in the queue.
    pub shed_busy: u64,
    /// Background refreshes and warm-ups skipped because it was full.
    pub refresh_skipped: u64,
    /// Fleet-wide slot requests the shared store did not answer (failed open).
    pub shared_unavailable: u64,
}

/// Access log counters.
#[derive(Serialize, Debug)]
pub(crate) struct AccessLogStatus {
    /// Lines lost: the writer's queue was full, or a write failed.
    pub dropped: u64,
}

/// Reload counters.
#[derive(Serialize, Debug)]
pub(crate) struct Reloads {
    /// Reloads applied.
    pub ok: u64,
    /// Reloads refused (the config before them stayed).
    pub failed: u64,
}

/// Purge counters.
#[derive(Serialize, Debug)]
pub(crate) struct Purges {
    /// Purge requests served.
    pub requests: u64,
    /// Objects removed or marked stale.
    pub objects: u64,
}

/// One route's counters.
#[derive(Serialize, Debug)]
pub(crate) struct RouteStatus {
    /// Upstream name; absent for a route that answers itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// How a route without upstream answers: `return` or `files`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers: Option<&'static str>,
    /// The host names the route answers for (`hosts`); absent: every host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Zone name, if caching (the first of `zones`).
    pub zone: Option<String>,
    /// Every zone the route places keys in, when it has several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Refresh policy.
    pub refresh: &'static str,
    /// Counters.
    #[serde(flatten)]
    pub activity: ActivitySnapshot,
}

/// One zone's counters (the sum of its routes) and occupancy.
#[derive(Serialize, Debug)]
pub(crate) struct ZoneStatus {
    /// The tier's kind ([`Tier::kind`](calmcache_core::Tier::kind)): `memory` or `disk`.
    pub kind: &'static str,
    /// Bytes in use.
    pub size_bytes: u64,
    /// Configured bound.
    pub max_size_bytes: u64,
    /// Objects held.
    pub objects: u64,
    /// The tier's own figures ([`Tier::detail`](calmcache_core::Tier::detail)),
    /// in a block of their own: a memory zone's evictions, a disk zone's
    /// evictions, loader progress and disk errors.
    #[serde(flatten)]
    pub detail: DetailBlock,
    /// Counters of the routes using this zone.
    #[serde(flatten)]
    pub activity: ActivitySnapshot,
}

/// A tier's figures as `/status` shows them: `"<block>": {name: value, ..}`
/// in the tier's order, or nothing for a tier without any.
#[derive(Debug)]
pub(crate) struct DetailBlock(pub TierDetail);

impl Serialize for DetailBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if !self.0.block.is_empty() {
            map.serialize_entry(self.0.block, &Figures(&self.0.figures))?;
        }
        map.end()
    }
}

/// The figures of a block, as a JSON object.
struct Figures<'a>(&'a [(&'static str, Figure)]);

impl Serialize for Figures<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, figure) in self.0 {
            match figure {
                Figure::Count(n) => map.serialize_entry(name, n)?,
                Figure::Maybe(n) => map.serialize_entry(name, n)?,
                Figure::Flag(flag) => map.serialize_entry(name, flag)?,
                Figure::Text(text) => map.serialize_entry(name, text)?,
            }
        }
        map.end()
    }
}

/// Builds the status document: zones, then routes (whose counters add up
/// into their zones and the totals), then everything process-wide.
pub(crate) fn status(proxy: &Proxy) -> Status {
    let mut zones: BTreeMap<String, ZoneStatus> = proxy
        .zones
        .iter()
        .map(|z| (z.name.clone(), zone_status(z)))
        .collect();
    let (totals, routes) = routes(proxy, &mut zones);
    add_placed_answers(proxy, &mut zones);
    let latency = latency(proxy);
    let m = &proxy.metrics;
    Status {
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: m.started.elapsed().as_secs_f64(),
        connections: connections(m),
        websockets: Websockets {
            active: m.websockets_active.load(Ordering::Relaxed),
            total: m.websockets_total.get(),
        },
        totals,
        // Each answer is one observation of its class's histogram.
        cache_status: latency
            .by_cache_status
            .iter()
            .map(|(l, h)| (*l, h.count))
            .collect(),
        latency,
        upstreams: proxy
            .upstreams
            .iter()
            .map(|u| (u.name.clone(), upstream_status(u)))
            .collect(),
        purges: Purges {
            requests: m.purge_requests.get(),
            objects: m.purged_objects.get(),
        },
        reloads: Reloads {
            ok: m.reloads_ok.get(),
            failed: m.reloads_failed.get(),
        },
        requests_refused: m.requests_refused.get(),
        inflight_body_bytes: m.inflight.held(),
        inflight_body_limit: m.inflight.limit(),
        fills_over_budget: m.inflight.over_budget.get(),
        access_log: proxy.access_log.get().map(|log| AccessLogStatus {
            dropped: log.dropped(),
        }),
        routes,
        zones,
        fetches_in_flight: proxy.flights.in_flight(),
        fleet: proxy.fleet.as_ref().map(|f| fleet_status(f)),
        limits: proxy
            .limits
            .iter()
            .map(|l| (l.cfg.name.clone(), limit_status(l)))
            .collect(),
    }
}

fn limit_status(l: &crate::net::limit::Limit) -> LimitStatus {
    use crate::config::limits::LimitKind;
    LimitStatus {
        kind: match l.cfg.kind {
            LimitKind::Rate(_) => "rate",
            LimitKind::Connections(_) => "connections",
        },
        applies_to: l.cfg.applies_to.as_str(),
        rejected: l.stats.rejected.get(),
        delayed: l.stats.delayed.get(),
        clients: l.clients() as u64,
        max_clients: l.cfg.max_clients as u64,
    }
}

/// A zone's occupancy and its tier's own details; its counters are added
/// by its routes.
fn zone_status(z: &Zone) -> ZoneStatus {
    ZoneStatus {
        kind: z.tier.kind(),
        size_bytes: z.tier.size_bytes(),
        max_size_bytes: z.tier.max_size(),
        objects: z.tier.objects(),
        detail: DetailBlock(z.tier.detail()),
        activity: ActivitySnapshot::default(),
    }
}

/// Every route's status, and their counters summed. A route's counters
/// belong to its zone; a route spread over several zones counts its
/// answers by class in the zone each key was placed in
/// ([`add_placed_answers`]).
fn routes(
    proxy: &Proxy,
    zones: &mut BTreeMap<String, ZoneStatus>,
) -> (ActivitySnapshot, BTreeMap<String, RouteStatus>) {
    let mut totals = ActivitySnapshot::default();
    let mut routes = BTreeMap::new();
    for route in &proxy.routes {
        let rs = route_status(route);
        totals += &rs.activity;
        if let Some(zone) = rs
            .zone
            .as_ref()
            .filter(|_| rs.zones.is_empty())
            .and_then(|z| zones.get_mut(z))
        {
            zone.activity += &rs.activity;
        }
        routes.insert(route.cfg.name.clone(), rs);
    }
    for route in &proxy.answering {
        let rs = answering_status(route);
        totals += &rs.activity;
        routes.insert(route.cfg.name.clone(), rs);
    }
    (totals, routes)
}

fn route_status(route: &Route) -> RouteStatus {
    let single = route.zones.len() <= 1;
    RouteStatus {
        upstream: Some(route.upstream.name.clone()),
        answers: None,
        hosts: route
            .cfg
            .matching
            .hosts
            .iter()
            .map(ToString::to_string)
            .collect(),
        zone: route.zone.as_ref().map(|z| z.name.clone()),
        zones: if single {
            Vec::new()
        } else {
            route.zones.iter().map(|(z, _)| z.name.clone()).collect()
        },
        refresh: route.policy.mode.as_str(),
        activity: route.activity.snapshot(),
    }
}

/// A route that answers itself: no upstream, no zone.
fn answering_status(route: &AnsweringRoute) -> RouteStatus {
    RouteStatus {
        upstream: None,
        answers: route.cfg.kind.answers(),
        hosts: route
            .cfg
            .matching
            .hosts
            .iter()
            .map(ToString::to_string)
            .collect(),
        zone: None,
        zones: Vec::new(),
        refresh: "none",
        activity: route.activity.snapshot(),
    }
}

/// Adds to each zone the answers placed in it by routes over several zones.
fn add_placed_answers(proxy: &Proxy, zones: &mut BTreeMap<String, ZoneStatus>) {
    for (zone, placed) in proxy.zones.iter().zip(&proxy.zone_activity) {
        if let Some(status) = zones.get_mut(&zone.name) {
            status.activity += &placed.snapshot();
        }
    }
}

fn latency(proxy: &Proxy) -> Latency {
    let m = &proxy.metrics;
    let classes = AnswerClass::ALL.iter().map(|c| (c.as_str(), c.index()));
    Latency {
        le: &BOUNDS,
        by_cache_status: classes.map(|(l, i)| (l, m.latency[i].snapshot())).collect(),
        by_upstream: proxy
            .upstreams
            .iter()
            .map(|u| (u.name.clone(), u.stats.latency.snapshot()))
            .collect(),
    }
}

fn connections(m: &Metrics) -> Connections {
    Connections {
        active: m.connections_active.load(Ordering::Relaxed),
        accepted: m.connections_accepted.get(),
        send_timeouts: m.send_timeouts.get(),
        spliced_bytes: m.spliced_bytes.get(),
        proxy_protocol: crate::telemetry::metrics::ProxyHeader::ALL
            .iter()
            .map(|r| (r.as_str(), m.proxy_protocol[*r as usize].get()))
            .collect(),
    }
}

fn upstream_status(u: &Upstream) -> UpstreamStatus {
    let connections: Vec<ServerConnStatus> =
        u.server_conns().map(|(s, c)| conn_status(s, c)).collect();
    let opened = u.server_conns().map(|(_, c)| c.opened_total()).sum();
    // The servers' requests: health checks included, as their connections are.
    let sent = u.server_conns().map(|(_, c)| c.requests.get()).sum();
    UpstreamStatus {
        requests: u.stats.requests.get(),
        errors: u.stats.errors.get(),
        servers: u.servers(),
        balance: u.balance().0,
        hash_key: u.balance().1.map(str::to_owned),
        skipped: u.stats.skipped.get(),
        all_down: u.stats.all_down.get(),
        health: u.server_status(),
        budget: budget_status(u),
        connections_opened: opened,
        reuse_percent: reuse_percent(opened, sent),
        connections,
    }
}

fn conn_status(server: &str, c: &ServerConns) -> ServerConnStatus {
    let opened = Opened::ALL
        .iter()
        .map(|r| (r.as_str(), c.opened[*r as usize].get()));
    let closed = Closed::ALL
        .iter()
        .map(|b| (b.as_str(), c.closed[*b as usize].get()));
    let dropped = Dropped::ALL
        .iter()
        .map(|d| (d.as_str(), c.dropped[*d as usize].get()));
    ServerConnStatus {
        server: server.to_owned(),
        requests: c.requests.get(),
        opened: opened.collect(),
        closed: closed.collect(),
        reuse_percent: reuse_percent(c.opened_total(), c.requests.get()),
        dropped_answers: dropped.collect(),
    }
}

fn budget_status(u: &Upstream) -> BudgetStatus {
    let b = &u.stats.budget;
    let max_inflight = u.max_inflight() as u64;
    BudgetStatus {
        max_inflight,
        fleet_max_inflight: u64::from(u.fleet_max_inflight()),
        limit: max_inflight.saturating_mul(u.server_count() as u64),
        inflight: b.inflight.get(),
        queued: b.queued.get(),
        queued_total: b.queued_total.get(),
        queue_wait_seconds_total: b.queue_wait_micros.get() as f64 / 1e6,
        shed_stale: b.shed_stale.get(),
        shed_busy: b.shed_busy.get(),
        refresh_skipped: b.refresh_skipped.get(),
        shared_unavailable: b.shared_unavailable.get(),
    }
}

fn fleet_status(fleet: &crate::fleet::Fleet) -> FleetStatus {
    let [calls_ok, calls_failed, calls_timed_out, calls_skipped, call_mean_us, reconnects] =
        fleet.calls();
    let s = &fleet.stats;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let b = fleet.breaker_stats();
    FleetStatus {
        node: fleet.node().to_owned(),
        breaker: fleet.breaker(),
        breaker_opened: b.opened_by.total(),
        breaker_opened_by: b.opened_by,
        breaker_closed: b.closed,
        breaker_last_reason: b.last_reason,
        breaker_latency_us: b.latency_us,
        breaker_lag_us: b.lag_us,
        calls_ok,
        calls_failed,
        calls_timed_out,
        calls_skipped,
        call_mean_us,
        reconnects,
        shared_hits: n(&s.shared_hits),
        leases_acquired: n(&s.leases_acquired),
        leases_held: n(&s.leases_held),
        leases_newer: n(&s.shared_hits),
        leases_active: n(&s.leases_active),
        leases_lost: n(&s.leases_lost),
        leases_released_late: n(&s.leases_released_late),
        waits_timed_out: n(&s.waits_timed_out),
        commits: n(&s.commits),
        commits_refused: n(&s.commits_refused),
        too_large: n(&s.too_large),
        bad_entries: n(&s.bad_entries),
        signed: fleet.signed(),
        entries_refused: n(&s.entries_refused),
        purges_refused: n(&s.purges_refused),
        purges_replayed: n(&s.purges_replayed),
        purges_sent: n(&s.purges_sent),
        purges_applied: n(&s.purges_applied),
        purge_lag_mean_ms: n(&s.purge_lag_ms_sum)
            .checked_div(n(&s.purges_applied))
            .unwrap_or(0),
        purge_lag_max_ms: n(&s.purge_lag_ms_max),
        purge_lag_sum_ms: n(&s.purge_lag_ms_sum),
        purge_gaps: n(&s.purge_gaps),
        purges_pending: fleet.purges_pending(),
        origin_slots: s.origin_slots(),
        pieces: s.pieces(),
        ops: fleet.ops(),
        most_fetched: fleet.most_fetched(),
        last_error: fleet.last_error(),
        membership: fleet.membership(),
        redis: fleet.redis_memory(),
    }
}
