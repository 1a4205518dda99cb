//! The request path: route, look up, decide, answer from the cache or fetch.
//!
//! ```text
//! handle ─ route_for ─┬─ no zone / not GET|HEAD ─────────────── pass (stream both ways)
//!                     └─ tier.get(KeyRef) ─┬─ hit ─ decide ─┬─ Fresh ─────────────── serve
//!                                          │                ├─ RefreshInBackground ─ serve + refresh task
//!                                          │                ├─ StaleWhileRevalidate ─ serve + refresh task
//!                                          │                ├─ RefreshInPath ─────── fill in own path (PER)
//!                                          │                └─ Expired ───────────┐
//!                                          └─ miss ───────────────────────────────┴─ fetch: join flight,
//!                                               leader spawns fill; followers wait (lock_timeout)
//! ```
//! Invariant: a hit takes no lock but one quick_cache shard read lock, does no
//! I/O, and shares the body `Bytes` instead of copying it. Only a hit that
//! draws a refresh (the last delta of life, or stale-while-revalidate) goes on
//! to try a refresh slot and the single-flight table.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use calmcache_core::{
    decide, CacheKey, CacheStatus, CachedObject, Decision, KeyRef, Lookup, RefreshMode,
};
use http::header::{self, HeaderValue};
use http::uri::PathAndQuery;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::body::{ResponseBody, TimeoutBody};
use crate::error::{ErrorKind, ProxyError};
use crate::fill::{fill, FetchRequest, FillReply};
use crate::headers::{add_forwarded, set_age, set_cache_status, strip_hop_by_hop};
use crate::state::{FillOutcome, Proxy, Route, Worker};

/// The scheme in cache keys and `X-Forwarded-Proto` (TLS comes with issue 6).
pub(crate) const SCHEME: &str = "http";

/// Answers one client request. Never fails: errors become 4xx/5xx responses.
pub async fn handle(
    worker: Arc<Worker>,
    req: Request<Incoming>,
    client: SocketAddr,
) -> Result<Response<ResponseBody>, Infallible> {
    // Borrowed, not cloned: no reference count shared by all threads is
    // touched on a hit (the `worker` Arc is this thread's own).
    let proxy = &worker.proxy;
    let pq = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let Some(route) = worker.route_for(pq) else {
        let e = ProxyError::downstream(ErrorKind::NoRoute, pq);
        return Ok(error_response(&e, CacheStatus::Bypass));
    };
    let cacheable = matches!(*req.method(), Method::GET | Method::HEAD);
    let zone = match (&route.zone, cacheable) {
        (Some(zone), true) => zone,
        _ => return Ok(pass(route, req, client).await),
    };
    let head_only = req.method() == Method::HEAD;
    let host = host_of(&req);
    let key_ref = KeyRef::new(SCHEME, host, pq);
    let Some(object) = zone.tier.get(&key_ref) else {
        let key = key_ref.to_owned_key();
        return Ok(fetch(
            proxy,
            route,
            key,
            fetch_request(&req, client),
            None,
            head_only,
        )
        .await);
    };
    let now = Instant::now();
    let answer = |status| serve(route, &object, status, head_only, now);
    // A separate statement: the thread-local RNG must not live across an await.
    let decision = decide(&route.policy, &object.meta, now, &mut rand::rng());
    match decision {
        Decision::Fresh => Ok(answer(CacheStatus::Hit)),
        Decision::RefreshInBackground => {
            // Inside the window most requests draw; only the one that starts
            // the refresh pays for building its request.
            let request = || fetch_request(&req, client);
            if refresh_in_background(proxy, route, key_ref, request, &object) {
                route.activity.early_refreshes.inc();
                return Ok(answer(CacheStatus::HitRefreshEarly));
            }
            Ok(answer(CacheStatus::Hit))
        }
        Decision::StaleWhileRevalidate => {
            let request = || fetch_request(&req, client);
            refresh_in_background(proxy, route, key_ref, request, &object);
            Ok(answer(CacheStatus::StaleWhileRevalidate))
        }
        Decision::RefreshInPath => {
            let key = key_ref.to_owned_key();
            let Some(permit) = proxy.flights.try_lead(&key) else {
                // Someone is already refreshing; the copy is still fresh.
                return Ok(answer(CacheStatus::Hit));
            };
            route.activity.early_refreshes.inc();
            let task = fill(
                route.clone(),
                key,
                fetch_request(&req, client),
                Some(permit),
                Some(object.clone()),
            );
            Ok(answer_fill(route, task, CacheStatus::RefreshedEarly, head_only).await)
        }
        Decision::Expired => {
            let key = key_ref.to_owned_key();
            Ok(fetch(
                proxy,
                route,
                key,
                fetch_request(&req, client),
                Some(object.clone()),
                head_only,
            )
            .await)
        }
    }
}

/// A miss or an expired object: fetch it, coalescing with others unless the
/// policy is `none`.
async fn fetch(
    proxy: &Proxy,
    route: &Arc<Route>,
    key: CacheKey,
    request: FetchRequest,
    stale: Option<Arc<CachedObject>>,
    head_only: bool,
) -> Response<ResponseBody> {
    let (stored, collapsed) = match stale {
        Some(_) => (CacheStatus::ExpiredStored, CacheStatus::ExpiredCollapsed),
        None => (CacheStatus::MissStored, CacheStatus::MissCollapsed),
    };
    if !route.policy.mode.coalesces() {
        let task = fill(route.clone(), key, request, None, stale);
        return answer_fill(route, task, stored, head_only).await;
    }
    let waiter = match proxy.flights.join(&key) {
        Lookup::Leader(permit) => {
            // A fill may have finished between our lookup and joining.
            if let Some(object) = fresh_copy(route, &key) {
                permit.finish(FillOutcome::Stored(object.clone()));
                return serve(route, &object, CacheStatus::Hit, head_only, Instant::now());
            }
            let task = fill(route.clone(), key, request, Some(permit), stale);
            return answer_fill(route, task, stored, head_only).await;
        }
        Lookup::Follower(waiter) => waiter,
    };
    // SUS answers every request at once: while the refresh is in flight, a
    // copy that expired less than one delta ago is served (unless the origin
    // forbade stale use); an older one waits like `lock`.
    let landing = |s: &&Arc<CachedObject>| {
        route.policy.mode == RefreshMode::Sus
            && !s.meta.freshness.stale_forbidden
            && s.meta.within_refresh_landing(Instant::now())
    };
    if let Some(copy) = stale.as_ref().filter(landing) {
        return serve(
            route,
            copy,
            CacheStatus::StaleRefreshInFlight,
            head_only,
            Instant::now(),
        );
    }
    match waiter.wait(route.lock_timeout()).await {
        Ok(FillOutcome::Stored(object)) => {
            serve(route, &object, collapsed, head_only, Instant::now())
        }
        Ok(FillOutcome::Failed(e)) => {
            match stale.filter(|s| s.meta.within_stale_if_error(Instant::now())) {
                Some(copy) => serve(
                    route,
                    &copy,
                    CacheStatus::StaleIfError,
                    head_only,
                    Instant::now(),
                ),
                None => {
                    route.activity.record(collapsed);
                    error_response(&e, collapsed)
                }
            }
        }
        // Not storable, leader gone, or lock_timeout: fetch for ourselves.
        Ok(FillOutcome::NotStored) | Err(_) => {
            let task = fill(route.clone(), key, request, None, stale);
            answer_fill(route, task, stored, head_only).await
        }
    }
}

fn fresh_copy(route: &Route, key: &CacheKey) -> Option<Arc<CachedObject>> {
    let zone = route.zone.as_ref()?;
    zone.tier
        .get(&key.as_ref())
        .filter(|o| o.meta.is_fresh(Instant::now()))
}

/// Starts one background refresh of `key` unless one is in flight or the
/// upstream's `refresh_concurrency` is used up (then it is skipped and
/// counted). True when this call started it.
pub fn refresh_in_background(
    proxy: &Arc<Proxy>,
    route: &Arc<Route>,
    key: KeyRef<'_>,
    request: impl FnOnce() -> FetchRequest,
    current: &Arc<CachedObject>,
) -> bool {
    let Some(slot) = route.upstream.try_refresh_slot() else {
        route.activity.refreshes_skipped.inc();
        return false;
    };
    let key = key.to_owned_key();
    let Some(permit) = proxy.flights.try_lead(&key) else {
        return false;
    };
    route.activity.background_refreshes.inc();
    let task = fill(
        route.clone(),
        key,
        request(),
        Some(permit),
        Some(current.clone()),
    );
    tokio::spawn(async move {
        let _slot = slot;
        task.await
    });
    true
}

/// Answers from a stored object: shared body, fresh `Age` and `Cache-Status`.
fn serve(
    route: &Route,
    object: &CachedObject,
    status: CacheStatus,
    head_only: bool,
    now: Instant,
) -> Response<ResponseBody> {
    let body = if head_only {
        ResponseBody::empty()
    } else {
        ResponseBody::full(object.body.clone())
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = object.status;
    *resp.headers_mut() = object.headers.clone();
    set_age(resp.headers_mut(), object.meta.age(now).as_secs());
    set_cache_status(resp.headers_mut(), status, Some(object.meta.ttl_left(now)));
    route.activity.record(status);
    if !head_only {
        route
            .activity
            .bytes_from_cache
            .add(object.body.len() as u64);
    }
    resp
}

/// Runs a fill in its own task, so a client that goes away does not cancel a
/// fetch others wait for, and answers this client from its reply.
async fn answer_fill(
    route: &Route,
    task: impl std::future::Future<Output = FillReply> + Send + 'static,
    stored: CacheStatus,
    head_only: bool,
) -> Response<ResponseBody> {
    let reply = tokio::spawn(task).await;
    let now = Instant::now();
    match reply {
        Ok(FillReply::Stored(object)) => serve(route, &object, stored, head_only, now),
        Ok(FillReply::Stale(object)) => {
            serve(route, &object, CacheStatus::StaleIfError, head_only, now)
        }
        Ok(FillReply::Relay(mut resp)) => {
            if head_only {
                *resp.body_mut() = ResponseBody::empty();
            }
            set_cache_status(resp.headers_mut(), CacheStatus::MissNotStored, None);
            route.activity.record(CacheStatus::MissNotStored);
            resp
        }
        Ok(FillReply::Failed(e)) => {
            route.activity.record(CacheStatus::MissNotStored);
            error_response(&e, CacheStatus::MissNotStored)
        }
        Err(join) => {
            tracing::error!(error = %join, "fill task failed");
            route.activity.record(CacheStatus::MissNotStored);
            let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, join);
            error_response(&e, CacheStatus::MissNotStored)
        }
    }
}

/// Proxies without caching, streaming both bodies.
async fn pass(route: &Route, req: Request<Incoming>, client: SocketAddr) -> Response<ResponseBody> {
    route.activity.record(CacheStatus::Bypass);
    route.activity.upstream_requests.inc();
    let upstream = &route.upstream;
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    add_forwarded(&mut parts.headers, client.ip(), SCHEME);
    let body = TimeoutBody::new(body, upstream.send_timeout)
        .map_err(Into::into)
        .boxed();
    match upstream.send(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            set_cache_status(&mut parts.headers, CacheStatus::Bypass, None);
            let body = ResponseBody::stream(TimeoutBody::new(body, upstream.read_timeout));
            Response::from_parts(parts, body)
        }
        Err(e) => {
            route.activity.upstream_errors.inc();
            tracing::warn!(upstream = %upstream.name, error = %e, "origin request failed");
            error_response(&e, CacheStatus::Bypass)
        }
    }
}

/// The request a fill sends on behalf of this client.
fn fetch_request(req: &Request<Incoming>, client: SocketAddr) -> FetchRequest {
    let mut headers: HeaderMap = req.headers().clone();
    strip_hop_by_hop(&mut headers);
    for name in [
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_MATCH,
        header::IF_UNMODIFIED_SINCE,
        header::IF_RANGE,
        header::RANGE,
        // A fill sends no body: a GET's own body stays with its client.
        header::CONTENT_LENGTH,
        header::EXPECT,
    ] {
        headers.remove(name);
    }
    add_forwarded(&mut headers, client.ip(), SCHEME);
    FetchRequest {
        path_and_query: req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
        has_authorization: headers.contains_key(header::AUTHORIZATION),
        headers,
    }
}

fn host_of(req: &Request<Incoming>) -> &str {
    req.headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("")
}

/// A short error page; the one place errors meet clients.
pub fn error_response(e: &ProxyError, status: CacheStatus) -> Response<ResponseBody> {
    let mut resp = Response::new(ResponseBody::full(e.body()));
    *resp.status_mut() = e.status();
    set_cache_status(resp.headers_mut(), status, None);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
