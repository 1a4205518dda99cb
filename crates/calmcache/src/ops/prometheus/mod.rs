//! `GET /metrics`: the `/status` document in the Prometheus text exposition
//! format (version 0.0.4), every name prefixed `calmcache_`.
//!
//! Owns: the text format and the one loop that writes the metric families
//! in table order. The families are one row each of the tables in
//! `families.rs` (name, type, help, where the samples come from); the
//! per-route ones come from the route counters' own list
//! ([`ActivitySnapshot::NAMES`], telemetry/stats.rs). A new metric is a
//! row there and a field in [`Status`]. Reads [`crate::ops::status`] only:
//! it renders, it never counts or asks the proxy.

use std::fmt::Write;

mod families;

use crate::ops::status::{FleetStatus, Status};
use crate::telemetry::metrics::{HistogramSnapshot, BOUNDS};
use crate::telemetry::stats::ActivitySnapshot;
use families::{FLEET, FLEET_REDIS, PARTS, TOTALS};
use Samples::{Histograms, IfAny, One, Rows, Summary};

/// Renders `status` as Prometheus text.
pub(crate) fn render(status: &Status) -> String {
    let mut out = String::with_capacity(16 * 1024);
    write_families(&mut out, TOTALS, status);
    route_counters(&mut out, status);
    write_families(&mut out, PARTS, status);
    if let Some(f) = &status.fleet {
        fleet(&mut out, f);
    }
    out
}

/// Fleet mode (only with `[fleet]`): the breaker, Redis calls per
/// operation, leases, commits, purges and the fleet secret; then Redis'
/// own memory.
fn fleet(o: &mut String, f: &FleetStatus) {
    write_families(o, FLEET, f);
    write_families(o, FLEET_REDIS, &f.redis);
}

/// A family's `# TYPE`.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// A label's name and value.
type Label<'a> = (&'static str, &'a str);

/// One sample of a labelled family: its labels and value.
type Row<'a> = (Vec<Label<'a>>, f64);

/// Where a family's samples come from, read off `S` (the [`Status`], or
/// its [`FleetStatus`]).
enum Samples<S> {
    /// One sample without labels.
    One(fn(&S) -> f64),
    /// One sample without labels when there is a value; else not even the
    /// family's head (the access log's, when one is configured).
    IfAny(fn(&S) -> Option<f64>),
    /// Labelled samples, in order.
    Rows(for<'a> fn(&'a S) -> Vec<Row<'a>>),
    /// One histogram per value of the label named first.
    Histograms(
        &'static str,
        for<'a> fn(&'a S) -> Vec<(&'a str, &'a HistogramSnapshot)>,
    ),
    /// A summary without quantiles: `_sum` and `_count`.
    Summary(fn(&S) -> f64, fn(&S) -> f64),
}

/// One metric family: a row of the tables below.
struct Family<S: 'static> {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    samples: Samples<S>,
}

const fn counter<S>(name: &'static str, help: &'static str, samples: Samples<S>) -> Family<S> {
    Family {
        name,
        kind: Kind::Counter,
        help,
        samples,
    }
}

const fn gauge<S>(name: &'static str, help: &'static str, samples: Samples<S>) -> Family<S> {
    Family {
        name,
        kind: Kind::Gauge,
        help,
        samples,
    }
}

const fn histograms<S>(name: &'static str, help: &'static str, samples: Samples<S>) -> Family<S> {
    Family {
        name,
        kind: Kind::Histogram,
        help,
        samples,
    }
}

/// Writes every family of `table`, in order.
fn write_families<S>(o: &mut String, table: &[Family<S>], s: &S) {
    for f in table {
        f.write(o, s);
    }
}

impl<S> Family<S> {
    /// Writes the family's head, then its samples; an [`IfAny`] family
    /// without a value writes nothing at all.
    fn write(&self, o: &mut String, s: &S) {
        let name = self.name;
        if let IfAny(value) = &self.samples {
            if let Some(v) = value(s) {
                self.head(o);
                sample(o, name, &[], v);
            }
            return;
        }
        self.head(o);
        match &self.samples {
            One(value) => sample(o, name, &[], value(s)),
            IfAny(_) => {} // written above
            Rows(rows) => {
                for (labels, v) in rows(s) {
                    sample(o, name, &labels, v);
                }
            }
            Histograms(label, all) => {
                for (value, h) in all(s) {
                    histogram(o, name, (label, value), h);
                }
            }
            Summary(sum, count) => {
                sample(o, &format!("{name}_sum"), &[], sum(s));
                sample(o, &format!("{name}_count"), &[], count(s));
            }
        }
    }

    fn head(&self, o: &mut String) {
        family(o, self.name, self.kind.as_str(), self.help);
    }
}

/// Per route: one family per route counter (telemetry/stats.rs), when
/// there is a route.
fn route_counters(o: &mut String, status: &Status) {
    let routes: Vec<(&String, Vec<u64>)> = status
        .routes
        .iter()
        .map(|(name, r)| (name, r.activity.values()))
        .collect();
    if routes.is_empty() {
        return;
    }
    // In the order of their names, as /metrics has always listed them.
    let mut fields: Vec<(usize, &str)> = ActivitySnapshot::NAMES
        .iter()
        .copied()
        .enumerate()
        .collect();
    fields.sort_unstable_by_key(|(_, field)| *field);
    for (i, field) in fields {
        let name = format!("calmcache_route_{field}_total");
        let help = format!("Per route: {}.", field.replace('_', " "));
        family(o, &name, "counter", &help);
        for (route, values) in &routes {
            sample(o, &name, &[("route", route)], values[i] as f64);
        }
    }
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
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
            pieces: crate::fleet::FleetPieces::default(),
            origin_slots: crate::fleet::OriginSlots {
                granted: 5,
                full: 6,
                failed_open: 7,
                held: 1,
                lost: 0,
            },
            ops,
            last_error: None,
            membership: crate::fleet::members::Membership::default(),
            redis: crate::fleet::RedisMemory {
                used_memory: Some(1_000),
                maxmemory: Some(4_000),
                used_ratio: Some(0.25),
                maxmemory_policy: Some("allkeys-lfu".to_owned()),
                evicted_keys: Some(7),
                nodes: 1,
                read_ms_ago: Some(2_500),
                warning: None,
            },
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
            "calmcache_fleet_origin_slots_total{result=\"granted\"} 5",
            "calmcache_fleet_origin_slots_total{result=\"full\"} 6",
            "calmcache_fleet_origin_slots_total{result=\"failed_open\"} 7",
            "calmcache_fleet_origin_slots_held 1",
            "calmcache_fleet_origin_slots_lost_total 0",
            "calmcache_fleet_purge_lag_seconds_sum 0.22",
            "calmcache_fleet_purge_lag_seconds_count 11",
            "calmcache_fleet_purge_lag_max_seconds 0.09",
            "calmcache_fleet_object_fetches{key=\"GET http fleet.test /a\"} 3",
            "calmcache_fleet_redis_used_memory_bytes 1000",
            "calmcache_fleet_redis_maxmemory_bytes 4000",
            "calmcache_fleet_redis_memory_used_ratio 0.25",
            "calmcache_fleet_redis_evicted_keys_total 7",
            "calmcache_fleet_redis_maxmemory_policy{policy=\"allkeys-lfu\"} 1",
            "calmcache_fleet_redis_info_age_seconds 2.5",
        ] {
            assert!(o.lines().any(|l| l == line), "missing {line:?} in\n{o}");
        }
    }

    #[test]
    fn redis_memory_not_read_yet_has_no_samples() {
        let mut o = String::new();
        write_families(&mut o, FLEET_REDIS, &crate::fleet::RedisMemory::default());
        assert!(!o.lines().any(|l| !l.starts_with('#')), "{o}");
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
