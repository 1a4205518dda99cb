//! Test helpers: a tier over a [`MemoryTier`] that can be taken out of
//! the ring, stamps copies with versions and counts touches, and objects.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::freshness::Freshness;
use crate::key::{CacheKey, KeyRef};
use crate::memory::MemoryTier;
use crate::object::{CachedObject, ObjectMeta};
use crate::tier::{CacheError, PurgeFilter, PurgeMode, Tier, TierFuture};

/// A memory tier with health, versions and touches a test steers and reads.
pub(crate) struct TestTier {
    pub(crate) inner: MemoryTier,
    pub(crate) healthy: AtomicBool,
    /// Bumped by every insert and remove: the version of every key.
    pub(crate) version: AtomicU64,
    pub(crate) touches: AtomicU64,
}

impl TestTier {
    pub(crate) fn new() -> Arc<TestTier> {
        Arc::new(TestTier {
            inner: MemoryTier::new(1 << 20, 64 << 10),
            healthy: AtomicBool::new(true),
            version: AtomicU64::new(1),
            touches: AtomicU64::new(0),
        })
    }
}

impl Tier for TestTier {
    fn kind(&self) -> &'static str {
        "test"
    }
    fn get<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, Option<Arc<CachedObject>>> {
        Tier::get(&self.inner, key)
    }
    fn insert(
        &self,
        key: CacheKey,
        object: Arc<CachedObject>,
    ) -> TierFuture<'_, Result<(), CacheError>> {
        self.version.fetch_add(1, Ordering::Relaxed);
        Tier::insert(&self.inner, key, object)
    }
    fn remove<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, bool> {
        self.version.fetch_add(1, Ordering::Relaxed);
        Tier::remove(&self.inner, key)
    }
    fn purge_key<'a>(&'a self, key: &'a KeyRef<'_>, mode: PurgeMode) -> TierFuture<'a, bool> {
        Tier::purge_key(&self.inner, key, mode)
    }
    fn purge_matching<'a>(
        &'a self,
        mode: PurgeMode,
        filter: &'a PurgeFilter<'_>,
    ) -> TierFuture<'a, u64> {
        Tier::purge_matching(&self.inner, mode, filter)
    }
    fn purge_all(&self, mode: PurgeMode) -> TierFuture<'_, u64> {
        Tier::purge_all(&self.inner, mode)
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
    fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }
    fn touch(&self, _key: &KeyRef<'_>) {
        self.touches.fetch_add(1, Ordering::Relaxed);
    }
    fn version(&self, key: &KeyRef<'_>) -> Option<u64> {
        Tier::get(&self.inner, key)
            .into_ready()
            .flatten()
            .map(|_| self.version.load(Ordering::Relaxed))
    }
}

/// What the tiers' tests store: fresh for a minute from now (a route's
/// ttl), fetched in 5 ms.
pub(crate) fn fresh_meta() -> ObjectMeta {
    ObjectMeta {
        stored_at: tokio::time::Instant::now(),
        freshness: Freshness {
            lifetime: Duration::from_secs(60),
            initial_age: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            stale_forbidden: false,
            immutable: false,
            source: crate::freshness::LifetimeSource::Route,
        },
        fetch_time: Duration::from_millis(5),
    }
}

/// A 200 response with `body`, fresh for a minute, with `headers`.
pub(crate) fn object_with(body: &str, headers: HeaderMap) -> Arc<CachedObject> {
    let meta = fresh_meta();
    Arc::new(CachedObject::new(
        meta,
        StatusCode::OK,
        headers,
        Bytes::copy_from_slice(body.as_bytes()),
    ))
}

/// A 200 response with `body`.
pub(crate) fn object(body: &str) -> Arc<CachedObject> {
    object_with(body, HeaderMap::new())
}

pub(crate) fn key(path: &str) -> CacheKey {
    CacheKey::new("http", "h", path)
}
