//! Fetching for a request the cache could not answer: the request a fill
//! sends, coalescing with other requests for the same key (single flight,
//! hit-for-miss, SUS landing), background refreshes, and answering the
//! client from the fill's reply.
//!
//! Must not decide whether to fetch (`plan.rs` does) nor build responses
//! itself (`respond.rs` does).

use std::sync::Arc;

use calmcache_core::{
    CacheKey, CacheStatus, CachedObject, FetchPermit, Interest, KeyRef, Lookup, Report,
    RequestCacheControl, Zone,
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
use crate::proxy::answer::Answer;
use crate::proxy::fill::{busy_copy, fill, FetchRequest, FillArgs, FillReply, NotStored, StandIn};
use crate::proxy::limit::ToOrigin;
use crate::proxy::lookup::lookup;
use crate::proxy::orphan::Orphaned;
use crate::proxy::outcome::{ErrorAnswer, FillOutcome, Requester};
use crate::proxy::plan::Why;
use crate::proxy::respond::{relay, serve, Ask};
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

/// Where a fetch's request stands once it tried to coalesce.
enum Turn {
    /// Answered by another request's fetch (or a copy that appeared).
    Got(Got),
    /// This request leads the flight: it fills.
    Lead(FetchPermit<FillOutcome>),
    /// Nothing to wait for that it could use: it fetches for itself.
    Alone,
}

/// What a follower made of its leader's outcome.
enum Followed {
    Got(Got),
    /// The leader's fetch revealed this request's variant: join its flight.
    Rejoin(CacheKey),
    Alone,
}

impl Fetch {
    /// Fetches, coalescing with other requests for the same key unless the
    /// policy is `none` or this request may not store what it fetches (its
    /// followers could not use it). The request passes the route's origin
    /// limits (`gate`) where it really goes to the origin: leading its
    /// flight or alone, never as a follower the leader's fetch serves.
    pub(crate) async fn run<'r>(
        mut self,
        proxy: &Proxy,
        route: &'r Arc<Route>,
        zone: &Zone,
        ask: &Ask<'_>,
        mut gate: ToOrigin<'_, 'r, Incoming>,
    ) -> Answer<'r> {
        if !route.policy.mode.coalesces() || !self.request.store {
            if let Err(refused) = gate.pass().await {
                return refused;
            }
            return self.fetch(route, None, None, ask).await;
        }
        // An answer to a request with credentials may be personal because
        // of them: it says nothing about the URL, and must not let one
        // client turn coalescing off for everyone.
        let may_mark = self.request.requester() == Requester::Anonymous;
        // Hit-for-miss: this key's last answer could not be stored, so
        // nobody could use ours either; fetch side by side.
        if route.hit_for_miss.active(&self.flight) {
            if let Err(refused) = gate.pass().await {
                return refused;
            }
            route.activity.hit_for_miss.inc();
            let hfm = Hfm {
                key: self.flight.clone(),
                marked: true,
                may_mark,
            };
            return self.fetch(route, None, Some(hfm), ask).await;
        }
        match self.take_turn(proxy, route, zone, ask).await {
            Turn::Got(got) => respond(route, ask, got).await,
            Turn::Lead(permit) => {
                let permit = match self.refresh_ahead(route, permit) {
                    Ok(got) => return respond(route, ask, got).await,
                    Err(permit) => permit,
                };
                // Refused: the permit drops with it, and each follower
                // fetches for itself (through the gate).
                if let Err(refused) = gate.pass().await {
                    return refused;
                }
                let hfm = Hfm {
                    key: self.flight.clone(),
                    marked: false,
                    may_mark,
                };
                self.fetch(route, Some(permit), Some(hfm), ask).await
            }
            Turn::Alone => {
                if let Err(refused) = gate.pass().await {
                    return refused;
                }
                self.fetch(route, None, None, ask).await
            }
        }
    }

    /// Fills (leading the flight with `permit`) and answers from the reply.
    async fn fetch<'r>(
        self,
        route: &'r Arc<Route>,
        permit: Option<FetchPermit<FillOutcome>>,
        hfm: Option<Hfm>,
        ask: &Ask<'_>,
    ) -> Answer<'r> {
        // A range request whose object turns out too large to store is sent
        // on with its Range instead of relaying the whole body.
        let ranged = ask.wants_range().then(|| self.request.clone());
        let interest = permit.as_ref().map(FetchPermit::interest);
        let stand_in = self.stand_in();
        let mut args = FillArgs::new(route.clone(), self.primary, self.request);
        if let Some(permit) = permit {
            args = args.leading(permit);
        }
        if stand_in == StandIn::ErrorOnly {
            args = args.forced();
        }
        let task = fill(args.replacing(self.stale));
        let filling = Filling {
            route,
            task,
            interest,
            why: self.why,
            ranged,
            hfm,
        };
        filling.answer(ask).await
    }

    /// Joins the key's flight: leads it, or follows its leader (twice at
    /// most: a follower of a URI's first fetch may learn from it that the
    /// URI varies and that its variant is another one; it then joins that
    /// variant's flight).
    async fn take_turn(
        &mut self,
        proxy: &Proxy,
        route: &Route,
        zone: &Zone,
        ask: &Ask<'_>,
    ) -> Turn {
        // One lock_timeout in all, whichever flights it waits on.
        let deadline = Instant::now() + route.lock_timeout();
        for attempt in 0..2 {
            let waiter = match proxy.flights.join(&self.flight) {
                Lookup::Leader(permit) => return self.lead(route, zone, permit).await,
                Lookup::Follower(waiter) => waiter,
            };
            if let Some(copy) = self.landing(route) {
                let report = CacheStatus::StaleRefreshInFlight.report();
                return Turn::Got(Got::Object(copy, report));
            }
            if let Some(copy) = self.stand_in_now(route) {
                return Turn::Got(served_busy(route, copy));
            }
            let waited = waiter.wait(deadline.saturating_duration_since(Instant::now()));
            // Not storable, leader gone, or lock_timeout: fetch for ourselves.
            let Ok(outcome) = waited.await else {
                return Turn::Alone;
            };
            match self.follow(outcome, route, zone, ask).await {
                Followed::Got(got) => return Turn::Got(got),
                Followed::Rejoin(variant) if attempt == 0 => self.flight = variant,
                Followed::Rejoin(_) | Followed::Alone => return Turn::Alone,
            }
        }
        Turn::Alone
    }

    /// The leader's turn: a fill may have finished between our lookup and
    /// joining; its copy is then handed to any followers and served.
    async fn lead(&self, route: &Route, zone: &Zone, permit: FetchPermit<FillOutcome>) -> Turn {
        let Some(object) = usable_copy(route, zone, &self.flight, self.since).await else {
            return Turn::Lead(permit);
        };
        let origin = object.status.as_u16();
        permit.finish(FillOutcome::Stored {
            object: object.clone(),
            origin_status: origin,
        });
        Turn::Got(Got::Object(object, CacheStatus::Hit.report()))
    }

    /// SUS answers every request at once: while the refresh is in flight, a
    /// copy that expired less than one delta (or `sus_stale`) ago is served
    /// (where stale use was granted: RFC 9111 §4.2.4); an older one waits
    /// like `lock`.
    fn landing(&self, route: &Route) -> Option<Arc<CachedObject>> {
        let copy = self.stale.as_ref().filter(|_| self.why == Why::Stale)?;
        let window = route.policy.landing_window(&copy.meta)?;
        copy.meta
            .within(Instant::now(), window)
            .then(|| copy.clone())
    }

    /// The copy that stands in at once while the origin budget is full
    /// (a follower does not wait on a leader that waits for a slot).
    fn stand_in_now(&self, route: &Route) -> Option<Arc<CachedObject>> {
        if !route.upstream.is_busy() {
            return None;
        }
        busy_copy(route, self.stale.as_ref(), self.stand_in())
    }

    /// The origin budget is full and this request's copy, past its
    /// lifetime, may stand in: it is served at once, and the flight's
    /// refresh waits for a slot in the budget's `Ahead` lane, in the
    /// background, within `refresh_concurrency` (a refresh of a copy
    /// clients keep asking for goes before a crawler's first fetches;
    /// skipped, a busy origin would leave it to age out of
    /// `stale_if_busy`). `Err(permit)` when not: the fill runs as it
    /// would.
    fn refresh_ahead(
        &self,
        route: &Arc<Route>,
        permit: FetchPermit<FillOutcome>,
    ) -> Result<Got, FetchPermit<FillOutcome>> {
        let expired = |c: &Arc<CachedObject>| !c.meta.is_fresh(Instant::now());
        let Some(copy) = self.stand_in_now(route).filter(expired) else {
            return Err(permit);
        };
        let Some(slot) = route.upstream.try_refresh_slot() else {
            return Err(permit);
        };
        route.activity.background_refreshes.inc();
        let args = FillArgs::new(route.clone(), self.primary.clone(), self.request.clone());
        let task = fill(args.ahead().leading(permit).replacing(self.stale.clone()));
        let refreshed = route.clone();
        crate::proxy::background::spawn(async move {
            let _slot = slot;
            let reply = task.await;
            note_skipped(&refreshed, &reply);
            reply
        });
        Ok(served_busy(route, copy))
    }

    /// Which stored copy may stand in for this request while the origin
    /// is busy: past stale-if-error only when its directives forced it.
    fn stand_in(&self) -> StandIn {
        match self.why {
            Why::Request => StandIn::ErrorOnly,
            _ => StandIn::Busy,
        }
    }

    /// What a follower answers from its leader's `outcome`.
    async fn follow(
        &mut self,
        outcome: FillOutcome,
        route: &Route,
        zone: &Zone,
        ask: &Ask<'_>,
    ) -> Followed {
        let why = self.why;
        match outcome {
            FillOutcome::Stored {
                object,
                origin_status,
            } => {
                if object.variant().is_none() {
                    return Followed::Got(Got::Object(object, why.collapsed(origin_status)));
                }
                let found = lookup(route, zone, &self.primary.as_ref(), ask.headers).await;
                match (found.object, found.variant) {
                    (Some(mine), _) => {
                        Followed::Got(Got::Object(mine, why.collapsed(origin_status)))
                    }
                    (None, Some(variant)) if variant != self.flight => Followed::Rejoin(variant),
                    (None, _) => Followed::Alone,
                }
            }
            FillOutcome::Streaming(head) => {
                let mine = head.vary.as_ref().is_none_or(|(names, leader)| {
                    crate::http::vary::secondary(names, ask.headers) == *leader
                });
                if !mine {
                    // Another variant: its own fetch.
                    return Followed::Alone;
                }
                let report = why.collapsed(head.origin_status);
                Followed::Got(Got::Streaming(head, report))
            }
            FillOutcome::Answered(answer) => {
                let status = answer.status.as_u16();
                let failed = Report {
                    collapsed: true,
                    ..why.failed().fwd_status(status)
                };
                let got = stale_if_error(self.stale.take(), Some(status));
                Followed::Got(got.unwrap_or(Got::ErrorAnswer(answer, failed)))
            }
            FillOutcome::Failed(e) => {
                let failed = Report {
                    collapsed: true,
                    ..why.failed()
                };
                let got = match e.kind {
                    // The origin budget refused the leader: this request's
                    // own copy, if it may stand in, else the same 503.
                    ErrorKind::OriginBusy { .. } => {
                        busy_copy(route, self.stale.as_ref(), self.stand_in())
                            .map(|copy| served_busy(route, copy))
                    }
                    _ => stale_if_error(self.stale.take(), None),
                };
                Followed::Got(got.unwrap_or(Got::Failed(e, failed)))
            }
            FillOutcome::NotStored => Followed::Alone,
        }
    }
}

/// What a fetch came to for this request, whether it led or followed.
pub(crate) enum Got {
    /// A stored object, served.
    Object(Arc<CachedObject>, Report),
    /// A response still being stored, served as it arrives.
    Streaming(Arc<crate::proxy::growing::StreamingHead>, Report),
    /// An origin response not stored, relayed.
    Relayed(Response<ResponseBody>, Report),
    /// The leader's error answer, shared with its followers.
    ErrorAnswer(Arc<ErrorAnswer>, Report),
    /// No answer from the origin.
    Failed(ProxyError, Report),
}

/// The one place a fetch's result becomes the client's response.
async fn respond<'r>(route: &'r Route, ask: &Ask<'_>, got: Got) -> Answer<'r> {
    match got {
        Got::Object(object, report) => serve(route, &object, report, ask, Instant::now()),
        Got::Streaming(head, report) => {
            crate::proxy::respond::serve_streaming(route, &head, report, ask).await
        }
        Got::Relayed(resp, report) => relay(route, resp, report, ask),
        Got::ErrorAnswer(answer, report) => {
            crate::proxy::respond::error_answer(route, &answer, report, ask)
        }
        Got::Failed(e, report) => crate::proxy::respond::failed(route, &e, report),
    }
}

/// A copy served at once because the origin budget was full (counted).
fn served_busy(route: &Route, copy: Arc<CachedObject>) -> Got {
    route.upstream.stats.budget.shed_stale.inc();
    let report = CacheStatus::StaleIfError
        .report()
        .detail(crate::proxy::respond::ORIGIN_BUSY);
    Got::Object(copy, report)
}

/// RFC 5861 §4 stale-if-error: the copy being replaced, served while its
/// window lasts; `fwd_status` is what the origin answered, if it did.
fn stale_if_error(stale: Option<Arc<CachedObject>>, fwd_status: Option<u16>) -> Option<Got> {
    let copy = stale.filter(|s| s.meta.within_stale_if_error(Instant::now()))?;
    Some(Got::Object(copy, stale_report(fwd_status)))
}

/// The report of a stale copy served because the origin failed.
fn stale_report(fwd_status: Option<u16>) -> Report {
    let mut report = CacheStatus::StaleIfError.report();
    report.fwd_status = fwd_status;
    report
}

/// A fill started for this request, and how its reply is reported.
pub(crate) struct Filling<'a, F> {
    route: &'a Arc<Route>,
    /// The fill (`fill::fill`), not yet spawned.
    task: F,
    /// The flight's followers, when this fill leads one.
    interest: Option<Interest<FillOutcome>>,
    why: Why,
    /// A range request's own request, for an object too large to store.
    ranged: Option<FetchRequest>,
    /// How this fetch takes part in hit-for-miss.
    hfm: Option<Hfm>,
}

/// A fill for a `bypass` request: no lookup, no coalescing.
pub(crate) async fn bypass<'r>(
    route: &'r Arc<Route>,
    primary: CacheKey,
    request: FetchRequest,
    ask: &Ask<'_>,
) -> Answer<'r> {
    let task = fill(FillArgs::new(route.clone(), primary, request));
    let filling = Filling {
        route,
        task,
        interest: None,
        why: Why::Bypass,
        ranged: None,
        hfm: None,
    };
    filling.answer(ask).await
}

/// PER: the fill of a fresh copy's early refresh, led by this request
/// (`permit`); its answer comes from the fill.
pub(crate) fn early<'a>(
    route: &'a Arc<Route>,
    primary: CacheKey,
    request: FetchRequest,
    permit: FetchPermit<FillOutcome>,
    copy: &Arc<CachedObject>,
) -> Filling<'a, impl std::future::Future<Output = FillReply> + Send + 'static> {
    let interest = Some(permit.interest());
    let args = FillArgs::new(route.clone(), primary, request);
    let task = fill(args.leading(permit).replacing(Some(copy.clone())));
    Filling {
        route,
        task,
        interest,
        why: Why::Early,
        ranged: None,
        hfm: None,
    }
}

impl<'r, F: std::future::Future<Output = FillReply> + Send + 'static> Filling<'r, F> {
    /// Runs the fill in its own task, so a client that goes away does not
    /// cancel a fetch others wait for, and answers this client from its reply.
    pub(crate) async fn answer(self, ask: &Ask<'_>) -> Answer<'r> {
        let route = self.route;
        // The fetch runs in its own task, so that requests waiting for it are
        // not hurt when this one goes away; its upstream call is noted for this
        // request's access log line.
        let task = metrics::with_call_slot(metrics::call_slot(), self.task);
        let running = Orphaned::new(crate::proxy::background::spawn(task), self.interest, route);
        let mut reply = running.await;
        // Fields only this client gets (an ignored Set-Cookie), added to
        // whatever answer it gets from the stored copy.
        let own = reply.as_mut().map(FillReply::take_own).unwrap_or_default();
        let got = match (reply, self.ranged) {
            (Ok(FillReply::Relay(resp, NotStored::TooLarge)), Some(request)) => {
                drop(resp);
                self.why.ranged(route, &request, ask).await
            }
            (reply, _) => got(route, self.why, self.hfm, reply),
        };
        let mut answer = respond(route, ask, got).await;
        own.add_to(answer.resp.headers_mut());
        answer
    }
}

impl Why {
    /// A range request whose object was too large to store: sent again
    /// with its Range (`range_fetch::fetch_range`), relayed.
    async fn ranged(self, route: &Route, request: &FetchRequest, ask: &Ask<'_>) -> Got {
        match crate::proxy::range_fetch::fetch_range(route, request, ask.headers).await {
            Ok(resp) => {
                let report = self.not_stored(resp.status().as_u16(), NotStored::TooLarge);
                Got::Relayed(resp, report)
            }
            Err(e) => Got::Failed(e, self.failed()),
        }
    }
}

/// What a fill's `reply` is, for the request that ran it for `why`.
fn got(
    route: &Route,
    why: Why,
    hfm: Option<Hfm>,
    reply: Result<FillReply, tokio::task::JoinError>,
) -> Got {
    match reply {
        Ok(FillReply::Stored {
            object,
            shared: true,
            ..
        }) => Got::Object(object, CacheStatus::SharedHit.report()),
        Ok(FillReply::Stored {
            object,
            origin_status,
            ..
        }) => Got::Object(object, why.stored(origin_status)),
        Ok(FillReply::Streaming(head, _)) => {
            let report = why.stored(head.origin_status);
            Got::Streaming(head, report)
        }
        Ok(FillReply::Stale(object, origin)) => Got::Object(object, stale_report(origin)),
        Ok(FillReply::Busy(object)) => served_busy(route, object),
        Ok(FillReply::Relay(resp, not_stored)) => {
            let status = resp.status().as_u16();
            let mut report = why.not_stored(status, not_stored);
            if let Some(hfm) = hfm.filter(|_| marks_hit_for_miss(not_stored, status)) {
                if hfm.may_mark {
                    route.hit_for_miss.note(&hfm.key);
                }
                if hfm.marked {
                    report = report.detail("hit-for-miss");
                }
            }
            Got::Relayed(resp, report)
        }
        Ok(FillReply::Failed(e)) => Got::Failed(e, why.failed()),
        Err(join) => {
            tracing::error!(target: crate::proxy::pass::LOG, error = %join, "fill task failed");
            let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, join);
            Got::Failed(e, why.failed())
        }
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
    variant: Option<&CacheKey>,
    request: impl FnOnce() -> FetchRequest,
    current: &Arc<CachedObject>,
) -> bool {
    let Some(slot) = route.upstream.try_refresh_slot() else {
        route.activity.refreshes_skipped.inc();
        return false;
    };
    let key = variant.cloned().unwrap_or_else(|| primary.to_owned_key());
    let Some(permit) = proxy.flights.try_lead(&key) else {
        return false;
    };
    route.activity.background_refreshes.inc();
    let args = FillArgs::new(route.clone(), primary.to_owned_key(), request()).background();
    let task = fill(args.leading(permit).replacing(Some(current.clone())));
    let route = route.clone();
    crate::proxy::background::spawn(async move {
        let _slot = slot;
        let reply = task.await;
        note_skipped(&route, &reply);
        reply
    });
    true
}

/// Counts a background refresh or warm-up the origin budget skipped (it
/// never queues: a full budget is for the fills clients wait on).
pub(crate) fn note_skipped(route: &Route, reply: &FillReply) -> bool {
    let skipped = match reply {
        FillReply::Busy(_) => true,
        FillReply::Failed(e) => matches!(e.kind, ErrorKind::OriginBusy { .. }),
        _ => false,
    };
    if skipped {
        route.upstream.stats.budget.refresh_skipped.inc();
    }
    skipped
}

/// A coalesced fetch's part in hit-for-miss.
pub(crate) struct Hfm {
    /// The key marked when the answer cannot be stored.
    key: CacheKey,
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
            // Admission refused a first miss: the next one is stored.
            NotStored::StoreFailed
            | NotStored::NotAdmitted
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
    if route.cfg.answers.compress.is_empty() && !accept.is_empty() {
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(accept));
    } else {
        headers.remove(header::ACCEPT_ENCODING);
    }
    add_forwarded(&mut headers, client.addr.ip(), client.scheme());
    // Before `has_authorization` is read: credentials a rule sends make
    // the answer an authorised one (RFC 9111 §3.5).
    crate::proxy::header_rules::to_upstream(route, req.method(), req.uri(), &mut headers, client);
    let forbidden_by_request = rcc.is_some_and(|r| r.no_store);
    let forbidden_by_route = !route.cfg.storage.no_store.is_empty()
        && any_match(
            &route.cfg.storage.no_store,
            req.headers(),
            req.uri().query(),
        );
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
        body: None,
    }
}
