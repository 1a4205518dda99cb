//! Routes that answer without the origin: `return` (give_back.rs), files
//! from `root` (files.rs), and `internal` routes' 404. Admission
//! (handle.rs) hands such a route here; the proxied path's code (fill/,
//! pass, fetch, tunnel) never sees one.
//!
//! Every answer is counted in the route's counters as class `bypass` and
//! says `Cache-Status: calmcache; detail=<return|file|internal>`: the cache
//! was not involved (no `hit`, no `fwd`: nothing was forwarded).
//!
//! Must not import the route table (state.rs's `Proxy`, `Worker`) or any
//! part of the proxied path: a file route that has no file says so
//! (`None`) and handle.rs routes on.

mod files;
mod give_back;

use calmcache_core::{CacheStatus, Report};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};

use crate::config::answering::RouteKind;
use crate::http::body::ResponseBody;
use crate::http::headers::CACHE_STATUS;
use crate::net::conn::Peer;
use crate::proxy::answer::Answer;
use crate::proxy::state::AnsweringRoute;
use crate::telemetry::stats::Activity;

/// What a route that answers itself reads of a request: a client's
/// (admitted and prepared by the edge), or an error page's GET
/// (proxy/error_pages.rs).
pub(crate) struct Asked<'a> {
    /// The method.
    pub method: &'a Method,
    /// The normalised path and query.
    pub path_and_query: &'a str,
    /// The admitted Host (empty without one).
    pub host: &'a str,
    /// The request's fields.
    pub headers: &'a HeaderMap,
}

impl<'a> Asked<'a> {
    /// What `req` asks.
    pub(crate) fn of<B>(req: &'a Request<B>) -> Self {
        Asked {
            method: req.method(),
            path_and_query: req.uri().path_and_query().map_or("/", |pq| pq.as_str()),
            host: crate::http::headers::host_of(req),
            headers: req.headers(),
        }
    }

    /// The path without the query.
    pub(crate) fn path(&self) -> &'a str {
        self.path_and_query
            .split_once('?')
            .map_or(self.path_and_query, |(path, _)| path)
    }
}

/// Answers `asked` on `route`; `None` for a file route without the file:
/// the next route that takes the request answers it (NGINX's `try_files
/// $uri @next`).
pub(crate) async fn answer<'w>(
    route: &'w AnsweringRoute,
    asked: &Asked<'_>,
    client: Peer,
) -> Option<Answer<'w>> {
    let (resp, how) = match &route.cfg.kind {
        RouteKind::Return(give_back) => (give_back::respond(give_back, asked, client), How::Return),
        RouteKind::Files(files) => match files::serve(files, asked).await {
            Some(resp) => (resp, How::File),
            None => return None,
        },
        // Admission hands only routes that answer themselves here.
        RouteKind::Proxy { .. } => (plain(StatusCode::NOT_FOUND), How::Internal),
    };
    Some(counted(&route.activity, resp, how))
}

/// The 404 a client gets from an `internal` route (of any kind).
pub(crate) fn internal(activity: &Activity) -> Answer<'_> {
    counted(activity, plain(StatusCode::NOT_FOUND), How::Internal)
}

/// What answered, as `Cache-Status` says it.
#[derive(Clone, Copy)]
enum How {
    Return,
    File,
    Internal,
}

impl How {
    /// The RFC 9211 member: no `hit`, no `fwd` (nothing was forwarded).
    fn member(self) -> &'static str {
        match self {
            How::Return => "calmcache; detail=return",
            How::File => "calmcache; detail=file",
            How::Internal => "calmcache; detail=internal",
        }
    }
}

/// `resp`, marked as answered without the cache and counted in
/// `activity` as class bypass.
fn counted(activity: &Activity, mut resp: Response<ResponseBody>, how: How) -> Answer<'_> {
    resp.headers_mut()
        .insert(CACHE_STATUS.clone(), HeaderValue::from_static(how.member()));
    let report: Report = CacheStatus::Bypass.report();
    Answer::counted(activity, &report, resp)
}

/// NGINX's own page for `status` (`<html>...<h1>404 Not Found</h1>...`),
/// as `text/html`; an empty body for a status without a reason phrase.
pub(crate) fn plain(status: StatusCode) -> Response<ResponseBody> {
    let page = nginx_page(status);
    let mut resp = Response::new(ResponseBody::full(page));
    *resp.status_mut() = status;
    resp.extensions_mut().insert(crate::http::error::Made);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/html"),
    );
    resp
}

/// The page NGINX sends for a status it makes itself, with `calmcache`
/// where NGINX names itself (CRLF line ends, as NGINX's).
pub(crate) fn nginx_page(status: StatusCode) -> String {
    let Some(reason) = status.canonical_reason() else {
        return String::new();
    };
    let code = status.as_u16();
    format!(
        "<html>\r\n<head><title>{code} {reason}</title></head>\r\n<body>\r\n\
         <center><h1>{code} {reason}</h1></center>\r\n<hr><center>calmcache</center>\r\n\
         </body>\r\n</html>\r\n"
    )
}
