#![allow(clippy::unwrap_used)]
use super::*;
use crate::test_tier::TestTier;
use std::sync::atomic::Ordering;

fn seed(name: &str) -> u64 {
    zone_seed(name)
}

fn pick(key: u64, zones: &[(u64, u32)]) -> u64 {
    zones
        .iter()
        .map(|&(s, w)| (rendezvous_score(key, s, w), s))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, s)| s)
        .unwrap_or(0)
}

const KEYS: u64 = 100_000;

fn keys() -> impl Iterator<Item = u64> {
    (0..KEYS).map(|i| key_hash(&KeyRef::new("http", "h", &format!("/k/{i}"))))
}

#[test]
fn keys_spread_evenly_and_by_weight() {
    let zones: Vec<(u64, u32)> = ["d1", "d2", "d3", "d4"]
        .iter()
        .map(|n| (seed(n), 1))
        .collect();
    let mut counts = std::collections::HashMap::new();
    for k in keys() {
        *counts.entry(pick(k, &zones)).or_insert(0u64) += 1;
    }
    for (_, n) in counts {
        let share = n as f64 / KEYS as f64;
        assert!((share - 0.25).abs() < 0.01, "share {share}");
    }
    // weight 3 against 1: three quarters of the keys.
    let weighted = [(seed("big"), 3), (seed("small"), 1)];
    let big = keys()
        .filter(|&k| pick(k, &weighted) == seed("big"))
        .count();
    let share = big as f64 / KEYS as f64;
    assert!((share - 0.75).abs() < 0.01, "share {share}");
}

#[test]
fn adding_a_zone_moves_only_its_share() {
    let three: Vec<(u64, u32)> = ["d1", "d2", "d3"].iter().map(|n| (seed(n), 1)).collect();
    let mut four = three.clone();
    four.push((seed("d4"), 1));
    let moved = keys()
        .filter(|&k| pick(k, &three) != pick(k, &four))
        .count();
    let share = moved as f64 / KEYS as f64;
    // Ideal 1/4; every moved key went to the new zone.
    assert!((share - 0.25).abs() < 0.01, "moved {share}");
    assert!(keys()
        .filter(|&k| pick(k, &three) != pick(k, &four))
        .all(|k| pick(k, &four) == seed("d4")));
}

#[test]
fn place_skips_unhealthy_zones_until_they_recover() {
    let tiers: Vec<Arc<TestTier>> = (0..3).map(|_| TestTier::new()).collect();
    let zones: Vec<(Arc<Zone>, u32)> = tiers
        .iter()
        .enumerate()
        .map(|(i, t)| (Arc::new(Zone::new(format!("z{i}"), t.clone())), 1))
        .collect();
    let key = |i: usize| format!("/k/{i}");
    let before: Vec<String> = (0..300)
        .map(|i| {
            place(&zones, &KeyRef::new("http", "h", &key(i)))
                .unwrap()
                .name
                .clone()
        })
        .collect();
    assert!(before.iter().any(|n| n == "z1"));
    tiers[1].healthy.store(false, Ordering::Relaxed);
    for (i, was) in before.iter().enumerate() {
        let now = &place(&zones, &KeyRef::new("http", "h", &key(i)))
            .unwrap()
            .name;
        assert_ne!(now, "z1", "an unhealthy zone takes no key");
        if was != "z1" {
            assert_eq!(now, was, "keys of healthy zones stay where they were");
        }
    }
    // None healthy: still placed (the pick among all).
    for t in &tiers {
        t.healthy.store(false, Ordering::Relaxed);
    }
    assert_eq!(
        &place(&zones, &KeyRef::new("http", "h", &key(0)))
            .unwrap()
            .name,
        &before[0]
    );
    tiers
        .iter()
        .for_each(|t| t.healthy.store(true, Ordering::Relaxed));
    let after: Vec<String> = (0..300)
        .map(|i| {
            place(&zones, &KeyRef::new("http", "h", &key(i)))
                .unwrap()
                .name
                .clone()
        })
        .collect();
    assert_eq!(after, before);
}

#[test]
fn one_zone_takes_every_key_and_none_takes_none() {
    let zone = Arc::new(Zone::new("only", TestTier::new()));
    let one = [(zone.clone(), 1)];
    assert!(Arc::ptr_eq(
        place(&one, &KeyRef::new("http", "h", "/")).unwrap(),
        &zone
    ));
    assert!(place(&[], &KeyRef::new("http", "h", "/")).is_none());
    assert_eq!(zone.seed, zone_seed("only"));
}
