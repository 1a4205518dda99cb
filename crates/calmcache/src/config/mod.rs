//! The config file: read once at start-up, turned into the typed [`Config`]
//! the rest of the proxy uses.
//!
//! ```text
//!  config.toml
//!      │  toml_edit + serde, parse.rs into raw.rs's structs
//!      ▼
//!  RawConfig   #[serde(deny_unknown_fields)]; every key optional; durations and
//!      │       sizes kept as text. A TOML syntax error stops here (one
//!      │       Problem, with its line); every unknown key or wrong type is a
//!      │       Problem with its TOML path and line (the key set aside, the
//!      │       rest parsed again); a wrong type stops here.
//!      │  validate.rs
//!      ▼
//!  Config      typed and validated: defaults applied, "5s" -> Duration,
//!              "256MiB" -> u64, names resolved to indexes. Every semantic
//!              problem is collected, so one run shows all of them.
//! ```
//!
//! This module must not bind sockets, resolve host names or build caches: it
//! only says what the user asked for. Errors are [`ConfigError`], whose
//! [`ConfigError::exit_code`] is 2. Imports: [`crate::http`] only (content
//! codings); every other folder reads the config, never the reverse.
//!
//! # Layout
//! - `mod.rs`: the typed config (public API) and the load functions.
//! - `raw.rs`: the serde structs, i.e. the key names users write.
//! - `parse.rs`: text -> `RawConfig`, every unknown key (and wrong type)
//!   reported, not only the first.
//! - `defaults.rs`: every key's default, and the table of keys the
//!   example file is pinned to (`defaults_tests.rs`).
//! - `units.rs`: duration (`"500ms"`) and size (`"64MiB"`) literals.
//! - `validate.rs`: raw -> typed, defaults, every semantic check.
//! - `suggest.rs`: "did you mean" for misspelt names.
//! - `error.rs`: [`ConfigError`], [`Problem`] and how they print.
//! - `summary.rs`: [`Config::summary`], the one-line "config ok" report.
//! - `warnings.rs`: [`Config::warnings`], what a valid config does that may
//!   surprise (a default certificate without names).
//! - `key_template.rs`, `conditions.rs`: `key` templates and `bypass` /
//!   `no_store` request conditions, config values parsed here;
//!   `request_names.rs`: the spellings origins read as a keyed argument or
//!   cookie name; `route_regex.rs`: whether a query can satisfy a route's
//!   end-anchored `match` (a `check` warning).
//! - `tls.rs`: `[[server.tls]]` certificate files loaded and checked, and
//!   the PEM files of `[fleet]`'s `tls_*` keys.
//! - `access_log.rs`: the `[access_log]` table's types.
//! - `answering.rs`: what a route does ([`answering::RouteKind`]: proxy,
//!   `return`, files from `root`), checked in `validate/answering.rs`.
//! - `route.rs`: the parts a [`RouteConfig`] groups its settings in
//!   (matching, storage, freshness, refresh, requests, answers, warm).

pub(crate) mod access_log;
pub(crate) mod answering;
pub(crate) mod conditions;
mod defaults;
pub(crate) mod early_hints;
mod error;
pub(crate) mod header_rules;
pub(crate) mod hosts;
pub(crate) mod key_template;
pub(crate) mod limits;
mod parse;
pub(crate) mod proxy_protocol;
mod raw;
mod request_names;
mod route;
mod route_regex;
mod secrets;
pub(crate) mod suggest;
mod summary;
pub(crate) mod tls;
mod units;
pub(crate) mod unix_socket;
mod validate;
pub(crate) mod value_template;
mod warnings;
pub(crate) use crate::http::scheme::Scheme;
pub(crate) use defaults::server::MAX_INFLIGHT_BODY as DEFAULT_MAX_INFLIGHT_BODY;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod answering_tests;

#[cfg(test)]
mod defaults_tests;

#[cfg(test)]
mod health_tests;

#[cfg(test)]
mod upstream_tls_tests;

#[cfg(test)]
mod ignore_tests;

#[cfg(test)]
mod compress_balance_tests;

#[cfg(test)]
mod props;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::config::key_template::KeyTemplate;

pub(crate) use access_log::{AccessLogConfig, LogTarget};
pub use error::ConfigError;
pub(crate) use error::Problem;
pub(crate) use error::{toml_key, toml_string};
pub(crate) use route::{
    RouteAnswers, RouteFreshness, RouteMatching, RouteRefresh, RouteRequests, RouteStorage,
    RouteWarm,
};
pub use secrets::InlineSecrets;
pub(crate) use units::{format_size, largest_unit};

/// A validated config: every default applied, every reference resolved.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the proxy accepts client traffic.
    pub server: ServerConfig,
    /// The admin API and dashboard; `None` turns them off.
    pub admin: Option<AdminConfig>,
    /// Named origin pools, sorted by name; routes refer to them by index.
    pub upstreams: Vec<UpstreamConfig>,
    /// Named caches, sorted by name; routes refer to them by index.
    pub zones: Vec<ZoneConfig>,
    /// Routes in file order; the first that matches a request handles it.
    pub routes: Vec<RouteConfig>,
    /// `[access_log]`: one line per request; `None` (no table) logs nothing.
    pub access_log: Option<AccessLogConfig>,
    /// `[fleet]`: a shared tier, leases and purges on Redis; `None` (no
    /// table) keeps the node on its own.
    pub fleet: Option<FleetConfig>,
    /// `[limits.<name>]`: per-client limits, sorted by name; routes refer
    /// to them by index.
    pub limits: Vec<limits::LimitConfig>,
    /// Secrets written inline in the file and the file's mode, for the
    /// warning about a config every user can read (`secrets.rs`).
    pub secrets: InlineSecrets,
}

/// `[fleet]`: several nodes act as one cache on Redis (a single instance or
/// a cluster): a shared tier behind the local zones, one refresh per object
/// for the fleet, purges that reach every node.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetConfig {
    /// `redis://` or `rediss://` URLs: one for a single instance, several
    /// (or a list of one) for a Redis Cluster's seed nodes.
    pub nodes: Vec<String>,
    /// `redis` was a list: talk the cluster protocol.
    pub cluster: bool,
    /// ACL user (`user`), when not in the URL.
    pub user: Option<String>,
    /// `password` or the file `password_file`, when not in the URL.
    pub password: Option<String>,
    /// Prefix of every key calmcache writes (default `cc:`).
    pub prefix: String,
    /// Largest object (body, headers and encodings) kept in Redis; larger
    /// ones stay local, while the lease still coordinates (default 64 MiB;
    /// over 256 KiB an object goes as pieces).
    pub max_object_size: u64,
    /// Bytes of large objects one node holds at once on their way to or
    /// from Redis (default 256 MiB).
    pub max_pieces_in_flight: u64,
    /// A node streams a large body another node is still writing to Redis
    /// (read-while-write across the fleet) instead of waiting for its
    /// commit (default false: a writer that stops or loses Redis cuts the
    /// followers' clients mid-body).
    pub stream_from_peers: bool,
    /// Deadline of every Redis call; past it the call counts as failed and
    /// the request goes on without Redis (default 50 ms).
    pub timeout: Duration,
    /// How long a node's refresh lease holds before another node may take
    /// over (default 10 s).
    pub lease: Duration,
    /// `tls_ca`: the CA certificates a `rediss://` server's certificate is
    /// checked against, instead of the system's roots.
    pub tls_ca: Option<crate::config::tls::PemFile>,
    /// `tls_cert` and `tls_key`: the client certificate (chain) and its
    /// key, shown to a Redis that asks for one (mutual TLS).
    pub tls_client: Option<(crate::config::tls::PemFile, crate::config::tls::PemFile)>,
    /// `secret_file`: the secrets that sign and verify every shared entry
    /// and purge message; `None`: nothing is signed, and whoever can write
    /// to Redis decides what every node serves (`check` warns).
    pub secret: Option<FleetSecret>,
}

impl FleetConfig {
    /// The same Redis link and settings, whatever the secrets: a reload
    /// that only rotates them keeps the node's fleet state.
    pub(crate) fn same_but_secret(&self, other: &FleetConfig) -> bool {
        let unsigned = |c: &FleetConfig| FleetConfig {
            secret: None,
            ..c.clone()
        };
        unsigned(self) == unsigned(other)
    }
}

/// The fleet's secrets, read from `fleet.secret_file`: its first line signs
/// (and verifies), a second line is accepted too while a rotation runs.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetSecret {
    /// Signs what this node writes; verifies what it reads.
    pub current: Vec<u8>,
    /// Only verifies: the secret being retired, or the one coming.
    pub also_accepted: Option<Vec<u8>>,
}

impl std::fmt::Debug for FleetSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        let n = 1 + usize::from(self.also_accepted.is_some());
        write!(f, "FleetSecret({n} secret(s))")
    }
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password (nor one inside a URL).
        let nodes: Vec<String> = self.nodes.iter().map(|n| redact_url(n)).collect();
        f.debug_struct("FleetConfig")
            .field("nodes", &nodes)
            .field("cluster", &self.cluster)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("prefix", &self.prefix)
            .field("max_object_size", &self.max_object_size)
            .field("max_pieces_in_flight", &self.max_pieces_in_flight)
            .field("stream_from_peers", &self.stream_from_peers)
            .field("timeout", &self.timeout)
            .field("lease", &self.lease)
            .field("tls_ca", &self.tls_ca)
            .field("tls_client", &self.tls_client)
            .field("secret", &self.secret)
            .finish()
    }
}

/// `url` without the password it may carry (`redis://user:secret@host` ->
/// `redis://user:***@host`), for logs and errors.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// `[server]`: the client-facing listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Addresses to accept client connections on; never empty. Port 0 asks
    /// the OS for a free port (tests use it).
    pub listen: Vec<SocketAddr>,
    /// Worker threads; defaults to (and `0` means) the number of cores.
    pub threads: usize,
    /// Client connections served at once over all workers (default
    /// 10,000); past it, new connections wait in the listen backlog.
    pub max_connections: usize,
    /// Listen backlog per socket (default 4096; the kernel caps it at
    /// `net.core.somaxconn`).
    pub backlog: u32,
    /// An idle client connection (no request in progress) is closed after
    /// this long (default 75 s).
    pub keepalive_timeout: Duration,
    /// Requests served on one client connection before it is closed
    /// (`Connection: close` on the last answer; default 1000).
    pub keepalive_requests: u32,
    /// Largest request head (request line and headers); a larger one gets
    /// 431 (default 64 KiB, at least 8 KiB).
    pub max_header_size: usize,
    /// A request head must arrive whole this long after its first byte (or
    /// after the connection opened, TLS handshake included); against
    /// slow-header clients (default 10 s).
    pub header_read_timeout: Duration,
    /// On SIGTERM/SIGINT, requests in flight and open tunnels get this long
    /// to finish before their connections are closed (default 30 s).
    pub shutdown_timeout: Duration,
    /// Addresses of TLS listeners (HTTP/1.1 and HTTP/2 by ALPN).
    pub tls_listen: Vec<SocketAddr>,
    /// Certificates of the TLS listeners, in file order; the first is the
    /// default for clients without (or with an unknown) SNI name.
    pub tls: Vec<crate::config::tls::TlsCert>,
    /// HTTP/2 with prior knowledge (h2c) on the plain listeners too.
    pub h2c: bool,
    /// Bytes of response bodies that fills in progress may hold in RAM, all
    /// together (default 256 MiB); a fill that starts past it streams
    /// through uncached (`Cache-Status: ...; detail=inflight-budget`).
    pub max_inflight_body: u64,
    /// A write to a client that takes no bytes this long closes the
    /// connection, and an HTTP/2 stream that gets no window this long is
    /// reset (NGINX's `send_timeout`: between two writes, not for the whole
    /// answer; default 60 s).
    pub send_timeout: Duration,
    /// HTTP/2: a PING after this long without a frame from the client
    /// (default 20 s).
    pub http2_keepalive_interval: Duration,
    /// HTTP/2: a keepalive PING not acknowledged within this closes the
    /// connection (default 20 s).
    pub http2_keepalive_timeout: Duration,
    /// Listeners that expect a PROXY protocol header, and from whom
    /// (default: none).
    pub proxy_protocol: crate::config::proxy_protocol::ProxyProtocolConfig,
}

/// `[admin]`: the admin API and dashboard listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Address of the admin API; keep it off the public interface.
    pub listen: SocketAddr,
    /// The bearer token (`token`, the file `token_file`, or the
    /// `CALMCACHE_ADMIN_TOKEN` environment variable). Required for purges
    /// and, when set, for `POST /reload`; for everything but the dashboard
    /// page and health probes when `listen` is not a loopback address.
    pub token: Option<String>,
    /// Networks whose clients may send `PURGE` to the proxy listener
    /// (default: loopback only).
    pub purge_allow: Vec<Network>,
    /// Host names (lower case, no port) the admin listener answers to
    /// besides IP literals and `localhost`: any other `Host` is refused
    /// (DNS rebinding). Default: none.
    pub names: Vec<String>,
    /// `PURGE` on the proxy listener also needs `Authorization: Bearer
    /// <token>` (default false: `purge_allow` alone decides).
    pub purge_token: bool,
}

/// An IP network (`10.0.0.0/8`, `::1/128`; a bare address is one host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    /// The network address.
    pub addr: std::net::IpAddr,
    /// Prefix length in bits.
    pub prefix: u8,
}

impl Network {
    /// Parses `addr/prefix` or a bare address.
    pub fn parse(text: &str) -> Option<Network> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.trim().parse().ok()?, Some(p.trim().parse::<u8>().ok()?)),
            None => (text.trim().parse().ok()?, None),
        };
        let max = match addr {
            std::net::IpAddr::V4(_) => 32,
            std::net::IpAddr::V6(_) => 128,
        };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Network { addr, prefix })
    }

    /// True when `ip` is in the network (an IPv4-mapped IPv6 address
    /// counts as its IPv4 address).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let bits = |a: IpAddr| -> u128 {
            match a {
                IpAddr::V4(v4) => u128::from(u32::from(v4)),
                IpAddr::V6(v6) => u128::from(v6),
            }
        };
        let width = match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 32u32,
            (IpAddr::V6(_), IpAddr::V6(_)) => 128,
            _ => return false,
        };
        let prefix = u32::from(self.prefix);
        if prefix == 0 {
            return true;
        }
        let shift = width - prefix;
        bits(self.addr) >> shift == bits(ip) >> shift
    }
}

/// `[upstreams.<name>]`: a pool of origin servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// The table key, used by routes and in metrics labels.
    pub name: String,
    /// The servers, in config order, never empty.
    pub servers: Vec<UpstreamServer>,
    /// How servers reached over TLS are verified, and the client
    /// certificate shown to them; `None` when no server uses TLS.
    pub tls: Option<UpstreamTls>,
    /// Idle keep-alive connections kept per server (default 32).
    pub keepalive: usize,
    /// Limit on establishing a TCP connection (default 5s).
    pub connect_timeout: Duration,
    /// Limit on waiting for response bytes from the origin (default 60s).
    pub read_timeout: Duration,
    /// Limit on sending the request to the origin (default 60s).
    pub send_timeout: Duration,
    /// Background refreshes in flight at once against this upstream
    /// (default 8, at least 1), so refreshing never floods the origin.
    pub refresh_concurrency: usize,
    /// The origin budget: requests in flight to each server at once
    /// (default 0: no limit). Past it a request waits in the upstream's
    /// queue, or is answered from a stale copy (`net::budget`).
    pub max_inflight: usize,
    /// How long a request with no usable copy waits for an origin slot
    /// before a 503 (default 5s; above 0 when `max_inflight` is set).
    pub queue_timeout: Duration,
    /// Requests in flight to each server across every node of a fleet
    /// (default 0: off), asked of the fleet's shared budget.
    pub fleet_max_inflight: usize,
    /// Failures within `fail_timeout` that mark a server down for
    /// `fail_timeout` (default 1, as NGINX's; 0 turns passive checks off).
    pub max_fails: u32,
    /// The window failures are counted in, and how long a failed server is
    /// skipped before one trial request (default 10s, as NGINX's).
    pub fail_timeout: Duration,
    /// Response statuses that count as failures too (default none, as
    /// NGINX's default `proxy_next_upstream`); 429 and 500-599 only.
    pub fail_statuses: Vec<u16>,
    /// Active checks (`health_check = { path, interval }`); `None`: off.
    pub health_check: Option<HealthCheckConfig>,
    /// How a request's server is chosen (`balance`, `hash_key`; default
    /// round robin).
    pub balance: Balance,
}

/// An upstream's `balance`: how each request's server is chosen among
/// those that are up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// `"round_robin"`: in turn (smooth weighted with weights), NGINX's default.
    RoundRobin,
    /// `"least_conn"`: the server with the fewest requests in flight for
    /// its weight, ties in turn (NGINX's `least_conn`).
    LeastConn,
    /// `"hash"`: the server on a consistent hash ring (160 points per
    /// weight unit) at the hash of `hash_key` rendered for the request
    /// (NGINX's `hash KEY consistent`).
    Hash(KeyTemplate),
}

impl Balance {
    /// The config spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Balance::RoundRobin => "round_robin",
            Balance::LeastConn => "least_conn",
            Balance::Hash(_) => "hash",
        }
    }
}

/// One entry of an upstream's `servers`, checked and parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamServer {
    /// `host:port` (a scheme's default port added when it had none); host
    /// names are resolved by the upstream pool, not here.
    pub address: http::uri::Authority,
    /// `https` (an `https://` server, or the upstream's `tls = true`) or
    /// `http`.
    pub scheme: Scheme,
    /// Its share of round robin (`weight`, default 1).
    pub weight: u32,
    /// The upstream's `max_fails` / `fail_timeout` unless its table form
    /// gives its own.
    pub health: PassiveHealth,
    /// `unix:/path` (issue 28): the server listens on this unix socket;
    /// `address` is then a name of calmcache's own making that keys its
    /// pooled connections and never resolves ([`unix_socket::pool_authority`]).
    pub unix: Option<std::path::PathBuf>,
}

impl UpstreamServer {
    /// The server as `/status`, metrics, logs and errors name it: its
    /// `host:port`, or `unix:/path`.
    pub fn label(&self) -> String {
        match &self.unix {
            Some(path) => unix_socket::label(path),
            None => self.address.to_string(),
        }
    }
}

/// The TLS keys of `[upstreams.<name>]`: how calmcache checks an origin
/// reached over TLS, and the certificate it shows when asked (mTLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// `tls_server_name`: the SNI name sent and the name the certificate
    /// must hold; `None`: each server's own host (an IP literal sends no
    /// SNI and is verified as an IP address).
    pub server_name: Option<String>,
    /// `tls_ca_file`: the CA certificates trusted instead of the system's
    /// roots (read with the config: a renewed file is a changed config).
    pub ca: Option<crate::config::tls::PemFile>,
    /// `tls_verify` (default true); false accepts any certificate.
    pub verify: bool,
    /// `tls_client_cert` and `tls_client_key` (the key may sit in the
    /// certificate's file): shown to an origin that asks for one.
    pub client: Option<(crate::config::tls::PemFile, crate::config::tls::PemFile)>,
}

/// `max_fails` and `fail_timeout` as they apply to one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassiveHealth {
    /// Failures within `fail_timeout` that mark the server down; 0: never.
    pub max_fails: u32,
    /// The window failures are counted in, and how long the server is skipped.
    pub fail_timeout: Duration,
}

/// `health_check = { path = "/healthz", interval = "5s" }`: a background
/// request to each server of the upstream every `interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    /// Origin-form path (and query) requested with GET, e.g. `/healthz`.
    pub path: String,
    /// Time between two checks of one server (default 5s, more than 0).
    pub interval: Duration,
    /// Limit on a check's connect and response head (default 5s).
    pub timeout: Duration,
    /// Consecutive failed checks that mark a server down (default 1).
    pub fails: u32,
    /// Consecutive passed checks that mark a down server up again (default 1).
    pub passes: u32,
}

/// The storage behind a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneKind {
    /// Objects live in process memory and are lost on restart.
    Memory,
    /// Objects live in files under `path`, survive restarts, and are read on
    /// a blocking thread pool.
    Disk,
}

impl ZoneKind {
    /// Every kind, in the spelling the config uses.
    pub const ALL: [ZoneKind; 2] = [ZoneKind::Memory, ZoneKind::Disk];

    /// The config spelling of this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneKind::Memory => "memory",
            ZoneKind::Disk => "disk",
        }
    }
}

/// `[zones.<name>]`: a cache that routes store responses in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneConfig {
    /// The table key, used by routes and in metrics labels.
    pub name: String,
    /// Where objects are stored.
    pub kind: ZoneKind,
    /// Capacity in bytes, above 0.
    pub max_size: u64,
    /// Largest single object stored, in bytes: above 0 and at most
    /// `max_size`, so one response cannot evict the whole zone.
    pub max_object_size: u64,
    /// Disk zones: the directory holding the zone's files (created at start
    /// if missing); `None` for memory zones.
    pub path: Option<std::path::PathBuf>,
    /// Disk zones: objects not used for this long are removed (default 10m).
    pub inactive: Duration,
    /// Disk zones: free space the zone leaves on its file system (default 0).
    pub min_free: u64,
    /// Disk zones: which new objects a full zone writes (default
    /// "frequent": a key's second miss; core disk/admission.rs).
    pub admission: calmcache_core::disk::Admission,
    /// Share of keys this zone takes among a route's `zones` (default 1).
    pub weight: u32,
}

/// Statuses that answer the request (or its client) rather than the
/// resource: 400 Bad Request, 405 Method Not Allowed, 406 Not Acceptable,
/// 408 Request Timeout, 411 Length Required, 413 Content Too Large, 414 URI
/// Too Long, 415 Unsupported Media Type, 417 Expectation Failed, 421
/// Misdirected Request, 429 Too Many Requests, 431 Request Header Fields Too
/// Large, 501 Not Implemented. One client's odd (or too frequent) request
/// must not make them everyone's answer, so `ttl.any` never stores them; a
/// route that wants one stored lists it by number.
pub(crate) const REQUEST_CAUSED: [u16; 13] = [
    400, 405, 406, 408, 411, 413, 414, 415, 417, 421, 429, 431, 501,
];

/// Per-status TTLs that a route applies to responses (`ttl = { 200 = "1s", any = "5s" }`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TtlTable {
    by_status: BTreeMap<u16, Duration>,
    any: Option<Duration>,
}

impl TtlTable {
    /// The TTL for `status`: its own entry first, then the `any` entry,
    /// which never covers [`REQUEST_CAUSED`] statuses.
    pub fn get(&self, status: u16) -> Option<Duration> {
        match self.by_status.get(&status) {
            Some(ttl) => Some(*ttl),
            None if REQUEST_CAUSED.contains(&status) => None,
            None => self.any,
        }
    }

    /// True when the route sets no TTL at all (origin headers decide).
    pub fn is_empty(&self) -> bool {
        self.by_status.is_empty() && self.any.is_none()
    }
}

/// Whether a route obeys the client's request `Cache-Control` and `Pragma`
/// (`no-cache`, `max-age=0`, `no-store`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCacheControl {
    /// Obey them, as RFC 9111 asks of a shared cache (the default).
    Honor,
    /// Ignore them, so a reload in a browser cannot send every request to
    /// the origin.
    Ignore,
}

impl ClientCacheControl {
    /// Every value, in the spelling the config uses.
    pub const ALL: [ClientCacheControl; 2] =
        [ClientCacheControl::Honor, ClientCacheControl::Ignore];

    /// The config spelling of this value.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientCacheControl::Honor => "honor",
            ClientCacheControl::Ignore => "ignore",
        }
    }
}

/// How a cacheable request body (QUERY, or POST with `cache_post`) enters
/// the key (`body_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKey {
    /// Its bytes as sent (the default).
    Bytes,
    /// Its canonical JSON form: object keys sorted, insignificant
    /// whitespace dropped, numbers as written; a body that is not JSON
    /// passes uncached.
    Json,
}

impl BodyKey {
    /// Every value, in the spelling the config uses.
    pub const ALL: [BodyKey; 2] = [BodyKey::Bytes, BodyKey::Json];

    /// The config spelling of this value.
    pub fn as_str(self) -> &'static str {
        match self {
            BodyKey::Bytes => "bytes",
            BodyKey::Json => "json",
        }
    }
}

/// `[[routes]]`: which requests go to which upstream, and how they are cached.
///
/// Its settings are grouped in parts that each say one thing (route.rs),
/// held inline: the TOML keys stay flat.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Label for metrics and logs; `route<index>` when not set; unique.
    pub name: String,
    /// What the route does: proxy to its upstream, `return`, or serve
    /// files from `root` (config/answering.rs).
    pub kind: answering::RouteKind,
    /// `internal = true`: a client request this route takes gets 404
    /// (NGINX's `internal`); only the proxy's own requests reach it.
    pub internal: bool,
    /// `error_pages`: answers replaced by a page from another route (NGINX's
    /// `error_page`); empty by default.
    pub error_pages: Vec<answering::ErrorPage>,
    /// `intercept_errors`: a proxied route's origin answers get its
    /// `error_pages` too, not only calmcache's own (NGINX's
    /// `proxy_intercept_errors`; default false).
    pub intercept_errors: bool,
    /// `match`, `path`, `hosts`, `listeners`.
    pub matching: RouteMatching,
    /// `zone`/`zones`, `memory`, `key`, `bypass`, `no_store`.
    pub storage: RouteStorage,
    /// `ttl`, `override_origin`, `heuristic_*`, `stale_*`, `ignore_headers`.
    pub freshness: RouteFreshness,
    /// `refresh`, `per_beta`, `sus_stale`, `lock_timeout`, `hit_for_miss`.
    pub refresh: RouteRefresh,
    /// `client_cache_control`, `convert_head`, `cache_post`, `body_key`,
    /// `max_body_key`, `websocket`, `merge_slashes`,
    /// `underscores_in_headers`, `trusted_proxies`.
    pub requests: RouteRequests,
    /// `compress*`, `forward_targeted_cache_control`, `cache_status_key`,
    /// `expose_cache_tags`, `early_hints*`.
    pub answers: RouteAnswers,
    /// `warm`, `warm_host`.
    pub warm: RouteWarm,
    /// `request_headers`, `response_headers`, `expires`.
    pub headers: header_rules::HeaderRules,
    /// `limits`: indexes into [`Config::limits`], applied in this order
    /// (default none: the route pays nothing).
    pub limits: Vec<usize>,
}

impl RouteConfig {
    /// The upstream (an index into [`Config::upstreams`]) of a proxied
    /// route; `None` for one that answers itself.
    pub fn upstream(&self) -> Option<usize> {
        match self.kind {
            answering::RouteKind::Proxy { upstream } => Some(upstream),
            _ => None,
        }
    }

    /// Whether this route's `match` and `path` take a request for
    /// `path_and_query` (hosts aside).
    pub fn matches(&self, path_and_query: &str) -> bool {
        RouteMatch::new(
            self.matching.matcher.as_ref(),
            self.matching.path_matcher.as_ref(),
        )
        .is_match(path_and_query)
    }

    /// True when the route takes every path and query: no `match`, no `path`.
    pub fn matches_all(&self) -> bool {
        self.matching.matcher.is_none() && self.matching.path_matcher.is_none()
    }
}

/// A route's `match` and `path` regexes, borrowed from the config or from a
/// worker's own clones: the one place that says what each one sees.
#[derive(Clone, Copy)]
pub(crate) struct RouteMatch<'a> {
    target: Option<&'a regex::Regex>,
    path: Option<&'a regex::Regex>,
}

impl<'a> RouteMatch<'a> {
    /// `target` (`match`) and `path` (`path`); `None` takes everything.
    pub(crate) fn new(target: Option<&'a regex::Regex>, path: Option<&'a regex::Regex>) -> Self {
        RouteMatch { target, path }
    }

    /// `match` on the whole normalised target, `path` on the part before
    /// the first `?` (the matching form decodes no `?`, so that is where
    /// the query starts). Borrows only: route matching allocates nothing.
    pub(crate) fn is_match(self, path_and_query: &str) -> bool {
        let path_ok = self.path.is_none_or(|regex| {
            let path = path_and_query
                .split_once('?')
                .map_or(path_and_query, |(path, _)| path);
            regex.is_match(path)
        });
        path_ok
            && self
                .target
                .is_none_or(|regex| regex.is_match(path_and_query))
    }
}

impl Config {
    /// Reads and validates the config file at `path`.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Config::from_toml(&text, &path.display().to_string())?;
        config.secrets = std::mem::take(&mut config.secrets).with_file(path);
        Ok(config)
    }

    /// Parses and validates config `text`; `source` names it in messages
    /// (usually the file path).
    pub fn from_toml(text: &str, source: &str) -> Result<Config, ConfigError> {
        let invalid = |problems| ConfigError::Invalid {
            source_name: source.to_owned(),
            problems,
        };
        let parse::Parsed { raw, unknown_keys } = parse::parse(text).map_err(invalid)?;
        let secrets = InlineSecrets::of(&raw);
        match validate::validate(raw) {
            Ok(config) if unknown_keys.is_empty() => Ok(Config { secrets, ..config }),
            Ok(_) => Err(invalid(unknown_keys)),
            Err(problems) => Err(invalid(unknown_keys.into_iter().chain(problems).collect())),
        }
    }
}
