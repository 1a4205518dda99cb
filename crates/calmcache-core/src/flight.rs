//! Single-flight: at most one fetch per key in flight; everyone else waits for it.
//!
//! [`Flights::join`] makes the first caller the [`Lookup::Leader`] holding a
//! [`FetchPermit`], and later callers [`Lookup::Follower`]s holding a [`Waiter`].
//! A permit dropped without [`FetchPermit::finish`] (leader cancelled, panicked,
//! origin failed before it could report) wakes its waiters with
//! [`WaitError::Abandoned`]: nobody hangs and no entry is leaked.
//!
//! Touched on misses and refreshes only: a plain hit never comes here; a hit
//! that draws an early or stale refresh tries to lead one.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::key::CacheKey;

const SHARDS: usize = 64;

type Slot<T> = watch::Receiver<Option<Outcome<T>>>;
type Shard<T> = Mutex<HashMap<CacheKey, Slot<T>>>;

/// What a leader hands its followers.
#[derive(Clone, Debug)]
enum Outcome<T> {
    Done(T),
    Abandoned,
}

/// Why a follower got nothing from its leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The leader did not finish within the wait limit (`lock_timeout`).
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
    rx: Slot<T>,
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
            }),
        }
    }

    /// Leads the fetch of `key`, or follows the one already in flight.
    pub fn join(&self, key: &CacheKey) -> Lookup<T> {
        let mut shard = self.inner.shard(key);
        if let Some(rx) = shard.get(key) {
            return Lookup::Follower(Waiter { rx: rx.clone() });
        }
        let (tx, rx) = watch::channel(None);
        shard.insert(key.clone(), rx);
        drop(shard);
        Lookup::Leader(FetchPermit {
            inner: self.inner.clone(),
            key: key.clone(),
            tx: Some(Arc::new(tx)),
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
    /// Waits up to `limit` for the leader's outcome.
    pub async fn wait(mut self, limit: Duration) -> Result<T, WaitError> {
        let outcome = tokio::time::timeout(limit, self.rx.wait_for(Option::is_some)).await;
        match outcome {
            Err(_) => Err(WaitError::Timeout),
            // The sender is never dropped without sending; treat it as abandoned anyway.
            Ok(Err(_)) => Err(WaitError::Abandoned),
            Ok(Ok(slot)) => match slot.as_ref() {
                Some(Outcome::Done(v)) => Ok(v.clone()),
                _ => Err(WaitError::Abandoned),
            },
        }
    }
}

#[cfg(test)]
#[path = "flight_tests.rs"]
mod tests;
