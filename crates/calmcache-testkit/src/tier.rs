//! A third kind of tier for tests: [`CountingTier`], a memory tier that
//! counts what the proxy asks of it. Plugged into a zone through the
//! `Tier` trait ([`calmcache::ZoneTiers`], [`Proxy::zone_tier`](crate::Proxy::zone_tier)),
//! it shows that a tier the proxy was not written for serves the request
//! path, purges and `/status` alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use calmcache_core::{
    CacheError, CacheKey, CachedObject, KeyRef, MemoryTier, PurgeFilter, PurgeMode, Tier,
    TierFuture,
};

/// Calls a [`CountingTier`] answered.
#[derive(Debug, Default)]
pub struct TierCounts {
    /// Lookups that found an object.
    pub hits: AtomicU64,
    /// Lookups that found none.
    pub misses: AtomicU64,
    /// Objects stored.
    pub inserts: AtomicU64,
    /// Removals and purges of one key.
    pub removes: AtomicU64,
    /// Scanning purges (by prefix, tag, or everything).
    pub scans: AtomicU64,
}

/// A memory tier that counts lookups, stores and purges. Its lookups
/// answer asynchronously (a boxed future that yields once), as a tier
/// behind a network would.
pub struct CountingTier {
    inner: MemoryTier,
    counts: TierCounts,
}

impl CountingTier {
    /// A tier holding up to `max_size` bytes, objects up to `max_object_size`.
    pub fn new(max_size: u64, max_object_size: u64) -> Arc<CountingTier> {
        Arc::new(CountingTier {
            inner: MemoryTier::new(max_size, max_object_size),
            counts: TierCounts::default(),
        })
    }

    /// What it was asked so far.
    pub fn counts(&self) -> &TierCounts {
        &self.counts
    }

    /// Lookups that found an object.
    pub fn hits(&self) -> u64 {
        self.counts.hits.load(Ordering::Relaxed)
    }

    /// Lookups that found none.
    pub fn misses(&self) -> u64 {
        self.counts.misses.load(Ordering::Relaxed)
    }

    /// Objects stored.
    pub fn inserts(&self) -> u64 {
        self.counts.inserts.load(Ordering::Relaxed)
    }

    fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Tier for CountingTier {
    fn kind(&self) -> &'static str {
        "counting"
    }

    fn get<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, Option<Arc<CachedObject>>> {
        TierFuture::boxed(async move {
            tokio::task::yield_now().await;
            let found = self.inner.get(key).await;
            let counter = match found {
                Some(_) => &self.counts.hits,
                None => &self.counts.misses,
            };
            self.count(counter);
            found
        })
    }

    fn insert(
        &self,
        key: CacheKey,
        object: Arc<CachedObject>,
    ) -> TierFuture<'_, Result<(), CacheError>> {
        self.count(&self.counts.inserts);
        self.inner.insert(key, object)
    }

    fn remove<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, bool> {
        self.count(&self.counts.removes);
        self.inner.remove(key)
    }

    fn purge_key<'a>(&'a self, key: &'a KeyRef<'_>, mode: PurgeMode) -> TierFuture<'a, bool> {
        self.count(&self.counts.removes);
        self.inner.purge_key(key, mode)
    }

    fn purge_matching<'a>(
        &'a self,
        mode: PurgeMode,
        filter: &'a PurgeFilter<'_>,
    ) -> TierFuture<'a, u64> {
        self.count(&self.counts.scans);
        self.inner.purge_matching(mode, filter)
    }

    fn purge_all(&self, mode: PurgeMode) -> TierFuture<'_, u64> {
        self.count(&self.counts.scans);
        self.inner.purge_all(mode)
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn objects(&self) -> u64 {
        self.inner.objects()
    }

    fn max_size(&self) -> u64 {
        self.inner.max_size()
    }

    fn max_object_size(&self) -> u64 {
        self.inner.max_object_size()
    }
}
