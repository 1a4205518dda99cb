//! Tests only: one fully populated [`Status`] (routes, zones of both kinds,
//! upstreams with servers, histograms, the access log and the fleet), so
//! the `/status` JSON and the `/metrics` text can be pinned to golden files
//! (`ops/golden/`) byte for byte.

use std::collections::BTreeMap;

use crate::net::health::{ServerState, ServerStatus};
use calmcache_core::TierDetail;

use crate::ops::status::{
    AccessLogStatus, BudgetStatus, Connections, DetailBlock, FleetStatus, Latency, LimitStatus,
    Purges, Reloads, RouteStatus, ServerConnStatus, Status, UpstreamStatus, Websockets, ZoneStatus,
};
use crate::telemetry::metrics::{HistogramSnapshot, BOUNDS};
use crate::telemetry::stats::ActivitySnapshot;

/// Every counter set, each to a different value (`base` + its place).
pub(crate) fn activity(base: u64) -> ActivitySnapshot {
    ActivitySnapshot {
        requests: base + 1,
        hits: base + 2,
        misses: base + 3,
        stale_served: base + 4,
        coalesced_waits: base + 5,
        early_refreshes: base + 6,
        background_refreshes: base + 7,
        refreshes_skipped: base + 8,
        fills_cancelled: base + 9,
        hit_for_miss: base + 10,
        upstream_requests: base + 11,
        upstream_errors: base + 12,
        bypass: base + 13,
        bytes_from_cache: base + 14,
        stores: base + 15,
        invalidations: base + 16,
        revalidated: base + 17,
        early_hints: base + 18,
        body_key_passed: base + 19,
        header_values_dropped: base + 20,
        limited: base + 21,
    }
}

fn histogram(base: u64) -> HistogramSnapshot {
    let buckets: Vec<u64> = (0..=BOUNDS.len() as u64).map(|i| base + i).collect();
    HistogramSnapshot {
        count: base + BOUNDS.len() as u64,
        sum_seconds: base as f64 * 0.125,
        buckets,
    }
}

fn server(name: &str, state: ServerState, checks: Option<u64>) -> ServerStatus {
    ServerStatus {
        server: name.to_owned(),
        state,
        fails: 1,
        fails_total: 7,
        url_fails_total: 3,
        last_failure: Some("ConnectFailed: connection refused".to_owned()),
        down_for_seconds: Some(1.5),
        retry_in_seconds: None,
        checks,
        checks_failed: checks.map(|c| c / 2),
        last_check: checks.map(|_| "200 OK".to_owned()),
    }
}

/// A server's connections: `requests` sent, `opened` for an empty pool,
/// one tunnel, closes on both sides, dropped answers mostly drained.
fn conns(name: &str, requests: u64, opened: u64) -> ServerConnStatus {
    ServerConnStatus {
        server: name.to_owned(),
        requests,
        opened: BTreeMap::from([("pool_empty", opened), ("tunnel", 1)]),
        closed: BTreeMap::from([("origin", 2), ("calmcache", opened - 2)]),
        reuse_percent: 100.0 * (1.0 - (opened + 1) as f64 / requests as f64),
        dropped_answers: BTreeMap::from([
            ("drained", opened + 4),
            ("too_large", 1),
            ("too_slow", 0),
            ("failed", 0),
        ]),
    }
}

fn upstreams() -> BTreeMap<String, UpstreamStatus> {
    let a = UpstreamStatus {
        requests: 100,
        errors: 4,
        servers: vec!["127.0.0.1:8001".to_owned(), "127.0.0.1:8002".to_owned()],
        balance: "hash",
        hash_key: Some("$request_uri".to_owned()),
        skipped: 2,
        all_down: 1,
        health: vec![
            server("127.0.0.1:8001", ServerState::Up, Some(40)),
            server("127.0.0.1:8002", ServerState::Down, None),
        ],
        budget: BudgetStatus {
            max_inflight: 4,
            fleet_max_inflight: 0,
            limit: 8,
            inflight: 8,
            queued: 3,
            queued_total: 40,
            queue_wait_seconds_total: 2.5,
            shed_stale: 12,
            shed_busy: 2,
            refresh_skipped: 5,
            shared_unavailable: 0,
        },
        connections_opened: 10,
        reuse_percent: 90.0,
        connections: vec![
            conns("127.0.0.1:8001", 60, 5),
            conns("127.0.0.1:8002", 40, 3),
        ],
    };
    let b = UpstreamStatus {
        requests: 9,
        errors: 0,
        servers: vec!["[::1]:9000".to_owned()],
        balance: "round_robin",
        hash_key: None,
        skipped: 0,
        all_down: 0,
        health: vec![server("[::1]:9000", ServerState::Trial, None)],
        budget: BudgetStatus::default(),
        connections_opened: 3,
        reuse_percent: 66.66666666666667,
        connections: vec![conns("[::1]:9000", 9, 2)],
    };
    BTreeMap::from([("api".to_owned(), a), ("static\"s\\".to_owned(), b)])
}

fn routes() -> BTreeMap<String, RouteStatus> {
    let one = RouteStatus {
        upstream: Some("api".to_owned()),
        answers: None,
        hosts: vec!["example.test".to_owned()],
        zone: Some("disk".to_owned()),
        zones: Vec::new(),
        refresh: "per",
        activity: activity(100),
    };
    let spread = RouteStatus {
        upstream: Some("static\"s\\".to_owned()),
        answers: None,
        hosts: Vec::new(),
        zone: Some("mem".to_owned()),
        zones: vec!["mem".to_owned(), "disk".to_owned()],
        refresh: "stale",
        activity: activity(200),
    };
    BTreeMap::from([("api".to_owned(), one), ("assets".to_owned(), spread)])
}

/// A disk tier's figures, named and ordered as the disk tier reports them.
fn disk() -> DetailBlock {
    let figures = TierDetail::new("disk")
        .with("path", "/var/cache/calmcache/disk".to_owned())
        .with("evictions", 31u64)
        .with("evictions_nospace", 32u64)
        .with("write_failures_nospace", 33u64)
        .with("effective_max_size_bytes", 34_000u64)
        .with("fs_capacity_bytes", Some(35_000u64))
        .with("fs_capacity_files", None::<u64>)
        .with("leftover_temp_files", 36u64)
        .with("leftover_temp_bytes", 37u64)
        .with("inactive_removed", 38u64)
        .with("not_admitted", 44u64)
        .with("errors", 39u64)
        .with("broken_files", 40u64)
        .with("loaded", 41u64)
        .with("loader_done", true);
    DetailBlock(figures)
}

fn zones() -> BTreeMap<String, ZoneStatus> {
    let d = ZoneStatus {
        kind: "disk",
        size_bytes: 1_000,
        max_size_bytes: 50_000,
        objects: 12,
        detail: disk(),
        activity: activity(300),
    };
    let m = ZoneStatus {
        kind: "memory",
        size_bytes: 2_000,
        max_size_bytes: 60_000,
        objects: 13,
        detail: DetailBlock(TierDetail::new("memory").with("evictions", 5u64)),
        activity: activity(400),
    };
    let bare = ZoneStatus {
        kind: "memory",
        size_bytes: 0,
        max_size_bytes: 1,
        objects: 0,
        detail: DetailBlock(TierDetail::default()),
        activity: ActivitySnapshot::default(),
    };
    BTreeMap::from([
        ("disk".to_owned(), d),
        ("mem".to_owned(), m),
        ("z-bare".to_owned(), bare),
    ])
}

fn fleet() -> FleetStatus {
    let acquire = crate::fleet::OpSnapshot {
        ok: 4,
        failed: 1,
        timed_out: 2,
        skipped: 3,
        total_us: 1_500,
        mean_us: 375,
    };
    let commit = crate::fleet::OpSnapshot {
        ok: 8,
        failed: 0,
        timed_out: 0,
        skipped: 1,
        total_us: 2_000,
        mean_us: 250,
    };
    FleetStatus {
        node: "n1".to_owned(),
        breaker: crate::fleet::BreakerState::Open,
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
        calls_ok: 12,
        calls_failed: 1,
        calls_timed_out: 2,
        calls_skipped: 4,
        call_mean_us: 291,
        reconnects: 2,
        shared_hits: 5,
        leases_acquired: 6,
        leases_held: 7,
        leases_newer: 5,
        leases_active: 1,
        leases_lost: 2,
        leases_released_late: 3,
        waits_timed_out: 4,
        commits: 8,
        commits_refused: 9,
        too_large: 10,
        bad_entries: 11,
        signed: true,
        entries_refused: 12,
        purges_refused: 13,
        purges_replayed: 14,
        purges_sent: 15,
        purges_applied: 16,
        purge_lag_mean_ms: 20,
        purge_lag_max_ms: 90,
        purge_lag_sum_ms: 320,
        purge_gaps: 17,
        purges_pending: 18,
        pieces: crate::fleet::FleetPieces {
            written: 160,
            read: 320,
            bad: 1,
            over_budget: 2,
            streamed: 40,
            forgotten: 3,
            streams: 4,
            streams_cut: 1,
        },
        origin_slots: origin_slots(),
        ops: BTreeMap::from([("acquire", acquire), ("commit", commit)]),
        most_fetched: vec![crate::fleet::ObjectFetches {
            key: "GET http fleet.test /a".to_owned(),
            fleet: 3,
            here: 1,
        }],
        last_error: Some("acquire: timed out".to_owned()),
        redis: redis_memory(),
        membership: membership(),
    }
}

/// Redis seven-eighths full, some keys evicted.
fn redis_memory() -> crate::fleet::RedisMemory {
    crate::fleet::RedisMemory {
        used_memory: Some(7_340_032),
        maxmemory: Some(8_388_608),
        used_ratio: Some(0.875),
        maxmemory_policy: Some("allkeys-lfu".to_owned()),
        evicted_keys: Some(23),
        nodes: 1,
        read_ms_ago: Some(1_200),
        warning: None,
    }
}

/// The fleet-wide origin budget's slots.
fn origin_slots() -> crate::fleet::OriginSlots {
    crate::fleet::OriginSlots {
        granted: 19,
        full: 20,
        failed_open: 21,
        held: 2,
        lost: 22,
    }
}

/// Two live members, the other one with another key template.
fn membership() -> crate::fleet::members::Membership {
    use crate::fleet::fingerprint::{Fingerprint, FingerprintPart};
    let own = Fingerprint::from_parts("k1".into(), "r1".into(), "f1".into());
    let other = Fingerprint::from_parts("k2".into(), "r1".into(), "f1".into());
    let member =
        |name: &str, fingerprint: &Fingerprint, this_node: bool| crate::fleet::members::Member {
            name: name.to_owned(),
            id: format!("{name}-1234-0000abcd"),
            version: "1.0.0".to_owned(),
            fingerprint: fingerprint.clone(),
            started_at_ms: 1_700_000_000_000,
            last_seen_ms_ago: 1_500,
            this_node,
            differs: if this_node {
                Vec::new()
            } else {
                vec![FingerprintPart::Keys]
            },
        };
    crate::fleet::members::Membership {
        fingerprint: Some(own.clone()),
        members: Some(vec![member("n1", &own, true), member("n2", &other, false)]),
        config_drift: crate::fleet::members::Drift::Split,
        config_drift_parts: Vec::new(),
        refused_members: vec![crate::fleet::members::RefusedMember {
            name: "n3".to_owned(),
            why: crate::fleet::members::Refusal::Unsigned,
            last_seen_ms_ago: 900,
        }],
        members_refused: 7,
    }
}

/// The populated status document.
pub(crate) fn status() -> Status {
    let by_cache_status: BTreeMap<&'static str, HistogramSnapshot> = [
        ("bypass", histogram(1)),
        ("hit", histogram(2)),
        ("miss", histogram(3)),
        ("revalidated", histogram(4)),
        ("stale", histogram(5)),
    ]
    .into_iter()
    .collect();
    Status {
        version: "9.9.9-test",
        uptime_seconds: 12.5,
        connections: Connections {
            active: 3,
            accepted: 44,
            send_timeouts: 2,
            spliced_bytes: 1_048_576,
            proxy_protocol: crate::telemetry::metrics::ProxyHeader::ALL
                .iter()
                .zip(0..)
                .map(|(r, n)| (r.as_str(), n))
                .collect(),
        },
        websockets: Websockets {
            active: 1,
            total: 6,
        },
        totals: activity(0),
        cache_status: by_cache_status.iter().map(|(l, h)| (*l, h.count)).collect(),
        latency: Latency {
            le: &BOUNDS,
            by_cache_status,
            by_upstream: BTreeMap::from([
                ("api".to_owned(), histogram(6)),
                ("static\"s\\".to_owned(), histogram(7)),
            ]),
        },
        upstreams: upstreams(),
        purges: Purges {
            requests: 21,
            objects: 22,
        },
        reloads: Reloads { ok: 23, failed: 24 },
        requests_refused: 25,
        inflight_body_bytes: 26,
        inflight_body_limit: 27,
        fills_over_budget: 28,
        access_log: Some(AccessLogStatus { dropped: 29 }),
        routes: routes(),
        zones: zones(),
        fetches_in_flight: 30,
        fleet: Some(fleet()),
        limits: limits(),
    }
}

/// Two limits, one of each kind.
fn limits() -> BTreeMap<String, LimitStatus> {
    let api = LimitStatus {
        kind: "rate",
        applies_to: "origin",
        rejected: 41,
        delayed: 42,
        clients: 43,
        max_clients: 100_000,
    };
    let conns = LimitStatus {
        kind: "connections",
        applies_to: "all",
        rejected: 44,
        delayed: 0,
        clients: 45,
        max_clients: 1000,
    };
    BTreeMap::from([("api".to_owned(), api), ("conns".to_owned(), conns)])
}

/// The same without the optional parts (no access log, no fleet, no
/// routes, no limits).
pub(crate) fn bare_status() -> Status {
    Status {
        access_log: None,
        fleet: None,
        routes: BTreeMap::new(),
        limits: BTreeMap::new(),
        ..status()
    }
}

mod tests {
    /// Set `GOLDEN_WRITE=1` to rewrite the golden files from the code as it
    /// is (then review the diff: it is the change to what operators see).
    fn check(file: &str, got: &str) {
        let path = format!("{}/src/ops/golden/{file}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("GOLDEN_WRITE").is_some() {
            std::fs::write(&path, got).expect("write golden file");
        }
        let want = std::fs::read_to_string(&path).expect("read golden file");
        assert!(
            got == want,
            "{file} differs from the golden file; diff it against:\n{got}"
        );
    }

    #[test]
    fn metrics_text_is_the_golden_one() {
        check(
            "metrics.txt",
            &crate::ops::prometheus::render(&super::status()),
        );
        check(
            "metrics-bare.txt",
            &crate::ops::prometheus::render(&super::bare_status()),
        );
    }

    #[test]
    fn status_json_is_the_golden_one() {
        let json = serde_json::to_string_pretty(&super::status()).expect("serialize");
        check("status.json", &json);
        let json = serde_json::to_string_pretty(&super::bare_status()).expect("serialize");
        check("status-bare.json", &json);
    }
}
