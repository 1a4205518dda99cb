#![allow(clippy::unwrap_used)]
use super::*;
use crate::object::PACK_MAX;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use std::time::Duration;

fn object(body_len: usize) -> Arc<CachedObject> {
    let meta = crate::test_tier::fresh_meta();
    Arc::new(CachedObject::new(
        meta,
        StatusCode::OK,
        HeaderMap::new(),
        Bytes::from(vec![b'x'; body_len]),
    ))
}

#[tokio::test]
async fn stays_under_max_size_while_thousands_of_objects_pass() {
    let tier = MemoryTier::new(1 << 20, 64 << 10);
    for i in 0..5000 {
        let key = CacheKey::new("http", "h", &format!("/{i}"));
        tier.insert(key, object(1000 + (i % 7) * 900))
            .await
            .unwrap();
        assert!(
            tier.size_bytes() <= 1 << 20,
            "size {} after {i}",
            tier.size_bytes()
        );
    }
    assert!(tier.objects() > 100, "zone should still hold many objects");
}

#[tokio::test]
async fn evictions_are_counted_and_replacements_are_not() {
    let tier = MemoryTier::new(64 << 10, 8 << 10);
    let key = |i: usize| CacheKey::new("http", "h", &format!("/{i}"));
    // The same key stored again replaces its copy: no eviction.
    for _ in 0..50 {
        tier.insert(key(0), object(2000)).await.unwrap();
    }
    assert_eq!(tier.detail().count("evictions"), Some(0));
    for i in 1..200 {
        tier.insert(key(i), object(2000)).await.unwrap();
    }
    let evicted = tier.detail().count("evictions").unwrap();
    assert!(evicted > 0, "200 x 2 KB is over 64 KiB");
    assert_eq!(tier.objects() + evicted, 200, "held + evicted = stored");
    // A removal is not an eviction.
    let held = (0..200).find(|&i| tier.cache.get(&key(i).as_ref()).is_some());
    assert!(tier.remove(&key(held.unwrap()).as_ref()).await);
    assert_eq!(tier.detail().count("evictions"), Some(evicted));
}

#[tokio::test]
async fn too_large_objects_are_refused() {
    let tier = MemoryTier::new(1 << 20, 4096);
    let err = tier
        .insert(CacheKey::new("http", "h", "/big"), object(8192))
        .await
        .unwrap_err();
    assert!(matches!(err, CacheError::TooLarge { .. }));
    assert!(tier.get(&KeyRef::new("http", "h", "/big")).await.is_none());
}

#[tokio::test]
async fn hits_share_the_body_without_copying() {
    let tier = MemoryTier::new(1 << 20, 64 << 10);
    tier.insert(CacheKey::new("http", "h", "/a"), object(100))
        .await
        .unwrap();
    let a = tier.get(&KeyRef::new("http", "h", "/a")).await.unwrap();
    let b = tier.get(&KeyRef::new("http", "h", "/a")).await.unwrap();
    assert_eq!(a.body.as_ptr(), b.body.as_ptr());
    assert!(tier.remove(&KeyRef::new("http", "h", "/a")).await);
    assert!(tier.get(&KeyRef::new("http", "h", "/a")).await.is_none());
}

fn tagged(tags: &str) -> Arc<CachedObject> {
    let mut headers = HeaderMap::new();
    headers.insert("cache-tag", http::HeaderValue::from_str(tags).unwrap());
    crate::test_tier::object_with("tagged", headers)
}

#[tokio::test]
async fn through_the_trait_every_answer_is_ready_at_once() {
    let tier: Arc<dyn Tier> = Arc::new(MemoryTier::new(1 << 20, 64 << 10));
    let k = CacheKey::new("http", "h", "/a");
    assert!(tier
        .insert(k.clone(), object(10))
        .into_ready()
        .unwrap()
        .is_ok());
    // A hit: no boxed future, no await needed.
    let hit = tier.get(&k.as_ref()).into_ready().unwrap();
    assert!(hit.is_some());
    assert!(tier
        .get(&KeyRef::new("http", "h", "/b"))
        .into_ready()
        .unwrap()
        .is_none());
    assert_eq!(tier.kind(), "memory");
    assert!(tier.healthy());
    assert!(tier.remove(&k.as_ref()).await);
    assert!(!tier.remove(&k.as_ref()).await);
}

#[tokio::test]
async fn purges_by_filter_read_tags_and_soft_ones_keep_an_expired_copy() {
    let tier: Arc<dyn Tier> = Arc::new(MemoryTier::new(1 << 20, 64 << 10));
    for (path, tags) in [("/1", "a, b"), ("/2", "b"), ("/3", "c")] {
        let key = CacheKey::new("http", "h", path);
        tier.insert(key, tagged(tags)).await.unwrap();
    }
    let has_b = |_: &CacheKey, tags: Tags<'_>| tags.iter().any(|t| t == "b");
    assert_eq!(tier.purge_matching(PurgeMode::Soft, &has_b).await, 2);
    assert_eq!(tier.objects(), 3, "a soft purge keeps the objects");
    let now = tokio::time::Instant::now() + Duration::from_millis(1);
    let one = tier.get(&KeyRef::new("http", "h", "/1")).await.unwrap();
    assert!(!one.meta.is_fresh(now), "expired by the soft purge");
    let three = tier.get(&KeyRef::new("http", "h", "/3")).await.unwrap();
    assert!(three.meta.is_fresh(now));
    assert_eq!(tier.purge_matching(PurgeMode::Hard, &has_b).await, 2);
    assert_eq!(tier.objects(), 1);
    let k3 = CacheKey::new("http", "h", "/3");
    assert!(tier.purge_key(&k3.as_ref(), PurgeMode::Soft).await);
    assert_eq!(tier.objects(), 1);
    assert_eq!(tier.purge_all(PurgeMode::Hard).await, 1);
    assert_eq!(tier.objects(), 0);
    assert!(!tier.purge_key(&k3.as_ref(), PurgeMode::Hard).await);
}

fn headed(body_len: usize) -> CachedObject {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert("x-custom", http::HeaderValue::from_static("value"));
    let plain = object(body_len);
    CachedObject::assemble(
        plain.meta.clone(),
        StatusCode::OK,
        headers,
        Bytes::from(vec![b'y'; body_len]),
        Vec::new(),
        None,
    )
}

#[tokio::test]
async fn a_zone_keeps_a_small_body_in_its_heads_buffer_and_charges_what_it_holds() {
    let tier = MemoryTier::new(1 << 20, 64 << 10);
    let given = Arc::new(headed(1024));
    tier.insert(CacheKey::new("http", "h", "/p"), given.clone())
        .await
        .unwrap();
    let kept = tier.get(&KeyRef::new("http", "h", "/p")).await.unwrap();
    // A packed copy: same response, one buffer for head and body, and a
    // smaller charge than the object as given (two buffers).
    assert_eq!(kept.body, given.body);
    assert_eq!(kept.headers(), given.headers());
    assert!(kept.packed().is_none(), "kept packed");
    assert!(kept.memory_cost() < given.memory_cost());
    let key = CacheKey::new("http", "h", "/p");
    assert_eq!(
        tier.size_bytes() as usize,
        key.memory_cost() + kept.memory_cost() + INDEX_ENTRY_COST
    );
    // Hits share it.
    let again = tier.get(&KeyRef::new("http", "h", "/p")).await.unwrap();
    assert_eq!(again.body.as_ptr(), kept.body.as_ptr());
    // A large body keeps its own buffer.
    let large = Arc::new(headed(PACK_MAX));
    tier.insert(CacheKey::new("http", "h", "/l"), large.clone())
        .await
        .unwrap();
    let kept = tier.get(&KeyRef::new("http", "h", "/l")).await.unwrap();
    assert_eq!(kept.body.as_ptr(), large.body.as_ptr());
}

#[tokio::test]
async fn a_zone_as_large_as_its_largest_object_never_holds_more_than_max_size() {
    // max_size == max_object_size: each object may be refused (too large,
    // or its real cost over the zone's size) or stored alone, never more.
    let max = 64 << 10;
    let tier = MemoryTier::new(max, max);
    for (i, len) in [1, 1000, 16_000, 40_000, 60_000, 64_000, 65_536, 70_000]
        .into_iter()
        .enumerate()
    {
        let key = CacheKey::new("http", "h", &format!("/{i}"));
        let stored = tier.insert(key, Arc::new(headed(len))).await;
        if len as u64 > max {
            assert!(matches!(stored, Err(CacheError::TooLarge { .. })), "{len}");
        }
        assert!(
            tier.size_bytes() <= max,
            "{len}: size {}",
            tier.size_bytes()
        );
        let held = tier.get(&KeyRef::new("http", "h", &format!("/{i}"))).await;
        if let Some(held) = held {
            assert_eq!(held.body.len(), len);
        }
    }
    // Small ones after the large ones are taken (the policy decides which
    // stay), still within the size.
    for i in 0..20 {
        let key = CacheKey::new("http", "h", &format!("/s{i}"));
        tier.insert(key, Arc::new(headed(100))).await.unwrap();
        assert!(tier.size_bytes() <= max);
    }
    assert!(tier.objects() >= 1);
}

#[tokio::test]
async fn eviction_keeps_the_zone_under_max_size_with_packed_and_large_objects() {
    let max = 2 << 20;
    let tier = MemoryTier::new(max, 256 << 10);
    for i in 0..3000 {
        let len = [10, 1024, 5000, PACK_MAX - 1, PACK_MAX, 100 << 10][i % 6];
        let key = CacheKey::new("http", "h", &format!("/{i}"));
        tier.insert(key, Arc::new(headed(len))).await.unwrap();
        assert!(
            tier.size_bytes() <= max,
            "size {} after {i}",
            tier.size_bytes()
        );
    }
    assert!(tier.objects() > 20);
}
