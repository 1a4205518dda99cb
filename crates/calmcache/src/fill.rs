//! Fetching an object from the origin and storing it: the one place a response
//! becomes a cached object.
//!
//! A fill runs in its own task (see `proxy.rs`), so a client that goes away does
//! not cancel a fetch that other waiters need. It reports to followers through
//! its [`FetchPermit`] and to the request that started it through [`FillReply`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use calmcache_core::{freshness, CacheKey, CachedObject, Exchange, FetchPermit, ObjectMeta};
use http::header::CONTENT_LENGTH;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::body::{BoxError, PrefixedBody, ResponseBody, TimeoutBody};
use crate::error::{ErrorKind, ProxyError};
use crate::headers::strip_hop_by_hop;
use crate::state::{FillOutcome, Route};

/// The request a fill sends upstream: always a GET for the whole object.
#[derive(Clone, Debug)]
pub struct FetchRequest {
    /// Path and query, already parsed (nothing to re-parse or fall back on).
    pub path_and_query: PathAndQuery,
    /// Headers to send: the client's end-to-end headers with `X-Forwarded-*`,
    /// without conditionals or `Range` (the cache wants the whole 200).
    pub headers: HeaderMap,
    /// The client sent `Authorization` (RFC 9111 §3.5).
    pub has_authorization: bool,
}

/// What the request that started a fill gets.
pub enum FillReply {
    /// Stored; serve it.
    Stored(Arc<CachedObject>),
    /// Not storable or too large: relay this response (hop-by-hop removed).
    Relay(Response<ResponseBody>),
    /// The origin failed and this copy is inside stale-if-error.
    Stale(Arc<CachedObject>),
    /// The origin failed and there is no usable copy.
    Failed(ProxyError),
}

/// Fetches `fetch` for `key`, stores it if allowed, and reports to followers.
pub async fn fill(
    route: Arc<Route>,
    key: CacheKey,
    fetch: FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    stale: Option<Arc<CachedObject>>,
) -> FillReply {
    let started = Instant::now();
    let request_time = SystemTime::now();
    let upstream = &route.upstream;
    route.activity.upstream_requests.inc();
    let result = upstream.send(upstream_request(&fetch)).await;
    let usable_stale = stale.filter(|s| s.meta.within_stale_if_error(Instant::now()));
    let resp = match result {
        Ok(resp) if resp.status().is_server_error() && usable_stale.is_some() => {
            route.activity.upstream_errors.inc();
            let e = ProxyError::upstream(
                ErrorKind::Broken,
                &upstream.name,
                format!("origin answered {}", resp.status()),
            );
            return fail(permit, e, usable_stale);
        }
        Ok(resp) => resp,
        Err(e) => {
            route.activity.upstream_errors.inc();
            tracing::warn!(upstream = %upstream.name, key = %key, error = %e, "origin fetch failed");
            return fail(permit, e, usable_stale);
        }
    };
    if resp.status().is_server_error() {
        route.activity.upstream_errors.inc();
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let exchange = Exchange {
        request_has_authorization: fetch.has_authorization,
        status: parts.status.as_u16(),
        headers: &parts.headers,
        request_time,
        response_time: SystemTime::now(),
    };
    let rules = route.store_rules(parts.status.as_u16());
    let body = TimeoutBody::new(body, upstream.read_timeout);
    let (Some(zone), Ok(fresh)) = (&route.zone, freshness::evaluate(&exchange, &rules)) else {
        finish(permit, FillOutcome::NotStored);
        return FillReply::Relay(Response::from_parts(parts, ResponseBody::stream(body)));
    };
    let limit = zone.tier.max_object_size() as usize;
    let body = match collect_limited(body, limit, &parts.headers).await {
        Collected::Complete(body) => body,
        Collected::TooLarge(prefix, rest) => {
            finish(permit, FillOutcome::NotStored);
            let body = ResponseBody::stream(PrefixedBody::new(prefix, rest));
            return FillReply::Relay(Response::from_parts(parts, body));
        }
        Collected::Failed(e) => {
            route.activity.upstream_errors.inc();
            let e = ProxyError::upstream(ErrorKind::Broken, &upstream.name, e);
            tracing::warn!(upstream = %upstream.name, key = %key, error = %e, "origin body failed");
            return fail(permit, e, usable_stale);
        }
    };
    // The stored length is exact; HEAD answers from the cache rely on it.
    // RFC 9110 §8.6: never on 204 or 304.
    if !matches!(parts.status.as_u16(), 204 | 304) {
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let meta = ObjectMeta {
        stored_at: Instant::now(),
        freshness: fresh,
        fetch_time: started.elapsed(),
    };
    let headers = detach_headers(&parts.headers);
    let object = Arc::new(CachedObject::new(meta, parts.status, headers, body));
    if let Err(e) = zone.tier.insert(key.clone(), object.clone()) {
        // Headers and bookkeeping pushed it over the zone's limit: relay it.
        tracing::debug!(key = %key, zone = %zone.name, error = %e, "not stored");
        finish(permit, FillOutcome::NotStored);
        let body = ResponseBody::full(object.body.clone());
        return FillReply::Relay(Response::from_parts(parts, body));
    }
    route.activity.stores.inc();
    finish(permit, FillOutcome::Stored(object.clone()));
    FillReply::Stored(object)
}

/// Copies header values out of hyper's read buffer: a stored value that
/// sliced it would pin the whole buffer (8 KiB or more) in the zone.
fn detach_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len() + 2);
    for (name, value) in headers {
        if let Ok(copy) = HeaderValue::from_bytes(value.as_bytes()) {
            out.append(name.clone(), copy);
        }
    }
    out
}

fn upstream_request(fetch: &FetchRequest) -> Request<crate::body::StreamBody> {
    let mut req = Request::new(
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed(),
    );
    *req.method_mut() = Method::GET;
    *req.uri_mut() = Uri::from(fetch.path_and_query.clone());
    *req.headers_mut() = fetch.headers.clone();
    req
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
) -> FillReply {
    finish(permit, FillOutcome::Failed(e.clone()));
    match stale {
        Some(object) => FillReply::Stale(object),
        None => FillReply::Failed(e),
    }
}

enum Collected {
    Complete(Bytes),
    TooLarge(Vec<Bytes>, TimeoutBody<Incoming>),
    Failed(BoxError),
}

/// Reads the whole body if it fits in `limit` bytes; otherwise hands back what
/// was read and the rest of the stream so the client still gets everything.
async fn collect_limited(
    mut body: TimeoutBody<Incoming>,
    limit: usize,
    headers: &HeaderMap,
) -> Collected {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Collected::TooLarge(Vec::new(), body);
    }
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
        chunks.push(data);
        if total > limit {
            return Collected::TooLarge(chunks, body);
        }
    }
    Collected::Complete(concat(chunks, total))
}

/// One chunk is kept as is (no copy); several are joined once.
/// Joins the chunks into one exactly-sized buffer. Always a copy: a chunk is
/// a slice of hyper's read buffer, and keeping it would pin that whole buffer
/// in the zone while the zone counts only the slice.
fn concat(chunks: Vec<Bytes>, total: usize) -> Bytes {
    let mut buf = BytesMut::with_capacity(total);
    for c in chunks {
        buf.extend_from_slice(&c);
    }
    buf.freeze()
}

/// How long to wait before refreshing a warmed object: SUS's delta before expiry.
pub fn warm_refresh_in(object: &CachedObject, now: Instant) -> Duration {
    let meta = &object.meta;
    let lead = meta.sus_delta();
    meta.expires_at()
        .saturating_duration_since(now)
        .saturating_sub(lead)
}
