//! The memory tier: objects in RAM, bounded in bytes, evicted by quick_cache's
//! scan-resistant CLOCK-PRO/S3-FIFO-like policy.
//!
//! Lookups take one shard's read lock, never a global one, and hand out an
//! `Arc` to the object: serving a hit copies no body bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};

use crate::key::{key_hash, CacheKey, KeyRef};
use crate::object::CachedObject;
use crate::tier::{CacheError, PurgeFilter, PurgeMode, Tags, Tier, TierDetail, TierFuture};

#[derive(Clone)]
struct ObjectWeighter;

impl Weighter<CacheKey, Arc<CachedObject>> for ObjectWeighter {
    fn weight(&self, key: &CacheKey, obj: &Arc<CachedObject>) -> u64 {
        memory_cost(key, obj) as u64
    }
}

/// The objects quick_cache evicts to stay under the zone's weight. Its
/// hook hears of every entry an insert drops, the replaced copy of the
/// key inserted too: [`MemoryTier::put`] tells them apart by key hash.
/// Inserts only: a hit never comes here.
#[derive(Clone, Default)]
struct CountEvictions(Arc<AtomicU64>);

impl Lifecycle<CacheKey, Arc<CachedObject>> for CountEvictions {
    /// The key hashes of the entries one insert dropped.
    type RequestState = Vec<u64>;

    fn begin_request(&self) -> Self::RequestState {
        Vec::new()
    }

    fn on_evict(&self, dropped: &mut Vec<u64>, key: CacheKey, _: Arc<CachedObject>) {
        dropped.push(key_hash(&key.as_ref()));
    }
}

/// What one entry of the zone's index costs besides its key's text and its
/// object: quick_cache's slot (the key inline, the `Arc`, its state and
/// links), its hash table position, and the slack of tables that grow by
/// doubling. Measured: `tests/object_memory.rs` fills a zone and compares
/// RSS growth with the zone's size.
pub const INDEX_ENTRY_COST: usize = 96;

/// The RAM an entry takes: the key's text, the object as allocated
/// ([`CachedObject::memory_cost`]) and its index entry.
fn memory_cost(key: &CacheKey, obj: &CachedObject) -> usize {
    key.memory_cost() + obj.memory_cost() + INDEX_ENTRY_COST
}

/// A RAM zone bounded by `max_size` bytes of RAM: keys, objects (headers,
/// bodies) and index entries as the allocator hands them out, so that
/// `max_size` bounds the process's real memory for the zone.
pub struct MemoryTier {
    cache: Cache<CacheKey, Arc<CachedObject>, ObjectWeighter, DefaultHashBuilder, CountEvictions>,
    evictions: CountEvictions,
    max_size: u64,
    max_object_size: u64,
}

impl MemoryTier {
    /// A zone holding at most `max_size` bytes; objects above `max_object_size`
    /// are refused (the proxy streams them through uncached).
    pub fn new(max_size: u64, max_object_size: u64) -> Self {
        let max_object_size = max_object_size.clamp(1, max_size.max(1));
        // Each shard holds capacity/shards and refuses items above its share, so
        // keep at least four largest objects per shard.
        // Up to 256 shards: a purge scan holds one shard's lock at a time,
        // so smaller shards keep the longest wait of a hit short.
        let shards = (max_size / max_object_size.saturating_mul(4)).clamp(1, 256);
        let shards = 1u64 << (63 - shards.leading_zeros());
        // Shard capacities round up; take the rounding off so the sum never
        // exceeds max_size.
        let capacity = max_size.saturating_sub(shards).max(1);
        let estimated_items = (capacity / 4096).clamp(64, 1 << 22) as usize;
        let options = OptionsBuilder::new()
            .shards(shards as usize)
            .estimated_items_capacity(estimated_items)
            .weight_capacity(capacity)
            .build();
        let evictions = CountEvictions::default();
        let (hasher, lifecycle) = (DefaultHashBuilder::default(), evictions.clone());
        let cache = match options {
            Ok(options) => Cache::with_options(options, ObjectWeighter, hasher, lifecycle),
            // Only reachable with a zero capacity, which the clamps above rule out.
            Err(_) => Cache::with(estimated_items, capacity, ObjectWeighter, hasher, lifecycle),
        };
        MemoryTier {
            cache,
            evictions,
            max_size,
            max_object_size,
        }
    }
}

impl MemoryTier {
    /// The object under `key`: one shard's read lock, no I/O.
    fn lookup(&self, key: &KeyRef<'_>) -> Option<Arc<CachedObject>> {
        self.cache.get(key)
    }

    fn store(&self, key: CacheKey, object: Arc<CachedObject>) -> Result<(), CacheError> {
        let weight = (key.weight() + object.weight()) as u64;
        if weight > self.max_object_size {
            return Err(CacheError::TooLarge {
                size: weight,
                limit: self.max_object_size,
            });
        }
        // What the zone keeps: a small body packed with its head (a copy
        // made once, when stored; hits share it).
        let object = match object.packed() {
            Some(packed) => Arc::new(packed),
            None => object,
        };
        self.put(key, object);
        Ok(())
    }

    /// Inserts `object` under `key`, counting the other objects the
    /// insert evicted.
    fn put(&self, key: CacheKey, object: Arc<CachedObject>) {
        let hash = key_hash(&key.as_ref());
        let dropped = self.cache.insert_with_lifecycle(key, object);
        let evicted = dropped.iter().filter(|&&h| h != hash).count();
        if evicted > 0 {
            self.evictions
                .0
                .fetch_add(evicted as u64, Ordering::Relaxed);
        }
    }

    /// Purges `key`: removed, or (soft) replaced by a copy expired now.
    /// True when it was there.
    fn purge_one(&self, key: &KeyRef<'_>, mode: PurgeMode) -> bool {
        if mode == PurgeMode::Hard {
            return self.cache.remove(key).is_some();
        }
        let Some(object) = self.cache.get(key) else {
            return false;
        };
        let expired = Arc::new(object.soft_purged(tokio::time::Instant::now()));
        self.put(key.to_owned_key(), expired);
        true
    }

    /// Purges every object `filter` takes; how many. Each shard is locked
    /// while it is scanned (a few milliseconds per million objects and
    /// shard count): callers run it on a blocking thread.
    fn purge_scan(
        &self,
        mode: PurgeMode,
        filter: &dyn Fn(&CacheKey, &CachedObject) -> bool,
    ) -> u64 {
        let soft = mode == PurgeMode::Soft;
        let matched = std::sync::Mutex::new(Vec::new());
        let count = std::sync::atomic::AtomicU64::new(0);
        self.cache.retain(|key, object| {
            if !filter(key, object) {
                return true;
            }
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if soft {
                matched
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(key.clone());
            }
            soft
        });
        if soft {
            let now = tokio::time::Instant::now();
            for key in matched.into_inner().unwrap_or_else(|p| p.into_inner()) {
                if let Some(object) = self.cache.get(&key.as_ref()) {
                    self.put(key, Arc::new(object.soft_purged(now)));
                }
            }
        }
        count.into_inner()
    }

    /// Purges everything; how many objects there were.
    fn purge_everything(&self, mode: PurgeMode) -> u64 {
        if mode == PurgeMode::Soft {
            return self.purge_scan(mode, &|_, _| true);
        }
        let n = self.cache.len() as u64;
        self.cache.clear();
        n
    }
}

// Every operation answers at once (`TierFuture::ready`): a hit is one
// shard read lock and an `Arc` clone, no allocation, no await.
impl Tier for MemoryTier {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn get<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, Option<Arc<CachedObject>>> {
        TierFuture::ready(self.lookup(key))
    }

    fn insert(
        &self,
        key: CacheKey,
        object: Arc<CachedObject>,
    ) -> TierFuture<'_, Result<(), CacheError>> {
        TierFuture::ready(self.store(key, object))
    }

    fn remove<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, bool> {
        TierFuture::ready(self.cache.remove(key).is_some())
    }

    fn purge_key<'a>(&'a self, key: &'a KeyRef<'_>, mode: PurgeMode) -> TierFuture<'a, bool> {
        TierFuture::ready(self.purge_one(key, mode))
    }

    fn purge_matching<'a>(
        &'a self,
        mode: PurgeMode,
        filter: &'a PurgeFilter<'_>,
    ) -> TierFuture<'a, u64> {
        TierFuture::ready(
            self.purge_scan(mode, &|key, object| filter(key, Tags::Stored(&object.head))),
        )
    }

    fn purge_all(&self, mode: PurgeMode) -> TierFuture<'_, u64> {
        TierFuture::ready(self.purge_everything(mode))
    }

    fn size_bytes(&self) -> u64 {
        self.cache.weight()
    }

    fn objects(&self) -> u64 {
        self.cache.len() as u64
    }

    fn max_size(&self) -> u64 {
        self.max_size
    }

    fn max_object_size(&self) -> u64 {
        self.max_object_size
    }

    fn detail(&self) -> TierDetail {
        TierDetail::new("memory").with("evictions", self.evictions.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
