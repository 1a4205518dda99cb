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

use bytes::{Bytes, BytesMut};
use calmcache_core::page_body::StoredBody as Kept;
use calmcache_core::{
    freshness, CacheKey, CachedObject, Encoded, Exchange, FetchPermit, NotStorable, ObjectMeta,
    Storable, VaryIndex,
};
use http::header::{CONTENT_LENGTH, VARY};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::fleet::{Before, Lease};
use crate::http::body::{BoxError, PrefixedBody, ResponseBody, TimeoutBody};
use crate::http::conditional;
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::detach_headers;
use crate::http::headers::strip_hop_by_hop;
use crate::http::vary;
use crate::proxy::growing::{Growing, Keeping, StreamingHead};
use crate::proxy::outcome::{ErrorAnswer, FillOutcome, Requester};
use crate::proxy::state::Route;
use crate::telemetry::inflight::Held;
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::warn_limited;
use calmcache_core::Zone;

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

/// An error answer body larger than this is not handed to followers (they
/// get calmcache's own page with the same status).
pub(crate) const SHARED_ERROR_MAX: usize = 64 * 1024;

/// Tells the fetch's followers that its next step is bounded by `limit`.
fn alive_for(permit: &Option<FetchPermit<FillOutcome>>, limit: Duration) {
    if let Some(permit) = permit {
        permit.alive_for(limit);
    }
}

/// Hands a failing origin's 5xx answer to the fetch's followers and relays
/// it to its requester. A small body is read whole (within the upstream's
/// read timeout per frame) and shared; a large one streams to the
/// requester while followers get a plain page with the same status.
async fn share_error(
    route: &Route,
    permit: Option<FetchPermit<FillOutcome>>,
    parts: http::response::Parts,
    body: TimeoutBody<Incoming>,
    why: NotStorable,
    requester: Requester,
) -> FillReply {
    let Some(held) = route.inflight.admit() else {
        // No room to read it: the requester gets it as it streams, the
        // followers a plain page with its status.
        let answer = ErrorAnswer::for_followers(parts.status, &parts.headers, None, requester);
        finish(permit, FillOutcome::Answered(Arc::new(answer)));
        let resp = Response::from_parts(parts, ResponseBody::stream(body));
        return FillReply::Relay(resp, NotStored::Response(why));
    };
    match collect_limited(body, SHARED_ERROR_MAX, held, 0).await {
        Collected::Complete(mut bytes) => {
            let bytes = bytes.shared();
            let answer = ErrorAnswer::for_followers(
                parts.status,
                &parts.headers,
                Some(bytes.clone()),
                requester,
            );
            finish(permit, FillOutcome::Answered(Arc::new(answer)));
            let resp = Response::from_parts(parts, ResponseBody::full(bytes));
            FillReply::Relay(resp, NotStored::Response(why))
        }
        Collected::TooLarge(prefix, rest) => {
            let answer = ErrorAnswer::for_followers(parts.status, &parts.headers, None, requester);
            finish(permit, FillOutcome::Answered(Arc::new(answer)));
            let body = ResponseBody::stream(PrefixedBody::new(prefix, rest));
            FillReply::Relay(Response::from_parts(parts, body), NotStored::Response(why))
        }
        Collected::Failed(e) => {
            let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, e);
            fail(permit, e, None, Some(parts.status.as_u16()))
        }
    }
}

/// Bodies with a declared length above this stream to the requests waiting
/// for them while they are stored; smaller ones are collected first (bodies
/// without a declared length always stream).
pub(crate) const STREAM_MIN: u64 = 256 * 1024;

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// What a streaming fill starts from.
struct StreamStart {
    parts: http::response::Parts,
    storable: Storable,
    started: Instant,
    origin_status: u16,
    /// The declared length; `None` for a chunked (or close-delimited) body.
    len: Option<u64>,
    /// The fill's share of `max_inflight_body`.
    held: Held,
}

/// Read-while-write: publishes the head to followers (and to requests that
/// join until the object is stored), then reads the body in its own task,
/// handing each chunk to every reader as it arrives, and stores the object
/// when the body is complete: exactly as long as declared, or, without a
/// declared length, ended cleanly (the last chunk of a chunked body) and
/// within the zone's `max_object_size` (past it, the body still reaches
/// every reader, nothing is stored, and later requests fetch for
/// themselves). A body that fails or comes up short is never stored and
/// ends every reader in error.
fn stream_fill(
    route: Arc<Route>,
    primary: CacheKey,
    fetch: FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    start: StreamStart,
    mut body: TimeoutBody<Incoming>,
    lease: Option<Lease>,
) -> FillReply {
    let StreamStart {
        parts,
        storable,
        started,
        origin_status,
        len,
        held,
    } = start;
    let mut headers = detach_headers(&parts.headers, &storable.strip_fields);
    let names = vary::names(&headers, !route.cfg.compress.is_empty());
    let zone = route.zone_for(&primary.as_ref()).cloned();
    // A plain response bound for a zone that keeps bodies in files (disk)
    // goes into its file as it arrives (spooled when its length, and so its
    // header, is known only at the end); a Vary'd or compressed one, or one
    // for another zone, is collected and stored whole.
    let head = || {
        CachedObject::assemble(
            meta_of(&storable, started),
            parts.status,
            headers.clone(),
            Bytes::new(),
            Vec::new(),
            None,
        )
    };
    let mut file = zone
        .as_ref()
        .filter(|_| names.is_empty() && !will_compress(&route, &headers))
        .and_then(|z| z.tier.begin_file_write(&primary, &head, len));
    // Into a file: a window in memory, readers behind it read the file.
    // Otherwise the body is stored whole (bounded by max_object_size).
    let keeping = if file.is_some() {
        Keeping::File
    } else {
        Keeping::All
    };
    let growing = Arc::new(Growing::new(len, keeping, Some(held)));
    let vary = (!names.is_empty()).then(|| {
        let mine = vary::secondary(&names, &fetch.selecting);
        (names, mine)
    });
    let head = Arc::new(StreamingHead {
        status: parts.status,
        headers: headers.clone(),
        growing: growing.clone(),
        origin_status,
        ttl: storable.freshness.fresh_for().as_secs_f64(),
        vary,
        first: crate::proxy::growing::FirstReader::new(growing.reader()),
    });
    if let Some(permit) = &permit {
        permit.publish(FillOutcome::Streaming(head.clone()));
    }
    let status = parts.status;
    // The fleet's lease is kept while the body streams (the other nodes wait
    // for the copy it stores in Redis), unless the body cannot go there:
    // then it is let go at once and they fetch on their own.
    let fleet_limit = route
        .fleet
        .as_ref()
        .map_or(0, |f| f.config().max_object_size);
    let mut lease = lease.filter(|_| len.is_none_or(|n| n <= fleet_limit));
    crate::proxy::background::spawn(async move {
        let mut permit = permit;
        let limit = zone.as_ref().map_or(0, |z| z.tier.max_object_size());
        let mut total = 0u64;
        // False once a body without a declared length outgrew the zone, or
        // its file write failed.
        let mut keep = true;
        let failure = loop {
            // Only the sole reader of a body not kept can hold the fill.
            growing.room().await;
            if growing.abandoned() {
                // Not stored and nobody reading: stop asking the origin.
                tracing::debug!(key = %primary, "body not kept and no reader left; fetch dropped");
                growing.fail("no reader left".into());
                return;
            }
            let next = match body.frame().await {
                None => None,
                Some(Err(e)) => Some(Err(e)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => Some(Ok(data)),
                    Err(_) => continue,
                },
            };
            let data = match next {
                None => match len {
                    Some(len) if total != len => {
                        break Some(format!("origin body ended at {total} of {len} bytes"))
                    }
                    _ => break None,
                },
                Some(Err(e)) => break Some(format!("origin body failed: {e}")),
                Some(Ok(data)) => data,
            };
            total += data.len() as u64;
            if total > fleet_limit {
                lease = None;
            }
            if let Some(len) = len.filter(|&len| total > len) {
                break Some(format!("origin body longer than its Content-Length {len}"));
            }
            if keep && total > limit {
                keep = false;
                file = None;
                growing.stop_keeping();
                finish(permit.take(), FillOutcome::NotStored);
                tracing::debug!(key = %primary, "body over max_object_size; not stored");
            }
            growing.push(data.clone());
            if let Some(writing) = &mut file {
                writing.push(data).await;
                if writing.is_abandoned() {
                    // The disk failed (counted and logged there): not stored,
                    // and no longer kept for readers far behind.
                    keep = false;
                    file = None;
                    growing.stop_keeping();
                    finish(permit.take(), FillOutcome::NotStored);
                } else if let Some(written) = writing.written() {
                    growing.written(written);
                }
            }
        };
        if let Some(why) = failure {
            route.activity.upstream_errors.inc();
            static STREAM_FAILED: WarnLimit = WarnLimit::new();
            warn_limited!(STREAM_FAILED, "origin body failed; not stored",
                key = %primary, error = %why);
            growing.fail(why.clone());
            let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, why);
            finish(permit, FillOutcome::Failed(e));
            return;
        }
        growing.finish();
        let Some(zone) = zone.filter(|_| keep) else {
            finish(permit, FillOutcome::NotStored);
            return;
        };
        if len.is_none() {
            // The stored length is exact (HEAD answers rely on it).
            headers.insert(CONTENT_LENGTH, HeaderValue::from(total));
        }
        if let Some(file) = file {
            let mut object = CachedObject::assemble(
                meta_of(&storable, started),
                status,
                headers,
                Bytes::new(),
                Vec::new(),
                None,
            );
            match file.finish(&object).await {
                Ok(lazy) => {
                    // The body stays in its file; hits stream it from there.
                    object.set_lazy_body(lazy);
                    let object = Arc::new(object);
                    if let (Some(lease), Some(fleet)) = (lease, &route.fleet) {
                        fleet.commit(lease, &primary, object.clone(), None);
                    }
                    let host = request_host(&fetch);
                    after_store(
                        &route,
                        &primary,
                        &primary,
                        &object,
                        permit,
                        origin_status,
                        host,
                    )
                    .await;
                }
                Err(e) => {
                    tracing::debug!(key = %primary, zone = %zone.name, error = %e, "not stored");
                    finish(permit, FillOutcome::NotStored);
                }
            }
            return;
        }
        // Invariant: a body not written to a file was kept whole (else
        // `keep` is false).
        let Some(chunks) = growing.kept() else {
            finish(permit, FillOutcome::NotStored);
            return;
        };
        let stored = Stored {
            status,
            headers,
            body: concat(chunks, total as usize, 0),
            encodings: None,
        };
        let to = StoreCtx {
            route: &route,
            zone: &zone,
            primary: &primary,
            fetch: &fetch,
            permit,
            origin_status,
            started,
            lease,
        };
        let _ = store(to, stored, storable).await;
    });
    FillReply::Streaming(head)
}

/// True when storing a response with `headers` adds compressed encodings
/// (a body of at least `compress::MIN_SIZE` is assumed).
fn will_compress(route: &Route, headers: &HeaderMap) -> bool {
    !route.cfg.compress.is_empty() && crate::http::compress::compressible(headers)
}

/// The metadata of an object stored now, fetched since `started`.
fn meta_of(storable: &Storable, started: Instant) -> ObjectMeta {
    ObjectMeta {
        stored_at: Instant::now(),
        freshness: storable.freshness,
        fetch_time: started.elapsed(),
    }
}

/// A response ready to store.
struct Stored {
    status: StatusCode,
    headers: HeaderMap,
    body: StoredBody,
    /// Encodings to reuse (a freshened copy); `None` makes them anew.
    encodings: Option<Vec<Encoded>>,
}

/// The body of a response to store.
enum StoredBody {
    /// Just collected, in a buffer of its own (perhaps with room for the
    /// head after it).
    Fresh(BytesMut),
    /// Kept as it will be stored: shared with a stored object (a freshened
    /// copy), or a large body in pages of its own
    /// ([`calmcache_core::page_body`]).
    Kept(Kept),
}

impl StoredBody {
    /// The body as a shared buffer (the room after a fresh one is given up).
    fn shared(&mut self) -> Bytes {
        if let StoredBody::Fresh(fresh) = self {
            *self = StoredBody::Kept(Kept::Heap(std::mem::take(fresh).freeze()));
        }
        match self {
            StoredBody::Kept(kept) => kept.bytes().clone(),
            StoredBody::Fresh(_) => Bytes::new(),
        }
    }

    /// The body by value, as a shared buffer.
    fn into_bytes(mut self) -> Bytes {
        self.shared()
    }

    fn len(&self) -> usize {
        match self {
            StoredBody::Fresh(body) => body.len(),
            StoredBody::Kept(kept) => kept.bytes().len(),
        }
    }
}

/// Where a response is stored and who hears of it: what [`store`] needs
/// besides the response itself.
struct StoreCtx<'a> {
    route: &'a Route,
    /// The zone the fill stores into (the route's pick for this key).
    zone: &'a Zone,
    /// The URI's key: the object's own, or its Vary marker's.
    primary: &'a CacheKey,
    /// The request fetched: its selecting headers name the variant, its
    /// `Host` is remembered for path purges.
    fetch: &'a FetchRequest,
    /// The fetch's followers, told what became of it.
    permit: Option<FetchPermit<FillOutcome>>,
    /// What the origin answered: 304 on a revalidation, else the status stored.
    origin_status: u16,
    /// When the fetch began (the object's `fetch_time`).
    started: Instant,
    /// The fleet's lease on this fetch: the object goes to Redis too.
    lease: Option<Lease>,
}

/// Stores a response under its key (the primary key, or its variant key
/// under a Vary marker), compressing it first when the route asks.
async fn store(to: StoreCtx<'_>, mut stored: Stored, storable: Storable) -> FillReply {
    let StoreCtx {
        route,
        zone,
        primary,
        fetch,
        permit,
        origin_status,
        started,
        lease,
    } = to;
    let compresses = !route.cfg.compress.is_empty();
    let encodings = match stored.encodings.take() {
        Some(encodings) => encodings,
        None => encode(route, &stored.headers, &mut stored.body).await,
    };
    if !encodings.is_empty() {
        add_vary_accept_encoding(&mut stored.headers);
    }
    let meta = meta_of(&storable, started);
    let names = vary::names(&stored.headers, compresses);
    let (key, variant) = if names.is_empty() {
        (primary.clone(), None)
    } else {
        let id = marker_for(zone, primary, names.clone(), &meta).await;
        let secondary = vary::secondary(&names, &fetch.selecting);
        let key = vary::variant_key(&primary.as_ref(), id, &secondary);
        (key, Some(secondary.into_boxed_str()))
    };
    let object = Arc::new(match stored.body {
        // One buffer for the head and a small body, as a zone keeps them.
        StoredBody::Fresh(body) => CachedObject::assemble_packed(
            meta,
            stored.status,
            stored.headers,
            body,
            encodings,
            variant,
        ),
        StoredBody::Kept(body) => CachedObject::assemble(
            meta,
            stored.status,
            stored.headers,
            body,
            encodings,
            variant,
        ),
    });
    if let Err(e) = zone.tier.insert(key.clone(), object.clone()).await {
        // Headers and bookkeeping pushed it over the zone's limit, or the
        // disk failed: relay it.
        tracing::debug!(key = %key, zone = %zone.name, error = %e, "not stored");
        let why = match e {
            calmcache_core::CacheError::TooLarge { .. } => NotStored::TooLarge,
            calmcache_core::CacheError::Io(_) => NotStored::StoreFailed,
        };
        finish(permit, FillOutcome::NotStored);
        let mut resp = Response::new(ResponseBody::full(object.body.clone()));
        *resp.status_mut() = object.status;
        *resp.headers_mut() = object.headers();
        return FillReply::Relay(resp, why);
    }
    if let (Some(lease), Some(fleet)) = (lease, &route.fleet) {
        // Off the request path; a variant under the URI's variants there.
        let varies = (!names.is_empty()).then_some(&names[..]);
        fleet.commit(lease, primary, object.clone(), varies);
    }
    let host = request_host(fetch);
    after_store(route, primary, &key, &object, permit, origin_status, host).await;
    FillReply::Stored {
        object,
        origin_status,
        shared: false,
    }
}

/// A fresh copy another node of the fleet stored: kept in the local zone
/// (a failed store still serves it; a variant under this node's marker for
/// the `names` it varies on) and handed to the fetch's followers, with no
/// origin request.
async fn take_shared(
    route: &Route,
    primary: &CacheKey,
    fetch: &FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    object: Arc<CachedObject>,
    names: Option<Vec<HeaderName>>,
) -> FillReply {
    let origin_status = object.status.as_u16();
    let mut key = primary.clone();
    if let Some(zone) = route.zone_for(&primary.as_ref()) {
        if let (Some(names), Some(secondary)) = (names, object.variant()) {
            let id = marker_for(zone, primary, names, &object.meta).await;
            key = vary::variant_key(&primary.as_ref(), id, secondary);
        }
        if let Err(e) = zone.tier.insert(key.clone(), object.clone()).await {
            tracing::debug!(key = %key, zone = %zone.name, error = %e, "shared copy not stored locally");
        }
    }
    let host = request_host(fetch);
    after_store(route, primary, &key, &object, permit, origin_status, host).await;
    FillReply::Stored {
        object,
        origin_status,
        shared: true,
    }
}

/// The `Host` the fetch was made for (as the key template's `$host` read it).
fn request_host(fetch: &FetchRequest) -> &str {
    fetch
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
}

/// Bookkeeping once `object` is in its zone under `key`: the host for path
/// purges, the memory front, the counter, and the fetch's followers.
async fn after_store(
    route: &Route,
    primary: &CacheKey,
    key: &CacheKey,
    object: &Arc<CachedObject>,
    permit: Option<FetchPermit<FillOutcome>>,
    origin_status: u16,
    host: &str,
) {
    route.note_host(primary, host);
    route.hit_for_miss.clear(primary);
    if key != primary {
        route.hit_for_miss.clear(key);
    }
    route.stored(key, object).await;
    route.activity.stores.inc();
    let stored = FillOutcome::Stored {
        object: object.clone(),
        origin_status,
    };
    finish(permit, stored);
}

/// The generation id of the Vary marker under `primary` for `names`,
/// replacing a marker for other names (or a plain response) with a new one.
async fn marker_for(
    zone: &Zone,
    primary: &CacheKey,
    names: Vec<HeaderName>,
    meta: &ObjectMeta,
) -> u64 {
    if let Some(index) = zone
        .tier
        .get(&primary.as_ref())
        .await
        .and_then(|o| o.vary_index().cloned())
        .filter(|index| index.names == names)
    {
        return index.id;
    }
    let id = rand::random::<u64>();
    let marker = CachedObject::marker(meta.clone(), VaryIndex { id, names });
    if let Err(e) = zone.tier.insert(primary.clone(), Arc::new(marker)).await {
        tracing::debug!(key = %primary, error = %e, "vary marker not stored");
    }
    id
}

/// Compresses a compressible body once per configured coding, on a blocking
/// thread (never on the async workers).
async fn encode(route: &Route, headers: &HeaderMap, body: &mut StoredBody) -> Vec<Encoded> {
    let codings = route.cfg.compress.clone();
    if codings.is_empty()
        || body.len() < crate::http::compress::MIN_SIZE
        || !crate::http::compress::compressible(headers)
    {
        return Vec::new();
    }
    let body = body.shared();
    let encoded =
        tokio::task::spawn_blocking(move || crate::http::compress::encode_all(&codings, &body))
            .await;
    match encoded {
        Ok(list) => list
            .into_iter()
            .map(|(coding, body)| Encoded {
                coding: coding.as_str(),
                body,
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "compression task failed; storing uncompressed only");
            Vec::new()
        }
    }
}

/// Adds `Accept-Encoding` to `Vary` unless it is there.
fn add_vary_accept_encoding(headers: &mut HeaderMap) {
    let present = headers
        .get_all(VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|n| n.trim().eq_ignore_ascii_case("accept-encoding"));
    if !present {
        headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

fn upstream_request(
    fetch: &FetchRequest,
    revalidating: Option<&CachedObject>,
) -> Request<crate::http::body::StreamBody> {
    let mut req = Request::new(
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed(),
    );
    *req.method_mut() = Method::GET;
    *req.uri_mut() = Uri::from(fetch.path_and_query.clone());
    *req.headers_mut() = fetch.headers.clone();
    if let Some(stale) = revalidating {
        conditional::add_validators(req.headers_mut(), &stale.headers());
    }
    req
}

/// Sends a range request on to the origin with the client's `Range` and
/// `If-Range` (RFC 9110 §14.2), for an object too large to store: the client
/// gets the origin's 206 instead of the whole body.
pub(crate) async fn fetch_range(
    route: &Route,
    fetch: &FetchRequest,
    client: &HeaderMap,
) -> Result<Response<ResponseBody>, ProxyError> {
    let upstream = &route.upstream;
    let mut req = upstream_request(fetch, None);
    for name in [http::header::RANGE, http::header::IF_RANGE] {
        if let Some(value) = client.get(&name) {
            req.headers_mut().insert(name, value.clone());
        }
    }
    let resp = upstream.send(req).await;
    route.activity.upstream_call(&resp);
    let resp = resp?;
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = ResponseBody::stream(TimeoutBody::new(body, upstream.read_timeout));
    Ok(Response::from_parts(parts, body))
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

enum Collected {
    Complete(StoredBody),
    TooLarge(Vec<Bytes>, TimeoutBody<Incoming>),
    Failed(BoxError),
}

/// Reads the whole body if it fits in `limit` bytes (counted in `held`);
/// otherwise hands back what was read and the rest of the stream so the
/// client still gets everything. The body comes in a buffer with `room`
/// bytes to spare after it.
async fn collect_limited(
    mut body: TimeoutBody<Incoming>,
    limit: usize,
    mut held: Held,
    room: usize,
) -> Collected {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => return Collected::Failed(e),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len();
        held.add(data.len() as u64);
        chunks.push(data);
        if total > limit {
            return Collected::TooLarge(chunks, body);
        }
    }
    Collected::Complete(concat(chunks, total, room))
}

/// Joins the chunks into one buffer of `total` bytes and `room` to spare
/// (room for the head of a body small enough to be packed with it), or, for
/// a large body, into pages of its own ([`calmcache_core::page_body`]).
/// Always a copy: a chunk is a slice of hyper's read buffer, and keeping it
/// would pin that whole buffer in the zone while the zone counts only the
/// slice.
fn concat(chunks: Vec<Bytes>, total: usize, room: usize) -> StoredBody {
    if let Some(paged) = calmcache_core::page_body::paged(&chunks, total) {
        return StoredBody::Kept(Kept::Paged(paged));
    }
    let mut buf = BytesMut::with_capacity(total + room);
    for c in chunks {
        buf.extend_from_slice(&c);
    }
    StoredBody::Fresh(buf)
}

/// How long to wait before refreshing a warmed object: SUS's delta before expiry.
pub(crate) fn warm_refresh_in(object: &CachedObject, now: Instant) -> Duration {
    let meta = &object.meta;
    let lead = meta.sus_delta();
    meta.expires_at()
        .saturating_duration_since(now)
        .saturating_sub(lead)
}
