//! `GET /metrics`: the `/status` document in the Prometheus text exposition
//! format (version 0.0.4), every name prefixed `calmcache_`.

use std::fmt::Write;

use crate::ops::status::Status;
use crate::telemetry::metrics::{HistogramSnapshot, BOUNDS};

/// Renders `status` as Prometheus text.
pub(crate) fn render(status: &Status) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let o = &mut out;
    family(o, "calmcache_info", "gauge", "Build information.");
    sample(o, "calmcache_info", &[("version", status.version)], 1.0);
    gauge(
        o,
        "calmcache_uptime_seconds",
        "Seconds since start.",
        status.uptime_seconds,
    );
    gauge(
        o,
        "calmcache_connections_active",
        "Client connections open now.",
        status.connections.active as f64,
    );
    family(
        o,
        "calmcache_connections_accepted_total",
        "counter",
        "Client connections accepted.",
    );
    sample(
        o,
        "calmcache_connections_accepted_total",
        &[],
        status.connections.accepted as f64,
    );
    family(
        o,
        "calmcache_send_timeouts_total",
        "counter",
        "Client connections closed, and HTTP/2 streams reset, after send_timeout without progress.",
    );
    sample(
        o,
        "calmcache_send_timeouts_total",
        &[],
        status.connections.send_timeouts as f64,
    );
    family(
        o,
        "calmcache_spliced_bytes_total",
        "counter",
        "Body bytes of large cached objects sent to clients without a copy (splice; plain HTTP/1.x).",
    );
    sample(
        o,
        "calmcache_spliced_bytes_total",
        &[],
        status.connections.spliced_bytes as f64,
    );
    gauge(
        o,
        "calmcache_websockets_active",
        "WebSocket tunnels open now.",
        status.websockets.active as f64,
    );
    family(
        o,
        "calmcache_websockets_total",
        "counter",
        "WebSocket tunnels opened.",
    );
    sample(
        o,
        "calmcache_websockets_total",
        &[],
        status.websockets.total as f64,
    );
    gauge(
        o,
        "calmcache_fetches_in_flight",
        "Origin fetches in flight.",
        status.fetches_in_flight as f64,
    );

    family(
        o,
        "calmcache_requests_total",
        "counter",
        "Answers by cache status class (hit, miss, stale, revalidated, bypass).",
    );
    for (class, n) in &status.cache_status {
        sample(
            o,
            "calmcache_requests_total",
            &[("cache_status", class)],
            *n as f64,
        );
    }
    family(
        o,
        "calmcache_request_duration_seconds",
        "histogram",
        "Time to the response head, by cache status class.",
    );
    for (class, h) in &status.latency.by_cache_status {
        histogram(
            o,
            "calmcache_request_duration_seconds",
            ("cache_status", class),
            h,
        );
    }

    // Per route: every counter of the route's activity.
    let routes: Vec<(&String, serde_json::Value)> = status
        .routes
        .iter()
        .map(|(name, r)| (name, serde_json::to_value(&r.activity).unwrap_or_default()))
        .collect();
    if let Some((_, first)) = routes.first() {
        for field in first.as_object().into_iter().flat_map(|m| m.keys()) {
            let name = format!("calmcache_route_{field}_total");
            family(
                o,
                &name,
                "counter",
                &format!("Per route: {}.", field.replace('_', " ")),
            );
            for (route, values) in &routes {
                let v = values
                    .get(field)
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0);
                sample(o, &name, &[("route", route)], v as f64);
            }
        }
    }

    family(
        o,
        "calmcache_upstream_requests_total",
        "counter",
        "Requests sent to the upstream.",
    );
    for (name, u) in &status.upstreams {
        sample(
            o,
            "calmcache_upstream_requests_total",
            &[("upstream", name)],
            u.requests as f64,
        );
    }
    family(
        o,
        "calmcache_upstream_errors_total",
        "counter",
        "Upstream requests that failed or answered 5xx.",
    );
    for (name, u) in &status.upstreams {
        sample(
            o,
            "calmcache_upstream_errors_total",
            &[("upstream", name)],
            u.errors as f64,
        );
    }
    upstream_health(o, status);
    family(
        o,
        "calmcache_upstream_response_seconds",
        "histogram",
        "Time from sending a request upstream to its response head.",
    );
    for (name, h) in &status.latency.by_upstream {
        histogram(
            o,
            "calmcache_upstream_response_seconds",
            ("upstream", name),
            h,
        );
    }

    type ZoneValue = fn(&crate::ops::status::ZoneStatus) -> f64;
    let zone_gauges: [(&str, &str, ZoneValue); 3] = [
        ("calmcache_zone_size_bytes", "Bytes a zone holds.", |z| {
            z.size_bytes as f64
        }),
        ("calmcache_zone_max_size_bytes", "A zone's max_size.", |z| {
            z.max_size_bytes as f64
        }),
        ("calmcache_zone_objects", "Objects a zone holds.", |z| {
            z.objects as f64
        }),
    ];
    for (name, help, value) in zone_gauges {
        family(o, name, "gauge", help);
        for (zone, z) in &status.zones {
            sample(o, name, &[("zone", zone), ("kind", z.kind)], value(z));
        }
    }
    // The answers each zone gave (a route over several zones: those placed
    // in it), as /status counts them.
    let zone_answers: [(&str, &str); 6] = [
        ("requests", "Answers from a zone's routes."),
        ("hits", "Answered fresh from the zone."),
        ("misses", "Answers the origin gave (revalidated ones too)."),
        ("stale_served", "Stale copies served from the zone."),
        ("revalidated", "Copies revalidated with the origin."),
        ("bypass", "Answers passed through uncached."),
    ];
    let zones: Vec<(&String, serde_json::Value)> = status
        .zones
        .iter()
        .map(|(name, z)| (name, serde_json::to_value(&z.activity).unwrap_or_default()))
        .collect();
    for (field, help) in zone_answers {
        let name = format!("calmcache_zone_{field}_total");
        family(o, &name, "counter", help);
        for (zone, values) in &zones {
            let v = values.get(field).and_then(serde_json::Value::as_u64);
            sample(o, &name, &[("zone", zone)], v.unwrap_or(0) as f64);
        }
    }
    // Every kind of zone evicts: the count is in its tier's own figures,
    // as are those only some tiers report (a zone without one has no sample).
    let detail: [(&str, &str, &str, &str); 11] = [
        (
            "calmcache_zone_evictions_total",
            "counter",
            "Objects evicted for max_size (any zone) or min_free (disk).",
            "evictions",
        ),
        (
            "calmcache_zone_evictions_nospace_total",
            "counter",
            "Objects evicted because the file system filled before max_size.",
            "evictions_nospace",
        ),
        (
            "calmcache_zone_write_failures_nospace_total",
            "counter",
            "Disk writes that failed for lack of space (ENOSPC, EDQUOT).",
            "write_failures_nospace",
        ),
        (
            "calmcache_zone_effective_max_size_bytes",
            "gauge",
            "The size a disk zone is kept under: max_size, or less while its file system holds less.",
            "effective_max_size_bytes",
        ),
        (
            "calmcache_zone_leftover_temp_files_total",
            "counter",
            "Temp files of earlier starts (crash leftovers) removed by the loader.",
            "leftover_temp_files",
        ),
        (
            "calmcache_zone_leftover_temp_bytes_total",
            "counter",
            "Bytes of temp files of earlier starts removed by the loader.",
            "leftover_temp_bytes",
        ),
        (
            "calmcache_zone_inactive_removed_total",
            "counter",
            "Objects removed after inactive.",
            "inactive_removed",
        ),
        (
            "calmcache_zone_disk_errors_total",
            "counter",
            "Disk I/O errors (each served from the origin).",
            "errors",
        ),
        (
            "calmcache_zone_broken_files_total",
            "counter",
            "Torn, corrupt or foreign files removed.",
            "broken_files",
        ),
        (
            "calmcache_zone_loaded_objects",
            "gauge",
            "Files indexed by the loader so far.",
            "loaded",
        ),
        (
            "calmcache_zone_loader_done",
            "gauge",
            "1 once the loader has scanned the zone.",
            "loader_done",
        ),
    ];
    for (name, kind, help, figure) in detail {
        family(o, name, kind, help);
        for (zone, z) in &status.zones {
            if let Some(v) = z.detail.0.get(figure).and_then(|f| f.as_f64()) {
                sample(o, name, &[("zone", zone)], v);
            }
        }
    }

    if let Some(log) = &status.access_log {
        family(
            o,
            "calmcache_access_log_dropped_total",
            "counter",
            "Access log lines lost (queue full or write failed).",
        );
        sample(
            o,
            "calmcache_access_log_dropped_total",
            &[],
            log.dropped as f64,
        );
    }
    family(
        o,
        "calmcache_purges_total",
        "counter",
        "Purge requests served.",
    );
    sample(
        o,
        "calmcache_purges_total",
        &[],
        status.purges.requests as f64,
    );
    family(
        o,
        "calmcache_purged_objects_total",
        "counter",
        "Objects removed or marked stale by purges.",
    );
    sample(
        o,
        "calmcache_purged_objects_total",
        &[],
        status.purges.objects as f64,
    );
    family(
        o,
        "calmcache_reloads_total",
        "counter",
        "Config reloads, applied (ok) or refused (failed).",
    );
    for (result, n) in [("ok", status.reloads.ok), ("failed", status.reloads.failed)] {
        sample(
            o,
            "calmcache_reloads_total",
            &[("result", result)],
            n as f64,
        );
    }
    family(
        o,
        "calmcache_requests_refused_total",
        "counter",
        "Requests refused at the edge as malformed or ambiguous (400, 417, 501).",
    );
    sample(
        o,
        "calmcache_requests_refused_total",
        &[],
        status.requests_refused as f64,
    );
    gauge(
        o,
        "calmcache_inflight_body_bytes",
        "Bytes of response bodies held in RAM by fills in progress.",
        status.inflight_body_bytes as f64,
    );
    gauge(
        o,
        "calmcache_inflight_body_limit_bytes",
        "server.max_inflight_body: past it, new fills stream through uncached.",
        status.inflight_body_limit as f64,
    );
    family(
        o,
        "calmcache_fills_over_budget_total",
        "counter",
        "Fills that streamed through uncached because max_inflight_body was spent.",
    );
    sample(
        o,
        "calmcache_fills_over_budget_total",
        &[],
        status.fills_over_budget as f64,
    );
    if let Some(f) = &status.fleet {
        fleet(o, f);
    }
    out
}

/// Fleet mode (only with `[fleet]`): the breaker, Redis calls per
/// operation, leases, commits and purges.
fn fleet(o: &mut String, f: &crate::ops::status::FleetStatus) {
    family(
        o,
        "calmcache_fleet_info",
        "gauge",
        "Fleet mode is on; node is this node's id in lease tokens and purge messages.",
    );
    sample(o, "calmcache_fleet_info", &[("node", &f.node)], 1.0);
    family(
        o,
        "calmcache_fleet_breaker_state",
        "gauge",
        "1 for the Redis circuit breaker's current state (closed: Redis in use; open: skipped after failures; half_open: one probe out).",
    );
    for state in crate::fleet::BreakerState::ALL {
        let now = f64::from(u8::from(state == f.breaker));
        sample(
            o,
            "calmcache_fleet_breaker_state",
            &[("state", state.as_str())],
            now,
        );
    }
    family(
        o,
        "calmcache_fleet_breaker_opened_total",
        "counter",
        "Times the Redis circuit breaker opened, by the rule that opened it (consecutive: 5 failed calls in a row; ratio: half of at least 20 calls in 2 s failed; latency: calls cost over 3/4 of fleet.timeout on average).",
    );
    for reason in crate::fleet::OpenReason::ALL {
        sample(
            o,
            "calmcache_fleet_breaker_opened_total",
            &[("reason", reason.as_str())],
            f.breaker_opened_by.by(reason) as f64,
        );
    }
    gauge(
        o,
        "calmcache_fleet_breaker_latency_seconds",
        "The breaker's latency rule: what a Redis call costs on average (EWMA) since the breaker last closed.",
        f.breaker_latency_us as f64 / 1e6,
    );
    gauge(
        o,
        "calmcache_fleet_timer_lag_seconds",
        "How late this node's timers fire on average; past fleet.timeout / 10 (at least 2 ms) the breaker's latency rule is silent.",
        f.breaker_lag_us as f64 / 1e6,
    );
    family(
        o,
        "calmcache_fleet_redis_calls_total",
        "counter",
        "Redis calls by operation and result (ok, failed, timed_out: past fleet.timeout, skipped: breaker open).",
    );
    for (op, c) in &f.ops {
        for (result, n) in [
            ("ok", c.ok),
            ("failed", c.failed),
            ("timed_out", c.timed_out),
            ("skipped", c.skipped),
        ] {
            sample(
                o,
                "calmcache_fleet_redis_calls_total",
                &[("op", op), ("result", result)],
                n as f64,
            );
        }
    }
    family(
        o,
        "calmcache_fleet_redis_call_seconds_total",
        "counter",
        "Summed latency of the Redis calls answered in time, by operation (divided by their ok calls: the mean).",
    );
    for (op, c) in &f.ops {
        sample(
            o,
            "calmcache_fleet_redis_call_seconds_total",
            &[("op", op)],
            c.total_us as f64 / 1e6,
        );
    }
    family(
        o,
        "calmcache_fleet_commits_total",
        "counter",
        "Objects offered to Redis after a fill: stored, or refused (a purge or a later lease came first).",
    );
    for (result, n) in [("stored", f.commits), ("refused", f.commits_refused)] {
        sample(
            o,
            "calmcache_fleet_commits_total",
            &[("result", result)],
            n as f64,
        );
    }
    let counters: [(&str, &str, u64); 14] = [
        (
            "calmcache_fleet_breaker_closed_total",
            "Times a probe closed the Redis circuit breaker (Redis in use again).",
            f.breaker_closed,
        ),
        (
            "calmcache_fleet_reconnects_total",
            "Connections to Redis (re)built.",
            f.reconnects,
        ),
        (
            "calmcache_fleet_shared_hits_total",
            "Local misses answered from Redis (another node's copy).",
            f.shared_hits,
        ),
        (
            "calmcache_fleet_leases_acquired_total",
            "Leases taken: this node fetched from the origin for the fleet.",
            f.leases_acquired,
        ),
        (
            "calmcache_fleet_leases_held_total",
            "Fetches that found another node's lease and waited for its copy.",
            f.leases_held,
        ),
        (
            "calmcache_fleet_leases_newer_total",
            "Fetches that found a newer copy in Redis and took it instead (as shared_hits).",
            f.leases_newer,
        ),
        (
            "calmcache_fleet_leases_lost_total",
            "Leases lost before storing: expired (renewals failed) and taken by another node.",
            f.leases_lost,
        ),
        (
            "calmcache_fleet_leases_released_late_total",
            "Leases released once Redis answered again (given up while it was out of reach).",
            f.leases_released_late,
        ),
        (
            "calmcache_fleet_purge_gaps_total",
            "Times this node could not know which purges it missed and marked every local object stale.",
            f.purge_gaps,
        ),
        (
            "calmcache_fleet_waits_timed_out_total",
            "Waits for another node's copy that ended without one (fetched alone).",
            f.waits_timed_out,
        ),
        (
            "calmcache_fleet_objects_too_large_total",
            "Objects kept local: larger than fleet.max_object_size.",
            f.too_large,
        ),
        (
            "calmcache_fleet_bad_entries_total",
            "Entries read from Redis that failed verification (served as misses).",
            f.bad_entries,
        ),
        (
            "calmcache_fleet_purges_sent_total",
            "Purges this node sent to the fleet.",
            f.purges_sent,
        ),
        (
            "calmcache_fleet_purges_applied_total",
            "Purges from other nodes applied here.",
            f.purges_applied,
        ),
    ];
    for (name, help, n) in counters {
        family(o, name, "counter", help);
        sample(o, name, &[], n as f64);
    }
    gauge(
        o,
        "calmcache_fleet_purges_pending",
        "This node's purges waiting for Redis (out of reach when made).",
        f.purges_pending as f64,
    );
    gauge(
        o,
        "calmcache_fleet_leases_active",
        "Leases this node holds now: its fetches for the fleet in flight.",
        f.leases_active as f64,
    );
    fleet_signing(o, f);
    family(
        o,
        "calmcache_fleet_purge_lag_seconds",
        "summary",
        "Lag of other nodes' purges from being sent (Redis' clock) to applied here.",
    );
    sample(
        o,
        "calmcache_fleet_purge_lag_seconds_sum",
        &[],
        f.purge_lag_sum_ms as f64 / 1e3,
    );
    sample(
        o,
        "calmcache_fleet_purge_lag_seconds_count",
        &[],
        f.purges_applied as f64,
    );
    gauge(
        o,
        "calmcache_fleet_purge_lag_max_seconds",
        "The longest lag of a purge from another node, sent to applied here.",
        f.purge_lag_max_ms as f64 / 1e3,
    );
    family(
        o,
        "calmcache_fleet_object_fetches",
        "gauge",
        "Origin fetches with the fleet's lease of the objects this node fetched most lately, summed over every node (the object's fencing counter).",
    );
    for object in &f.most_fetched {
        sample(
            o,
            "calmcache_fleet_object_fetches",
            &[("key", &object.key)],
            object.fleet as f64,
        );
    }
}

/// The fleet secret (fleet/sign.rs): whether this node signs, and what
/// failed verification.
fn fleet_signing(o: &mut String, f: &crate::ops::status::FleetStatus) {
    gauge(
        o,
        "calmcache_fleet_signed",
        "1 when shared entries and purges are signed (fleet.secret_file set), else 0.",
        f64::from(u8::from(f.signed)),
    );
    let counters: [(&str, &str, u64); 3] = [
        (
            "calmcache_fleet_entries_refused_total",
            "Entries in Redis without a valid signature (fleet secret set): refused, fetched instead.",
            f.entries_refused,
        ),
        (
            "calmcache_fleet_purges_refused_total",
            "Purge messages without a valid signature (fleet secret set): not applied.",
            f.purges_refused,
        ),
        (
            "calmcache_fleet_purges_replayed_total",
            "Signed purge messages put in the stream long after they were signed: not applied.",
            f.purges_replayed,
        ),
    ];
    for (name, help, n) in counters {
        family(o, name, "counter", help);
        sample(o, name, &[], n as f64);
    }
}

/// Per upstream: requests that skipped a down server, requests refused
/// because all were down; per server: up or not, failures, checks.
fn upstream_health(o: &mut String, status: &crate::ops::status::Status) {
    type UpstreamValue = fn(&crate::ops::status::UpstreamStatus) -> u64;
    let counters: [(&str, &str, UpstreamValue); 2] = [
        (
            "calmcache_upstream_skipped_total",
            "Requests sent to another server because the one chosen was down.",
            |u| u.skipped,
        ),
        (
            "calmcache_upstream_all_down_total",
            "Requests refused at once (502 or a stale copy): every server was down.",
            |u| u.all_down,
        ),
    ];
    for (name, help, value) in counters {
        family(o, name, "counter", help);
        for (upstream, u) in &status.upstreams {
            sample(o, name, &[("upstream", upstream)], value(u) as f64);
        }
    }
    type ServerValue = fn(&crate::net::health::ServerStatus) -> Option<u64>;
    let per_server: [(&str, &str, &str, ServerValue); 5] = [
        (
            "calmcache_upstream_server_up",
            "gauge",
            "1 while requests go to the server, 0 while it is down or on trial.",
            |s| Some(u64::from(s.state == crate::net::health::ServerState::Up)),
        ),
        (
            "calmcache_upstream_server_fails_total",
            "counter",
            "Failures charged to the server (connect errors; timeouts and broken heads when several paths fail while it answers nothing).",
            |s| Some(s.fails_total),
        ),
        (
            "calmcache_upstream_server_url_fails_total",
            "counter",
            "Timeouts and broken heads blamed on their URL, not charged to the server.",
            |s| Some(s.url_fails_total),
        ),
        (
            "calmcache_upstream_server_checks_total",
            "counter",
            "Active health checks sent to the server.",
            |s| s.checks,
        ),
        (
            "calmcache_upstream_server_checks_failed_total",
            "counter",
            "Active health checks the server failed.",
            |s| s.checks_failed,
        ),
    ];
    for (name, kind, help, value) in per_server {
        family(o, name, kind, help);
        for (upstream, u) in &status.upstreams {
            for server in &u.health {
                if let Some(v) = value(server) {
                    let labels = [("upstream", upstream.as_str()), ("server", &server.server)];
                    sample(o, name, &labels, v as f64);
                }
            }
        }
    }
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

fn gauge(o: &mut String, name: &str, help: &str, value: f64) {
    family(o, name, "gauge", help);
    sample(o, name, &[], value);
}

fn sample(o: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    o.push_str(name);
    if !labels.is_empty() {
        o.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let _ = write!(o, "{k}=\"");
            escape(o, v);
            o.push('"');
        }
        o.push('}');
    }
    let _ = writeln!(o, " {value}");
}

fn histogram(o: &mut String, name: &str, label: (&str, &str), h: &HistogramSnapshot) {
    let bucket = format!("{name}_bucket");
    for (i, count) in h.buckets.iter().enumerate() {
        let le = BOUNDS
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
        sample(o, &bucket, &[label, ("le", &le)], *count as f64);
    }
    sample(o, &format!("{name}_sum"), &[label], h.sum_seconds);
    sample(o, &format!("{name}_count"), &[label], h.count as f64);
}

/// Label values: backslash, double quote and newline escaped.
fn escape(o: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut o = String::new();
        sample(&mut o, "m", &[("route", "a\"b\\c\nd")], 2.0);
        assert_eq!(o, "m{route=\"a\\\"b\\\\c\\nd\"} 2\n");
    }

    #[test]
    fn the_fleet_block_has_one_breaker_state_and_calls_per_operation() {
        let mut ops = std::collections::BTreeMap::new();
        let acquire = crate::fleet::OpSnapshot {
            ok: 4,
            failed: 1,
            timed_out: 2,
            skipped: 3,
            total_us: 1_500,
            mean_us: 375,
        };
        ops.insert("acquire", acquire);
        let f = crate::ops::status::FleetStatus {
            node: "n1".to_owned(),
            breaker: crate::fleet::BreakerState::HalfOpen,
            breaker_opened: 3,
            breaker_opened_by: crate::fleet::OpenedBy {
                consecutive: 1,
                ratio: 0,
                latency: 2,
            },
            breaker_closed: 2,
            breaker_last_reason: Some(crate::fleet::OpenReason::Latency),
            breaker_latency_us: 40_000,
            breaker_lag_us: 1_500,
            calls_ok: 4,
            calls_failed: 1,
            calls_timed_out: 2,
            calls_skipped: 3,
            call_mean_us: 375,
            reconnects: 2,
            shared_hits: 5,
            leases_acquired: 6,
            leases_held: 7,
            leases_newer: 5,
            leases_active: 1,
            leases_lost: 2,
            leases_released_late: 0,
            waits_timed_out: 0,
            commits: 8,
            commits_refused: 9,
            too_large: 0,
            bad_entries: 0,
            signed: true,
            entries_refused: 0,
            purges_refused: 0,
            purges_replayed: 0,
            purges_sent: 10,
            purges_applied: 11,
            purge_lag_mean_ms: 20,
            purge_lag_max_ms: 90,
            purge_lag_sum_ms: 220,
            purge_gaps: 0,
            purges_pending: 0,
            ops,
            last_error: None,
            most_fetched: vec![crate::fleet::ObjectFetches {
                key: "GET http fleet.test /a".to_owned(),
                fleet: 3,
                here: 1,
            }],
        };
        let mut o = String::new();
        fleet(&mut o, &f);
        for line in [
            "calmcache_fleet_info{node=\"n1\"} 1",
            "calmcache_fleet_breaker_state{state=\"closed\"} 0",
            "calmcache_fleet_breaker_state{state=\"open\"} 0",
            "calmcache_fleet_breaker_state{state=\"half_open\"} 1",
            "calmcache_fleet_breaker_opened_total{reason=\"consecutive\"} 1",
            "calmcache_fleet_breaker_opened_total{reason=\"ratio\"} 0",
            "calmcache_fleet_breaker_opened_total{reason=\"latency\"} 2",
            "calmcache_fleet_breaker_closed_total 2",
            "calmcache_fleet_breaker_latency_seconds 0.04",
            "calmcache_fleet_timer_lag_seconds 0.0015",
            "calmcache_fleet_redis_calls_total{op=\"acquire\",result=\"ok\"} 4",
            "calmcache_fleet_redis_calls_total{op=\"acquire\",result=\"timed_out\"} 2",
            "calmcache_fleet_redis_calls_total{op=\"acquire\",result=\"skipped\"} 3",
            "calmcache_fleet_redis_call_seconds_total{op=\"acquire\"} 0.0015",
            "calmcache_fleet_commits_total{result=\"stored\"} 8",
            "calmcache_fleet_commits_total{result=\"refused\"} 9",
            "calmcache_fleet_purges_applied_total 11",
            "calmcache_fleet_purges_pending 0",
            "calmcache_fleet_leases_lost_total 2",
            "calmcache_fleet_leases_active 1",
            "calmcache_fleet_purge_lag_seconds_sum 0.22",
            "calmcache_fleet_purge_lag_seconds_count 11",
            "calmcache_fleet_purge_lag_max_seconds 0.09",
            "calmcache_fleet_object_fetches{key=\"GET http fleet.test /a\"} 3",
        ] {
            assert!(o.lines().any(|l| l == line), "missing {line:?} in\n{o}");
        }
    }

    #[test]
    fn histograms_have_cumulative_buckets_sum_and_count() {
        let mut o = String::new();
        let h = HistogramSnapshot {
            count: 3,
            sum_seconds: 0.5,
            buckets: vec![1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3],
        };
        histogram(&mut o, "x", ("cache_status", "hit"), &h);
        assert!(o.contains("x_bucket{cache_status=\"hit\",le=\"0.0001\"} 1\n"));
        assert!(o.contains("x_bucket{cache_status=\"hit\",le=\"+Inf\"} 3\n"));
        assert!(o.contains("x_sum{cache_status=\"hit\"} 0.5\n"));
        assert!(o.contains("x_count{cache_status=\"hit\"} 3\n"));
    }
}
