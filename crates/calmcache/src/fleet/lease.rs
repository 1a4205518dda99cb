//! Leases: one fetch per object for the fleet. [`Before`] is what a fill
//! is told before it goes to the origin (take another node's copy, fetch
//! with the lease, or fetch alone); a [`Lease`] renews itself while the
//! fetch runs and is released when dropped uncommitted, or once Redis
//! answers again ([`Unreleased`]), or, at a stop, by [`Fleet::hand_over`].
//!
//! A node that finds another node's lease follows the lease, not a clock,
//! as a local follower follows its leader (core `flight.rs`): a holder
//! renews its lease only while its fetch runs, and that fetch is bounded by
//! its upstream's timeouts, so a live lease is a fetch making progress.
//! When the lease goes (its holder died and it lapsed, or the holder let it
//! go), one waiter takes it (the acquire script's `SET NX`) and the others
//! follow the new holder. Two bounds keep a wait finite: the wait the fill
//! was given (its route's `lock_timeout`, or as long as its own fetch could
//! wait for a response head when that is longer), and [`HOLDERS_MAX`]
//! holders that end without a copy (an answer no node can store).
//!
//! Must not: read or write entries itself (entries.rs), or import the
//! request path.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use calmcache_core::{CacheKey, CachedObject};
use http::HeaderName;
use tokio::time::Instant;

use super::ops_stats::Op;

use super::entries::{hash_of, parse_names, Acquired, Target};
use super::stream_in::Streamed;
use super::{wall_ms_of, Fleet, LOG};

/// Holders a waiter follows before it fetches alone: the one it found, and
/// one that took over once that lease went without a copy. When the second
/// also ends without one, the answer is likely one no node stores (private,
/// an error, too large): the waiters then fetch side by side, as local
/// followers do when their leader's answer cannot be stored, instead of
/// one after another.
pub(super) const HOLDERS_MAX: u8 = 2;

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
    /// The node that holds the lease writes the body to Redis as it
    /// arrives: stream it from there (stream_in.rs), no fetch.
    Stream(Box<Streamed>),
}

/// Where a fill's question to the fleet stands, from one acquire call to
/// the next.
pub(super) struct Asking {
    /// The entry asked for: the URI's, then its variant's.
    target: Target,
    /// The names the URI varies on, once known.
    names: Option<Vec<HeaderName>>,
    /// Ask for the lease too, not only look.
    try_lease: bool,
    /// Another node's lease was found (counted once).
    waited: bool,
    /// How the wait follows the lease.
    following: Following,
}

/// A waiter's bounds and where it stands against them.
struct Following {
    /// The holders followed on this target: counted each time a lease
    /// asked for was another node's.
    holders: u8,
    /// The next pause before looking again.
    pause: Duration,
    /// When to stop waiting and fetch alone, whoever holds the lease.
    deadline: Instant,
    /// When a lease that never expires (no node of the fleet makes one: a
    /// stray write) stops being followed: one `fleet.lease` after the wait
    /// began.
    stray_deadline: Instant,
}

/// What a waiter does after a look at the lease.
#[derive(Debug, PartialEq, Eq)]
enum Follow {
    /// The lease is live: look again after a pause.
    Look,
    /// The lease is gone: ask for it (one waiter gets it, the others
    /// follow whoever did).
    TakeOver,
    /// Stop waiting: fetch alone.
    Alone,
}

/// This node's lease on one object: its fetch is the fleet's.
pub(crate) struct Lease {
    pub(super) fleet: Arc<Fleet>,
    pub(super) target: Target,
    pub(super) token: String,
    pub(super) fence: u64,
    /// When the lease was taken (Redis clock, ms): the object's `since`.
    pub(super) since_ms: u64,
    pub(super) done: bool,
    /// Extends the lease every third of its time while the fetch runs.
    pub(super) renewal: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// `true`: Redis has dealt with the lease (stored or refused, and
    /// released it); dropping it does nothing more.
    pub(super) fn settled(&mut self, done: bool) {
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
            self.fleet.held().remove(&self.token);
            return;
        }
        // Not committed (not storable, failed, too large): let another
        // node take over at once instead of after the lease's TTL. When
        // Redis cannot be told now, it is told once it answers again.
        let fleet = self.fleet.clone();
        let lease = self.target.lease.clone();
        let token = std::mem::take(&mut self.token);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let work = fleet.work.clone();
            // Held until Redis was asked: a runtime that goes before the
            // task runs (a stop's deadline) leaves it to hand_over.
            let release = async move {
                let answered = fleet.release(&lease, &token).await;
                fleet.held().remove(&token);
                if answered.is_none() {
                    fleet.unreleased().push_within(lease, token);
                }
            };
            work.spawn_on(release, &handle);
        }
    }
}

/// Leases this node gave up while Redis was out of reach: released when it
/// answers again (compare-and-delete: one another node took meanwhile is
/// left alone), so the other nodes need not wait for them to expire.
#[derive(Default)]
pub(super) struct Unreleased(Vec<(String, String)>);

/// Leases kept for a late release; past it, they expire on their own.
pub(super) const UNRELEASED_MAX: usize = 1_024;

impl Unreleased {
    pub(super) fn push_within(&mut self, lease: String, token: String) {
        if self.0.len() < UNRELEASED_MAX {
            self.0.push((lease, token));
        }
    }
}

impl Fleet {
    /// Before a fill goes to the origin for `key` (the copy it would
    /// replace is `ours`; the request's headers that select a variant are
    /// `selecting`): a newer copy in Redis, or the lease to fetch, or a wait
    /// (at most `wait`) for the node that holds it. A URI whose responses
    /// vary is asked again for the request's variant.
    pub(crate) async fn before_fetch(
        &self,
        key: &CacheKey,
        ours: Option<&CachedObject>,
        wait: Duration,
        selecting: &http::HeaderMap,
    ) -> Before {
        let hash = hash_of(key);
        let ours_ms = ours.map_or(0, |o| wall_ms_of(o.meta.stored_at));
        let now = Instant::now();
        let mut asking = Asking {
            target: Target::uri(self, key, &hash),
            names: None,
            try_lease: true,
            waited: false,
            following: Following {
                holders: 0,
                pause: Duration::from_millis(10),
                deadline: now + wait,
                stray_deadline: now + self.cfg.lease.min(wait),
            },
        };
        loop {
            let answer = self
                .acquire(&asking.target, ours_ms, asking.try_lease)
                .await;
            let Some(answer) = answer else {
                return Before::Fetch(None);
            };
            match answer {
                Acquired::Varies(text) => {
                    if !self.ask_for_variant(key, &hash, &text, selecting, &mut asking) {
                        return Before::Fetch(None);
                    }
                }
                Acquired::Newer(blob, since_ms) => {
                    return self.take_newer(key, asking, blob, since_ms).await
                }
                Acquired::Ours {
                    fence,
                    now_ms,
                    token,
                } => {
                    let lease = self.leased(key, asking.target, fence, now_ms, token);
                    return Before::Fetch(Some(lease));
                }
                Acquired::Held { pttl_ms, record } => {
                    // While Redis evicts or nears its limit, pieces may go before they are
                    // read: wait for the commit (redis_info.rs).
                    let record = record
                        .filter(|_| self.cfg.stream_from_peers && !self.link.memory.evicting());
                    let streamed = record.and_then(|(record, holder)| {
                        self.stream_of(key, &asking.target, record, &holder, wait)
                    });
                    if let Some(streamed) = streamed {
                        self.stats.streams.fetch_add(1, Ordering::Relaxed);
                        return Before::Stream(Box::new(streamed));
                    }
                    if !self.wait_for_holder(&mut asking, pttl_ms).await {
                        return Before::Fetch(None);
                    }
                }
            }
        }
    }

    /// Turns `asking` to the request's variant of a URI whose responses
    /// vary on `text` (as Redis keeps them); `false` (fetch alone) when the
    /// names do not verify or parse, or a variant varies again.
    fn ask_for_variant(
        &self,
        key: &CacheKey,
        hash: &str,
        text: &str,
        selecting: &http::HeaderMap,
        asking: &mut Asking,
    ) -> bool {
        let Some(plain) = self.open_names(key, text) else {
            return false;
        };
        // A variant never varies again: a bad entry otherwise.
        let parsed = parse_names(plain).filter(|_| asking.names.is_none());
        let Some(parsed) = parsed else {
            self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let secondary = crate::http::vary::secondary(&parsed, selecting);
        asking.target = Target::variant(self, hash, key, text, &secondary);
        asking.names = Some(parsed);
        asking.try_lease = true;
        asking.following.holders = 0;
        true
    }

    /// Another node's newer copy, when it verifies; else a fetch (the
    /// lease goes to whoever asks next).
    async fn take_newer(
        &self,
        key: &CacheKey,
        asking: Asking,
        blob: Vec<u8>,
        since_ms: u64,
    ) -> Before {
        match self.take_copy(key, &asking.target, blob, since_ms).await {
            Some(object) => {
                self.stats.shared_hits.fetch_add(1, Ordering::Relaxed);
                Before::Take(object, asking.names)
            }
            None => Before::Fetch(None),
        }
    }

    /// The lease this node took on `target`: counted, noted in the fetch
    /// log, renewed while the fetch runs.
    fn leased(
        &self,
        key: &CacheKey,
        target: Target,
        fence: u64,
        now_ms: u64,
        token: String,
    ) -> Lease {
        self.stats.leases_acquired.fetch_add(1, Ordering::Relaxed);
        self.stats.leases_active.fetch_add(1, Ordering::Relaxed);
        self.fetch_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(key, fence);
        let renewal = self.renew_while_fetching(&target.lease, &token);
        self.held().insert(token.clone(), target.lease.clone());
        Lease {
            fleet: self.arc(),
            token,
            target,
            fence,
            since_ms: now_ms,
            done: false,
            renewal,
        }
    }

    /// Another node holds the lease (`pttl_ms`: its time left, -2 gone,
    /// -1 no expiry): a pause (10 ms doubling to 50, jittered) before
    /// looking again, or asking for it once it is gone; `false` (counted)
    /// when the wait ends without a copy: fetch alone.
    async fn wait_for_holder(&self, asking: &mut Asking, pttl_ms: i64) -> bool {
        if !asking.waited {
            asking.waited = true;
            self.stats.leases_held.fetch_add(1, Ordering::Relaxed);
        }
        let following = &mut asking.following;
        if asking.try_lease {
            // Asked for it and another node had it: one more holder.
            following.holders = following.holders.saturating_add(1);
        }
        let follow = follow(following, pttl_ms, Instant::now());
        if follow == Follow::Alone {
            self.stats.waits_timed_out.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        tokio::time::sleep(jittered(following.pause)).await;
        following.pause = (following.pause * 2).min(Duration::from_millis(50));
        // Ask for the lease again only once it is gone (its holder died or
        // let it go); until then, only look.
        asking.try_lease = follow == Follow::TakeOver;
        true
    }

    /// A task that extends the lease every third of `fleet.lease` until
    /// aborted (the lease committed, released or dropped): a fetch longer
    /// than the lease keeps it, a dead node's lease still expires.
    pub(super) fn renew_while_fetching(
        &self,
        lease: &str,
        token: &str,
    ) -> tokio::task::JoinHandle<()> {
        let fleet = self.me.clone();
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

    pub(super) fn token(&self) -> String {
        format!(
            "{}:{}",
            self.node,
            self.tokens.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Releases the leases given up while Redis was out of reach.
    pub(super) async fn release_late(&self) {
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
    pub(super) async fn release(&self, lease: &str, token: &str) -> Option<bool> {
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

    pub(super) fn unreleased(&self) -> std::sync::MutexGuard<'_, Unreleased> {
        self.unreleased.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The leases this node holds now: token -> lease key.
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` (a commit, a release) on the current runtime, tracked:
    /// a stopping worker waits for it ([`Self::finish_work_by`]) before its
    /// runtime goes, so a fill that ended within the drain still commits.
    pub(super) fn spawn<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.work.spawn(work);
    }

    /// At a stop, once a worker's fills ended: waits (until `deadline`) for
    /// the commits and releases they left running; `false` when some were
    /// still running then.
    pub(crate) async fn finish_work_by(&self, deadline: Instant) -> bool {
        self.work.close();
        tokio::time::timeout_at(deadline, self.work.wait())
            .await
            .is_ok()
    }

    /// Hands the fleet this node's leases at a stop: the ones still held belong to fetches the stop
    /// abandoned (cut at the shutdown deadline with their runtime), and
    /// are released at once, so that a waiting node takes over now instead
    /// of when they lapse; then the ones given up while Redis was out.
    /// Returns how many were released.
    pub(crate) async fn hand_over(&self) -> usize {
        let held: Vec<(String, String)> = self.held().drain().collect();
        let mut releases = tokio::task::JoinSet::new();
        for (token, lease) in held {
            let fleet = self.arc();
            releases.spawn(async move { fleet.release(&lease, &token).await == Some(true) });
        }
        let mut released = 0;
        while let Some(done) = releases.join_next().await {
            released += usize::from(done.unwrap_or(false));
        }
        if released > 0 {
            tracing::info!(target: LOG, released, "leases of abandoned fetches handed to the fleet");
        }
        self.release_late().await;
        released
    }
}

impl Fleet {
    /// A reload dropped this link (fleet mode off, or another Redis): the
    /// leases it gave up while Redis was out are let go now, as no follow
    /// loop of it runs again. The ones held stay with their fetches, which
    /// commit (or release) through this link as they end.
    pub(crate) async fn retire(&self) {
        self.release_late().await;
    }
}

/// The leases a node holds, by token: what [`Fleet::hand_over`] releases.
pub(super) type Held = std::collections::HashMap<String, String>;

/// The waiter's next step after a look at the lease (`pttl_ms` as the
/// acquire script saw it) at `now`: a pure decision, table-tested.
fn follow(following: &Following, pttl_ms: i64, now: Instant) -> Follow {
    let deadline = match pttl_ms {
        // No node makes a lease without expiry: followed only briefly.
        -1 => following.stray_deadline,
        _ => following.deadline,
    };
    if now + following.pause > deadline {
        return Follow::Alone;
    }
    match pttl_ms {
        -2 if following.holders >= HOLDERS_MAX => Follow::Alone,
        -2 => Follow::TakeOver,
        _ => Follow::Look,
    }
}

/// `pause` give or take a quarter, so pollers on many nodes spread out.
pub(super) fn jittered(pause: Duration) -> Duration {
    let quarter = pause / 4;
    pause - quarter + quarter.mul_f64(rand::random::<f64>() * 2.0)
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
