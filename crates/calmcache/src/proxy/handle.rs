//! The request path: route, look up, decide, answer from the cache or fetch.
//!
//! ```text
//! handle ─ route_for ─┬─ Upgrade: websocket (route.websocket) ── tunnel::open (never cached)
//!                     ├─ GET|HEAD with a body ─────────── read whole (request_body.rs), pass with it
//!                     ├─ no zone / method not GET|HEAD ─── pass (stream both ways;
//!                     │                                    unsafe methods invalidate, RFC 9111 §4.4)
//!                     ├─ bypass condition ────────────────── fetch (no lookup, no coalescing)
//!                     └─ lookup (key template, Vary) ─┬─ hit ─ request directives force? ─ fetch (fwd=request)
//!                                                     │        └ decide ─┬─ Fresh ─────────────── serve
//!                                                     │                  ├─ RefreshInBackground ─ serve + refresh task
//!                                                     │                  ├─ StaleWhileRevalidate ─ serve + refresh task
//!                                                     │                  ├─ RefreshInPath ─────── fill in own path (PER)
//!                                                     │                  └─ Expired ─ max-stale? serve : ┐
//!                                                     └─ miss (uri-miss / vary-miss) ───────────────────┴─ fetch: join flight,
//!                                                          leader spawns fill (conditional when the copy has validators);
//!                                                          followers wait (lock_timeout)
//! ```
//! Invariant: a plain hit takes no lock but one quick_cache shard read lock,
//! does no I/O, and shares the body `Bytes` instead of copying it. Only a hit
//! that draws a refresh (the last delta of life, or stale-while-revalidate)
//! goes on to try a refresh slot and the single-flight table.

use std::convert::Infallible;
use std::sync::Arc;

use calmcache_core::{
    decide, CacheKey, CacheStatus, CachedObject, Decision, Fwd, Interest, KeyRef, Lookup, Report,
    RequestCacheControl,
};
use http::header::{self, HeaderValue};
use http::uri::PathAndQuery;
use http::{HeaderMap, Method, Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::config::conditions::any_match;
use crate::http::body::{ResponseBody, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::{add_forwarded, set_cache_status, strip_hop_by_hop};
use crate::net::conn::Peer;
use crate::proxy::fill::{fill, FetchRequest, FillArgs, FillReply, NotStored};
use crate::proxy::lookup::{lookup, PrimaryKey};
use crate::proxy::outcome::{FillOutcome, Requester};
use crate::proxy::respond::{error_response, only_if_cached, relay, serve, Ask};
use crate::proxy::state::{Proxy, Route, Worker};
use crate::telemetry::metrics::{self, CallSlot, Served};
use calmcache_core::Zone;

/// Why a request goes to the origin; decides its `Cache-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
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
    fn fwd(self) -> Fwd {
        match self {
            Why::Miss(fwd) => fwd,
            Why::Stale | Why::Early => Fwd::Stale,
            Why::Request => Fwd::Request,
            Why::Bypass => Fwd::Bypass,
        }
    }

    /// The report of a response this fetch stored; `origin` is the origin's status.
    fn stored(self, origin: u16) -> Report {
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
    fn collapsed(self, origin: u16) -> Report {
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
    fn failed(self) -> Report {
        let report = match self {
            Why::Bypass => CacheStatus::Bypass.report(),
            _ => CacheStatus::MissNotStored.report(),
        };
        report.fwd(self.fwd())
    }

    /// The report of a response relayed without storing.
    fn not_stored(self, origin: u16, why: NotStored) -> Report {
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

/// Answers one client request. Never fails: errors become 4xx/5xx responses.
/// Times the answer (to its response head) into the latency histogram of its
/// class; with the access log on, attaches a [`Served`] to the response.
pub(crate) async fn handle(
    worker: Arc<Worker>,
    req: Request<Incoming>,
    client: Peer,
) -> Result<Response<ResponseBody>, Infallible> {
    let started = std::time::Instant::now();
    let slot = worker.proxy.note_served.then(CallSlot::default);
    // The worker's own Arc (no count shared by all threads is touched).
    let (resp, noted, placed) =
        metrics::scoped(slot.clone(), answer(worker.clone(), req, client)).await;
    if let Some(metrics::Noted::Counted(class)) = noted {
        worker.proxy.metrics.answered(class, started.elapsed());
        // A route over several zones: the zone its key was placed in.
        if let Some(zone) = placed.and_then(|z| worker.proxy.zone_activity.get(z)) {
            zone.count(class);
        }
    }
    let Ok(mut resp) = resp;
    if let Some(slot) = slot {
        let upstream = *slot.lock().unwrap_or_else(|p| p.into_inner());
        let class = noted.map(metrics::Noted::class);
        resp.extensions_mut().insert(Served { class, upstream });
    }
    Ok(resp)
}

async fn answer(
    worker: Arc<Worker>,
    mut req: Request<Incoming>,
    client: Peer,
) -> Result<Response<ResponseBody>, Infallible> {
    // Borrowed, not cloned: no reference count shared by all threads is
    // touched on a hit (the `worker` Arc is this thread's own).
    let proxy = &worker.proxy;
    // The one trusted view of the request (edge.rs): everything below reads
    // the request as admitted and prepared, never its raw form.
    let mut admitted = match crate::proxy::edge::admit(&mut req, client) {
        Ok(admitted) => admitted,
        Err(e) => {
            proxy.metrics.requests_refused.inc();
            return Ok(refused(&e, req.version()));
        }
    };
    if req.method().as_str() == "PURGE" {
        return Ok(Box::pin(crate::proxy::purge::purge_method(proxy, &req, client.addr)).await);
    }
    let own = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    // As admitted: lower-case, no default port (edge.rs); looked up only
    // when some route has `hosts`.
    let host = if worker.by_host {
        crate::http::headers::host_of(&req)
    } else {
        ""
    };
    let Some(route) = worker.route_for(host, admitted.match_target(own)) else {
        let e = ProxyError::downstream(ErrorKind::NoRoute, own);
        metrics::note_uncounted(CacheStatus::Bypass);
        return Ok(error_response(&e, &CacheStatus::Bypass.report()));
    };
    // Rare: kept only when the route must be found again below.
    let routed_host = admitted.recheck().then(|| host.to_owned());
    let client = crate::proxy::edge::prepare(&mut req, &mut admitted, route, client);
    if let Some(host) = routed_host {
        let own = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        if !worker
            .route_for(&host, own)
            .is_some_and(|r| Arc::ptr_eq(r, route))
        {
            let e = ProxyError::downstream(
                ErrorKind::BadRequest,
                "the path routes differently once its escapes are decoded",
            );
            proxy.metrics.requests_refused.inc();
            return Ok(refused(&e, req.version()));
        }
    }
    if admitted.websocket && route.cfg.websocket {
        return Ok(Box::pin(crate::proxy::tunnel::open(&worker, route, req, client)).await);
    }
    // A GET or HEAD body: read whole, then passed (request_body.rs).
    let req = if crate::proxy::request_body::announced(&req) {
        match Box::pin(with_body(proxy, route, req, client)).await {
            Ok(req) => req,
            Err(resp) => return Ok(resp),
        }
    } else {
        req
    };
    let pq = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let method = req.method();
    let first_zone = match (&route.zone, method) {
        (Some(zone), &Method::GET | &Method::HEAD) => zone,
        (None, _) => return Ok(Box::pin(pass(proxy, route, req, client, Fwd::Bypass)).await),
        (Some(_), _) => return Ok(Box::pin(pass(proxy, route, req, client, Fwd::Method)).await),
    };
    if !route.key_is_default
        && route
            .cfg
            .key
            .is_ambiguous(req.uri().query().unwrap_or(""), req.headers())
    {
        // A keyed argument, cookie or field given twice: the key reads the
        // first, the origin may read the last. Never stored.
        return Ok(Box::pin(pass(proxy, route, req, client, Fwd::Bypass)).await);
    }
    let head_only = method == Method::HEAD;
    let headers = req.headers();
    let host = crate::http::headers::host_of(&req);
    let primary = PrimaryKey::of(route, client.scheme(), method, host, pq, headers);
    let key_ref = primary.key_ref();
    // One zone, or among a route's `zones` the one its hash places the key in.
    let zone = route.zone_for(&key_ref).unwrap_or(first_zone);
    if route.zones.len() > 1 {
        note_placed(route, zone);
    }
    let ask = Ask {
        head_only,
        headers,
        key: route.cfg.cache_status_key.then(|| primary.to_string()),
    };
    if !route.cfg.bypass.is_empty() && any_match(&route.cfg.bypass, headers, req.uri().query()) {
        let request = fetch_request(route, &req, client, None);
        let task = fill(FillArgs::new(
            route.clone(),
            key_ref.to_owned_key(),
            request,
        ));
        return Ok(Box::pin(answer_fill(
            route,
            task,
            None,
            Why::Bypass,
            &ask,
            None,
            None,
        ))
        .await);
    }
    let rcc = if route.honors_client_cache_control() {
        RequestCacheControl::from_headers(headers)
    } else {
        RequestCacheControl::default()
    };
    let found = lookup(route, zone, &key_ref, headers).await;
    let flight =
        |found_variant: Option<CacheKey>| found_variant.unwrap_or_else(|| key_ref.to_owned_key());
    let Some(object) = found.object else {
        if rcc.only_if_cached {
            return Ok(only_if_cached(route, found.fwd));
        }
        if head_only && !route.cfg.convert_head {
            return Ok(Box::pin(pass(proxy, route, req, client, found.fwd)).await);
        }
        let fetch = Fetch {
            primary: key_ref.to_owned_key(),
            flight: flight(found.variant),
            request: fetch_request(route, &req, client, Some(&rcc)),
            stale: None,
            why: Why::Miss(found.fwd),
            since: None,
        };
        return Ok(Box::pin(fetch.run(proxy, route, zone, &ask)).await);
    };
    let now = Instant::now();
    if !rcc.is_empty() {
        if let Some(resp) = request_directives(route, &rcc, &object, &ask, now) {
            return Ok(resp);
        }
        if forces_fetch(&rcc, &object, now) {
            if head_only && !route.cfg.convert_head {
                return Ok(Box::pin(pass(proxy, route, req, client, Fwd::Request)).await);
            }
            let fetch = Fetch {
                primary: key_ref.to_owned_key(),
                flight: flight(found.variant),
                request: fetch_request(route, &req, client, Some(&rcc)),
                stale: Some(object.clone()),
                why: Why::Request,
                since: Some(now),
            };
            return Ok(Box::pin(fetch.run(proxy, route, zone, &ask)).await);
        }
    }
    let answer = |status: CacheStatus| serve(route, &object, status.report(), &ask, now);
    // A separate statement: the thread-local RNG must not live across an await.
    let decision = decide(&route.policy, &object.meta, now, &mut rand::rng());
    match decision {
        Decision::Fresh => Ok(answer(CacheStatus::Hit)),
        Decision::RefreshInBackground => {
            // Inside the window most requests draw; only the one that starts
            // the refresh pays for building its request.
            let flight_key = found.variant.clone();
            let request = || fetch_request(route, &req, client, None);
            if refresh_in_background(proxy, route, key_ref, flight_key, request, &object) {
                route.activity.early_refreshes.inc();
                return Ok(answer(CacheStatus::HitRefreshEarly));
            }
            Ok(answer(CacheStatus::Hit))
        }
        Decision::StaleWhileRevalidate => {
            let flight_key = found.variant.clone();
            let request = || fetch_request(route, &req, client, None);
            refresh_in_background(proxy, route, key_ref, flight_key, request, &object);
            Ok(answer(CacheStatus::StaleWhileRevalidate))
        }
        Decision::RefreshInPath => {
            let key = flight(found.variant);
            // A HEAD the route passes through does not refresh (the copy is fresh).
            let permit = (!head_only || route.cfg.convert_head)
                .then(|| proxy.flights.try_lead(&key))
                .flatten();
            let Some(permit) = permit else {
                // Someone is already refreshing; the copy is still fresh.
                return Ok(answer(CacheStatus::Hit));
            };
            route.activity.early_refreshes.inc();
            let interest = Some(permit.interest());
            let request = fetch_request(route, &req, client, Some(&rcc));
            let args = FillArgs::new(route.clone(), key_ref.to_owned_key(), request);
            let task = fill(args.leading(permit).replacing(Some(object.clone())));
            Ok(Box::pin(answer_fill(
                route,
                task,
                interest,
                Why::Early,
                &ask,
                None,
                None,
            ))
            .await)
        }
        Decision::Expired => {
            if rcc
                .max_stale
                .is_some_and(|limit| allows_stale(limit, &object, now))
            {
                return Ok(serve(
                    route,
                    &object,
                    CacheStatus::Hit.report().detail("max-stale"),
                    &ask,
                    now,
                ));
            }
            if rcc.only_if_cached {
                return Ok(only_if_cached(route, Fwd::Stale));
            }
            if head_only && !route.cfg.convert_head {
                return Ok(Box::pin(pass(proxy, route, req, client, Fwd::Stale)).await);
            }
            let fetch = Fetch {
                primary: key_ref.to_owned_key(),
                flight: flight(found.variant),
                request: fetch_request(route, &req, client, Some(&rcc)),
                stale: Some(object.clone()),
                why: Why::Stale,
                since: None,
            };
            Ok(Box::pin(fetch.run(proxy, route, zone, &ask)).await)
        }
    }
}

/// The answer to a request the edge refused; an HTTP/1.x connection is
/// closed after it, since its framing can no longer be trusted.
fn refused(e: &ProxyError, version: http::Version) -> Response<ResponseBody> {
    tracing::debug!(error = %e, "request refused");
    metrics::note_uncounted(CacheStatus::Bypass);
    let mut resp = crate::proxy::respond::refusal_response(e, &CacheStatus::Bypass.report());
    if version < http::Version::HTTP_2 && e.closes_connection() {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// RFC 9111 §5.2.1.7 `only-if-cached`: a stored response is used when it is
/// fresh enough for the other directives (or stale within `max-stale`), else 504.
fn request_directives(
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
fn forces_fetch(rcc: &RequestCacheControl, object: &CachedObject, now: Instant) -> bool {
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
fn allows_stale(limit: Option<std::time::Duration>, object: &CachedObject, now: Instant) -> bool {
    if object.meta.freshness.stale_forbidden {
        return false;
    }
    limit.is_none_or(|limit| -object.meta.ttl_left(now) <= limit.as_secs_f64())
}

/// A fetch from the origin for a request that could not be answered from the cache.
struct Fetch {
    /// The URI's primary key (where a Vary marker or the response lives).
    primary: CacheKey,
    /// The key requests coalesce on: the variant key when known.
    flight: CacheKey,
    request: FetchRequest,
    /// The stored copy being replaced: revalidated, and backing stale-if-error.
    stale: Option<Arc<CachedObject>>,
    why: Why,
    /// For a forced fetch: when the request arrived. A copy stored since
    /// then is as good as our own fetch.
    since: Option<Instant>,
}

impl Fetch {
    /// Fetches, coalescing with other requests for the same key unless the
    /// policy is `none` or this request may not store what it fetches (its
    /// followers could not use it).
    async fn run(
        self,
        proxy: &Proxy,
        route: &Arc<Route>,
        zone: &Zone,
        ask: &Ask<'_>,
    ) -> Response<ResponseBody> {
        let Fetch {
            primary,
            mut flight,
            request,
            stale,
            why,
            since,
        } = self;
        // A range request whose object turns out too large to store is sent
        // on with its Range instead of relaying the whole body.
        let ranged = ask.wants_range().then(|| request.clone());
        let answer =
            |task, interest, hfm| answer_fill(route, task, interest, why, ask, ranged.clone(), hfm);
        if !route.policy.mode.coalesces() || !request.store {
            let task = fill(FillArgs::new(route.clone(), primary, request).replacing(stale));
            return answer(task, None, None).await;
        }
        // An answer to a request with credentials may be personal because
        // of them: it says nothing about the URL, and must not let one
        // client turn coalescing off for everyone.
        let anonymous = request.requester() == Requester::Anonymous;
        // Hit-for-miss: this key's last answer could not be stored, so
        // nobody could use ours either; fetch side by side.
        if route.hit_for_miss.active(&flight) {
            route.activity.hit_for_miss.inc();
            let task = fill(FillArgs::new(route.clone(), primary, request).replacing(stale));
            let hfm = Hfm {
                key: &flight,
                marked: true,
                may_mark: anonymous,
            };
            return answer(task, None, Some(hfm)).await;
        }
        // Twice at most: a follower of a URI's first fetch may learn from it
        // that the URI varies and that its variant is another one; it then
        // joins that variant's flight.
        let deadline = Instant::now() + route.lock_timeout();
        for attempt in 0..2 {
            let waiter = match proxy.flights.join(&flight) {
                Lookup::Leader(permit) => {
                    // A fill may have finished between our lookup and joining.
                    if let Some(object) = usable_copy(route, zone, &flight, since).await {
                        let origin = object.status.as_u16();
                        permit.finish(FillOutcome::Stored {
                            object: object.clone(),
                            origin_status: origin,
                        });
                        let report = CacheStatus::Hit.report();
                        return serve(route, &object, report, ask, Instant::now());
                    }
                    let interest = Some(permit.interest());
                    let args = FillArgs::new(route.clone(), primary, request);
                    let task = fill(args.leading(permit).replacing(stale));
                    let hfm = Hfm {
                        key: &flight,
                        marked: false,
                        may_mark: anonymous,
                    };
                    return answer(task, interest, Some(hfm)).await;
                }
                Lookup::Follower(waiter) => waiter,
            };
            // SUS answers every request at once: while the refresh is in flight, a
            // copy that expired less than one delta (or `sus_stale`) ago is served
            // (where stale use was granted: RFC 9111 §4.2.4); an older one waits
            // like `lock`.
            let landing = |s: &&Arc<CachedObject>| {
                why == Why::Stale
                    && route
                        .policy
                        .landing_window(&s.meta)
                        .is_some_and(|window| s.meta.within(Instant::now(), window))
            };
            if let Some(copy) = stale.as_ref().filter(landing) {
                let report = CacheStatus::StaleRefreshInFlight.report();
                return serve(route, copy, report, ask, Instant::now());
            }
            // One lock_timeout in all, whichever flights it waits on.
            match waiter
                .wait(deadline.saturating_duration_since(Instant::now()))
                .await
            {
                Ok(FillOutcome::Stored {
                    object,
                    origin_status: origin,
                }) => {
                    if object.variant().is_none() {
                        return serve(route, &object, why.collapsed(origin), ask, Instant::now());
                    }
                    let found = lookup(route, zone, &primary.as_ref(), ask.headers).await;
                    if let Some(mine) = found.object {
                        let report = why.collapsed(origin);
                        return serve(route, &mine, report, ask, Instant::now());
                    }
                    match found.variant {
                        Some(variant) if attempt == 0 && variant != flight => flight = variant,
                        _ => break,
                    }
                }
                Ok(FillOutcome::Streaming(head)) => {
                    let mine = head.vary.as_ref().is_none_or(|(names, leader)| {
                        crate::http::vary::secondary(names, ask.headers) == *leader
                    });
                    if mine {
                        let report = why.collapsed(head.origin_status);
                        return crate::proxy::respond::serve_streaming(route, &head, report, ask)
                            .await;
                    }
                    // Another variant: its own fetch.
                    break;
                }
                Ok(FillOutcome::Answered(answer)) => {
                    let status = answer.status.as_u16();
                    return match stale.filter(|s| s.meta.within_stale_if_error(Instant::now())) {
                        Some(copy) => {
                            let mut report = CacheStatus::StaleIfError.report();
                            report.fwd_status = Some(status);
                            serve(route, &copy, report, ask, Instant::now())
                        }
                        None => {
                            let report = Report {
                                collapsed: true,
                                ..why.failed().fwd_status(status)
                            };
                            crate::proxy::respond::error_answer(route, &answer, report, ask)
                        }
                    };
                }
                Ok(FillOutcome::Failed(e)) => {
                    return match stale.filter(|s| s.meta.within_stale_if_error(Instant::now())) {
                        Some(copy) => {
                            let report = CacheStatus::StaleIfError.report();
                            serve(route, &copy, report, ask, Instant::now())
                        }
                        None => {
                            let report = Report {
                                collapsed: true,
                                ..why.failed()
                            };
                            route.activity.record(&report);
                            error_response(&e, &report)
                        }
                    };
                }
                // Not storable, leader gone, or lock_timeout: fetch for ourselves.
                Ok(FillOutcome::NotStored) | Err(_) => break,
            }
        }
        let task = fill(FillArgs::new(route.clone(), primary, request).replacing(stale));
        answer(task, None, None).await
    }
}

/// A copy under `key` this request may use instead of fetching: fresh, or
/// for a forced fetch, stored after the request arrived.
async fn usable_copy(
    route: &Route,
    zone: &Zone,
    key: &CacheKey,
    since: Option<Instant>,
) -> Option<Arc<CachedObject>> {
    let now = Instant::now();
    route.get(zone, &key.as_ref()).await.filter(|o| {
        o.vary_index().is_none()
            && match since {
                Some(since) => o.meta.stored_at >= since,
                None => o.meta.is_fresh(now),
            }
    })
}

/// Starts one background refresh unless one is in flight or the upstream's
/// `refresh_concurrency` is used up (then it is skipped and counted). True
/// when this call started it.
pub(crate) fn refresh_in_background(
    proxy: &Arc<Proxy>,
    route: &Arc<Route>,
    primary: KeyRef<'_>,
    variant: Option<CacheKey>,
    request: impl FnOnce() -> FetchRequest,
    current: &Arc<CachedObject>,
) -> bool {
    let Some(slot) = route.upstream.try_refresh_slot() else {
        route.activity.refreshes_skipped.inc();
        return false;
    };
    let key = variant.unwrap_or_else(|| primary.to_owned_key());
    let Some(permit) = proxy.flights.try_lead(&key) else {
        return false;
    };
    route.activity.background_refreshes.inc();
    let args = FillArgs::new(route.clone(), primary.to_owned_key(), request());
    let task = fill(args.leading(permit).replacing(Some(current.clone())));
    crate::proxy::background::spawn(async move {
        let _slot = slot;
        task.await
    });
    true
}

/// Runs a fill in its own task, so a client that goes away does not cancel a
/// fetch others wait for, and answers this client from its reply. `hfm`
/// says how this fetch takes part in hit-for-miss.
async fn answer_fill(
    route: &Arc<Route>,
    task: impl std::future::Future<Output = FillReply> + Send + 'static,
    interest: Option<Interest<FillOutcome>>,
    why: Why,
    ask: &Ask<'_>,
    ranged: Option<FetchRequest>,
    hfm: Option<Hfm<'_>>,
) -> Response<ResponseBody> {
    // The fetch runs in its own task, so that requests waiting for it are
    // not hurt when this one goes away; its upstream call is noted for this
    // request's access log line.
    let task = metrics::with_call_slot(metrics::call_slot(), task);
    let running = Orphaned::new(crate::proxy::background::spawn(task), interest, route);
    let reply = match (running.await, ranged) {
        (Ok(FillReply::Relay(resp, NotStored::TooLarge)), Some(request)) => {
            drop(resp);
            return match crate::proxy::range_fetch::fetch_range(route, &request, ask.headers).await
            {
                Ok(resp) => {
                    let report = why.not_stored(resp.status().as_u16(), NotStored::TooLarge);
                    relay(route, resp, report, ask)
                }
                Err(e) => {
                    let report = why.failed();
                    route.activity.record(&report);
                    error_response(&e, &report)
                }
            };
        }
        (reply, _) => reply,
    };
    let now = Instant::now();
    match reply {
        Ok(FillReply::Stored {
            object,
            shared: true,
            ..
        }) => serve(route, &object, CacheStatus::SharedHit.report(), ask, now),
        Ok(FillReply::Stored {
            object,
            origin_status: origin,
            ..
        }) => serve(route, &object, why.stored(origin), ask, now),
        Ok(FillReply::Streaming(head)) => {
            let report = why.stored(head.origin_status);
            crate::proxy::respond::serve_streaming(route, &head, report, ask).await
        }
        Ok(FillReply::Stale(object, origin)) => {
            let mut report = CacheStatus::StaleIfError.report();
            report.fwd_status = origin;
            serve(route, &object, report, ask, now)
        }
        Ok(FillReply::Relay(resp, not_stored)) => {
            let status = resp.status().as_u16();
            let mut report = why.not_stored(status, not_stored);
            if let Some(hfm) = hfm.filter(|_| marks_hit_for_miss(not_stored, status)) {
                if hfm.may_mark {
                    route.hit_for_miss.note(hfm.key);
                }
                if hfm.marked {
                    report = report.detail("hit-for-miss");
                }
            }
            relay(route, resp, report, ask)
        }
        Ok(FillReply::Failed(e)) => {
            let report = why.failed();
            route.activity.record(&report);
            error_response(&e, &report)
        }
        Err(join) => {
            tracing::error!(error = %join, "fill task failed");
            let report = why.failed();
            route.activity.record(&report);
            let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, join);
            error_response(&e, &report)
        }
    }
}

/// Notes which of `route`'s zones the request was placed in (as its index
/// among the generation's zones), for the zone's counters.
fn note_placed(route: &Route, zone: &Arc<Zone>) {
    let at = route.zones.iter().position(|(z, _)| Arc::ptr_eq(z, zone));
    if let Some(&index) = at.and_then(|i| route.cfg.zones.get(i)) {
        metrics::note_zone(index);
    }
}

/// A coalesced fetch's part in hit-for-miss.
#[derive(Clone, Copy)]
struct Hfm<'a> {
    /// The key marked when the answer cannot be stored.
    key: &'a CacheKey,
    /// The key was marked already: this fetch skipped the queue.
    marked: bool,
    /// The request carried no credentials, so its answer speaks for the URL.
    may_mark: bool,
}

/// True when an answer relayed for `why` says the key's answers cannot be
/// stored for a while (the response's own directives, or its size), so its
/// requests should stop queueing behind each other. Server errors are not
/// marked (their answer is handed to the waiters instead), nor errors the
/// request caused (core `hit_for_miss::speaks_for_the_resource`).
fn marks_hit_for_miss(why: NotStored, status: u16) -> bool {
    calmcache_core::hit_for_miss::speaks_for_the_resource(status)
        && match why {
            NotStored::TooLarge => true,
            // An authorised request's answer says nothing about others'.
            NotStored::Response(r) => r != calmcache_core::NotStorable::Authorization,
            NotStored::StoreFailed
            | NotStored::Request
            | NotStored::NoZone
            | NotStored::InflightBudget => false,
        }
}

/// A fill's task as its requester awaits it. If the requester goes away
/// first (client closed, HTTP/2 stream reset) and no other request waits
/// for the fill, the fill goes on only as background work: within the
/// upstream's `refresh_concurrency` slots, else it is cancelled. Without
/// that bound, HTTP/2 rapid resets (CVE-2023-44487) would turn each reset
/// stream into an origin request running with nobody waiting for it.
struct Orphaned {
    task: Option<tokio::task::JoinHandle<FillReply>>,
    interest: Option<Interest<FillOutcome>>,
    route: Arc<Route>,
}

impl Orphaned {
    fn new(
        task: tokio::task::JoinHandle<FillReply>,
        interest: Option<Interest<FillOutcome>>,
        route: &Arc<Route>,
    ) -> Self {
        Orphaned {
            task: Some(task),
            interest,
            route: route.clone(),
        }
    }
}

impl std::future::Future for Orphaned {
    type Output = Result<FillReply, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let Some(task) = self.task.as_mut() else {
            // Polled after completion: a logic error, never done here.
            return std::task::Poll::Pending;
        };
        let polled = std::pin::Pin::new(task).poll(cx);
        if polled.is_ready() {
            self.task = None;
        }
        polled
    }
}

impl Drop for Orphaned {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let interest = self.interest.take();
        // Decided here, before the fill task gets its first turn on this
        // worker's thread: a stream reset with its request never reaches
        // the origin.
        if !interest.as_ref().is_some_and(Interest::has_followers) {
            keep_or_cancel(task, &self.route);
            return;
        }
        // Followers wait: the fill goes on for them, and is judged again
        // when they have gone too (two streams reset one after the other
        // must not leave a fetch running unbounded).
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let route = self.route.clone();
                runtime.spawn(watch_orphan(task, interest, route));
            }
            Err(_) => task.abort(),
        }
    }
}

/// An orphaned fill nobody waits for: background work within the
/// upstream's `refresh_concurrency`, else cancelled and counted.
fn keep_or_cancel(task: tokio::task::JoinHandle<FillReply>, route: &Arc<Route>) {
    let slot = route.upstream.try_refresh_slot();
    match (slot, tokio::runtime::Handle::try_current()) {
        (Some(slot), Ok(runtime)) => {
            runtime.spawn(async move {
                let _slot = slot;
                let _ = task.await;
            });
        }
        _ => {
            route.activity.fills_cancelled.inc();
            task.abort();
        }
    }
}

/// Follows an orphaned fill while followers wait for it (checked every
/// 50 ms); once none do, [`keep_or_cancel`] decides.
async fn watch_orphan(
    mut task: tokio::task::JoinHandle<FillReply>,
    interest: Option<Interest<FillOutcome>>,
    route: Arc<Route>,
) {
    while interest.as_ref().is_some_and(Interest::has_followers) {
        tokio::select! {
            _ = &mut task => return,
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
        }
    }
    if !task.is_finished() {
        keep_or_cancel(task, &route);
    }
}

/// A GET or HEAD whose framing announced a body (request_body.rs): read
/// whole, then passed with it (`Err`: the answer, from the origin or a
/// refusal of the body), or, empty, given back to go on as if bodiless.
async fn with_body(
    proxy: &Proxy,
    route: &Route,
    mut req: Request<Incoming>,
    client: Peer,
) -> Result<Request<Incoming>, Response<ResponseBody>> {
    let limit = route.upstream.send_timeout;
    let body = match crate::proxy::request_body::read_whole(req.body_mut(), limit).await {
        Ok(Some(body)) => body,
        Ok(None) => return Ok(req),
        Err(e) => {
            proxy.metrics.requests_refused.inc();
            return Err(refused(&e, req.version()));
        }
    };
    let (mut parts, _) = req.into_parts();
    // Whatever its framing was: the origin gets the body with its length.
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let body = http_body_util::Full::new(body);
    let (body, watch) = crate::http::body::ClientBody::watch(body, limit);
    // Never looked up, coalesced or stored: the body may change the answer.
    let report = CacheStatus::Bypass.report().detail("request-body");
    let req = Request::from_parts(parts, body);
    Err(forward(proxy, route, req, watch, client, report).await)
}

/// Proxies without caching, streaming both bodies. A non-error answer to an
/// unsafe method invalidates the URIs it names (RFC 9111 §4.4).
async fn pass(
    proxy: &Proxy,
    route: &Route,
    req: Request<Incoming>,
    client: Peer,
    fwd: Fwd,
) -> Response<ResponseBody> {
    let report = match fwd {
        Fwd::Bypass => CacheStatus::Bypass.report(),
        Fwd::Method => CacheStatus::Bypass.report().fwd(Fwd::Method),
        other => CacheStatus::MissNotStored.report().fwd(other),
    };
    let (parts, body) = req.into_parts();
    let send_timeout = route.upstream.send_timeout;
    let (body, watch) = crate::http::body::ClientBody::watch(body, send_timeout);
    let req = Request::from_parts(parts, body);
    forward(proxy, route, req, watch, client, report).await
}

/// Sends `req` (its body watched by `client_body`) upstream and relays the
/// answer uncached, reported as `report`.
async fn forward(
    proxy: &Proxy,
    route: &Route,
    req: Request<crate::http::body::StreamBody>,
    client_body: crate::http::body::ClientBody,
    client: Peer,
    report: Report,
) -> Response<ResponseBody> {
    let upstream = &route.upstream;
    let invalidation = crate::proxy::invalidate::Target::of(&req, client.scheme());
    let version = req.version();
    let (mut parts, body) = req.into_parts();
    crate::proxy::edge::ensure_host(&mut parts.headers, &parts.uri);
    add_forwarded(&mut parts.headers, client.addr.ip(), client.scheme());
    let sent = upstream.send(Request::from_parts(parts, body)).await;
    match sent {
        Ok(resp) => {
            route.activity.upstream_requests.inc();
            let (mut parts, body) = resp.into_parts();
            if let Some(target) = invalidation {
                target.apply(proxy, parts.status, &parts.headers).await;
            }
            strip_hop_by_hop(&mut parts.headers);
            route.strip_targeted(&mut parts.headers);
            let report = report.fwd_status(parts.status.as_u16());
            set_cache_status(&mut parts.headers, &report, None);
            route.activity.record(&report);
            let body = ResponseBody::stream(TimeoutBody::new(body, upstream.read_timeout));
            Response::from_parts(parts, body)
        }
        Err(e) => {
            // The client's body broke off or was malformed: its fault, not the origin's.
            if let Some(fault) = client_body.fault() {
                tracing::debug!(error = %e, "request body failed");
                route.activity.upstream_requests.inc();
                route.activity.record(&report);
                return refused(&fault, version);
            }
            route.activity.upstream_failed(&e);
            if !e.repeats() {
                // Per request: a dead upstream must not flood the log.
                static FAILED: calmcache_core::warn_limit::WarnLimit =
                    calmcache_core::warn_limit::WarnLimit::new();
                calmcache_core::warn_limited!(FAILED, "origin request failed",
                    upstream = %upstream.name, error = %e);
            }
            route.activity.record(&report);
            error_response(&e, &report)
        }
    }
}

/// The request a fill sends on behalf of this client: its end-to-end headers
/// without conditionals or Range (the cache wants the whole 200), with
/// `Accept-Encoding` normalised (or dropped when the route compresses).
fn fetch_request(
    route: &Route,
    req: &Request<Incoming>,
    client: Peer,
    rcc: Option<&RequestCacheControl>,
) -> FetchRequest {
    let mut headers: HeaderMap = req.headers().clone();
    crate::proxy::edge::ensure_host(&mut headers, req.uri());
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
    let accept = crate::http::compress::normalise_accept_encoding(
        req.headers().get_all(header::ACCEPT_ENCODING).iter(),
    );
    if route.cfg.compress.is_empty() && !accept.is_empty() {
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(accept));
    } else {
        headers.remove(header::ACCEPT_ENCODING);
    }
    add_forwarded(&mut headers, client.addr.ip(), client.scheme());
    let forbidden_by_request = rcc.is_some_and(|r| r.no_store);
    let forbidden_by_route = !route.cfg.no_store.is_empty()
        && any_match(&route.cfg.no_store, req.headers(), req.uri().query());
    let store = !forbidden_by_request && !forbidden_by_route;
    FetchRequest {
        path_and_query: req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
        has_authorization: headers.contains_key(header::AUTHORIZATION),
        headers,
        store,
        selecting: req.headers().clone(),
    }
}

#[cfg(test)]
mod future_size {
    /// The size of what `f` returns, without calling it.
    fn returned_size<A, B, C, R, F: Fn(A, B, C) -> R>(_: &F) -> usize {
        std::mem::size_of::<R>()
    }

    /// Every request's future is moved into a task of its own on HTTP/2 (and
    /// boxed by the connection): the hit path must not carry the miss
    /// paths' state. The cold paths are boxed where they are awaited and
    /// `metrics::scoped` is flat; before, this future was 32 KiB and copying
    /// it cost a fifth of the CPU of HTTP/2 hits (issue 15).
    #[test]
    fn the_request_future_stays_small() {
        let handle = returned_size(&super::handle);
        let answer = returned_size(&super::answer);
        assert!(handle <= 4096, "handle's future is {handle} bytes");
        assert!(answer <= 3072, "answer's future is {answer} bytes");
    }
}
