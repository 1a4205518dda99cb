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

fn copy(meta: &ObjectMeta, decision: Decision) -> Stored<'_, ()> {
    Stored::Copy {
        copy: (),
        meta,
        decision,
    }
}

const GET: Asked = Asked::Get;
const HEAD_CONVERTED: Asked = Asked::HeadConverted;
const HEAD_PASSED: Asked = Asked::HeadPassed;

fn hit() -> Plan<()> {
    Plan::Serve((), CacheStatus::Hit.report())
}

fn fetch(why: Why) -> Plan<()> {
    let stale = match why {
        Why::Miss(_) => None,
        _ => Some(()),
    };
    Plan::Fetch(why, stale)
}

#[test]
fn a_miss_is_fetched_or_passed() {
    let now = Instant::now();
    let none = RequestCacheControl::default();
    let only = rcc(|r| r.only_if_cached = true);
    let (uri, vary) = (Fwd::UriMiss, Fwd::VaryMiss);
    #[rustfmt::skip]
    let cases = [
        (GET,            &none, uri,  fetch(Why::Miss(uri))),
        (GET,            &none, vary, fetch(Why::Miss(vary))),
        (HEAD_CONVERTED, &none, uri,  fetch(Why::Miss(uri))),
        (HEAD_PASSED,    &none, uri,  Plan::Pass(uri)),
        (HEAD_PASSED,    &none, vary, Plan::Pass(vary)),
        (GET,            &only, uri,  Plan::OnlyIfCached(uri)),
        (HEAD_PASSED,    &only, vary, Plan::OnlyIfCached(vary)),
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
    #[rustfmt::skip]
    let cases = [
        (GET,            &fresh, Decision::Fresh,                hit()),
        (HEAD_PASSED,    &fresh, Decision::Fresh,                hit()),
        (GET,            &fresh, Decision::RefreshInBackground,  Plan::RefreshBehind(())),
        (HEAD_PASSED,    &fresh, Decision::RefreshInBackground,  Plan::RefreshBehind(())),
        (GET,            &stale, Decision::StaleWhileRevalidate, Plan::ServeStale(())),
        (GET,            &fresh, Decision::RefreshInPath,        Plan::RefreshInPath(())),
        (HEAD_CONVERTED, &fresh, Decision::RefreshInPath,        Plan::RefreshInPath(())),
        // A HEAD passed through does not refresh: the copy is fresh.
        (HEAD_PASSED,    &fresh, Decision::RefreshInPath,        hit()),
        (GET,            &stale, Decision::Expired,              fetch(Why::Stale)),
        (HEAD_CONVERTED, &stale, Decision::Expired,              fetch(Why::Stale)),
        (HEAD_PASSED,    &stale, Decision::Expired,              Plan::Pass(Fwd::Stale)),
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
    let max_stale = Plan::Serve((), CacheStatus::Hit.report().detail("max-stale"));
    let (fresh_d, expired) = (Decision::Fresh, Decision::Expired);
    #[rustfmt::skip]
    let cases = [
        (GET,         &no_cache,      &fresh,     fresh_d, fetch(Why::Request)),
        (HEAD_PASSED, &no_cache,      &fresh,     fresh_d, Plan::Pass(Fwd::Request)),
        (GET,         &max_age,       &fresh,     fresh_d, fetch(Why::Request)),
        (GET,         &min_fresh,     &fresh,     fresh_d, fetch(Why::Request)),
        // RFC 8246: an immutable copy stays in use while fresh.
        (GET,         &no_cache,      &immutable, fresh_d, hit()),
        (GET,         &only,          &fresh,     fresh_d, hit()),
        (GET,         &only,          &stale,     expired, Plan::OnlyIfCached(Fwd::Stale)),
        (GET,         &only_no_cache, &fresh,     fresh_d, Plan::OnlyIfCached(Fwd::Stale)),
        (GET,         &only_stale,    &stale,     expired, hit()),
        (GET,         &any_stale,     &stale,     expired, max_stale),
        (GET,         &little_stale,  &stale,     expired, fetch(Why::Stale)),
        // RFC 9111 §4.2.4: a copy that forbids stale use is not served stale.
        (GET,         &any_stale,     &forbidden, expired, fetch(Why::Stale)),
        (HEAD_PASSED, &little_stale,  &stale,     expired, Plan::Pass(Fwd::Stale)),
    ];
    for (asked, rcc, meta, decision, want) in cases {
        let got = plan(asked, rcc, copy(meta, decision), now);
        assert_eq!(got, want, "{asked:?} {rcc:?} {decision:?}");
    }
}
