#![allow(clippy::unwrap_used)]
//! Admission of new keys into a full disk zone (admission.rs).

use super::*;
use admission::{Doorman, BYTES_PER_OBJECT, MIN_MISSES};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::tier::Tier;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-admission-{name}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A zone of 64 KiB: about fifteen 4 KB objects.
fn open(dir: &Path, admission: Admission) -> Arc<DiskTier> {
    DiskTier::open(DiskConfig {
        path: dir.to_path_buf(),
        max_size: 64 * 1024,
        max_object_size: 64 * 1024,
        inactive: Duration::from_secs(600),
        min_free: 0,
        admission,
    })
    .unwrap()
}

fn object() -> Arc<CachedObject> {
    Arc::new(bare_object())
}

fn bare_object() -> CachedObject {
    let meta = crate::test_tier::fresh_meta();
    let body = Bytes::from(vec![b'z'; 4000]);
    CachedObject::new(meta, StatusCode::OK, HeaderMap::new(), body)
}

fn key(path: &str) -> CacheKey {
    CacheKey::new("http", "example.com", path)
}

/// What a request does to the zone: a lookup, and on a miss the fill's
/// write (then the manager's pass, as a write past the limit wakes it).
/// True on a hit.
async fn request(tier: &Arc<DiskTier>, path: &str) -> bool {
    let k = key(path);
    if tier.get(&k.as_ref()).await.is_some() {
        return true;
    }
    // The leader's second look, after winning the flight (fetch.rs `lead`).
    assert!(tier.get(&k.as_ref()).await.is_none());
    let _ = tier.insert(k, object()).await;
    tier.manage();
    false
}

/// Fills the zone with `/hot/0..n`, each asked for twice (so admitted
/// whatever the rule), to over 90% of its limit.
async fn fill_hot(tier: &Arc<DiskTier>, n: usize) {
    for round in 0..2 {
        for i in 0..n {
            request(tier, &format!("/hot/{i}")).await;
        }
        if round == 0 {
            assert!(
                tier.size_bytes() > 64 * 1024 / 10 * 9,
                "{}",
                tier.size_bytes()
            );
        }
    }
}

#[tokio::test]
async fn a_roomy_zone_stores_every_first_miss() {
    for admission in [Admission::Frequent, Admission::All] {
        let dir = scratch("roomy");
        let tier = open(&dir, admission);
        for i in 0..5 {
            assert!(!request(&tier, &format!("/{i}")).await);
        }
        assert_eq!(tier.objects(), 5, "{admission:?}");
        assert_eq!(tier.snapshot().not_admitted, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test]
async fn a_full_zone_stores_a_new_key_on_its_second_miss() {
    let dir = scratch("second");
    let tier = open(&dir, Admission::Frequent);
    fill_hot(&tier, 15).await;
    let held = tier.objects();
    // First miss: served by the caller, not written.
    let k = key("/new");
    assert!(tier.get(&k.as_ref()).await.is_none());
    assert!(tier.get(&k.as_ref()).await.is_none());
    let refused = tier.insert(k.clone(), object()).await;
    assert!(
        matches!(refused, Err(CacheError::NotAdmitted)),
        "{refused:?}"
    );
    assert!(tier
        .begin_body_write(&k, &bare_object, Some(4000))
        .is_none());
    assert_eq!(tier.objects(), held);
    assert_eq!(tier.snapshot().not_admitted, 2);
    // Second request: written.
    assert!(tier.get(&k.as_ref()).await.is_none());
    tier.insert(k.clone(), object()).await.unwrap();
    assert!(tier.get(&k.as_ref()).await.is_some());
    // A key the zone holds is rewritten without asking (a refresh).
    tier.insert(key("/hot/3"), object()).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn two_misses_at_once_admit_the_key_for_the_leader() {
    // A fill's follower misses before it joins the flight: by the time the
    // leader writes, the key has two misses and is stored, so no follower
    // is left to fetch alone.
    let dir = scratch("followers");
    let tier = open(&dir, Admission::Frequent);
    fill_hot(&tier, 15).await;
    let k = key("/popular");
    assert!(tier.get(&k.as_ref()).await.is_none()); // the leader's lookup
    assert!(tier.get(&k.as_ref()).await.is_none()); // a follower
    assert!(tier.get(&k.as_ref()).await.is_none()); // the leader's second look
    tier.insert(k.clone(), object()).await.unwrap();
    assert_eq!(tier.snapshot().not_admitted, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Hot-set hits after a scan of `scan` one-time URLs through a zone
/// holding the hot set, out of `hot` (a seeded trace: the same each run).
async fn hot_hits_after_scan(admission: Admission, hot: usize, scan: usize) -> usize {
    let dir = scratch("scan");
    let tier = open(&dir, admission);
    fill_hot(&tier, hot).await;
    // Last uses of the hot set before the scan's, to the millisecond.
    std::thread::sleep(Duration::from_millis(3));
    for i in 0..scan {
        request(&tier, &format!("/scan/{i}")).await;
    }
    let mut hits = 0;
    for i in 0..hot {
        hits += usize::from(request(&tier, &format!("/hot/{i}")).await);
    }
    let _ = std::fs::remove_dir_all(&dir);
    hits
}

#[tokio::test]
async fn a_scan_does_not_evict_the_hot_set_with_frequent_admission() {
    // (rule, hot-set hits after a 200-URL scan at least, at most)
    let table = [(Admission::Frequent, 13, 15), (Admission::All, 0, 2)];
    for (admission, least, most) in table {
        let hits = hot_hits_after_scan(admission, 15, 200).await;
        assert!(
            (least..=most).contains(&hits),
            "{admission:?}: {hits} of 15 hot keys hit after the scan"
        );
    }
}

#[test]
fn one_time_keys_of_a_whole_window_are_rarely_read_as_seen_twice() {
    // A 3 MB zone (the bench's): a window of misses of all different keys,
    // then each read back. A sketch as wide as its window read nine in ten
    // as seen twice, and admitted a scan whole.
    let max_size = 3 << 20;
    let Doorman::Frequent(sketch) = Doorman::new(Admission::Frequent, max_size) else {
        unreachable!()
    };
    let window = (max_size / BYTES_PER_OBJECT) as usize;
    let keys: Vec<u64> = (0..window as u64)
        .map(|i| crate::key::mix64(i + 1))
        .collect();
    for &k in &keys {
        sketch.record(k);
    }
    let twice = keys
        .iter()
        .filter(|&&k| sketch.estimate(k) >= MIN_MISSES)
        .count();
    assert!(
        twice * 20 <= window,
        "{twice} of {window} read as seen twice"
    );
}

#[test]
fn the_sketch_grows_with_the_zone_within_bounds() {
    let width = |max_size| match Doorman::new(Admission::Frequent, max_size) {
        Doorman::Frequent(s) => s.bytes(),
        Doorman::All => 0,
    };
    assert_eq!(width(64 * 1024), 1 << 12);
    assert_eq!(width(1 << 30), 1 << 21);
    assert_eq!(width(1 << 40), 1 << 22);
    assert!(matches!(
        Doorman::new(Admission::All, 1 << 30),
        Doorman::All
    ));
}
