//! Integration tests: real sockets on 127.0.0.1, a steerable origin that counts
//! and records its requests, calmcache started in-process (and as a process
//! for the CLI).
//!
//! The `rfc_*` files, `compress.rs` and `key_bypass.rs` are table-driven (see
//! `cases.rs`): every case names the RFC section it checks, and a failure
//! lists every failed case with its section.

#![allow(clippy::unwrap_used)]

mod access_log;
mod admin_security;
mod answering;
mod balance;
mod body_key;
mod bounded_memory;
mod caching;
mod cases;
mod cli;
mod compress;
mod compress_passed;
mod connections;
mod dashboard;
mod disk_admission;
mod disk_full;
mod disk_sendfile;
mod disk_zone;
mod early_hints;
mod edge_cases;
mod errors;
mod failing_origin;
mod fleet;
mod fleet_cluster;
mod fleet_handover;
mod fleet_harness;
mod fleet_kill;
mod fleet_lifetimes;
mod fleet_members;
mod fleet_midstream;
mod fleet_origin_budget;
mod fleet_partition;
mod fleet_pieces;
mod fleet_process;
mod fleet_protocols;
mod fleet_purge_floor;
mod fleet_redis_memory;
mod fleet_signed;
mod fleet_tls;
mod get_bodies;
mod header_rules;
mod health;
mod hostile;
mod ignore_headers;
mod import_nginx;
mod import_nginx_locations;
mod import_nginx_sites;
mod key_aliases;
mod key_bypass;
mod limits;
mod log_flood;
mod logs;
mod monitoring;
mod open_files;
mod operations;
mod origin_budget;
mod private_files;
mod proxy_protocol;
mod purge_integrity;
mod range_fill;
mod readme_config;
mod readme_figures;
mod readme_reference;
mod refresh;
mod reload_counters;
mod request_integrity;
mod rfc_age;
mod rfc_cache_status;
mod rfc_defaults;
mod rfc_directives;
mod rfc_freshness;
mod rfc_head;
mod rfc_invalidation;
mod rfc_range;
mod rfc_request_directives;
mod rfc_targeted;
mod rfc_validation;
mod rfc_vary;
mod route_paths;
mod service;
mod shared_answers;
mod slow_churn;
mod slow_readers;
mod third_tier;
mod tls_files;
mod unix_upstream;
mod upstream_blame;
mod upstream_reuse;
mod upstream_tls;
mod virtual_hosts;
mod warm;
mod websocket;
mod websocket_h2;
mod zero_copy;
mod zone;

use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{Origin, Proxy};

pub use calmcache_testkit::wait_until;

/// A fresh, empty directory under the temp dir for one test.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-it-{name}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A loopback port free a moment ago (for processes that need a fixed one).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (up to 10 s) until something accepts on `127.0.0.1:port`: a
/// calmcache process started by a test is up.
pub async fn wait_listening(port: u16) {
    let what = format!("calmcache listening on {port}");
    wait_until(Duration::from_secs(10), &what, async move || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
}

/// A child process killed and reaped when dropped, so a failing assertion
/// never leaves a calmcache running.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `calmcache serve --config config` started by `sh` after `setup` (a
/// shell command such as `umask 0` or `ulimit -n 500` that the process
/// inherits), its log in `log`.
pub fn serve_after(setup: &str, config: &std::path::Path, log: &std::path::Path) -> Child {
    let bin = env!("CARGO_BIN_EXE_calmcache");
    Child(
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{setup} && exec '{bin}' serve --config '{}'",
                config.display()
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Sends `signal` (`-HUP`, `-TERM`, ...) to `child`.
pub fn signal(child: &Child, signal: &str) {
    let pid = child.0.id().to_string();
    let sent = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
}

/// Concurrency for load loops: enough to stampede, bounded.
pub const CLIENTS: usize = 200;

/// How long RFC cases wait for `max-age=1` objects to go stale.
pub const STALE_WAIT: Duration = Duration::from_millis(1500);

/// The `ttl=` parameter of a reply's `Cache-Status`, in seconds.
pub fn ttl_of(reply: &calmcache_testkit::Reply) -> f64 {
    reply
        .cache_status_params()
        .ttl()
        .unwrap_or_else(|| panic!("no ttl in {:?}", reply.cache_status()))
}

/// A proxy for RFC cases: no route `ttl` (the origin's headers decide),
/// `refresh = "lock"`, and `keys` for the route.
pub async fn rfc_proxy(origin: &Origin, keys: &str) -> RunningProxy {
    Proxy::new(origin)
        .no_default_ttl()
        .route("refresh = \"lock\"")
        .route(keys)
        .start()
        .await
}

/// Sends `n` concurrent GETs with `headers` and returns every reply.
pub async fn burst(
    url: &str,
    n: usize,
    headers: &[(&'static str, &'static str)],
) -> Vec<calmcache_testkit::Reply> {
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let url = url.to_string();
        let headers = headers.to_vec();
        tasks.push(tokio::spawn(async move {
            calmcache_testkit::get_with(http::Method::GET, &url, &headers).await
        }));
    }
    let mut replies = Vec::with_capacity(n);
    for t in tasks {
        replies.push(
            tokio::time::timeout(Duration::from_secs(20), t)
                .await
                .expect("bounded")
                .unwrap(),
        );
    }
    replies
}
