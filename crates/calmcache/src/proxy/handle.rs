//! The request path, decide then do: admit, route, prepare, look up,
//! [`plan`](crate::proxy::plan::plan), and one `match` that executes the plan;
//! every path returns one [`Answer`], which [`handle`] records once.
//!
//! ```text
//! handle ─ admit ─ route_for ─┬─ internal route ─────────────── 404 (answering::internal)
//!   │                         ├─ return / root ─────────────── answering::answer (no origin, no
//!   │                         │                                zone); a file route without the
//!   │                         │                                file: route_for from the next route
//!   │                         ├─ limit::admit (limits.rs: applies_to "all"; refused: 429);
//!   │                         │   every branch to the origin below passes limit::to_origin
//!   │                         │   first (applies_to "origin"), once; a hit never does, nor
//!   │                         │   a follower of a flight (a fetch passes it as the leader)
//!   │                         ├─ Upgrade: websocket, or an HTTP/2 CONNECT with :protocol websocket
//!   │                         │   (route.websocket) ── tunnel::open (never cached); such a
//!   │                         │   CONNECT on another route: 403 (TunnelOff)
//!   │                         ├─ GET|HEAD with a body ──────── read whole (request_body.rs), pass with it
//!   │                         ├─ QUERY, POST with cache_post ─ read whole, keyed by method + body digest
//!   │                         │                                (body_key.rs), on as a GET; too large
//!   │                         │                                or not JSON: pass with it
//!   │                         ├─ no zone / not GET|HEAD / ambiguous key ─ pass (pass.rs; unsafe
//!   │                         │                                methods invalidate, RFC 9111 §4.4)
//!   │                         ├─ bypass condition ──────────── fetch::bypass (no lookup, no coalescing)
//!   │                         └─ lookup (key template, Vary) ─ plan::plan ─┬─ Serve ─────────── respond::serve
//!   │                                                                      ├─ RefreshBehind ─── serve + refresh task
//!   │                                                                      ├─ ServeStale ────── serve + refresh task
//!   │                                                                      ├─ RefreshInPath ─── fill in own path (PER)
//!   │                                                                      ├─ Fetch(why) ────── fetch.rs: join flight,
//!   │                                                                      │   leader fills, followers wait
//!   │                                                                      ├─ Pass(fwd) ─────── pass (HEAD, no convert_head)
//!   │                                                                      └─ OnlyIfCached ──── 504
//!   ├─ error_pages (the route has some): error_pages::after (proxy/error_pages.rs)
//!   └─ record(Answer): route + zone counters, latency histogram of its class, access log class
//! ```
//! Invariant: a plain hit takes no lock but one quick_cache shard read lock,
//! does no I/O, and shares the body `Bytes` instead of copying it. Only a hit
//! that draws a refresh (the last delta of life, or stale-while-revalidate)
//! goes on to try a refresh slot and the single-flight table.

use std::convert::Infallible;
use std::sync::Arc;

use calmcache_core::{
    decide, CacheKey, CacheStatus, CachedObject, Fwd, KeyRef, RequestCacheControl,
};
use http::{Method, Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::config::conditions::any_match;
use crate::http::body::ResponseBody;
use crate::http::error::{ErrorKind, ProxyError};
use crate::net::conn::Peer;
use crate::proxy::answer::{Answer, Told};
use crate::proxy::answering;
use crate::proxy::body_key::KeyedBody;
use crate::proxy::edge::Handshake;
use crate::proxy::error_pages::{self, Pending};
use crate::proxy::fetch::{self, fetch_request, refresh_in_background, Fetch};
use crate::proxy::fill::FetchRequest;
use crate::proxy::header_rules;
use crate::proxy::hints;
use crate::proxy::limit::{self, Held};
use crate::proxy::lookup::{lookup, Found, PrimaryKey};
use crate::proxy::pass::{pass, refused, with_body};
use crate::proxy::plan::{self, Asked, Plan, Stored, Why};
use crate::proxy::respond::{error_response, only_if_cached, serve, Ask};
use crate::proxy::state::{AnsweringRoute, Entry, Proxy, Route, Worker};
use crate::telemetry::metrics::{self, CallSlot, Served};
use calmcache_core::Zone;

/// Answers one client request. Never fails: errors become 4xx/5xx responses.
/// Records the answer once, as it leaves: its route's and zone's counters,
/// the latency histogram of its class (timed to its response head); with
/// the access log on, attaches a [`Served`] to the response.
pub(crate) async fn handle(
    worker: Arc<Worker>,
    req: Request<Incoming>,
    client: Peer,
) -> Result<Response<ResponseBody>, Infallible> {
    let started = std::time::Instant::now();
    let slot = worker.proxy.note_served.then(CallSlot::default);
    let answer = metrics::with_call_slot(slot.clone(), answer(&worker, req, client)).await;
    Ok(record(&worker.proxy, answer, started, slot))
}

/// Counts `answer` where it leaves (the one place answers are counted).
fn record(
    proxy: &Proxy,
    answer: Answer<'_>,
    started: std::time::Instant,
    slot: Option<CallSlot>,
) -> Response<ResponseBody> {
    let Answer {
        mut resp,
        told,
        placed,
    } = answer;
    match told {
        Told::Answered(activity, report) => {
            activity.record(&report);
            let class = report.status.class();
            proxy.metrics.answered(class, started.elapsed());
            // A route over several zones: the zone its key was placed in.
            if let Some(zone) = placed.and_then(|z| proxy.zone_activity.get(z)) {
                zone.count(class);
            }
        }
        Told::Refused(Some((activity, report))) => activity.record(&report),
        Told::Limited(activity) => activity.limited.inc(),
        Told::Refused(None) | Told::Unclassed => {}
    }
    if let Some(slot) = slot {
        let upstream = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        let class = told.class();
        resp.extensions_mut().insert(Served { class, upstream });
    }
    resp
}

async fn answer(worker: &Worker, mut req: Request<Incoming>, client: Peer) -> Answer<'_> {
    // Borrowed, not cloned: no reference count shared by all threads is
    // touched on a hit (the `worker` Arc is this thread's own).
    let proxy = &worker.proxy;
    let mut admission = admit(worker, &mut req, client);
    let (route, client, tunnel) = loop {
        admission = match admission {
            Admission::Routed(route, client) => break (route, client, None),
            Admission::Refused(resp) => return Answer::refused(resp),
            Admission::Internal(entry) => {
                return Box::pin(internal(worker, entry, &req, client)).await;
            }
            Admission::Purge => {
                let purged = Box::pin(crate::proxy::purge::purge_method(proxy, &req, client.addr));
                return Answer::unclassed(purged.await);
            }
            Admission::Tunnel(route, client, handshake) => break (route, client, Some(handshake)),
            Admission::Answering(route, prepared, onward) => {
                match Box::pin(answer_itself(worker, route, &req, prepared)).await {
                    Some(answer) => return answer,
                    // A file route without the file: on to the next route.
                    None => onward.next(worker, &mut req),
                }
            }
        };
    };
    // The route's response rules: `None`, at no cost, for most routes.
    let kept = header_rules::keep(&route.cfg, &req, client);
    if let Some(handshake) = tunnel {
        let answer = Box::pin(self::tunnel(worker, route, req, (client, handshake))).await;
        return dressed(&route.cfg, &route.activity, answer, kept);
    }
    // The route's limits (proxy/limit.rs): nothing held, no allocation,
    // for a route without them. A refusal, by either gate, is an answer
    // like any other: error pages and response rules apply to it (NGINX's
    // limit_req 503 goes through `error_page 503`).
    let mut held = Held::default();
    // Copied only when the route has error pages (proxy/error_pages.rs).
    let answer = match (Pending::of(&route.cfg, &req), &kept) {
        (None, None) => {
            // Not through `limited`: one async layer less on the hit path
            // (the request future's size, below).
            if let Err(refused) = limit::admit(route, &req, client, &mut held).await {
                return refused;
            }
            let answer = routed(proxy, route, req, client, &mut held).await;
            return held.answer(answer);
        }
        (None, Some(_)) => Box::pin(limited(proxy, route, req, client, &mut held)).await,
        (Some(pending), _) => {
            let answer = Box::pin(limited(proxy, route, req, client, &mut held)).await;
            let after = error_pages::after(worker, &route.cfg, &pending, answer, client);
            Box::pin(after).await
        }
    };
    dressed(&route.cfg, &route.activity, held.answer(answer), kept)
}

/// A routed request through its route's `all` limits, then on.
async fn limited<'w>(
    proxy: &'w Arc<Proxy>,
    route: &'w Arc<Route>,
    req: Request<Incoming>,
    client: Peer,
    held: &mut Held,
) -> Answer<'w> {
    match limit::admit(route, &req, client, held).await {
        Ok(()) => routed(proxy, route, req, client, held).await,
        Err(refused) => refused,
    }
}

/// The answer of a route that answers itself, with its error page and
/// response rules; `None` for a file route without the file.
async fn answer_itself<'w>(
    worker: &'w Worker,
    route: &'w Arc<crate::proxy::state::AnsweringRoute>,
    req: &Request<Incoming>,
    prepared: Peer,
) -> Option<Answer<'w>> {
    let kept = header_rules::keep(&route.cfg, req, prepared);
    let asked = answering::Asked::of(req);
    let answer = answering::answer(route, &asked, prepared).await?;
    let answer = pages(worker, &route.cfg, req, answer, prepared).await;
    let answer = compressed(&route.cfg, req, answer);
    Some(dressed(&route.cfg, &route.activity, answer, kept))
}

/// `answer` of a route that answers itself, gzipped on the fly when the
/// route's `compress_passed` says so (NGINX's gzip on a file or a return):
/// nothing such a route answers is stored, so every answer is a passed one.
fn compressed<'w>(
    route: &crate::config::RouteConfig,
    req: &Request<Incoming>,
    answer: Answer<'w>,
) -> Answer<'w> {
    let compression = &route.answers.compress_passed;
    if compression.is_off() {
        return answer;
    }
    let client = compression.client(crate::http::compress_passed::ClientAsk {
        headers: req.headers(),
        head_only: *req.method() == Method::HEAD,
    });
    let resp = compression.apply(client, answer.resp);
    Answer { resp, ..answer }
}

/// An `internal` route's 404, with its error page (gzipped as the route's
/// `compress_passed` says, as NGINX gzips the page) and its response rules
/// (NGINX's `add_header ... always` reaches its 404 too: to_client applies
/// the `always` ones on any status).
async fn internal<'w>(
    worker: &'w Worker,
    entry: &'w Entry,
    req: &Request<Incoming>,
    client: Peer,
) -> Answer<'w> {
    let kept = header_rules::keep(entry.cfg(), req, client);
    let answer = answering::internal(entry.activity());
    let answer = pages(worker, entry.cfg(), req, answer, client).await;
    let answer = compressed(entry.cfg(), req, answer);
    dressed(entry.cfg(), entry.activity(), answer, kept)
}

/// `answer` with the route's response rules, when it has some.
fn dressed<'w>(
    route: &crate::config::RouteConfig,
    activity: &crate::telemetry::stats::Activity,
    mut answer: Answer<'w>,
    kept: Option<Box<header_rules::Kept>>,
) -> Answer<'w> {
    if let Some(kept) = kept {
        header_rules::to_client(route, activity, &mut answer, &kept);
    }
    answer
}

/// `answer` after an answering route: its error page, if it has one.
async fn pages<'w>(
    worker: &'w Worker,
    route: &crate::config::RouteConfig,
    req: &Request<Incoming>,
    answer: Answer<'w>,
    client: Peer,
) -> Answer<'w> {
    match Pending::of(route, req) {
        None => answer,
        Some(pending) => {
            Box::pin(error_pages::after(worker, route, &pending, answer, client)).await
        }
    }
}

/// A WebSocket upgrade: origin-bound by nature, so every limit of the route
/// applies. A connections limit counts it for the life of the tunnel.
async fn tunnel<'w>(
    worker: &'w Worker,
    route: &'w Arc<Route>,
    req: Request<Incoming>,
    asked: (Peer, Handshake),
) -> Answer<'w> {
    let client = asked.0;
    let mut held = Held::default();
    let mut passed = limit::admit(route, &req, client, &mut held).await;
    if passed.is_ok() {
        passed = limit::to_origin(route, &req, client, &mut held).await;
    }
    match passed {
        Ok(()) => crate::proxy::tunnel::open(worker, route, req, asked, held).await,
        Err(refused) => pages(worker, &route.cfg, &req, refused, client).await,
    }
}

/// A routed request, admitted by its limits: read, look up, plan, act.
/// Each step that finds the request bound for the origin passes it through
/// the route's origin limits first (`limit::to_origin`, once per request).
async fn routed<'w>(
    proxy: &'w Arc<Proxy>,
    route: &'w Arc<Route>,
    req: Request<Incoming>,
    client: Peer,
    held: &mut Held,
) -> Answer<'w> {
    // A body read before the lookup goes to the origin, or may (a QUERY
    // too large to key): limited as origin-bound before it is read.
    if crate::proxy::request_body::announced(&req) || route.keyed_by_body(req.method()) {
        if let Err(refused) = limit::to_origin(route, &req, client, held).await {
            return refused;
        }
    }
    let (req, body) = match read_body(proxy, route, req, client).await {
        Ok(read) => read,
        Err(answer) => return answer,
    };
    let body = body.as_deref();
    let (zone, asked) = match cacheable(route, &req, body) {
        Ok(cacheable) => cacheable,
        Err(fwd) => {
            if let Err(refused) = limit::to_origin(route, &req, client, held).await {
                return refused;
            }
            return Box::pin(pass(proxy, route, req, client, fwd)).await;
        }
    };
    let (primary, ask) = key_and_ask(route, &req, client, asked, body);
    let key = primary.key_ref();
    // One zone, or among a route's `zones` the one its hash places the key in.
    let zone = route.zone_for(&key).unwrap_or(zone);
    let placed = placed(route, zone);
    let headers = req.headers();
    if !route.cfg.storage.bypass.is_empty()
        && any_match(&route.cfg.storage.bypass, headers, req.uri().query())
    {
        let asked = (&req, client, body, &ask);
        let answer = Box::pin(bypassed(route, asked, key.to_owned_key(), held)).await;
        return Answer { placed, ..answer };
    }
    let rcc = directives(route, headers);
    let found = lookup(route, zone, &key, headers).await;
    let now = Instant::now();
    let plan = plan::plan(asked, &rcc, stored(route, &found, now), now);
    let exec = Exec {
        proxy,
        route,
        zone,
        req: &req,
        client,
        body,
        key,
        found: &found,
        rcc: &rcc,
        ask: &ask,
        now,
    };
    let answer = match plan {
        Plan::Serve(copy, report) => serve(route, copy, report, &ask, now),
        Plan::RefreshBehind(copy) => exec.refresh_behind(copy),
        Plan::ServeStale(copy) => exec.serve_stale(copy),
        Plan::RefreshInPath(copy) => Box::pin(exec.refresh_in_path(copy)).await,
        Plan::Fetch(why, stale) => {
            // Passed by the flight's leader only (fetch.rs): a follower
            // served by the leader's fetch never reaches the origin.
            let gate = limit::ToOrigin {
                route,
                req: &req,
                client,
                held,
            };
            Box::pin(exec.fetch(why, stale, gate)).await
        }
        Plan::Pass(fwd) => Box::pin(gated_pass(proxy, route, req, client, fwd, held)).await,
        Plan::OnlyIfCached(fwd) => only_if_cached(route, fwd),
    };
    Answer { placed, ..answer }
}

/// A request the route's `bypass` conditions match: limited as
/// origin-bound, then fetched (with its body) and stored, never looked up.
async fn bypassed<'w>(
    route: &'w Arc<Route>,
    (req, client, body, ask): (&Request<Incoming>, Peer, Option<&KeyedBody>, &Ask<'_>),
    key: CacheKey,
    held: &mut Held,
) -> Answer<'w> {
    if let Err(refused) = limit::to_origin(route, req, client, held).await {
        return refused;
    }
    let mut request = fetch_request(route, req, client, None);
    request.body = body.map(|b| b.fetch.clone());
    fetch::bypass(route, key, request, ask).await
}

/// A pass, through the route's origin limits first.
async fn gated_pass<'w>(
    proxy: &'w Arc<Proxy>,
    route: &'w Arc<Route>,
    req: Request<Incoming>,
    client: Peer,
    fwd: Fwd,
    held: &mut Held,
) -> Answer<'w> {
    if let Err(refused) = limit::to_origin(route, &req, client, held).await {
        return refused;
    }
    pass(proxy, route, req, client, fwd).await
}

/// The request's body where it must be read before the lookup: a GET or
/// HEAD body, read whole and passed (request_body.rs: `Err`, the answer);
/// the body of a QUERY, or a POST on a route that caches it, read whole and
/// digested for its key (body_key.rs; or passed: `Err`). Any other request
/// is given back as it came, its body unread.
async fn read_body<'w>(
    proxy: &Proxy,
    route: &'w Arc<Route>,
    req: Request<Incoming>,
    client: Peer,
) -> Result<(Request<Incoming>, Option<Box<KeyedBody>>), Answer<'w>> {
    if crate::proxy::request_body::announced(&req) {
        let req = Box::pin(with_body(proxy, route, req, client)).await?;
        return Ok((req, None));
    }
    if !route.keyed_by_body(req.method()) {
        return Ok((req, None));
    }
    let (req, body) = Box::pin(crate::proxy::body_key::read(proxy, route, req, client)).await?;
    Ok((req, Some(Box::new(body))))
}

/// A request's primary key, and what its response depends on in it.
fn key_and_ask<'q>(
    route: &Route,
    req: &'q Request<Incoming>,
    client: Peer,
    asked: Asked,
    body: Option<&KeyedBody>,
) -> (PrimaryKey<'q>, Ask<'q>) {
    let pq = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let headers = req.headers();
    let host = crate::http::headers::host_of(req);
    let mut primary = PrimaryKey::of(route, client.scheme(), req.method(), host, pq, headers);
    if let Some(body) = body {
        primary = primary.with_body(req.method(), &body.digest);
    }
    let ask = Ask {
        head_only: asked != Asked::Get,
        headers,
        key: route
            .cfg
            .answers
            .cache_status_key
            .then(|| primary.to_string()),
    };
    (primary, ask)
}

/// The request's `Cache-Control`, when the route honours it.
fn directives(route: &Route, headers: &http::HeaderMap) -> RequestCacheControl {
    if route.honors_client_cache_control() {
        RequestCacheControl::from_headers(headers)
    } else {
        RequestCacheControl::default()
    }
}

/// What the lookup found, with the refresh policy's decision for a copy.
fn stored<'f>(route: &Route, found: &'f Found, now: Instant) -> Stored<'f, &'f Arc<CachedObject>> {
    match &found.object {
        None => Stored::Nothing(found.fwd),
        Some(copy) => Stored::Copy {
            copy,
            meta: &copy.meta,
            decision: decide(&route.policy, &copy.meta, now, &mut rand::rng()),
        },
    }
}

/// What executing a plan needs of the request, borrowed.
struct Exec<'a, 'w> {
    proxy: &'w Arc<Proxy>,
    route: &'w Arc<Route>,
    zone: &'a Zone,
    req: &'a Request<Incoming>,
    client: Peer,
    /// The body the request is keyed by, sent with each fetch of its key.
    body: Option<&'a KeyedBody>,
    key: KeyRef<'a>,
    found: &'a Found,
    rcc: &'a RequestCacheControl,
    ask: &'a Ask<'a>,
    now: Instant,
}

impl<'w> Exec<'_, 'w> {
    /// The request a fill sends for this one (with its directives, or
    /// none for a background refresh).
    fn request(&self, rcc: Option<&RequestCacheControl>) -> FetchRequest {
        let mut request = fetch_request(self.route, self.req, self.client, rcc);
        request.body = self.body.map(|b| b.fetch.clone());
        request
    }

    /// The key this request's fetch coalesces on: the variant's when known.
    fn flight(&self) -> CacheKey {
        let variant = self.found.variant.clone();
        variant.unwrap_or_else(|| self.key.to_owned_key())
    }

    /// SUS: serves the fresh copy and starts a background refresh.
    fn refresh_behind(&self, copy: &Arc<CachedObject>) -> Answer<'w> {
        let route = self.route;
        // Inside the window most requests draw; only the one that starts
        // the refresh pays for building its request.
        let variant = self.found.variant.as_ref();
        let started = refresh_in_background(
            self.proxy,
            route,
            self.key,
            variant,
            || self.request(None),
            copy,
        );
        let status = if started {
            route.activity.early_refreshes.inc();
            CacheStatus::HitRefreshEarly
        } else {
            CacheStatus::Hit
        };
        serve(route, copy, status.report(), self.ask, self.now)
    }

    /// Stale-while-revalidate: serves the stale copy and starts a
    /// background refresh.
    fn serve_stale(&self, copy: &Arc<CachedObject>) -> Answer<'w> {
        let variant = self.found.variant.as_ref();
        let request = || self.request(None);
        refresh_in_background(self.proxy, self.route, self.key, variant, request, copy);
        let report = CacheStatus::StaleWhileRevalidate.report();
        serve(self.route, copy, report, self.ask, self.now)
    }

    /// PER: refreshes in this request's path, unless a refresh is running
    /// (then the copy, still fresh, is served).
    async fn refresh_in_path(&self, copy: &Arc<CachedObject>) -> Answer<'w> {
        let route = self.route;
        let Some(permit) = self.proxy.flights.try_lead(&self.flight()) else {
            return serve(route, copy, CacheStatus::Hit.report(), self.ask, self.now);
        };
        route.activity.early_refreshes.inc();
        hints::before_wait(route, &self.asking(), Some(copy));
        let request = self.request(Some(self.rcc));
        let primary = self.key.to_owned_key();
        let answer = fetch::early(route, primary, request, permit, copy)
            .answer(self.ask)
            .await;
        self.remember_hints(&answer);
        answer
    }

    /// Fetches for `why`, replacing `stale` if any (fetch.rs), through
    /// `gate` if it goes to the origin itself.
    async fn fetch(
        &self,
        why: Why,
        stale: Option<&Arc<CachedObject>>,
        gate: limit::ToOrigin<'_, 'w, Incoming>,
    ) -> Answer<'w> {
        let fetch = Fetch {
            primary: self.key.to_owned_key(),
            flight: self.flight(),
            request: self.request(Some(self.rcc)),
            stale: stale.cloned(),
            why,
            // A forced fetch: a copy stored since the request came is as good.
            since: (why == Why::Request).then_some(self.now),
        };
        hints::before_wait(self.route, &self.asking(), stale.map(|s| &**s));
        let answer = fetch
            .run(self.proxy, self.route, self.zone, self.ask, gate)
            .await;
        self.remember_hints(&answer);
        answer
    }

    /// The request as Early Hints see it (proxy/hints.rs).
    fn asking(&self) -> hints::Asking<'_> {
        hints::Asking {
            headers: self.req.headers(),
            scheme: self.client.scheme(),
            host: crate::http::headers::host_of(self.req),
            key: self.key,
        }
    }

    /// Keeps the hint links of an answer this request's fetch stored.
    fn remember_hints(&self, answer: &Answer<'_>) {
        if let Told::Answered(_, report) = &answer.told {
            if report.stored && self.route.cfg.answers.early_hints.on {
                hints::remember(self.route, &self.asking(), answer.resp.headers());
            }
        }
    }
}

/// What the edge made of a request.
enum Admission<'w> {
    /// Routed: on to the cache.
    Routed(&'w Arc<Route>, Peer),
    /// A WebSocket handshake (of either kind) on a route that tunnels them.
    Tunnel(&'w Arc<Route>, Peer, Handshake),
    /// A route that answers itself (proxy/answering/), with the client as
    /// prepared for it and where routing goes on if its file is absent.
    Answering(&'w Arc<AnsweringRoute>, Peer, Box<Onward>),
    /// An `internal` route: 404 (and its error page, if it has one).
    Internal(&'w Entry),
    /// A `PURGE` request (purge.rs).
    Purge,
    /// Refused, or no route: answered already.
    Refused(Response<ResponseBody>),
}

/// Admits `req` at the edge (edge.rs: the one trusted view of the request;
/// everything below reads it as admitted and prepared, never its raw form)
/// and finds its route.
fn admit<'w>(worker: &'w Worker, req: &mut Request<Incoming>, client: Peer) -> Admission<'w> {
    let admitted = match crate::proxy::edge::admit(req, client) {
        Ok(admitted) => admitted,
        Err(e) => {
            worker.proxy.metrics.requests_refused.inc();
            return Admission::Refused(refused(&e, req.version()));
        }
    };
    if req.method().as_str() == "PURGE" {
        return Admission::Purge;
    }
    Onward {
        admitted,
        from: 0,
        client,
    }
    .next(worker, req)
}

/// Where routing of an admitted request goes on: from the table's entry
/// `from`, with what the edge learnt and the client as it came (a file
/// route without the file hands the request to the next route that takes
/// it, which prepares it for itself).
struct Onward {
    admitted: crate::proxy::edge::Admitted,
    from: usize,
    client: Peer,
}

impl Onward {
    /// The first route from `from` on that takes `req`, prepared for it.
    fn next<'w>(self, worker: &'w Worker, req: &mut Request<Incoming>) -> Admission<'w> {
        let Onward {
            mut admitted,
            from,
            client,
        } = self;
        let own = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        // As admitted: lower-case, no default port (edge.rs); looked up only
        // when some route has `hosts`.
        let host = if worker.by_host {
            crate::http::headers::host_of(req)
        } else {
            ""
        };
        let Some((at, entry)) =
            worker.route_for(client.listener, host, admitted.match_target(own), from)
        else {
            let e = ProxyError::downstream(ErrorKind::NoRoute, own);
            return Admission::Refused(error_response(&e, &CacheStatus::Bypass.report()));
        };
        if entry.cfg().internal {
            return Admission::Internal(entry);
        }
        // Rare: kept only when the route must be found again below.
        let routed_host = admitted.recheck().then(|| host.to_owned());
        let prepared = match entry {
            // Read, not rewritten: the next route may get the request.
            Entry::Answering(_) => crate::proxy::edge::peer_of(req, entry.cfg(), client),
            Entry::Proxied(_) => {
                crate::proxy::edge::prepare(req, &mut admitted, entry.cfg(), client)
            }
        };
        if let Some(host) = routed_host {
            let own = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
            if worker
                .route_for(client.listener, &host, own, from)
                .map(|(a, _)| a)
                != Some(at)
            {
                let e = ProxyError::downstream(
                    ErrorKind::BadRequest,
                    "the path routes differently once its escapes are decoded",
                );
                worker.proxy.metrics.requests_refused.inc();
                return Admission::Refused(refused(&e, req.version()));
            }
        }
        let websocket = admitted.websocket;
        match entry {
            Entry::Proxied(route)
                if websocket != Handshake::None && route.cfg.requests.websocket =>
            {
                Admission::Tunnel(route, prepared, websocket)
            }
            // RFC 8441: an HTTP/1.1 handshake on such a route passes as a
            // plain request; a CONNECT cannot (ErrorKind::TunnelOff).
            _ if websocket == Handshake::Connect => {
                let e = ProxyError::downstream(ErrorKind::TunnelOff, own_target(req));
                Admission::Refused(refused(&e, req.version()))
            }
            Entry::Proxied(route) => Admission::Routed(route, prepared),
            Entry::Answering(route) => {
                let onward = Onward {
                    admitted,
                    from: at + 1,
                    client,
                };
                Admission::Answering(route, prepared, Box::new(onward))
            }
        }
    }
}

/// The request's path and query, for a refusal's log line.
fn own_target(req: &Request<Incoming>) -> String {
    req.uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned())
}

/// The zone a request on `route` is looked up in (the route's first) and
/// what it asked; or, for a request the cache stays out of, why it passes.
fn cacheable<'r>(
    route: &'r Route,
    req: &Request<Incoming>,
    body: Option<&KeyedBody>,
) -> Result<(&'r Arc<Zone>, Asked), Fwd> {
    let zone = match (&route.zone, req.method()) {
        (Some(zone), &Method::GET | &Method::HEAD) => zone,
        // QUERY, or POST with cache_post, keyed by its body.
        (Some(zone), _) if body.is_some() => zone,
        (None, _) => return Err(Fwd::Bypass),
        (Some(_), _) => return Err(Fwd::Method),
    };
    if !route.key_is_default
        && route
            .cfg
            .storage
            .key
            .is_ambiguous(req.uri().query().unwrap_or(""), req.headers())
    {
        // A keyed argument, cookie or field given twice: the key reads the
        // first, the origin may read the last. Never stored.
        return Err(Fwd::Bypass);
    }
    let asked = match req.method() == Method::HEAD {
        false => Asked::Get,
        true if route.cfg.requests.convert_head => Asked::HeadConverted,
        true => Asked::HeadPassed,
    };
    Ok((zone, asked))
}

/// Among `route`'s `zones`, the one the request was placed in (as its
/// index among the generation's zones), for the zone's counters.
fn placed(route: &Route, zone: &Arc<Zone>) -> Option<usize> {
    if route.zones.len() < 2 {
        return None;
    }
    let at = route.zones.iter().position(|(z, _)| Arc::ptr_eq(z, zone))?;
    route.cfg.storage.zones.get(at).copied()
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
    /// `metrics::with_call_slot` is flat; before, this future was 32 KiB and copying
    /// it cost a fifth of the CPU of HTTP/2 hits (issue 15).
    #[test]
    fn the_request_future_stays_small() {
        let handle = returned_size(&super::handle);
        let answer = returned_size(&super::answer);
        assert!(handle <= 4096, "handle's future is {handle} bytes");
        assert!(answer <= 3072, "answer's future is {answer} bytes");
    }
}
