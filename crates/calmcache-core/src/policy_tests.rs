#![allow(clippy::unwrap_used)]
use super::*;
use crate::freshness::Freshness;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn meta(now: Instant, lifetime_ms: u64, fetch_ms: u64, swr_ms: u64) -> ObjectMeta {
    ObjectMeta {
        stored_at: now,
        freshness: Freshness {
            lifetime: Duration::from_millis(lifetime_ms),
            initial_age: Duration::ZERO,
            stale_while_revalidate: Duration::from_millis(swr_ms),
            stale_if_error: Duration::ZERO,
            stale_forbidden: false,
            immutable: false,
            source: crate::freshness::LifetimeSource::Route,
        },
        fetch_time: Duration::from_millis(fetch_ms),
    }
}

fn policy(mode: RefreshMode) -> RefreshPolicy {
    RefreshPolicy {
        mode,
        beta: 1.0,
        sus_stale: Duration::ZERO,
    }
}

/// Share of 10,000 seeded draws at `at_ms` after storing that refresh early.
fn early_share(mode: RefreshMode, m: &ObjectMeta, at_ms: u64) -> f64 {
    let mut rng = StdRng::seed_from_u64(42);
    let at = m.stored_at + Duration::from_millis(at_ms);
    let early = (0..10_000)
        .filter(|_| {
            matches!(
                decide(&policy(mode), m, at, &mut rng),
                Decision::RefreshInPath | Decision::RefreshInBackground
            )
        })
        .count();
    early as f64 / 10_000.0
}

#[tokio::test(start_paused = true)]
async fn none_and_lock_never_refresh_early() {
    let m = meta(Instant::now(), 1000, 900, 0);
    assert_eq!(early_share(RefreshMode::None, &m, 999), 0.0);
    assert_eq!(early_share(RefreshMode::Lock, &m, 999), 0.0);
}

#[tokio::test(start_paused = true)]
async fn per_probability_follows_exp_of_minus_left_over_delta() {
    // P(refresh) = P(-ln u >= left/delta) = exp(-left/delta).
    let m = meta(Instant::now(), 30_000, 100, 0);
    let share = early_share(RefreshMode::Per, &m, 29_900); // left = delta
    assert!((share - (-1.0f64).exp()).abs() < 0.02, "share {share}");
    // Outside the last delta the draw is not made at all: a hot key is
    // refreshed one delta before expiry, not ln(rate * delta) deltas before.
    assert_eq!(early_share(RefreshMode::Per, &m, 29_850), 0.0);
    assert!(early_share(RefreshMode::Per, &m, 29_990) > 0.85);
}

#[tokio::test(start_paused = true)]
async fn sus_widens_delta_to_ten_percent_of_the_ttl() {
    // Seed 002: 30 s TTL, 100 ms fetch -> delta = 3 s, so 1 s before expiry
    // the chance is exp(-1/3), where PER's window has not even opened.
    let m = meta(Instant::now(), 30_000, 100, 0);
    let share = early_share(RefreshMode::Sus, &m, 29_000);
    assert!(
        (share - (-1.0f64 / 3.0).exp()).abs() < 0.02,
        "share {share}"
    );
    assert_eq!(early_share(RefreshMode::Per, &m, 29_000), 0.0);
    let mut rng = StdRng::seed_from_u64(1);
    let near = m.stored_at + Duration::from_millis(29_999);
    let decisions: Vec<_> = (0..100)
        .map(|_| decide(&policy(RefreshMode::Sus), &m, near, &mut rng))
        .collect();
    assert!(decisions.contains(&Decision::RefreshInBackground));
    assert!(
        !decisions.contains(&Decision::RefreshInPath),
        "SUS never refreshes in the request's path"
    );
}

#[tokio::test(start_paused = true)]
async fn expiry_is_precise_and_stale_windows_apply() {
    let start = Instant::now();
    let m = meta(start, 1000, 10, 500);
    let mut rng = StdRng::seed_from_u64(7);
    let lock = policy(RefreshMode::Lock);
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(decide(&lock, &m, Instant::now(), &mut rng), Decision::Fresh);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        decide(&lock, &m, Instant::now(), &mut rng),
        Decision::StaleWhileRevalidate
    );
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(
        decide(&lock, &m, Instant::now(), &mut rng),
        Decision::Expired
    );
}

#[test]
fn zero_delta_never_refreshes() {
    let mut rng = StdRng::seed_from_u64(3);
    assert!(!draws_early_refresh(
        Duration::ZERO,
        1.0,
        Duration::ZERO,
        &mut rng
    ));
}

#[tokio::test(start_paused = true)]
async fn sus_serves_stale_for_at_least_one_delta_by_default() {
    let start = Instant::now();
    // 1 s TTL, 100 ms fetch: delta = 100 ms.
    let m = meta(start, 1000, 100, 0);
    let mut rng = StdRng::seed_from_u64(9);
    let sus = |floor_ms| RefreshPolicy {
        mode: RefreshMode::Sus,
        beta: 1.0,
        sus_stale: Duration::from_millis(floor_ms),
    };
    let at = |ms| start + Duration::from_millis(ms);
    // A floor under one delta is raised to it.
    assert_eq!(
        decide(&sus(10), &m, at(1050), &mut rng),
        Decision::StaleWhileRevalidate
    );
    assert_eq!(decide(&sus(10), &m, at(1100), &mut rng), Decision::Expired);
    // A longer floor keeps it out longer.
    assert_eq!(
        decide(&sus(2000), &m, at(2999), &mut rng),
        Decision::StaleWhileRevalidate
    );
    assert_eq!(
        decide(&sus(2000), &m, at(3000), &mut rng),
        Decision::Expired
    );
    // Zero turns it off; other modes never have it.
    assert_eq!(decide(&sus(0), &m, at(1001), &mut rng), Decision::Expired);
    let lock = RefreshPolicy {
        mode: RefreshMode::Lock,
        ..sus(2000)
    };
    assert_eq!(decide(&lock, &m, at(1001), &mut rng), Decision::Expired);
    // An origin that forbids stale use (must-revalidate, s-maxage,
    // no-cache) is obeyed.
    let mut strict = m.clone();
    strict.freshness.stale_forbidden = true;
    assert_eq!(
        decide(&sus(2000), &strict, at(1001), &mut rng),
        Decision::Expired
    );
}

/// Regression (issue 25, cache-tests `freshness-max-age-stale`): the SUS stale
/// window and the landing window while a refresh is in flight apply only
/// where stale use was granted (the route's ttl, or the origin's or the
/// route's stale-while-revalidate; stale-if-error grants it for failures
/// only, RFC 5861 §4), RFC 9111 §4.2.4.
#[tokio::test(start_paused = true)]
async fn sus_stale_window_only_where_stale_use_was_granted() {
    use crate::freshness::LifetimeSource::{Heuristic, Origin, Route};
    let start = Instant::now();
    let sus = RefreshPolicy {
        mode: RefreshMode::Sus,
        beta: 1.0,
        sus_stale: Duration::from_secs(2),
    };
    let lock = RefreshPolicy {
        mode: RefreshMode::Lock,
        ..sus
    };
    let off = RefreshPolicy {
        sus_stale: Duration::ZERO,
        ..sus
    };
    // (case, policy, source, swr ms, sie ms, stale window, landing window)
    let two = Some(Duration::from_secs(2));
    let delta = Some(Duration::from_millis(100));
    let cases = [
        ("sus, route ttl", sus, Route, 0, 0, two, two),
        ("sus, origin max-age", sus, Origin, 0, 0, None, None),
        ("sus, heuristic", sus, Heuristic, 0, 0, None, None),
        ("sus, origin swr", sus, Origin, 500, 0, two, two),
        ("sus, origin sie", sus, Origin, 0, 500, None, None),
        ("sus off, route ttl", off, Route, 0, 0, None, delta),
        ("sus off, origin max-age", off, Origin, 0, 0, None, None),
        ("lock, route ttl", lock, Route, 0, 0, None, None),
    ];
    let mut rng = StdRng::seed_from_u64(11);
    for (name, policy, source, swr, sie, window, landing) in cases {
        let mut m = meta(start, 1000, 100, swr);
        m.freshness.stale_if_error = Duration::from_millis(sie);
        m.freshness.source = source;
        assert_eq!(policy.sus_stale_window(&m), window, "{name}");
        assert_eq!(policy.landing_window(&m), landing, "{name}");
        // 1.6 s after storing: past the origin's windows, inside SUS's.
        let at = start + Duration::from_millis(1600);
        let expect = if window.is_some() {
            Decision::StaleWhileRevalidate
        } else {
            Decision::Expired
        };
        assert_eq!(decide(&policy, &m, at, &mut rng), expect, "{name}");
    }
}
