//! The request a fill sends upstream, sent and, when a 304 does not match
//! the stored copy, sent again without validators; and whether the origin's
//! answer can be used at all (a 5xx with a stale-if-error copy, a transport
//! error, or a 304 to an unconditional request fail the fill).
//!
//! Owns: the upstream request and the times it was sent and answered.
//! Does not decide where the answer goes (mod.rs) or store it (store.rs).

use std::sync::Arc;
use std::time::SystemTime;

use crate::net::origin_body::OriginBody;
use bytes::Bytes;
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::warn_limited;
use calmcache_core::{
    freshness, CacheKey, CachedObject, Exchange, FetchPermit, LifetimeSource, NotStorable, Storable,
};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Full};
use tokio::time::Instant;

use super::{alive_for, FetchRequest, BOUND_SLACK};
use crate::http::body::TimeoutBody;
use crate::http::conditional;
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::strip_hop_by_hop;
use crate::net::budget::Admission;
use crate::proxy::outcome::FillOutcome;
use crate::proxy::state::Route;

/// The GET a fill sends for `fetch` (or its body-keyed QUERY or POST, with
/// its body), conditional on `revalidating`'s validators when given.
pub(crate) fn upstream_request(
    fetch: &FetchRequest,
    revalidating: Option<&CachedObject>,
) -> Request<crate::http::body::StreamBody> {
    let (method, body) = match &fetch.body {
        None => (Method::GET, Empty::<Bytes>::new().boxed()),
        Some(sent) => (sent.method.clone(), Full::new(sent.bytes.clone()).boxed()),
    };
    let mut req = Request::new(body.map_err(|never| match never {}).boxed());
    *req.method_mut() = method;
    *req.uri_mut() = Uri::from(fetch.path_and_query.clone());
    *req.headers_mut() = fetch.headers.clone();
    if let Some(sent) = &fetch.body {
        let headers = req.headers_mut();
        // Whatever its framing was: the origin gets the body with its length.
        headers.remove(http::header::TRANSFER_ENCODING);
        headers.insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from(sent.bytes.len()),
        );
    }
    if let Some(stale) = revalidating {
        conditional::add_validators(req.headers_mut(), &stale.headers());
    }
    req
}

/// When the request that got the answer was sent, and when the answer
/// came (RFC 9111 §4.2.3).
pub(super) struct Times {
    pub(super) request: SystemTime,
    pub(super) response: SystemTime,
}

impl Times {
    /// RFC 9111 §3: whether a response with `status` and `headers`, got at
    /// these times for `fetch`, may be stored by `route`'s rules.
    pub(super) fn evaluate(
        &self,
        fetch: &FetchRequest,
        status: u16,
        headers: &HeaderMap,
        route: &Route,
    ) -> Result<Storable, NotStorable> {
        let exchange = Exchange {
            request_has_authorization: fetch.has_authorization,
            status,
            headers,
            request_time: self.request,
            response_time: self.response,
        };
        let storable = freshness::evaluate(&exchange, &route.store_rules(status))?;
        let post = fetch
            .body
            .as_ref()
            .is_some_and(|b| b.method == Method::POST);
        if post && storable.freshness.source == LifetimeSource::Heuristic {
            // RFC 9110 §9.3.3: a POST answer is stored only when fresh by
            // explicit word: the origin's (max-age, s-maxage, Expires) or
            // the route's `ttl`, never a heuristic.
            return Err(NotStorable::NoFreshness);
        }
        Ok(storable)
    }
}

/// An answer the fill can use, its hop-by-hop fields removed.
pub(super) struct Sent {
    pub(super) parts: http::response::Parts,
    /// Each frame within the upstream's `read_timeout`.
    pub(super) body: TimeoutBody<OriginBody>,
    /// The stored copy whose validators the answered request carried.
    pub(super) revalidating: Option<Arc<CachedObject>>,
    /// The stored copy, while inside stale-if-error.
    pub(super) usable_stale: Option<Arc<CachedObject>>,
    pub(super) times: Times,
}

/// Why a fill fails before it has a usable answer.
pub(super) struct Failure {
    pub(super) error: ProxyError,
    /// The stored copy to serve instead (inside stale-if-error).
    pub(super) stale: Option<Arc<CachedObject>>,
    /// What the origin answered, when it did.
    pub(super) status: Option<u16>,
}

/// What a fill sends with: the copy it replaces, when it began, and how
/// it may wait for an origin slot.
pub(super) struct Sending {
    pub(super) stale: Option<Arc<CachedObject>>,
    pub(super) request_time: SystemTime,
    pub(super) admission: Admission,
    pub(super) stand_in: super::StandIn,
}

/// Sends the fill's request (conditional on `stale` when a 304 can be
/// used), once more without validators when a 304 does not match, and
/// judges the answer. `request_time` is when the fill began. The origin
/// budget's refusal fails the fill with the copy that may stand in.
pub(super) async fn send(
    route: &Route,
    primary: &CacheKey,
    fetch: &FetchRequest,
    permit: &Option<FetchPermit<FillOutcome>>,
    sending: Sending,
) -> Result<Sent, Failure> {
    let Sending {
        stale,
        mut request_time,
        admission,
        stand_in,
    } = sending;
    let upstream = &route.upstream;
    let mut revalidating = stale
        .as_ref()
        .filter(|s| may_revalidate(route, primary, fetch, s))
        .cloned();
    // Followers wait as long as the head may take (read_timeout counts
    // from sending, connecting included), not just their lock_timeout.
    // With an origin budget, the wait for a slot comes first.
    let head_bound = upstream.queue_wait() + upstream.read_timeout + BOUND_SLACK;
    alive_for(permit, head_bound);
    let mut result = upstream
        .send(upstream_request(fetch, revalidating.as_deref()), admission)
        .await;
    route.activity.upstream_call(&result);
    if mismatched(&result, revalidating.as_deref()) {
        revalidating = None;
        request_time = SystemTime::now();
        alive_for(permit, head_bound);
        // The 304's slot goes back before the next request asks for one:
        // held, a budget of N would stall N such fills on themselves.
        drop(result);
        result = upstream
            .send(upstream_request(fetch, None), admission)
            .await;
        route.activity.upstream_call(&result);
    }
    if let Some(busy) = refused_busy(route, &result, stale.as_ref(), stand_in) {
        return Err(busy);
    }
    let usable_stale = stale.filter(|s| s.meta.within_stale_if_error(Instant::now()));
    let resp = match judge(
        route,
        primary,
        result,
        revalidating.as_deref(),
        usable_stale.as_ref(),
    ) {
        Ok(resp) => resp,
        Err((error, status)) => {
            return Err(Failure {
                error,
                stale: usable_stale,
                status,
            })
        }
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // The body comes next: each frame within read_timeout.
    alive_for(permit, upstream.read_timeout + BOUND_SLACK);
    let times = Times {
        request: request_time,
        response: SystemTime::now(),
    };
    Ok(Sent {
        parts,
        body: TimeoutBody::new(body, upstream.read_timeout),
        revalidating,
        usable_stale,
        times,
    })
}

/// Validators only when a 304 can be used: with storing allowed (a 304
/// must never reach a client that sent no conditional).
fn may_revalidate(
    route: &Route,
    primary: &CacheKey,
    fetch: &FetchRequest,
    stale: &CachedObject,
) -> bool {
    // An authorised request's answer could not refresh a shared copy
    // (RFC 9111 §3.5): it fetches whole and leaves the copy alone.
    fetch.store
        && !fetch.has_authorization
        // A POST is never made conditional: its preconditions are the
        // origin's to define (RFC 9110 §13.2.1); it is fetched whole.
        && fetch.body.as_ref().is_none_or(|b| b.method != Method::POST)
        && route.zone_for(&primary.as_ref()).is_some()
        && conditional::has_validator(&stale.headers())
}

/// RFC 9111 §4.3.3: a 304 that does not match the stored copy (another
/// ETag) cannot update it; the fill asks again without conditionals.
/// The origin budget refused the request: the fill fails with the copy
/// that may stand in ([`super::busy_copy`]), not as an origin failure.
fn refused_busy(
    route: &Route,
    result: &Result<Response<OriginBody>, ProxyError>,
    stale: Option<&Arc<CachedObject>>,
    stand_in: super::StandIn,
) -> Option<Failure> {
    let e = result.as_ref().err()?;
    matches!(e.kind, ErrorKind::OriginBusy { .. }).then(|| Failure {
        error: e.clone(),
        stale: super::busy_copy(route, stale, stand_in),
        status: None,
    })
}

fn mismatched(
    result: &Result<Response<OriginBody>, ProxyError>,
    revalidating: Option<&CachedObject>,
) -> bool {
    matches!((result, revalidating), (Ok(resp), Some(old))
        if resp.status() == StatusCode::NOT_MODIFIED
            && !conditional::applies_to(resp.headers(), &old.headers()))
}

/// The origin's answer, or the error the fill fails with (and the status
/// the origin answered, if it did): a transport error, a 304 to a request
/// without validators, or a 5xx while a stale-if-error copy can stand in.
fn judge(
    route: &Route,
    primary: &CacheKey,
    result: Result<Response<OriginBody>, ProxyError>,
    revalidating: Option<&CachedObject>,
    usable_stale: Option<&Arc<CachedObject>>,
) -> Result<Response<OriginBody>, (ProxyError, Option<u16>)> {
    let upstream = &route.upstream;
    let resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            // Counted with the call (upstream_call).
            if !e.repeats() {
                // Per request: a dead origin must not flood the log.
                static FETCH_FAILED: WarnLimit = WarnLimit::new();
                warn_limited!(FETCH_FAILED, "origin fetch failed",
                    upstream = %upstream.name, key = %primary, error = %e);
            }
            return Err((e, None));
        }
    };
    let status = resp.status();
    // A 304 to a request without our validators (fills strip the client's)
    // is an origin fault, never something to hand a client that may have
    // sent no conditional.
    if revalidating.is_none() && status == StatusCode::NOT_MODIFIED {
        route.activity.upstream_errors.inc();
        let e = ProxyError::upstream(
            ErrorKind::Broken,
            &upstream.name,
            "origin answered 304 to an unconditional request",
        );
        return Err((e, Some(304)));
    }
    if status.is_server_error() {
        route.activity.upstream_errors.inc();
        if usable_stale.is_some() {
            let status = status.as_u16();
            let e = ProxyError::upstream(
                ErrorKind::Broken,
                &upstream.name,
                format!("origin answered {status}"),
            );
            return Err((e, Some(status)));
        }
    }
    Ok(resp)
}
