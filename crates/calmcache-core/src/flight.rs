//! Single-flight: at most one fetch per key in flight; everyone else waits for it.
//!
//! [`Flights::join`] makes the first caller the [`Lookup::Leader`] holding a
//! [`FetchPermit`], and later callers [`Lookup::Follower`]s holding a [`Waiter`].
//! A permit dropped without [`FetchPermit::finish`] (leader cancelled, panicked,
//! origin failed before it could report) wakes its waiters with
//! [`WaitError::Abandoned`]: nobody hangs and no entry is leaked.
//!
//! Followers wait for a leader that makes progress, not for a clock: the
//! leader says how long its current step is bounded ([`FetchPermit::alive_for`],
//! e.g. the upstream's read timeout while it waits for the response head, or
//! for the next body chunk), and [`Waiter::wait`]'s limit (`lock_timeout`)
//! only runs out once the leader has passed every bound it gave.
//!
//! Touched on misses and refreshes only: a plain hit never comes here; a hit
//! that draws an early or stale refresh tries to lead one.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::key::CacheKey;

const SHARDS: usize = 64;

type Shard<T> = Mutex<HashMap<CacheKey, Slot<T>>>;

/// A flight as the table and its followers see it: the outcome to come and
/// how long the leader's current step may last.
struct Slot<T> {
    rx: watch::Receiver<Option<Outcome<T>>>,
    alive: Arc<Alive>,
}

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Slot {
            rx: self.rx.clone(),
            alive: self.alive.clone(),
        }
    }
}

/// The latest instant the leader said its fetch is bounded by, as
/// milliseconds after the table's epoch (0: it said nothing).
struct Alive {
    epoch: Instant,
    until_ms: AtomicU64,
}

impl Alive {
    fn new(epoch: Instant) -> Self {
        Alive {
            epoch,
            until_ms: AtomicU64::new(0),
        }
    }

    fn extend_to(&self, until: Instant) {
        let ms = until.saturating_duration_since(self.epoch).as_millis();
        let ms = u64::try_from(ms).unwrap_or(u64::MAX).max(1);
        self.until_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn until(&self) -> Option<Instant> {
        match self.until_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.epoch + Duration::from_millis(ms)),
        }
    }
}

/// What a leader hands its followers.
#[derive(Clone, Debug)]
enum Outcome<T> {
    Done(T),
    Abandoned,
}

/// Why a follower got nothing from its leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The leader made no progress within the wait limit (`lock_timeout`)
    /// and is past every bound it gave for its current step.
    #[error("timed out waiting for the fetch in flight")]
    Timeout,
    /// The leader went away without a result.
    #[error("the fetch in flight was abandoned")]
    Abandoned,
}

/// The in-flight fetches, by key.
pub struct Flights<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    shards: Box<[Shard<T>]>,
    hasher: RandomState,
    epoch: Instant,
}

/// The result of joining: lead the fetch or wait for it.
pub enum Lookup<T> {
    /// Nobody was fetching this key: you do, and must report through the permit.
    Leader(FetchPermit<T>),
    /// A fetch is in flight: wait for its outcome.
    Follower(Waiter<T>),
}

/// The right (and duty) to fetch one key. Finish it, or drop it to release waiters.
pub struct FetchPermit<T> {
    inner: Arc<Inner<T>>,
    key: CacheKey,
    tx: Option<Arc<watch::Sender<Option<Outcome<T>>>>>,
    alive: Arc<Alive>,
}

/// A look at a flight from outside its permit: whether anyone but the
/// leader is waiting for it (without keeping the flight alive).
pub struct Interest<T> {
    tx: std::sync::Weak<watch::Sender<Option<Outcome<T>>>>,
}

impl<T> Interest<T> {
    /// True while the flight is unfinished and a follower waits for it.
    pub fn has_followers(&self) -> bool {
        // The flights table holds one receiver; every follower one more.
        self.tx.upgrade().is_some_and(|tx| tx.receiver_count() > 1)
    }
}

/// A follower's handle on the fetch in flight.
pub struct Waiter<T> {
    slot: Slot<T>,
}

impl<T: Clone> Default for Flights<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> Flights<T> {
    /// An empty set of flights.
    pub fn new() -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        Flights {
            inner: Arc::new(Inner {
                shards,
                hasher: RandomState::new(),
                epoch: Instant::now(),
            }),
        }
    }

    /// Leads the fetch of `key`, or follows the one already in flight.
    pub fn join(&self, key: &CacheKey) -> Lookup<T> {
        let mut shard = self.inner.shard(key);
        if let Some(slot) = shard.get(key) {
            return Lookup::Follower(Waiter { slot: slot.clone() });
        }
        let (tx, rx) = watch::channel(None);
        let alive = Arc::new(Alive::new(self.inner.epoch));
        shard.insert(
            key.clone(),
            Slot {
                rx,
                alive: alive.clone(),
            },
        );
        drop(shard);
        Lookup::Leader(FetchPermit {
            inner: self.inner.clone(),
            key: key.clone(),
            tx: Some(Arc::new(tx)),
            alive,
        })
    }

    /// Leads the fetch of `key` if nobody is fetching it; `None` when one is in flight.
    pub fn try_lead(&self, key: &CacheKey) -> Option<FetchPermit<T>> {
        match self.join(key) {
            Lookup::Leader(permit) => Some(permit),
            Lookup::Follower(_) => None,
        }
    }

    /// Fetches in flight now (for status).
    pub fn in_flight(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).len()).sum()
    }
}

impl<T> Inner<T> {
    fn shard(&self, key: &CacheKey) -> MutexGuard<'_, HashMap<CacheKey, Slot<T>>> {
        let i = self.hasher.hash_one(key) as usize % self.shards.len();
        lock(&self.shards[i])
    }
}

/// The maps hold plain data, so a poisoned lock (a panic elsewhere) leaves them usable.
fn lock<M>(m: &Mutex<M>) -> MutexGuard<'_, M> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T> FetchPermit<T> {
    /// The key this permit fetches.
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// Says the fetch's current step is bounded by `limit` from now (its own
    /// connect or read timeout): followers keep waiting at least that long,
    /// whatever their `lock_timeout`. Call it again at each step forward
    /// (the response head, every body chunk); it never shortens a bound.
    pub fn alive_for(&self, limit: Duration) {
        self.alive.extend_to(Instant::now() + limit);
    }

    /// A handle that tells whether followers wait for this flight.
    pub fn interest(&self) -> Interest<T> {
        Interest {
            tx: self
                .tx
                .as_ref()
                .map_or_else(std::sync::Weak::new, Arc::downgrade),
        }
    }

    /// Hands `value` to every follower now and to everyone who joins until
    /// the flight is finished: a streaming fill publishes its response head
    /// and body-in-progress, then finishes with the stored object.
    pub fn publish(&self, value: T) {
        if let Some(tx) = &self.tx {
            tx.send_replace(Some(Outcome::Done(value)));
        }
    }

    /// Reports the outcome to every follower and retires the flight.
    pub fn finish(mut self, value: T) {
        self.complete(Outcome::Done(value));
    }

    fn complete(&mut self, outcome: Outcome<T>) {
        if let Some(tx) = self.tx.take() {
            // Retire first so a request arriving after this starts afresh
            // (it will find the stored object) instead of joining a finished flight.
            self.inner.shard(&self.key).remove(&self.key);
            tx.send_replace(Some(outcome));
        }
    }
}

impl<T> Drop for FetchPermit<T> {
    fn drop(&mut self) {
        self.complete(Outcome::Abandoned);
    }
}

impl<T: Clone> Waiter<T> {
    /// Waits for the leader's outcome: at least `limit`, and for as long as
    /// the leader's fetch stays within the bounds it gave
    /// ([`FetchPermit::alive_for`]). A leader that is past them and still
    /// silent when `limit` runs out is given up on ([`WaitError::Timeout`]).
    pub async fn wait(mut self, limit: Duration) -> Result<T, WaitError> {
        let mut deadline = Instant::now() + limit;
        loop {
            let wait = self.slot.rx.wait_for(Option::is_some);
            match tokio::time::timeout_at(deadline, wait).await {
                // The sender is never dropped without sending; treat it as abandoned anyway.
                Ok(Err(_)) => return Err(WaitError::Abandoned),
                Ok(Ok(slot)) => {
                    return match slot.as_ref() {
                        Some(Outcome::Done(v)) => Ok(v.clone()),
                        _ => Err(WaitError::Abandoned),
                    }
                }
                Err(_) => match self.slot.alive.until() {
                    Some(until) if until > Instant::now() => deadline = until,
                    _ => return Err(WaitError::Timeout),
                },
            }
        }
    }
}

#[cfg(test)]
#[path = "flight_tests.rs"]
mod tests;
