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

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Serialize;

use std::sync::atomic::Ordering;

use crate::http::body::ResponseBody;
use crate::proxy::state::Proxy;
use crate::telemetry::metrics::{Class, HistogramSnapshot, BOUNDS};
use crate::telemetry::stats::ActivitySnapshot;

/// The `/status` document.
#[derive(Serialize, Debug)]
pub struct Status {
    /// calmcache's version.
    pub version: &'static str,
    /// Seconds since start.
    pub uptime_seconds: f64,
    /// Client connections (proxy listeners).
    pub connections: Connections,
    /// WebSocket tunnels.
    pub websockets: Websockets,
    /// Sum over all routes.
    pub totals: ActivitySnapshot,
    /// Answers by class, disjoint: they sum to `totals.requests` (give or
    /// take requests in progress).
    pub cache_status: BTreeMap<&'static str, u64>,
    /// Time to the response head, by class and by upstream.
    pub latency: Latency,
    /// Per upstream.
    pub upstreams: BTreeMap<String, UpstreamStatus>,
    /// Purges served.
    pub purges: Purges,
    /// Config reloads.
    pub reloads: Reloads,
    /// Requests refused at the edge (malformed or ambiguous: 400, 417, 501),
    /// counted in no route.
    pub requests_refused: u64,
    /// Bytes of response bodies held in RAM by fills in progress now.
    pub inflight_body_bytes: u64,
    /// `server.max_inflight_body`: past it, new fills stream through uncached.
    pub inflight_body_limit: u64,
    /// Fills that streamed through uncached because the budget was spent.
    pub fills_over_budget: u64,
    /// The access log, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<AccessLogStatus>,
    /// Per route, by name.
    pub routes: BTreeMap<String, RouteStatus>,
    /// Per zone, by name.
    pub zones: BTreeMap<String, ZoneStatus>,
    /// Fetches in flight right now.
    pub fetches_in_flight: usize,
}

/// Client connections.
#[derive(Serialize, Debug)]
pub struct Connections {
    /// Open now.
    pub active: u64,
    /// Accepted since start.
    pub accepted: u64,
    /// Closed (or, on HTTP/2, one stream reset) because the client took no
    /// bytes for `server.send_timeout`.
    pub send_timeouts: u64,
}

/// WebSocket tunnels (an upgraded connection counts here, no longer in
/// `connections.active`).
#[derive(Serialize, Debug)]
pub struct Websockets {
    /// Open now.
    pub active: u64,
    /// Opened since start.
    pub total: u64,
}

/// Latency histograms (cumulative bucket counts for the bounds in `le`).
#[derive(Serialize, Debug)]
pub struct Latency {
    /// Bucket upper bounds in seconds (a last bucket, +Inf, follows).
    pub le: &'static [f64],
    /// Answers, by class.
    pub by_cache_status: BTreeMap<&'static str, HistogramSnapshot>,
    /// Upstream responses (to their head), by upstream.
    pub by_upstream: BTreeMap<String, HistogramSnapshot>,
}

/// One upstream's counters.
#[derive(Serialize, Debug)]
pub struct UpstreamStatus {
    /// Requests sent.
    pub requests: u64,
    /// Failed or 5xx.
    pub errors: u64,
    /// Its servers.
    pub servers: Vec<String>,
    /// Requests sent to another server because the one round robin chose
    /// was down.
    pub skipped: u64,
    /// Requests refused at once (502, or a stale copy) because every
    /// server was down.
    pub all_down: u64,
    /// Each server's health, in `servers` order.
    pub health: Vec<crate::net::health::ServerStatus>,
}

/// Access log counters.
#[derive(Serialize, Debug)]
pub struct AccessLogStatus {
    /// Lines lost: the writer's queue was full, or a write failed.
    pub dropped: u64,
}

/// Reload counters.
#[derive(Serialize, Debug)]
pub struct Reloads {
    /// Reloads applied.
    pub ok: u64,
    /// Reloads refused (the config before them stayed).
    pub failed: u64,
}

/// Purge counters.
#[derive(Serialize, Debug)]
pub struct Purges {
    /// Purge requests served.
    pub requests: u64,
    /// Objects removed or marked stale.
    pub objects: u64,
}

/// One route's counters.
#[derive(Serialize, Debug)]
pub struct RouteStatus {
    /// Upstream name.
    pub upstream: String,
    /// Zone name, if caching (the first of `zones`).
    pub zone: Option<String>,
    /// Every zone the route places keys in, when it has several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Refresh policy.
    pub refresh: &'static str,
    /// Counters.
    #[serde(flatten)]
    pub activity: ActivitySnapshot,
}

/// One zone's counters (the sum of its routes) and occupancy.
#[derive(Serialize, Debug)]
pub struct ZoneStatus {
    /// `memory` or `disk`.
    pub kind: &'static str,
    /// Bytes in use.
    pub size_bytes: u64,
    /// Configured bound.
    pub max_size_bytes: u64,
    /// Objects held.
    pub objects: u64,
    /// Disk zones only: evictions, loader progress, disk errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskStatus>,
    /// Counters of the routes using this zone.
    #[serde(flatten)]
    pub activity: ActivitySnapshot,
}

/// A disk zone's own counters.
#[derive(Debug, Serialize)]
pub struct DiskStatus {
    /// The zone directory.
    pub path: String,
    /// Objects removed to stay under max_size / min_free.
    pub evictions: u64,
    /// Objects removed because the file system filled before max_size.
    pub evictions_nospace: u64,
    /// Writes that failed for lack of space (ENOSPC, EDQUOT); also in `errors`.
    pub write_failures_nospace: u64,
    /// The size the zone is kept under: max_size, or less while its file
    /// system holds less (95% of `fs_capacity_bytes`).
    pub effective_max_size_bytes: u64,
    /// What the file system holds for the zone (its files + free space), as
    /// last seen since a write found it full; null while max_size fits.
    pub fs_capacity_bytes: Option<u64>,
    /// The same in files (own files + free inodes), as last seen since a
    /// write found no inode left; null while there are plenty.
    pub fs_capacity_files: Option<u64>,
    /// Temp files of earlier starts (crash leftovers) removed by the loader.
    pub leftover_temp_files: u64,
    /// Bytes those leftovers held.
    pub leftover_temp_bytes: u64,
    /// Objects removed after `inactive`.
    pub inactive_removed: u64,
    /// I/O errors (reads, writes, the loader): each one served from the origin.
    pub errors: u64,
    /// Torn, corrupt or foreign files found and removed.
    pub broken_files: u64,
    /// Files indexed by the loader so far.
    pub loaded: u64,
    /// The loader has scanned the whole directory.
    pub loader_done: bool,
}

impl DiskStatus {
    fn of(tier: &calmcache_core::disk::DiskTier) -> DiskStatus {
        use std::sync::atomic::Ordering::Relaxed;
        let s = tier.stats();
        DiskStatus {
            path: tier.config().path.display().to_string(),
            evictions: s.evictions.load(Relaxed),
            evictions_nospace: s.evictions_nospace.load(Relaxed),
            write_failures_nospace: s.write_failures_nospace.load(Relaxed),
            effective_max_size_bytes: tier.effective_max_size(),
            fs_capacity_bytes: tier.fs_capacity(),
            fs_capacity_files: tier.fs_file_capacity(),
            leftover_temp_files: s.leftover_temp_files.load(Relaxed),
            leftover_temp_bytes: s.leftover_temp_bytes.load(Relaxed),
            inactive_removed: s.expired_inactive.load(Relaxed),
            errors: s.errors.load(Relaxed),
            broken_files: s.broken_files.load(Relaxed),
            loaded: s.loaded.load(Relaxed),
            loader_done: s.loader_done.load(Relaxed),
        }
    }
}

/// Builds the status document.
pub fn status(proxy: &Proxy) -> Status {
    let mut totals = ActivitySnapshot::default();
    let mut routes = BTreeMap::new();
    let mut zones: BTreeMap<String, ZoneStatus> = proxy
        .zones
        .iter()
        .map(|z| {
            let zs = ZoneStatus {
                kind: if z.disk().is_some() { "disk" } else { "memory" },
                size_bytes: z.size_bytes(),
                max_size_bytes: z.max_size(),
                objects: z.objects(),
                disk: z.disk().map(|d| DiskStatus::of(d)),
                activity: ActivitySnapshot::default(),
            };
            (z.name.clone(), zs)
        })
        .collect();
    for route in &proxy.routes {
        let snap = route.activity.snapshot();
        totals += &snap;
        // A route's counters belong to its zone; a route spread over several
        // zones is counted per route only (its zones show bytes and objects).
        let single = route.zones.len() <= 1;
        if let Some(zone) = route
            .zone
            .as_ref()
            .filter(|_| single)
            .and_then(|z| zones.get_mut(&z.name))
        {
            zone.activity += &snap;
        }
        let rs = RouteStatus {
            upstream: route.upstream.name.clone(),
            zone: route.zone.as_ref().map(|z| z.name.clone()),
            zones: if single {
                Vec::new()
            } else {
                route.zones.iter().map(|(z, _)| z.name.clone()).collect()
            },
            refresh: route.policy.mode.as_str(),
            activity: snap,
        };
        routes.insert(route.cfg.name.clone(), rs);
    }
    let m = &proxy.metrics;
    let classes = || Class::ALL.iter().map(|c| (c.label(), *c as usize));
    let latency: BTreeMap<&'static str, HistogramSnapshot> = classes()
        .map(|(l, i)| (l, m.latency[i].snapshot()))
        .collect();
    Status {
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: m.started.elapsed().as_secs_f64(),
        connections: Connections {
            active: m.connections_active.load(Ordering::Relaxed),
            accepted: m.connections_accepted.get(),
            send_timeouts: m.send_timeouts.get(),
        },
        websockets: Websockets {
            active: m.websockets_active.load(Ordering::Relaxed),
            total: m.websockets_total.get(),
        },
        totals,
        // Each answer is one observation of its class's histogram.
        cache_status: latency.iter().map(|(l, h)| (*l, h.count)).collect(),
        latency: Latency {
            le: &BOUNDS,
            by_cache_status: latency,
            by_upstream: proxy
                .upstreams
                .iter()
                .map(|u| (u.name.clone(), u.stats.latency.snapshot()))
                .collect(),
        },
        upstreams: proxy
            .upstreams
            .iter()
            .map(|u| {
                let s = UpstreamStatus {
                    requests: u.stats.requests.get(),
                    errors: u.stats.errors.get(),
                    servers: u.servers(),
                    skipped: u.stats.skipped.get(),
                    all_down: u.stats.all_down.get(),
                    health: u.server_status(),
                };
                (u.name.clone(), s)
            })
            .collect(),
        purges: Purges {
            requests: m.purge_requests.get(),
            objects: m.purged_objects.get(),
        },
        reloads: Reloads {
            ok: m.reloads_ok.get(),
            failed: m.reloads_failed.get(),
        },
        requests_refused: m.requests_refused.get(),
        inflight_body_bytes: m.inflight.held(),
        inflight_body_limit: m.inflight.limit(),
        fills_over_budget: m.inflight.over_budget.get(),
        access_log: proxy.access_log.get().map(|log| AccessLogStatus {
            dropped: log.dropped(),
        }),
        routes,
        zones,
        fetches_in_flight: proxy.flights.in_flight(),
    }
}

/// The dashboard page, embedded in the binary.
const DASHBOARD: &str = include_str!("dashboard.html");

/// Largest `POST /purge` body read.
const PURGE_BODY_MAX: usize = 64 * 1024;

/// Serves the admin endpoints, after the access checks of the module doc.
pub async fn handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
    reloader: Arc<crate::run::reload::Reloader>,
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
async fn reload(reloader: &Arc<crate::run::reload::Reloader>) -> Response<ResponseBody> {
    let (status, body) = match reloader.reload_file().await {
        Ok(outcome) => (
            StatusCode::OK,
            serde_json::json!({"reloaded": true, "notes": outcome.notes}),
        ),
        Err(errors) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({"reloaded": false, "errors": errors}),
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
        Ok(order) => purged_response(crate::proxy::purge::run(proxy, order).await),
        Err(e) => json_error(StatusCode::BAD_REQUEST, &e),
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
pub fn host_allowed(authority: &str, names: &[String]) -> bool {
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

/// `{"purged": N}`, with `"scanned": true` when a path purge scanned zones.
pub fn purged_response(outcome: crate::proxy::purge::Outcome) -> Response<ResponseBody> {
    let mut json = serde_json::json!({ "purged": outcome.purged });
    if outcome.scanned {
        // A path purge that could not trust the hosts remembered.
        json["scanned"] = true.into();
    }
    let json = json.to_string() + "\n";
    with_type(Response::new(ResponseBody::full(json)), "application/json")
}

/// `{"error": message}` with `status`.
pub fn json_error(status: StatusCode, message: &str) -> Response<ResponseBody> {
    let json = serde_json::json!({ "error": message }).to_string() + "\n";
    let mut resp = with_type(Response::new(ResponseBody::full(json)), "application/json");
    *resp.status_mut() = status;
    resp
}

/// True when `headers` carry `Authorization: Bearer <token>` (compared in
/// constant time).
pub(crate) fn bearer_matches(headers: &http::HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
    else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    let diff = a
        .iter()
        .zip(b)
        .fold(a.len() ^ b.len(), |acc, (x, y)| acc | usize::from(x ^ y));
    diff == 0
}

/// 401 with `WWW-Authenticate: Bearer`, saying whether a token is configured.
pub(crate) fn unauthorized(configured: bool) -> Response<ResponseBody> {
    let message = if configured {
        "missing or wrong bearer token"
    } else {
        "no admin token is configured (admin.token, admin.token_file or CALMCACHE_ADMIN_TOKEN)"
    };
    let mut resp = json_error(StatusCode::UNAUTHORIZED, message);
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"calmcache admin\""),
    );
    resp
}

fn plain(status: StatusCode, text: String) -> Response<ResponseBody> {
    let mut resp = with_type(
        Response::new(ResponseBody::full(text)),
        "text/plain; charset=utf-8",
    );
    *resp.status_mut() = status;
    resp
}

fn with_type(
    mut resp: Response<ResponseBody>,
    content_type: &'static str,
) -> Response<ResponseBody> {
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// `calmcache reload`: sends `POST /reload` to the admin listener at `addr`
/// (a wildcard address is asked on loopback) and returns its status and body.
pub async fn post_reload(
    addr: std::net::SocketAddr,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use anyhow::Context;
    use http_body_util::BodyExt;
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut req = Request::post("/reload").header(header::HOST, addr.to_string());
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req.body(http_body_util::Empty::<bytes::Bytes>::new())?;
    // A reload that opens disk zones may take a moment; not forever.
    let resp = tokio::time::timeout(std::time::Duration::from_secs(60), sender.send_request(req))
        .await
        .context("no answer within 60 s")??;
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
