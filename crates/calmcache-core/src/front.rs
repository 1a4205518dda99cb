//! The memory front: a zone (normally a memory tier) in front of a route's
//! other zones (normally disk), holding copies of their hottest objects.
//!
//! A key read from the zone behind is promoted into the front on its second
//! hit within a while (a doorkeeper of key hashes, as in TinyLFU: one-hit
//! wonders never enter). A promotion is dropped when the copy behind was
//! replaced or removed while it was read ([`Tier::version`](crate::Tier::version)); a front hit
//! marks the copy behind used ([`Tier::touch`](crate::Tier::touch)), so the zone behind does
//! not evict what the front serves. A new copy stored behind replaces the
//! front's ([`MemoryFront::stored`]), so the front never serves an older
//! version.
//!
//! Works on any tiers through [`Tier`](crate::Tier): nothing here asks what kind of
//! tier a zone has.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::disk::key_hash;
use crate::key::{CacheKey, KeyRef};
use crate::object::CachedObject;
use crate::zone::Zone;

/// Keys remembered by a doorkeeper before it starts over.
const DOORKEEPER_MAX: usize = 65_536;

/// A zone in front of others, and its doorkeeper.
pub struct MemoryFront {
    zone: Arc<Zone>,
    /// Keys hit once behind recently: a second hit promotes into the front.
    seen_once: Mutex<HashSet<u64>>,
}

impl MemoryFront {
    /// `zone` in front of others.
    pub fn new(zone: Arc<Zone>) -> Self {
        MemoryFront {
            zone,
            seen_once: Mutex::new(HashSet::new()),
        }
    }

    /// The front's zone.
    pub fn zone(&self) -> &Arc<Zone> {
        &self.zone
    }

    /// The object under `key`: the front's copy, or `behind`'s (promoted
    /// into the front on its second hit).
    pub async fn get(&self, behind: &Zone, key: &KeyRef<'_>) -> Option<Arc<CachedObject>> {
        let front = &self.zone.tier;
        if let Some(object) = front.get(key).await {
            // Keep the copy behind's last use current: its eviction must
            // not take the hottest objects for the coldest.
            behind.tier.touch(key);
            return Some(object);
        }
        let version = behind.tier.version(key);
        let object = behind.tier.get(key).await?;
        // Whole responses only: large objects stream from their file, and
        // Vary markers stay behind (they change as variants are stored).
        let promotable = object.lazy_body().is_none() && object.vary_index().is_none();
        if promotable && self.second_hit(key_hash(key)) {
            // Not if a newer copy was stored, or the key removed, while this
            // one was read.
            let current = behind.tier.version(key);
            if current.is_some() && current == version {
                if let Err(e) = front.insert(key.to_owned_key(), object.clone()).await {
                    tracing::debug!(zone = %self.zone.name, error = %e, "not promoted");
                }
            }
        }
        Some(object)
    }

    /// True on the second sighting of `hash` (bounded: past
    /// [`DOORKEEPER_MAX`] keys it starts over).
    fn second_hit(&self, hash: u64) -> bool {
        let mut seen = self.seen_once.lock().unwrap_or_else(|p| p.into_inner());
        if seen.remove(&hash) {
            return true;
        }
        if seen.len() >= DOORKEEPER_MAX {
            seen.clear();
        }
        seen.insert(hash);
        false
    }

    /// After `object` was stored under `key` behind: a copy in the front is
    /// replaced (or dropped, for a body left in its file), so the front
    /// never serves an older version.
    pub async fn stored(&self, key: &CacheKey, object: &Arc<CachedObject>) {
        let front = &self.zone.tier;
        if front.get(&key.as_ref()).await.is_none() {
            return;
        }
        // Its body in its file (a streamed fill: the front holds bodies), or
        // a copy the front refuses (larger than its max_object_size): the
        // old copy goes, the next request reads the new one behind.
        let replaced =
            object.lazy_body().is_none() && front.insert(key.clone(), object.clone()).await.is_ok();
        if !replaced {
            front.remove(&key.as_ref()).await;
        }
    }

    /// Drops the front's copy of `key`; true when there was one.
    pub async fn remove(&self, key: &KeyRef<'_>) -> bool {
        self.zone.tier.remove(key).await
    }
}

#[cfg(test)]
#[path = "front_tests.rs"]
mod tests;
