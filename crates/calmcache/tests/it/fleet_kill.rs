//! Fleet mode when Redis' process fails (issue 14): three nodes under a
//! bounded load of concurrent clients (HTTP/1.1, h2c and HTTP/2 over TLS;
//! hits, refreshes and cold misses) while their Redis is killed (`kill -9`)
//! and restarted, then hung (`SIGSTOP`) for 5 s. Every request is answered
//! with a 200 and the right body; every node's breaker opens while Redis
//! fails and closes after, and the fleet stores in and takes from Redis
//! again.

use std::time::Duration;

use calmcache_testkit::redis::Redis;
use calmcache_testkit::Origin;

use crate::fleet_harness::{no_failed_request, three_nodes, Load, Watch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_or_hung_redis_under_load_fails_no_request() {
    let mut redis = Redis::start();
    let origin = Origin::start().await;
    let nodes = three_nodes(&origin, &redis.url(), "timeout = \"200ms\"", "1s").await;
    let load = Load::start(&nodes);

    // kill -9, then a new (empty) server on the same port.
    let watch = Watch::before("kill -9", &nodes, &load).await;
    tokio::task::block_in_place(|| redis.kill9());
    watch.opens().await;
    watch.lasts(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| redis.restart());
    watch.recovers().await;

    // SIGSTOP for 5 s: connections open, nothing answers.
    let watch = Watch::before("SIGSTOP", &nodes, &load).await;
    redis.pause();
    watch.opens().await;
    watch.lasts(Duration::from_secs(5)).await;
    redis.resume();
    watch.recovers().await;

    no_failed_request(load, "kill -9 and SIGSTOP").await;
}
