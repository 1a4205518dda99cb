//! Requests the cache stays out of: passed to the origin and relayed
//! uncached (methods other than GET/HEAD, routes without a zone, bodies on
//! GET/HEAD, ambiguous keys, keyed bodies too large or not JSON), and
//! refusals from the edge.
//!
//! An answer relayed here is compressed on the fly when the route says so
//! (`compress_passed`, http/compress_passed.rs), as `respond::relay` does
//! for the uncached answers of fetches.
//!
//! Must not look up, coalesce or store.

use calmcache_core::{CacheStatus, Fwd, Report};
use http::header::{self, HeaderValue};
use http::{Request, Response};
use hyper::body::Incoming;

use crate::http::body::{ResponseBody, TimeoutBody};
use crate::http::compress_passed::ClientAsk;
use crate::http::error::ProxyError;
use crate::http::headers::{add_forwarded, set_cache_status, strip_hop_by_hop};
use crate::net::budget::Admission;
use crate::net::conn::Peer;
use crate::proxy::answer::{Answer, Told};
use crate::proxy::state::{Proxy, Route};

/// The log target of this file's lines: they were `handle.rs`'s before the
/// request path was split, and a `CALMCACHE_LOG` filter may name it.
pub(crate) const LOG: &str = "calmcache::proxy::handle";

/// The answer to a request the edge refused; an HTTP/1.x connection is
/// closed after it, since its framing can no longer be trusted.
pub(crate) fn refused(e: &ProxyError, version: http::Version) -> Response<ResponseBody> {
    tracing::debug!(target: LOG, error = %e, "request refused");
    let mut resp = crate::proxy::respond::refusal_response(e, &CacheStatus::Bypass.report());
    if version < http::Version::HTTP_2 && e.closes_connection() {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// A GET or HEAD whose framing announced a body (request_body.rs): read
/// whole, then passed with it (`Err`: the answer, from the origin or a
/// refusal of the body), or, empty, given back to go on as if bodiless.
pub(crate) async fn with_body<'r>(
    proxy: &Proxy,
    route: &'r Route,
    mut req: Request<Incoming>,
    client: Peer,
) -> Result<Request<Incoming>, Answer<'r>> {
    let limit = route.upstream.send_timeout;
    let body = match crate::proxy::request_body::read_whole(req.body_mut(), limit).await {
        Ok(Some(body)) => body,
        Ok(None) => return Ok(req),
        Err(e) => {
            proxy.metrics.requests_refused.inc();
            return Err(Answer::refused(refused(&e, req.version())));
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

/// A request keyed by its body that the cache stays out of after all (its
/// body over `max_body_key`, or not JSON with `body_key = "json"`): passed
/// with the part of its body already `read`, the rest streamed after it,
/// reported as `report`.
pub(crate) async fn pass_read<'r>(
    proxy: &Proxy,
    route: &'r Route,
    req: Request<Incoming>,
    read: bytes::Bytes,
    client: Peer,
    report: Report,
) -> Answer<'r> {
    let (parts, rest) = req.into_parts();
    let body = crate::http::body::PrefixedBody::new(vec![read], rest);
    let (body, watch) = crate::http::body::ClientBody::watch(body, route.upstream.send_timeout);
    let req = Request::from_parts(parts, body);
    forward(proxy, route, req, watch, client, report).await
}

/// Proxies without caching, streaming both bodies. A non-error answer to an
/// unsafe method invalidates the URIs it names (RFC 9111 §4.4).
pub(crate) async fn pass<'r>(
    proxy: &Proxy,
    route: &'r Route,
    req: Request<Incoming>,
    client: Peer,
    fwd: Fwd,
) -> Answer<'r> {
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
async fn forward<'r>(
    proxy: &Proxy,
    route: &'r Route,
    req: Request<crate::http::body::StreamBody>,
    client_body: crate::http::body::ClientBody,
    client: Peer,
    report: Report,
) -> Answer<'r> {
    let upstream = &route.upstream;
    // A POST on a route that caches POST is a read (body_key.rs).
    let invalidation = crate::proxy::invalidate::Target::of(&req, client.scheme())
        .filter(|_| !route.keyed_by_body(req.method()));
    let version = req.version();
    // Read now: the request is gone when the answer comes.
    let compression = &route.cfg.answers.compress_passed;
    let client_takes = compression.client(ClientAsk {
        headers: req.headers(),
        head_only: req.method() == http::Method::HEAD,
    });
    let (mut parts, body) = req.into_parts();
    crate::proxy::edge::ensure_host(&mut parts.headers, &parts.uri);
    add_forwarded(&mut parts.headers, client.addr.ip(), client.scheme());
    let (method, uri) = (&parts.method, &parts.uri);
    crate::proxy::header_rules::to_upstream(route, method, uri, &mut parts.headers, client);
    let mut req = Request::from_parts(parts, body);
    crate::proxy::hints::relay_origin_hints(route, &mut req, client.scheme());
    // A pass has no copy to fall back on: it waits for an origin slot.
    let sent = upstream.send(req, Admission::Wait).await;
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
            let body = ResponseBody::stream(TimeoutBody::new(body, upstream.read_timeout));
            let resp = compression.apply(client_takes, Response::from_parts(parts, body));
            Answer::answered(route, &report, resp)
        }
        Err(e) => {
            // The client's body broke off or was malformed: its fault, not the origin's.
            if let Some(fault) = client_body.fault() {
                tracing::debug!(target: LOG, error = %e, "request body failed");
                route.activity.upstream_requests.inc();
                return Answer {
                    told: Told::Refused(Some((&route.activity, report))),
                    ..Answer::refused(refused(&fault, version))
                };
            }
            route.activity.upstream_failed(&e);
            if !e.repeats() {
                // Per request: a dead upstream must not flood the log.
                static FAILED: calmcache_core::warn_limit::WarnLimit =
                    calmcache_core::warn_limit::WarnLimit::new();
                calmcache_core::warn_limited!(FAILED, "origin request failed",
                    target: LOG, upstream = %upstream.name, error = %e);
            }
            crate::proxy::respond::failed(route, &e, report)
        }
    }
}
