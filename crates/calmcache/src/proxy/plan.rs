//! What a request's answer will be, decided before anything is done: why
//! a request goes to the origin, and what the client's request directives
//! (RFC 9111 §5.2.1) allow of a stored copy.
//!
//! Pure: no sockets, no awaits, no shared state. Must not import the fill,
//! the respond functions or anything that sends.

use std::sync::Arc;

use calmcache_core::{CacheStatus, CachedObject, Fwd, Report, RequestCacheControl};
use http::Response;
use tokio::time::Instant;

use crate::http::body::ResponseBody;
use crate::proxy::fill::NotStored;
use crate::proxy::respond::{only_if_cached, serve, Ask};
use crate::proxy::state::Route;

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

/// RFC 9111 §5.2.1.7 `only-if-cached`: a stored response is used when it is
/// fresh enough for the other directives (or stale within `max-stale`), else 504.
pub(crate) fn request_directives(
    route: &Route,
    rcc: &RequestCacheControl,
    object: &Arc<CachedObject>,
    ask: &Ask<'_>,
    now: Instant,
) -> Option<Response<ResponseBody>> {
    if !rcc.only_if_cached {
        return None;
    }
    let fresh = object.meta.is_fresh(now) && !forces_fetch(rcc, object, now);
    let stale_ok = rcc
        .max_stale
        .is_some_and(|limit| allows_stale(limit, object, now));
    Some(if fresh || stale_ok {
        serve(route, object, CacheStatus::Hit.report(), ask, now)
    } else {
        only_if_cached(route, Fwd::Stale)
    })
}

/// RFC 9111 §5.2.1: the request's `no-cache`, `max-age` and `min-fresh`
/// rule out the stored copy. `immutable` (RFC 8246) copies stay in use while
/// fresh: a reload has nothing to learn from the origin.
pub(crate) fn forces_fetch(rcc: &RequestCacheControl, object: &CachedObject, now: Instant) -> bool {
    let meta = &object.meta;
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
pub(crate) fn allows_stale(
    limit: Option<std::time::Duration>,
    object: &CachedObject,
    now: Instant,
) -> bool {
    if object.meta.freshness.stale_forbidden {
        return false;
    }
    limit.is_none_or(|limit| -object.meta.ttl_left(now) <= limit.as_secs_f64())
}
