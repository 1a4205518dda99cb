//! Disk zones through the proxy: persistence across restarts, torn files,
//! size limits, faults on the cache directory that never fail a request, and
//! hits served byte-exact (whole, ranged, HEAD) over HTTP/1.1, h2c and HTTP/2
//! over TLS.

#![allow(clippy::unwrap_used)]

use crate::{free_port, wait_listening, wait_until};
use std::path::{Path, PathBuf};
use std::time::Duration;

use calmcache_testkit::client::{request, request_with_body};
use calmcache_testkit::{get, Origin, Proxy, RunningProxy};
use http::Method;

/// How long a test waits for a disk zone's loader, manager or writer.
const LOADED: Duration = Duration::from_secs(10);

pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-it-disk-{name}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Keys without the host, so a restarted proxy on another port finds them.
async fn disk_proxy(origin: &Origin, dir: &Path, zone_keys: &str) -> RunningProxy {
    Proxy::new(origin)
        .disk_zone(dir, zone_keys)
        .route("ttl = { 200 = \"60s\" }\nkey = \"$uri$is_args$args\"\nrefresh = \"lock\"")
        .start()
        .await
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.file_name() != calmcache_core::disk::ZONE_MARKER {
                out.push(e.path());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_hits_after_a_restart() {
    let origin = Origin::start().await;
    let dir = scratch("restart");
    let proxy = disk_proxy(&origin, &dir, "").await;
    for path in ["/a", "/b?x=1", "/c"] {
        let r = get(&proxy.url(path)).await;
        assert_eq!(r.cache_status_params().param("fwd"), Some("uri-miss"));
        assert!(r.cache_status_params().has("stored"));
    }
    let hit = get(&proxy.url("/a")).await;
    assert!(
        hit.cache_status_params().has("hit"),
        "{}",
        hit.cache_status()
    );
    proxy.stop().await;
    assert_eq!(files_in(&dir).len(), 3);

    let before = origin.hits();
    let proxy = disk_proxy(&origin, &dir, "").await;
    wait_until(LOADED, "the loader", async || {
        proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
    })
    .await;
    for path in ["/a", "/b?x=1", "/c"] {
        let r = get(&proxy.url(path)).await;
        assert!(
            r.cache_status_params().has("hit"),
            "{path}: {}",
            r.cache_status()
        );
        assert!(r
            .body
            .starts_with(&format!("path={}", path.split('?').next().unwrap())));
    }
    assert_eq!(origin.hits(), before, "no origin request after the restart");
    let status = proxy.status().await;
    assert_eq!(status["zones"]["ram"]["objects"], 3);
    assert_eq!(status["zones"]["ram"]["disk"]["loaded"], 3);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_file_is_removed_and_refetched_never_served() {
    let origin = Origin::start().await;
    let dir = scratch("torn");
    let proxy = disk_proxy(&origin, &dir, "").await;
    get(&proxy.url("/torn")).await;
    proxy.stop().await;
    // kill -9 in the middle of a write, or a disk fault: the file is short.
    let file = files_in(&dir).pop().unwrap();
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let proxy = disk_proxy(&origin, &dir, "").await;
    wait_until(LOADED, "the loader", async || {
        proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
    })
    .await;
    let r = get(&proxy.url("/torn")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.cache_status_params().param("fwd"), Some("uri-miss"));
    assert_eq!(
        proxy.status().await["zones"]["ram"]["disk"]["broken_files"],
        1
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zone_stays_under_max_size() {
    let origin = Origin::start().await;
    let dir = scratch("size");
    // Unique URLs fill the zone: LRU alone (`admission = "all"`) must evict
    // to stay under max_size; the default would refuse them at 90% instead.
    let proxy = Proxy::new(&origin)
        .disk_zone(&dir, "admission = \"all\"")
        .zone("256KiB", "64KiB")
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await;
    for i in 0..40 {
        let r = calmcache_testkit::get_with(
            http::Method::GET,
            &proxy.url(&format!("/big/{i}")),
            &[("x-origin-body-bytes", "20000")],
        )
        .await;
        assert_eq!(r.status, 200);
    }
    wait_until(LOADED, "the manager", async || {
        let s = proxy.status().await;
        s["zones"]["ram"]["size_bytes"].as_u64().unwrap() <= 256 * 1024
    })
    .await;
    let s = proxy.status().await;
    assert!(s["zones"]["ram"]["disk"]["evictions"].as_u64().unwrap() > 0);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cache_directory_fails_no_request_and_recovers() {
    let origin = Origin::start().await;
    let dir = scratch("deleted");
    let proxy = disk_proxy(&origin, &dir, "").await;
    get(&proxy.url("/x")).await;
    std::fs::remove_dir_all(&dir).unwrap();
    // The stored copy is gone: served from the origin, no error.
    let r = get(&proxy.url("/x")).await;
    assert_eq!(r.status, 200, "{}", r.cache_status());
    // Stored again (the directory is re-created on write), then a hit.
    let r = get(&proxy.url("/y")).await;
    assert!(
        r.cache_status_params().has("stored"),
        "{}",
        r.cache_status()
    );
    let r = get(&proxy.url("/y")).await;
    assert!(r.cache_status_params().has("hit"), "{}", r.cache_status());
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_fault_is_served_from_the_origin_and_counted() {
    let origin = Origin::start().await;
    let dir = scratch("fault");
    let proxy = disk_proxy(&origin, &dir, "").await;
    // The loader would remove the blocking files as foreign: let it finish.
    wait_until(LOADED, "the loader", async || {
        proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
    })
    .await;
    // Every shard directory blocked by a file: writes fail (as root, permissions would not).
    for a in 0..256 {
        std::fs::write(dir.join(format!("{a:02x}")), b"blocked").unwrap();
    }
    let r = get(&proxy.url("/z")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.cache_status_params().param("detail"),
        Some("store-failed")
    );
    assert!(
        proxy.status().await["zones"]["ram"]["disk"]["errors"]
            .as_u64()
            .unwrap()
            >= 1
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unusable_cache_path_is_an_error_at_start() {
    let file = scratch("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.o]\nservers = [\"127.0.0.1:9\"]\n[zones.d]\nkind = \"disk\"\nmax_size = \"1MiB\"\npath = {:?}\n[[routes]]\nupstream = \"o\"\nzone = \"d\"\n",
        file.display().to_string()
    );
    let config = calmcache::Config::from_toml(&text, "<test>").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(calmcache::start(&config)).err().unwrap();
    let message = err.to_string();
    assert!(
        message.contains("zones.d") && message.contains("cache directory"),
        "{message}"
    );
    let _ = std::fs::remove_file(&file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_zones_and_a_failed_zone_leaves_the_ring() {
    let origin = Origin::start().await;
    let (d1, d2) = (scratch("ring1"), scratch("ring2"));
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [upstreams.o]\nservers = [\"{}\"]\n\
         [zones.d1]\nkind = \"disk\"\nmax_size = \"64MiB\"\npath = {:?}\n\
         [zones.d2]\nkind = \"disk\"\nmax_size = \"64MiB\"\npath = {:?}\n\
         [[routes]]\nupstream = \"o\"\nzones = [\"d1\", \"d2\"]\nttl = {{ 200 = \"60s\" }}\n",
        origin.addr(),
        d1.display().to_string(),
        d2.display().to_string()
    );
    let config = calmcache::Config::from_toml(&text, "<test>").unwrap();
    let running = calmcache::start(&config).await.unwrap();
    let url = |p: &str| format!("http://{}{p}", running.proxy_addrs[0]);
    let status = || async {
        let addr = running.admin_addr.unwrap();
        let r = get(&format!("http://{addr}/status")).await;
        serde_json::from_str::<serde_json::Value>(&r.body).unwrap()
    };
    for i in 0..200 {
        assert_eq!(get(&url(&format!("/s/{i}"))).await.status, 200);
    }
    let s = status().await;
    let (n1, n2) = (
        s["zones"]["d1"]["objects"].as_u64().unwrap(),
        s["zones"]["d2"]["objects"].as_u64().unwrap(),
    );
    assert_eq!(n1 + n2, 200);
    assert!(n1 > 60 && n2 > 60, "{n1} / {n2}");
    // d1's disk fails: every shard directory is blocked by a file.
    std::fs::remove_dir_all(&d1).unwrap();
    std::fs::create_dir_all(&d1).unwrap();
    for a in 0..256 {
        std::fs::write(d1.join(format!("{a:02x}")), b"blocked").unwrap();
    }
    // Requests keep succeeding; after the first write error d1 leaves the
    // ring and new keys are stored in d2.
    for i in 200..400 {
        assert_eq!(get(&url(&format!("/s/{i}"))).await.status, 200);
    }
    let s = status().await;
    let errors = s["zones"]["d1"]["disk"]["errors"].as_u64().unwrap();
    assert!((1..=3).contains(&errors), "d1 errors {errors}");
    let stored_d2 = s["zones"]["d2"]["objects"].as_u64().unwrap() - n2;
    assert!(stored_d2 >= 190, "new keys in d2: {stored_d2}");
    running.shutdown(Duration::from_secs(2)).await;
    let _ = std::fs::remove_dir_all(&d1);
    let _ = std::fs::remove_dir_all(&d2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_objects_are_promoted_to_the_memory_front() {
    let origin = Origin::start().await;
    let dir = scratch("front");
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [upstreams.o]\nservers = [\"{}\"]\n\
         [zones.ram]\nkind = \"memory\"\nmax_size = \"16MiB\"\n\
         [zones.disk]\nkind = \"disk\"\nmax_size = \"64MiB\"\npath = {:?}\n\
         [[routes]]\nupstream = \"o\"\nzone = \"disk\"\nmemory = \"ram\"\nttl = {{ 200 = \"60s\" }}\n",
        origin.addr(),
        dir.display().to_string()
    );
    let config = calmcache::Config::from_toml(&text, "<test>").unwrap();
    let running = calmcache::start(&config).await.unwrap();
    let url = |p: &str| format!("http://{}{p}", running.proxy_addrs[0]);
    let objects = |zone: &'static str| {
        let admin = running.admin_addr.unwrap();
        async move {
            let r = get(&format!("http://{admin}/status")).await;
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            v["zones"][zone]["objects"].as_u64().unwrap()
        }
    };
    assert!(get(&url("/hot")).await.cache_status_params().has("stored"));
    get(&url("/cold")).await;
    // One disk hit: remembered; the second: promoted.
    for _ in 0..2 {
        assert!(get(&url("/hot")).await.cache_status_params().has("hit"));
    }
    assert!(get(&url("/cold")).await.cache_status_params().has("hit"));
    assert_eq!(objects("ram").await, 1, "only the key hit twice is in RAM");
    assert_eq!(objects("disk").await, 2);
    // The disk goes away: the promoted object is still served from RAM.
    std::fs::remove_dir_all(&dir).unwrap();
    let r = get(&url("/hot")).await;
    assert!(r.cache_status_params().has("hit"), "{}", r.cache_status());
    // An unsafe method invalidates both copies.
    let post = calmcache_testkit::request(http::Method::POST, &url("/hot"), &[]).await;
    assert_eq!(post.status, 200);
    assert_eq!(objects("ram").await, 0);
    let r = get(&url("/hot")).await;
    assert_eq!(r.cache_status_params().param("fwd"), Some("uri-miss"));
    running.shutdown(Duration::from_secs(2)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_objects_stream_from_their_file_whole_and_in_ranges() {
    // Bodies over 1 MiB are not read into memory on a hit: they stream from
    // the file in chunks; ranges of them are read from the right offset.
    let origin = Origin::start().await;
    let dir = scratch("large");
    let proxy = Proxy::new(&origin)
        .disk_zone(&dir, "")
        .zone("64MiB", "8MiB")
        .route("ttl = { 200 = \"60s\" }\nkey = \"$uri\"\nrefresh = \"lock\"")
        .start()
        .await;
    let size = "3000000";
    let steer = [("x-origin-body-bytes", size)];
    let miss = calmcache_testkit::get_with(http::Method::GET, &proxy.url("/big"), &steer).await;
    assert!(
        miss.cache_status_params().has("stored"),
        "{}",
        miss.cache_status()
    );
    assert_eq!(miss.bytes.len(), 3_000_000);
    proxy.stop().await;
    // After a restart the object comes from the file (a memory zone would
    // have nothing).
    let proxy = Proxy::new(&origin)
        .disk_zone(&dir, "")
        .zone("64MiB", "8MiB")
        .route("ttl = { 200 = \"60s\" }\nkey = \"$uri\"\nrefresh = \"lock\"")
        .start()
        .await;
    wait_until(LOADED, "the loader", async || {
        proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
    })
    .await;
    let hit = get(&proxy.url("/big")).await;
    assert!(
        hit.cache_status_params().has("hit"),
        "{}",
        hit.cache_status()
    );
    assert_eq!(hit.bytes, miss.bytes);
    assert_eq!(hit.header("content-length"), "3000000");
    let range = calmcache_testkit::get_with(
        http::Method::GET,
        &proxy.url("/big"),
        &[("range", "bytes=1000000-1000009")],
    )
    .await;
    assert_eq!(range.status, 206);
    assert_eq!(
        range.header("content-range"),
        "bytes 1000000-1000009/3000000"
    );
    assert_eq!(range.bytes[..], miss.bytes[1_000_000..1_000_010]);
    let head = calmcache_testkit::get_with(http::Method::HEAD, &proxy.url("/big"), &[]).await;
    assert_eq!(head.header("content-length"), "3000000");
    assert!(head.bytes.is_empty());
    // A corrupted body is never delivered as complete.
    let file = files_in(&dir).pop().unwrap();
    let mut data = std::fs::read(&file).unwrap();
    let at = data.len() / 2;
    data[at] ^= 0xff;
    std::fs::write(&file, &data).unwrap();
    let url = proxy.url("/big");
    let outcome =
        tokio::spawn(
            async move { calmcache_testkit::get_with(http::Method::GET, &url, &[]).await },
        )
        .await;
    // Either the connection is cut (the test client panics on it) or what
    // arrived is not the corrupt body presented as complete.
    if let Ok(reply) = outcome {
        assert_ne!(reply.status, 200, "a corrupt body was served whole");
    }
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// GETs `url` and returns as soon as the response head is in, with the body
/// still to be read.
async fn head_of(url: &str) -> http::Response<hyper::body::Incoming> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    client.get(url.parse().unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_receive_a_large_body_as_it_arrives() {
    // Read-while-write: a request that joins a large miss gets the head and
    // the body so far at once, then the rest as the origin sends it; the
    // object is stored when complete.
    for disk in [false, true] {
        let origin = Origin::start().await;
        let dir = scratch("rww");
        let mut builder = Proxy::new(&origin)
            .zone("64MiB", "4MiB")
            .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"");
        if disk {
            builder = builder.disk_zone(&dir, "");
        }
        let proxy = builder.start().await;
        let url = proxy.url("/video");
        let steer = [
            ("x-origin-body-bytes", "800000"),
            ("x-origin-trickle-ms", "150"),
        ];
        let leader = {
            let url = url.clone();
            tokio::spawn(async move {
                calmcache_testkit::get_with(http::Method::GET, &url, &steer).await
            })
        };
        wait_until(LOADED, "the leader's fetch at the origin", async || {
            origin.hits() >= 1
        })
        .await;
        let resp = head_of(&url).await;
        assert_eq!(
            origin.bodies_trickled(),
            0,
            "the waiter's head arrived while the origin was still sending"
        );
        assert_eq!(resp.status(), 200);
        let status = resp.headers()["cache-status"].to_str().unwrap().to_owned();
        assert!(status.contains("collapsed"), "{status}");
        use http_body_util::BodyExt;
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let leader = leader.await.unwrap();
        assert_eq!(body.len(), 800_000);
        assert_eq!(body, leader.bytes);
        assert_eq!(origin.hits(), 1);
        // Stored once complete.
        let hit = wait_until(LOADED, "stored", async || {
            Some(get(&url).await).filter(|r| r.is_hit())
        })
        .await;
        assert_eq!(hit.bytes, leader.bytes);
        assert_eq!(origin.hits(), 1);
        proxy.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_origin_body_is_never_stored_half() {
    let origin = Origin::start().await;
    let dir = scratch("abort");
    let proxy = disk_proxy(&origin, &dir, "").await;
    let url = proxy.url("/cut");
    let cut = [
        ("x-origin-body-bytes", "800000"),
        ("x-origin-trickle-ms", "20"),
        ("x-origin-abort-after-bytes", "400000"),
    ];
    let outcome = {
        let url = url.clone();
        tokio::spawn(
            async move { calmcache_testkit::get_with(http::Method::GET, &url, &cut).await },
        )
        .await
    };
    // The client saw the connection cut (the test client panics on it), not
    // a short body presented as whole.
    assert!(outcome.is_err(), "a cut body was delivered as complete");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = get(&url).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.cache_status_params().param("fwd"),
        Some("uri-miss"),
        "nothing was stored"
    );
    assert!(files_in(&dir)
        .iter()
        .all(|f| !f.to_string_lossy().contains(".tmp-")));
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing
/// assertion never leaves a calmcache running.
struct Killed(std::process::Child);

impl Killed {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_heavy_writes_never_serves_a_partial_object() {
    // The real binary, SIGKILLed while many objects are being written, then
    // restarted on the same directory: every answer is a whole object (a hit
    // of a complete file or a fresh fetch), never a torn one.
    let origin = Origin::start().await;
    let dir = scratch("kill9");
    let (port, admin) = (free_port(), free_port());
    let config = dir.with_extension("toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [upstreams.o]\nservers = [\"{}\"]\n\
             [zones.d]\nkind = \"disk\"\nmax_size = \"512MiB\"\nmax_object_size = \"4MiB\"\npath = {:?}\n\
             [[routes]]\nupstream = \"o\"\nzone = \"d\"\nkey = \"$uri\"\nttl = {{ 200 = \"1h\" }}\n",
            origin.addr(),
            dir.display().to_string()
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_calmcache");
    let serve = || {
        std::process::Command::new(bin)
            .args(["serve", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(Killed)
            .unwrap()
    };
    let size = |i: usize| {
        if i.is_multiple_of(2) {
            "600000"
        } else {
            "20000"
        }
    };
    let mut child = serve();
    wait_listening(port).await;
    let mut writers = Vec::new();
    for i in 0..48 {
        let url = format!("http://127.0.0.1:{port}/w/{i}");
        writers.push(tokio::spawn(async move {
            let steer = [
                ("x-origin-body-bytes", size(i)),
                ("x-origin-trickle-ms", "40"),
            ];
            calmcache_testkit::get_with(http::Method::GET, &url, &steer).await
        }));
    }
    // The small objects are stored by now; the large ones take 8 x 250 ms.
    wait_until(LOADED, "the small objects", async || {
        let r = get(&format!("http://127.0.0.1:{admin}/status")).await;
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        v["zones"]["d"]["stores"].as_u64().unwrap_or(0) >= 24
    })
    .await;
    child.kill(); // SIGKILL
    for w in writers {
        let _ = w.await; // cut connections panic the test client: expected
    }
    let files_after_kill = files_in(&dir);
    let mut child = serve();
    wait_listening(port).await;
    wait_until(LOADED, "the loader", async || {
        let r = get(&format!("http://127.0.0.1:{admin}/status")).await;
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        v["zones"]["d"]["disk"]["loader_done"] == true
    })
    .await;
    let mut hits = 0;
    for i in 0..48 {
        let url = format!("http://127.0.0.1:{port}/w/{i}");
        let steer = [("x-origin-body-bytes", size(i))];
        let r = calmcache_testkit::get_with(http::Method::GET, &url, &steer).await;
        assert_eq!(r.status, 200);
        let want: usize = size(i).parse().unwrap();
        assert_eq!(r.bytes.len(), want, "/w/{i}: {}", r.cache_status());
        assert!(r.body.starts_with(&format!("path=/w/{i} ")), "/w/{i}");
        assert!(r.body.ends_with('.'), "/w/{i} padded to its end");
        hits += usize::from(r.cache_status_params().has("hit"));
    }
    assert!(
        hits >= 12,
        "objects stored before the kill survive it ({hits} hits; files after the kill: {})",
        files_after_kill.len()
    );
    child.kill();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&config);
}

/// A tmpfs mounted for one test (root with CAP_SYS_ADMIN), unmounted on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// A `size` tmpfs at `at`; `None` when mounting is not permitted here.
    pub fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        Tmpfs::mount_with(at, &format!("size={size}"))
    }

    /// A tmpfs at `at` with mount `options` (`ro,size=1m`).
    pub fn mount_with(at: &Path, options: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }

    /// `mount -o remount,<options>`.
    pub fn remount(&self, options: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success(), "remount {options}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn get_sized(proxy: &RunningProxy, path: &str) -> calmcache_testkit::Reply {
    calmcache_testkit::get_with(
        http::Method::GET,
        &proxy.url(path),
        &[("x-origin-body-bytes", "200000")],
    )
    .await
}

/// The issue's fault injection on a real file system: a zone on a 2 MiB
/// tmpfs is filled (ENOSPC), then made read-only (EROFS), then given room
/// and write access again. No request fails, the full file system makes the
/// zone evict (the latest objects stay hits), the faults are counted, and
/// the zone stores again once they clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_then_read_only_file_system_fails_no_request_and_recovers() {
    let base = scratch("tmpfs");
    let Some(fs) = Tmpfs::mount(&base, "2m") else {
        // Not root, or no CAP_SYS_ADMIN in this container: the other fault
        // tests (deleted directory, blocked writes) still run.
        eprintln!("a_full_then_read_only_file_system: cannot mount a tmpfs here; not run");
        return;
    };
    let origin = Origin::start().await;
    let dir = base.join("zone");
    // Every new URL must reach the file system until it is full: no admission.
    let proxy = disk_proxy(&origin, &dir, "admission = \"all\"").await;
    let errors = async || {
        proxy.status().await["zones"]["ram"]["disk"]["errors"]
            .as_u64()
            .unwrap()
    };

    // Fill: 200 KB objects (stored before the response, below the
    // streaming threshold) until the file system is full.
    let mut stored = Vec::new();
    let mut refused = 0;
    for i in 0..16 {
        let path = format!("/fill/{i}");
        let r = get_sized(&proxy, &path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.cache_status());
        assert_eq!(r.body.len(), 200_000, "{path}: whole body");
        match r.cache_status_params().param("detail") {
            Some("store-failed") => refused += 1,
            _ if r.cache_status_params().has("stored") => stored.push(path),
            _ => panic!("{path}: {}", r.cache_status()),
        }
    }
    // 3.2 MB into 2 MiB: some writes found no space, and the zone evicted
    // to make room (disk_full.rs has the load test).
    assert!(
        stored.len() >= 8 && refused >= 1,
        "stored {stored:?}, refused {refused}"
    );
    assert!(errors().await >= 1, "ENOSPC is counted");
    let latest = stored.last().unwrap().clone();
    let r = get_sized(&proxy, &latest).await;
    assert!(
        r.cache_status_params().has("hit"),
        "{latest} kept: {}",
        r.cache_status()
    );
    let disk = proxy.status().await["zones"]["ram"]["disk"].clone();
    assert!(disk["evictions_nospace"].as_u64().unwrap() >= 1, "{disk}");

    // Read-only: stored objects are still hits, new ones come from the origin.
    fs.remount("ro");
    let before = errors().await;
    let r = get_sized(&proxy, "/ro/new").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 200_000);
    assert_eq!(
        r.cache_status_params().param("detail"),
        Some("store-failed")
    );
    assert!(errors().await > before, "EROFS is counted");
    let r = get_sized(&proxy, &latest).await;
    assert!(r.cache_status_params().has("hit"), "{}", r.cache_status());

    // The faults clear: room and write access again; new objects are stored
    // (after the zone's fault cooldown at most).
    fs.remount("rw,size=16m");
    let mut n = 0;
    wait_until(LOADED, "the zone to store again", async || {
        n += 1;
        let r = get_sized(&proxy, &format!("/again/{n}")).await;
        assert_eq!(r.status, 200);
        r.cache_status_params().has("stored")
    })
    .await;
    proxy.stop().await;
    drop(fs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_is_written_into_the_zone_as_it_arrives() {
    // The body goes into a temporary file of the zone while the origin is
    // still sending (in 256 KiB batches), and is renamed into place, whole,
    // after the last byte: never visible before.
    let origin = Origin::start().await;
    let dir = scratch("streamwrite");
    let proxy = disk_proxy(&origin, &dir, "").await;
    let url = proxy.url("/big");
    let steer = [
        ("x-origin-body-bytes", "800000"),
        ("x-origin-trickle-ms", "200"),
    ];
    let leader = {
        let url = url.clone();
        tokio::spawn(
            async move { calmcache_testkit::get_with(http::Method::GET, &url, &steer).await },
        )
    };
    // Four of the eight 100,000-byte pieces are out by now.
    tokio::time::sleep(Duration::from_millis(750)).await;
    assert_eq!(origin.bodies_trickled(), 0, "the origin is still sending");
    let files = files_in(&dir);
    let temp: Vec<_> = files
        .iter()
        .filter(|f| {
            f.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".tmp-")
        })
        .collect();
    assert_eq!(temp.len(), 1, "one file being written: {files:?}");
    let written = std::fs::metadata(temp[0]).unwrap().len();
    assert!(written >= 256 * 1024, "{written} bytes on disk so far");
    assert_eq!(files.len(), 1, "nothing renamed into place yet: {files:?}");
    assert_eq!(proxy.status().await["zones"]["ram"]["objects"], 0);

    let leader = leader.await.unwrap();
    assert_eq!(leader.body.len(), 800_000);
    wait_until(LOADED, "the object to be stored", async || {
        proxy.status().await["zones"]["ram"]["objects"] == 1
    })
    .await;
    let files = files_in(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(!files[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(".tmp-"));
    let hit = get(&url).await;
    assert!(
        hit.cache_status_params().has("hit"),
        "{}",
        hit.cache_status()
    );
    assert_eq!(hit.bytes, leader.bytes);
    assert_eq!(origin.hits(), 1);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_receive_a_chunked_body_as_it_arrives() {
    // Without a Content-Length, a body that outgrows 256 KiB streams to the
    // requests coalesced behind it too; it is stored once its last chunk
    // came, with its exact length; cut before that, it is never stored; and
    // past max_object_size it reaches every reader but is not stored.
    for disk in [false, true] {
        let origin = Origin::start().await;
        let dir = scratch("chunked");
        let mut builder = Proxy::new(&origin)
            .zone("64MiB", "1MiB")
            .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"");
        if disk {
            builder = builder.disk_zone(&dir, "");
        }
        let proxy = builder.start().await;
        let chunked = |bytes: &'static str, abort: Option<&'static str>| {
            let mut h = vec![
                ("x-origin-body-bytes", bytes),
                ("x-origin-trickle-ms", "150"),
                ("x-origin-chunked", "1"),
            ];
            if let Some(at) = abort {
                h.push(("x-origin-abort-after-bytes", at));
            }
            h
        };
        let leader = |path: &str, steer: Vec<(&'static str, &'static str)>| {
            let url = proxy.url(path);
            tokio::spawn(async move {
                calmcache_testkit::get_with(http::Method::GET, &url, &steer).await
            })
        };

        // Whole: the waiter starts at once, the object is stored with its length.
        let first = leader("/chunked", chunked("800000", None));
        wait_until(LOADED, "the leader's fetch at the origin", async || {
            origin.hits_for("/chunked") >= 1
        })
        .await;
        let resp = head_of(&proxy.url("/chunked")).await;
        assert_eq!(origin.bodies_trickled(), 0, "head while the origin sends");
        let status = resp.headers()["cache-status"].to_str().unwrap().to_owned();
        assert!(status.contains("collapsed"), "{status}");
        use http_body_util::BodyExt;
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let first = first.await.unwrap();
        assert_eq!(first.body.len(), 800_000);
        assert_eq!(body, first.bytes);
        let hit = wait_until(LOADED, "stored", async || {
            Some(get(&proxy.url("/chunked")).await).filter(|r| r.is_hit())
        })
        .await;
        assert_eq!(hit.bytes, first.bytes);
        assert_eq!(hit.header("content-length"), "800000");
        assert_eq!(origin.hits(), 1);

        // Cut before its last chunk: every reader sees an error, nothing stored.
        let cut = leader("/cut", chunked("800000", Some("400000")));
        assert!(
            cut.await.is_err(),
            "a cut chunked body was delivered as whole"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let again = get(&proxy.url("/cut")).await;
        assert_eq!(again.cache_status_params().param("fwd"), Some("uri-miss"));

        // Over max_object_size (1 MiB): whole to the reader, not stored.
        let big = leader("/big", chunked("1500000", None));
        let big = big.await.unwrap();
        assert_eq!(big.body.len(), 1_500_000);
        let again = get(&proxy.url("/big")).await;
        assert_eq!(again.cache_status_params().param("fwd"), Some("uri-miss"));
        assert!(files_in(&dir)
            .iter()
            .all(|f| !f.to_string_lossy().contains(".tmp-")));
        proxy.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_by_path_after_a_restart_reaches_objects_stored_before_it() {
    // The default key has the host; a purge by path (no host) rebuilds the
    // keys from the hosts the route knows, and after a restart those
    // include the hosts of the objects the zone found on disk.
    let origin = Origin::start().await;
    let dir = scratch("purge-after-restart");
    let start = || {
        Proxy::new(&origin)
            .disk_zone(&dir, "")
            .admin("listen = \"127.0.0.1:0\"\ntoken = \"t\"")
            .route("ttl = { 200 = \"60s\" }")
            .start()
    };
    let proxy = start().await;
    for host in ["a.test", "b.test"] {
        let r = request(Method::GET, &proxy.url("/p"), &[("host", host)]).await;
        assert_eq!(r.status, 200);
    }
    proxy.stop().await;
    let proxy = start().await;
    wait_until(LOADED, "the loader", async || {
        proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
    })
    .await;
    // The routes learn the hosts right after the loader: let that land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = request_with_body(
        Method::POST,
        &proxy.admin_url("/purge"),
        &[
            ("authorization", "Bearer t"),
            ("content-type", "application/json"),
        ],
        r#"{"url": "/p"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.trim(), r#"{"purged":2}"#, "both hosts' copies");
    for host in ["a.test", "b.test"] {
        let r = request(Method::GET, &proxy.url("/p"), &[("host", host)]).await;
        assert!(
            !r.cache_status_params().has("hit"),
            "{host}: {}",
            r.cache_status()
        );
    }
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `curl` with `args` for `url`: (status line and headers, body bytes).
fn curl_to_files(dir: &Path, args: &[&str], url: &str) -> (String, Vec<u8>) {
    let (head, body) = (dir.join("curl-head"), dir.join("curl-body"));
    let _ = std::fs::remove_file(&body);
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "10", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(args)
        .arg(url)
        .output()
        .expect("curl (apt-get install curl)");
    assert!(out.status.success(), "curl {args:?} {url}: {out:?}");
    let head = std::fs::read_to_string(&head).unwrap().to_ascii_lowercase();
    (head, std::fs::read(&body).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_hits_are_byte_exact_over_http1_h2c_and_h2_over_tls_whole_ranged_and_head() {
    // A 100 KB object is read whole on a hit (from the page cache on the
    // worker, else on the blocking pool), then served as a shared body:
    // every protocol must get the same bytes, ranges from the right offset.
    let origin = Origin::start().await;
    let dir = scratch("protocols");
    let ca = calmcache_testkit::tls::TestCa::new(&dir);
    let leaf = ca.leaf("a", &["a.test"]);
    let server = format!(
        "h2c = true\ntls_listen = [\"127.0.0.1:0\"]\n[[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    let proxy = Proxy::new(&origin)
        .server(&server)
        .disk_zone(&dir.join("zone"), "")
        .route("ttl = { 200 = \"60s\" }\nkey = \"$uri\"\nrefresh = \"lock\"")
        .start()
        .await;
    let steer = "x-origin-body-bytes: 102400";
    let tls_port = proxy.tls_addr().port();
    let https = format!("https://a.test:{tls_port}/obj");
    let resolve = format!("a.test:{tls_port}:127.0.0.1");
    let protocols: [(&str, Vec<&str>, String); 3] = [
        ("http/1.1", vec!["--http1.1"], proxy.url("/obj")),
        ("h2c", vec!["--http2-prior-knowledge"], proxy.url("/obj")),
        (
            "h2 over tls",
            vec![
                "--http2",
                "--cacert",
                ca.ca_pem.to_str().unwrap(),
                "--resolve",
                &resolve,
            ],
            https.clone(),
        ),
    ];
    let mut expected: Option<Vec<u8>> = None;
    for (name, proto, url) in &protocols {
        let mut args = proto.clone();
        args.extend(["-H", steer]);
        // The first request of a scheme may store it; the second is a hit.
        let (_, first) = curl_to_files(&dir, &args, url);
        let (head, body) = curl_to_files(&dir, &args, url);
        let version = if *name == "http/1.1" {
            "http/1.1 "
        } else {
            "http/2 "
        };
        assert!(head.starts_with(version), "{name}: {head}");
        assert!(
            head.contains("cache-status: calmcache; hit"),
            "{name}: {head}"
        );
        assert_eq!(body.len(), 102_400, "{name}");
        assert_eq!(body, first, "{name}");
        let expected = expected.get_or_insert_with(|| body.clone());
        assert_eq!(
            &body, expected,
            "{name}: another protocol served other bytes"
        );
        let mut ranged = args.clone();
        ranged.extend(["-H", "range: bytes=50000-50009"]);
        let (head, part) = curl_to_files(&dir, &ranged, url);
        assert!(head.contains(" 206"), "{name}: {head}");
        assert!(
            head.contains("content-range: bytes 50000-50009/102400"),
            "{name}: {head}"
        );
        assert_eq!(part[..], expected[50_000..50_010], "{name}");
        let mut head_args = args.clone();
        head_args.push("-I");
        let (head, nothing) = curl_to_files(&dir, &head_args, url);
        assert!(head.contains(" 200"), "{name}: {head}");
        assert!(head.contains("content-length: 102400"), "{name}: {head}");
        assert!(head.contains("; hit"), "{name}: {head}");
        // With -I curl writes the head to the output too: nothing else came.
        assert_eq!(nothing.len(), head.len(), "{name}: HEAD has no body");
    }
    // Served from the zone, not the origin, after each scheme's first fill.
    assert!(origin.hits_for("/obj") <= 2, "{}", origin.hits_for("/obj"));
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stopping proxy finishes the fills and refreshes still running (up to
/// its shutdown deadline) instead of dropping them with its worker
/// threads: a background refresh in flight at shutdown is stored, and the
/// restarted proxy serves it. (Dropped, it left the stale copy; a large
/// body's file could be left uncommitted the same way after its client
/// had every byte.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_running_at_shutdown_is_finished_and_kept() {
    let origin = Origin::start().await;
    let dir = scratch("shutdown-refresh");
    let build = || {
        Proxy::new(&origin)
            .disk_zone(&dir, "")
            // The restarted proxy listens on another port: keyed by path.
            .route(
                "key = \"$uri\"\nttl = { 200 = \"1s\" }\nrefresh = \"lock\"\n\
                 stale_while_revalidate = \"60s\"",
            )
    };
    let proxy = build().start().await;
    let url = proxy.url("/r");
    let first = get(&url).await;
    assert!(first.body.contains("n=1"), "{}", first.body);
    tokio::time::sleep(Duration::from_millis(1100)).await; // the 1 s ttl runs out
                                                           // Stale: served at once, refreshed in the background for 800 ms.
    let slow = [("x-origin-delay-ms", "800")];
    let stale = calmcache_testkit::get_with(Method::GET, &url, &slow).await;
    assert!(
        stale.cache_status().contains("stale-while-revalidate"),
        "{}",
        stale.cache_status()
    );
    assert!(stale.body.contains("n=1"));
    wait_until(LOADED, "the refresh at the origin", async || {
        origin.hits_for("/r") >= 2
    })
    .await;
    assert_eq!(origin.hits_for("/r"), 2, "the refresh reached the origin");
    // Stopped while the refresh waits for its answer (2 s of grace).
    proxy.stop().await;
    let proxy = build().start().await;
    wait_until(LOADED, "the loader", async || {
        proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
    })
    .await;
    let after = get(&proxy.url("/r")).await;
    assert!(
        after.body.contains("n=2") && after.cache_status_params().has("hit"),
        "the refreshed copy was stored before the stop: {} {}",
        after.body,
        after.cache_status()
    );
    assert_eq!(origin.hits_for("/r"), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
