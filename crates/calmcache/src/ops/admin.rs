//! The admin listener: `GET /` the live dashboard (one embedded page),
//! `GET /status` JSON counters (totals, per route, zone and upstream,
//! latency histograms), `GET /metrics` the same in Prometheus text format,
//! `GET /healthz`, `GET /readyz`, and `POST /purge`.
//!
//! Access, in this order (see [`handle`]):
//! - `GET /healthz` and `GET /readyz` answer anyone (any `Host`, no token)
//!   and say nothing but ok / ready / starting, so load-balancer probes work.
//! - Every other request must name this listener in `Host` (or HTTP/2
//!   `:authority`): an IP literal, `localhost`, or one of `admin.names`;
//!   anything else is 421 (a DNS-rebinding page names its own domain), no
//!   `Host` at all is 400.
//! - `POST /purge` and `POST /reload` change state: a browser request from
//!   another site (`Origin` not this listener's own, or `Sec-Fetch-Site`
//!   other than `same-origin`/`none`) is 403; `POST /purge` always needs
//!   `Authorization: Bearer <admin.token>`, `POST /reload` whenever a token
//!   is configured (loopback too).
//! - `GET /` (the dashboard page, which holds no data) needs no token; the
//!   rest needs it when the listener is not on a loopback address.

use std::convert::Infallible;
use std::sync::Arc;

use http::header;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use std::sync::atomic::Ordering;

use crate::http::body::ResponseBody;
use crate::http::reply::{bearer_matches, json_error, plain, unauthorized, with_type};
use crate::ops::status::status;
use crate::proxy::state::Proxy;

/// The dashboard page, embedded in the binary.
const DASHBOARD: &str = include_str!("dashboard.html");

/// Largest `POST /purge` body read.
const PURGE_BODY_MAX: usize = 64 * 1024;

/// What `POST /reload` asks of the running server (the run layer's
/// reloader: ops does not import it).
pub(crate) trait Reload: Send + Sync {
    /// Reads the config file again and applies it: what changed, in words,
    /// or every problem (the running config stays).
    fn reload_file(self: Arc<Self>) -> ReloadFuture;
}

/// Why a reload was refused, as `POST /reload` lists it (the run layer's
/// error: ops renders it without knowing its variants).
pub(crate) trait ReloadRefusal: std::error::Error + Send + Sync {
    /// Every problem, one line each (an invalid config lists all of its own).
    fn problems(&self) -> Vec<String>;
}

/// A reload under way: the notes of what changed, or why it was refused.
pub(crate) type ReloadFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<String>, Box<dyn ReloadRefusal>>> + Send>,
>;

/// Serves the admin endpoints, after the access checks of the module doc.
pub(crate) async fn handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
    reloader: Arc<dyn Reload>,
) -> Result<Response<ResponseBody>, Infallible> {
    let path = req.uri().path();
    let admin = proxy.admin.as_ref();
    let get = req.method() == Method::GET;
    // Probes often send no Host, or one calmcache cannot know; the answers
    // are "ok", "ready" or "starting" and nothing else.
    let health = get && matches!(path, "/healthz" | "/readyz");
    if !health {
        let names = admin.map_or(&[][..], |a| a.names.as_slice());
        if let Some(refused) = refuse_host(&req, names) {
            return Ok(refused);
        }
    }
    let token = admin.and_then(|a| a.token.as_deref());
    let open = admin.is_none_or(|a| a.listen.ip().is_loopback());
    let authorized = token.is_some_and(|t| bearer_matches(req.headers(), t));
    if req.method() == Method::POST && matches!(path, "/purge" | "/reload") {
        if let Some(why) = cross_site(&req) {
            return Ok(plain(StatusCode::FORBIDDEN, why));
        }
        // POST /purge always takes the token; POST /reload whenever one is
        // configured (without one it is only reachable on loopback: the
        // config refuses a non-loopback listener without a token).
        let needs_token = path == "/purge" || token.is_some() || !open;
        if needs_token && !authorized {
            return Ok(unauthorized(token.is_some()));
        }
    } else {
        // The dashboard page holds no data: it asks for the token (a login
        // form) when /status answers 401.
        let public = health || (get && path == "/");
        if !open && !authorized && !public {
            return Ok(unauthorized(token.is_some()));
        }
    }
    let resp = match (req.method(), path) {
        (&Method::GET, "/") => with_type(
            Response::new(ResponseBody::full(DASHBOARD)),
            "text/html; charset=utf-8",
        ),
        (&Method::GET, "/status") => match serde_json::to_vec_pretty(&status(&proxy)) {
            Ok(json) => with_type(Response::new(ResponseBody::full(json)), "application/json"),
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("status: {e}\n")),
        },
        (&Method::GET, "/metrics") => with_type(
            Response::new(ResponseBody::full(crate::ops::prometheus::render(&status(
                &proxy,
            )))),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        (&Method::GET, "/healthz") => plain(StatusCode::OK, "ok\n".into()),
        (&Method::GET, "/readyz") => {
            if proxy.ready.load(Ordering::Relaxed) {
                plain(StatusCode::OK, "ready\n".into())
            } else {
                plain(StatusCode::SERVICE_UNAVAILABLE, "starting\n".into())
            }
        }
        (&Method::POST, "/purge") => purge(&proxy, req).await,
        (&Method::POST, "/reload") => reload(&reloader).await,
        (_, "/" | "/status" | "/metrics" | "/healthz" | "/readyz") => {
            plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into())
        }
        (_, "/purge" | "/reload") => plain(StatusCode::METHOD_NOT_ALLOWED, "use POST\n".into()),
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found; try GET /, /status, /metrics, /healthz, /readyz, POST /purge or POST /reload\n"
                .into(),
        ),
    };
    Ok(resp)
}

/// `POST /reload`: reads the config file again; 200 with what changed, or
/// 422 with every problem (the running config stays).
async fn reload(reloader: &Arc<dyn Reload>) -> Response<ResponseBody> {
    let (status, body) = match reloader.clone().reload_file().await {
        Ok(notes) => (
            StatusCode::OK,
            serde_json::json!({"reloaded": true, "notes": notes}),
        ),
        Err(refused) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({"reloaded": false, "errors": refused.problems()}),
        ),
    };
    let mut resp = with_type(
        Response::new(ResponseBody::full(body.to_string() + "\n")),
        "application/json",
    );
    *resp.status_mut() = status;
    resp
}

async fn purge(proxy: &Arc<Proxy>, req: Request<Incoming>) -> Response<ResponseBody> {
    use http_body_util::BodyExt;
    let limited = http_body_util::Limited::new(req.into_body(), PURGE_BODY_MAX);
    let body = match limited.collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return json_error(StatusCode::BAD_REQUEST, &format!("purge body: {e}")),
    };
    match crate::proxy::purge::Purge::from_json(&body) {
        Ok(order) => crate::proxy::purge::purged_response(
            crate::proxy::purge::run_everywhere(proxy, order).await,
        ),
        Err(e) => json_error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// The `Host` (and HTTP/2 `:authority` or absolute-form target) of `req`,
/// checked against the names this listener answers to: the refusal (400
/// without any, 421 for a name it does not know), or `None`.
fn refuse_host<B>(req: &Request<B>, names: &[String]) -> Option<Response<ResponseBody>> {
    let header = req.headers().get(header::HOST);
    let target = req.uri().authority().map(|a| a.as_str());
    if header.is_none() && target.is_none() {
        return Some(plain(
            StatusCode::BAD_REQUEST,
            "no Host header: the admin listener answers only requests that name it\n".into(),
        ));
    }
    if let Some(value) = header {
        let text = value.to_str().unwrap_or("");
        if !host_allowed(text, names) {
            return Some(misdirected(
                "Host header",
                &String::from_utf8_lossy(value.as_bytes()),
            ));
        }
    }
    if let Some(authority) = target {
        if !host_allowed(authority, names) {
            return Some(misdirected("request target authority", authority));
        }
    }
    None
}

fn misdirected(what: &str, value: &str) -> Response<ResponseBody> {
    let value: String = value.chars().take(100).collect();
    plain(
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "{what} {value:?} does not name this admin listener: use its IP address, \
             localhost, or a name listed in admin.names\n"
        ),
    )
}

/// True when `authority` (`host[:port]`) names an IP literal (`127.0.0.1`,
/// `[::1]`), `localhost`, or one of `names` (lower case); the port is not
/// compared (port mappings and proxies change it), only checked to be a number.
/// A DNS-rebinding page always sends its own domain name, never an IP literal.
pub(crate) fn host_allowed(authority: &str, names: &[String]) -> bool {
    // One reading of host[:port] for the proxy and the admin listener.
    let Ok((host, _port)) = crate::proxy::edge::split_authority(authority) else {
        return false;
    };
    if let Some(ip) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return ip.parse::<std::net::Ipv6Addr>().is_ok();
    }
    if host.parse::<std::net::Ipv4Addr>().is_ok() || host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty() && names.iter().any(|n| n.eq_ignore_ascii_case(host))
}

/// Why a state-changing request looks like a browser's from another site
/// (a cross-site form or fetch), or `None`: an `Origin` other than this
/// listener's own (`http(s)://` + the `Host` it was reached by), or a
/// `Sec-Fetch-Site` other than `same-origin` / `none`. Clients that are not
/// browsers (curl, `calmcache reload`) send neither.
fn cross_site<B>(req: &Request<B>) -> Option<String> {
    let headers = req.headers();
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = String::from_utf8_lossy(site.as_bytes());
        if !matches!(site.trim(), "same-origin" | "none") {
            return Some(format!(
                "Sec-Fetch-Site: {site}: a page of another site cannot drive the admin API\n"
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        let own = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()));
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        let same = matches!((authority, own), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h));
        if !same {
            let origin: String = origin.chars().take(100).collect();
            return Some(format!(
                "Origin {origin:?} is not this admin listener: a page of another site \
                 cannot drive the admin API\n"
            ));
        }
    }
    None
}

/// How long `calmcache reload` waits for the answer: a reload that opens
/// disk zones may take a moment; not forever.
const RELOAD_ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Why `calmcache reload` got no answer from the admin listener. Each
/// variant is its cause itself or names it as `source()`: `calmcache`
/// prints the whole chain.
#[derive(Debug, thiserror::Error)]
pub enum ReloadRequestError {
    /// No connection: nothing listens there, or it is unreachable.
    #[error(transparent)]
    Connect(std::io::Error),
    /// The request could not be built (a token that is no header value).
    #[error(transparent)]
    Request(#[from] http::Error),
    /// The HTTP exchange broke (handshake, request, response body).
    #[error(transparent)]
    Exchange(#[from] hyper::Error),
    /// No answer within `RELOAD_ANSWER_WITHIN` (the message says 60 s).
    #[error("no answer within 60 s")]
    Timeout(#[source] tokio::time::error::Elapsed),
}

/// `calmcache reload`: sends `POST /reload` to the admin listener at `addr`
/// (a wildcard address is asked on loopback) and returns its status and body.
pub async fn post_reload(
    addr: std::net::SocketAddr,
    token: Option<&str>,
) -> Result<(u16, String), ReloadRequestError> {
    use http_body_util::BodyExt;
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(ReloadRequestError::Connect)?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut req = Request::post("/reload").header(header::HOST, addr.to_string());
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req.body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let resp = tokio::time::timeout(RELOAD_ANSWER_WITHIN, sender.send_request(req))
        .await
        .map_err(ReloadRequestError::Timeout)??;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_ip_literals_localhost_or_configured_names() {
        let names = vec!["admin.example".to_owned()];
        for ok in [
            "127.0.0.1",
            "127.0.0.1:9090",
            "10.1.2.3:80",
            "[::1]",
            "[::1]:9090",
            "localhost",
            "LOCALHOST:9090",
            "admin.example",
            "Admin.Example:9090",
            "admin.example.",
        ] {
            assert!(host_allowed(ok, &names), "{ok}");
        }
        for refused in [
            "",
            "evil.example",
            "evil.example:9090",
            "admin.example.evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "::1",
            "[::1",
            "[nope]:1",
            "127.0.0.1:port",
            "127.0.0.1:123456",
            "127.0.0.1:80:80",
        ] {
            assert!(!host_allowed(refused, &names), "{refused:?}");
        }
        assert!(!host_allowed("admin.example", &[]));
    }
}
