//! The leaky bucket against NGINX's arithmetic, the connection counts, and
//! the client keys; time is the subject here, so it is given, not waited.
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{ClientKey, Limit, Verdict};
use crate::config::limits::{AppliesTo, Delay, LimitConfig, LimitKind, RateLimit};

fn limit(kind: LimitKind) -> Arc<Limit> {
    let cfg = LimitConfig {
        name: "t".into(),
        kind,
        status: 429,
        applies_to: AppliesTo::All,
        max_clients: 100,
    };
    Limit::new(&cfg, None)
}

fn rate(per_s: u64, burst: u32, delay: Delay) -> Arc<Limit> {
    limit(LimitKind::Rate(RateLimit {
        milli_per_second: per_s * 1000,
        burst,
        delay,
    }))
}

fn key(ip: &str) -> ClientKey {
    ClientKey::of(ip.parse::<IpAddr>().unwrap())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn without_burst_the_second_request_within_the_interval_is_refused() {
    let limit = rate(10, 0, Delay::After(0));
    let t0 = Instant::now();
    let a = key("192.0.2.1");
    assert_eq!(limit.take(a, t0), Verdict::Go);
    assert_eq!(limit.take(a, t0 + ms(50)), Verdict::Refuse(ms(50)));
    // A refusal does not fill the bucket: 100 ms after the first, room.
    assert_eq!(limit.take(a, t0 + ms(100)), Verdict::Go);
    // Another client has a bucket of its own.
    assert_eq!(limit.take(key("192.0.2.2"), t0 + ms(100)), Verdict::Go);
}

#[test]
fn a_burst_is_delayed_to_the_rate_unless_nodelay() {
    let t0 = Instant::now();
    let a = key("192.0.2.1");
    let delayed = rate(10, 2, Delay::After(0));
    assert_eq!(delayed.take(a, t0), Verdict::Go);
    assert_eq!(delayed.take(a, t0), Verdict::Wait(ms(100)));
    assert_eq!(delayed.take(a, t0), Verdict::Wait(ms(200)));
    assert_eq!(delayed.take(a, t0), Verdict::Refuse(ms(100)));

    let at_once = rate(10, 2, Delay::NoDelay);
    for _ in 0..3 {
        assert_eq!(at_once.take(a, t0), Verdict::Go);
    }
    assert_eq!(at_once.take(a, t0), Verdict::Refuse(ms(100)));

    // delay = 1: the first excess request goes at once, the next waits.
    let partly = rate(10, 2, Delay::After(1));
    assert_eq!(partly.take(a, t0), Verdict::Go);
    assert_eq!(partly.take(a, t0), Verdict::Go);
    assert_eq!(partly.take(a, t0), Verdict::Wait(ms(100)));
}

#[test]
fn a_request_given_back_leaves_the_bucket_as_before() {
    let limit = rate(10, 1, Delay::NoDelay);
    let t0 = Instant::now();
    let a = key("192.0.2.1");
    assert_eq!(limit.take(a, t0), Verdict::Go);
    assert_eq!(limit.take(a, t0), Verdict::Go);
    limit.give_back(a);
    assert_eq!(
        limit.take(a, t0),
        Verdict::Go,
        "the burst's place is free again"
    );
    assert_eq!(limit.take(a, t0), Verdict::Refuse(ms(100)));
}

#[test]
fn a_rate_per_minute_leaks_by_the_millisecond() {
    // 30r/m: 500 milli-requests a second, one request per 2 s.
    let limit = limit(LimitKind::Rate(RateLimit {
        milli_per_second: 500,
        burst: 0,
        delay: Delay::After(0),
    }));
    let t0 = Instant::now();
    let a = key("192.0.2.1");
    assert_eq!(limit.take(a, t0), Verdict::Go);
    assert_eq!(limit.take(a, t0 + ms(1000)), Verdict::Refuse(ms(1000)));
    assert_eq!(limit.take(a, t0 + ms(2000)), Verdict::Go);
}

#[test]
fn connections_count_requests_in_progress_per_client() {
    let limit = limit(LimitKind::Connections(2));
    let a = key("192.0.2.1");
    let first = limit.enter(a).unwrap();
    let second = limit.enter(a).unwrap();
    assert!(first.holds());
    assert!(limit.enter(a).is_none(), "a third is refused");
    assert!(limit.enter(key("192.0.2.2")).is_some(), "others are not");
    drop(first);
    let third = limit.enter(a);
    assert!(third.is_some(), "a place freed is taken again");
    drop((second, third));
    assert_eq!(limit.clients(), 0, "a client without requests is forgotten");
}

#[test]
fn a_full_connections_table_refuses_new_clients() {
    let cfg = LimitConfig {
        name: "t".into(),
        kind: LimitKind::Connections(5),
        status: 429,
        applies_to: AppliesTo::All,
        max_clients: 2,
    };
    let limit = Limit::new(&cfg, None);
    let _a = limit.enter(key("192.0.2.1")).unwrap();
    let _b = limit.enter(key("192.0.2.2")).unwrap();
    assert!(limit.enter(key("192.0.2.3")).is_none());
    assert!(limit.enter(key("192.0.2.1")).is_some());
}

#[test]
fn ipv6_clients_are_keyed_by_their_64_and_mapped_v4_as_v4() {
    assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
    assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
}

#[test]
fn a_reload_keeps_an_unchanged_limit_and_the_counts_of_a_changed_one() {
    let old = rate(10, 0, Delay::After(0));
    old.stats.rejected.inc();
    let same = Limit::new(&old.cfg, Some(&old));
    assert!(Arc::ptr_eq(&same, &old));
    let mut cfg = old.cfg.clone();
    cfg.max_clients = 50;
    let changed = Limit::new(&cfg, Some(&old));
    assert!(!Arc::ptr_eq(&changed, &old));
    assert_eq!(changed.stats.rejected.get(), 1);
}
