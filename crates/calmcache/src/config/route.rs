//! The parts of a validated route ([`RouteConfig`](super::RouteConfig)),
//! each saying one thing: which requests the route takes, where it stores,
//! how long answers live, how misses and refreshes share work, what it reads
//! from clients, what it does to answers, what it warms.
//!
//! Plain data, grouped by how the proxy reads it: a function that reads
//! several settings finds them in one part. Each part is built by its own
//! function in `validate/routes.rs`; the TOML keys stay flat (`raw.rs`).
//! The parts are held inline in `RouteConfig` (never boxed), so reading a
//! setting on the hit path chases no pointer more than a flat field did.
//! This module only describes; it must not validate or build anything.

use std::time::Duration;

use calmcache_core::RefreshMode;

use super::conditions::Condition;
use super::key_template::KeyTemplate;
use super::{early_hints, hosts, BodyKey, ClientCacheControl, TtlTable};
use crate::http::compress::Coding;

/// Which requests the route takes (besides `internal`): `match`, `path`,
/// `hosts`, `listeners`.
#[derive(Debug, Clone)]
pub struct RouteMatching {
    /// `match`: regex on the path and query (`/a/b?c=d`); `None` matches
    /// every request.
    pub matcher: Option<regex::Regex>,
    /// `path`: regex on the path alone, as NGINX's `location` sees it (a
    /// static-files rule on the path and query would also take
    /// `/account.php?x.css`); `None` matches every path. With `match` too,
    /// a request must satisfy both.
    pub path_matcher: Option<regex::Regex>,
    /// The host names the route answers for; empty: every host (and
    /// requests without one).
    pub hosts: Vec<hosts::HostPattern>,
    /// `listeners`: the route takes only requests that came in on one of
    /// these `server.listen` / `server.tls_listen` addresses, as written
    /// there; empty (the default): every listener.
    pub listeners: Vec<std::net::SocketAddr>,
}

/// Where the route stores and under which key: `zone`/`zones`, `memory`,
/// `key`, `bypass`, `no_store`.
#[derive(Debug, Clone)]
pub struct RouteStorage {
    /// Index into [`Config::zones`](super::Config::zones): the route's zone,
    /// or the first of its `zones`; `None` proxies without caching.
    pub zone: Option<usize>,
    /// Every zone the route stores in (`zone = "x"` gives one; `zones = [..]`
    /// several, each key placed in one of them by a weighted rendezvous hash).
    pub zones: Vec<usize>,
    /// A memory zone in front of the route's disk zones: objects hit twice
    /// are promoted into it and served from RAM.
    pub memory: Option<usize>,
    /// The cache key template (default [`KeyTemplate::DEFAULT`]).
    pub key: KeyTemplate,
    /// Requests matching any of these skip the cache lookup and go to the
    /// origin; the response is still stored if storable (NGINX
    /// `proxy_cache_bypass`). Default empty.
    pub bypass: Vec<Condition>,
    /// Responses to requests matching any of these are not stored (NGINX
    /// `proxy_no_cache`). Default empty.
    pub no_store: Vec<Condition>,
}

/// How long a stored answer lives and may be served stale: the route's
/// half of the storing rules (`Route::store_rules`), plus `stale_if_busy`.
#[derive(Debug, Clone)]
pub struct RouteFreshness {
    /// TTLs set by the route, per status.
    pub ttl: TtlTable,
    /// When true, `ttl` wins over the origin's Cache-Control; otherwise it
    /// only applies when the origin gives no freshness information.
    pub override_origin: bool,
    /// RFC 9111 §4.2.2 heuristic freshness for responses without explicit
    /// freshness: this fraction of (Date - Last-Modified), within 0..=1;
    /// 0 turns heuristics off (default 0.1).
    pub heuristic_fraction: f64,
    /// Cap on heuristic freshness (default 1 day).
    pub heuristic_max: Duration,
    /// How long past expiry a stale object may be served while it is
    /// refreshed (RFC 5861 `stale-while-revalidate`; default 0s).
    pub stale_while_revalidate: Duration,
    /// How long past expiry a stale object may be served when the origin
    /// fails (RFC 5861 `stale-if-error`; default 0s).
    pub stale_if_error: Duration,
    /// How long past expiry a stored copy may be served at once when the
    /// upstream's origin budget is full (default 0s; a copy inside
    /// stale-if-error is served then too, whatever this says).
    pub stale_if_busy: Duration,
    /// `ignore_headers`: response fields that do not decide storing and
    /// lifetime (NGINX's `proxy_ignore_headers`; default none).
    pub ignore_headers: calmcache_core::IgnoredFields,
}

/// How the fetches of one key share work: refresh ahead of expiry, the
/// wait behind another request's fetch, hit-for-miss.
#[derive(Debug, Clone)]
pub struct RouteRefresh {
    /// `refresh`: how objects about to expire are refreshed (default SUS).
    pub mode: RefreshMode,
    /// The XFetch beta for PER and SUS: above 1 refreshes earlier (default 1.0).
    pub per_beta: f64,
    /// `refresh = "sus"`: how long past expiry a copy is still served while
    /// it is refreshed in the background, raised to one SUS delta (default
    /// 2s; 0s turns the window off).
    pub sus_stale: Duration,
    /// How long a request waits for another request's fetch of the same
    /// key when that fetch makes no progress (default 5s). A fetch inside
    /// its upstream's connect and read timeouts is waited for however long.
    pub lock_timeout: Duration,
    /// How long a key whose answer could never be stored (`private`,
    /// `no-store`, `Set-Cookie`, too large...) is remembered, so that its
    /// requests go to the origin in parallel instead of queueing behind a
    /// lock (Varnish's hit-for-miss; default 120s, 0s turns it off).
    pub hit_for_miss: Duration,
}

/// What the route reads from its clients' requests, and how (the edge,
/// the lookup of HEAD and of bodies, upgrades).
#[derive(Debug, Clone)]
pub struct RouteRequests {
    /// Whether request Cache-Control / Pragma directives from clients are
    /// obeyed (default honor).
    pub client_cache_control: ClientCacheControl,
    /// When true (the default), a HEAD miss is fetched as GET and stored
    /// (NGINX `proxy_cache_convert_head`); when false HEAD passes through.
    pub convert_head: bool,
    /// POST is looked up and stored like QUERY, keyed by its body (default
    /// false: POST passes and invalidates, RFC 9111 §4.4). For routes whose
    /// POSTs are reads (GraphQL queries, JSON-RPC).
    pub cache_post: bool,
    /// How a cacheable body enters the key (default bytes).
    pub body_key: BodyKey,
    /// The largest body keyed (default 64 KiB); a larger one passes
    /// uncached, streamed on.
    pub max_body_key: usize,
    /// Tunnel `Upgrade: websocket` requests to the upstream (default true);
    /// false sends them as plain requests, the upgrade headers stripped.
    pub websocket: bool,
    /// Repeated slashes in the path are merged (`//a///b` is `/a/b`) for
    /// the key and the upstream request (default true, as NGINX's
    /// `merge_slashes`). Route matching always sees them merged, so a
    /// doubled slash never steers a request to another route.
    pub merge_slashes: bool,
    /// Request header names with `_` are forwarded and keyed (default
    /// false: they are dropped, as NGINX's `underscores_in_headers off`,
    /// since servers that fold `_` into `-` read `X_Forwarded_For` as a
    /// header the proxy thinks it controls).
    pub underscores_in_headers: bool,
    /// Clients from these networks may send `X-Forwarded-Host`,
    /// `X-Forwarded-Proto`, `Forwarded` and the like, which then reach the
    /// origin; from any other client they are dropped (default none).
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// What the route does to its answers besides the header rules: codings,
/// the fields it shows or strips, Early Hints.
#[derive(Debug, Clone)]
pub struct RouteAnswers {
    /// Codings calmcache makes itself for stored objects, in config order,
    /// without duplicates (default none).
    pub compress: Vec<Coding>,
    /// Compression of answers the cache does not store, on the fly
    /// (`compress_passed`, `compress_passed_types`,
    /// `compress_passed_min_length`; default off).
    pub compress_passed: crate::http::compress_passed::PassedCompression,
    /// RFC 9213: when true, `CDN-Cache-Control` and `Calmcache-Cache-Control`
    /// from the origin are passed on to clients (default false: they are
    /// meant for this cache only).
    pub forward_targeted_cache_control: bool,
    /// Add `key="..."` to the Cache-Status header (RFC 9211 §2.7). Default
    /// false, because keys can reveal cookies and headers.
    pub cache_status_key: bool,
    /// Pass the origin's `Cache-Tag` / `Surrogate-Key` on to clients
    /// (default false: tags are for purging).
    pub expose_cache_tags: bool,
    /// 103 Early Hints for navigations that wait for the origin.
    pub early_hints: early_hints::EarlyHintsConfig,
}

/// What the route fetches at start-up to fill its zone: `warm`,
/// `warm_host`.
#[derive(Debug, Clone)]
pub struct RouteWarm {
    /// `warm`: paths (each starting with `/`) fetched at start-up.
    pub paths: Vec<String>,
    /// `warm_host`: Host header for warm fetches; `None` means the first
    /// exact name of `hosts`, else the first `server.listen` address.
    pub host: Option<String>,
}
