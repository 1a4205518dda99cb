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
//! Owns: the Redis layout, leases, the shared tier's values and the purge
//! bus. Imports: [`crate::http`], [`crate::config`], [`crate::telemetry`];
//! never the request path (it calls in, with keys and objects).

mod breaker;
pub(crate) mod follow;
mod link;
mod ops_stats;
mod scripts;
mod sign;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use calmcache_core::disk_format::{encode_object, parse_object};
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::{CacheKey, CachedObject, PurgeMode};
use http::HeaderName;
use redis::{Script, Value};
use tokio::time::Instant;

pub(crate) use breaker::{BreakerState, BreakerStats, OpenReason, OpenedBy};
use link::Link;
use ops_stats::Op;
pub(crate) use ops_stats::OpSnapshot;

use crate::config::{FleetConfig, FleetSecret};
use sign::{PurgeCheck, Signer};

/// The longest a request waits for another node's fetch before fetching
/// itself (its route's `lock_timeout` when shorter).
const WAIT_MAX: Duration = Duration::from_secs(5);
/// Purges read from the stream per poll.
const PURGES_PER_POLL: usize = 100;
/// Entries the purge stream keeps (about; trimmed as it grows).
const PURGE_STREAM_LEN: usize = 10_000;
/// Purges kept while Redis is out; past it, one soft purge of everything.
const OUTBOX_MAX: usize = 1_000;

/// What a fill does after asking the fleet.
pub(crate) enum Before {
    /// Another node stored a fresh copy newer than ours: take it, no fetch.
    /// For a URI whose responses vary, the copy is the request's variant
    /// and the names are the request headers they vary on.
    Take(Arc<CachedObject>, Option<Vec<HeaderName>>),
    /// Fetch from the origin: with the fleet's lease (store it in Redis
    /// afterwards), or without (Redis unreachable, or another node's fetch
    /// did not end within the wait): then the object stays local.
    Fetch(Option<Lease>),
}

/// Where one object lives in Redis: a URI's (`:m`, `:l`), or one variant
/// of a URI whose responses vary (`:v:S`, `:vl:S`).
#[derive(Clone)]
struct Target {
    /// The URI's hash tag.
    hash: String,
    /// The object's entry.
    meta: String,
    /// Its lease.
    lease: String,
    /// For a variant: the names it varies on (as Redis keeps them), its
    /// selecting values, and `S`.
    variant: Option<(String, String, String)>,
}

impl Target {
    fn uri(fleet: &Fleet, hash: &str) -> Target {
        Target {
            hash: hash.to_owned(),
            meta: fleet.key(hash, "m"),
            lease: fleet.key(hash, "l"),
            variant: None,
        }
    }

    fn variant(
        fleet: &Fleet,
        hash: &str,
        primary: &CacheKey,
        names: &str,
        secondary: &str,
    ) -> Target {
        let s = variant_id(primary, secondary);
        Target {
            hash: hash.to_owned(),
            meta: fleet.key(hash, &format!("v:{s}")),
            lease: fleet.key(hash, &format!("vl:{s}")),
            variant: Some((names.to_owned(), secondary.to_owned(), s)),
        }
    }
}

/// This node's lease on one object: its fetch is the fleet's.
pub(crate) struct Lease {
    fleet: Arc<Fleet>,
    target: Target,
    token: String,
    fence: u64,
    /// When the lease was taken (Redis clock, ms): the object's `since`.
    since_ms: u64,
    done: bool,
    /// Extends the lease every third of its time while the fetch runs.
    renewal: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// `true`: Redis has dealt with the lease (stored or refused, and
    /// released it); dropping it does nothing more.
    fn settled(&mut self, done: bool) {
        self.done = done;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewal.abort();
        self.fleet
            .stats
            .leases_active
            .fetch_sub(1, Ordering::Relaxed);
        if self.done {
            return;
        }
        // Not committed (not storable, failed, too large): let another
        // node take over at once instead of after the lease's TTL. When
        // Redis cannot be told now, it is told once it answers again.
        let fleet = self.fleet.clone();
        let lease = self.target.lease.clone();
        let token = std::mem::take(&mut self.token);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if fleet.release(&lease, &token).await.is_none() {
                    fleet.unreleased().push_within(lease, token);
                }
            });
        }
    }
}

/// Leases this node gave up while Redis was out of reach: released when it
/// answers again (compare-and-delete: one another node took meanwhile is
/// left alone), so the other nodes need not wait for them to expire.
#[derive(Default)]
struct Unreleased(Vec<(String, String)>);

/// Leases kept for a late release; past it, they expire on their own.
const UNRELEASED_MAX: usize = 1_024;

impl Unreleased {
    fn push_within(&mut self, lease: String, token: String) {
        if self.0.len() < UNRELEASED_MAX {
            self.0.push((lease, token));
        }
    }
}

/// The objects this node fetched for the fleet lately, with the fleet's
/// count of fetches of each (the object's fencing counter in Redis: one per
/// lease any node took, kept a week), for `/status`.
#[derive(Default)]
struct FetchLog {
    /// Key (shortened) → (the fleet's fetches, this node's, last fetch).
    objects: std::collections::HashMap<String, (u64, u64, Instant)>,
}

/// Objects [`FetchLog`] keeps; the one fetched longest ago goes first.
const FETCH_LOG_MAX: usize = 256;
/// Objects `/status` lists (the most fetched).
const FETCH_LOG_SHOWN: usize = 10;

impl FetchLog {
    fn note(&mut self, key: &CacheKey, fleet_fetches: u64) {
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

    fn most_fetched(&self) -> Vec<ObjectFetches> {
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
}

/// This node's part in the fleet.
pub(crate) struct Fleet {
    cfg: FleetConfig,
    link: Arc<Link>,
    /// Lease tokens: this node's id and a counter.
    node: String,
    tokens: AtomicU64,
    /// Objects stored before this (Redis clock, ms) are not used: the last
    /// fleet-wide prefix, tag or whole purge.
    purged_before: AtomicU64,
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
    /// What the fleet did here.
    pub(crate) stats: FleetStats,
}

/// What a poll of the purge stream found.
#[derive(Default)]
pub(crate) struct Polled {
    /// Other nodes' purges, in order.
    pub(crate) purges: Vec<FleetPurge>,
    /// Some purges may have been missed: mark every local object stale.
    pub(crate) gap: bool,
}

/// A purge another node sent.
pub(crate) struct FleetPurge {
    /// The admin API's JSON form.
    pub(crate) json: String,
    /// How long it had been in the stream when read (Redis' clock), ms.
    lag_ms: u64,
    /// When it was read.
    read_at: Instant,
}

/// Purges this node could not hand to Redis yet.
#[derive(Default)]
struct Outbox {
    /// Purges to send, in order.
    pending: Vec<String>,
    /// A purge could not reach the shared tier: purge it whole on return.
    redis_missed: bool,
    /// A poll failed: on return, check the stream was not trimmed past us.
    missed_polls: bool,
}

/// The answer of the acquire script.
enum Acquired {
    /// The blob, and when its lease was taken (`since_ms`, signed with it).
    Newer(Vec<u8>, u64),
    Ours {
        fence: u64,
        now_ms: u64,
        token: String,
    },
    Held {
        pttl_ms: i64,
    },
    /// The URI's responses vary on these names (comma-separated).
    Varies(String),
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
        Ok(Arc::new(Fleet {
            cfg: cfg.clone(),
            link,
            node,
            tokens: AtomicU64::new(0),
            purged_before: AtomicU64::new(0),
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
            stats: FleetStats::default(),
        }))
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

    /// Before a fill goes to the origin for `key` (the copy it would
    /// replace is `ours`; the request's headers that select a variant are
    /// `selecting`): a newer copy in Redis, or the lease to fetch, or a wait
    /// (at most `wait`) for the node that holds it. A URI whose responses
    /// vary is asked again for the request's variant.
    pub(crate) async fn before_fetch(
        self: &Arc<Self>,
        key: &CacheKey,
        ours: Option<&CachedObject>,
        wait: Duration,
        selecting: &http::HeaderMap,
    ) -> Before {
        let hash = hash_of(key);
        let mut target = Target::uri(self, &hash);
        let mut names = None;
        let ours_ms = ours.map_or(0, |o| wall_ms_of(o.meta.stored_at));
        let deadline = Instant::now() + wait.min(WAIT_MAX);
        let mut waited = false;
        let mut pause = Duration::from_millis(10);
        let mut try_lease = true;
        loop {
            let Some(answer) = self.acquire(&target, ours_ms, try_lease).await else {
                return Before::Fetch(None);
            };
            match answer {
                Acquired::Varies(text) => {
                    let Some(plain) = self.open_names(key, &text) else {
                        return Before::Fetch(None);
                    };
                    // A variant never varies again: a bad entry otherwise.
                    let parsed = parse_names(plain).filter(|_| names.is_none());
                    let Some(parsed) = parsed else {
                        self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                        return Before::Fetch(None);
                    };
                    let secondary = crate::http::vary::secondary(&parsed, selecting);
                    target = Target::variant(self, &hash, key, &text, &secondary);
                    names = Some(parsed);
                    try_lease = true;
                }
                Acquired::Newer(blob, since_ms) => {
                    match self.decode(key, &target, blob, since_ms) {
                        Some(object) => {
                            self.stats.shared_hits.fetch_add(1, Ordering::Relaxed);
                            return Before::Take(object, names);
                        }
                        // A bad entry: fetch (the lease goes to whoever asks next).
                        None => return Before::Fetch(None),
                    }
                }
                Acquired::Ours {
                    fence,
                    now_ms,
                    token,
                } => {
                    self.stats.leases_acquired.fetch_add(1, Ordering::Relaxed);
                    self.stats.leases_active.fetch_add(1, Ordering::Relaxed);
                    self.fetch_log
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .note(key, fence);
                    let renewal = self.renew_while_fetching(&target.lease, &token);
                    return Before::Fetch(Some(Lease {
                        fleet: self.clone(),
                        token,
                        target,
                        fence,
                        since_ms: now_ms,
                        done: false,
                        renewal,
                    }));
                }
                Acquired::Held { pttl_ms } => {
                    if !waited {
                        waited = true;
                        self.stats.leases_held.fetch_add(1, Ordering::Relaxed);
                    }
                    if Instant::now() + pause > deadline {
                        self.stats.waits_timed_out.fetch_add(1, Ordering::Relaxed);
                        return Before::Fetch(None);
                    }
                    tokio::time::sleep(jittered(pause)).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                    // Ask for the lease again only once it is gone (its
                    // holder died or gave up); until then, only look.
                    try_lease = pttl_ms == -2;
                }
            }
        }
    }

    /// A task that extends the lease every third of `fleet.lease` until
    /// aborted (the lease committed, released or dropped): a fetch longer
    /// than the lease keeps it, a dead node's lease still expires.
    fn renew_while_fetching(
        self: &Arc<Self>,
        lease: &str,
        token: &str,
    ) -> tokio::task::JoinHandle<()> {
        let fleet = Arc::downgrade(self);
        let key = lease.to_owned();
        let token = token.to_owned();
        let every = self.cfg.lease / 3;
        let lease_ms = u64::try_from(self.cfg.lease.as_millis()).unwrap_or(u64::MAX);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(fleet) = fleet.upgrade() else {
                    return;
                };
                let script = &fleet.renew;
                let (key, token) = (&key, &token);
                let kept: Option<i64> = fleet
                    .link
                    .call(Op::Renew, |mut conn| async move {
                        script
                            .key(key)
                            .arg(token)
                            .arg(lease_ms)
                            .invoke_async(&mut conn)
                            .await
                    })
                    .await;
                if kept == Some(0) {
                    // Not ours any more: it expired (renewals failed).
                    fleet.stats.leases_lost.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        })
    }

    fn token(&self) -> String {
        format!(
            "{}:{}",
            self.node,
            self.tokens.fetch_add(1, Ordering::Relaxed)
        )
    }

    async fn acquire(
        self: &Arc<Self>,
        target: &Target,
        ours_ms: u64,
        try_lease: bool,
    ) -> Option<Acquired> {
        let keys = [
            target.meta.clone(),
            target.lease.clone(),
            self.key(&target.hash, "f"),
        ];
        let token = self.token();
        let sent = token.clone();
        let lease_ms = u64::try_from(self.cfg.lease.as_millis()).unwrap_or(u64::MAX);
        let purged_before = self.purged_before.load(Ordering::Relaxed);
        let script = &self.acquire;
        let keys = &keys;
        let value: Option<Value> = self
            .link
            .call(Op::Acquire, |mut conn| async move {
                script
                    .key(&keys[0])
                    .key(&keys[1])
                    .key(&keys[2])
                    .arg(ours_ms)
                    .arg(sent.as_str())
                    .arg(lease_ms)
                    .arg(purged_before)
                    .arg(u8::from(try_lease))
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
        let Some(Value::Array(items)) = value else {
            // Unanswered in time, the script may still have run and taken
            // the lease for a fetch that will not happen: let it go once
            // Redis answers (the other nodes need not wait out its TTL).
            if try_lease {
                self.unreleased().push_within(keys[1].clone(), token);
            }
            return None;
        };
        match items.as_slice() {
            [Value::Int(1), Value::BulkString(blob), Value::Int(since)] => {
                Some(Acquired::Newer(blob.clone(), u64::try_from(*since).ok()?))
            }
            [Value::Int(2), Value::Int(fence), Value::Int(now)] => Some(Acquired::Ours {
                fence: u64::try_from(*fence).ok()?,
                now_ms: u64::try_from(*now).ok()?,
                token,
            }),
            [Value::Int(3), Value::Int(pttl)] => Some(Acquired::Held { pttl_ms: *pttl }),
            [Value::Int(4), Value::BulkString(names)] => {
                Some(Acquired::Varies(String::from_utf8(names.clone()).ok()?))
            }
            _ => None,
        }
    }

    /// A value read from Redis, verified; `None` (counted) when it is not
    /// a whole, intact object stored for `target` of `key` (for a variant:
    /// under its variant key, with the request's selecting values) by a
    /// lease taken at `since_ms`, or, with the fleet secret, not signed for
    /// them or no longer current.
    fn decode(
        &self,
        key: &CacheKey,
        target: &Target,
        blob: Vec<u8>,
        since_ms: u64,
    ) -> Option<Arc<CachedObject>> {
        let expected = match &target.variant {
            Some((_, secondary, _)) => fleet_variant_key(key, secondary),
            None => key.clone(),
        };
        let signer = self.signer();
        let blob = match &signer {
            None => blob,
            Some(signer) => match signer.open_entry(&expected, since_ms, blob) {
                Some(blob) => blob,
                None => {
                    self.refused_entry(key);
                    return None;
                }
            },
        };
        match parse_object(blob, Some(&expected.as_ref()), true) {
            Ok((_, object))
                if object.vary_index().is_none()
                    && object.variant() == target.variant.as_ref().map(|v| v.1.as_str())
                    && framing_agrees(&object)
                    && (signer.is_none() || self.current(&object, since_ms)) =>
            {
                Some(Arc::new(object))
            }
            Ok(_) => {
                self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(key = %key, error = %e, "bad entry in redis: a miss");
                None
            }
        }
    }

    /// A signed entry's own (signed) times allow its use: its lease came
    /// after the last fleet-wide purge this node knows of, and it is fresh
    /// by its own meta. Redis' `since_ms` and `fresh_until_ms` fields are
    /// not signed: an old entry put back with newer ones is refused here.
    fn current(&self, object: &CachedObject, since_ms: u64) -> bool {
        since_ms >= self.purged_before.load(Ordering::Relaxed)
            && object.meta.is_fresh(Instant::now())
    }

    /// An entry or Vary marker that did not verify: counted, logged (rate
    /// limited: a forger can write many).
    fn refused_entry(&self, key: &CacheKey) {
        self.stats.entries_refused.fetch_add(1, Ordering::Relaxed);
        static REFUSED: WarnLimit = WarnLimit::new();
        calmcache_core::warn_limited!(
            REFUSED,
            "a fleet entry in redis has no valid signature (forged, or written by a node \
             with another secret or none): refused, fetched from the origin",
            key = %key
        );
    }

    /// The Vary names Redis keeps for the URI `key`: with the fleet secret,
    /// only when their signature verifies (else refused and counted).
    fn open_names<'a>(&self, key: &CacheKey, text: &'a str) -> Option<&'a str> {
        let Some(signer) = self.signer() else {
            return Some(text);
        };
        let names = signer.open_names(key, text);
        if names.is_none() {
            self.refused_entry(key);
        }
        names
    }

    /// The Vary names `names` of the URI `primary` as Redis keeps them
    /// (signed with the fleet secret).
    fn names_for_redis(&self, primary: &CacheKey, names: &str) -> String {
        match self.signer() {
            Some(signer) => signer.seal_names(primary, names),
            None => names.to_owned(),
        }
    }

    /// After `object` was stored locally by a fill for the URI `primary`
    /// that held `lease` (`names`: the request headers the response varies
    /// on, when it does): stores it in Redis off the request path (larger
    /// ones stay local; the lease is released either way).
    pub(crate) fn commit(
        self: &Arc<Self>,
        lease: Lease,
        primary: &CacheKey,
        object: Arc<CachedObject>,
        names: Option<&[HeaderName]>,
    ) {
        // A body left in a disk zone's file counts whole (it is read back).
        let in_file = object.lazy_body().map_or(0, |l| l.len);
        let fits = object.vary_index().is_none()
            && object.weight() as u64 + in_file <= self.cfg.max_object_size;
        if !fits {
            self.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return; // Dropping the lease releases it.
        }
        // Where it goes: the URI's entry, or its variant's (the lease was
        // taken on the URI before it was known to vary, or on the variant).
        let (target, key) = match (object.variant(), names, &lease.target.variant) {
            (None, None, None) => (lease.target.clone(), primary.clone()),
            (Some(secondary), Some(names), None) => {
                let text = self.names_for_redis(primary, &names_text(names));
                let target = Target::variant(self, &lease.target.hash, primary, &text, secondary);
                (target, fleet_variant_key(primary, secondary))
            }
            (Some(secondary), Some(_), Some((_, leased, _))) if secondary == leased.as_str() => {
                (lease.target.clone(), fleet_variant_key(primary, secondary))
            }
            // The response no longer matches what the lease was for (the
            // URI stopped or started varying): keep it local.
            _ => return,
        };
        let fleet = self.clone();
        tokio::spawn(async move {
            let mut lease = lease;
            // A body in a file is read back (on a blocking thread) whole.
            let object = match whole(object).await {
                Ok(object) => object,
                Err(e) => {
                    tracing::debug!(key = %key, error = %e, "not put in redis");
                    return; // Dropping the lease releases it.
                }
            };
            let stored_at = SystemTime::now() - object.meta.stored_at.elapsed();
            let blob = match encode_object(&key, &object, stored_at) {
                Ok(blob) => match fleet.signer() {
                    Some(signer) => signer.seal_entry(&key, lease.since_ms, &blob),
                    None => blob,
                },
                Err(e) => {
                    // Dropping the lease releases it.
                    tracing::debug!(key = %key, error = %e, "not put in redis");
                    return;
                }
            };
            let now = Instant::now();
            let fresh_ms = object
                .meta
                .freshness
                .lifetime
                .saturating_sub(object.meta.age(now));
            let keep = fresh_ms
                + object
                    .meta
                    .freshness
                    .stale_while_revalidate
                    .max(object.meta.freshness.stale_if_error)
                + Duration::from_secs(1);
            let hash = &target.hash;
            let mut keys = vec![
                target.meta.clone(),
                lease.target.lease.clone(),
                fleet.key(hash, "p"),
            ];
            let mut vary_args = Vec::new();
            if let Some((names, _, s)) = &target.variant {
                keys.push(fleet.key(hash, "m"));
                keys.push(fleet.key(hash, "vs"));
                vary_args.push(names.clone());
                vary_args.push(s.clone());
            }
            let purged_before = fleet.purged_before.load(Ordering::Relaxed);
            let script = &fleet.commit;
            let token = lease.token.clone();
            let (fence, since) = (lease.fence, lease.since_ms);
            let stored: Option<i64> = fleet
                .link
                .call(Op::Commit, |mut conn| async move {
                    let mut invocation = script.prepare_invoke();
                    for key in &keys {
                        invocation.key(key);
                    }
                    invocation
                        .arg(&token)
                        .arg(fence)
                        .arg(since)
                        .arg(u64::try_from(fresh_ms.as_millis()).unwrap_or(u64::MAX))
                        .arg(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1))
                        .arg(blob)
                        .arg(purged_before);
                    for arg in &vary_args {
                        invocation.arg(arg);
                    }
                    invocation.invoke_async(&mut conn).await
                })
                .await;
            // The script released the lease (when it answered).
            lease.settled(stored.is_some());
            match stored {
                Some(1) => {
                    fleet.stats.commits.fetch_add(1, Ordering::Relaxed);
                }
                Some(refused) => {
                    fleet.stats.commits_refused.fetch_add(1, Ordering::Relaxed);
                    if refused < 0 {
                        // A later lease stored first: ours had expired.
                        fleet.stats.leases_lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Redis failed: the lease expires by itself.
                None => {}
            }
        });
    }

    /// Purges `key` in Redis (hard: removed and fenced against fills that
    /// began before; soft: marked stale). When Redis cannot be reached, the
    /// shared tier is purged whole once it is back (see [`Self::catch_up`]).
    pub(crate) async fn purge_key(self: &Arc<Self>, key: &CacheKey, mode: PurgeMode) {
        let hash = hash_of(key);
        let keys = [
            self.key(&hash, "m"),
            self.key(&hash, "p"),
            self.key(&hash, "vs"),
        ];
        let variants = self.key(&hash, "v:");
        let script = &self.purge_key;
        let hard = u8::from(mode == PurgeMode::Hard);
        let done = self
            .link
            .call(Op::Purge, |mut conn| async move {
                script
                    .key(&keys[0])
                    .key(&keys[1])
                    .key(&keys[2])
                    .arg(hard)
                    .arg(&variants)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await;
        if done.is_none() {
            self.outbox().redis_missed = true;
        }
    }

    /// A purge that names no single key (prefix, tag, everything): every
    /// object in Redis stored before now is ignored from now on.
    pub(crate) async fn purge_everything_before_now(self: &Arc<Self>) {
        let key = self.epoch_key();
        let script = &self.purge_before;
        let now: Option<u64> = self
            .link
            .call(Op::Purge, |mut conn| async move {
                script.key(key).invoke_async(&mut conn).await
            })
            .await;
        match now {
            Some(now) => {
                self.purged_before.fetch_max(now, Ordering::Relaxed);
            }
            None => self.outbox().redis_missed = true,
        }
    }

    /// Sends `purge` (the admin API's JSON form) to the other nodes; when
    /// Redis cannot take it now, it waits in the outbox (sent by
    /// [`Self::catch_up`] once Redis answers again). Returns the purges
    /// waiting.
    pub(crate) async fn publish_purge(self: &Arc<Self>, purge: String) -> usize {
        if self.outbox().pending.is_empty() && self.xadd(&purge).await {
            self.stats.purges_sent.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let mut outbox = self.outbox();
        if outbox.pending.len() < OUTBOX_MAX {
            outbox.pending.push(purge);
        } else {
            // Too many to replay one by one: the other nodes will mark
            // everything they hold stale instead.
            outbox.pending.clear();
            outbox
                .pending
                .push(r#"{"all":true,"soft":true}"#.to_string());
        }
        outbox.pending.len()
    }

    /// Adds `purge` to the stream: `node` and `purge`, and with the fleet
    /// secret `at` (Redis' clock as last read, ms) and `sig`, signed now
    /// (not when the purge was made: one from the outbox is sent later).
    async fn xadd(self: &Arc<Self>, purge: &str) -> bool {
        let key = self.stream_key();
        let node = self.node.clone();
        let signature = self.signer().map(|signer| {
            let at = self.redis_now_ms();
            (at, signer.sign_purge(&node, at, purge))
        });
        let sent: Option<String> = self
            .link
            .call(Op::Publish, |mut conn| async move {
                let mut cmd = redis::cmd("XADD");
                cmd.arg(&key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(PURGE_STREAM_LEN)
                    .arg("*")
                    .arg("node")
                    .arg(&node)
                    .arg("purge")
                    .arg(purge);
                if let Some((at, sig)) = &signature {
                    cmd.arg("at").arg(at).arg("sig").arg(sig);
                }
                cmd.query_async(&mut conn).await
            })
            .await;
        sent.is_some()
    }

    fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Purges waiting to be sent (Redis was out when they were made).
    pub(crate) fn purges_pending(&self) -> usize {
        self.outbox().pending.len()
    }

    /// Once Redis answers again after purges could not reach it: the
    /// shared tier's older objects are dropped (the keys purged meanwhile
    /// are not known one by one) and the waiting purges are sent, in order.
    async fn catch_up(self: &Arc<Self>) {
        let (missed, pending) = {
            let outbox = self.outbox();
            (outbox.redis_missed, outbox.pending.clone())
        };
        if missed {
            self.outbox().redis_missed = false;
            self.purge_everything_before_now().await;
        }
        for (sent, purge) in pending.iter().enumerate() {
            if !self.xadd(purge).await {
                self.outbox().pending.drain(..sent);
                return;
            }
            self.stats.purges_sent.fetch_add(1, Ordering::Relaxed);
        }
        self.outbox().pending.drain(..pending.len());
    }

    /// The purges other nodes sent since the last call (their JSON), and
    /// whether this node may have missed some: Redis lost its data (a new
    /// `{prefix}epoch`), or the stream was trimmed past the last entry read
    /// while Redis could not be reached. The purge epoch is brought up to
    /// date, and purges made while Redis was out are sent. The first call
    /// finds where to begin: where the disk zones' saved position says, or
    /// the stream's end (then, if the disk zones `held` objects, these are
    /// marked stale: what was purged meanwhile is not known).
    pub(crate) async fn poll_purges(self: &Arc<Self>, held: bool) -> Polled {
        let mut polled = Polled::default();
        let Some((epoch, redis_now_ms)) = self.redis_epoch().await else {
            self.outbox().missed_polls = true;
            return polled;
        };
        *self.redis_clock.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((redis_now_ms, Instant::now()));
        self.release_late().await;
        {
            let mut seen = self.epoch.lock().unwrap_or_else(|p| p.into_inner());
            if seen.as_ref().is_some_and(|s| *s != epoch) {
                tracing::warn!("redis lost its data: every local object is marked stale");
                polled.gap = true;
                // Its stream started over too: read the new one whole.
                *self.last_purge.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some("0-0".to_string());
            }
            *seen = Some(epoch.clone());
        }
        self.catch_up().await;
        self.poll_epoch().await;
        let key = self.stream_key();
        let last = self
            .last_purge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(last) = last else {
            // The first poll. Disk zones hold objects from before this
            // start: go on from the position saved with them, or, when there
            // is none to trust, mark them stale. Otherwise start at the end:
            // what came before is in Redis' state already.
            let files = self.position_files().clone();
            let saved = if files.is_empty() {
                Position::Missing
            } else {
                tokio::task::spawn_blocking(move || read_position(&files))
                    .await
                    .unwrap_or(Position::Unusable)
            };
            let saved = match saved {
                Position::Found(was, id) if was == epoch => Some(id),
                Position::Missing if !held => None,
                _ => {
                    tracing::info!("no purge stream position saved with the disk zones for this redis: the objects they hold are marked stale");
                    polled.gap = true;
                    None
                }
            };
            let start = match saved {
                Some(id) => {
                    // Away a while: entries past it may have been trimmed.
                    self.outbox().missed_polls = true;
                    Some(id)
                }
                None => self.stream_end(&key).await,
            };
            if let Some(id) = start {
                *self.last_purge.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
            }
            if polled.gap {
                self.stats.purge_gaps.fetch_add(1, Ordering::Relaxed);
            }
            return polled;
        };
        if std::mem::take(&mut self.outbox().missed_polls) {
            // Away a while: entries past `last` may have been trimmed.
            if let Some(first) = self.stream_start(&key).await {
                if stream_id_before(&last, &first) && last != "0-0" {
                    tracing::warn!("purges were missed while redis was out of reach: every local object is marked stale");
                    polled.gap = true;
                }
            }
        }
        let read: Option<Value> = self
            .link
            .call(Op::Poll, |mut conn| async move {
                redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(PURGES_PER_POLL)
                    .arg("STREAMS")
                    .arg(&key)
                    .arg(&last)
                    .query_async(&mut conn)
                    .await
            })
            .await;
        let Some(read) = read else {
            self.outbox().missed_polls = true;
            return polled;
        };
        // XREAD: [[stream, [entries]]] (RESP2) or a map (RESP3).
        let entries = match read {
            Value::Array(streams) => streams
                .into_iter()
                .filter_map(|s| match s {
                    Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                    _ => None,
                })
                .flat_map(stream_entries)
                .collect::<Vec<_>>(),
            Value::Map(streams) => streams
                .into_iter()
                .flat_map(|(_, entries)| stream_entries(entries))
                .collect(),
            _ => Vec::new(),
        };
        let read_at = Instant::now();
        for (id, fields) in entries {
            let sent_ms = stream_id_ms(&id);
            *self.last_purge.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
            let node = field(&fields, "node");
            if node.as_deref() == Some(self.node.as_str()) {
                continue;
            }
            if let Some(json) = self.admitted(&fields, sent_ms) {
                polled.purges.push(FleetPurge {
                    json,
                    lag_ms: redis_now_ms.saturating_sub(sent_ms),
                    read_at,
                });
            }
        }
        if polled.gap {
            self.stats.purge_gaps.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }

    /// The purge of a stream entry that Redis added at `entered_ms`, when
    /// it may be applied: with the fleet secret, only signed by a fleet
    /// secret at about that time (else refused and counted).
    fn admitted(&self, fields: &[(String, String)], entered_ms: u64) -> Option<String> {
        let purge = field(fields, "purge")?;
        let Some(signer) = self.signer() else {
            return Some(purge);
        };
        let node = field(fields, "node").unwrap_or_default();
        let at = field(fields, "at");
        let sig = field(fields, "sig");
        let check = signer.check_purge(&node, &purge, at.as_deref(), sig.as_deref(), entered_ms);
        let (counter, why) = match check {
            PurgeCheck::Valid => return Some(purge),
            PurgeCheck::Refused => (&self.stats.purges_refused, "no valid signature"),
            PurgeCheck::Replayed => (
                &self.stats.purges_replayed,
                "signed long before it entered the stream (a replay)",
            ),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        static REFUSED: WarnLimit = WarnLimit::new();
        calmcache_core::warn_limited!(
            REFUSED,
            "a purge message in the fleet's stream was refused, not applied",
            why,
            node = %node
        );
        None
    }

    /// Releases the leases given up while Redis was out of reach.
    async fn release_late(self: &Arc<Self>) {
        let late = std::mem::take(&mut self.unreleased().0);
        let mut left = late.into_iter();
        while let Some((lease, token)) = left.next() {
            match self.release(&lease, &token).await {
                None => {
                    let mut unreleased = self.unreleased();
                    unreleased.push_within(lease, token);
                    for (lease, token) in left {
                        unreleased.push_within(lease, token);
                    }
                    return;
                }
                Some(true) => {
                    self.stats
                        .leases_released_late
                        .fetch_add(1, Ordering::Relaxed);
                }
                // Expired meanwhile, or never taken (an acquire that
                // missed its deadline before the script ran).
                Some(false) => {}
            }
        }
    }

    /// Drops the lease `lease` if `token` still holds it: whether it did,
    /// or `None` when Redis could not be asked.
    async fn release(self: &Arc<Self>, lease: &str, token: &str) -> Option<bool> {
        let script = &self.release;
        self.link
            .call(Op::Release, |mut conn| async move {
                script
                    .key(lease)
                    .arg(token)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await
            .map(|deleted| deleted > 0)
    }

    fn unreleased(&self) -> std::sync::MutexGuard<'_, Unreleased> {
        self.unreleased.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn position_files(&self) -> std::sync::MutexGuard<'_, Vec<std::path::PathBuf>> {
        self.position_files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Where the purge stream position is kept across restarts: a file in
    /// each disk zone's directory (set at start and on every reload).
    pub(crate) fn keep_position_in(&self, files: Vec<std::path::PathBuf>) {
        *self.position_files() = files;
    }

    /// Saves the purge stream position (after the purges read up to it
    /// were applied) in the disk zones, if it moved; off the async workers.
    pub(crate) async fn save_position(&self) {
        let epoch = self.epoch.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let last = self
            .last_purge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (Some(epoch), Some(last)) = (epoch, last) else {
            return;
        };
        let line = format!("{epoch} {last}\n");
        let files = self.position_files().clone();
        {
            let mut saved = self
                .saved_position
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if files.is_empty() || saved.as_deref() == Some(line.as_str()) {
                return;
            }
            *saved = Some(line.clone());
        }
        let written = tokio::task::spawn_blocking(move || write_position(&files, &line)).await;
        if !matches!(written, Ok(Ok(()))) {
            // Tried again after the next poll.
            *self
                .saved_position
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
            if let Ok(Err(e)) = written {
                tracing::warn!(error = %e, "the purge stream position was not saved");
            }
        }
    }

    /// The objects this node fetched for the fleet lately that the fleet
    /// fetched most.
    pub(crate) fn most_fetched(&self) -> Vec<ObjectFetches> {
        self.fetch_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .most_fetched()
    }

    /// Redis' data generation (a random id set once, `SET NX`: another one
    /// means Redis started empty since we last looked) and its clock (ms).
    async fn redis_epoch(self: &Arc<Self>) -> Option<(String, u64)> {
        let key = format!("{}epoch", self.cfg.prefix);
        let mine = format!("{:016x}", rand::random::<u64>());
        let script = &self.epoch_script;
        self.link
            .call(Op::Poll, |mut conn| async move {
                script.key(key).arg(mine).invoke_async(&mut conn).await
            })
            .await
    }

    /// The id of the stream's last entry (`0-0` when empty).
    async fn stream_end(self: &Arc<Self>, key: &str) -> Option<String> {
        self.stream_edge(key, "XREVRANGE", "+", "-").await
    }

    /// The id of the stream's first entry (`0-0` when empty).
    async fn stream_start(self: &Arc<Self>, key: &str) -> Option<String> {
        self.stream_edge(key, "XRANGE", "-", "+").await
    }

    async fn stream_edge(
        self: &Arc<Self>,
        key: &str,
        cmd: &str,
        from: &str,
        to: &str,
    ) -> Option<String> {
        let edge: Value = self
            .link
            .call(Op::Poll, |mut conn| async move {
                redis::cmd(cmd)
                    .arg(key)
                    .arg(from)
                    .arg(to)
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Some(
            stream_entries(edge)
                .first()
                .map_or_else(|| "0-0".to_string(), |(id, _)| id.clone()),
        )
    }

    async fn poll_epoch(self: &Arc<Self>) {
        let key = self.epoch_key();
        let epoch: Option<Option<u64>> = self
            .link
            .call(Op::Poll, |mut conn| async move {
                redis::cmd("GET").arg(&key).query_async(&mut conn).await
            })
            .await;
        if let Some(Some(epoch)) = epoch {
            self.purged_before.fetch_max(epoch, Ordering::Relaxed);
        }
    }

    /// A purge from another node was applied here.
    pub(crate) fn purge_applied(&self, purge: &FleetPurge) {
        let lag =
            purge.lag_ms + u64::try_from(purge.read_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        let s = &self.stats;
        s.purges_applied.fetch_add(1, Ordering::Relaxed);
        s.purge_lag_ms_sum.fetch_add(lag, Ordering::Relaxed);
        s.purge_lag_ms_max.fetch_max(lag, Ordering::Relaxed);
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
        self.link.breaker.stats()
    }
}

/// The purge stream position file in a disk zone's directory (a name the
/// zone's loader leaves alone).
pub(crate) const POSITION_FILE: &str = ".calmcache-fleet-position";

/// What the disk zones say about the purge stream position.
#[derive(Debug, PartialEq, Eq)]
enum Position {
    /// No zone has a position file (new zones, or not in a fleet before).
    Missing,
    /// Every zone holds this one: Redis' data epoch and a stream id.
    Found(String, String),
    /// Unreadable, malformed, or not the same in every zone.
    Unusable,
}

/// The position saved in `files` (`epoch id`): every file must hold the
/// same (zones written together), or none is trusted.
fn read_position(files: &[std::path::PathBuf]) -> Position {
    let mut found: Option<(String, String)> = None;
    let mut missing = 0;
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing += 1;
                continue;
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "purge stream position not read");
                return Position::Unusable;
            }
        };
        let Some(this) = parse_position(&text) else {
            tracing::warn!(file = %file.display(), "not a purge stream position; ignored");
            return Position::Unusable;
        };
        if found.as_ref().is_some_and(|f| *f != this) {
            return Position::Unusable;
        }
        found = Some(this);
    }
    match found {
        None => Position::Missing,
        Some(_) if missing > 0 => Position::Unusable,
        Some((epoch, id)) => Position::Found(epoch, id),
    }
}

/// `epoch ms-seq` (one line) as its two parts.
fn parse_position(text: &str) -> Option<(String, String)> {
    let (epoch, id) = text.trim().split_once(' ')?;
    let valid = !epoch.is_empty()
        && epoch.len() <= 64
        && epoch.bytes().all(|b| b.is_ascii_alphanumeric())
        && id
            .split_once('-')
            .is_some_and(|(ms, seq)| ms.parse::<u64>().is_ok() && seq.parse::<u64>().is_ok());
    valid.then(|| (epoch.to_owned(), id.to_owned()))
}

/// Writes `line` to every file (a new file renamed over the old one),
/// 0600 like every file in a zone directory (core private_fs.rs).
fn write_position(files: &[std::path::PathBuf], line: &str) -> std::io::Result<()> {
    for file in files {
        let mut new = file.clone().into_os_string();
        new.push(".new");
        calmcache_core::private_fs::write(std::path::Path::new(&new), line.as_bytes())?;
        std::fs::rename(&new, file)?;
    }
    Ok(())
}

/// The milliseconds part of a stream id (`ms-seq`): when Redis added it.
fn stream_id_ms(id: &str) -> u64 {
    id.split_once('-')
        .map_or(id, |(ms, _)| ms)
        .parse()
        .unwrap_or(0)
}

/// `a` comes before `b` (stream ids `ms-seq`).
fn stream_id_before(a: &str, b: &str) -> bool {
    let parse = |id: &str| -> (u64, u64) {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
    };
    parse(a) < parse(b)
}

/// `object` with its body in memory: read from its disk file if it was
/// left there (verified against the file's checksum).
async fn whole(object: Arc<CachedObject>) -> std::io::Result<Arc<CachedObject>> {
    let Some(lazy) = object.lazy_body().cloned() else {
        return Ok(object);
    };
    let body = tokio::task::spawn_blocking(move || lazy.read_all())
        .await
        .map_err(std::io::Error::other)??;
    Ok(Arc::new(CachedObject::assemble(
        object.meta.clone(),
        object.status,
        object.headers(),
        body,
        object.encodings().to_vec(),
        object.variant().map(Box::from),
    )))
}

/// The object's `Content-Length`, if it has one, is its body's length:
/// hyper writes a stored one as it is, and a wrong one would break the
/// client's connection (a body cut short, or the next answer read as its
/// rest). A disk-format blob's CRCs cannot tell: whoever wrote it chose both.
fn framing_agrees(object: &CachedObject) -> bool {
    object
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .map(|v| v.to_str().ok().and_then(|v| v.parse::<u64>().ok()))
        .is_none_or(|len| len == Some(object.body_len()))
}

/// The key a variant is stored under in Redis: the URI's key with the
/// selecting values, and no generation (nodes number their own markers).
fn fleet_variant_key(primary: &CacheKey, secondary: &str) -> CacheKey {
    primary.as_ref().variant(0, secondary)
}

/// `S` in a variant's keys: the hash of its Redis key.
fn variant_id(primary: &CacheKey, secondary: &str) -> String {
    hash_of(&fleet_variant_key(primary, secondary))
}

/// Vary names as Redis keeps them: comma-separated.
fn names_text(names: &[HeaderName]) -> String {
    names
        .iter()
        .map(HeaderName::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

/// Names read back from Redis; `None` when any is not a header name.
fn parse_names(text: &str) -> Option<Vec<HeaderName>> {
    let names: Option<Vec<HeaderName>> = text
        .split(',')
        .map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .collect();
    names.filter(|n| !n.is_empty())
}

/// The hash tag of `key`'s Redis keys.
fn hash_of(key: &CacheKey) -> String {
    format!("{:016x}", calmcache_core::disk::key_hash(&key.as_ref()))
}

/// The wall-clock milliseconds of a monotonic instant in the past.
fn wall_ms_of(at: Instant) -> u64 {
    let wall = SystemTime::now() - at.elapsed();
    wall.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `pause` give or take a quarter, so pollers on many nodes spread out.
fn jittered(pause: Duration) -> Duration {
    let quarter = pause / 4;
    pause - quarter + quarter.mul_f64(rand::random::<f64>() * 2.0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "node".to_string())
}

/// `[[id, [field, value, ...]], ...]` as (id, fields).
fn stream_entries(value: Value) -> Vec<(String, Vec<(String, String)>)> {
    let Value::Array(entries) = value else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|entry| {
            let Value::Array(mut parts) = entry else {
                return None;
            };
            if parts.len() != 2 {
                return None;
            }
            let fields = parts.pop()?;
            let id = text(parts.pop()?)?;
            let Value::Array(flat) = fields else {
                return None;
            };
            let mut pairs = Vec::new();
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((text(k)?, text(v)?));
            }
            Some((id, pairs))
        })
        .collect()
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
