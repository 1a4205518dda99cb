//! The metric families of `/metrics`, one row each: name, type, help and
//! where the samples come from (a field of [`Status`], or of its
//! [`FleetStatus`]). The tables are in output order; [`super::render`]
//! walks them. Only reads the status model; writes no text itself.

use super::{counter, gauge, histograms, Family, Kind, Row, Samples};
use crate::net::health::{ServerState, ServerStatus};
use crate::ops::status::{
    FleetStatus, LimitStatus, ServerConnStatus, Status, UpstreamStatus, ZoneStatus,
};
use Samples::{Histograms, IfAny, One, Rows, Summary};

/// One label's rows: `(label, value)` for each `(name, value)` of `items`.
fn labelled<'a>(
    label: &'static str,
    items: impl IntoIterator<Item = (&'a str, u64)>,
) -> Vec<Row<'a>> {
    items
        .into_iter()
        .map(|(value, n)| (vec![(label, value)], n as f64))
        .collect()
}

fn per_upstream(s: &Status, value: fn(&UpstreamStatus) -> u64) -> Vec<Row<'_>> {
    labelled(
        "upstream",
        s.upstreams
            .iter()
            .map(|(name, u)| (name.as_str(), value(u))),
    )
}

/// One figure of an upstream's status.
type Figure = fn(&UpstreamStatus) -> u64;

/// `calmcache_upstream_shed_total`: per upstream and reason.
fn shed_rows(s: &Status) -> Vec<Row<'_>> {
    let reasons: [(&'static str, Figure); 3] = [
        ("stale", |u| u.budget.shed_stale),
        ("busy", |u| u.budget.shed_busy),
        ("refresh", |u| u.budget.refresh_skipped),
    ];
    let all = s.upstreams.iter();
    all.flat_map(|(name, u)| {
        reasons.iter().map(move |(reason, value)| {
            let labels = vec![("upstream", name.as_str()), ("reason", *reason)];
            (labels, value(u) as f64)
        })
    })
    .collect()
}

/// Per server of every upstream; a server without the value (checks when
/// none are configured) has no sample.
fn per_server(s: &Status, value: fn(&ServerStatus) -> Option<u64>) -> Vec<Row<'_>> {
    let servers = s.upstreams.iter().flat_map(|(upstream, u)| {
        u.health
            .iter()
            .map(move |server| (upstream.as_str(), server))
    });
    servers
        .filter_map(|(upstream, server)| {
            let labels = vec![("upstream", upstream), ("server", server.server.as_str())];
            value(server).map(|v| (labels, v as f64))
        })
        .collect()
}

/// One figure of a server's connections, with the extra label it carries
/// (`reason`, `by`; none for the requests).
type ConnFigure = (Option<(&'static str, &'static str)>, u64);

/// Per server of every upstream, one row per figure that `split` gives of
/// its connections.
fn per_server_conns<'a>(
    s: &'a Status,
    split: fn(&ServerConnStatus) -> Vec<ConnFigure>,
) -> Vec<Row<'a>> {
    let servers = s.upstreams.iter().flat_map(|(upstream, u)| {
        u.connections
            .iter()
            .map(move |server| (upstream.as_str(), server))
    });
    servers
        .flat_map(|(upstream, server)| {
            split(server).into_iter().map(move |(extra, n)| {
                let mut labels = vec![("upstream", upstream), ("server", server.server.as_str())];
                labels.extend(extra);
                (labels, n as f64)
            })
        })
        .collect()
}

/// A server's figures by one label (`reason` of the opened, `by` of the
/// closed).
fn by_label(
    label: &'static str,
    counts: &std::collections::BTreeMap<&'static str, u64>,
) -> Vec<ConnFigure> {
    counts
        .iter()
        .map(|(k, n)| (Some((label, *k)), *n))
        .collect()
}

/// Per zone; a zone without the value has no sample.
fn per_zone(s: &Status, value: fn(&ZoneStatus) -> Option<u64>) -> Vec<Row<'_>> {
    let zones = s.zones.iter();
    zones
        .filter_map(|(zone, z)| value(z).map(|v| (vec![("zone", zone.as_str())], v as f64)))
        .collect()
}

/// Per zone, labelled with the zone's kind too (the occupancy gauges).
fn per_zone_and_kind(s: &Status, value: fn(&ZoneStatus) -> u64) -> Vec<Row<'_>> {
    let zones = s.zones.iter();
    zones
        .map(|(zone, z)| {
            (
                vec![("zone", zone.as_str()), ("kind", z.kind)],
                value(z) as f64,
            )
        })
        .collect()
}

/// Per zone whose tier reports the figure `name` (a disk zone's loader
/// progress, its disk errors...): that figure.
fn per_figure<'a>(s: &'a Status, name: &str) -> Vec<Row<'a>> {
    let zones = s.zones.iter();
    zones
        .filter_map(|(zone, z)| {
            let value = z.detail.0.get(name)?.as_f64()?;
            Some((vec![("zone", zone.as_str())], value))
        })
        .collect()
}

/// Every kind of zone may evict: the count is among its tier's figures.
fn zone_evictions(z: &ZoneStatus) -> Option<u64> {
    z.detail.0.count("evictions")
}

/// The process: build, connections, answers by class. Then come the
/// per-route families ([`route_counters`]).
pub(super) static TOTALS: &[Family<Status>] = &[
    gauge("calmcache_info", "Build information.", Rows(|s| labelled("version", [(s.version, 1)]))),
    gauge("calmcache_uptime_seconds", "Seconds since start.", One(|s| s.uptime_seconds)),
    gauge(
        "calmcache_connections_active",
        "Client connections open now.",
        One(|s| s.connections.active as f64),
    ),
    counter(
        "calmcache_connections_accepted_total",
        "Client connections accepted.",
        One(|s| s.connections.accepted as f64),
    ),
    counter(
        "calmcache_send_timeouts_total",
        "Client connections closed, and HTTP/2 streams reset, after send_timeout without progress.",
        One(|s| s.connections.send_timeouts as f64),
    ),
    counter(
        "calmcache_spliced_bytes_total",
        "Body bytes of large cached objects sent to clients without a copy (splice; plain HTTP/1.x).",
        One(|s| s.connections.spliced_bytes as f64),
    ),
    counter(
        "calmcache_proxy_protocol_total",
        "Connections to listeners that expect the PROXY protocol, by result: served (v1, v2, local, unknown) or closed.",
        Rows(|s| labelled("result", s.connections.proxy_protocol.iter().map(|(k, v)| (*k, *v)))),
    ),
    gauge(
        "calmcache_websockets_active",
        "WebSocket tunnels open now.",
        One(|s| s.websockets.active as f64),
    ),
    counter(
        "calmcache_websockets_total",
        "WebSocket tunnels opened.",
        One(|s| s.websockets.total as f64),
    ),
    gauge(
        "calmcache_fetches_in_flight",
        "Origin fetches in flight.",
        One(|s| s.fetches_in_flight as f64),
    ),
    counter(
        "calmcache_requests_total",
        "Answers by cache status class (hit, miss, stale, revalidated, bypass).",
        Rows(|s| labelled("cache_status", s.cache_status.iter().map(|(c, n)| (*c, *n)))),
    ),
    histograms(
        "calmcache_request_duration_seconds",
        "Time to the response head, by cache status class.",
        Histograms("cache_status", |s| {
            let all = s.latency.by_cache_status.iter();
            all.map(|(c, h)| (*c, h)).collect()
        }),
    ),
];

/// Upstreams and their servers, zones and disks, then the rest of the
/// process (access log, purges, reloads, the in-flight budget).
pub(super) static PARTS: &[Family<Status>] = &[
    counter(
        "calmcache_upstream_requests_total",
        "Requests sent to the upstream.",
        Rows(|s| per_upstream(s, |u| u.requests)),
    ),
    counter(
        "calmcache_upstream_errors_total",
        "Upstream requests that failed or answered 5xx.",
        Rows(|s| per_upstream(s, |u| u.errors)),
    ),
    counter(
        "calmcache_upstream_skipped_total",
        "Requests sent to another server because the one chosen was down.",
        Rows(|s| per_upstream(s, |u| u.skipped)),
    ),
    counter(
        "calmcache_upstream_all_down_total",
        "Requests refused at once (502 or a stale copy): every server was down.",
        Rows(|s| per_upstream(s, |u| u.all_down)),
    ),
    gauge(
        "calmcache_upstream_inflight",
        "Origin slots in use now (max_inflight budget; 0 without one).",
        Rows(|s| per_upstream(s, |u| u.budget.inflight)),
    ),
    gauge(
        "calmcache_upstream_inflight_limit",
        "The origin budget: max_inflight per server times the servers (0: no limit).",
        Rows(|s| per_upstream(s, |u| u.budget.limit)),
    ),
    gauge(
        "calmcache_upstream_queue_length",
        "Requests waiting for an origin slot now.",
        Rows(|s| per_upstream(s, |u| u.budget.queued)),
    ),
    counter(
        "calmcache_upstream_queued_total",
        "Requests that waited for an origin slot.",
        Rows(|s| per_upstream(s, |u| u.budget.queued_total)),
    ),
    counter(
        "calmcache_upstream_queue_wait_seconds_total",
        "Seconds requests spent waiting for an origin slot.",
        Rows(|s| {
            let all = s.upstreams.iter();
            all.map(|(name, u)| {
                let wait = u.budget.queue_wait_seconds_total;
                (vec![("upstream", name.as_str())], wait)
            })
            .collect()
        }),
    ),
    counter(
        "calmcache_upstream_shed_total",
        "Requests the origin budget shed: answered stale, refused 503 (busy), or background refreshes skipped.",
        Rows(shed_rows),
    ),
    gauge(
        "calmcache_upstream_server_up",
        "1 while requests go to the server, 0 while it is down or on trial.",
        Rows(|s| per_server(s, |v| Some(u64::from(v.state == ServerState::Up)))),
    ),
    counter(
        "calmcache_upstream_server_fails_total",
        "Failures charged to the server (connect errors; timeouts and broken heads when several paths fail while it answers nothing).",
        Rows(|s| per_server(s, |v| Some(v.fails_total))),
    ),
    counter(
        "calmcache_upstream_server_url_fails_total",
        "Timeouts and broken heads blamed on their URL, not charged to the server.",
        Rows(|s| per_server(s, |v| Some(v.url_fails_total))),
    ),
    counter(
        "calmcache_upstream_server_checks_total",
        "Active health checks sent to the server.",
        Rows(|s| per_server(s, |v| v.checks)),
    ),
    counter(
        "calmcache_upstream_server_checks_failed_total",
        "Active health checks the server failed.",
        Rows(|s| per_server(s, |v| v.checks_failed)),
    ),
    counter(
        "calmcache_upstream_server_requests_total",
        "Requests sent to the server (each try of a retried request), active health checks included.",
        Rows(|s| per_server_conns(s, |c| vec![(None, c.requests)])),
    ),
    counter(
        "calmcache_upstream_server_connections_opened_total",
        "Connections opened to the server: the pool had none idle (pool_empty), or a WebSocket handshake (tunnel).",
        Rows(|s| per_server_conns(s, |c| by_label("reason", &c.opened))),
    ),
    counter(
        "calmcache_upstream_server_connections_closed_total",
        "Pooled connections to the server that ended, closed by the origin or by calmcache.",
        Rows(|s| per_server_conns(s, |c| by_label("by", &c.closed))),
    ),
    counter(
        "calmcache_upstream_server_dropped_answers_total",
        "Answers from the server dropped before their end: drained (the connection kept) or closed as too_large, too_slow or failed.",
        Rows(|s| per_server_conns(s, |c| by_label("outcome", &c.dropped_answers))),
    ),
    histograms(
        "calmcache_upstream_response_seconds",
        "Time from sending a request upstream to its response head.",
        Histograms("upstream", |s| {
            let all = s.latency.by_upstream.iter();
            all.map(|(u, h)| (u.as_str(), h)).collect()
        }),
    ),
    gauge(
        "calmcache_zone_size_bytes",
        "Bytes a zone holds.",
        Rows(|s| per_zone_and_kind(s, |z| z.size_bytes)),
    ),
    gauge(
        "calmcache_zone_max_size_bytes",
        "A zone's max_size.",
        Rows(|s| per_zone_and_kind(s, |z| z.max_size_bytes)),
    ),
    gauge(
        "calmcache_zone_objects",
        "Objects a zone holds.",
        Rows(|s| per_zone_and_kind(s, |z| z.objects)),
    ),
    // The answers each zone gave (a route over several zones: those placed
    // in it), as /status counts them.
    counter(
        "calmcache_zone_requests_total",
        "Answers from a zone's routes.",
        Rows(|s| per_zone(s, |z| Some(z.activity.requests))),
    ),
    counter(
        "calmcache_zone_hits_total",
        "Answered fresh from the zone.",
        Rows(|s| per_zone(s, |z| Some(z.activity.hits))),
    ),
    counter(
        "calmcache_zone_misses_total",
        "Answers the origin gave (revalidated ones too).",
        Rows(|s| per_zone(s, |z| Some(z.activity.misses))),
    ),
    counter(
        "calmcache_zone_stale_served_total",
        "Stale copies served from the zone.",
        Rows(|s| per_zone(s, |z| Some(z.activity.stale_served))),
    ),
    counter(
        "calmcache_zone_revalidated_total",
        "Copies revalidated with the origin.",
        Rows(|s| per_zone(s, |z| Some(z.activity.revalidated))),
    ),
    counter(
        "calmcache_zone_bypass_total",
        "Answers passed through uncached.",
        Rows(|s| per_zone(s, |z| Some(z.activity.bypass))),
    ),
    counter(
        "calmcache_zone_evictions_total",
        "Objects evicted for max_size (any zone) or min_free (disk).",
        Rows(|s| per_zone(s, zone_evictions)),
    ),
    counter(
        "calmcache_zone_evictions_nospace_total",
        "Objects evicted because the file system filled before max_size.",
        Rows(|s| per_figure(s, "evictions_nospace")),
    ),
    counter(
        "calmcache_zone_write_failures_nospace_total",
        "Disk writes that failed for lack of space (ENOSPC, EDQUOT).",
        Rows(|s| per_figure(s, "write_failures_nospace")),
    ),
    gauge(
        "calmcache_zone_effective_max_size_bytes",
        "The size a disk zone is kept under: max_size, or less while its file system holds less.",
        Rows(|s| per_figure(s, "effective_max_size_bytes")),
    ),
    counter(
        "calmcache_zone_leftover_temp_files_total",
        "Temp files of earlier starts (crash leftovers) removed by the loader.",
        Rows(|s| per_figure(s, "leftover_temp_files")),
    ),
    counter(
        "calmcache_zone_leftover_temp_bytes_total",
        "Bytes of temp files of earlier starts removed by the loader.",
        Rows(|s| per_figure(s, "leftover_temp_bytes")),
    ),
    counter(
        "calmcache_zone_inactive_removed_total",
        "Objects removed after inactive.",
        Rows(|s| per_figure(s, "inactive_removed")),
    ),
    counter(
        "calmcache_zone_not_admitted_total",
        "Answers a disk zone did not store by admission: a new URL's first miss once 90% full.",
        Rows(|s| per_figure(s, "not_admitted")),
    ),
    counter(
        "calmcache_zone_disk_errors_total",
        "Disk I/O errors (each served from the origin).",
        Rows(|s| per_figure(s, "errors")),
    ),
    counter(
        "calmcache_zone_broken_files_total",
        "Torn, corrupt or foreign files removed.",
        Rows(|s| per_figure(s, "broken_files")),
    ),
    gauge(
        "calmcache_zone_loaded_objects",
        "Files indexed by the loader so far.",
        Rows(|s| per_figure(s, "loaded")),
    ),
    gauge(
        "calmcache_zone_loader_done",
        "1 once the loader has scanned the zone.",
        Rows(|s| per_figure(s, "loader_done")),
    ),
    counter(
        "calmcache_access_log_dropped_total",
        "Access log lines lost (queue full or write failed).",
        IfAny(|s| s.access_log.as_ref().map(|log| log.dropped as f64)),
    ),
    counter(
        "calmcache_purges_total",
        "Purge requests served.",
        One(|s| s.purges.requests as f64),
    ),
    counter(
        "calmcache_purged_objects_total",
        "Objects removed or marked stale by purges.",
        One(|s| s.purges.objects as f64),
    ),
    counter(
        "calmcache_reloads_total",
        "Config reloads, applied (ok) or refused (failed).",
        Rows(|s| labelled("result", [("ok", s.reloads.ok), ("failed", s.reloads.failed)])),
    ),
    counter(
        "calmcache_requests_refused_total",
        "Requests refused at the edge as malformed or ambiguous (400, 417, 501).",
        One(|s| s.requests_refused as f64),
    ),
    gauge(
        "calmcache_inflight_body_bytes",
        "Bytes of response bodies held in RAM by fills in progress.",
        One(|s| s.inflight_body_bytes as f64),
    ),
    gauge(
        "calmcache_inflight_body_limit_bytes",
        "server.max_inflight_body: past it, new fills stream through uncached.",
        One(|s| s.inflight_body_limit as f64),
    ),
    counter(
        "calmcache_fills_over_budget_total",
        "Fills that streamed through uncached because max_inflight_body was spent.",
        One(|s| s.fills_over_budget as f64),
    ),
    counter(
        "calmcache_limit_rejected_total",
        "Requests refused by a per-client limit ([limits.*]), never sent to the origin.",
        Rows(|s| per_limit(s, |l| l.rejected)),
    ),
    counter(
        "calmcache_limit_delayed_total",
        "Requests within a rate limit's burst delayed to its rate.",
        Rows(|s| per_limit(s, |l| l.delayed)),
    ),
    gauge(
        "calmcache_limit_clients",
        "Clients a per-client limit tracks now (at most its max_clients).",
        Rows(|s| per_limit(s, |l| l.clients)),
    ),
];

/// Per limit, by name.
fn per_limit(s: &Status, value: fn(&LimitStatus) -> u64) -> Vec<Row<'_>> {
    labelled(
        "limit",
        s.limits.iter().map(|(n, l)| (n.as_str(), value(l))),
    )
}

/// Fleet mode: the breaker, Redis calls, leases, commits, purges, the
/// fleet secret (fleet/sign.rs) and the objects fetched most.
pub(super) static FLEET: &[Family<FleetStatus>] = &[
    gauge(
        "calmcache_fleet_info",
        "Fleet mode is on; node is this node's id in lease tokens and purge messages.",
        Rows(|f| labelled("node", [(f.node.as_str(), 1)])),
    ),
    gauge(
        "calmcache_fleet_breaker_state",
        "1 for the Redis circuit breaker's current state (closed: Redis in use; open: skipped after failures; half_open: one probe out).",
        Rows(|f| {
            let all = crate::fleet::BreakerState::ALL.into_iter();
            labelled("state", all.map(|b| (b.as_str(), u64::from(b == f.breaker))))
        }),
    ),
    counter(
        "calmcache_fleet_breaker_opened_total",
        "Times the Redis circuit breaker opened, by the rule that opened it (consecutive: 5 failed calls in a row; ratio: half of at least 20 calls in 2 s failed; latency: Redis' round trip, as the sentinel's PINGs on their own thread measure it, over 3/4 of fleet.timeout on average).",
        Rows(|f| {
            let all = crate::fleet::OpenReason::ALL.into_iter();
            labelled("reason", all.map(|r| (r.as_str(), f.breaker_opened_by.by(r))))
        }),
    ),
    gauge(
        "calmcache_fleet_breaker_latency_seconds",
        "The breaker's latency rule: Redis' round trip as the sentinel's PINGs (every 100 ms, on their own thread and connection) measure it, on average (EWMA) since the breaker last closed.",
        One(|f| f.breaker_latency_us as f64 / 1e6),
    ),
    gauge(
        "calmcache_fleet_timer_lag_seconds",
        "How late this node's timers fire on average: how busy the node is (shown only; the breaker's latency rule judges the sentinel's PINGs, not the node's calls).",
        One(|f| f.breaker_lag_us as f64 / 1e6),
    ),
    counter(
        "calmcache_fleet_redis_calls_total",
        "Redis calls by operation and result (ok, failed, timed_out: past fleet.timeout, skipped: breaker open).",
        Rows(redis_calls),
    ),
    counter(
        "calmcache_fleet_redis_call_seconds_total",
        "Summed latency of the Redis calls answered in time, by operation (divided by their ok calls: the mean).",
        Rows(|f| {
            let ops = f.ops.iter();
            let rows = ops.map(|(op, c)| (vec![("op", *op)], c.total_us as f64 / 1e6));
            rows.collect()
        }),
    ),
    counter(
        "calmcache_fleet_commits_total",
        "Objects offered to Redis after a fill: stored, or refused (a purge or a later lease came first).",
        Rows(|f| labelled("result", [("stored", f.commits), ("refused", f.commits_refused)])),
    ),
    counter(
        "calmcache_fleet_breaker_closed_total",
        "Times a probe closed the Redis circuit breaker (Redis in use again).",
        One(|f| f.breaker_closed as f64),
    ),
    counter(
        "calmcache_fleet_reconnects_total",
        "Connections to Redis (re)built.",
        One(|f| f.reconnects as f64),
    ),
    counter(
        "calmcache_fleet_shared_hits_total",
        "Local misses answered from Redis (another node's copy).",
        One(|f| f.shared_hits as f64),
    ),
    counter(
        "calmcache_fleet_leases_acquired_total",
        "Leases taken: this node fetched from the origin for the fleet.",
        One(|f| f.leases_acquired as f64),
    ),
    counter(
        "calmcache_fleet_leases_held_total",
        "Fetches that found another node's lease and waited for its copy.",
        One(|f| f.leases_held as f64),
    ),
    counter(
        "calmcache_fleet_leases_newer_total",
        "Fetches that found a newer copy in Redis and took it instead (as shared_hits).",
        One(|f| f.leases_newer as f64),
    ),
    counter(
        "calmcache_fleet_leases_lost_total",
        "Leases lost before storing: expired (renewals failed) and taken by another node.",
        One(|f| f.leases_lost as f64),
    ),
    counter(
        "calmcache_fleet_leases_released_late_total",
        "Leases released once Redis answered again (given up while it was out of reach).",
        One(|f| f.leases_released_late as f64),
    ),
    counter(
        "calmcache_fleet_purge_gaps_total",
        "Times this node could not know which purges it missed and marked every local object stale.",
        One(|f| f.purge_gaps as f64),
    ),
    counter(
        "calmcache_fleet_waits_timed_out_total",
        "Waits for another node's copy that ended without one (fetched alone).",
        One(|f| f.waits_timed_out as f64),
    ),
    counter(
        "calmcache_fleet_objects_too_large_total",
        "Objects kept local: larger than fleet.max_object_size.",
        One(|f| f.too_large as f64),
    ),
    counter(
        "calmcache_fleet_bad_entries_total",
        "Entries read from Redis that failed verification (served as misses).",
        One(|f| f.bad_entries as f64),
    ),
    counter(
        "calmcache_fleet_purges_sent_total",
        "Purges this node sent to the fleet.",
        One(|f| f.purges_sent as f64),
    ),
    counter(
        "calmcache_fleet_purges_applied_total",
        "Purges from other nodes applied here.",
        One(|f| f.purges_applied as f64),
    ),
    gauge(
        "calmcache_fleet_purges_pending",
        "This node's purges waiting for Redis (out of reach when made).",
        One(|f| f.purges_pending as f64),
    ),
    gauge(
        "calmcache_fleet_leases_active",
        "Leases this node holds now: its fetches for the fleet in flight.",
        One(|f| f.leases_active as f64),
    ),
    gauge(
        "calmcache_fleet_signed",
        "1 when shared entries and purges are signed (fleet.secret_file set), else 0.",
        One(|f| f64::from(u8::from(f.signed))),
    ),
    counter(
        "calmcache_fleet_entries_refused_total",
        "Entries in Redis without a valid signature (fleet secret set): refused, fetched instead.",
        One(|f| f.entries_refused as f64),
    ),
    counter(
        "calmcache_fleet_purges_refused_total",
        "Purge messages without a valid signature (fleet secret set): not applied.",
        One(|f| f.purges_refused as f64),
    ),
    counter(
        "calmcache_fleet_purges_replayed_total",
        "Signed purge messages put in the stream long after they were signed: not applied.",
        One(|f| f.purges_replayed as f64),
    ),
    Family {
        name: "calmcache_fleet_purge_lag_seconds",
        kind: Kind::Summary,
        help: "Lag of other nodes' purges from being sent (Redis' clock) to applied here.",
        samples: Summary(
            |f| f.purge_lag_sum_ms as f64 / 1e3,
            |f| f.purges_applied as f64,
        ),
    },
    gauge(
        "calmcache_fleet_purge_lag_max_seconds",
        "The longest lag of a purge from another node, sent to applied here.",
        One(|f| f.purge_lag_max_ms as f64 / 1e3),
    ),
    counter(
        "calmcache_fleet_origin_slots_total",
        "Fleet-wide origin slot requests (fleet_max_inflight) by result (granted; full: every slot taken; failed_open: Redis out, the local budget alone).",
        Rows(|f| {
            let o = &f.origin_slots;
            let results = [("granted", o.granted), ("full", o.full), ("failed_open", o.failed_open)];
            labelled("result", results)
        }),
    ),
    counter(
        "calmcache_fleet_pieces_total",
        "Pieces of large objects (over 256 KiB) by what happened (written, read: verified; bad: a copy not used, a piece missing or wrong; over_budget: an object not written or read, fleet.max_pieces_in_flight full; streamed: read and verified while another node still wrote the body; forgotten: deleted, their fill did not commit).",
        Rows(|f| {
            let p = &f.pieces;
            let results = [
                ("written", p.written),
                ("read", p.read),
                ("bad", p.bad),
                ("over_budget", p.over_budget),
                ("streamed", p.streamed),
                ("forgotten", p.forgotten),
            ];
            labelled("result", results)
        }),
    ),
    counter(
        "calmcache_fleet_streams_total",
        "Large bodies this node streamed from another node while that node still fetched them (begun), and those cut before whole (cut: the writer died, stalled or did not commit, or a piece did not verify; the clients saw a cut response).",
        Rows(|f| {
            let p = &f.pieces;
            labelled("result", [("begun", p.streams), ("cut", p.streams_cut)])
        }),
    ),
    gauge(
        "calmcache_fleet_origin_slots_held",
        "Fleet-wide origin slots this node holds now (its requests in flight under fleet_max_inflight).",
        One(|f| f.origin_slots.held as f64),
    ),
    counter(
        "calmcache_fleet_origin_slots_lost_total",
        "Fleet-wide origin slots lost while held: the lease expired (renewals failed).",
        One(|f| f.origin_slots.lost as f64),
    ),
    gauge(
        "calmcache_fleet_members",
        "Live members of the fleet (heartbeats in Redis, this node included); absent while unknown (Redis does not answer).",
        Rows(|f| {
            let members = f.membership.members.as_ref();
            members.map_or_else(Vec::new, |m| vec![(Vec::new(), m.len() as f64)])
        }),
    ),
    counter(
        "calmcache_fleet_members_refused_total",
        "Heartbeat records refused (fleet secret set): unsigned, forged or replayed; never members, never in the majority. Each read counts.",
        One(|f| f.membership.members_refused as f64),
    ),
    gauge(
        "calmcache_fleet_config_drift",
        "1 when this node's config fingerprint differs from the fleet's majority (or no fingerprint has a majority): it computes other keys or stores differently and does not share; else 0.",
        One(|f| f64::from(u8::from(f.membership.config_drift.this_node_drifts()))),
    ),
    gauge(
        "calmcache_fleet_object_fetches",
        "Origin fetches with the fleet's lease of the objects this node fetched most lately, summed over every node (the object's fencing counter).",
        Rows(|f| {
            let objects = f.most_fetched.iter();
            labelled("key", objects.map(|o| (o.key.as_str(), o.fleet)))
        }),
    ),
];

/// One unlabelled sample when the value is known, none when not (the
/// family's head is written either way: it is exported, with no value).
fn known(value: Option<f64>) -> Vec<Row<'static>> {
    value.map(|v| (Vec::new(), v)).into_iter().collect()
}

/// Redis' own memory (fleet/redis_info.rs: `INFO`, read every 5 s; a
/// cluster summed over its masters): no sample until a read answered.
pub(super) static FLEET_REDIS: &[Family<crate::fleet::RedisMemory>] = &[
    gauge(
        "calmcache_fleet_redis_used_memory_bytes",
        "Bytes the fleet's Redis holds (INFO used_memory; a cluster: summed over its masters).",
        Rows(|r| known(r.used_memory.map(|v| v as f64))),
    ),
    gauge(
        "calmcache_fleet_redis_maxmemory_bytes",
        "The fleet's Redis memory limit (INFO maxmemory, summed); 0: none, it grows until its host runs out.",
        Rows(|r| known(r.maxmemory.map(|v| v as f64))),
    ),
    gauge(
        "calmcache_fleet_redis_memory_used_ratio",
        "used_memory / maxmemory of the fullest Redis node (no sample without a limit).",
        Rows(|r| known(r.used_ratio)),
    ),
    counter(
        "calmcache_fleet_redis_evicted_keys_total",
        "Keys the fleet's Redis evicted since it started (INFO evicted_keys, summed): shared entries dropped before their time.",
        Rows(|r| known(r.evicted_keys.map(|v| v as f64))),
    ),
    gauge(
        "calmcache_fleet_redis_maxmemory_policy",
        "1 for the fleet's Redis maxmemory_policy (mixed: a cluster's masters differ); noeviction refuses leases and stores when full.",
        Rows(|r| labelled("policy", r.maxmemory_policy.as_deref().map(|p| (p, 1)))),
    ),
    gauge(
        "calmcache_fleet_redis_info_age_seconds",
        "Seconds since this node last read its Redis' INFO (every 5 s while Redis answers).",
        Rows(|r| known(r.read_ms_ago.map(|ms| ms as f64 / 1e3))),
    ),
];

/// Redis calls per operation and result.
fn redis_calls(f: &FleetStatus) -> Vec<Row<'_>> {
    let mut rows = Vec::new();
    for (op, c) in &f.ops {
        let results = [
            ("ok", c.ok),
            ("failed", c.failed),
            ("timed_out", c.timed_out),
            ("skipped", c.skipped),
        ];
        for (result, n) in results {
            rows.push((vec![("op", *op), ("result", result)], n as f64));
        }
    }
    rows
}
