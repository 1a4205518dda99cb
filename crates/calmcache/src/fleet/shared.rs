//! The seam between a fill (or a purge) and the shared tier: the one small
//! trait [`SharedTier`] the request path talks to, and its implementation
//! for the Redis fleet.
//!
//! Why not core's `Tier`: a `Tier` answers `get` and takes `insert`. The
//! shared tier answers a local miss with one Lua call on the key's slot
//! that looks up and leases at once: another node's newer copy (with the
//! names its URI varies on), or this node's lease with its fencing
//! counter, or "held by another node: wait for its copy". As `get` then a
//! separate lease call, a copy committed between the two would be fetched
//! again, and `get` has no answer for "wait"; `insert` has no lease nor
//! fence to be refused by. So the fill asks before it fetches and commits
//! after, through this trait, and the local zones stay behind `Tier`.
//!
//! Invariant: only a local miss reaches it; a local hit never does.
//! Must not: import the request path (`crate::proxy`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use calmcache_core::{CacheKey, CachedObject, PurgeMode};
use http::{HeaderMap, HeaderName};

use super::{Before, Fleet, Lease, SharedRule};

/// A future the shared tier answers with.
pub(crate) type SharedFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The shared tier as the request path sees it: asked before a fill goes
/// to the origin, told after it stored, and handed purges.
pub(crate) trait SharedTier: Send + Sync {
    /// Before a fill goes to the origin for `key` (the copy it would
    /// replace is `ours`; `selecting`: the request's headers that select a
    /// variant): another node's newer copy, or the lease to fetch (none:
    /// fetch alone), after waiting at most `wait` for the node that holds
    /// it.
    fn before_fetch<'a>(
        &'a self,
        key: &'a CacheKey,
        ours: Option<&'a CachedObject>,
        wait: Duration,
        selecting: &'a HeaderMap,
    ) -> SharedFuture<'a, Before>;

    /// After a fill that held `lease` stored `object` locally (`names`: the
    /// request headers it varies on, when it does): shared off the request
    /// path; the lease is let go either way.
    fn commit(
        &self,
        lease: Lease,
        primary: &CacheKey,
        object: Arc<CachedObject>,
        names: Option<&[HeaderName]>,
    );

    /// The largest object it takes: a streamed fill past it lets its lease
    /// go at once.
    fn max_object_size(&self) -> u64;

    /// Purges `key` in the shared tier.
    fn purge_key<'a>(&'a self, key: &'a CacheKey, mode: PurgeMode) -> SharedFuture<'a, ()>;

    /// A purge that names no single key in the shared tier: the shared
    /// objects `rule` takes, stored before now, are ignored from now on.
    /// Returns the purge epoch it set (`None`: Redis out of reach).
    fn purge_before_now(&self, rule: SharedRule) -> SharedFuture<'_, Option<u64>>;

    /// Sends `purge` (the admin API's JSON form) to the other nodes, with
    /// the purge epoch it set; returns the purges still waiting to be sent.
    fn publish_purge(&self, purge: String, epoch: Option<u64>) -> SharedFuture<'_, usize>;
}

impl SharedTier for Fleet {
    fn before_fetch<'a>(
        &'a self,
        key: &'a CacheKey,
        ours: Option<&'a CachedObject>,
        wait: Duration,
        selecting: &'a HeaderMap,
    ) -> SharedFuture<'a, Before> {
        Box::pin(Fleet::before_fetch(self, key, ours, wait, selecting))
    }

    fn commit(
        &self,
        lease: Lease,
        primary: &CacheKey,
        object: Arc<CachedObject>,
        names: Option<&[HeaderName]>,
    ) {
        Fleet::commit(self, lease, primary, object, names);
    }

    fn max_object_size(&self) -> u64 {
        self.config().max_object_size
    }

    fn purge_key<'a>(&'a self, key: &'a CacheKey, mode: PurgeMode) -> SharedFuture<'a, ()> {
        Box::pin(Fleet::purge_key(self, key, mode))
    }

    fn purge_before_now(&self, rule: SharedRule) -> SharedFuture<'_, Option<u64>> {
        Box::pin(Fleet::purge_before_now(self, rule))
    }

    fn publish_purge(&self, purge: String, epoch: Option<u64>) -> SharedFuture<'_, usize> {
        Box::pin(Fleet::publish_purge(self, purge, epoch))
    }
}
