#![allow(clippy::unwrap_used)]
use super::*;
use crate::memory::MemoryTier;
use crate::test_tier::{key, object, TestTier};
use crate::tier::{CacheError, PurgeFilter, PurgeMode, Tier, TierFuture};
use std::sync::atomic::Ordering;

fn setup() -> (MemoryFront, Arc<Zone>, Arc<TestTier>) {
    let behind = TestTier::new();
    let front = MemoryFront::new(Arc::new(Zone::new(
        "ram",
        Arc::new(MemoryTier::new(1 << 20, 64 << 10)),
    )));
    let zone = Arc::new(Zone::new("disk", behind.clone()));
    (front, zone, behind)
}

fn in_front(front: &MemoryFront, path: &str) -> bool {
    front
        .zone()
        .tier
        .get(&key(path).as_ref())
        .into_ready()
        .flatten()
        .is_some()
}

#[tokio::test]
async fn a_second_hit_promotes_and_front_hits_touch_the_copy_behind() {
    let (front, zone, behind) = setup();
    behind.insert(key("/a"), object("a")).await.unwrap();
    let k = key("/a");
    assert!(front.get(&zone, &k.as_ref()).await.is_some());
    assert!(!in_front(&front, "/a"), "one hit is not enough");
    assert!(front.get(&zone, &k.as_ref()).await.is_some());
    assert!(in_front(&front, "/a"), "promoted on the second hit");
    assert_eq!(behind.touches.load(Ordering::Relaxed), 0);
    assert!(front.get(&zone, &k.as_ref()).await.is_some());
    assert_eq!(
        behind.touches.load(Ordering::Relaxed),
        1,
        "front hit touches"
    );
    assert!(front.get(&zone, &key("/none").as_ref()).await.is_none());
}

#[tokio::test]
async fn a_copy_replaced_while_read_is_not_promoted() {
    let (front, zone, behind) = setup();
    behind.insert(key("/a"), object("a")).await.unwrap();
    let k = key("/a");
    front.get(&zone, &k.as_ref()).await;
    // Stands for a store racing the read: the version moves between the
    // stamp taken before and the one after.
    struct Racing(Arc<TestTier>);
    impl Tier for Racing {
        fn kind(&self) -> &'static str {
            "racing"
        }
        fn get<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, Option<Arc<CachedObject>>> {
            self.0.version.fetch_add(1, Ordering::Relaxed);
            self.0.get(key)
        }
        fn insert(
            &self,
            key: CacheKey,
            object: Arc<CachedObject>,
        ) -> TierFuture<'_, Result<(), CacheError>> {
            self.0.insert(key, object)
        }
        fn remove<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, bool> {
            self.0.remove(key)
        }
        fn purge_key<'a>(&'a self, key: &'a KeyRef<'_>, mode: PurgeMode) -> TierFuture<'a, bool> {
            self.0.purge_key(key, mode)
        }
        fn purge_matching<'a>(
            &'a self,
            mode: PurgeMode,
            filter: &'a PurgeFilter<'_>,
        ) -> TierFuture<'a, u64> {
            self.0.purge_matching(mode, filter)
        }
        fn purge_all(&self, mode: PurgeMode) -> TierFuture<'_, u64> {
            self.0.purge_all(mode)
        }
        fn size_bytes(&self) -> u64 {
            self.0.size_bytes()
        }
        fn objects(&self) -> u64 {
            self.0.objects()
        }
        fn max_size(&self) -> u64 {
            self.0.max_size()
        }
        fn max_object_size(&self) -> u64 {
            self.0.max_object_size()
        }
        fn version(&self, key: &KeyRef<'_>) -> Option<u64> {
            self.0.version(key)
        }
    }
    let racing = Zone::new("disk", Arc::new(Racing(behind.clone())));
    assert!(front.get(&racing, &k.as_ref()).await.is_some());
    assert!(
        !in_front(&front, "/a"),
        "a copy replaced meanwhile stays out"
    );
    drop(zone);
}

#[tokio::test]
async fn a_new_copy_stored_behind_replaces_the_front_copy() {
    let (front, zone, behind) = setup();
    behind.insert(key("/a"), object("old")).await.unwrap();
    let k = key("/a");
    front.get(&zone, &k.as_ref()).await;
    front.get(&zone, &k.as_ref()).await;
    assert!(in_front(&front, "/a"));
    let new = object("new");
    behind.insert(k.clone(), new.clone()).await.unwrap();
    front.stored(&k, &new).await;
    let got = front.get(&zone, &k.as_ref()).await.unwrap();
    assert_eq!(&got.body[..], b"new");
    // A key the front does not hold stays out of it.
    front.stored(&key("/b"), &object("b")).await;
    assert!(!in_front(&front, "/b"));
    assert!(front.remove(&k.as_ref()).await);
    assert!(!in_front(&front, "/a"));
}

#[tokio::test]
async fn a_newer_copy_the_front_cannot_take_drops_the_older_one() {
    let (_, zone, behind) = setup();
    // A front that takes objects up to 8 KiB.
    let front = MemoryFront::new(Arc::new(Zone::new(
        "ram",
        Arc::new(MemoryTier::new(1 << 20, 8 << 10)),
    )));
    let k = key("/a");
    behind.insert(k.clone(), object("old")).await.unwrap();
    front.get(&zone, &k.as_ref()).await;
    front.get(&zone, &k.as_ref()).await;
    assert!(in_front(&front, "/a"), "promoted");
    // A new copy stored behind that the front refuses (over its 8 KiB
    // max_object_size): the front must not keep serving the old one.
    let large = object(&"n".repeat(20 << 10));
    behind.insert(k.clone(), large.clone()).await.unwrap();
    front.stored(&k, &large).await;
    assert!(!in_front(&front, "/a"), "the older copy left the front");
    let got = front.get(&zone, &k.as_ref()).await.unwrap();
    assert_eq!(got.body.len(), 20 << 10, "the newer copy, from behind");
}
