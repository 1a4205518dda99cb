//! Fleet mode: several nodes act as one cache on Redis. A shared tier
//! behind the local zones (a local hit never touches Redis; a local miss
//! asks Redis before the origin; a fill stores locally and, off the request
//! path, in Redis), one refresh per object for the fleet (a lease with a
//! fencing counter), and purges that reach every node (a Redis Stream).
//!
//! Every call has the `fleet.timeout` deadline and goes through a circuit
//! breaker ([`link`]): when Redis is down, hung, slow or full the node goes
//! on alone, its own single-flight and local tiers, with no failed request.
//! What comes back from Redis is verified (the disk file format: version,
//! lengths, CRC32s, the key) and a bad entry is a miss. With the fleet
//! secret ([`sign`]) every entry, Vary marker and purge message is signed,
//! and what does not verify is refused and counted: Redis write access
//! alone no longer decides what the nodes serve or purge.
//!
//! Owns: the Redis layout, leases, the shared tier's values, the purge
//! bus and the fleet-wide origin budget. Imports: [`crate::http`],
//! [`crate::config`], [`crate::telemetry`], [`crate::net`] (the seam of the
//! origin budget);
//! never the request path (it calls in, with keys and objects).
//!
//! # Layout
//! - `mod.rs`: [`Fleet`] (this node's part: its settings, link, signer,
//!   node id, the Redis key names) and what `/status` reads of it.
//! - `shared.rs`: [`SharedTier`], the seam the request path talks to (why
//!   not core's `Tier`: there), implemented by [`Fleet`].
//! - `lease.rs`: [`Before`] and [`Lease`]: take, fetch with the lease, or
//!   follow the lease of the node that holds it; renewal and release (late,
//!   too), and the hand-over of the leases held at a stop.
//! - `entries.rs`: the shared tier's values: the acquire script's answer,
//!   a value verified before use, the commit of a fill's object.
//! - `pieces.rs`: values over one piece (256 KiB) as pieces under one
//!   manifest: their keys, digests, budget and calls.
//! - `stream_out.rs`: a leader's body written to Redis as it arrives
//!   (pieces, then the manifest); `record.rs`: the writing record that
//!   lists the pieces so far; `stream_in.rs`: another node streaming that
//!   body before it is complete (read-while-write across the fleet).
//! - `purge_bus.rs`: purges sent to Redis and the stream other nodes poll.
//! - `origin_budget.rs`: [`OriginBudget`], the fleet-wide origin budget
//!   (`fleet_max_inflight`): leases on an upstream server's slots, the
//!   [`crate::net::shared_budget::SharedBudget`] net/ asks.
//! - `outbox.rs`: purges made while Redis was out, sent once it is back.
//! - `position.rs`: the purge stream position saved in the disk zones.
//! - `follow.rs`: the loop that applies other nodes' purges to this node's
//!   zones (through [`follow::Local`]: the fleet never imports the proxy).
//! - `stats.rs`: [`FleetStats`] and the fetch log, for `/status`.
//! - `link.rs`: the Redis connection, every call under the deadline and
//!   through the breaker (`breaker.rs`, its rules; `breaker_stats.rs`, what
//!   it reports; `breaker_sentinel.rs`, the PING on its own thread that
//!   its latency rule judges); `ops_stats.rs`: per-operation counters.
//! - `scripts.rs`: the Lua scripts; `sign.rs`: the fleet secret's
//!   signatures.
//! - `fingerprint.rs`: the config fingerprint (what decides keys and
//!   storing, digested per part); `members.rs`: heartbeats, the live
//!   members and config drift.
//! - `redis_info.rs`: Redis' own memory and evictions (`INFO`, read by a
//!   task every 5 s), for `/status` and `/metrics`.

mod breaker;
mod breaker_sentinel;
mod breaker_stats;
mod entries;
pub(crate) mod fingerprint;
pub(crate) mod follow;
mod lease;
mod link;
pub(crate) mod members;
mod ops_stats;
mod origin_budget;
mod outbox;
mod pieces;
mod position;
mod purge_bus;
mod purge_floor;
mod record;
mod redis_info;
mod scripts;
mod shared;
mod sign;
mod stats;
mod stream_in;
mod stream_out;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Script;
use tokio::time::Instant;

pub(crate) use breaker_stats::{BreakerState, BreakerStats, OpenReason, OpenedBy};
use link::Link;
pub(crate) use ops_stats::OpSnapshot;
#[allow(unused_imports)] // until net/'s origin budget asks it (issue 27, i27-budget)
pub(crate) use origin_budget::OriginBudget;

use crate::config::{FleetConfig, FleetSecret};
use sign::Signer;

use lease::Unreleased;
pub(crate) use lease::{Before, Lease};
use outbox::Outbox;
pub(crate) use position::POSITION_FILE;
pub(crate) use purge_floor::SharedRule;
pub(crate) use redis_info::RedisMemory;
pub(crate) use shared::SharedTier;
use stats::FetchLog;
pub(crate) use stats::{FleetPieces, FleetStats, ObjectFetches, OriginSlots};
pub(crate) use stream_in::{Streamed, Streaming};
pub(crate) use stream_out::PieceWriter;

/// The log target of the lines the files split out of `mod.rs` write: the
/// module's own, as before the split (`CALMCACHE_LOG=calmcache::fleet=..`
/// and readers of the log key on it).
const LOG: &str = "calmcache::fleet";

/// This node's part in the fleet.
pub(crate) struct Fleet {
    /// Itself, for what outlives a call: a lease (released on drop) and a
    /// commit's task hold the fleet, a lease's renewal a weak reference.
    me: Weak<Fleet>,
    cfg: FleetConfig,
    link: Arc<Link>,
    /// Lease tokens: this node's id and a counter.
    node: String,
    tokens: AtomicU64,
    /// How old a copy in Redis may be, per key: the purges that named no
    /// key (prefix rules, tag and whole purges, epochs not yet accounted
    /// for; purge_floor.rs).
    floors: purge_floor::PurgeFloors,
    /// The last purge stream entry read.
    last_purge: Mutex<Option<String>>,
    /// Redis' data generation as last seen (`{prefix}epoch`).
    epoch: Mutex<Option<String>>,
    /// Redis' clock (ms) at the last poll, and when that was: purges are
    /// signed with Redis' time, as their stream entries get it.
    redis_clock: Mutex<Option<(u64, Instant)>>,
    /// Signs and verifies with the fleet secret; `None`: unsigned. Swapped
    /// by a reload that rotates the secret.
    signer: std::sync::RwLock<Option<Arc<Signer>>>,
    /// Purges made while Redis was out of reach.
    outbox: Mutex<Outbox>,
    /// Leases to release once Redis answers again.
    unreleased: Mutex<Unreleased>,
    /// Leases held now (lease.rs: handed over at a stop).
    held: Mutex<lease::Held>,
    /// Commits and releases running off the request path (lease.rs:
    /// waited for at a stop).
    work: tokio_util::task::TaskTracker,
    /// The objects fetched for the fleet lately.
    fetch_log: Mutex<FetchLog>,
    /// Files keeping the purge stream position across restarts (one per
    /// disk zone: what they hold must learn of the purges made meanwhile).
    position_files: Mutex<Vec<std::path::PathBuf>>,
    /// The position last saved in them.
    saved_position: Mutex<Option<String>>,
    epoch_script: Script,
    acquire: Script,
    commit: Script,
    release: Script,
    renew: Script,
    purge_key: Script,
    purge_before: Script,
    /// Fleet membership: heartbeats, the live members, config drift
    /// (members.rs).
    members: members::Members,
    members_script: Script,
    leave_script: Script,
    /// Bytes of large values in flight (`fleet.max_pieces_in_flight`).
    pieces: pieces::PieceBudget,
    /// What the fleet did here.
    pub(crate) stats: FleetStats,
}

impl Fleet {
    /// The fleet link for `cfg` (nothing waits for Redis here).
    pub(crate) fn new(cfg: &FleetConfig) -> Result<Arc<Fleet>, redis::RedisError> {
        let link = Link::new(cfg)?;
        let node = format!(
            "{}-{}-{:08x}",
            hostname(),
            std::process::id(),
            rand::random::<u32>()
        );
        Ok(Arc::new_cyclic(|me| Fleet {
            me: me.clone(),
            cfg: cfg.clone(),
            link,
            node,
            tokens: AtomicU64::new(0),
            floors: purge_floor::PurgeFloors::default(),
            last_purge: Mutex::new(None),
            epoch: Mutex::new(None),
            redis_clock: Mutex::new(None),
            signer: std::sync::RwLock::new(
                cfg.secret
                    .as_ref()
                    .map(|s| Arc::new(Signer::new(s, &cfg.prefix))),
            ),
            outbox: Mutex::new(Outbox::default()),
            unreleased: Mutex::new(Unreleased::default()),
            held: Mutex::new(lease::Held::default()),
            work: tokio_util::task::TaskTracker::new(),
            fetch_log: Mutex::new(FetchLog::default()),
            position_files: Mutex::new(Vec::new()),
            saved_position: Mutex::new(None),
            epoch_script: scripts::epoch(),
            acquire: scripts::acquire(),
            commit: scripts::commit(),
            release: scripts::release(),
            renew: scripts::renew(),
            purge_key: scripts::purge_key(),
            purge_before: scripts::purge_before(),
            members: members::Members::default(),
            members_script: scripts::members(),
            leave_script: scripts::leave(),
            pieces: pieces::PieceBudget::new(cfg.max_pieces_in_flight),
            stats: FleetStats::default(),
        }))
    }

    /// The `Arc` this fleet lives in.
    fn arc(&self) -> Arc<Fleet> {
        // Invariant: a Fleet is only made by `Fleet::new`, inside an Arc,
        // and `&self` borrows from that Arc: it is alive.
        self.me.upgrade().expect("a Fleet lives in its Arc")
    }

    /// The settings it runs with.
    pub(crate) fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// Takes the secrets of a reloaded config (the rest of it unchanged).
    pub(crate) fn rekey(&self, secret: Option<&FleetSecret>) {
        *self.signer.write().unwrap_or_else(|p| p.into_inner()) =
            secret.map(|s| Arc::new(Signer::new(s, &self.cfg.prefix)));
    }

    /// The signer, when the fleet secret is set.
    fn signer(&self) -> Option<Arc<Signer>> {
        self.signer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Entries and purges are signed (the fleet secret is set).
    pub(crate) fn signed(&self) -> bool {
        self.signer().is_some()
    }

    /// Redis' clock now, as last read (ms); this node's own before the
    /// first poll.
    fn redis_now_ms(&self) -> u64 {
        let clock = *self.redis_clock.lock().unwrap_or_else(|p| p.into_inner());
        match clock {
            Some((ms, at)) => ms + u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX),
            None => wall_ms_of(Instant::now()),
        }
    }

    /// This node's id in lease tokens and purge messages.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// Closed, open or half-open.
    pub(crate) fn breaker(&self) -> BreakerState {
        self.link.state()
    }

    /// `{prefix}{hash}:{what}`.
    fn key(&self, hash: &str, what: &str) -> String {
        format!("{}{{{hash}}}:{what}", self.cfg.prefix)
    }

    /// The purge epoch key (no hash tag: read alone).
    fn epoch_key(&self) -> String {
        format!("{}purged_before", self.cfg.prefix)
    }

    /// The purge stream key.
    fn stream_key(&self) -> String {
        format!("{}purges", self.cfg.prefix)
    }

    /// The objects this node fetched for the fleet lately that the fleet
    /// fetched most.
    pub(crate) fn most_fetched(&self) -> Vec<ObjectFetches> {
        self.fetch_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .most_fetched()
    }

    /// Call counters: answered, failed, timed out, skipped (breaker open),
    /// mean latency in microseconds, connections built.
    pub(crate) fn calls(&self) -> [u64; 6] {
        let s = &self.link.stats;
        let ok = s.ok.load(Ordering::Relaxed);
        [
            ok,
            s.errors.load(Ordering::Relaxed),
            s.timeouts.load(Ordering::Relaxed),
            s.skipped.load(Ordering::Relaxed),
            s.micros
                .load(Ordering::Relaxed)
                .checked_div(ok)
                .unwrap_or(0),
            s.reconnects.load(Ordering::Relaxed),
        ]
    }

    /// The last failed Redis call: its operation and error.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.link.last_error()
    }

    /// Call counters and latency per operation (acquire, commit, ...).
    pub(crate) fn ops(&self) -> std::collections::BTreeMap<&'static str, OpSnapshot> {
        self.link.ops.snapshot()
    }

    /// The breaker's transitions, by reason, and what its latency rule sees.
    pub(crate) fn breaker_stats(&self) -> BreakerStats {
        self.link.breaker().stats()
    }
}

/// The wall-clock milliseconds of a monotonic instant in the past.
fn wall_ms_of(at: Instant) -> u64 {
    let wall = SystemTime::now() - at.elapsed();
    wall.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "node".to_string())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
