//! A route's `error_pages` (NGINX's `error_page`): an answer whose status
//! the route lists is replaced by a page from a route that answers itself
//! (a file route, a `return`), found by routing the page's path again as a
//! GET (internal routes reachable) or by its `@name`. For answers
//! calmcache made itself (a `return`, a file route's refusal, internal's
//! 404, 502/503/504), and for the origin's own when the route says
//! `intercept_errors`.
//!
//! One level only (NGINX's `recursive_error_pages off`): the page's own
//! answer is never replaced, and a page that is not there leaves the
//! answer as it was. The replacement is this client's alone: nothing is
//! stored under the request's key. Counted once, on the request's route.
//!
//! Costs a request nothing when its route has no `error_pages`: [`Pending::of`]
//! is `None` then, before anything is allocated.

use http::header::RETRY_AFTER;
use http::{HeaderMap, Method, Request, StatusCode};

use crate::config::answering::{PageStatus, PageTarget};
use crate::config::RouteConfig;
use crate::http::body::ResponseBody;
use crate::http::headers::CACHE_STATUS;
use crate::net::conn::Peer;
use crate::proxy::answer::Answer;
use crate::proxy::answering::{self, Asked};
use crate::proxy::state::{Entry, Worker};

/// What an error page needs of the request it replaces an answer for.
pub(crate) struct Pending {
    host: String,
    path_and_query: String,
    head: bool,
}

impl Pending {
    /// `None` when `route` has no error pages (nothing is copied then).
    pub(crate) fn of<B>(route: &RouteConfig, req: &Request<B>) -> Option<Pending> {
        if route.error_pages.is_empty() {
            return None;
        }
        let asked = Asked::of(req);
        Some(Pending {
            host: asked.host.to_owned(),
            path_and_query: asked.path_and_query.to_owned(),
            head: *req.method() == Method::HEAD,
        })
    }
}

/// `answer`, or the error page `route` gives its status.
pub(crate) async fn after<'w>(
    worker: &'w Worker,
    route: &RouteConfig,
    pending: &Pending,
    answer: Answer<'w>,
    client: Peer,
) -> Answer<'w> {
    let status = answer.resp.status();
    let Some(page) = route.error_page(status.as_u16()) else {
        return answer;
    };
    let made = answer
        .resp
        .extensions()
        .get::<crate::http::error::Made>()
        .is_some();
    if !(made || route.upstream().is_none() || route.intercept_errors) {
        return answer;
    }
    let (entry, path) = match &page.target {
        PageTarget::Uri(path) => (
            worker
                .route_for(client.listener, &pending.host, path, 0)
                .map(|(_, e)| e),
            path.as_str(),
        ),
        PageTarget::Named(name) => (
            worker.proxy.table.iter().find(|e| &e.cfg().name == name),
            pending.path_and_query.as_str(),
        ),
    };
    // A page from the origin is not there yet (check refuses an @name that
    // proxies; a path that routes to the origin answers plain).
    let Some(Entry::Answering(target)) = entry else {
        return answer;
    };
    let headers = HeaderMap::new();
    let asked = Asked {
        method: &Method::GET,
        path_and_query: path,
        host: &pending.host,
        headers: &headers,
    };
    let Some(shown) = Box::pin(answering::answer(target, &asked, client)).await else {
        return answer;
    };
    // The page route's own refusal (a file route with `absent = "404"`
    // and no such file): the page is not there either.
    if shown
        .resp
        .extensions()
        .get::<crate::http::error::Made>()
        .is_some()
    {
        return answer;
    }
    replace(answer, shown.resp, page.status, status, pending.head)
}

/// The page's response in place of `answer`'s, with the status `how`
/// says, `answer`'s `Cache-Status`, and no body for a HEAD.
fn replace<'w>(
    answer: Answer<'w>,
    page: http::Response<ResponseBody>,
    how: PageStatus,
    original: StatusCode,
    head: bool,
) -> Answer<'w> {
    let (mut parts, body) = page.into_parts();
    parts.status = match how {
        PageStatus::Original => original,
        PageStatus::Target => parts.status,
        PageStatus::Set(status) => status,
    };
    parts.headers.remove(&CACHE_STATUS);
    for value in answer.resp.headers().get_all(&CACHE_STATUS) {
        parts.headers.append(CACHE_STATUS.clone(), value.clone());
    }
    // A limit's refusal keeps saying when to come back, while its status
    // is the one the client gets.
    if let Some(retry) = answer.resp.headers().get(RETRY_AFTER) {
        if parts.status == original {
            parts.headers.insert(RETRY_AFTER, retry.clone());
        }
    }
    let body = if head { ResponseBody::empty() } else { body };
    Answer {
        resp: http::Response::from_parts(parts, body),
        ..answer
    }
}
