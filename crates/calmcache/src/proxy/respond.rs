//! Building client responses: from a stored object (content coding, client
//! preconditions, ranges, targeted fields, `Age`, `Cache-Status`), from a
//! relayed origin response, or from an error.

use calmcache_core::{CacheStatus, CachedObject, Report};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use tokio::time::Instant;

use crate::http::body::ResponseBody;
use crate::http::compress::{self, Coding};
use crate::http::compress_passed::ClientAsk;
use crate::http::conditional::{self, Precondition};
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::{set_age, set_cache_status};
use crate::http::paged::PagedSlice;
use crate::http::range;
use crate::proxy::answer::Answer;
use crate::proxy::growing_range;
use crate::proxy::state::Route;

/// What a response depends on in the request.
pub(crate) struct Ask<'a> {
    /// HEAD: headers only.
    pub head_only: bool,
    /// The client's request headers (preconditions, Range, Accept-Encoding).
    pub headers: &'a HeaderMap,
    /// The cache key for `Cache-Status`, when the route shows it.
    pub key: Option<String>,
}

impl Ask<'_> {
    /// A GET carrying `Range`.
    pub(crate) fn wants_range(&self) -> bool {
        !self.head_only && self.headers.contains_key(header::RANGE)
    }
}

/// Answers from a stored object: shared body, fresh `Age` and `Cache-Status`.
pub(crate) fn serve<'r>(
    route: &'r Route,
    object: &CachedObject,
    mut report: Report,
    ask: &Ask<'_>,
    now: Instant,
) -> Answer<'r> {
    // RFC 9211 §2.5: ttl is an integer; rounded to the nearest second.
    report.ttl = Some(object.meta.ttl_left(now).round() as i64);
    let mut status = object.status;
    let mut headers = object.served_headers();
    let mut body = object.body.clone();
    if !object.encodings().is_empty() {
        if let Some((coding, encoded)) = pick_encoding(object, ask.headers) {
            body = encoded;
            headers.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(coding.as_str()),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            // RFC 9110 §8.8.3: another encoding is another representation.
            if let Some(weak) = headers.get(header::ETAG).and_then(compress::weak_etag) {
                headers.insert(header::ETAG, weak);
            }
        }
    }
    if object.has_targeted {
        route.strip_targeted(&mut headers);
    }
    set_age(&mut headers, object.meta.age(now).as_secs());
    // RFC 9110 §13.2.1: preconditions are ignored when the response would
    // not be a 2xx.
    if let Some(answer) = status
        .is_success()
        .then(|| precondition(ask, &mut headers))
        .flatten()
    {
        status = answer;
        body = bytes::Bytes::new();
    }
    // Unless preconditions turned it into a 304 / 412 (no body).
    if let Some(lazy) = object.lazy_body().filter(|_| status == object.status) {
        // A large disk object: streamed from its file.
        set_cache_status(&mut headers, &report, ask.key.as_deref());
        let resp = lazy_response(route, lazy, status, headers, ask);
        return Answer::answered(route, &report, resp);
    }
    if status == StatusCode::OK && ask.wants_range() {
        let plan = range::plan(ask.headers, &headers, body.len() as u64);
        body = range::render(&plan, &mut status, &mut headers, &body);
    }
    set_cache_status(&mut headers, &report, ask.key.as_deref());
    let body = if ask.head_only {
        ResponseBody::empty()
    } else {
        route.activity.bytes_from_cache.add(body.len() as u64);
        match PagedSlice::of(object, &body) {
            Some(paged) => ResponseBody::Paged(Some(paged)),
            None => ResponseBody::full(body),
        }
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    Answer::answered(route, &report, resp)
}

/// A 200 (or 206/416 for a range) whose body streams from a disk file.
fn lazy_response(
    route: &Route,
    lazy: &calmcache_core::LazyBody,
    mut status: StatusCode,
    mut headers: HeaderMap,
    ask: &Ask<'_>,
) -> Response<ResponseBody> {
    let mut start = 0;
    let mut len = lazy.len;
    if status == StatusCode::OK && ask.wants_range() {
        match range::plan(ask.headers, &headers, lazy.len) {
            range::RangePlan::Single(r) => {
                status = StatusCode::PARTIAL_CONTENT;
                start = r.start;
                len = r.end - r.start + 1;
                let value = format!("bytes {}-{}/{}", r.start, r.end, lazy.len);
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(header::CONTENT_RANGE, value);
                }
            }
            range::RangePlan::Unsatisfiable => {
                // `bytes */len`: the file's length, not the empty body's.
                status = range::unsatisfiable(&mut headers, lazy.len);
                let mut resp = Response::new(ResponseBody::empty());
                *resp.status_mut() = status;
                *resp.headers_mut() = headers;
                return resp;
            }
            // Several ranges of a large file: the whole body (RFC 9110 §14.2
            // lets a server ignore Range).
            range::RangePlan::Multi(_) | range::RangePlan::Full => {}
        }
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    let body = if ask.head_only {
        ResponseBody::empty()
    } else {
        route.activity.bytes_from_cache.add(len);
        crate::http::file_body::file_body(lazy, start, len, start == 0 && len == lazy.len)
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

/// Answers from a response still arriving (read-while-write): its head now,
/// its body as it comes. Preconditions are answered from the head; a Range
/// from the bytes as they arrive (`growing_range.rs`).
pub(crate) async fn serve_streaming<'r>(
    route: &'r Route,
    head: &crate::proxy::growing::StreamingHead,
    mut report: Report,
    ask: &Ask<'_>,
) -> Answer<'r> {
    report.ttl = Some(head.ttl.round() as i64);
    let mut status = head.status;
    let mut headers = head.headers.clone();
    route.strip_targeted(&mut headers);
    set_age(&mut headers, 0);
    let mut with_body = !ask.head_only;
    if let Some(answer) = status
        .is_success()
        .then(|| precondition(ask, &mut headers))
        .flatten()
    {
        status = answer;
        with_body = false;
    }
    let ranged = if with_body && status == StatusCode::OK && ask.wants_range() {
        let growing = &head.growing;
        match growing_range::answer(growing, &head.first, ask.headers, &mut headers).await {
            Ok(ranged) => ranged,
            Err(why) => {
                let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, why);
                return Answer::answered(route, &report, error_response(&e, &report));
            }
        }
    } else {
        None
    };
    set_cache_status(&mut headers, &report, ask.key.as_deref());
    let body = if let Some(ranged) = ranged {
        status = ranged.status;
        route.activity.bytes_from_cache.add(ranged.bytes);
        // The fill's first reader is not this answer's: let it go.
        drop(head.first.take());
        ranged.body
    } else if with_body {
        // Counted when known (a chunked body's length is not, yet).
        route
            .activity
            .bytes_from_cache
            .add(head.growing.len.unwrap_or(0));
        head.first.take().unwrap_or_else(|| head.growing.reader())
    } else {
        // A reader nobody will read must not hold the body back.
        drop(head.first.take());
        ResponseBody::empty()
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    Answer::answered(route, &report, resp)
}

/// RFC 9110 §13.2.2: the client's preconditions, evaluated against the
/// response about to be sent (`headers`). When they do not hold: the
/// status to send instead (304 or 412), `headers` trimmed to suit; the
/// caller drops the body. The one place every respond path asks.
fn precondition(ask: &Ask<'_>, headers: &mut HeaderMap) -> Option<StatusCode> {
    if !conditional::has_preconditions(ask.headers) {
        return None;
    }
    match conditional::evaluate(ask.headers, headers) {
        Precondition::Proceed => None,
        Precondition::NotModified => {
            conditional::not_modified_headers(headers);
            Some(StatusCode::NOT_MODIFIED)
        }
        Precondition::Failed => {
            conditional::precondition_failed_headers(headers);
            Some(StatusCode::PRECONDITION_FAILED)
        }
    }
}

/// The encoding of `object` the client's `Accept-Encoding` prefers, if any.
fn pick_encoding(object: &CachedObject, request: &HeaderMap) -> Option<(Coding, bytes::Bytes)> {
    let available: Vec<Coding> = object
        .encodings()
        .iter()
        .filter_map(|e| Coding::parse(e.coding))
        .collect();
    let coding = compress::negotiate(request.get_all(header::ACCEPT_ENCODING).iter(), &available)?;
    Some((coding, object.encoding(coding.as_str())?.clone()))
}

/// Relays an origin response that was not stored, answering the client's
/// preconditions from it when they match (the upstream request carried none),
/// compressed on the fly when the route's `compress_passed` says so.
pub(crate) fn relay<'r>(
    route: &'r Route,
    mut resp: Response<ResponseBody>,
    report: Report,
    ask: &Ask<'_>,
) -> Answer<'r> {
    // Only a 200: the origin's other answers are relayed as they are.
    if resp.status() == StatusCode::OK {
        if let Some(answer) = precondition(ask, resp.headers_mut()) {
            *resp.status_mut() = answer;
            *resp.body_mut() = ResponseBody::empty();
        }
    }
    if ask.head_only {
        *resp.body_mut() = ResponseBody::empty();
    }
    let compression = &route.cfg.answers.compress_passed;
    if !compression.is_off() {
        let client = compression.client(ClientAsk {
            headers: ask.headers,
            head_only: ask.head_only,
        });
        resp = compression.apply(client, resp);
    }
    route.strip_targeted(resp.headers_mut());
    set_cache_status(resp.headers_mut(), &report, ask.key.as_deref());
    Answer::answered(route, &report, resp)
}

/// A short error page; the one place errors meet clients. An origin that
/// was busy (its budget full) says when to ask again (`Retry-After`).
pub(crate) fn error_response(e: &ProxyError, report: &Report) -> Response<ResponseBody> {
    let mut resp = plain(
        e.status(),
        bytes::Bytes::from_static(e.body().as_bytes()),
        report,
    );
    if let Some(seconds) = e.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    resp.extensions_mut().insert(crate::http::error::Made);
    resp
}

/// The answer to a request that failed with `e`, reported as `report`
/// (with `detail=origin-busy` when the origin budget refused it).
pub(crate) fn failed<'r>(route: &'r Route, e: &ProxyError, report: Report) -> Answer<'r> {
    let report = failed_report(e, report);
    Answer::answered(route, &report, error_response(e, &report))
}

/// `report`, with `detail=origin-busy` when `e` is the origin budget's refusal.
pub(crate) fn failed_report(e: &ProxyError, report: Report) -> Report {
    match e.kind {
        ErrorKind::OriginBusy { .. } => report.detail(ORIGIN_BUSY),
        _ => report,
    }
}

/// The `Cache-Status` detail of an answer the origin budget shaped: a
/// stale copy served, or a 503, because the origin was busy.
pub(crate) const ORIGIN_BUSY: &str = "origin-busy";

/// A follower's copy of the error answer its leader got from the origin
/// (see `fill::ErrorAnswer`): relayed as the leader's was.
pub(crate) fn error_answer<'r>(
    route: &'r Route,
    answer: &crate::proxy::outcome::ErrorAnswer,
    report: Report,
    ask: &Ask<'_>,
) -> Answer<'r> {
    let mut resp = Response::new(ResponseBody::full(answer.body.clone()));
    *resp.status_mut() = answer.status;
    *resp.headers_mut() = answer.headers.clone();
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(answer.body.len()));
    relay(route, resp, report, ask)
}

/// The answer to a request the edge refused: the status line's reason and
/// what was wrong (a fixed description, never the client's bytes echoed).
pub(crate) fn refusal_response(e: &ProxyError, report: &Report) -> Response<ResponseBody> {
    let reason = e.status().canonical_reason().unwrap_or("refused");
    let body = format!("{} {reason}: {}\n", e.status().as_u16(), e.cause);
    plain(e.status(), bytes::Bytes::from(body), report)
}

/// A 504 for `only-if-cached` with nothing usable stored (RFC 9111 §5.2.1.7).
pub(crate) fn only_if_cached(route: &Route, fwd: calmcache_core::Fwd) -> Answer<'_> {
    let mut report = CacheStatus::MissNotStored
        .report()
        .fwd(fwd)
        .detail("only-if-cached");
    report.stored = false;
    let resp = plain(
        StatusCode::GATEWAY_TIMEOUT,
        bytes::Bytes::from_static(b"not in cache (only-if-cached)\n"),
        &report,
    );
    Answer::answered(route, &report, resp)
}

fn plain(status: StatusCode, body: bytes::Bytes, report: &Report) -> Response<ResponseBody> {
    let mut resp = Response::new(ResponseBody::full(body));
    *resp.status_mut() = status;
    set_cache_status(resp.headers_mut(), report, None);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
