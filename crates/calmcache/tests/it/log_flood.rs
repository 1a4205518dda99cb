//! Warnings that repeat per request are rate-limited: the first is logged,
//! then at most one line per 10 s with the count suppressed.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::{free_port, scratch, Child};

/// Regression (issue 12, item 7): one warning per failed request or write
/// flooded the log (40,256 lines in 20 s). 300 requests passed through to a
/// dead origin log one "origin request failed" line, not 300.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_origin_logs_one_line_not_one_per_request() {
    let base = scratch("log-flood");
    let port = free_port();
    let config = base.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n\
             [upstreams.o]\nservers = [\"127.0.0.1:{}\"]\n[[routes]]\nupstream = \"o\"\n",
            free_port()
        ),
    )
    .unwrap();
    let log = base.join("serve.log");
    let child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_calmcache"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    crate::wait_listening(port).await;
    for i in 0..300 {
        let r = calmcache_testkit::get(&format!("http://127.0.0.1:{port}/p/{i}")).await;
        assert_eq!(r.status, 502);
    }
    drop(child);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = text
        .lines()
        .filter(|l| l.contains("origin request failed"))
        .count();
    // One, or two should the 300 requests take over 10 s on a busy machine.
    assert!((1..=2).contains(&lines), "{lines} lines:\n{text}");
    let _ = std::fs::remove_dir_all(&base);
}

/// Lines of the Redis client itself (target `redis::...`) in `text`.
fn redis_client_lines(text: &str) -> usize {
    text.lines().filter(|l| l.contains(" redis::")).count()
}

/// Regression (issue 25, item 13): during a cluster outage the Redis
/// client's own reconnect loop logged about 9 lines a second per node
/// through `log`, past calmcache's rate limits. With the three nodes of a
/// cluster killed and fills asking Redis for 4 s, its lines are bounded:
/// at most one per call site per 10 s (a handful), and a line that follows
/// suppressed ones says how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_outage_logs_a_bounded_number_of_client_lines() {
    let cluster = calmcache_testkit::redis::RedisCluster::start();
    let origin = calmcache_testkit::Origin::start().await;
    let base = scratch("redis-log-flood");
    let port = free_port();
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let config = base.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n\
             [upstreams.o]\nservers = [\"{}\"]\n\
             [zones.ram]\nkind = \"memory\"\nmax_size = \"16MiB\"\n\
             [fleet]\nredis = [{}]\ntimeout = \"200ms\"\n\
             [[routes]]\nupstream = \"o\"\nzone = \"ram\"\nttl = {{ 200 = \"1h\" }}\n",
            origin.addr(),
            urls.join(", ")
        ),
    )
    .unwrap();
    let log = base.join("serve.log");
    let _child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_calmcache"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .env("CALMCACHE_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    crate::wait_listening(port).await;
    let url = |i: u32| format!("http://127.0.0.1:{port}/outage/{i}");
    assert_eq!(calmcache_testkit::get(&url(0)).await.status, 200);
    drop(cluster);
    // Bounded: 4 s of misses (each fill asks Redis, or the open breaker).
    let until = std::time::Instant::now() + Duration::from_secs(4);
    let mut i = 1;
    while std::time::Instant::now() < until && i < 2_000 {
        assert_eq!(calmcache_testkit::get(&url(i)).await.status, 200);
        i += 1;
        // Paced misses through the outage: its length is the subject.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = redis_client_lines(&text);
    eprintln!("{lines} lines of the Redis client in 4 s of outage");
    assert!(lines <= 12, "{lines} lines:\n{text}");
    let _ = std::fs::remove_dir_all(&base);
}
