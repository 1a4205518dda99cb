//! What to do with a request, decided before anything is done.
//!
//! [`plan`] is a pure function from what the edge, the route and the lookup
//! found (the method and the route's `convert_head`, the request's
//! `Cache-Control`, the stored copy and the refresh policy's [`Decision`]
//! for it) to one [`Plan`]; `handle.rs` executes it with one `match`. This
//! is the house's decide-then-do (like `calmcache-core` `policy.rs`):
//! table-tested in `plan_tests.rs` without sockets.
//!
//! Must not do anything: no sockets, no awaits, no `Proxy` or `Route`, no
//! counters. Whether a flight permit or a refresh slot can be had is the
//! executor's to find out.

use calmcache_core::{CacheStatus, Decision, Fwd, ObjectMeta, Report, RequestCacheControl};
use tokio::time::Instant;

use crate::proxy::fill::NotStored;

/// What the request asked for, as far as the plan goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// A GET.
    Get,
    /// A HEAD on a route with `convert_head`: fetched as a GET, cached.
    HeadConverted,
    /// A HEAD on a route without `convert_head`: anything that would go to
    /// the origin is passed as the HEAD it is, uncached.
    HeadPassed,
}

/// What the lookup found. `C` is the stored copy as the executor holds it
/// (the plan hands it back in the arms that use it; tests use `()`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stored<'a, C> {
    /// Nothing usable: `uri-miss` or `vary-miss`.
    Nothing(Fwd),
    /// A stored copy, and what the refresh policy decided for it now.
    Copy {
        /// The copy.
        copy: C,
        /// Its freshness.
        meta: &'a ObjectMeta,
        /// The refresh policy's decision for it (`calmcache_core::decide`).
        decision: Decision,
    },
}

/// What to do with a request (`C`: the stored copy, see [`Stored`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan<C> {
    /// Answer from the stored copy, reported as this.
    Serve(C, Report),
    /// Answer from the fresh copy and start a background refresh (SUS):
    /// `HIT (refresh-early)` when this request started it, else a hit.
    RefreshBehind(C),
    /// Answer from the stale copy (stale-while-revalidate) and start a
    /// background refresh.
    ServeStale(C),
    /// PER drew an early refresh: fetch in this request's path, unless one
    /// is already running (then the fresh copy is served).
    RefreshInPath(C),
    /// Fetch from the origin for this reason, coalescing with others
    /// (`fetch.rs`); with the copy it replaces (revalidated, and backing
    /// stale-if-error), if any.
    Fetch(Why, Option<C>),
    /// Pass to the origin uncached, reported with this reason.
    Pass(Fwd),
    /// A 504: `only-if-cached` and nothing usable stored (RFC 9111 §5.2.1.7).
    OnlyIfCached(Fwd),
}

/// Decides what to do with a request `asked` with directives `rcc`, given
/// what the lookup found, at `now`.
pub(crate) fn plan<C: Copy>(
    asked: Asked,
    rcc: &RequestCacheControl,
    stored: Stored<'_, C>,
    now: Instant,
) -> Plan<C> {
    let (copy, meta, decision) = match stored {
        Stored::Nothing(fwd) if rcc.only_if_cached => return Plan::OnlyIfCached(fwd),
        Stored::Nothing(fwd) => return fetch(asked, Why::Miss(fwd), None),
        Stored::Copy {
            copy,
            meta,
            decision,
        } => (copy, meta, decision),
    };
    if rcc.only_if_cached {
        return only_if_cached(rcc, copy, meta, now);
    }
    if forces_fetch(rcc, meta, now) {
        return fetch(asked, Why::Request, Some(copy));
    }
    let hit = CacheStatus::Hit.report();
    match decision {
        Decision::Fresh => Plan::Serve(copy, hit),
        Decision::RefreshInBackground => Plan::RefreshBehind(copy),
        Decision::StaleWhileRevalidate => Plan::ServeStale(copy),
        // A HEAD the route passes through does not refresh (the copy is fresh).
        Decision::RefreshInPath if asked == Asked::HeadPassed => Plan::Serve(copy, hit),
        Decision::RefreshInPath => Plan::RefreshInPath(copy),
        Decision::Expired => expired(asked, rcc, copy, meta, now),
    }
}

/// To the origin for `why`: fetched, or for a HEAD the route does not
/// convert, passed (the one place that rule is written).
fn fetch<C>(asked: Asked, why: Why, stale: Option<C>) -> Plan<C> {
    match asked {
        Asked::HeadPassed => Plan::Pass(why.fwd()),
        Asked::Get | Asked::HeadConverted => Plan::Fetch(why, stale),
    }
}

/// RFC 9111 §5.2.1.7 `only-if-cached`: a stored response is used when it is
/// fresh enough for the other directives (or stale within `max-stale`), else 504.
fn only_if_cached<C>(
    rcc: &RequestCacheControl,
    copy: C,
    meta: &ObjectMeta,
    now: Instant,
) -> Plan<C> {
    let fresh = meta.is_fresh(now) && !forces_fetch(rcc, meta, now);
    let stale_ok = rcc
        .max_stale
        .is_some_and(|limit| allows_stale(limit, meta, now));
    if fresh || stale_ok {
        Plan::Serve(copy, CacheStatus::Hit.report())
    } else {
        Plan::OnlyIfCached(Fwd::Stale)
    }
}

/// A copy past what the policy serves: the client's `max-stale` may still
/// take it, else it is fetched again.
fn expired<C>(
    asked: Asked,
    rcc: &RequestCacheControl,
    copy: C,
    meta: &ObjectMeta,
    now: Instant,
) -> Plan<C> {
    if rcc
        .max_stale
        .is_some_and(|limit| allows_stale(limit, meta, now))
    {
        return Plan::Serve(copy, CacheStatus::Hit.report().detail("max-stale"));
    }
    fetch(asked, Why::Stale, Some(copy))
}

/// Why a request goes to the origin; decides its `Cache-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// Nothing stored (`uri-miss`) or no matching variant (`vary-miss`).
    Miss(Fwd),
    /// The stored copy is stale.
    Stale,
    /// The client's request directives asked for it.
    Request,
    /// A `bypass` condition matched.
    Bypass,
    /// PER: a fresh copy drew an early refresh in this request's path.
    Early,
}

impl Why {
    pub(crate) fn fwd(self) -> Fwd {
        match self {
            Why::Miss(fwd) => fwd,
            Why::Stale | Why::Early => Fwd::Stale,
            Why::Request => Fwd::Request,
            Why::Bypass => Fwd::Bypass,
        }
    }

    /// The report of a response this fetch stored; `origin` is the origin's status.
    pub(crate) fn stored(self, origin: u16) -> Report {
        let report = match (self, origin) {
            (Why::Bypass, _) => Report {
                stored: true,
                ..CacheStatus::Bypass.report()
            },
            (Why::Early, _) => CacheStatus::RefreshedEarly.report(),
            (_, 304) => CacheStatus::Revalidated.report(),
            (Why::Miss(_), _) => CacheStatus::MissStored.report(),
            (Why::Stale, _) => CacheStatus::ExpiredStored.report(),
            (Why::Request, _) => CacheStatus::RequestForced.report(),
        };
        report.fwd(self.fwd()).fwd_status(origin)
    }

    /// The report of a request that waited for another's fetch.
    pub(crate) fn collapsed(self, origin: u16) -> Report {
        let report = match self {
            Why::Miss(_) => CacheStatus::MissCollapsed.report(),
            Why::Stale | Why::Early => CacheStatus::ExpiredCollapsed.report(),
            Why::Request | Why::Bypass => Report {
                collapsed: true,
                ..CacheStatus::RequestForced.report()
            },
        };
        report.fwd(self.fwd()).fwd_status(origin)
    }

    /// The report of a request whose fetch failed without an origin answer.
    pub(crate) fn failed(self) -> Report {
        let report = match self {
            Why::Bypass => CacheStatus::Bypass.report(),
            _ => CacheStatus::MissNotStored.report(),
        };
        report.fwd(self.fwd())
    }

    /// The report of a response relayed without storing.
    pub(crate) fn not_stored(self, origin: u16, why: NotStored) -> Report {
        let report = match self {
            Why::Bypass => CacheStatus::Bypass.report(),
            _ => CacheStatus::MissNotStored.report(),
        };
        report
            .fwd(self.fwd())
            .fwd_status(origin)
            .detail(why.as_str())
    }
}

/// RFC 9111 §5.2.1: the request's `no-cache`, `max-age` and `min-fresh`
/// rule out the stored copy. `immutable` (RFC 8246) copies stay in use while
/// fresh: a reload has nothing to learn from the origin.
fn forces_fetch(rcc: &RequestCacheControl, meta: &ObjectMeta, now: Instant) -> bool {
    if meta.freshness.immutable && meta.is_fresh(now) {
        return false;
    }
    rcc.no_cache
        || rcc.max_age.is_some_and(|max| meta.age(now) > max)
        || rcc
            .min_fresh
            .is_some_and(|min| meta.ttl_left(now) < min.as_secs_f64())
}

/// RFC 9111 §5.2.1.2 `max-stale[=N]`: stale by at most N (any, without N),
/// unless the response forbids stale use (§4.2.4).
fn allows_stale(limit: Option<std::time::Duration>, meta: &ObjectMeta, now: Instant) -> bool {
    if meta.freshness.stale_forbidden {
        return false;
    }
    limit.is_none_or(|limit| -meta.ttl_left(now) <= limit.as_secs_f64())
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
