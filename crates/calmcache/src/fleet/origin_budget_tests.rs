#![allow(clippy::unwrap_used)]
//! The fleet-wide origin budget against a real redis-server: several
//! `Fleet`s on one Redis are the nodes.

use super::*;
use crate::fleet::tests::config_for;
use std::sync::atomic::AtomicU64;

use crate::config::FleetConfig;
use crate::fleet::BreakerState;
use calmcache_testkit::redis::{Redis, RedisCluster};
use calmcache_testkit::wait::wait_until;

const LONG: Duration = Duration::from_secs(30);

fn config(redis: &Redis) -> FleetConfig {
    config_for(vec![redis.url()])
}

fn node(cfg: &FleetConfig, lifetime: Duration) -> OriginBudget {
    OriginBudget::new(Fleet::new(cfg).unwrap(), lifetime)
}

fn stat(budget: &OriginBudget, what: fn(&super::super::FleetStats) -> &AtomicU64) -> u64 {
    what(&budget.inner.fleet.stats).load(Ordering::Relaxed)
}

/// The leases in Redis for `api`'s server `s:80`.
fn leases(redis: &Redis) -> String {
    redis
        .command(&["ZCARD", "cc:{origin:api/s:80}:slots"])
        .unwrap()
        .trim()
        .to_owned()
}

/// Takes a slot, asking again every 5 ms while the budget is full; `None`
/// when Redis did not answer.
async fn slot(budget: &OriginBudget, limit: u32) -> Option<Box<dyn Send + Sync>> {
    for _ in 0..4_000 {
        match budget.take("api", "s:80", limit).await {
            SharedTake::Granted(guard) => return Some(guard),
            SharedTake::Full => tokio::time::sleep(Duration::from_millis(5)).await,
            SharedTake::Unavailable => return None,
        }
    }
    panic!("no slot after 4000 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_together_never_hold_more_than_the_limit() {
    let redis = Redis::start();
    let cfg = config(&redis);
    let nodes = [node(&cfg, LONG), node(&cfg, LONG), node(&cfg, LONG)];
    let (now, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut asking = tokio::task::JoinSet::new();
    for budget in &nodes {
        for _ in 0..50 {
            let (budget, now, peak) = (budget.clone(), now.clone(), peak.clone());
            asking.spawn(async move {
                let guard = slot(&budget, 4).await.expect("redis answers");
                // Counted while surely held: after the grant, before the
                // release (which follows the drop).
                let held = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(held, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
            });
        }
    }
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(done) = asking.join_next().await {
            done.unwrap();
        }
    });
    all.await.expect("150 requests through a budget of 4");
    let peak = peak.load(Ordering::SeqCst);
    assert!((1..=4).contains(&peak), "peak {peak}: never above 4");
    let granted: u64 = nodes.iter().map(|n| stat(n, |s| &s.origin_granted)).sum();
    let full: u64 = nodes.iter().map(|n| stat(n, |s| &s.origin_full)).sum();
    assert_eq!(granted, 150, "each request one slot");
    assert!(full > 0, "150 at once found the budget full");
    // Every slot given back: none left for the lease to expire.
    wait_until(Duration::from_secs(5), "every slot released", async || {
        leases(&redis) == ":0"
    })
    .await;
    for n in &nodes {
        assert_eq!(stat(n, |s| &s.origin_held), 0);
        assert_eq!(stat(n, |s| &s.origin_failed_open), 0);
        let ops = n.inner.fleet.ops();
        assert_eq!(
            ops["origin_take"].ok,
            stat(n, |s| &s.origin_granted) + stat(n, |s| &s.origin_full)
        );
    }
    // Counted once their answers are read (after Redis removed them).
    wait_until(
        Duration::from_secs(5),
        "150 releases answered",
        async || {
            let released = nodes
                .iter()
                .map(|n| n.inner.fleet.ops()["origin_release"].ok);
            released.sum::<u64>() == 150
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_makes_room_at_once() {
    let redis = Redis::start();
    let cfg = config(&redis);
    let (a, b) = (node(&cfg, LONG), node(&cfg, LONG));
    let held = slot(&a, 1).await.unwrap();
    assert!(matches!(b.take("api", "s:80", 1).await, SharedTake::Full));
    // Another server of the upstream, and another upstream: budgets of their own.
    assert!(matches!(
        b.take("api", "t:80", 1).await,
        SharedTake::Granted(_)
    ));
    assert!(matches!(
        b.take("web", "s:80", 1).await,
        SharedTake::Granted(_)
    ));
    drop(held);
    wait_until(Duration::from_secs(5), "b's slot", async || {
        matches!(b.take("api", "s:80", 1).await, SharedTake::Granted(_))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_slot_expires_and_a_held_one_is_renewed() {
    let redis = Redis::start();
    let cfg = config(&redis);
    // A node that dies holding a slot: its runtime (and renewal) ends,
    // nothing releases the slot.
    let dead = cfg.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let budget = node(&dead, Duration::from_millis(600));
            std::mem::forget(slot(&budget, 1).await.unwrap());
        });
    })
    .join()
    .unwrap();
    let live = node(&cfg, Duration::from_millis(600));
    assert!(matches!(
        live.take("api", "s:80", 1).await,
        SharedTake::Full
    ));
    // Time is the subject: the lease runs out on Redis' clock.
    let mine = wait_until(
        Duration::from_secs(5),
        "the dead node's slot",
        async || match live.take("api", "s:80", 1).await {
            SharedTake::Granted(guard) => Some(guard),
            _ => None,
        },
    )
    .await;
    // Held three lifetimes: renewed, so still ours.
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    let other = node(&cfg, Duration::from_millis(600));
    assert!(matches!(
        other.take("api", "s:80", 1).await,
        SharedTake::Full
    ));
    assert!(live.inner.fleet.ops()["origin_renew"].ok >= 2);
    assert_eq!(stat(&live, |s| &s.origin_lost), 0);
    drop(mine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_fails_open_and_opens_the_breaker() {
    let redis = Redis::start();
    let cfg = FleetConfig {
        timeout: Duration::from_millis(100),
        ..config(&redis)
    };
    let budget = node(&cfg, LONG);
    // Connected, and the script known to Redis.
    drop(slot(&budget, 4).await.unwrap());
    redis.pause();
    for _ in 0..8 {
        let asked = tokio::time::timeout(Duration::from_secs(5), budget.take("api", "s:80", 4));
        assert!(matches!(asked.await.unwrap(), SharedTake::Unavailable));
    }
    redis.resume();
    let ops = budget.inner.fleet.ops();
    assert!(
        ops["origin_take"].timed_out >= 1,
        "{:?}",
        ops["origin_take"]
    );
    assert!(
        ops["origin_take"].skipped >= 1,
        "the breaker opened: later takes skipped"
    );
    assert_ne!(budget.inner.fleet.breaker(), BreakerState::Closed);
    assert_eq!(stat(&budget, |s| &s.origin_failed_open), 8);
    assert_eq!(stat(&budget, |s| &s.origin_held), 0);
    // The breaker's probe finds Redis back: slots are granted again (the
    // late takes' slots were given back, or expire: the limit leaves room).
    wait_until(
        Duration::from_secs(10),
        "a slot once Redis is back",
        async || matches!(budget.take("api", "s:80", 64).await, SharedTake::Granted(_)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_fails_open() {
    let mut redis = Redis::start();
    let budget = node(&config(&redis), LONG);
    drop(slot(&budget, 4).await.unwrap());
    redis.kill9();
    for _ in 0..3 {
        let asked = tokio::time::timeout(Duration::from_secs(5), budget.take("api", "s:80", 4));
        assert!(matches!(asked.await.unwrap(), SharedTake::Unavailable));
    }
    let take = budget.inner.fleet.ops()["origin_take"];
    assert!(take.failed + take.timed_out + take.skipped >= 3, "{take:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_value_at_the_key_fails_open_once_and_is_replaced() {
    let redis = Redis::start();
    let budget = node(&config(&redis), LONG);
    let key = "cc:{origin:api/s:80}:slots";
    redis.command(&["SET", key, "garbage"]).unwrap();
    assert!(matches!(
        budget.take("api", "s:80", 4).await,
        SharedTake::Unavailable
    ));
    assert_eq!(stat(&budget, |s| &s.bad_entries), 1);
    assert_eq!(stat(&budget, |s| &s.origin_failed_open), 1);
    assert_eq!(redis.command(&["TYPE", key]).unwrap().trim(), "+none");
    // The script answered: no failure against the breaker.
    assert_eq!(budget.inner.fleet.breaker(), BreakerState::Closed);
    let held = slot(&budget, 4).await.expect("a set of slots afresh");
    assert_eq!(redis.command(&["TYPE", key]).unwrap().trim(), "+zset");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_keeps_each_servers_slots_on_one_key() {
    let cluster = RedisCluster::start();
    let cfg = FleetConfig {
        cluster: true,
        timeout: Duration::from_secs(1),
        ..config_for(cluster.urls())
    };
    let (a, b) = (node(&cfg, LONG), node(&cfg, LONG));
    // The cluster connection comes up in the background.
    let held = wait_until(
        Duration::from_secs(10),
        "a slot on the cluster",
        async || match a.take("api", "s:80", 2).await {
            SharedTake::Granted(guard) => Some(guard),
            _ => None,
        },
    )
    .await;
    let second = wait_until(
        Duration::from_secs(10),
        "b on the cluster",
        async || match b.take("api", "s:80", 2).await {
            SharedTake::Granted(guard) => Some(guard),
            _ => None,
        },
    )
    .await;
    assert!(matches!(b.take("api", "s:80", 2).await, SharedTake::Full));
    // Other servers hash elsewhere: each its own budget, on its own key.
    for server in ["t:80", "u:80", "v:80", "w:80"] {
        assert!(matches!(
            a.take("api", server, 1).await,
            SharedTake::Granted(_)
        ));
    }
    drop((held, second));
    wait_until(Duration::from_secs(5), "a slot given back", async || {
        matches!(b.take("api", "s:80", 2).await, SharedTake::Granted(_))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_dropped_on_its_way_gives_its_slot_back() {
    let redis = Redis::start();
    let cfg = config(&redis);
    let budget = node(&cfg, LONG);
    // Connected, and the script known to Redis.
    drop(slot(&budget, 4).await.unwrap());
    wait_until(Duration::from_secs(5), "no lease left", async || {
        leases(&redis) == ":0"
    })
    .await;
    // Redis stops answering while the take is on its way; the request's
    // future is dropped (its client left) before the answer.
    redis.pause();
    let asked = tokio::time::timeout(Duration::from_millis(50), budget.take("api", "s:80", 4));
    assert!(asked.await.is_err(), "dropped before its answer");
    redis.resume();
    // The script ran once Redis went on, and the slot was given back after
    // it (not left for its 30 s lifetime).
    wait_until(
        Duration::from_secs(5),
        "the dropped take's slot back",
        async || leases(&redis) == ":0",
    )
    .await;
    assert!(matches!(
        budget.take("api", "s:80", 1).await,
        SharedTake::Granted(_)
    ));
}
