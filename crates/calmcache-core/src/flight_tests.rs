#![allow(clippy::unwrap_used)]
use super::*;

fn key(p: &str) -> CacheKey {
    CacheKey::new("http", "h", p)
}

#[tokio::test]
async fn one_leader_many_followers_get_its_value() {
    let flights: Flights<u32> = Flights::new();
    let Lookup::Leader(permit) = flights.join(&key("/a")) else {
        panic!("first is leader")
    };
    let mut waiters = Vec::new();
    for _ in 0..200 {
        match flights.join(&key("/a")) {
            Lookup::Follower(w) => waiters.push(tokio::spawn(w.wait(Duration::from_secs(5)))),
            Lookup::Leader(_) => panic!("only one leader"),
        }
    }
    permit.finish(7);
    for w in waiters {
        assert_eq!(w.await.unwrap(), Ok(7));
    }
    assert_eq!(flights.in_flight(), 0);
}

#[tokio::test]
async fn a_dropped_leader_wakes_its_followers() {
    let flights: Flights<u32> = Flights::new();
    let permit = flights.try_lead(&key("/a")).unwrap();
    let Lookup::Follower(w) = flights.join(&key("/a")) else {
        panic!("follower")
    };
    let waiting = tokio::spawn(w.wait(Duration::from_secs(5)));
    drop(permit);
    assert_eq!(waiting.await.unwrap(), Err(WaitError::Abandoned));
    assert_eq!(flights.in_flight(), 0, "no lock is leaked");
    assert!(flights.try_lead(&key("/a")).is_some());
}

#[tokio::test(start_paused = true)]
async fn followers_give_up_after_the_lock_timeout() {
    let flights: Flights<u32> = Flights::new();
    let _permit = flights.try_lead(&key("/a")).unwrap();
    let Lookup::Follower(w) = flights.join(&key("/a")) else {
        panic!("follower")
    };
    assert_eq!(
        w.wait(Duration::from_secs(5)).await,
        Err(WaitError::Timeout)
    );
}

#[tokio::test]
async fn distinct_keys_do_not_wait_for_each_other() {
    let flights: Flights<u32> = Flights::new();
    let _a = flights.try_lead(&key("/a")).unwrap();
    assert!(flights.try_lead(&key("/b")).is_some());
}

#[tokio::test]
async fn published_values_reach_late_joiners_until_finish() {
    let flights: Flights<u32> = Flights::new();
    let key = CacheKey::new("http", "h", "/p");
    let Lookup::Leader(permit) = flights.join(&key) else {
        panic!("leader");
    };
    let Lookup::Follower(early) = flights.join(&key) else {
        panic!("follower");
    };
    permit.publish(1);
    assert_eq!(early.wait(Duration::from_secs(1)).await, Ok(1));
    // Still in flight: a late joiner follows and gets the published value.
    let Lookup::Follower(late) = flights.join(&key) else {
        panic!("late follower");
    };
    assert_eq!(late.wait(Duration::from_secs(1)).await, Ok(1));
    permit.finish(2);
    assert!(matches!(flights.join(&key), Lookup::Leader(_)));
}

#[tokio::test]
async fn interest_sees_followers_come_and_go() {
    let flights: Flights<u32> = Flights::new();
    let permit = flights.try_lead(&key("/a")).unwrap();
    let interest = permit.interest();
    assert!(!interest.has_followers(), "the leader alone");
    let Lookup::Follower(w) = flights.join(&key("/a")) else {
        panic!("follower")
    };
    assert!(interest.has_followers());
    drop(w);
    assert!(!interest.has_followers(), "the follower went away");
    permit.finish(1);
    assert!(!interest.has_followers(), "the flight is over");
}

#[tokio::test(start_paused = true)]
async fn followers_wait_for_a_leader_within_its_bounds() {
    let flights: Flights<u32> = Flights::new();
    let permit = flights.try_lead(&key("/a")).unwrap();
    // The leader's fetch is bounded by its read timeout, 30 s.
    permit.alive_for(Duration::from_secs(30));
    let Lookup::Follower(w) = flights.join(&key("/a")) else {
        panic!("follower")
    };
    let waiting = tokio::spawn(w.wait(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(!waiting.is_finished(), "a progressing leader is waited for");
    permit.finish(3);
    assert_eq!(waiting.await.unwrap(), Ok(3));
}

#[tokio::test(start_paused = true)]
async fn progress_extends_the_wait_and_silence_ends_it() {
    let flights: Flights<u32> = Flights::new();
    let permit = flights.try_lead(&key("/a")).unwrap();
    let Lookup::Follower(w) = flights.join(&key("/a")) else {
        panic!("follower")
    };
    let started = Instant::now();
    let waiting = tokio::spawn(w.wait(Duration::from_secs(5)));
    // Steps forward every 2 s, each bounded by 3 s, until 20 s in.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        permit.alive_for(Duration::from_secs(3));
    }
    // Then silence: the follower gives up once the last bound has passed.
    assert_eq!(waiting.await.unwrap(), Err(WaitError::Timeout));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(23) && waited < Duration::from_secs(24),
        "{waited:?}"
    );
    drop(permit);
}
