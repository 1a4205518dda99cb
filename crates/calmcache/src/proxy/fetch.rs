//! Fetching for a request the cache could not answer: the request a fill
//! sends, coalescing with other requests for the same key (single flight,
//! hit-for-miss, SUS landing), background refreshes, and answering the
//! client from the fill's reply.
//!
//! Must not decide whether to fetch (`plan.rs` does) nor build responses
//! itself (`respond.rs` does).

use std::sync::Arc;

use calmcache_core::{
    CacheKey, CacheStatus, CachedObject, Interest, KeyRef, Lookup, Report, RequestCacheControl,
    Zone,
};
use http::header::{self, HeaderValue};
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::config::conditions::any_match;
use crate::http::body::ResponseBody;
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::add_forwarded;
use crate::net::conn::Peer;
use crate::proxy::fill::{fill, FetchRequest, FillReply, NotStored};
use crate::proxy::lookup::lookup;
use crate::proxy::orphan::Orphaned;
use crate::proxy::outcome::{FillOutcome, Requester};
use crate::proxy::plan::Why;
use crate::proxy::respond::{error_response, relay, serve, Ask};
use crate::proxy::state::{Proxy, Route};
use crate::telemetry::metrics;

/// A fetch from the origin for a request that could not be answered from the cache.
pub(crate) struct Fetch {
    /// The URI's primary key (where a Vary marker or the response lives).
    pub primary: CacheKey,
    /// The key requests coalesce on: the variant key when known.
    pub flight: CacheKey,
    pub request: FetchRequest,
    /// The stored copy being replaced: revalidated, and backing stale-if-error.
    pub stale: Option<Arc<CachedObject>>,
    pub why: Why,
    /// For a forced fetch: when the request arrived. A copy stored since
    /// then is as good as our own fetch.
    pub since: Option<Instant>,
}

impl Fetch {
    /// Fetches, coalescing with other requests for the same key unless the
    /// policy is `none` or this request may not store what it fetches (its
    /// followers could not use it).
    pub(crate) async fn run(
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
            let task = fill(route.clone(), primary, request, None, stale);
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
            let task = fill(route.clone(), primary, request, None, stale);
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
                    let task = fill(route.clone(), primary, request, Some(permit), stale);
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
        let task = fill(route.clone(), primary, request, None, stale);
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
    let task = fill(
        route.clone(),
        primary.to_owned_key(),
        request(),
        Some(permit),
        Some(current.clone()),
    );
    crate::proxy::background::spawn(async move {
        let _slot = slot;
        task.await
    });
    true
}

/// Runs a fill in its own task, so a client that goes away does not cancel a
/// fetch others wait for, and answers this client from its reply. `hfm`
/// says how this fetch takes part in hit-for-miss.
pub(crate) async fn answer_fill(
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
            return match crate::proxy::fill::fetch_range(route, &request, ask.headers).await {
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

/// A coalesced fetch's part in hit-for-miss.
#[derive(Clone, Copy)]
pub(crate) struct Hfm<'a> {
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

/// The request a fill sends on behalf of this client: its end-to-end headers
/// without conditionals or Range (the cache wants the whole 200), with
/// `Accept-Encoding` normalised (or dropped when the route compresses).
pub(crate) fn fetch_request(
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
