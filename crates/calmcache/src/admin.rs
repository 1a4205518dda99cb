//! The admin listener: `GET /status` returns JSON counters, totals and per
//! route and zone. (The dashboard and Prometheus metrics build on this.)

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Serialize;

use crate::body::ResponseBody;
use crate::state::Proxy;
use crate::stats::ActivitySnapshot;

/// The `/status` document.
#[derive(Serialize, Debug)]
pub struct Status {
    /// Sum over all routes.
    pub totals: ActivitySnapshot,
    /// Per route, by name.
    pub routes: BTreeMap<String, RouteStatus>,
    /// Per zone, by name.
    pub zones: BTreeMap<String, ZoneStatus>,
    /// Fetches in flight right now.
    pub fetches_in_flight: usize,
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
    Status {
        totals,
        routes,
        zones,
        fetches_in_flight: proxy.flights.in_flight(),
    }
}

/// Serves the admin endpoints.
pub async fn handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let resp = match (req.method(), req.uri().path()) {
        (&Method::GET, "/status") => match serde_json::to_vec_pretty(&status(&proxy)) {
            Ok(json) => with_type(Response::new(ResponseBody::full(json)), "application/json"),
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("status: {e}\n")),
        },
        (_, "/status") => plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into()),
        _ => plain(StatusCode::NOT_FOUND, "not found; try GET /status\n".into()),
    };
    Ok(resp)
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
