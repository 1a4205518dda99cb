//! Integration tests: real sockets on 127.0.0.1, a steerable origin that counts
//! its requests, calmcache started in-process (and as a process for the CLI).

#![allow(clippy::unwrap_used)]

mod caching;
mod cli;
mod errors;
mod refresh;
mod zone;

use std::time::Duration;

/// Concurrency for load loops: enough to stampede, bounded.
pub const CLIENTS: usize = 200;

/// The `ttl=` parameter of a reply's `Cache-Status`.
pub fn ttl_of(reply: &calmcache_testkit::Reply) -> f64 {
    let status = reply.cache_status();
    let ttl = status
        .split("ttl=")
        .nth(1)
        .unwrap_or_else(|| panic!("no ttl in {status:?}"));
    ttl.split(';').next().unwrap().trim().parse().unwrap()
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
