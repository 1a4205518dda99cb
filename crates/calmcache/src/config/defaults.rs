//! Every config default, in one place: what a key is worth when the file
//! does not set it.
//!
//! Validation (`validate.rs`, `validate/*.rs`) reads its defaults from
//! here, `check`'s summary (`summary.rs`) compares with them, and
//! [`keys`] lists every key of every section with the value
//! `config.example.toml` must show for it; `defaults_tests.rs` pins the
//! example to that table, so the example cannot drift from the code.
//!
//! Only values live here: ranges and cross references stay with their
//! checks in `validate/`. This module imports nothing of the proxy but
//! config value types.

use std::time::Duration;

use calmcache_core::RefreshMode;

use super::access_log::LogFormat;
use super::units::{KIB, MIB};
use super::{BodyKey, ClientCacheControl};

/// `[server]`
pub(crate) mod server {
    use super::{Duration, KIB, MIB};

    /// `max_connections`: client connections served at once.
    pub(crate) const MAX_CONNECTIONS: usize = 10_000;
    /// `backlog`: listen backlog per socket.
    pub(crate) const BACKLOG: usize = 4096;
    /// `keepalive_timeout`: NGINX's.
    pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(75);
    /// `keepalive_requests`: NGINX's.
    pub(crate) const KEEPALIVE_REQUESTS: usize = 1000;
    /// `max_header_size`: largest request head.
    pub(crate) const MAX_HEADER_SIZE: u64 = 64 * KIB;
    /// `header_read_timeout`: against slow-header clients.
    pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// `shutdown_timeout`: time requests in flight get on SIGTERM.
    pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
    /// `h2c`: HTTP/2 with prior knowledge on plain listeners.
    pub(crate) const H2C: bool = false;
    /// `max_inflight_body`: room for a few hundred fills' windows and some
    /// whole bodies bound for memory zones at once.
    pub(crate) const MAX_INFLIGHT_BODY: u64 = 256 * MIB;
    /// `send_timeout`: NGINX's.
    pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(60);
    /// `http2_keepalive_interval`.
    pub(crate) const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
    /// `http2_keepalive_timeout`.
    pub(crate) const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

    /// `threads` (and `threads = 0`): one worker per core; 1 if the OS
    /// cannot tell.
    pub(crate) fn threads() -> usize {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }
}

/// `[admin]`
pub(crate) mod admin {
    /// `purge_allow`: loopback only.
    pub(crate) const PURGE_ALLOW: [&str; 2] = ["127.0.0.1/8", "::1/128"];
    /// `purge_token`: PURGE needs no token.
    pub(crate) const PURGE_TOKEN: bool = false;
}

/// `[upstreams.<name>]`
pub(crate) mod upstream {
    use super::Duration;

    /// `keepalive`: idle connections kept per server.
    pub(crate) const KEEPALIVE: usize = 32;
    /// `connect_timeout`.
    pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// `read_timeout`: NGINX's proxy_read_timeout.
    pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(60);
    /// `send_timeout`: NGINX's proxy_send_timeout.
    pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(60);
    /// `refresh_concurrency`: background refreshes in flight at once.
    pub(crate) const REFRESH_CONCURRENCY: usize = 8;
    /// `max_inflight`: no origin budget (a request path that costs nothing).
    pub(crate) const MAX_INFLIGHT: usize = 0;
    /// `queue_timeout`: as long as a request waits for another's fetch
    /// (`lock_timeout`).
    pub(crate) const QUEUE_TIMEOUT: Duration = Duration::from_secs(5);
    /// `fleet_max_inflight`: no fleet-wide budget.
    pub(crate) const FLEET_MAX_INFLIGHT: usize = 0;
    /// `max_fails`: NGINX's.
    pub(crate) const MAX_FAILS: u32 = 1;
    /// `fail_timeout`: NGINX's.
    pub(crate) const FAIL_TIMEOUT: Duration = Duration::from_secs(10);
    /// `tls`: servers over TLS only where `https://` says so.
    pub(crate) const TLS: bool = false;
    /// `tls_verify`: the origin's certificate is checked.
    pub(crate) const TLS_VERIFY: bool = true;
    /// A server's `weight`.
    pub(crate) const WEIGHT: u32 = 1;
    /// `health_check.interval`: NGINX Plus's.
    pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(5);
    /// `health_check.timeout`.
    pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
    /// `health_check.fails`: failures in a row that mark a server down.
    pub(crate) const CHECK_FAILS: u32 = 1;
    /// `health_check.passes`: passes in a row that bring it back.
    pub(crate) const CHECK_PASSES: u32 = 1;
}

/// `[zones.<name>]`
pub(crate) mod zone {
    use super::{Duration, MIB};

    /// Cap on the default `max_object_size`.
    pub(crate) const MAX_OBJECT_SIZE_CAP: u64 = 64 * MIB;
    /// `inactive` of disk zones (NGINX's proxy_cache_path default too).
    pub(crate) const INACTIVE: Duration = Duration::from_secs(600);
    /// `min_free`: no free-space floor.
    pub(crate) const MIN_FREE: u64 = 0;
    /// `admission` of disk zones: once full, a new key is written on its
    /// second miss (one-hit wonders and scans do not evict the hot set).
    pub(crate) const ADMISSION: calmcache_core::disk::Admission =
        calmcache_core::disk::Admission::Frequent;
    /// `weight`: the share of keys in a route's `zones`.
    pub(crate) const WEIGHT: usize = 1;

    /// `max_object_size`: an eighth of the zone, capped at 64 MiB: big
    /// enough for most responses, small enough that one object cannot
    /// evict most of the zone.
    pub(crate) fn max_object_size(max_size: u64) -> u64 {
        (max_size / 8).clamp(1, MAX_OBJECT_SIZE_CAP)
    }
}

/// `[[routes]]`
pub(crate) mod route {
    use super::{BodyKey, ClientCacheControl, Duration, RefreshMode};

    /// `key`: NGINX's proxy_cache_key default.
    pub(crate) const KEY: &str = "$scheme$host$uri$is_args$args";
    /// `override_origin`: the origin's Cache-Control wins over `ttl`.
    pub(crate) const OVERRIDE_ORIGIN: bool = false;
    /// `heuristic_fraction`: RFC 9111 §4.2.2's customary 10%.
    pub(crate) const HEURISTIC_FRACTION: f64 = 0.1;
    /// `heuristic_max`.
    pub(crate) const HEURISTIC_MAX: Duration = Duration::from_secs(86_400);
    /// `client_cache_control`.
    pub(crate) const CLIENT_CACHE_CONTROL: ClientCacheControl = ClientCacheControl::Honor;
    /// `convert_head`: NGINX's proxy_cache_convert_head.
    pub(crate) const CONVERT_HEAD: bool = true;
    /// `cache_post`: POST is unsafe unless the route says its POSTs are reads.
    pub(crate) const CACHE_POST: bool = false;
    /// `body_key`: the bytes, exactly as sent.
    pub(crate) const BODY_KEY: BodyKey = BodyKey::Bytes;
    /// `max_body_key`: held whole before the lookup, so bounded; GraphQL
    /// queries and JSON-RPC calls are a few KiB.
    pub(crate) const MAX_BODY_KEY: u64 = 64 * 1024;
    /// `refresh`.
    pub(crate) const REFRESH: RefreshMode = RefreshMode::Sus;
    /// `per_beta`: the XFetch default.
    pub(crate) const PER_BETA: f64 = 1.0;
    /// `stale_while_revalidate`.
    pub(crate) const STALE_WHILE_REVALIDATE: Duration = Duration::ZERO;
    /// `stale_if_error`.
    pub(crate) const STALE_IF_ERROR: Duration = Duration::ZERO;
    /// `stale_if_busy`: a busy origin serves no copy past stale-if-error.
    pub(crate) const STALE_IF_BUSY: Duration = Duration::ZERO;
    /// `lock_timeout`.
    pub(crate) const LOCK_TIMEOUT: Duration = Duration::from_secs(5);
    /// `sus_stale`.
    pub(crate) const SUS_STALE: Duration = Duration::from_secs(2);
    /// `hit_for_miss`.
    pub(crate) const HIT_FOR_MISS: Duration = Duration::from_secs(120);
    /// `forward_targeted_cache_control`.
    pub(crate) const FORWARD_TARGETED_CACHE_CONTROL: bool = false;
    /// `cache_status_key`.
    pub(crate) const CACHE_STATUS_KEY: bool = false;
    /// `expose_cache_tags`.
    pub(crate) const EXPOSE_CACHE_TAGS: bool = false;
    /// `websocket`.
    pub(crate) const WEBSOCKET: bool = true;
    /// `merge_slashes`: NGINX's.
    pub(crate) const MERGE_SLASHES: bool = true;
    /// `underscores_in_headers`: NGINX's.
    pub(crate) const UNDERSCORES_IN_HEADERS: bool = false;
    /// `early_hints`: on, since a 103 costs a browser that ignores it
    /// nothing and is only sent to navigations that wait for the origin;
    /// over HTTP/1.1 only to `Sec-Fetch-Mode: navigate` (Python's
    /// `http.client` takes any 1xx but 100 for the final answer).
    pub(crate) const EARLY_HINTS: bool = true;
    /// `expires`: the origin's Cache-Control and Expires pass as they are.
    pub(crate) const EXPIRES: &str = "off";

    /// `internal`: clients reach every route (NGINX's locations are not
    /// internal unless they say so).
    pub(crate) const INTERNAL: bool = false;
    /// `index`: NGINX's `index` default.
    pub(crate) const INDEX: &[&str] = &["index.html"];
    /// `return.content_type` of a body: NGINX's `default_type` out of the box.
    pub(crate) const RETURN_CONTENT_TYPE: &str = "text/plain";
    /// `intercept_errors`: the origin's answers reach clients as they are.
    pub(crate) const INTERCEPT_ERRORS: bool = false;
    /// `absent`: a file route without the file hands the request on, as
    /// every file route did before the key (`try_files $uri @next`).
    pub(crate) const ABSENT: &str = "next";

    /// `compress_passed_types`: the text types NGINX users list in
    /// `gzip_types` (its own default is text/html alone, which is why
    /// almost every `gzip on` comes with a `gzip_types` line).
    pub(crate) const COMPRESS_PASSED_TYPES: [&str; 7] = [
        "text/*",
        "application/javascript",
        "application/json",
        "application/xml",
        "application/rss+xml",
        "application/atom+xml",
        "image/svg+xml",
    ];
    /// `compress_passed_min_length`: NGINX's `gzip_min_length`.
    pub(crate) const COMPRESS_PASSED_MIN_LENGTH: u64 = 20;

    /// `name`: `route<index>`.
    pub(crate) fn name(index: usize) -> String {
        format!("route{index}")
    }
}

/// `[limits.<name>]`
pub(crate) mod limit {
    use crate::config::limits::{AppliesTo, Delay};

    /// `burst`: NGINX's (none: every request above the rate is refused).
    pub(crate) const BURST: u32 = 0;
    /// `delay`: NGINX's without `nodelay` (every excess request waits).
    pub(crate) const DELAY: Delay = Delay::After(0);
    /// `status`: 429 Too Many Requests (RFC 6585 §4), which clients and
    /// crawlers read as "slow down"; NGINX's 503 reads as an outage.
    pub(crate) const STATUS: u16 = 429;
    /// `applies_to`: NGINX's meaning, every request counts.
    pub(crate) const APPLIES_TO: AppliesTo = AppliesTo::All;
    /// `max_clients`: about what a 10 MB NGINX zone holds (NGINX: 16 000
    /// per MB for limit_req), at ~100 bytes a client here.
    pub(crate) const MAX_CLIENTS: usize = 100_000;
}

/// `[access_log]`
pub(crate) mod access_log {
    use super::LogFormat;

    /// `format`.
    pub(crate) const FORMAT: LogFormat = LogFormat::Combined;
}

/// `[fleet]`
pub(crate) mod fleet {
    use super::{Duration, MIB};

    /// `prefix`.
    pub(crate) const PREFIX: &str = "cc:";
    /// `max_object_size`: what a media or download site serves; larger
    /// values go to Redis in 256 KiB pieces (issue 30), so no call is big.
    pub(crate) const MAX_OBJECT_SIZE: u64 = 64 * MIB;
    /// `max_pieces_in_flight`: four largest objects at once per node.
    pub(crate) const MAX_PIECES_IN_FLIGHT: u64 = 256 * MIB;
    /// `stream_from_peers`: off. Followers wait for the commit: a writer
    /// that stops or loses Redis mid-body then costs an origin fetch, not
    /// a cut client (bench/fleet-many: 5-16 cut clients a minute with it
    /// on and a full Redis, 0 with it off).
    pub(crate) const STREAM_FROM_PEERS: bool = false;
    /// `timeout`: the deadline of every Redis call.
    pub(crate) const TIMEOUT: Duration = Duration::from_millis(50);
    /// `lease`.
    pub(crate) const LEASE: Duration = Duration::from_secs(3);
}

/// What `config.example.toml` must show for a key, wherever it shows it
/// (set or commented out).
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shown {
    /// A count.
    Count(u64),
    /// `true` or `false`.
    Bool(bool),
    /// A float.
    Float(f64),
    /// A duration string, compared parsed (`"10m"` is `"600s"`).
    Duration(Duration),
    /// A size string, compared parsed.
    Size(u64),
    /// A string.
    Text(&'static str),
    /// A list of strings (`[]` for none).
    Texts(&'static [&'static str]),
    /// An empty inline table, `{}`, or an empty list of numbers.
    Empty,
    /// No fixed default (required, computed, or none): the example shows
    /// an example.
    Example,
}

/// The file's sections: a table (`server`), the tables of a map
/// (`upstreams.*`) or of an array (`routes`).
#[cfg(test)]
pub(crate) const SECTIONS: &[&str] = &[
    "server",
    "server.tls",
    "admin",
    "upstreams.*",
    "zones.*",
    "routes",
    "access_log",
    "fleet",
    "limits.*",
];

/// Every key of every section (its section's name first, inline tables'
/// keys dotted) and what the example must show for it.
#[cfg(test)]
pub(crate) fn keys() -> Vec<(&'static str, Shown)> {
    vec![
        ("server.listen", Shown::Example),
        ("server.threads", Shown::Example),
        (
            "server.max_connections",
            Shown::Count(server::MAX_CONNECTIONS as u64),
        ),
        ("server.backlog", Shown::Count(server::BACKLOG as u64)),
        (
            "server.keepalive_timeout",
            Shown::Duration(server::KEEPALIVE_TIMEOUT),
        ),
        (
            "server.keepalive_requests",
            Shown::Count(server::KEEPALIVE_REQUESTS as u64),
        ),
        (
            "server.max_header_size",
            Shown::Size(server::MAX_HEADER_SIZE),
        ),
        (
            "server.header_read_timeout",
            Shown::Duration(server::HEADER_READ_TIMEOUT),
        ),
        (
            "server.shutdown_timeout",
            Shown::Duration(server::SHUTDOWN_TIMEOUT),
        ),
        ("server.tls_listen", Shown::Example),
        ("server.h2c", Shown::Bool(server::H2C)),
        (
            "server.max_inflight_body",
            Shown::Size(server::MAX_INFLIGHT_BODY),
        ),
        ("server.send_timeout", Shown::Duration(server::SEND_TIMEOUT)),
        (
            "server.http2_keepalive_interval",
            Shown::Duration(server::HTTP2_KEEPALIVE_INTERVAL),
        ),
        (
            "server.http2_keepalive_timeout",
            Shown::Duration(server::HTTP2_KEEPALIVE_TIMEOUT),
        ),
        ("server.proxy_protocol_listeners", Shown::Texts(&[])),
        ("server.proxy_protocol_from", Shown::Texts(&[])),
        ("server.tls.cert", Shown::Example),
        ("server.tls.key", Shown::Example),
        ("server.tls.names", Shown::Example),
        ("admin.listen", Shown::Example),
        ("admin.token", Shown::Example),
        ("admin.token_file", Shown::Example),
        ("admin.purge_allow", Shown::Texts(&admin::PURGE_ALLOW)),
        ("admin.purge_token", Shown::Bool(admin::PURGE_TOKEN)),
        ("admin.names", Shown::Texts(&[])),
        ("upstreams.*.servers", Shown::Example),
        ("upstreams.*.tls", Shown::Bool(upstream::TLS)),
        ("upstreams.*.tls_server_name", Shown::Example),
        ("upstreams.*.tls_ca_file", Shown::Example),
        ("upstreams.*.tls_verify", Shown::Bool(upstream::TLS_VERIFY)),
        ("upstreams.*.tls_client_cert", Shown::Example),
        ("upstreams.*.tls_client_key", Shown::Example),
        (
            "upstreams.*.keepalive",
            Shown::Count(upstream::KEEPALIVE as u64),
        ),
        (
            "upstreams.*.connect_timeout",
            Shown::Duration(upstream::CONNECT_TIMEOUT),
        ),
        (
            "upstreams.*.read_timeout",
            Shown::Duration(upstream::READ_TIMEOUT),
        ),
        (
            "upstreams.*.send_timeout",
            Shown::Duration(upstream::SEND_TIMEOUT),
        ),
        (
            "upstreams.*.refresh_concurrency",
            Shown::Count(upstream::REFRESH_CONCURRENCY as u64),
        ),
        (
            "upstreams.*.max_inflight",
            Shown::Count(upstream::MAX_INFLIGHT as u64),
        ),
        (
            "upstreams.*.queue_timeout",
            Shown::Duration(upstream::QUEUE_TIMEOUT),
        ),
        (
            "upstreams.*.fleet_max_inflight",
            Shown::Count(upstream::FLEET_MAX_INFLIGHT as u64),
        ),
        (
            "upstreams.*.max_fails",
            Shown::Count(upstream::MAX_FAILS as u64),
        ),
        (
            "upstreams.*.fail_timeout",
            Shown::Duration(upstream::FAIL_TIMEOUT),
        ),
        ("upstreams.*.fail_statuses", Shown::Empty),
        ("upstreams.*.health_check.path", Shown::Example),
        (
            "upstreams.*.health_check.interval",
            Shown::Duration(upstream::CHECK_INTERVAL),
        ),
        (
            "upstreams.*.health_check.timeout",
            Shown::Duration(upstream::CHECK_TIMEOUT),
        ),
        (
            "upstreams.*.health_check.fails",
            Shown::Count(upstream::CHECK_FAILS as u64),
        ),
        (
            "upstreams.*.health_check.passes",
            Shown::Count(upstream::CHECK_PASSES as u64),
        ),
        ("zones.*.kind", Shown::Example),
        ("zones.*.max_size", Shown::Example),
        // Computed from max_size: the test checks it against the zone's.
        ("zones.*.max_object_size", Shown::Example),
        ("zones.*.weight", Shown::Count(zone::WEIGHT as u64)),
        ("zones.*.path", Shown::Example),
        ("zones.*.inactive", Shown::Duration(zone::INACTIVE)),
        ("zones.*.min_free", Shown::Example),
        ("zones.*.admission", Shown::Text(zone::ADMISSION.as_str())),
        ("routes.name", Shown::Example),
        ("routes.hosts", Shown::Example),
        ("routes.path", Shown::Example),
        ("routes.match", Shown::Example),
        ("routes.upstream", Shown::Example),
        ("routes.zone", Shown::Example),
        ("routes.zones", Shown::Example),
        ("routes.memory", Shown::Example),
        ("routes.key", Shown::Text(route::KEY)),
        ("routes.bypass", Shown::Texts(&[])),
        ("routes.no_store", Shown::Texts(&[])),
        ("routes.ttl", Shown::Example),
        (
            "routes.override_origin",
            Shown::Bool(route::OVERRIDE_ORIGIN),
        ),
        (
            "routes.heuristic_fraction",
            Shown::Float(route::HEURISTIC_FRACTION),
        ),
        (
            "routes.heuristic_max",
            Shown::Duration(route::HEURISTIC_MAX),
        ),
        (
            "routes.client_cache_control",
            Shown::Text(route::CLIENT_CACHE_CONTROL.as_str()),
        ),
        ("routes.convert_head", Shown::Bool(route::CONVERT_HEAD)),
        ("routes.cache_post", Shown::Bool(route::CACHE_POST)),
        ("routes.body_key", Shown::Text(route::BODY_KEY.as_str())),
        ("routes.max_body_key", Shown::Size(route::MAX_BODY_KEY)),
        ("routes.refresh", Shown::Text(route::REFRESH.as_str())),
        ("routes.per_beta", Shown::Float(route::PER_BETA)),
        (
            "routes.stale_while_revalidate",
            Shown::Duration(route::STALE_WHILE_REVALIDATE),
        ),
        (
            "routes.stale_if_error",
            Shown::Duration(route::STALE_IF_ERROR),
        ),
        (
            "routes.stale_if_busy",
            Shown::Duration(route::STALE_IF_BUSY),
        ),
        ("routes.lock_timeout", Shown::Duration(route::LOCK_TIMEOUT)),
        ("routes.sus_stale", Shown::Duration(route::SUS_STALE)),
        ("routes.hit_for_miss", Shown::Duration(route::HIT_FOR_MISS)),
        ("routes.warm", Shown::Texts(&[])),
        ("routes.warm_host", Shown::Example),
        ("routes.compress", Shown::Texts(&[])),
        (
            "routes.forward_targeted_cache_control",
            Shown::Bool(route::FORWARD_TARGETED_CACHE_CONTROL),
        ),
        (
            "routes.cache_status_key",
            Shown::Bool(route::CACHE_STATUS_KEY),
        ),
        (
            "routes.expose_cache_tags",
            Shown::Bool(route::EXPOSE_CACHE_TAGS),
        ),
        ("routes.websocket", Shown::Bool(route::WEBSOCKET)),
        ("routes.merge_slashes", Shown::Bool(route::MERGE_SLASHES)),
        (
            "routes.underscores_in_headers",
            Shown::Bool(route::UNDERSCORES_IN_HEADERS),
        ),
        ("routes.trusted_proxies", Shown::Texts(&[])),
        ("routes.early_hints", Shown::Bool(route::EARLY_HINTS)),
        ("routes.early_hints_links", Shown::Texts(&[])),
        ("routes.early_hints_origins", Shown::Texts(&[])),
        // Routes that answer without the origin (docs/answering.md).
        ("routes.return", Shown::Example),
        ("routes.root", Shown::Example),
        ("routes.index", Shown::Texts(route::INDEX)),
        ("routes.internal", Shown::Bool(route::INTERNAL)),
        ("routes.error_pages", Shown::Empty),
        (
            "routes.intercept_errors",
            Shown::Bool(route::INTERCEPT_ERRORS),
        ),
        ("routes.absent", Shown::Text(route::ABSENT)),
        // Listeners and header rules (issue 28).
        ("routes.listeners", Shown::Example),
        ("routes.request_headers", Shown::Empty),
        ("routes.response_headers", Shown::Empty),
        ("routes.expires", Shown::Text(route::EXPIRES)),
        ("routes.limits", Shown::Texts(&[])),
        ("limits.*.rate", Shown::Example),
        ("limits.*.burst", Shown::Count(limit::BURST as u64)),
        ("limits.*.delay", Shown::Count(0)),
        ("limits.*.connections", Shown::Example),
        ("limits.*.status", Shown::Count(limit::STATUS as u64)),
        (
            "limits.*.applies_to",
            Shown::Text(limit::APPLIES_TO.as_str()),
        ),
        (
            "limits.*.max_clients",
            Shown::Count(limit::MAX_CLIENTS as u64),
        ),
        ("routes.ignore_headers", Shown::Texts(&[])),
        ("routes.compress_passed", Shown::Texts(&[])),
        (
            "routes.compress_passed_types",
            Shown::Texts(&route::COMPRESS_PASSED_TYPES),
        ),
        (
            "routes.compress_passed_min_length",
            Shown::Count(route::COMPRESS_PASSED_MIN_LENGTH),
        ),
        ("upstreams.*.balance", Shown::Text("round_robin")),
        ("upstreams.*.hash_key", Shown::Example),
        ("access_log.path", Shown::Example),
        (
            "access_log.format",
            Shown::Text(access_log::FORMAT.as_str()),
        ),
        ("fleet.redis", Shown::Example),
        ("fleet.user", Shown::Example),
        ("fleet.password", Shown::Example),
        ("fleet.password_file", Shown::Example),
        ("fleet.tls_ca", Shown::Example),
        ("fleet.tls_cert", Shown::Example),
        ("fleet.tls_key", Shown::Example),
        ("fleet.secret_file", Shown::Example),
        ("fleet.prefix", Shown::Text(fleet::PREFIX)),
        ("fleet.max_object_size", Shown::Size(fleet::MAX_OBJECT_SIZE)),
        (
            "fleet.max_pieces_in_flight",
            Shown::Size(fleet::MAX_PIECES_IN_FLIGHT),
        ),
        (
            "fleet.stream_from_peers",
            Shown::Bool(fleet::STREAM_FROM_PEERS),
        ),
        ("fleet.timeout", Shown::Duration(fleet::TIMEOUT)),
        ("fleet.lease", Shown::Duration(fleet::LEASE)),
    ]
}
