//! The plan as a table: what was found -> what to do. No sockets.

use std::time::Duration;

use calmcache_core::{
    CacheStatus, Decision, Freshness, Fwd, LifetimeSource, ObjectMeta, RequestCacheControl,
};
use tokio::time::Instant;

use super::{plan, Asked, Plan, Stored, Why};

/// A copy stored `age` seconds ago, fresh for `lifetime` seconds.
fn meta(now: Instant, age: u64, lifetime: u64) -> ObjectMeta {
    ObjectMeta {
        stored_at: now - Duration::from_secs(age),
        freshness: Freshness {
            lifetime: Duration::from_secs(lifetime),
            initial_age: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            stale_forbidden: false,
            immutable: false,
            source: LifetimeSource::Origin,
        },
        fetch_time: Duration::from_millis(10),
    }
}

fn rcc(f: impl FnOnce(&mut RequestCacheControl)) -> RequestCacheControl {
    let mut rcc = RequestCacheControl::default();
    f(&mut rcc);
    rcc
}

fn hit() -> Plan<()> {
    Plan::Serve((), CacheStatus::Hit.report())
}

fn copy(meta: &ObjectMeta, decision: Decision) -> Stored<'_, ()> {
    Stored::Copy {
        copy: (),
        meta,
        decision,
    }
}

#[test]
fn a_miss_is_fetched_or_passed() {
    let now = Instant::now();
    let none = RequestCacheControl::default();
    let only = rcc(|r| r.only_if_cached = true);
    let cases = [
        (
            Asked::Get,
            &none,
            Fwd::UriMiss,
            Plan::Fetch(Why::Miss(Fwd::UriMiss), None),
        ),
        (
            Asked::Get,
            &none,
            Fwd::VaryMiss,
            Plan::Fetch(Why::Miss(Fwd::VaryMiss), None),
        ),
        (
            Asked::HeadConverted,
            &none,
            Fwd::UriMiss,
            Plan::Fetch(Why::Miss(Fwd::UriMiss), None),
        ),
        (
            Asked::HeadPassed,
            &none,
            Fwd::UriMiss,
            Plan::Pass(Fwd::UriMiss),
        ),
        (
            Asked::HeadPassed,
            &none,
            Fwd::VaryMiss,
            Plan::Pass(Fwd::VaryMiss),
        ),
        (
            Asked::Get,
            &only,
            Fwd::UriMiss,
            Plan::OnlyIfCached(Fwd::UriMiss),
        ),
        (
            Asked::HeadPassed,
            &only,
            Fwd::VaryMiss,
            Plan::OnlyIfCached(Fwd::VaryMiss),
        ),
    ];
    for (asked, rcc, fwd, want) in cases {
        let got: Plan<()> = plan(asked, rcc, Stored::Nothing(fwd), now);
        assert_eq!(got, want, "{asked:?} {rcc:?} {fwd:?}");
    }
}

#[test]
fn the_policy_decision_picks_the_plan_of_a_copy() {
    let now = Instant::now();
    let none = RequestCacheControl::default();
    let fresh = meta(now, 10, 60);
    let stale = meta(now, 70, 60);
    let cases = [
        (Asked::Get, &fresh, Decision::Fresh, hit()),
        (Asked::HeadPassed, &fresh, Decision::Fresh, hit()),
        (
            Asked::Get,
            &fresh,
            Decision::RefreshInBackground,
            Plan::RefreshBehind(()),
        ),
        (
            Asked::HeadPassed,
            &fresh,
            Decision::RefreshInBackground,
            Plan::RefreshBehind(()),
        ),
        (
            Asked::Get,
            &stale,
            Decision::StaleWhileRevalidate,
            Plan::ServeStale(()),
        ),
        (
            Asked::Get,
            &fresh,
            Decision::RefreshInPath,
            Plan::RefreshInPath(()),
        ),
        (
            Asked::HeadConverted,
            &fresh,
            Decision::RefreshInPath,
            Plan::RefreshInPath(()),
        ),
        // A HEAD passed through does not refresh: the copy is fresh.
        (Asked::HeadPassed, &fresh, Decision::RefreshInPath, hit()),
        (
            Asked::Get,
            &stale,
            Decision::Expired,
            Plan::Fetch(Why::Stale, Some(())),
        ),
        (
            Asked::HeadConverted,
            &stale,
            Decision::Expired,
            Plan::Fetch(Why::Stale, Some(())),
        ),
        (
            Asked::HeadPassed,
            &stale,
            Decision::Expired,
            Plan::Pass(Fwd::Stale),
        ),
    ];
    for (asked, meta, decision, want) in cases {
        let got = plan(asked, &none, copy(meta, decision), now);
        assert_eq!(got, want, "{asked:?} {decision:?}");
    }
}

#[test]
fn request_directives_come_before_the_policy() {
    let now = Instant::now();
    let fresh = meta(now, 10, 60);
    let stale = meta(now, 70, 60);
    let mut immutable = meta(now, 10, 60);
    immutable.freshness.immutable = true;
    let mut forbidden = meta(now, 70, 60);
    forbidden.freshness.stale_forbidden = true;
    let no_cache = rcc(|r| r.no_cache = true);
    let max_age = rcc(|r| r.max_age = Some(Duration::from_secs(5)));
    let min_fresh = rcc(|r| r.min_fresh = Some(Duration::from_secs(55)));
    let only = rcc(|r| r.only_if_cached = true);
    let only_no_cache = rcc(|r| {
        r.only_if_cached = true;
        r.no_cache = true;
    });
    let only_stale = rcc(|r| {
        r.only_if_cached = true;
        r.max_stale = Some(None);
    });
    let any_stale = rcc(|r| r.max_stale = Some(None));
    let little_stale = rcc(|r| r.max_stale = Some(Some(Duration::from_secs(5))));
    let max_stale = CacheStatus::Hit.report().detail("max-stale");
    let fresh_d = Decision::Fresh;
    let expired = Decision::Expired;
    let cases = [
        (
            Asked::Get,
            &no_cache,
            &fresh,
            fresh_d,
            Plan::Fetch(Why::Request, Some(())),
        ),
        (
            Asked::HeadPassed,
            &no_cache,
            &fresh,
            fresh_d,
            Plan::Pass(Fwd::Request),
        ),
        (
            Asked::Get,
            &max_age,
            &fresh,
            fresh_d,
            Plan::Fetch(Why::Request, Some(())),
        ),
        (
            Asked::Get,
            &min_fresh,
            &fresh,
            fresh_d,
            Plan::Fetch(Why::Request, Some(())),
        ),
        // RFC 8246: an immutable copy stays in use while fresh.
        (Asked::Get, &no_cache, &immutable, fresh_d, hit()),
        (Asked::Get, &only, &fresh, fresh_d, hit()),
        (
            Asked::Get,
            &only,
            &stale,
            expired,
            Plan::OnlyIfCached(Fwd::Stale),
        ),
        (
            Asked::Get,
            &only_no_cache,
            &fresh,
            fresh_d,
            Plan::OnlyIfCached(Fwd::Stale),
        ),
        (Asked::Get, &only_stale, &stale, expired, hit()),
        (
            Asked::Get,
            &any_stale,
            &stale,
            expired,
            Plan::Serve((), max_stale),
        ),
        (
            Asked::Get,
            &little_stale,
            &stale,
            expired,
            Plan::Fetch(Why::Stale, Some(())),
        ),
        (
            Asked::Get,
            &any_stale,
            &forbidden,
            expired,
            Plan::Fetch(Why::Stale, Some(())),
        ),
        (
            Asked::HeadPassed,
            &little_stale,
            &stale,
            expired,
            Plan::Pass(Fwd::Stale),
        ),
    ];
    for (asked, rcc, meta, decision, want) in cases {
        let got = plan(asked, rcc, copy(meta, decision), now);
        assert_eq!(got, want, "{asked:?} {rcc:?} {decision:?}");
    }
}
