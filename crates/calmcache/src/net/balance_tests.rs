#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{least_conn, request_hash, InFlight, Load, Ring, POINTS};
use crate::config::key_template::KeyTemplate;

/// A bounded, generated key set: request URIs of a site.
fn keys() -> Vec<u64> {
    (0..20_000)
        .map(|i| super::hash(format!("/articles/{i}?page={}", i % 7).as_bytes()))
        .collect()
}

fn ring(addresses: &[&str]) -> Ring {
    Ring::new(addresses.iter().map(|a| (*a, 1)))
}

fn owner(ring: &Ring, key: u64) -> usize {
    ring.order(key).next().unwrap()
}

#[test]
fn keys_spread_evenly_over_the_servers() {
    let ring = ring(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"]);
    let mut counts = [0usize; 4];
    for key in keys() {
        counts[owner(&ring, key)] += 1;
    }
    // 160 points each: every share within 20 % of a quarter.
    for count in counts {
        assert!((4_000..=6_000).contains(&count), "{counts:?}");
    }
}

/// The ketama property: a fifth server takes about 1/5 of the keys, every
/// one of them from the others (none move between the old servers).
#[test]
fn adding_a_server_moves_about_one_nth_of_the_keys() {
    let four = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"];
    let five = [
        "10.0.0.1:80",
        "10.0.0.2:80",
        "10.0.0.3:80",
        "10.0.0.4:80",
        "10.0.0.5:80",
    ];
    let (before, after) = (ring(&four), ring(&five));
    let keys = keys();
    let mut moved = 0;
    for &key in &keys {
        let (old, new) = (owner(&before, key), owner(&after, key));
        if old != new {
            assert_eq!(new, 4, "a key moved between old servers");
            moved += 1;
        }
    }
    let share = moved as f64 / keys.len() as f64;
    println!(
        "adding a 5th server moved {:.1} % of {} keys",
        share * 100.0,
        keys.len()
    );
    assert!((0.14..=0.26).contains(&share), "{share}");
}

#[test]
fn weights_give_points_in_proportion() {
    let ring = Ring::new([("a:80", 3), ("b:80", 1)].into_iter());
    assert_eq!(ring.points.len(), 4 * POINTS as usize);
    let heavy = keys().into_iter().filter(|&k| owner(&ring, k) == 0).count();
    let share = heavy as f64 / 20_000.0;
    assert!((0.65..=0.85).contains(&share), "{share}");
}

/// A down server's keys go to the next server along the ring, each server
/// once; the walk ends after every server.
#[test]
fn the_order_walks_every_server_once() {
    let ring = ring(&["a:80", "b:80", "c:80"]);
    for key in keys().into_iter().take(100) {
        let mut order: Vec<usize> = ring.order(key).collect();
        assert_eq!(order.len(), 3);
        order.sort_unstable();
        assert_eq!(order, [0, 1, 2]);
    }
    let empty = Ring::new(std::iter::empty());
    assert_eq!(empty.order(7).next(), None);
}

#[test]
fn a_point_past_the_last_wraps_to_the_first() {
    let ring = ring(&["a:80", "b:80"]);
    let first = ring.points[0].1;
    assert_eq!(owner(&ring, u64::MAX), first);
}

#[test]
fn the_request_hash_is_the_rendered_key_s() {
    let key = KeyTemplate::parse("$request_uri").unwrap();
    let req = |uri: &str, host: &str| {
        http::Request::builder()
            .uri(uri)
            .header("host", host)
            .body(())
            .unwrap()
    };
    let a = request_hash(&key, &req("/x?y=1", "a.test"));
    assert_eq!(a, super::hash(b"/x?y=1"));
    assert_eq!(a, request_hash(&key, &req("/x?y=1", "b.test")));
    assert_ne!(a, request_hash(&key, &req("/x?y=2", "a.test")));
    let host = KeyTemplate::parse("$host$uri").unwrap();
    assert_ne!(
        request_hash(&host, &req("/x", "a.test")),
        request_hash(&host, &req("/x", "b.test"))
    );
}

#[test]
fn least_conn_takes_the_lightest_for_its_weight_ties_in_turn() {
    let load = |loads: &'static [(usize, u32)]| {
        move |i: usize| {
            loads
                .get(i)
                .map(|&(active, weight)| Load { active, weight })
        }
    };
    assert_eq!(least_conn(3, 0, load(&[(2, 1), (1, 1), (3, 1)])), Some(1));
    // 4 in flight at weight 4 is lighter than 2 at weight 1.
    assert_eq!(least_conn(2, 0, load(&[(2, 1), (4, 4)])), Some(1));
    // Ties: the first from `start`.
    assert_eq!(least_conn(3, 0, load(&[(0, 1), (0, 1), (0, 1)])), Some(0));
    assert_eq!(least_conn(3, 1, load(&[(0, 1), (0, 1), (0, 1)])), Some(1));
    assert_eq!(least_conn(3, 5, load(&[(0, 1), (0, 1), (0, 1)])), Some(2));
    // Not candidates (down): skipped; none: None.
    let some = |i: usize| {
        (i == 2).then_some(Load {
            active: 9,
            weight: 1,
        })
    };
    assert_eq!(least_conn(3, 0, some), Some(2));
    assert_eq!(least_conn(3, 0, |_| None), None);
}

#[test]
fn in_flight_counts_until_dropped() {
    let count = Arc::new(AtomicUsize::new(0));
    let a = InFlight::enter(&count);
    let b = InFlight::enter(&count);
    assert_eq!(count.load(Ordering::Relaxed), 2);
    drop(a);
    assert_eq!(count.load(Ordering::Relaxed), 1);
    drop(b);
    assert_eq!(count.load(Ordering::Relaxed), 0);
}
