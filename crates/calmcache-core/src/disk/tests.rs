#![allow(clippy::unwrap_used)]
use super::*;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::object::LazyBody;
use crate::tier::{Figure, PurgeMode, Tier};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-disk-{name}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(path: &Path, max_size: u64) -> DiskConfig {
    DiskConfig {
        path: path.to_path_buf(),
        max_size,
        max_object_size: max_size,
        inactive: Duration::from_secs(600),
        min_free: 0,
        admission: Admission::All,
    }
}

fn object(body: &str) -> Arc<CachedObject> {
    let meta = crate::test_tier::fresh_meta();
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("text/plain"));
    Arc::new(CachedObject::new(
        meta,
        StatusCode::OK,
        headers,
        Bytes::from(body.to_owned()),
    ))
}

fn key(path: &str) -> CacheKey {
    CacheKey::new("http", "example.com", path)
}

#[tokio::test]
async fn objects_survive_a_restart() {
    let dir = scratch("restart");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    tier.insert(key("/a"), object("alpha")).await.unwrap();
    tier.insert(key("/b"), object("beta")).await.unwrap();
    tier.insert(CacheKey::new("https", "other.test", "/c"), object("gamma"))
        .await
        .unwrap();
    assert_eq!(tier.objects(), 3);
    assert_eq!(
        tier.loaded_hosts(),
        crate::tier::HostsFound::default(),
        "none loaded"
    );
    let got = tier.get(&key("/a").as_ref()).await.unwrap();
    assert_eq!(&got.body[..], b"alpha");
    drop(tier);
    // A new process: the loader rebuilds the index from the files.
    let again = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    assert_eq!(again.objects(), 0);
    again.load();
    assert!(again.stats().loader_done.load(Ordering::Relaxed));
    assert_eq!(again.objects(), 3);
    // The hosts of what it found, for purges by path.
    let found = again.loaded_hosts();
    let hosts: Vec<&str> = found.hosts.iter().map(|h| &**h).collect();
    assert_eq!(hosts, ["example.com", "other.test"]);
    let got = again.get(&key("/b").as_ref()).await.unwrap();
    assert_eq!(&got.body[..], b"beta");
    assert_eq!(got.headers()["content-type"], "text/plain");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn torn_foreign_and_temp_files_are_removed_never_served() {
    let dir = scratch("torn");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    tier.insert(key("/torn"), object(&"x".repeat(1000)))
        .await
        .unwrap();
    tier.insert(key("/ok"), object("fine")).await.unwrap();
    let torn = tier.file_path(key_hash(&key("/torn").as_ref()));
    let len = std::fs::metadata(&torn).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&torn)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let foreign = dir.join("ab").join("cd");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("abcd000000000000"), b"not a cache file").unwrap();
    let temp = foreign.join(".tmp-left-over");
    std::fs::write(&temp, b"half").unwrap();
    // calmcache's own files at the top (the fleet's purge position) stay;
    // the same name below the top is not ours.
    let own = dir.join(format!("{RESERVED_PREFIX}fleet-position"));
    std::fs::write(&own, b"e 0-0\n").unwrap();
    let misplaced = foreign.join(format!("{RESERVED_PREFIX}fleet-position"));
    std::fs::write(&misplaced, b"e 0-0\n").unwrap();
    drop(tier);
    let again = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    again.load();
    assert_eq!(again.objects(), 1, "only the whole file is indexed");
    assert!(!torn.exists() && !temp.exists());
    assert!(!foreign.join("abcd000000000000").exists());
    assert!(own.exists() && !misplaced.exists());
    assert!(again.get(&key("/torn").as_ref()).await.is_none());
    assert!(again.stats().broken_files.load(Ordering::Relaxed) >= 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_file_broken_after_indexing_is_a_miss_and_is_forgotten() {
    let dir = scratch("broken");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    tier.insert(key("/b"), object("body")).await.unwrap();
    let path = tier.file_path(key_hash(&key("/b").as_ref()));
    std::fs::write(&path, b"garbage").unwrap();
    assert!(tier.get(&key("/b").as_ref()).await.is_none());
    assert_eq!(tier.objects(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A zone of 64 KiB in `dir` given 30 objects of 4,000 bytes, `/0` to
/// `/29`, `pause` apart.
async fn over_64_kib(dir: &Path, pause: Duration) -> Arc<DiskTier> {
    let tier = DiskTier::open(config(dir, 64 * 1024)).unwrap();
    let body = "y".repeat(4000);
    for i in 0..30 {
        tier.insert(key(&format!("/{i}")), object(&body))
            .await
            .unwrap();
        std::thread::sleep(pause);
    }
    tier
}

#[tokio::test]
async fn the_manager_keeps_the_zone_under_max_size_lru_first() {
    let dir = scratch("lru");
    let tier = over_64_kib(&dir, Duration::ZERO).await;
    assert!(tier.size_bytes() > 64 * 1024);
    tier.manage();
    assert!(tier.size_bytes() <= 64 * 1024, "{}", tier.size_bytes());
    assert!(tier.stats().evictions.load(Ordering::Relaxed) > 0);
    // Files follow the index.
    // Unlinks run on blocking threads; give them a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count_files(&dir), tier.objects() as usize);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Objects written a few milliseconds apart are evicted in the order they
/// were last used: a hot object touched after the others stays, however
/// close together they came (uses were once counted in 100 ms ticks, and a
/// fast machine filled a zone within one: eviction then took hot and cold
/// alike).
#[tokio::test]
async fn eviction_tells_uses_apart_by_the_millisecond() {
    let dir = scratch("lru-ms");
    let tier = over_64_kib(&dir, Duration::from_millis(2)).await;
    // The two first written are used last.
    tier.touch(&key("/1").as_ref());
    std::thread::sleep(Duration::from_millis(2));
    tier.touch(&key("/0").as_ref());
    tier.manage();
    let kept: Vec<bool> = (0..30)
        .map(|i| tier.contains(&key(&format!("/{i}")).as_ref()))
        .collect();
    assert!(kept[0] && kept[1], "the objects used last stay: {kept:?}");
    let evicted = kept.iter().filter(|k| !**k).count();
    assert!(evicted > 0, "over max_size: some were evicted");
    // Exactly the least recently used: /2, /3, ... in order of writing.
    let expected: Vec<bool> = (0..30).map(|i| i < 2 || i >= 2 + evicted).collect();
    assert_eq!(kept, expected, "oldest use first");
    let _ = std::fs::remove_dir_all(&dir);
}

fn count_files(dir: &Path) -> usize {
    let mut files = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.file_name() != ZONE_MARKER {
                files += 1;
            }
        }
    }
    files
}

#[tokio::test]
async fn inactive_objects_are_removed() {
    let dir = scratch("inactive");
    let mut cfg = config(&dir, 1 << 20);
    cfg.inactive = Duration::from_secs(1);
    let tier = DiskTier::open(cfg).unwrap();
    tier.insert(key("/old"), object("old")).await.unwrap();
    tier.manage();
    assert_eq!(tier.objects(), 1, "used just now");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    tier.manage();
    assert_eq!(tier.objects(), 0);
    assert_eq!(tier.stats().expired_inactive.load(Ordering::Relaxed), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_write_fault_is_counted_not_fatal_and_the_zone_recovers() {
    let dir = scratch("fault");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    // Block the object's directory with a file (root ignores permissions, so
    // this is how a test makes writes fail): ENOTDIR / EEXIST on write.
    let k = key("/fault");
    let path = tier.file_path(key_hash(&k.as_ref()));
    let shard_dir = path.parent().unwrap().to_path_buf();
    std::fs::write(&shard_dir, b"in the way").unwrap();
    assert!(tier.insert(k.clone(), object("x")).await.is_err());
    assert_eq!(tier.stats().errors.load(Ordering::Relaxed), 1);
    assert!(!tier.healthy(), "out of hash rings for a while");
    assert_eq!(tier.objects(), 0);
    // The fault clears: the next write works.
    std::fs::remove_file(&shard_dir).unwrap();
    tier.insert(k.clone(), object("x")).await.unwrap();
    assert!(tier.get(&k.as_ref()).await.is_some());
    // The whole directory deleted under the running zone: recreated on write.
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(tier.get(&k.as_ref()).await.is_none());
    tier.insert(key("/after"), object("y")).await.unwrap();
    assert!(tier.get(&key("/after").as_ref()).await.is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_path_that_cannot_be_a_directory_fails_at_open() {
    let file = scratch("notadir");
    std::fs::write(&file, b"file").unwrap();
    assert!(DiskTier::open(config(&file, 1 << 20)).is_err());
    let _ = std::fs::remove_file(&file);
}

#[test]
fn key_hashes_are_stable() {
    // File names depend on it across restarts and builds.
    assert_eq!(
        key_hash(&KeyRef::new("http", "example.com", "/")),
        key_hash(&CacheKey::new("http", "example.com", "/").as_ref())
    );
    assert_eq!(
        format!("{:016x}", key_hash(&KeyRef::new("", "", ""))).len(),
        16
    );
}

#[test]
fn a_non_empty_directory_that_is_not_a_zone_is_refused() {
    // The loader removes what it cannot read: it must never run in a
    // directory of other files (path = "/var/lib" by mistake).
    let dir = scratch("foreign-dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("precious.txt"), b"keep me").unwrap();
    let err = DiskTier::open(config(&dir, 1 << 20)).err().unwrap();
    assert!(err.to_string().contains("not a calmcache zone"), "{err}");
    assert!(dir.join("precious.txt").exists());
    // An empty directory becomes a zone, and opens again after.
    let empty = scratch("empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    drop(DiskTier::open(config(&empty, 1 << 20)).unwrap());
    assert!(empty.join(ZONE_MARKER).exists());
    drop(DiskTier::open(config(&empty, 1 << 20)).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

#[tokio::test]
async fn the_loader_keeps_this_process_temp_files_and_removal_reaches_unindexed_files() {
    let dir = scratch("loader-race");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    tier.insert(key("/k"), object("v")).await.unwrap();
    let path = tier.file_path(key_hash(&key("/k").as_ref()));
    let shard = path.parent().unwrap();
    let ours = shard.join(format!(".tmp-{}-99", disk_format::start_token()));
    // Another start's (a crash), and one of a version that used the PID:
    // in a container the PID is 1 on every start, so that is no proof.
    let theirs = shard.join(".tmp-0123456789abcdef-1");
    let pid_named = shard.join(format!(".tmp-{}-1", std::process::id()));
    std::fs::write(&ours, b"in progress").unwrap();
    std::fs::write(&theirs, b"left over").unwrap();
    std::fs::write(&pid_named, b"left").unwrap();
    drop(tier);
    let again = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    // Removed before the loader reached it: the file goes too.
    assert!(!again.remove(&key("/k").as_ref()).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    again.load();
    assert!(ours.exists(), "a write in progress is not touched");
    assert!(!theirs.exists());
    assert!(!pid_named.exists());
    assert_eq!(again.stats().leftover_temp_files.load(Ordering::Relaxed), 2);
    assert_eq!(
        again.stats().leftover_temp_bytes.load(Ordering::Relaxed),
        13
    );
    assert!(
        again.get(&key("/k").as_ref()).await.is_none(),
        "invalidated stays invalid"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_loaded_file_with_a_flipped_body_byte_is_never_served() {
    // The body checksum is checked on the first read after a load (the
    // page-cache fast path included): same length, one byte changed.
    let dir = scratch("flipped");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    tier.insert(key("/f"), object("a body to damage"))
        .await
        .unwrap();
    let path = tier.file_path(key_hash(&key("/f").as_ref()));
    drop(tier);
    let mut data = std::fs::read(&path).unwrap();
    let at = data.len() - 6; // inside the body, before its 4-byte CRC
    data[at] ^= 0x20;
    std::fs::write(&path, &data).unwrap();
    let again = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    again.load();
    assert_eq!(again.objects(), 1, "the header is intact: indexed");
    assert!(again.get(&key("/f").as_ref()).await.is_none());
    assert_eq!(again.objects(), 0);
    assert_eq!(again.stats().broken_files.load(Ordering::Relaxed), 1);
    // The unlink runs on a blocking thread.
    for _ in 0..200 {
        if !path.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!path.exists(), "the damaged file is removed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn files_of_the_two_level_layout_are_moved_home_by_the_loader() {
    let dir = scratch("layout");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    tier.insert(key("/old"), object("kept across the move"))
        .await
        .unwrap();
    let hash = key_hash(&key("/old").as_ref());
    let home = tier.file_path(hash);
    drop(tier);
    let hex = format!("{hash:016x}");
    let old_dir = dir.join(&hex[0..2]).join(&hex[2..4]);
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::rename(&home, old_dir.join(&hex)).unwrap();
    // A file under its wrong hash name is foreign: removed.
    std::fs::write(old_dir.join("0123456789abcdef"), b"x").unwrap();

    let again = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    again.load();
    assert_eq!(again.objects(), 1);
    assert!(home.exists(), "moved to {}", home.display());
    assert!(!old_dir.exists(), "the emptied old directory is removed");
    let got = again.get(&key("/old").as_ref()).await.unwrap();
    assert_eq!(&got.body[..], b"kept across the move");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: soft purges of disk objects lived only in memory, and after a
/// restart the objects came back fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_purges_are_written_into_the_file_and_survive_a_restart() {
    let dir = scratch("soft-restart");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    for path in ["/a", "/b", "/c", "/d"] {
        tier.insert(key(path), object(path)).await.unwrap();
    }
    // One key (its header rewritten on a blocking thread), a scan, and a
    // key that is not there.
    let soft = PurgeMode::Soft;
    assert!(tier.purge_key(&key("/a").as_ref(), soft).await);
    let b = key("/b");
    assert_eq!(tier.purge_matching(soft, &|k, _| *k == b).await, 1);
    assert!(!tier.purge_key(&key("/none").as_ref(), soft).await);
    assert_eq!(tier.soft_marks(), 2);
    let lifetime = |path: &str| {
        let file = tier.file_path(key_hash(&key(path).as_ref()));
        disk_format::read_summary(&file).unwrap().freshness.lifetime
    };
    for _ in 0..100 {
        if lifetime("/a") < Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        lifetime("/a") < Duration::from_secs(1),
        "{:?}",
        lifetime("/a")
    );
    assert!(lifetime("/b") < Duration::from_secs(1));
    assert_eq!(lifetime("/c"), Duration::from_secs(60));
    drop(tier);

    let again = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    again.load();
    assert_eq!(again.soft_marks(), 0, "the files carry the marks");
    let now = tokio::time::Instant::now();
    for path in ["/a", "/b"] {
        let got = again.get(&key(path).as_ref()).await.unwrap();
        assert!(!got.meta.is_fresh(now), "{path} came back fresh");
        let f = got.meta.freshness;
        assert!(f.stale_while_revalidate >= crate::object::SOFT_PURGE_STALE);
        assert_eq!(&got.body[..], path.as_bytes(), "body untouched");
    }
    let c = again.get(&key("/c").as_ref()).await.unwrap();
    assert!(c.meta.is_fresh(now));
    // A purge of everything marks every file (no key known).
    assert_eq!(again.purge_all(PurgeMode::Soft).await, 4);
    drop(again);
    let third = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    third.load();
    let c = third.get(&key("/c").as_ref()).await.unwrap();
    assert!(!c.meta.is_fresh(tokio::time::Instant::now()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_purge_never_marks_a_copy_stored_after_it() {
    let dir = scratch("soft-newer");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    tier.insert(key("/n"), object("new")).await.unwrap();
    let file = tier.file_path(key_hash(&key("/n").as_ref()));
    let before = SystemTime::now() - Duration::from_secs(5);
    assert!(!disk_format::mark_soft_purged(&file, None, before).unwrap());
    let other = key("/other");
    assert!(
        !disk_format::mark_soft_purged(&file, Some(&other.as_ref()), SystemTime::now()).unwrap()
    );
    let summary = disk_format::read_summary(&file).unwrap();
    assert_eq!(summary.freshness.lifetime, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The in-memory marks go with their entries: replaced, hard-purged,
/// evicted, or found broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_marks_are_pruned_when_entries_leave() {
    let dir = scratch("soft-prune");
    let tier = DiskTier::open(config(&dir, 64 * 1024)).unwrap();
    let body = "z".repeat(4000);
    for i in 0..30 {
        tier.insert(key(&format!("/{i}")), object(&body))
            .await
            .unwrap();
    }
    assert_eq!(tier.purge_all(PurgeMode::Soft).await, 30);
    assert_eq!(tier.soft_marks(), 30);
    // Replaced by a new copy.
    tier.insert(key("/0"), object("fresh")).await.unwrap();
    assert_eq!(tier.soft_marks(), 29);
    let got = tier.get(&key("/0").as_ref()).await.unwrap();
    assert!(got.meta.is_fresh(tokio::time::Instant::now()));
    // Hard-purged.
    assert!(tier.purge_key(&key("/1").as_ref(), PurgeMode::Hard).await);
    assert_eq!(tier.soft_marks(), 28);
    // Broken file, found on a read.
    let path = tier.file_path(key_hash(&key("/2").as_ref()));
    std::fs::write(&path, b"garbage").unwrap();
    assert!(tier.get(&key("/2").as_ref()).await.is_none());
    assert_eq!(tier.soft_marks(), 27);
    // Evicted to stay under max_size: marks never outnumber the index.
    tier.manage();
    assert!(tier.stats().evictions.load(Ordering::Relaxed) > 0);
    assert!(tier.soft_marks() <= tier.objects() as usize);
    assert!(tier.soft_marks() < 27);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `body` in pieces through a streaming write (`spooled` or not),
/// checking what readers see of it meanwhile, and returns the lazy body.
async fn stream_write(tier: &Arc<DiskTier>, path: &str, body: &[u8], spooled: bool) -> LazyBody {
    stream_write_in(tier, path, body, spooled, 100 * 1024).await
}

async fn stream_write_in(
    tier: &Arc<DiskTier>,
    path: &str,
    body: &[u8],
    spooled: bool,
    piece: usize,
) -> LazyBody {
    let mut headers = object("").headers().clone();
    headers.insert("content-length", HeaderValue::from(body.len()));
    let done = Arc::new(CachedObject::new(
        object("").meta.clone(),
        StatusCode::OK,
        headers,
        Bytes::new(),
    ));
    // A fixed header needs its length up front; a spooled one gets it last.
    let head = if spooled { object("") } else { done.clone() };
    let mut write = if spooled {
        tier.begin_spooled_write(key(path), &head).unwrap()
    } else {
        tier.begin_write(key(path), &head).unwrap()
    };
    for piece in body.chunks(piece) {
        write.push(Bytes::copy_from_slice(piece)).await;
        assert!(!write.is_abandoned());
        if let Some(w) = write.written() {
            // Readers of a body being written see what is written.
            let mut buf = vec![0u8; w.len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&*w.file, &mut buf, w.body_at).unwrap();
            assert_eq!(&buf[..], &body[..buf.len()]);
        }
    }
    write.finish(&done).await.unwrap()
}

#[tokio::test]
async fn a_streamed_write_of_many_small_chunks_into_a_deleted_directory_is_byte_exact() {
    let dir = scratch("chunks");
    let tier = DiskTier::open(config(&dir, 64 << 20)).unwrap();
    let body: Vec<u8> = (0..1_300_000u32).map(|i| (i % 251) as u8).collect();
    // 1,300 chunks of 1,000 bytes: each 256 KiB batch is more than the 64
    // parts one pwritev takes. The object's directory is missing (created
    // only when the temp file cannot be made without it).
    let shard = tier.file_path(key_hash(&key("/small").as_ref()));
    let _ = std::fs::remove_dir_all(shard.parent().unwrap());
    for spooled in [false, true] {
        let lazy = stream_write_in(&tier, "/small", &body, spooled, 1000).await;
        assert_eq!(&lazy.read_all().unwrap()[..], &body[..]);
        let stored = tier.get(&key("/small").as_ref()).await.unwrap();
        let from_file = match stored.lazy_body() {
            Some(lazy) => lazy.read_all().unwrap(),
            None => stored.body.clone(),
        };
        assert_eq!(&from_file[..], &body[..], "spooled: {spooled}");
        std::fs::remove_dir_all(shard.parent().unwrap()).unwrap();
        assert!(tier.get(&key("/small").as_ref()).await.is_none());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn streamed_and_spooled_writes_hand_back_their_file_as_a_lazy_body() {
    let dir = scratch("spooled");
    let tier = DiskTier::open(config(&dir, 64 << 20)).unwrap();
    let body: Vec<u8> = (0..1_500_000u32).map(|i| (i % 253) as u8).collect();
    for (path, spooled) in [("/fixed", false), ("/spooled", true)] {
        let lazy = stream_write(&tier, path, &body, spooled).await;
        assert_eq!(lazy.len, body.len() as u64, "{path}");
        assert_eq!(&lazy.read_all().unwrap()[..], &body[..], "{path}");
        // The file in place reads back the same, with the final headers.
        let stored = tier.get(&key(path).as_ref()).await.unwrap();
        assert_eq!(stored.headers()["content-length"], "1500000", "{path}");
        let from_file = match &stored.lazy_body() {
            Some(lazy) => lazy.read_all().unwrap(),
            None => stored.body.clone(),
        };
        assert_eq!(&from_file[..], &body[..], "{path}");
    }
    // Only the two object files are left: no spool, no temporary file.
    assert_eq!(zone_files(&dir), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The files of a zone's directory, its marker aside.
fn zone_files(dir: &Path) -> usize {
    let mut files = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.file_name() != ZONE_MARKER {
                files += 1;
            }
        }
    }
    files
}

// Issue 29: a batch is written on the blocking pool while the fill goes on,
// so a write can be dropped (origin failed, client gone) with its file being
// created or a batch in flight: the task that holds the file removes it.
#[tokio::test]
async fn a_streamed_write_dropped_with_a_batch_in_flight_leaves_no_file() {
    let dir = scratch("dropped");
    let tier = DiskTier::open(config(&dir, 64 << 20)).unwrap();
    let head = object("");
    for pushed in [0usize, 100 * 1024, 300 * 1024, 700 * 1024] {
        let mut write = tier.begin_write(key("/dropped"), &head).unwrap();
        for piece in vec![7u8; pushed].chunks(50 * 1024) {
            write.push(Bytes::copy_from_slice(piece)).await;
        }
        drop(write);
        // The blocking task ends on its own: wait for it, bounded.
        let mut left = zone_files(&dir);
        for _ in 0..500 {
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            left = zone_files(&dir);
        }
        assert_eq!(left, 0, "after {pushed} bytes");
        assert!(tier.get(&key("/dropped").as_ref()).await.is_none());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_zone_used_by_another_process_is_refused_and_one_process_shares_its_lock() {
    let dir = scratch("locked");
    let first = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    // A second tier of this process (a reload) shares the lock.
    let second = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    drop((first, second));
    // Another process's flock: an open file description of its own.
    let other = std::fs::File::open(dir.join(ZONE_MARKER)).unwrap();
    rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    let err = DiskTier::open(config(&dir, 1 << 20)).err().unwrap();
    assert!(
        err.to_string()
            .contains("in use by another calmcache process"),
        "{err}"
    );
    drop(other);
    drop(DiskTier::open(config(&dir, 1 << 20)).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn enospc_and_edquot_count_as_no_space_and_bound_the_zone() {
    let dir = scratch("nospace");
    let tier = DiskTier::open(config(&dir, 1 << 40)).unwrap();
    assert_eq!(tier.effective_max_size(), 1 << 40);
    assert!(tier.fs_capacity().is_none());
    let full = std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
    let quota = std::io::Error::from_raw_os_error(rustix::io::Errno::DQUOT.raw_os_error());
    let other = std::io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error());
    assert!(is_no_space(&full) && is_no_space(&quota) && !is_no_space(&other));
    tier.write_failed(FormatError::Io(quota));
    assert_eq!(
        tier.stats().write_failures_nospace.load(Ordering::Relaxed),
        1
    );
    assert!(
        tier.healthy(),
        "a full file system keeps the zone in the ring"
    );
    assert_eq!(tier.fs_capacity(), Some(0));
    // A 1 TiB max_size does not fit this file system: it bounds the zone
    // at what it holds (free space), not 0 forever.
    tier.manage();
    let capacity = tier.fs_capacity().unwrap();
    assert!(capacity > 0);
    // 5% kept free for writes in progress, 5% more for the failed write.
    assert_eq!(tier.effective_max_size(), capacity * 90 / 100);
    // Another error is a fault, not a full disk.
    tier.write_failed(FormatError::Io(other));
    assert_eq!(
        tier.stats().write_failures_nospace.load(Ordering::Relaxed),
        1
    );
    assert!(!tier.healthy());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_system_with_room_for_max_size_again_stops_bounding_the_zone() {
    let dir = scratch("room-again");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    let full = std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
    tier.write_failed(FormatError::Io(full));
    assert_eq!(tier.fs_capacity(), Some(0));
    // The temp directory has more than 1.05 MiB free.
    tier.manage();
    assert_eq!(tier.fs_capacity(), None);
    assert_eq!(tier.effective_max_size(), 1 << 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn through_the_trait_a_disk_tier_reports_starts_once_and_writes_files() {
    let dir = scratch("trait");
    let disk = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    let tier: Arc<dyn Tier> = disk.clone();
    assert_eq!(tier.kind(), "disk");
    assert_eq!(tier.max_size(), 1 << 20);
    tier.insert(key("/a"), object("alpha")).await.unwrap();
    // The page cache holds the file just written: answered at once.
    let k = key("/a");
    assert!(tier.get(&k.as_ref()).await.is_some());
    let v = tier.version(&k.as_ref()).unwrap();
    tier.insert(key("/a"), object("again")).await.unwrap();
    assert_ne!(
        tier.version(&k.as_ref()),
        Some(v),
        "a new copy, a new version"
    );
    assert!(tier.version(&key("/none").as_ref()).is_none());
    let detail = tier.detail();
    assert_eq!(detail.block, "disk");
    assert_eq!(
        detail.get("path"),
        Some(&Figure::Text(dir.display().to_string()))
    );
    assert_eq!(detail.get("loader_done"), Some(&Figure::Flag(false)));
    assert!(tier.load_state().is_loading());
    tier.start();
    tier.start();
    for _ in 0..200 {
        if disk.stats().loader_done.load(Ordering::Relaxed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(tier.detail().get("loader_done"), Some(&Figure::Flag(true)));
    assert!(!tier.load_state().is_loading());
    // A body written into its file as it arrives, indexed at the end.
    let mut write = tier
        .begin_body_write(
            &key("/streamed"),
            &|| Arc::try_unwrap(object("")).unwrap(),
            None,
        )
        .unwrap();
    write.push(Bytes::from_static(b"streamed body")).await;
    write.finish(&object("streamed body")).await.unwrap();
    assert!(tier.get(&key("/streamed").as_ref()).await.is_some());
    assert_eq!(tier.objects(), 2);
    assert_eq!(tier.purge_all(PurgeMode::Hard).await, 2);
    assert_eq!(tier.objects(), 0);
}

/// The loader notes the URIs of the body-keyed objects it takes back, so a
/// purge of such a URL after a restart sweeps its variants, and a purge of
/// another does not.
#[tokio::test]
async fn the_loader_notes_the_uris_of_body_keys() {
    let dir = scratch("body-uris");
    let tier = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    let graphql = key("/graphql");
    let body_key = graphql.as_ref().with_body("QUERY", "ab12");
    tier.insert(body_key, object("answer")).await.unwrap();
    tier.insert(key("/plain"), object("plain")).await.unwrap();
    drop(tier);
    let again = DiskTier::open(config(&dir, 1 << 20)).unwrap();
    let tier: Arc<dyn Tier> = again.clone();
    assert!(!tier.body_uri_found(&graphql.as_ref()), "not loaded yet");
    again.load();
    assert!(tier.body_uri_found(&graphql.as_ref()));
    assert!(!tier.body_uri_found(&key("/plain").as_ref()));
    assert!(!tier.body_uri_found(&key("/graphql2").as_ref()));
    let _ = std::fs::remove_dir_all(&dir);
}
