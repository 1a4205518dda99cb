//! Redis calls counted per operation (acquire, commit, release, renew,
//! purge, publish, poll; origin_take, origin_renew, origin_release of the
//! fleet-wide origin budget; members: heartbeats; probe, the open breaker's PINGs, and info,
//! the reading of Redis' memory; put_piece, get_piece of large objects;
//! sentinel, the breaker's PINGs that judge Redis' latency): how many were answered, failed, missed the deadline or
//! were skipped by the open breaker, and the answered ones' summed latency,
//! for `/status` (`fleet.ops`) and `/metrics`. Every call of the link is
//! counted under exactly one operation, so the per-operation counts sum to
//! the link's totals, the sentinel's apart (its PINGs are not the node's
//! calls: the totals and their mean stay what they were before it).
//!
//! Only Redis calls bump these (local misses, fills, purges, requests to
//! an origin under a fleet-wide budget): a local cache hit never reaches
//! them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// What a Redis call does for the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Before a fill: a newer copy, the lease, or the holder's wait.
    Acquire,
    /// After a fill: the object stored in Redis (or refused).
    Commit,
    /// A lease given back without a commit.
    Release,
    /// A lease extended while its fetch runs.
    Renew,
    /// A purge applied in Redis (one key, or the purge epoch).
    Purge,
    /// A purge sent to the other nodes (the stream).
    Publish,
    /// Reading the other nodes' purges and the purge epoch.
    Poll,
    /// Asking for a fleet-wide origin slot (`fleet_max_inflight`).
    OriginTake,
    /// Extending a long-held origin slot's lease.
    OriginRenew,
    /// Giving an origin slot back (its request to the origin ended).
    OriginRelease,
    /// This node's heartbeat and the live members' list (members.rs),
    /// or its leaving at a clean stop.
    Members,
    /// A PING while the breaker is open: is Redis back (breaker.rs)?
    Probe,
    /// Reading Redis' memory and evictions (`INFO`, redis_info.rs).
    Info,
    /// One piece of a large object written (before its manifest).
    PutPiece,
    /// One piece of a large object read (after its manifest).
    GetPiece,
    /// The breaker's sentinel PING, every 100 ms from its own thread
    /// (breaker_sentinel.rs): its round trip is what the latency rule
    /// judges.
    Sentinel,
}

impl Op {
    /// Every operation, in `/status` and `/metrics` order.
    pub(crate) const ALL: [Op; 16] = [
        Op::Acquire,
        Op::Commit,
        Op::Release,
        Op::Renew,
        Op::Purge,
        Op::Publish,
        Op::Poll,
        Op::OriginTake,
        Op::OriginRenew,
        Op::OriginRelease,
        Op::Members,
        Op::Probe,
        Op::Info,
        Op::PutPiece,
        Op::GetPiece,
        Op::Sentinel,
    ];

    /// The connection it goes on.
    pub(crate) fn lane(self) -> Lane {
        match self {
            Op::PutPiece | Op::GetPiece => Lane::Bulk,
            _ => Lane::Control,
        }
    }

    /// Its name in `/status` and the `op` label of `/metrics`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Commit => "commit",
            Op::Renew => "renew",
            Op::Release => "release",
            Op::Purge => "purge",
            Op::Publish => "publish",
            Op::Poll => "poll",
            Op::OriginTake => "origin_take",
            Op::OriginRenew => "origin_renew",
            Op::OriginRelease => "origin_release",
            Op::Members => "members",
            Op::Probe => "probe",
            Op::Info => "info",
            Op::PutPiece => "put_piece",
            Op::GetPiece => "get_piece",
            Op::Sentinel => "sentinel",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Which of the link's two connections an operation goes on (FLEET.md
/// §6), each with its own breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Leases, entries, purges, heartbeats, probes: small values.
    Control,
    /// The pieces of large objects: 256 KiB values, which would sit ahead
    /// of a lease on a shared connection.
    Bulk,
}

impl Lane {
    /// Both, in index order.
    pub(crate) const ALL: [Lane; 2] = [Lane::Control, Lane::Bulk];

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How one call went.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    /// Answered within the deadline, after this many microseconds.
    Answered(u64),
    /// An error or a closed connection.
    Failed,
    /// Past `fleet.timeout`.
    TimedOut,
    /// Not made: the breaker was open.
    Skipped,
}

#[derive(Default)]
struct Counters {
    ok: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    skipped: AtomicU64,
    micros: AtomicU64,
}

/// The counters of every operation (relaxed atomics, one set per op).
#[derive(Default)]
pub(crate) struct OpStats {
    ops: [Counters; Op::ALL.len()],
}

/// One operation's counters, as `/status` shows them.
#[derive(Serialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OpSnapshot {
    /// Calls answered within the deadline.
    pub ok: u64,
    /// Calls that failed (an error, a closed connection).
    pub failed: u64,
    /// Calls past `fleet.timeout`.
    pub timed_out: u64,
    /// Calls not made: the breaker was open.
    pub skipped: u64,
    /// Summed latency of the answered calls, in microseconds.
    pub total_us: u64,
    /// Mean latency of the answered calls, in microseconds (0: none).
    pub mean_us: u64,
}

impl OpStats {
    /// Counts one call of `op`.
    pub(crate) fn record(&self, op: Op, outcome: Outcome) {
        let c = &self.ops[op.index()];
        match outcome {
            Outcome::Answered(micros) => {
                c.micros.fetch_add(micros, Ordering::Relaxed);
                c.ok.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Failed => {
                c.failed.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::TimedOut => {
                c.timed_out.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Skipped => {
                c.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every operation's counters, by name.
    pub(crate) fn snapshot(&self) -> BTreeMap<&'static str, OpSnapshot> {
        Op::ALL
            .iter()
            .map(|op| {
                let c = &self.ops[op.index()];
                let ok = c.ok.load(Ordering::Relaxed);
                let total_us = c.micros.load(Ordering::Relaxed);
                let snap = OpSnapshot {
                    ok,
                    failed: c.failed.load(Ordering::Relaxed),
                    timed_out: c.timed_out.load(Ordering::Relaxed),
                    skipped: c.skipped.load(Ordering::Relaxed),
                    total_us,
                    mean_us: total_us.checked_div(ok).unwrap_or(0),
                };
                (op.as_str(), snap)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_counts_under_its_operation_only() {
        let stats = OpStats::default();
        stats.record(Op::Acquire, Outcome::Answered(300));
        stats.record(Op::Acquire, Outcome::Answered(100));
        stats.record(Op::Acquire, Outcome::TimedOut);
        stats.record(Op::Commit, Outcome::Failed);
        stats.record(Op::Poll, Outcome::Skipped);
        let s = stats.snapshot();
        assert_eq!(
            s["acquire"],
            OpSnapshot {
                ok: 2,
                failed: 0,
                timed_out: 1,
                skipped: 0,
                total_us: 400,
                mean_us: 200,
            }
        );
        assert_eq!(s["commit"].failed, 1);
        assert_eq!(s["commit"].mean_us, 0, "no answered call: no mean");
        assert_eq!(s["poll"].skipped, 1);
        assert_eq!(s["release"], OpSnapshot::default());
        let names: Vec<&str> = Op::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(s.keys().count(), names.len());
        assert!(names.iter().all(|n| s.contains_key(n)));
    }
}
