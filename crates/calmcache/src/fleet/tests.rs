#![allow(clippy::unwrap_used)]
use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::entries::{hash_of, Target};
use super::position::{read_position, write_position, Position};
use super::stats::{FETCH_LOG_MAX, FETCH_LOG_SHOWN};
use calmcache_core::{CacheKey, CachedObject, PurgeMode};
use calmcache_core::{Freshness, ObjectMeta};
use calmcache_testkit::redis::Redis;
use tokio::time::Instant;

pub(super) fn config(redis: &Redis) -> FleetConfig {
    config_for(vec![redis.url()])
}

/// A fleet on `nodes` with short timeouts, for the fleet's unit tests
/// (origin_budget_tests.rs too).
pub(super) fn config_for(nodes: Vec<String>) -> FleetConfig {
    FleetConfig {
        nodes,
        cluster: false,
        user: None,
        password: None,
        prefix: "cc:".to_string(),
        max_object_size: 1 << 20,
        max_pieces_in_flight: 16 << 20,
        stream_from_peers: true,
        timeout: Duration::from_millis(500),
        lease: Duration::from_millis(300),
        tls_ca: None,
        tls_client: None,
        secret: None,
    }
}

pub(super) fn object(body: &str) -> Arc<CachedObject> {
    let meta = ObjectMeta {
        stored_at: Instant::now(),
        freshness: Freshness {
            lifetime: Duration::from_secs(60),
            initial_age: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            stale_forbidden: false,
            immutable: false,
            source: calmcache_core::LifetimeSource::Route,
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

pub(super) async fn lease(fleet: &Arc<Fleet>, key: &CacheKey) -> Lease {
    lease_for(fleet, key, &http::HeaderMap::new()).await
}

async fn lease_for(fleet: &Arc<Fleet>, key: &CacheKey, selecting: &http::HeaderMap) -> Lease {
    match fleet
        .before_fetch(key, None, Duration::from_secs(2), selecting)
        .await
    {
        Before::Fetch(Some(lease)) => lease,
        Before::Fetch(None) => panic!("no lease"),
        Before::Take(..) => panic!("a copy already"),
        Before::Stream(_) => panic!("a stream of another node's body"),
    }
}

fn asking(language: &'static str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("accept-language", http::HeaderValue::from_static(language));
    h
}

/// A variant of `body` selected by `accept-language: language`.
fn variant(body: &str, language: &'static str) -> Arc<CachedObject> {
    let plain = object(body);
    let names = [http::HeaderName::from_static("accept-language")];
    let secondary = crate::http::vary::secondary(&names, &asking(language));
    Arc::new(CachedObject::assemble(
        plain.meta.clone(),
        plain.status,
        plain.headers(),
        plain.body.clone(),
        Vec::new(),
        Some(secondary.into_boxed_str()),
    ))
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
    b.commit(newer, &key, object("from b"), None);
    settled(&b, |s| &s.commits, 1).await;
    // A comes back and stores its older fetch: refused.
    a.commit(late, &key, object("from a"), None);
    settled(&a, |s| &s.commits_refused, 1).await;
    assert_eq!(
        a.stats.leases_lost.load(Ordering::Relaxed),
        1,
        "its lease was lost"
    );
    match c
        .before_fetch(&key, None, Duration::from_secs(1), &http::HeaderMap::new())
        .await
    {
        Before::Take(object, None) => assert_eq!(&object.body[..], b"from b"),
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
    a.commit(filling, &key, object("fetched before the purge"), None);
    settled(&a, |s| &s.commits_refused, 1).await;
    assert_eq!(a.stats.commits.load(Ordering::Relaxed), 0);
    // Nothing to take: the next fetch is the fleet's (a new lease).
    assert!(matches!(
        b.before_fetch(&key, None, Duration::from_secs(1), &http::HeaderMap::new())
            .await,
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
        b.before_fetch(
            &key,
            None,
            Duration::from_millis(200),
            &http::HeaderMap::new()
        )
        .await,
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

/// Regression (issue 25, item 9): the position file in each zone followed
/// the umask (0644 with the usual one) and a `.new` left by a crash kept
/// its wider mode; it is 0600 like every file of a zone.
#[test]
fn the_saved_position_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("cc-position-mode-{}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(POSITION_FILE);
    let leftover = dir.join(format!("{POSITION_FILE}.new"));
    std::fs::write(&leftover, "x").unwrap();
    std::fs::set_permissions(&leftover, std::fs::Permissions::from_mode(0o666)).unwrap();
    write_position(std::slice::from_ref(&file), "0a1b 1700000000000-3\n").unwrap();
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:04o}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_variants_of_a_uri_are_shared_one_fetch_each_and_purged_together() {
    let redis = Redis::start();
    let (a, b, c) = (
        Fleet::new(&config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
    );
    let key = CacheKey::new("http", "h", "/v");
    let names = [http::HeaderName::from_static("accept-language")];
    let take = |before: Before, language: &str| match before {
        Before::Take(object, Some(got)) => {
            assert_eq!(got, names, "{language}: the names come with it");
            object
        }
        Before::Take(_, None) => panic!("{language}: a variant without its names"),
        Before::Fetch(_) | Before::Stream(_) => panic!("{language}: no copy to take"),
    };
    // A takes the URI's lease before it knows the URI varies; its German
    // answer becomes the URI's marker and its first variant.
    let first = lease_for(&a, &key, &asking("de")).await;
    a.commit(first, &key, variant("german", "de"), Some(&names));
    settled(&a, |s| &s.commits, 1).await;
    let de = take(
        b.before_fetch(&key, None, Duration::from_secs(1), &asking("de"))
            .await,
        "de",
    );
    assert_eq!(&de.body[..], b"german");
    // French is another variant: its own lease (on the variant), one fetch.
    let fr = lease_for(&b, &key, &asking("fr")).await;
    assert!(fr.target.variant.is_some(), "the lease is the variant's");
    b.commit(fr, &key, variant("french", "fr"), Some(&names));
    settled(&b, |s| &s.commits, 1).await;
    let fr = take(
        c.before_fetch(&key, None, Duration::from_secs(1), &asking("fr"))
            .await,
        "fr",
    );
    assert_eq!(&fr.body[..], b"french");
    let de = take(
        c.before_fetch(&key, None, Duration::from_secs(1), &asking("de"))
            .await,
        "de",
    );
    assert_eq!(&de.body[..], b"german");
    // A variant stored for one selection is never handed to another.
    let wrong = lease_for(&c, &key, &asking("it")).await;
    drop(wrong);
    // A soft purge of the URI marks every variant stale: a lease each.
    a.purge_key(&key, PurgeMode::Soft).await;
    for language in ["de", "fr"] {
        assert!(
            matches!(
                c.before_fetch(&key, None, Duration::from_secs(1), &asking(language))
                    .await,
                Before::Fetch(Some(_))
            ),
            "{language}: stale after the soft purge"
        );
    }
    // A hard purge removes them, and a fill that began before it cannot
    // bring one back.
    tokio::time::sleep(Duration::from_millis(400)).await; // those leases lapse
    let racing = lease_for(&b, &key, &asking("de")).await;
    a.purge_key(&key, PurgeMode::Hard).await;
    b.commit(racing, &key, variant("german, old", "de"), Some(&names));
    settled(&b, |s| &s.commits_refused, 1).await;
    let variants = redis.command(&["KEYS", "cc:*:v:*"]).unwrap();
    assert_eq!(variants.trim(), "*0", "no variant left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variant_entry_under_another_selection_is_never_taken() {
    // An entry put under the French variant's keys holding the German
    // answer (a forged or mixed-up write) fails the key check: a miss.
    let redis = Redis::start();
    let (a, b) = (
        Fleet::new(&config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
    );
    let key = CacheKey::new("http", "h", "/forged");
    let names = [http::HeaderName::from_static("accept-language")];
    let first = lease_for(&a, &key, &asking("de")).await;
    a.commit(first, &key, variant("german", "de"), Some(&names));
    settled(&a, |s| &s.commits, 1).await;
    let hash = hash_of(&key);
    let de = Target::variant(
        &a,
        &hash,
        &key,
        "accept-language",
        &crate::http::vary::secondary(&names, &asking("de")),
    );
    let fr = Target::variant(
        &a,
        &hash,
        &key,
        "accept-language",
        &crate::http::vary::secondary(&names, &asking("fr")),
    );
    redis.command(&["COPY", &de.meta, &fr.meta]).unwrap();
    assert!(matches!(
        b.before_fetch(&key, None, Duration::from_secs(1), &asking("fr"))
            .await,
        Before::Fetch(_)
    ));
    assert_eq!(b.stats.bad_entries.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_by_an_acquire_that_missed_its_deadline_is_let_go() {
    // Redis hangs with the acquire in its socket: the node gives up on it
    // and fetches alone, but the script runs once Redis wakes and takes the
    // lease for a fetch the fleet will never see.
    let redis = Redis::start();
    let cfg = FleetConfig {
        lease: Duration::from_secs(30),
        timeout: Duration::from_millis(100),
        ..config(&redis)
    };
    let (a, b) = (Fleet::new(&cfg).unwrap(), Fleet::new(&cfg).unwrap());
    let key = CacheKey::new("http", "h", "/orphan");
    // Connected, and the script known to Redis (a first call of it would
    // be answered NOSCRIPT and sent again whole): the acquire below is
    // sent at once, as a node under traffic sends it.
    drop(lease(&a, &CacheKey::new("http", "h", "/warm")).await);
    tokio::time::sleep(Duration::from_millis(100)).await; // its release
    redis.pause();
    let before = a
        .before_fetch(&key, None, Duration::from_secs(1), &http::HeaderMap::new())
        .await;
    assert!(
        matches!(before, Before::Fetch(None)),
        "no lease: Redis hung"
    );
    redis.resume();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lease_key = a.key(&hash_of(&key), "l");
    let held = redis.command(&["EXISTS", &lease_key]).unwrap();
    assert_eq!(held.trim(), ":1", "the late script took the lease");
    for _ in 0..100 {
        a.poll_purges(false).await;
        if a.stats.leases_released_late.load(Ordering::Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a.stats.leases_released_late.load(Ordering::Relaxed), 1);
    assert!(matches!(
        b.before_fetch(
            &key,
            None,
            Duration::from_millis(200),
            &http::HeaderMap::new()
        )
        .await,
        Before::Fetch(Some(_))
    ));
}

pub(super) fn signed_config(redis: &Redis) -> FleetConfig {
    FleetConfig {
        secret: Some(FleetSecret {
            current: b"a-fleet-secret-of-at-least-32-bytes-0123".to_vec(),
            also_accepted: None,
        }),
        ..config(redis)
    }
}

/// With the fleet secret, a URI's Vary names are signed too: a variant is
/// shared as unsigned, and names rewritten in Redis (to make nodes take a
/// variant for requests it was not made for) are refused and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_vary_names_are_shared_and_forged_ones_refused() {
    let redis = Redis::start();
    let (a, b) = (
        Fleet::new(&signed_config(&redis)).unwrap(),
        Fleet::new(&signed_config(&redis)).unwrap(),
    );
    let key = CacheKey::new("http", "h", "/v");
    let names = [http::HeaderName::from_static("accept-language")];
    let first = lease_for(&a, &key, &asking("de")).await;
    a.commit(first, &key, variant("german", "de"), Some(&names));
    settled(&a, |s| &s.commits, 1).await;
    match b
        .before_fetch(&key, None, Duration::from_secs(1), &asking("de"))
        .await
    {
        Before::Take(object, Some(got)) => {
            assert_eq!(got, names);
            assert_eq!(&object.body[..], b"german");
        }
        _ => panic!("the signed variant is shared"),
    }
    let marker = a.key(&hash_of(&key), "m");
    let stored = redis.command(&["HGET", &marker, "vary"]).unwrap();
    assert!(stored.starts_with("accept-language "), "{stored}");
    redis
        .command(&["HSET", &marker, "vary", "x-other"])
        .unwrap();
    assert!(matches!(
        b.before_fetch(&key, None, Duration::from_secs(1), &asking("de"))
            .await,
        Before::Fetch(None)
    ));
    assert_eq!(b.stats.entries_refused.load(Ordering::Relaxed), 1);
    assert_eq!(b.stats.bad_entries.load(Ordering::Relaxed), 0);
}

/// Issue 30 (FLEET.md §6): the pieces of large objects go on a connection
/// of their own, behind a breaker of their own. With that breaker open, a
/// large object stays local (nothing committed, its lease let go) while a
/// small one is still shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_bulk_channel_out_large_objects_stay_local_and_small_ones_are_shared() {
    use super::breaker::OPEN_AFTER;
    use super::ops_stats::Lane;
    let redis = Redis::start();
    let (a, b) = (
        Fleet::new(&config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
    );
    let bulk = a.link.breaker_of(Lane::Bulk);
    for _ in 0..OPEN_AFTER {
        bulk.failure(bulk.pass().expect("closed"));
    }
    assert!(!bulk.is_closed());
    assert!(a.link.breaker().is_closed(), "the control channel is fine");

    let small = CacheKey::new("http", "h", "/small");
    a.commit(lease(&a, &small).await, &small, object("small"), None);
    settled(&a, |s| &s.commits, 1).await;
    let large = CacheKey::new("http", "h", "/large");
    let body = "x".repeat(600 << 10);
    a.commit(lease(&a, &large).await, &large, object(&body), None);
    for _ in 0..100 {
        if a.ops()["put_piece"].skipped > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(a.ops()["put_piece"].skipped > 0, "no piece went to redis");
    assert_eq!(a.ops()["put_piece"].ok, 0);
    match b
        .before_fetch(
            &small,
            None,
            Duration::from_secs(2),
            &http::HeaderMap::new(),
        )
        .await
    {
        Before::Take(object, None) => assert_eq!(&object.body[..], b"small"),
        _ => panic!("the small object is shared"),
    }
    // The large one's lease was let go without a commit: B fetches it.
    let _ = lease(&b, &large).await;
    assert_eq!(a.stats.commits.load(Ordering::Relaxed), 1);
}
