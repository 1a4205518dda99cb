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
    assert_eq!(
        a.stats.leases_lost.load(Ordering::Relaxed),
        1,
        "its lease was lost"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_given_up_while_redis_hangs_is_released_once_it_answers() {
    let redis = Redis::start();
    let cfg = FleetConfig {
        lease: Duration::from_secs(30),
        timeout: Duration::from_millis(100),
        ..config(&redis)
    };
    let (a, b) = (Fleet::new(&cfg).unwrap(), Fleet::new(&cfg).unwrap());
    let key = CacheKey::new("http", "h", "/z");
    let given_up = lease(&a, &key).await;
    assert_eq!(a.stats.leases_active.load(Ordering::Relaxed), 1);
    redis.pause();
    // The fetch failed (not stored): its release misses the deadline.
    drop(given_up);
    assert_eq!(a.stats.leases_active.load(Ordering::Relaxed), 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.resume();
    // Told to Redis on its next poll: B need not wait 30 s for it.
    for _ in 0..100 {
        a.poll_purges(false).await;
        if a.stats.leases_released_late.load(Ordering::Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a.stats.leases_released_late.load(Ordering::Relaxed), 1);
    assert!(matches!(
        b.before_fetch(&key, None, Duration::from_millis(200)).await,
        Before::Fetch(Some(_))
    ));
}

#[test]
fn a_saved_position_is_trusted_only_whole_and_alike_in_every_zone() {
    let dir = std::env::temp_dir().join(format!("cc-position-{}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let (one, two) = (dir.join("one"), dir.join("two"));
    let files = [one.clone(), two.clone()];
    assert_eq!(read_position(&files), Position::Missing);
    write_position(&files, "0a1b 1700000000000-3\n").unwrap();
    assert_eq!(
        read_position(&files),
        Position::Found("0a1b".into(), "1700000000000-3".into())
    );
    // One zone new, one not: what the old one holds may have missed purges.
    std::fs::remove_file(&two).unwrap();
    assert_eq!(read_position(&files), Position::Unusable);
    for bad in ["", "0a1b", "0a1b 17-x", "0a1b 17", "0a 1b 1-2", "é 1-2"] {
        std::fs::write(&two, bad).unwrap();
        assert_eq!(
            read_position(std::slice::from_ref(&two)),
            Position::Unusable,
            "{bad:?}"
        );
    }
    std::fs::write(&two, "0a1b 1700000000000-4\n").unwrap();
    assert_eq!(read_position(&files), Position::Unusable, "zones disagree");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_fetch_log_keeps_the_most_fetched_within_its_bound() {
    let mut log = FetchLog::default();
    for i in 0..(FETCH_LOG_MAX as u64 + 50) {
        log.note(&CacheKey::new("http", "h", &format!("/{i}")), i);
    }
    assert_eq!(log.objects.len(), FETCH_LOG_MAX);
    let top = log.most_fetched();
    assert_eq!(top.len(), FETCH_LOG_SHOWN);
    assert_eq!(top[0].fleet, FETCH_LOG_MAX as u64 + 49);
    assert_eq!(top[0].here, 1);
    let long = "/x".repeat(500);
    log.note(&CacheKey::new("http", "h", &long), u64::MAX);
    assert!(log.most_fetched()[0].key.len() <= 200);
}
