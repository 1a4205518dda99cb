//! Fetching an object from the origin and storing it: the one place a response
//! becomes a cached object.
//!
//! A fill runs in its own task (see `proxy.rs`), so a client that goes away does
//! not cancel a fetch that other waiters need. It reports to followers through
//! its [`FetchPermit`] and to the request that started it through [`FillReply`].
//!
//! ```text
//! fill ─ send (GET; validators of the stale copy, RFC 9111 §4.3.1)
//!   ├─ error / 5xx with a stale-if-error copy ─────────── Stale
//!   ├─ 304 for the stale copy ─ merge headers (§4.3.4) ─┐
//!   ├─ 5xx, not storable ─ collect ≤ 64 KiB ─ share ──── Relay (followers get it too)
//!   ├─ 200.. ─ evaluate ─ not storable ───────────────── Relay (stream)
//!   │                  └─ collect ≤ max_object_size ────┴─ store ─ Stored
//!   └─ too large ────────────────────────────────────────── Relay (prefix + rest)
//! store: Vary marker + variant key (vary.rs), compress once (compress.rs), insert
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use calmcache_core::page_body::StoredBody as Kept;
use calmcache_core::{freshness, CacheKey, CachedObject, Exchange, FetchPermit, NotStorable};
use http::header::CONTENT_LENGTH;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::fleet::Before;
use crate::http::body::{PrefixedBody, ResponseBody, TimeoutBody};
use crate::http::conditional;
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::detach_headers;
use crate::http::headers::strip_hop_by_hop;
use crate::proxy::growing::StreamingHead;
use crate::proxy::outcome::{FillOutcome, Requester};
use crate::proxy::state::Route;
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::warn_limited;

mod collect;
mod fleet;
mod send;
mod shared_error;
mod store;
mod stream;

use collect::{collect_limited, concat, Collected};
use fleet::take_shared;
pub(crate) use send::upstream_request;
use shared_error::share_error;
use store::{
    after_store, marker_for, meta_of, request_host, store, will_compress, StoreCtx, Stored,
    StoredBody,
};
pub(crate) use stream::STREAM_MIN;
use stream::{stream_fill, StreamStart};

/// The request a fill sends upstream: always a GET for the whole object.
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
    },
    /// Not stored: relay this response (hop-by-hop removed).
    Relay(Response<ResponseBody>, NotStored),
    /// The origin failed (with this status, when it answered) and this copy
    /// is inside stale-if-error.
    Stale(Arc<CachedObject>, Option<u16>),
    /// The origin failed and there is no usable copy.
    Failed(ProxyError),
    /// Storable and large: answer from the head now; the body streams to
    /// every reader while it is stored.
    Streaming(Arc<StreamingHead>),
}

/// Fetches `fetch` for the URI keyed `primary`, stores it if allowed (under
/// `primary` or, when the response varies, under its variant key), and
/// reports to followers. `stale` is the stored copy this fetch replaces: its
/// validators make the request conditional, and it backs stale-if-error.
pub(crate) async fn fill(
    route: Arc<Route>,
    primary: CacheKey,
    fetch: FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    stale: Option<Arc<CachedObject>>,
) -> FillReply {
    let started = Instant::now();
    let mut request_time = SystemTime::now();
    let upstream = &route.upstream;
    // Validators only when a 304 can be used: with storing allowed (a 304
    // must never reach a client that sent no conditional).
    let mut revalidating = stale
        .as_ref()
        .filter(|s| {
            // An authorised request's answer could not refresh a shared copy
            // (RFC 9111 §3.5): it fetches whole and leaves the copy alone.
            fetch.store
                && !fetch.has_authorization
                && route.zone_for(&primary.as_ref()).is_some()
                && conditional::has_validator(&s.headers())
        })
        .cloned();
    // Fleet mode: a fresh copy another node stored, or the fleet's lease
    // for this fetch (or a wait for the node that holds it).
    let mut lease = None;
    let shared = route
        .fleet
        .as_ref()
        .filter(|_| fetch.store && !fetch.has_authorization)
        .filter(|_| route.zone_for(&primary.as_ref()).is_some());
    if let Some(fleet) = shared {
        alive_for(&permit, route.lock_timeout() + BOUND_SLACK);
        match fleet
            .before_fetch(
                &primary,
                stale.as_deref(),
                route.lock_timeout(),
                &fetch.selecting,
            )
            .await
        {
            Before::Take(object, names) => {
                return take_shared(&route, &primary, &fetch, permit, object, names).await
            }
            Before::Fetch(ours) => lease = ours,
        }
    }
    // Followers wait as long as the head may take (read_timeout counts
    // from sending, connecting included), not just their lock_timeout.
    let head_bound = upstream.read_timeout + BOUND_SLACK;
    alive_for(&permit, head_bound);
    let mut result = upstream
        .send(upstream_request(&fetch, revalidating.as_deref()))
        .await;
    route.activity.upstream_call(&result);
    // RFC 9111 §4.3.3: a 304 that does not match the stored copy (another
    // ETag) cannot update it; ask again without conditionals.
    let mismatched = |r: &Result<Response<Incoming>, ProxyError>,
                      old: &Option<Arc<CachedObject>>| {
        matches!((r, old), (Ok(resp), Some(old))
            if resp.status() == StatusCode::NOT_MODIFIED
                && !conditional::applies_to(resp.headers(), &old.headers()))
    };
    if mismatched(&result, &revalidating) {
        revalidating = None;
        request_time = SystemTime::now();
        alive_for(&permit, head_bound);
        result = upstream.send(upstream_request(&fetch, None)).await;
        route.activity.upstream_call(&result);
    }
    let usable_stale = stale.filter(|s| s.meta.within_stale_if_error(Instant::now()));
    // A 304 to a request without our validators (fills strip the client's)
    // is an origin fault, never something to hand a client that may have
    // sent no conditional.
    if revalidating.is_none()
        && matches!(&result, Ok(resp) if resp.status() == StatusCode::NOT_MODIFIED)
    {
        route.activity.upstream_errors.inc();
        let e = ProxyError::upstream(
            ErrorKind::Broken,
            &upstream.name,
            "origin answered 304 to an unconditional request",
        );
        return fail(permit, e, usable_stale, Some(304));
    }
    let resp = match result {
        Ok(resp) if resp.status().is_server_error() && usable_stale.is_some() => {
            route.activity.upstream_errors.inc();
            let status = resp.status().as_u16();
            let e = ProxyError::upstream(
                ErrorKind::Broken,
                &upstream.name,
                format!("origin answered {status}"),
            );
            return fail(permit, e, usable_stale, Some(status));
        }
        Ok(resp) => resp,
        Err(e) => {
            // Counted with the call (upstream_call).
            if !e.repeats() {
                // Per request: a dead origin must not flood the log.
                static FETCH_FAILED: WarnLimit = WarnLimit::new();
                warn_limited!(FETCH_FAILED, "origin fetch failed",
                    upstream = %upstream.name, key = %primary, error = %e);
            }
            return fail(permit, e, usable_stale, None);
        }
    };
    if resp.status().is_server_error() {
        route.activity.upstream_errors.inc();
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // The body comes next: each frame within read_timeout.
    alive_for(&permit, upstream.read_timeout + BOUND_SLACK);
    let response_time = SystemTime::now();
    let origin_status = parts.status.as_u16();
    let zone = match (route.zone_for(&primary.as_ref()), fetch.store) {
        (Some(zone), true) => zone,
        (zone, _) => {
            finish(permit, FillOutcome::NotStored);
            let why = if zone.is_none() {
                NotStored::NoZone
            } else {
                NotStored::Request
            };
            let body = ResponseBody::stream(TimeoutBody::new(body, upstream.read_timeout));
            return FillReply::Relay(Response::from_parts(parts, body), why);
        }
    };
    // RFC 9111 §4.3.4: a 304 freshens the stored response it validates.
    if parts.status == StatusCode::NOT_MODIFIED {
        if let Some(old) = revalidating {
            // A large disk object's body is still in its file: read it to
            // store the freshened copy (a failed read is an origin refetch).
            let old_body = match old.lazy_body() {
                None => Some(StoredBody::Kept(old.stored_body())),
                Some(lazy) => {
                    let lazy = lazy.clone();
                    tokio::task::spawn_blocking(move || lazy.read_all())
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .map(|body| StoredBody::Kept(Kept::Heap(body)))
                }
            };
            let Some(old_body) = old_body else {
                // The stored body cannot be read back (disk fault, corrupt):
                // fetch the whole object instead; the request does not fail.
                drop(parts);
                return Box::pin(fill(route.clone(), primary, fetch, permit, None)).await;
            };
            let merged = conditional::merge_not_modified(&old.headers(), &parts.headers, &[]);
            let exchange = Exchange {
                request_has_authorization: fetch.has_authorization,
                status: old.status.as_u16(),
                headers: &merged,
                request_time,
                response_time,
            };
            return match freshness::evaluate(&exchange, &route.store_rules(exchange.status)) {
                Ok(storable) => {
                    let stored = Stored {
                        status: old.status,
                        headers: detach_headers(&merged, &storable.strip_fields),
                        body: old_body,
                        encodings: Some(old.encodings().to_vec()),
                    };
                    let to = StoreCtx {
                        route: &route,
                        zone,
                        primary: &primary,
                        fetch: &fetch,
                        permit,
                        origin_status: 304,
                        started,
                        lease: lease.take(),
                    };
                    store(to, stored, storable).await
                }
                Err(why) => {
                    // The origin now forbids storing it: drop the copy (and
                    // its siblings under the URI), relay it.
                    if matches!(
                        why,
                        NotStorable::NoStore
                            | NotStorable::Private
                            | NotStorable::NoCache
                            | NotStorable::VaryStar
                            | NotStorable::NoFreshness
                    ) {
                        route.remove(&primary.as_ref()).await;
                    }
                    finish(permit, FillOutcome::NotStored);
                    let mut resp = Response::new(ResponseBody::full(old_body.into_bytes()));
                    *resp.status_mut() = old.status;
                    *resp.headers_mut() = merged;
                    FillReply::Relay(resp, NotStored::Response(why))
                }
            };
        }
    }
    let exchange = Exchange {
        request_has_authorization: fetch.has_authorization,
        status: origin_status,
        headers: &parts.headers,
        request_time,
        response_time,
    };
    let rules = route.store_rules(origin_status);
    let body = TimeoutBody::new(body, upstream.read_timeout);
    let storable = match freshness::evaluate(&exchange, &rules) {
        Ok(storable) => storable,
        Err(why) if parts.status.is_server_error() && permit.is_some() => {
            // The origin is failing: its answer goes to every follower, so
            // that one request reaches it, not one per waiting client.
            let requester = fetch.requester();
            return share_error(&route, permit, parts, body, why, requester).await;
        }
        Err(why) => {
            finish(permit, FillOutcome::NotStored);
            let resp = Response::from_parts(parts, ResponseBody::stream(body));
            return FillReply::Relay(resp, NotStored::Response(why));
        }
    };
    let limit = zone.tier.max_object_size();
    let declared = content_length(&parts.headers);
    if declared.is_some_and(|n| n > limit) {
        finish(permit, FillOutcome::NotStored);
        let resp = Response::from_parts(parts, ResponseBody::stream(body));
        return FillReply::Relay(resp, NotStored::TooLarge);
    }
    // `max_inflight_body`: past it, a fill buffers nothing and stores nothing.
    let Some(held) = route.inflight.admit() else {
        finish(permit, FillOutcome::NotStored);
        tracing::debug!(key = %primary, "max_inflight_body spent; relayed uncached");
        let resp = Response::from_parts(parts, ResponseBody::stream(body));
        return FillReply::Relay(resp, NotStored::InflightBudget);
    };
    // A small body of declared length arrives at once: collected, then
    // stored. Any other streams to its readers as it arrives, a body of
    // unknown length above all (server-sent events, early-flushed HTML
    // must not wait for the end), and is stored when it ends cleanly.
    if declared.is_none_or(|n| n > STREAM_MIN) {
        let start = StreamStart {
            parts,
            storable,
            started,
            origin_status,
            len: declared,
            held,
        };
        let lease = lease.take();
        return stream_fill(route.clone(), primary, fetch, permit, start, body, lease);
    }
    // Room after the body for its stored head, so that the object keeps
    // both in this one buffer (`CachedObject::assemble_packed`).
    let room = calmcache_core::head::StoredHead::encoded_len(&parts.headers);
    let body = match collect_limited(body, limit as usize, held, room).await {
        Collected::Complete(body) => body,
        Collected::TooLarge(prefix, rest) => {
            finish(permit, FillOutcome::NotStored);
            let body = ResponseBody::stream(PrefixedBody::new(prefix, rest));
            return FillReply::Relay(Response::from_parts(parts, body), NotStored::TooLarge);
        }
        Collected::Failed(e) => {
            route.activity.upstream_errors.inc();
            let e = ProxyError::upstream(ErrorKind::Broken, &upstream.name, e);
            static BODY_FAILED: WarnLimit = WarnLimit::new();
            warn_limited!(BODY_FAILED, "origin body failed",
                upstream = %upstream.name, key = %primary, error = %e);
            return fail(permit, e, usable_stale, None);
        }
    };
    // The stored length is exact; HEAD answers from the cache rely on it.
    // RFC 9110 §8.6: never on 204 or 304.
    if !matches!(origin_status, 204 | 304) {
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let stored = Stored {
        status: parts.status,
        // Stored at once: the object's head copies the values (once).
        headers: calmcache_core::object::storable_headers(&parts.headers, &storable.strip_fields),
        body,
        encodings: None,
    };
    let to = StoreCtx {
        route: &route,
        zone,
        primary: &primary,
        fetch: &fetch,
        permit,
        origin_status,
        started,
        lease: lease.take(),
    };
    store(to, stored, storable).await
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

fn fail(
    permit: Option<FetchPermit<FillOutcome>>,
    e: ProxyError,
    stale: Option<Arc<CachedObject>>,
    origin_status: Option<u16>,
) -> FillReply {
    finish(permit, FillOutcome::Failed(e.clone()));
    match stale {
        Some(object) => FillReply::Stale(object, origin_status),
        None => FillReply::Failed(e),
    }
}
