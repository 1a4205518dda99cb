#![allow(clippy::unwrap_used)]
use super::*;
use crate::freshness::Freshness;
use crate::object::ObjectMeta;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use std::time::Duration;

fn object(body_len: usize) -> Arc<CachedObject> {
    let meta = ObjectMeta {
        stored_at: tokio::time::Instant::now(),
        freshness: Freshness {
            lifetime: Duration::from_secs(60),
            initial_age: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            stale_forbidden: false,
            immutable: false,
        },
        fetch_time: Duration::from_millis(5),
    };
    Arc::new(CachedObject::new(
        meta,
        StatusCode::OK,
        HeaderMap::new(),
        Bytes::from(vec![b'x'; body_len]),
    ))
}

#[test]
fn stays_under_max_size_while_thousands_of_objects_pass() {
    let tier = MemoryTier::new(1 << 20, 64 << 10);
    for i in 0..5000 {
        let key = CacheKey::new("http", "h", &format!("/{i}"));
        tier.insert(key, object(1000 + (i % 7) * 900)).unwrap();
        assert!(
            tier.size_bytes() <= 1 << 20,
            "size {} after {i}",
            tier.size_bytes()
        );
    }
    assert!(tier.objects() > 100, "zone should still hold many objects");
}

#[test]
fn too_large_objects_are_refused() {
    let tier = MemoryTier::new(1 << 20, 4096);
    let err = tier
        .insert(CacheKey::new("http", "h", "/big"), object(8192))
        .unwrap_err();
    assert!(matches!(err, CacheError::TooLarge { .. }));
    assert!(tier.get(&KeyRef::new("http", "h", "/big")).is_none());
}

#[test]
fn hits_share_the_body_without_copying() {
    let tier = MemoryTier::new(1 << 20, 64 << 10);
    tier.insert(CacheKey::new("http", "h", "/a"), object(100))
        .unwrap();
    let a = tier.get(&KeyRef::new("http", "h", "/a")).unwrap();
    let b = tier.get(&KeyRef::new("http", "h", "/a")).unwrap();
    assert_eq!(a.body.as_ptr(), b.body.as_ptr());
    assert!(tier.remove(&KeyRef::new("http", "h", "/a")));
    assert!(tier.get(&KeyRef::new("http", "h", "/a")).is_none());
}
