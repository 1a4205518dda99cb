//! Disk zones whose file system fills before `max_size` (bytes or inodes),
//! crash leftovers, one process per zone directory, and reloads checked as
//! `check` and `serve` check. The tmpfs tests need root (mount); they fail
//! rather than skip as root or under `CI=true`.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use calmcache_testkit::{get, get_with, Origin, Proxy, Reply};

use crate::disk_zone::Tmpfs;
use crate::{free_port, scratch, wait_listening, wait_until, Child};

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

/// True when this process runs as root.
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A `size` tmpfs at `at`, or `None` (after a loud message) where tests may
/// not mount one: not root and not in CI. As root or under `CI=true` a
/// failed mount fails the test (ENOSPC has no stand-in: quotas and loop
/// devices need more privileges than a tmpfs).
pub fn tmpfs_or_skip(at: &Path, options: &str, test: &str) -> Option<Tmpfs> {
    if let Some(fs) = Tmpfs::mount_with(at, options) {
        return Some(fs);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci && !is_root(),
        "{test}: cannot mount a tmpfs (root without CAP_SYS_ADMIN?); run the tests as root \
         with mount rights (CI does)"
    );
    eprintln!(
        "\n!!! {test}: NOT RUN: mounting a tmpfs needs root (run the tests as root, as CI does)\n"
    );
    None
}

async fn status(admin: u16) -> serde_json::Value {
    let r = get(&format!("http://127.0.0.1:{admin}/status")).await;
    serde_json::from_str(&r.body).unwrap()
}

async fn sized(port: u16, path: &str, bytes: &'static str) -> Reply {
    let url = format!("http://127.0.0.1:{port}{path}");
    let r = get_with(http::Method::GET, &url, &[("x-origin-body-bytes", bytes)]).await;
    assert_eq!(r.status, 200, "{path}: {}", r.cache_status());
    assert_eq!(
        r.bytes.len(),
        bytes.parse::<usize>().unwrap(),
        "{path}: whole body"
    );
    r
}

/// `calmcache serve` on `config`, expected to exit (a refusal): killed
/// after `limit` if it serves instead, so the test fails rather than hangs.
pub fn serve_until_exit(config: &Path, limit: Duration) -> std::process::Output {
    let mut child = Child(
        std::process::Command::new(BIN)
            .args(["serve", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + limit;
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "serve did not exit: it started");
        std::thread::sleep(Duration::from_millis(25));
    }
    let mut out = std::process::Output {
        status: child.0.wait().unwrap(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    use std::io::Read;
    if let Some(mut e) = child.0.stderr.take() {
        let _ = e.read_to_end(&mut out.stderr);
    }
    out
}

/// Regression (issue 12, item 7): a zone on a file system smaller than
/// `max_size`, without `min_free`, never evicted (0 evictions, objects
/// stuck, a 15% hit ratio) and logged one warning per failed write (40,256
/// lines in 20 s). Now the zone evicts until writes succeed, keeps a hot
/// set, counts what happened, and logs a few lines. The real binary, so its
/// log is what an operator sees. Then a restart on the file system filled
/// to the last byte: the start probe used to write 9 bytes and failed
/// (exit 1), so a proxy that crashed on a full disk could not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_file_system_evicts_until_writes_succeed_and_logs_a_few_lines() {
    const TEST: &str = "a_full_file_system_evicts_until_writes_succeed";
    let base = scratch("disk-full");
    let Some(fs) = tmpfs_or_skip(&base.join("fs"), "size=4m", TEST) else {
        return;
    };
    let origin = Origin::start().await;
    let (port, admin) = (free_port(), free_port());
    // admission = "all": every new URL is written until the file system is
    // full (the default refuses new URLs once the zone is 90% full).
    let config = base.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\nthreads = 2\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [upstreams.o]\nservers = [\"{}\"]\n\
             [zones.d]\nkind = \"disk\"\nmax_size = \"64MiB\"\nmax_object_size = \"1MiB\"\nadmission = \"all\"\npath = {:?}\n\
             [[routes]]\nupstream = \"o\"\nzone = \"d\"\nkey = \"$uri\"\nttl = {{ 200 = \"1h\" }}\n\
             refresh = \"lock\"\n",
            origin.addr(),
            base.join("fs/zone").display().to_string()
        ),
    )
    .unwrap();
    let log = base.join("serve.log");
    let _child = Child(
        std::process::Command::new(BIN)
            .args(["serve", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_listening(port).await;

    // A hot set of 16 small objects, then ~40 MB of distinct objects (ten
    // times the file system) from 8 clients, each asking for two hot
    // objects after every cold one. Half the cold objects are above 256 KiB, so
    // they are written as they arrive (disk_writer.rs), the rest in one go.
    const HOT: usize = 16;
    for h in 0..HOT {
        sized(port, &format!("/hot/{h}"), "20000").await;
    }
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..8usize {
        clients.push(tokio::spawn(async move {
            let (mut hot_hits, mut hot_asked) = (0, 0);
            for n in 0..30usize {
                let i = n * 8 + c;
                let bytes = if i % 2 == 0 { "60000" } else { "300000" };
                sized(port, &format!("/cold/{i}"), bytes).await;
                // Hot means asked more often than the cold ones: 2 per cold.
                for k in 0..2 {
                    let hot = sized(port, &format!("/hot/{}", (2 * i + k) % HOT), "20000").await;
                    // The second half: the zone has been full for a while.
                    if n >= 15 {
                        hot_asked += 1;
                        hot_hits += usize::from(hot.cache_status_params().has("hit"));
                    }
                }
            }
            (hot_hits, hot_asked)
        }));
    }
    let (mut hot_hits, mut hot_asked) = (0, 0);
    for c in clients {
        let (h, a) = tokio::time::timeout(Duration::from_secs(120), c)
            .await
            .expect("load bounded in time")
            .unwrap();
        hot_hits += h;
        hot_asked += a;
    }
    let load_time = started.elapsed();

    let s = status(admin).await;
    let d = &s["zones"]["d"]["disk"];
    let failures = d["write_failures_nospace"].as_u64().unwrap();
    let evicted = d["evictions_nospace"].as_u64().unwrap();
    assert!(failures >= 1, "the file system did fill: {d}");
    assert!(evicted >= 10, "objects evicted to make room: {d}");
    assert_eq!(
        d["evictions"], 0,
        "max_size (64 MiB) was never the reason: {d}"
    );
    let capacity = d["fs_capacity_bytes"]
        .as_u64()
        .expect("bounded by its file system");
    assert!(capacity <= 4 << 20, "{d}");
    assert!(d["effective_max_size_bytes"].as_u64().unwrap() < capacity);
    assert!(s["zones"]["d"]["size_bytes"].as_u64().unwrap() <= 4 << 20);
    assert!(
        failures < 80,
        "evictions keep most writes succeeding: {failures} of 240 failed"
    );

    // Writes succeed again: new objects are stored (one may race the
    // manager and find no room).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut stored = 0;
    for i in 0..10 {
        let r = sized(port, &format!("/after/{i}"), "60000").await;
        stored += usize::from(r.cache_status_params().has("stored"));
    }
    assert!(stored >= 8, "{stored} of 10 new objects stored");
    // The hot set stayed while the zone was full (least recently used
    // objects go first), and is whole again after one round: what a later
    // pass evicted is stored again, and stays.
    assert!(
        hot_hits * 10 >= hot_asked * 8,
        "hot hit ratio while full: {hot_hits} of {hot_asked}"
    );
    for h in 0..HOT {
        sized(port, &format!("/hot/{h}"), "20000").await;
    }
    let mut hits = 0;
    for h in 0..HOT {
        let r = sized(port, &format!("/hot/{h}"), "20000").await;
        hits += usize::from(r.cache_status_params().has("hit"));
    }
    assert!(hits >= HOT - 1, "{hits} of {HOT} hot objects are hits");

    // A few warning lines, not one per failed write.
    let text = std::fs::read_to_string(&log).unwrap();
    let warning_lines: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    let warnings = warning_lines.len();
    eprintln!("{}", warning_lines.join("\n"));
    eprintln!(
        "{TEST}: load {load_time:?}, {failures} writes failed (ENOSPC), {evicted} evicted, \
         hot hits {hot_hits}/{hot_asked} while full, {warnings} warning lines"
    );
    assert!(warnings <= 4, "{warnings} warning lines:\n{text}");
    assert!(warnings >= 1, "the first one is logged:\n{text}");

    // Restarted on a file system filled to the last byte (by someone
    // else's file): it starts, serves the zone's objects, and makes room.
    drop(_child);
    let mut filler = std::fs::File::create(base.join("fs/filler")).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    while std::io::Write::write_all(&mut filler, &chunk[..512]).is_ok() {}
    drop(filler);
    let _child = Child(
        std::process::Command::new(BIN)
            .args(["serve", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(port).await;
    wait_until(Duration::from_secs(10), "the loader", async || {
        status(admin).await["zones"]["d"]["disk"]["loader_done"] == true
    })
    .await;
    let r = sized(port, "/hot/0", "20000").await;
    assert!(r.cache_status_params().has("hit"), "{}", r.cache_status());
    // It makes room: new objects are stored again, ten in a row. Each
    // write that finds no room is served unstored and wakes the manager,
    // whose headroom grows with each pass that finds new failures; how
    // many fail before that depends on how fast requests come, so the test
    // asks until the run is reached (bounded: 200 requests).
    let (mut run, mut best, mut failed) = (0, 0, 0);
    for i in 0..200 {
        let r = sized(port, &format!("/restarted/{i}"), "60000").await;
        assert_eq!(r.status, 200, "served either way");
        if r.cache_status_params().has("stored") {
            run += 1;
            best = best.max(run);
            if run == 10 {
                break;
            }
        } else {
            run = 0;
            failed += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!("{TEST}: after the restart {failed} not stored before 10 in a row");
    assert_eq!(
        run, 10,
        "ten stored in a row after a restart on a full file system: best run {best}, {failed} not stored"
    );
    drop(fs);
    let _ = std::fs::remove_dir_all(&base);
}

/// Regression (issue 12, item 7): temp files were named after the PID, so
/// in a container (PID 1 on every start) a crash's temp files looked like
/// this start's writes in progress: skipped by the loader forever and not
/// counted in max_size. Temp files of another start are removed and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_leftovers_of_another_start_are_removed_at_start_and_counted() {
    let origin = Origin::start().await;
    let dir = scratch("leftovers").join("zone");
    let start = || {
        Proxy::new(&origin)
            .disk_zone(&dir, "")
            .route("ttl = { 200 = \"1h\" }\nkey = \"$uri\"")
            .start()
    };
    let proxy = start().await;
    assert!(get(&proxy.url("/keep"))
        .await
        .cache_status_params()
        .has("stored"));
    proxy.stop().await;
    // What a kill -9 leaves: temp files of another start (its random
    // token), and one of an earlier version, named after a PID.
    std::fs::create_dir_all(dir.join("00")).unwrap();
    std::fs::create_dir_all(dir.join("ff")).unwrap();
    std::fs::write(dir.join("00/.tmp-0123456789abcdef-3"), vec![7u8; 1000]).unwrap();
    std::fs::write(dir.join("ff/.tmp-1-0"), vec![7u8; 500]).unwrap();

    let proxy = start().await;
    let s = wait_until(Duration::from_secs(10), "the loader", async || {
        let s = proxy.status().await;
        (s["zones"]["ram"]["disk"]["loader_done"] == true).then_some(s)
    })
    .await;
    let d = &s["zones"]["ram"]["disk"];
    assert_eq!(d["leftover_temp_files"], 2, "{d}");
    assert_eq!(d["leftover_temp_bytes"], 1500, "{d}");
    assert!(!dir.join("00/.tmp-0123456789abcdef-3").exists());
    assert!(!dir.join("ff/.tmp-1-0").exists());
    assert_eq!(d["loaded"], 1, "the object stays: {d}");
    assert!(get(&proxy.url("/keep"))
        .await
        .cache_status_params()
        .has("hit"));
    let metrics = get(&proxy.admin_url("/metrics")).await.body;
    assert!(
        metrics.contains("calmcache_zone_leftover_temp_files_total{zone=\"ram\"} 2"),
        "{metrics}"
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// Two processes on one zone directory would take each other's writes in
/// progress for crash leftovers: the second is refused, naming the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_a_zone_directory_is_refused() {
    let origin = Origin::start().await;
    let dir = scratch("shared-zone").join("zone");
    let proxy = Proxy::new(&origin).disk_zone(&dir, "").start().await;
    let config = dir.with_extension("toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{}\"]\n[upstreams.o]\nservers = [\"{}\"]\n\
             [zones.d]\nkind = \"disk\"\nmax_size = \"1MiB\"\npath = {:?}\n\
             [[routes]]\nupstream = \"o\"\nzone = \"d\"\n",
            free_port(),
            origin.addr(),
            dir.display().to_string()
        ),
    )
    .unwrap();
    // `check` passes: the directory is fine, just in use (as when checking
    // a config before reloading the proxy that runs it).
    let check = std::process::Command::new(BIN)
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let serve = serve_until_exit(&config, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&serve.stderr);
    assert_eq!(serve.status.code(), Some(1), "{err}");
    assert!(
        err.contains("zones.d") && err.contains("in use by another calmcache process"),
        "{err}"
    );
    // The running proxy still stores.
    assert!(get(&proxy.url("/x"))
        .await
        .cache_status_params()
        .has("stored"));
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// A file system out of inodes (ENOSPC on create, with bytes to spare) at
/// start: `serve` used to refuse the zone (its start probe could not create
/// a file); now it starts, serves what the zone holds, and evicts to free
/// inodes (the zone is bounded in files as well as bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_whose_file_system_is_out_of_inodes_starts_and_makes_room() {
    const TEST: &str = "a_zone_whose_file_system_is_out_of_inodes";
    let base = scratch("inodes");
    let Some(fs) = tmpfs_or_skip(&base.join("fs"), "size=16m,nr_inodes=200", TEST) else {
        return;
    };
    let origin = Origin::start().await;
    let (port, admin) = (free_port(), free_port());
    let config = base.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [upstreams.o]\nservers = [\"{}\"]\n\
             [zones.d]\nkind = \"disk\"\nmax_size = \"64MiB\"\npath = {:?}\n\
             [[routes]]\nupstream = \"o\"\nzone = \"d\"\nkey = \"$uri\"\nttl = {{ 200 = \"1h\" }}\n",
            origin.addr(),
            base.join("fs/zone").display().to_string()
        ),
    )
    .unwrap();
    let serve = || {
        Child(
            std::process::Command::new(BIN)
                .args(["serve", "--config", config.to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let child = serve();
    wait_listening(port).await;
    for i in 0..40 {
        sized(port, &format!("/o/{i}"), "1000").await;
    }
    drop(child);
    // Someone else takes every inode left.
    let mut n = 0;
    while std::fs::write(base.join(format!("fs/f{n}")), b"").is_ok() {
        n += 1;
        assert!(n < 1000, "nr_inodes is not enforced");
    }

    let _child = serve();
    wait_listening(port).await;
    wait_until(Duration::from_secs(10), "the loader", async || {
        status(admin).await["zones"]["d"]["disk"]["loader_done"] == true
    })
    .await;
    let r = sized(port, "/o/39", "1000").await;
    assert!(r.cache_status_params().has("hit"), "{}", r.cache_status());
    let mut stored = 0;
    for i in 0..20 {
        let r = sized(port, &format!("/new/{i}"), "1000").await;
        stored += usize::from(r.cache_status_params().has("stored"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = status(admin).await["zones"]["d"]["disk"].clone();
    assert!(stored >= 8, "{stored} of 20 stored: {d}");
    assert!(d["evictions_nospace"].as_u64().unwrap() >= 1, "{d}");
    assert!(
        d["fs_capacity_files"].as_u64().is_some(),
        "bounded in files: {d}"
    );
    eprintln!("{TEST}: {stored} of 20 stored after the restart: {d}");
    drop(fs);
    let _ = std::fs::remove_dir_all(&base);
}

/// A reload runs the same checks as `check` and `serve`: a new disk zone on
/// a path that cannot be a directory is refused with its TOML path, and the
/// proxy keeps its running config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_checks_what_check_and_serve_check() {
    let origin = Origin::start().await;
    let base = scratch("reload-preflight");
    let path = base.join("calmcache.toml");
    let config = |zone: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n\
             [upstreams.o]\nservers = [\"{}\"]\n{zone}\n[[routes]]\nupstream = \"o\"\n",
            origin.addr()
        )
    };
    std::fs::write(&path, config("")).unwrap();
    let first = calmcache::Config::from_file(&path).unwrap();
    let running = calmcache::start_from(&first, Some(path.clone()))
        .await
        .unwrap();
    std::fs::write(base.join("file"), b"in the way").unwrap();
    let zone = format!(
        "[zones.d]\nkind = \"disk\"\nmax_size = \"1MiB\"\npath = {:?}\n",
        base.join("file/zone").display().to_string()
    );
    std::fs::write(&path, config(&zone)).unwrap();
    let errors = running.reloader().reload_file().await.unwrap_err();
    let all = errors.problems().join("\n");
    assert!(
        all.contains("zones.d.path") && all.contains("is not a directory"),
        "{all}"
    );
    let url = format!("http://{}/still", running.proxy_addrs[0]);
    assert_eq!(get(&url).await.status, 200, "the old config still serves");
    running.shutdown(Duration::from_secs(2)).await;
    let _ = std::fs::remove_dir_all(&base);
}
