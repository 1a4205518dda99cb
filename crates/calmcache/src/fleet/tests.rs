#![allow(clippy::unwrap_used)]
use super::*;
use calmcache_core::{Freshness, ObjectMeta};
use calmcache_testkit::redis::Redis;

fn config(redis: &Redis) -> FleetConfig {
    FleetConfig {
        nodes: vec![redis.url()],
        cluster: false,
        user: None,
        password: None,
        prefix: "cc:".to_string(),
        max_object_size: 1 << 20,
        timeout: Duration::from_millis(500),
        lease: Duration::from_millis(300),
        tls_ca: None,
        tls_client: None,
    }
}

fn object(body: &str) -> Arc<CachedObject> {
    let meta = ObjectMeta {
        stored_at: Instant::now(),
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
        http::StatusCode::OK,
        http::HeaderMap::new(),
        bytes::Bytes::copy_from_slice(body.as_bytes()),
    ))
}

async fn lease(fleet: &Arc<Fleet>, key: &CacheKey) -> Lease {
    match fleet.before_fetch(key, None, Duration::from_secs(2)).await {
        Before::Fetch(Some(lease)) => lease,
        Before::Fetch(None) => panic!("no lease"),
        Before::Take(_) => panic!("a copy already"),
    }
}

async fn settled(fleet: &Fleet, what: fn(&FleetStats) -> &AtomicU64, n: u64) {
    for _ in 0..100 {
        if what(&fleet.stats).load(Ordering::Relaxed) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not settled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_writer_never_overwrites_a_newer_object() {
    let redis = Redis::start();
    let (a, b, c) = (
        Fleet::new(&config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
    );
    let key = CacheKey::new("http", "h", "/x");
    let late = lease(&a, &key).await;
    // A's node stalls (no renewal): its lease runs out and B takes over.
    late.renewal.abort();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let newer = lease(&b, &key).await;
    assert!(newer.fence > late.fence);
    b.commit(newer, key.clone(), object("from b"));
    settled(&b, |s| &s.commits, 1).await;
    // A comes back and stores its older fetch: refused.
    a.commit(late, key.clone(), object("from a"));
    settled(&a, |s| &s.commits_refused, 1).await;
    match c.before_fetch(&key, None, Duration::from_secs(1)).await {
        Before::Take(object) => assert_eq!(&object.body[..], b"from b"),
        _ => panic!("the newer copy is in redis"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_racing_a_fill_is_not_undone_by_its_store() {
    let redis = Redis::start();
    let (a, b) = (
        Fleet::new(&config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
    );
    let key = CacheKey::new("http", "h", "/y");
    let filling = lease(&a, &key).await;
    // The purge lands while A's origin fetch is under way.
    b.purge_key(&key, PurgeMode::Hard).await;
    a.commit(filling, key.clone(), object("fetched before the purge"));
    settled(&a, |s| &s.commits_refused, 1).await;
    assert_eq!(a.stats.commits.load(Ordering::Relaxed), 0);
    // Nothing to take: the next fetch is the fleet's (a new lease).
    assert!(matches!(
        b.before_fetch(&key, None, Duration::from_secs(1)).await,
        Before::Fetch(Some(_))
    ));
}
