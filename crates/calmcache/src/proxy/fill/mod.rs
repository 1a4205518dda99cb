//! Fetching an object from the origin and storing it: the one place a response
//! becomes a cached object.
//!
//! A fill runs in its own task (see `handle.rs`), so a client that goes away
//! does not cancel a fetch that other waiters need. It reports to followers
//! through its [`FetchPermit`] and to the request that started it through
//! [`FillReply`].
//!
//! ```text
//! fill ─ fleet: a copy another node stored ───────────────── Stored (shared)
//!   ├─ fleet: another node writes the body as it arrives ─── Streaming (its pieces)
//!   └─ send (GET, or a body-keyed QUERY/POST with its body; validators of
//!      the stale copy, RFC 9111 §4.3.1, never on POST)
//!      ├─ error / 5xx with a stale-if-error copy ─────────── Stale
//!      ├─ no zone, or no-store ───────────────────────────── Relay (stream)
//!      ├─ 304 for the stale copy ─ merge headers (§4.3.4) ─┐
//!      ├─ 5xx, not storable ─ collect ≤ 64 KiB ─ share ──── Relay (followers get it too)
//!      ├─ 200.. ─ evaluate ─ not storable ───────────────── Relay (stream)
//!      │                  ├─ large or open-ended ─ stream while storing ─ Streaming
//!      │                  └─ collect ≤ max_object_size ────┴─ store ─ Stored
//!      └─ too large ────────────────────────────────────────── Relay (prefix + rest)
//! store: Vary marker + variant key (vary.rs), compress once (compress.rs), insert
//! ```
//!
//! # Rooms
//! - `mod.rs`: the fill's arguments and answers, and [`fill`], the steps in
//!   order (ask the fleet, send, pick the zone, merge or keep).
//! - `send.rs`: the request upstream, sent and re-sent (a 304 that does not
//!   match), and whether the origin's answer can be used at all.
//! - `revalidate.rs`: the 304 merge (RFC 9111 §4.3.4) into the stored copy.
//! - `store.rs`: [`StoreCtx`](store::StoreCtx), built once per fill, and
//!   storing under the primary or variant key, compressed once.
//! - `collect.rs`: a body read whole within a limit, then stored.
//! - `stream.rs`: read-while-write, with the pump as a function of its own.
//! - `shared_error.rs`: a failing origin's answer handed to the followers.
//! - `fleet.rs`: every call a fill makes to the fleet's shared tier.
//! - `fleet_stream.rs`: a fill answered from another node's body while
//!   that node still fetches it (its pieces, verified, as they appear).
//!
//! Imports [`crate::http`], [`crate::fleet`] and the request path's own
//! growing bodies and outcomes; never the handler (`handle.rs`) that starts it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::net::origin_body::OriginBody;
use calmcache_core::{CacheKey, CachedObject, FetchPermit, NotStorable};
use http::header::CONTENT_LENGTH;
use http::uri::PathAndQuery;
use http::{HeaderMap, Response, StatusCode};
use tokio::time::Instant;

use crate::fleet::Before;
use crate::http::body::{ResponseBody, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};
use crate::net::budget::Admission;
use crate::proxy::growing::StreamingHead;
use crate::proxy::outcome::{FillOutcome, OwnFields, Requester};
use crate::proxy::state::Route;

mod collect;
mod fleet;
mod fleet_stream;
mod revalidate;
mod send;
mod shared_error;
mod store;
mod stream;

pub(crate) use send::upstream_request;
pub(crate) use stream::STREAM_MIN;

use send::{Sent, Times};
use store::StoreCtx;

/// The request a fill sends upstream: a GET for the whole object, or the
/// QUERY or POST of a request keyed by its body, with that body.
#[derive(Clone, Debug)]
pub(crate) struct FetchRequest {
    /// Path and query, already parsed (nothing to re-parse or fall back on).
    pub path_and_query: PathAndQuery,
    /// Headers to send: the client's end-to-end headers with `X-Forwarded-*`,
    /// without conditionals or `Range` (the cache wants the whole 200).
    pub headers: HeaderMap,
    /// The client sent `Authorization` (RFC 9111 §3.5).
    pub has_authorization: bool,
    /// False when the request or a `no_store` condition forbids storing.
    pub store: bool,
    /// The client's own request headers: a variant is selected by these
    /// (RFC 9111 §4.1), as lookups are, not by the rewritten upstream ones.
    pub selecting: HeaderMap,
    /// A request keyed by its body (QUERY, a cached POST): sent with that
    /// method and body, by the fill and by every refresh of its key.
    pub body: Option<FetchBody>,
}

/// The method and body of a request keyed by its body (body_key.rs).
#[derive(Clone, Debug)]
pub(crate) struct FetchBody {
    /// QUERY or POST.
    pub method: http::Method,
    /// The body, whole (at most the route's `max_body_key`).
    pub bytes: bytes::Bytes,
}

impl FetchRequest {
    /// Whether the client sent credentials (`Authorization`, `Cookie`): the
    /// one rule for whether an answer speaks for the URL, read by
    /// hit-for-miss (only anonymous answers mark a key) and by shared error
    /// pages (only an anonymous leader's page reaches its waiters).
    pub(crate) fn requester(&self) -> Requester {
        if self.has_authorization || self.selecting.contains_key(http::header::COOKIE) {
            Requester::Credentialed
        } else {
            Requester::Anonymous
        }
    }
}

/// Why a response was relayed instead of stored (`Cache-Status` detail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotStored {
    /// The response itself says so.
    Response(NotStorable),
    /// Over the zone's `max_object_size`.
    TooLarge,
    /// The zone's storage failed (disk full, I/O error, read-only).
    StoreFailed,
    /// A full disk zone's admission: the key's first miss (core
    /// disk/admission.rs); its next miss is stored.
    NotAdmitted,
    /// The request (`no-store`) or a `no_store` condition said so.
    Request,
    /// The route has no zone.
    NoZone,
    /// `max_inflight_body` was spent when the fill started.
    InflightBudget,
}

impl NotStored {
    /// The `detail` token.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NotStored::Response(why) => why.as_str(),
            NotStored::TooLarge => "too-large",
            NotStored::StoreFailed => "store-failed",
            NotStored::NotAdmitted => "not-admitted",
            NotStored::Request => "no-store-request",
            NotStored::NoZone => "no-zone",
            NotStored::InflightBudget => "inflight-budget",
        }
    }
}

/// What the request that started a fill gets.
pub(crate) enum FillReply {
    /// Stored; serve `object`.
    Stored {
        /// The object as stored.
        object: Arc<CachedObject>,
        /// What the origin answered: 304 on a revalidation.
        origin_status: u16,
        /// Taken from the fleet's shared tier (another node's fetch), not
        /// from the origin.
        shared: bool,
        /// What this client gets that the stored copy does not hold.
        own: OwnFields,
    },
    /// Not stored: relay this response (hop-by-hop removed).
    Relay(Response<ResponseBody>, NotStored),
    /// The origin failed (with this status, when it answered) and this copy
    /// is inside stale-if-error.
    Stale(Arc<CachedObject>, Option<u16>),
    /// The origin failed and there is no usable copy.
    Failed(ProxyError),
    /// The origin budget was full and this copy may stand in (inside the
    /// route's `stale_if_busy` or stale-if-error): served at once.
    Busy(Arc<CachedObject>),
    /// Storable and large: answer from the head now; the body streams to
    /// every reader while it is stored. With what this client gets that
    /// the stored copy does not hold.
    Streaming(Arc<StreamingHead>, OwnFields),
}

impl FillReply {
    /// What the request that ran the fill gets besides the stored copy
    /// (taken out: the reply then carries none).
    pub(crate) fn take_own(&mut self) -> OwnFields {
        match self {
            FillReply::Stored { own, .. } | FillReply::Streaming(_, own) => std::mem::take(own),
            _ => OwnFields::default(),
        }
    }
}

/// What a fill is asked for: built with [`FillArgs::new`], then
/// [`leading`](FillArgs::leading) a flight and
/// [`replacing`](FillArgs::replacing) a stored copy when there is one.
pub(crate) struct FillArgs {
    /// The route the request matched.
    pub route: Arc<Route>,
    /// The URI's key: the object's own, or its Vary marker's.
    pub primary: CacheKey,
    /// What to send upstream.
    pub request: FetchRequest,
    /// The flight this fill leads; its followers hear what became of it.
    pub permit: Option<FetchPermit<FillOutcome>>,
    /// The stored copy this fetch replaces: its validators make the request
    /// conditional, and it backs stale-if-error.
    pub stale: Option<Arc<CachedObject>>,
    /// How it may wait for an origin slot: [`Admission::Wait`] unless
    /// [`background`](FillArgs::background); a fill with a copy that may
    /// stand in never waits either ([`admission`]).
    pub admission: Admission,
    /// Which stored copy may stand in while the origin is busy.
    pub stand_in: StandIn,
}

/// Which stored copy may stand in for the origin's answer while its
/// budget is full ([`busy_copy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StandIn {
    /// A fresh copy, one inside the route's `stale_if_busy` (where the
    /// origin granted stale use), or one inside stale-if-error.
    Busy,
    /// The client's directives asked for a fresh answer (`no-cache`,
    /// `max-age`...): only stale-if-error, as when the origin fails.
    ErrorOnly,
}

impl FillArgs {
    /// A fill of `request` for `primary`, leading no flight and replacing
    /// no stored copy.
    pub(crate) fn new(route: Arc<Route>, primary: CacheKey, request: FetchRequest) -> Self {
        FillArgs {
            route,
            primary,
            request,
            permit: None,
            stale: None,
            admission: Admission::Wait,
            stand_in: StandIn::Busy,
        }
    }

    /// The client's request directives forced this fetch: no copy stands
    /// in past stale-if-error ([`StandIn::ErrorOnly`]).
    pub(crate) fn forced(mut self) -> Self {
        self.stand_in = StandIn::ErrorOnly;
        self
    }

    /// A background refresh or warm-up: never queued for an origin slot,
    /// skipped when the budget is full.
    pub(crate) fn background(mut self) -> Self {
        self.admission = Admission::TryOnly;
        self
    }

    /// The refresh of a copy served past its lifetime while the origin is
    /// busy: queued for a slot ahead of the requests that wait
    /// ([`Admission::Ahead`]).
    pub(crate) fn ahead(mut self) -> Self {
        self.admission = Admission::Ahead;
        self
    }

    /// The fill leads the flight `permit`.
    pub(crate) fn leading(mut self, permit: FetchPermit<FillOutcome>) -> Self {
        self.permit = Some(permit);
        self
    }

    /// The fill replaces `stale`, when there is a stored copy.
    pub(crate) fn replacing(mut self, stale: Option<Arc<CachedObject>>) -> Self {
        self.stale = stale;
        self
    }
}

/// Fetches `args.request` for the URI keyed `args.primary`, stores it if
/// allowed (under the primary key or, when the response varies, under its
/// variant key), and reports to followers.
pub(crate) async fn fill(args: FillArgs) -> FillReply {
    let started = Instant::now();
    let request_time = SystemTime::now();
    let FillArgs {
        route,
        primary,
        request: fetch,
        permit,
        stale,
        admission,
        stand_in,
    } = args;
    let admission = self::admission(&route, admission, stale.as_ref(), stand_in);
    // Fleet mode: a fresh copy another node stored, or the fleet's lease
    // for this fetch (or a wait for the node that holds it).
    let lease = match fleet::before(&route, &primary, &fetch, &permit, stale.as_deref()).await {
        Some(Before::Take(object, names)) => {
            return fleet::take_shared(&route, &primary, &fetch, permit, object, names).await
        }
        Some(Before::Fetch(ours)) => ours,
        Some(Before::Stream(streamed)) => {
            return fleet_stream::stream_from_fleet(route, primary, fetch, permit, streamed)
        }
        None => None,
    };
    let sending = send::Sending {
        stale,
        request_time,
        admission,
        stand_in,
    };
    let sent = match send::send(&route, &primary, &fetch, &permit, sending).await {
        Ok(sent) => sent,
        Err(failed) => return fail(permit, failed.error, failed.stale, failed.status),
    };
    let Sent {
        parts,
        body,
        revalidating,
        usable_stale,
        times,
    } = sent;
    let zone = match (route.zone_for(&primary.as_ref()), fetch.store) {
        (Some(zone), true) => zone.clone(),
        (None, _) => return relay(permit, parts, body, NotStored::NoZone),
        (Some(_), false) => return relay(permit, parts, body, NotStored::Request),
    };
    if fetch.body.is_some() {
        // Before anything is stored under a body key: a purge of this URL
        // then sweeps this zone for its body variants (body_key.rs).
        zone.body_uris.note_body_key(&primary);
    }
    let ctx = StoreCtx {
        route,
        zone,
        primary,
        fetch,
        permit,
        origin_status: parts.status.as_u16(),
        started,
        lease,
        own: OwnFields::default(),
    };
    // RFC 9111 §4.3.4: a 304 freshens the stored response it validates.
    match revalidating {
        Some(old) if parts.status == StatusCode::NOT_MODIFIED => {
            // The 304's slot goes back now: the merge reads and stores, and
            // its fallback may ask the origin again.
            drop(body);
            revalidate::merge(ctx, old, &parts.headers, times, admission).await
        }
        _ => keep(ctx, parts, body, usable_stale, times).await,
    }
}

/// A new response for a zone: evaluated (RFC 9111 §3), then relayed,
/// shared with the followers as an error, streamed to its readers while
/// stored, or collected and stored.
async fn keep(
    mut ctx: StoreCtx,
    parts: http::response::Parts,
    body: TimeoutBody<OriginBody>,
    usable_stale: Option<Arc<CachedObject>>,
    times: Times,
) -> FillReply {
    let storable = match times.evaluate(&ctx.fetch, ctx.origin_status, &parts.headers, &ctx.route) {
        Ok(storable) => storable,
        Err(why) if parts.status.is_server_error() && ctx.permit.is_some() => {
            // The origin is failing: its answer goes to every follower, so
            // that one request reaches it, not one per waiting client.
            let requester = ctx.fetch.requester();
            return shared_error::share_error(&ctx.route, ctx.permit, parts, body, why, requester)
                .await;
        }
        Err(why) => return relay(ctx.permit, parts, body, NotStored::Response(why)),
    };
    ctx.own = OwnFields::of(&parts.headers, &storable.strip_fields);
    let declared = content_length(&parts.headers);
    if declared.is_some_and(|n| n > ctx.zone.tier.max_object_size()) {
        return relay(ctx.permit, parts, body, NotStored::TooLarge);
    }
    // `max_inflight_body`: past it, a fill buffers nothing and stores nothing.
    let Some(held) = ctx.route.inflight.admit() else {
        tracing::debug!(key = %ctx.primary, "max_inflight_body spent; relayed uncached");
        return relay(ctx.permit, parts, body, NotStored::InflightBudget);
    };
    // A small body of declared length arrives at once: collected, then
    // stored. Any other streams to its readers as it arrives, a body of
    // unknown length above all (server-sent events, early-flushed HTML
    // must not wait for the end), and is stored when it ends cleanly.
    if declared.is_none_or(|n| n > STREAM_MIN) {
        let start = stream::StreamStart {
            parts,
            storable,
            len: declared,
            held,
        };
        return stream::stream_fill(ctx, start, body);
    }
    collect::collect_and_store(ctx, parts, body, storable, held, usable_stale).await
}

/// How a fill may wait for an origin slot: never while a copy may stand
/// in when the origin is busy ([`busy_copy`]), else as it was asked.
fn admission(
    route: &Route,
    asked: Admission,
    stale: Option<&Arc<CachedObject>>,
    stand_in: StandIn,
) -> Admission {
    if !route.upstream.has_budget() || asked == Admission::Ahead {
        // Nothing to wait for, or already served: nothing to decide.
        return asked;
    }
    match busy_copy(route, stale, stand_in) {
        Some(_) => Admission::TryOnly,
        None => asked,
    }
}

/// The stored copy that may be served at once while the origin budget is
/// full: one inside the route's `stale_if_busy` past its lifetime (where
/// the origin granted stale use: RFC 9111 §4.2.4), or inside its
/// stale-if-error window (the origin's or the route's). The one place
/// this is decided, for a fill and for its followers.
pub(crate) fn busy_copy(
    route: &Route,
    stale: Option<&Arc<CachedObject>>,
    stand_in: StandIn,
) -> Option<Arc<CachedObject>> {
    let now = Instant::now();
    let busy = |s: &CachedObject| {
        stand_in == StandIn::Busy
            && (s.meta.is_fresh(now)
                || (s.meta.freshness.stale_use_granted()
                    && s.meta.within(now, route.cfg.freshness.stale_if_busy)))
    };
    stale
        .filter(|s| s.vary_index().is_none() && (busy(s) || s.meta.within_stale_if_error(now)))
        .cloned()
}

/// Added to an upstream timeout when telling followers how long a step may
/// last: the timeout fires, and its error reaches them, a little after it.
const BOUND_SLACK: Duration = Duration::from_millis(250);

/// Tells the fetch's followers that its next step is bounded by `limit`.
fn alive_for(permit: &Option<FetchPermit<FillOutcome>>, limit: Duration) {
    if let Some(permit) = permit {
        permit.alive_for(limit);
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

fn finish(permit: Option<FetchPermit<FillOutcome>>, outcome: FillOutcome) {
    if let Some(permit) = permit {
        permit.finish(outcome);
    }
}

/// Not stored (`why`): the followers hear so, and the requester gets the
/// response as it streams.
fn relay(
    permit: Option<FetchPermit<FillOutcome>>,
    parts: http::response::Parts,
    body: TimeoutBody<OriginBody>,
    why: NotStored,
) -> FillReply {
    finish(permit, FillOutcome::NotStored);
    FillReply::Relay(Response::from_parts(parts, ResponseBody::stream(body)), why)
}

fn fail(
    permit: Option<FetchPermit<FillOutcome>>,
    e: ProxyError,
    stale: Option<Arc<CachedObject>>,
    origin_status: Option<u16>,
) -> FillReply {
    finish(permit, FillOutcome::Failed(e.clone()));
    match (stale, &e.kind) {
        (Some(object), ErrorKind::OriginBusy { .. }) => FillReply::Busy(object),
        (Some(object), _) => FillReply::Stale(object, origin_status),
        (None, _) => FillReply::Failed(e),
    }
}
