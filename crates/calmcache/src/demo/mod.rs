//! `calmcache demo`: the bundled slow origin and calmcache in front of it with
//! a 1 s microcache (SUS + stale-while-revalidate), from an embedded config;
//! `calmcache demo --fleet` (`fleet.rs`): a local Redis and three such nodes
//! acting as one cache.
//!
//! Owns: the demo command and the origin (`origin.rs`, also `calmcache
//! origin`, which tests and benchmarks use). Imports: any folder; nothing
//! imports it but `main.rs`.

pub(crate) mod fleet;
pub(crate) mod origin;

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::{Config, ConfigError};
use crate::demo::origin::OriginOptions;

/// Where the demo listens.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// The proxy.
    pub listen: SocketAddr,
    /// The admin listener.
    pub admin: SocketAddr,
    /// The bundled origin.
    pub origin: SocketAddr,
}

impl DemoOptions {
    /// The slow origin: ~180 ms of CPU per page on one worker, about 5 pages/s.
    pub fn origin_options(&self) -> OriginOptions {
        origin_options(self)
    }

    /// The embedded config, in front of the origin listening at `origin`.
    pub fn config(&self, origin: SocketAddr) -> Result<Config, ConfigError> {
        config(self.listen, self.admin, origin)
    }

    /// What the demo prints; the first line is the proxy URL.
    pub fn banner(proxy: SocketAddr, admin: SocketAddr, origin: SocketAddr) -> String {
        banner(proxy, admin, origin)
    }
}

fn origin_options(opts: &DemoOptions) -> OriginOptions {
    OriginOptions {
        listen: opts.origin,
        cpu: Duration::from_millis(180),
        sleep: Duration::ZERO,
        workers: 1,
        body_bytes: 0,
        cache_control: None,
        status: http::StatusCode::OK,
    }
}

/// The embedded config, pointing at the origin's real address.
fn config_text(listen: SocketAddr, admin: SocketAddr, origin: SocketAddr) -> String {
    format!(
        r#"# calmcache demo: a 1 s microcache in front of a slow origin.
[server]
listen = ["{listen}"]

[admin]
listen = "{admin}"

[upstreams.origin]
servers = ["{origin}"]
keepalive = 32

[zones.ram]
kind = "memory"
max_size = "64MiB"

[[routes]]
name = "pages"
upstream = "origin"
zone = "ram"
ttl = {{ 200 = "1s", 404 = "1s" }}
refresh = "sus"
stale_while_revalidate = "10s"
stale_if_error = "1h"
warm = ["/"]
"#
    )
}

/// Parses the embedded config.
fn config(
    listen: SocketAddr,
    admin: SocketAddr,
    origin: SocketAddr,
) -> Result<Config, ConfigError> {
    Config::from_toml(&config_text(listen, admin, origin), "<demo config>")
}

fn banner(proxy: SocketAddr, admin: SocketAddr, origin: SocketAddr) -> String {
    format!(
        "http://{proxy}/\n\
         calmcache demo is running: a 1 s microcache (refresh = \"sus\", stale_while_revalidate = \"10s\")\n\
         \x20 proxy:  http://{proxy}/\n\
         \x20 dashboard: http://{admin}/   (live: requests/s, hit ratio, origin requests saved, latency)\n\
         \x20 admin:  http://{admin}/status (JSON), http://{admin}/metrics (Prometheus)\n\
         \x20 origin: http://{origin}/   (each page burns ~180 ms of CPU: about 5 pages/s alone)\n\
         try:\n\
         \x20 wrk -t2 -c10 -d30s --latency http://{proxy}/\n\
         \x20 ab -c 10 -t 30 -k http://{proxy}/\n\
         \x20 curl -s http://{origin}/__origin/stats   (requests that reached the origin)\n\
         \x20 curl -X PURGE http://{proxy}/   (purge the page; -H 'Calmcache-Purge: soft' serves it stale while one refresh runs)\n\
         Ctrl-C stops it."
    )
}
