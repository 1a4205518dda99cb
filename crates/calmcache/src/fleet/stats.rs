//! What the fleet did on this node, for `/status` and `/metrics`:
//! [`FleetStats`] counters and the [`FetchLog`] of the objects it fetched
//! for the fleet (with the fleet's count, from the fencing counter).
//!
//! Must not: call Redis.

use std::sync::atomic::AtomicU64;

use calmcache_core::CacheKey;
use tokio::time::Instant;

/// The objects this node fetched for the fleet lately, with the fleet's
/// count of fetches of each (the object's fencing counter in Redis: one per
/// lease any node took, kept a week), for `/status`.
#[derive(Default)]
pub(super) struct FetchLog {
    /// Key (shortened) → (the fleet's fetches, this node's, last fetch).
    pub(super) objects: std::collections::HashMap<String, (u64, u64, Instant)>,
}

/// Objects [`FetchLog`] keeps; the one fetched longest ago goes first.
pub(super) const FETCH_LOG_MAX: usize = 256;
/// Objects `/status` lists (the most fetched).
pub(super) const FETCH_LOG_SHOWN: usize = 10;

impl FetchLog {
    pub(super) fn note(&mut self, key: &CacheKey, fleet_fetches: u64) {
        let mut name = key.to_string();
        if name.len() > 200 {
            let mut end = 200;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            name.truncate(end);
        }
        if !self.objects.contains_key(&name) && self.objects.len() >= FETCH_LOG_MAX {
            let oldest = self
                .objects
                .iter()
                .min_by_key(|(_, (_, _, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.objects.remove(&oldest);
            }
        }
        let entry = self.objects.entry(name).or_insert((0, 0, Instant::now()));
        entry.0 = entry.0.max(fleet_fetches);
        entry.1 += 1;
        entry.2 = Instant::now();
    }

    pub(super) fn most_fetched(&self) -> Vec<ObjectFetches> {
        let mut all: Vec<ObjectFetches> = self
            .objects
            .iter()
            .map(|(key, &(fleet, here, _))| ObjectFetches {
                key: key.clone(),
                fleet,
                here,
            })
            .collect();
        all.sort_by(|a, b| b.fleet.cmp(&a.fleet).then_with(|| a.key.cmp(&b.key)));
        all.truncate(FETCH_LOG_SHOWN);
        all
    }
}

/// One object's origin fetches, for `/status`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct ObjectFetches {
    /// The cache key (its first 200 bytes).
    pub(crate) key: String,
    /// Fetches with the fleet's lease, summed over every node (this week).
    pub(crate) fleet: u64,
    /// Of those, this node's since it started.
    pub(crate) here: u64,
}

/// The fleet-wide origin budget's use by this node, for `/status`
/// (`fleet.origin_slots`) and `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct OriginSlots {
    /// Slots granted (this node's requests to an origin under
    /// `fleet_max_inflight`).
    pub(crate) granted: u64,
    /// Answers "full": every slot of the server taken fleet-wide.
    pub(crate) full: u64,
    /// Asked, but Redis did not answer well (breaker open, deadline, error,
    /// a bad answer): went on under the node's own budget.
    pub(crate) failed_open: u64,
    /// Held now.
    pub(crate) held: u64,
    /// Lost while held: the lease expired (renewals failed).
    pub(crate) lost: u64,
}

/// Large objects shared as pieces (issue 30), for `/status`
/// (`fleet.pieces`) and `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct FleetPieces {
    /// Pieces written to Redis.
    pub(crate) written: u64,
    /// Pieces read from Redis and verified.
    pub(crate) read: u64,
    /// Large copies not used: a piece missing, short or failing its digest.
    pub(crate) bad: u64,
    /// Large objects not written or read for want of room in
    /// `fleet.max_pieces_in_flight`.
    pub(crate) over_budget: u64,
    /// Pieces of another node's body streamed while it was written.
    pub(crate) streamed: u64,
    /// Pieces of a fill that did not commit, deleted.
    pub(crate) forgotten: u64,
    /// Bodies streamed from another node while it wrote them.
    pub(crate) streams: u64,
    /// Of those, cut before whole.
    pub(crate) streams_cut: u64,
}

impl FleetStats {
    /// The pieces' counters.
    pub(crate) fn pieces(&self) -> FleetPieces {
        let n = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        FleetPieces {
            written: n(&self.pieces_written),
            read: n(&self.pieces_read),
            bad: n(&self.pieces_bad),
            over_budget: n(&self.pieces_over_budget),
            streamed: n(&self.pieces_streamed),
            forgotten: n(&self.pieces_forgotten),
            streams: n(&self.streams),
            streams_cut: n(&self.streams_cut),
        }
    }

    /// The origin budget's counters.
    pub(crate) fn origin_slots(&self) -> OriginSlots {
        let n = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        OriginSlots {
            granted: n(&self.origin_granted),
            full: n(&self.origin_full),
            failed_open: n(&self.origin_failed_open),
            held: n(&self.origin_held),
            lost: n(&self.origin_lost),
        }
    }
}

/// Counters of the fleet's work on this node.
#[derive(Default)]
pub(crate) struct FleetStats {
    /// Local misses answered from Redis (another node's copy).
    pub(crate) shared_hits: AtomicU64,
    /// Leases taken: this node fetched for the fleet.
    pub(crate) leases_acquired: AtomicU64,
    /// Fetches that found another node's lease and waited for its copy.
    pub(crate) leases_held: AtomicU64,
    /// Leases this node holds now (fetches for the fleet in flight).
    pub(crate) leases_active: AtomicU64,
    /// Leases this node lost before storing: they expired (a renewal found
    /// another node's, or a later lease stored first).
    pub(crate) leases_lost: AtomicU64,
    /// Leases released late: given up while Redis was out of reach, let go
    /// once it answered again.
    pub(crate) leases_released_late: AtomicU64,
    /// Waits that ended without a copy (fetched alone, stored locally).
    pub(crate) waits_timed_out: AtomicU64,
    /// Objects stored in Redis.
    pub(crate) commits: AtomicU64,
    /// Stores refused: a purge came after the lease, or a later lease stored.
    pub(crate) commits_refused: AtomicU64,
    /// Objects not put in Redis: larger than `fleet.max_object_size`.
    pub(crate) too_large: AtomicU64,
    /// Entries read from Redis that failed verification (served as misses).
    pub(crate) bad_entries: AtomicU64,
    /// Pieces of large objects written to Redis.
    pub(crate) pieces_written: AtomicU64,
    /// Pieces of large objects read from Redis and verified.
    pub(crate) pieces_read: AtomicU64,
    /// Large copies not used: a piece missing, short or failing its digest
    /// (each also a bad entry).
    pub(crate) pieces_bad: AtomicU64,
    /// Large objects not written or read: `fleet.max_pieces_in_flight` had
    /// no room within a second (stored locally; fetched).
    pub(crate) pieces_over_budget: AtomicU64,
    /// Pieces of another node's body streamed while it was written, each
    /// verified (stream_in.rs).
    pub(crate) pieces_streamed: AtomicU64,
    /// Pieces of a fill that did not commit deleted (stream_out.rs).
    pub(crate) pieces_forgotten: AtomicU64,
    /// Bodies streamed from another node while it wrote them.
    pub(crate) streams: AtomicU64,
    /// Of those, cut before whole (the writer died, stalled or did not
    /// commit; a piece did not verify): their clients saw a cut.
    pub(crate) streams_cut: AtomicU64,
    /// Entries (or Vary markers) without a valid signature (fleet secret
    /// set): forged, or written by a node with another secret or none.
    pub(crate) entries_refused: AtomicU64,
    /// Purge messages without a valid signature: not applied.
    pub(crate) purges_refused: AtomicU64,
    /// Signed purge messages copied into the stream later: not applied.
    pub(crate) purges_replayed: AtomicU64,
    /// Purges this node sent to the fleet.
    pub(crate) purges_sent: AtomicU64,
    /// Purges from other nodes applied here.
    pub(crate) purges_applied: AtomicU64,
    /// Summed lag of those purges, from being sent (Redis' clock at `XADD`)
    /// to applied here, in ms.
    pub(crate) purge_lag_ms_sum: AtomicU64,
    /// The longest such lag, in ms.
    pub(crate) purge_lag_ms_max: AtomicU64,
    /// Times this node could not know which purges it missed (a wiped
    /// Redis, a trimmed stream, no saved position) and marked every local
    /// object stale instead.
    pub(crate) purge_gaps: AtomicU64,
    /// Fleet-wide origin slots granted to this node (`fleet_max_inflight`).
    pub(crate) origin_granted: AtomicU64,
    /// Origin slot requests answered full: every slot of the server taken.
    pub(crate) origin_full: AtomicU64,
    /// Origin slot requests Redis did not answer (or answered with
    /// something else than a grant or full): the request went on under
    /// this node's own budget.
    pub(crate) origin_failed_open: AtomicU64,
    /// Origin slots this node holds now.
    pub(crate) origin_held: AtomicU64,
    /// Origin slot leases lost while held: they expired (renewals failed).
    pub(crate) origin_lost: AtomicU64,
}
