//! An in-process calmcache on `127.0.0.1:0`, configured by a few lines of TOML.
//!
//! ```text
//! let proxy = Proxy::new(&origin).route(r#"refresh = "lock""#).start().await;
//! let reply = get(&proxy.url("/a")).await;
//! ```
//!
//! The route gets `ttl = { 200 = "1s" }` unless its keys set a `ttl` or the
//! builder is told [`Proxy::no_default_ttl`]: RFC tests want the origin's
//! headers alone to decide freshness.

use std::time::Duration;

use calmcache::Config;
use calmcache::Running;

/// Builds a proxy with one upstream (the origin), one memory zone and one route.
pub struct Proxy {
    origin: std::net::SocketAddr,
    more_servers: Vec<std::net::SocketAddr>,
    servers: Option<String>,
    route: String,
    upstream: String,
    zone_size: String,
    max_object_size: String,
    default_ttl: bool,
    zone: bool,
    disk: Option<String>,
    access_log: String,
    fleet: String,
    admin: String,
    server: String,
    tables: String,
    tiers: calmcache::ZoneTiers,
}

impl Proxy {
    /// A proxy in front of `origin` with a 1 s ttl for 200s and the defaults.
    pub fn new(origin: &crate::Origin) -> Proxy {
        Proxy::with_upstream(origin.addr())
    }

    /// The same in front of any server at `addr` (e.g. a WebSocket server
    /// a test runs itself).
    pub fn with_upstream(addr: std::net::SocketAddr) -> Proxy {
        Proxy {
            origin: addr,
            more_servers: Vec::new(),
            servers: None,
            route: String::new(),
            upstream: String::new(),
            zone_size: "64MiB".into(),
            max_object_size: "1MiB".into(),
            default_ttl: true,
            zone: true,
            disk: None,
            access_log: String::new(),
            fleet: String::new(),
            admin: "listen = \"127.0.0.1:0\"\n".into(),
            server: String::new(),
            tables: String::new(),
            tiers: calmcache::ZoneTiers::new(),
        }
    }

    /// Extra keys for the route, e.g. `refresh = "lock"`.
    pub fn route(mut self, keys: &str) -> Proxy {
        self.route.push_str(keys);
        self.route.push('\n');
        self
    }

    /// Another server for the upstream, after the origin (round robin).
    pub fn also_server(mut self, addr: std::net::SocketAddr) -> Proxy {
        self.more_servers.push(addr);
        self
    }

    /// The upstream's `servers` value as TOML, in place of the origin's
    /// address, e.g. `["https://127.0.0.1:8443", { address = "b:80", weight = 3 }]`.
    pub fn servers(mut self, toml: &str) -> Proxy {
        self.servers = Some(toml.to_owned());
        self
    }

    /// Extra keys for the upstream, e.g. `read_timeout = "200ms"`.
    pub fn upstream(mut self, keys: &str) -> Proxy {
        self.upstream.push_str(keys);
        self.upstream.push('\n');
        self
    }

    /// The zone's `max_size` and `max_object_size`.
    pub fn zone(mut self, max_size: &str, max_object_size: &str) -> Proxy {
        self.zone_size = max_size.into();
        self.max_object_size = max_object_size.into();
        self
    }

    /// No route `ttl` unless the route keys give one: only the origin's
    /// headers (and heuristics) make a response fresh.
    pub fn no_default_ttl(mut self) -> Proxy {
        self.default_ttl = false;
        self
    }

    /// Makes the zone a disk zone in `path` (with `extra` zone keys, e.g.
    /// `inactive = "1s"`).
    pub fn disk_zone(mut self, path: &std::path::Path, extra: &str) -> Proxy {
        self.disk = Some(format!(
            "kind = \"disk\"\npath = {:?}\n{extra}\n",
            path.display().to_string()
        ));
        self
    }

    /// Stores the zone (`ram`) in `tier` instead of a memory tier: any
    /// [`Tier`](calmcache_core::Tier), e.g. a [`CountingTier`](crate::CountingTier).
    pub fn zone_tier(mut self, tier: std::sync::Arc<dyn calmcache_core::Tier>) -> Proxy {
        self.tiers = self.tiers.with("ram", tier);
        self
    }

    /// An `[access_log]` table: lines to `path` (a file, or `"stdout"`) in
    /// `format` (`"combined"` or `"json"`).
    pub fn access_log(mut self, path: &std::path::Path, format: &str) -> Proxy {
        self.access_log = format!(
            "\n[access_log]\npath = {:?}\nformat = {format:?}\n",
            path.display().to_string()
        );
        self
    }

    /// A route without a zone: every request is proxied without caching.
    pub fn no_zone(mut self) -> Proxy {
        self.zone = false;
        self
    }

    /// The `[admin]` keys (default `listen = "127.0.0.1:0"`), e.g. with a
    /// `token` or another `listen`.
    pub fn admin(mut self, keys: &str) -> Proxy {
        self.admin = format!("{keys}\n");
        self
    }

    /// Extra `[server]` keys, e.g. `max_connections = 3`.
    pub fn server(mut self, keys: &str) -> Proxy {
        self.server.push_str(keys);
        self.server.push('\n');
        self
    }

    /// A `[fleet]` table: Redis at `redis` (a URL, or a TOML list for a
    /// cluster) and extra keys, e.g. `timeout = "50ms"`.
    pub fn fleet(mut self, redis: &str, keys: &str) -> Proxy {
        let redis = if redis.starts_with('[') {
            redis.to_owned()
        } else {
            format!("\"{redis}\"")
        };
        self.fleet = format!("\n[fleet]\nredis = {redis}\n{keys}\n");
        self
    }

    /// Top-level tables after the rest, e.g. `[limits.api]` and its keys.
    pub fn tables(mut self, toml: &str) -> Proxy {
        self.tables.push('\n');
        self.tables.push_str(toml);
        self.tables.push('\n');
        self
    }

    /// The config this builder produces.
    pub fn toml(&self) -> String {
        let ttl = if !self.default_ttl || self.route.contains("ttl") {
            ""
        } else {
            "ttl = { 200 = \"1s\" }\n"
        };
        let zone = if self.zone { "zone = \"ram\"\n" } else { "" };
        let kind = self.disk.as_deref().unwrap_or("kind = \"memory\"\n");
        let listed: Vec<String> = std::iter::once(self.origin)
            .chain(self.more_servers.iter().copied())
            .map(|a| format!("\"{a}\""))
            .collect();
        let servers = self
            .servers
            .clone()
            .unwrap_or_else(|| format!("[{}]", listed.join(", ")));
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nthreads = 2\n{}\n[admin]\n{}\n\
             [upstreams.origin]\nservers = {}\n{}\n\
             [zones.ram]\n{kind}max_size = \"{}\"\nmax_object_size = \"{}\"\n\n\
             [[routes]]\nname = \"test\"\nupstream = \"origin\"\n{zone}{ttl}{}{}{}{}",
            self.server,
            self.admin,
            servers,
            self.upstream,
            self.zone_size,
            self.max_object_size,
            self.route,
            self.access_log,
            self.fleet,
            self.tables
        )
    }

    /// Starts it on the current runtime.
    pub async fn start(self) -> RunningProxy {
        let text = self.toml();
        let config = Config::from_toml(&text, "<test>").unwrap_or_else(|e| panic!("{e}\n{text}"));
        let running = calmcache::start_with(&config, None, self.tiers)
            .await
            .expect("start proxy");
        RunningProxy {
            running: Some(running),
        }
    }
}

/// A started proxy; shut down on drop of the runtime or with [`RunningProxy::stop`].
pub struct RunningProxy {
    running: Option<Running>,
}

impl RunningProxy {
    /// The running proxy (addresses, reload, current generation).
    pub fn running(&self) -> &Running {
        self.running.as_ref().expect("running")
    }

    /// The first TLS listener's address.
    pub fn tls_addr(&self) -> std::net::SocketAddr {
        self.running().tls_addrs[0]
    }

    /// `127.0.0.1:PORT`: the `Host` clients send, and the host of same-origin URLs.
    pub fn host(&self) -> String {
        self.running().proxy_addrs[0].to_string()
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running().proxy_addrs[0])
    }

    /// The admin listener's address (`127.0.0.1:PORT`; loopback when it
    /// listens on every address).
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        let mut addr = self.running().admin_addr.expect("admin");
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        addr
    }

    /// `http://127.0.0.1:ADMIN_PORT{path}`: the dashboard is `admin_url("/")`.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin_addr())
    }

    /// The admin `/status` JSON.
    pub async fn status(&self) -> serde_json::Value {
        let addr = self.admin_addr();
        let reply = crate::get(&format!("http://{addr}/status")).await;
        serde_json::from_str(&reply.body).expect("status json")
    }

    /// `POST /purge` on the admin listener with the bearer `token` and the
    /// JSON `body`, whatever the answer.
    pub async fn purge_request(&self, token: &str, body: &str) -> crate::Reply {
        purge_at(&self.admin_url("/purge"), token, body).await
    }

    /// `POST /purge` as [`RunningProxy::purge_request`], which must answer
    /// 200; its JSON.
    pub async fn purge(&self, token: &str, body: &str) -> serde_json::Value {
        let r = self.purge_request(token, body).await;
        assert_eq!(r.status, 200, "{body}: {}", r.body);
        serde_json::from_str(&r.body).expect("purge json")
    }

    /// Reopens the access log file at its path (what SIGUSR1 does).
    pub fn reopen_logs(&self) {
        self.running().reopen_logs();
    }

    /// Stops it: requests in flight and tunnels get `grace` to finish.
    pub async fn stop_within(mut self, grace: Duration) {
        if let Some(running) = self.running.take() {
            running.shutdown(grace).await;
        }
    }

    /// Stops it gracefully.
    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown(Duration::from_secs(2)).await;
        }
    }
}

/// `POST {purge_url}` with the bearer `token` and the JSON `body` (for a
/// proxy started as a process, whose admin URL is all a test has).
pub async fn purge_at(purge_url: &str, token: &str, body: &str) -> crate::Reply {
    let auth = format!("Bearer {token}");
    crate::request_with_body(
        http::Method::POST,
        purge_url,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_owned(),
    )
    .await
}
