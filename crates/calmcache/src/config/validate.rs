//! Validation: [`RawConfig`] -> [`Config`], collecting every problem.
//!
//! Owns the ranges and the cross references (routes -> upstreams and
//! zones); the defaults are `defaults.rs`'s. It must not stop at the first problem: each check records a
//! [`Problem`] with its TOML path and carries on with a placeholder value, so
//! one run tells the user everything to fix. The placeholders never escape:
//! any problem turns the whole result into `Err`.
//!
//! Route checks live in `validate/routes.rs`, upstream health checks in
//! `validate/health.rs`, upstream TLS and server weights in
//! `validate/upstream_tls.rs`.

mod fleet_secret;
mod fleet_tls;
mod health;
mod routes;
mod upstream_tls;

use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::defaults;
use super::error::{toml_key, Problem};
use super::raw::{RawAccessLog, RawFleet, RawRedisNodes};
use super::raw::{RawAdmin, RawConfig, RawServer, RawTls, RawUpstream, RawUpstreamServer};
use super::raw::{RawZone, Text};
use super::units::{self, BadValue, DURATION_HINT, SIZE_HINT};
use super::{
    suggest, AdminConfig, Config, FleetConfig, Network, Scheme, ServerConfig, UpstreamConfig,
    UpstreamServer, ZoneConfig, ZoneKind,
};
use crate::config::access_log::{AccessLogConfig, LogFormat, LogTarget};

/// The shortest `fleet.lease`: renewed every third of it, a shorter one
/// would cost a Redis call every few milliseconds per fetch.
const LEASE_MIN: Duration = Duration::from_millis(300);

/// The longest client clock (`server.send_timeout`, HTTP/2 keepalive).
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 86_400);

/// Checks `raw` and builds the typed config, or returns every problem found.
pub(crate) fn validate(raw: RawConfig) -> Result<Config, Vec<Problem>> {
    let mut check = Checker::default();
    let server = check.server(raw.server.unwrap_or_default());
    let admin = raw.admin.map(|admin| check.admin(admin, &server));
    let upstreams = check.upstreams(raw.upstreams);
    let zones: Vec<ZoneConfig> = raw
        .zones
        .into_iter()
        .map(|(name, zone)| check.zone(name, zone))
        .collect();
    check.shared_disk_paths(&zones);
    let routes = check.routes(raw.routes, &upstreams, &zones);
    let access_log = raw.access_log.map(|log| check.access_log(log));
    let fleet = raw.fleet.map(|fleet| check.fleet(fleet));
    if !check.problems.is_empty() {
        return Err(check.problems);
    }
    Ok(Config {
        server,
        admin,
        upstreams,
        zones,
        routes,
        access_log,
        fleet,
        secrets: super::InlineSecrets::default(),
    })
}

/// Collects problems while the checks run.
#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn report(&mut self, problem: Problem) {
        self.problems.push(problem);
    }

    fn missing(&mut self, path: &str, example: &str) {
        self.report(Problem::new(path, "missing required key").hint(format!("e.g. {example}")));
    }

    fn server(&mut self, raw: RawServer) -> ServerConfig {
        let listen = match raw.listen {
            None => {
                self.missing("server.listen", r#"listen = ["127.0.0.1:8080"]"#);
                Vec::new()
            }
            Some(listen) => self.listen_addrs(listen),
        };
        let threads = match raw.threads {
            None | Some(0) => defaults::server::threads(),
            Some(threads) => self.count("server.threads", Some(threads), 1, 1),
        };
        let max_connections = match raw.max_connections {
            None => defaults::server::MAX_CONNECTIONS,
            Some(n) => self.count("server.max_connections", Some(n), 1, 1),
        };
        let backlog = match raw.backlog {
            None => defaults::server::BACKLOG,
            Some(n) => self.count("server.backlog", Some(n), 1, 1),
        };
        let keepalive_timeout = self.duration(
            "server.keepalive_timeout",
            raw.keepalive_timeout.as_ref(),
            defaults::server::KEEPALIVE_TIMEOUT,
        );
        if keepalive_timeout.is_zero() {
            self.report(Problem::new(
                "server.keepalive_timeout",
                "must be above 0".to_string(),
            ));
        }
        let keepalive_requests = match raw.keepalive_requests {
            None => defaults::server::KEEPALIVE_REQUESTS,
            Some(n) => self.count(
                "server.keepalive_requests",
                Some(n),
                defaults::server::KEEPALIVE_REQUESTS,
                1,
            ),
        };
        let max_header_size = raw
            .max_header_size
            .and_then(|t| self.positive_size("server.max_header_size", &t))
            .unwrap_or(defaults::server::MAX_HEADER_SIZE);
        if max_header_size < 8 * 1024 {
            let problem = Problem::new(
                "server.max_header_size",
                format!("{max_header_size} bytes is below the smallest head buffer, 8 KiB"),
            );
            self.report(problem.hint(r#"write e.g. "16KiB""#));
        }
        let header_read_timeout = self.duration(
            "server.header_read_timeout",
            raw.header_read_timeout.as_ref(),
            defaults::server::HEADER_READ_TIMEOUT,
        );
        if header_read_timeout.is_zero() {
            self.report(Problem::new(
                "server.header_read_timeout",
                "must be above 0".to_string(),
            ));
        }
        let shutdown_timeout = self.duration(
            "server.shutdown_timeout",
            raw.shutdown_timeout.as_ref(),
            defaults::server::SHUTDOWN_TIMEOUT,
        );
        let tls_listen = match raw.tls_listen {
            None => Vec::new(),
            Some(addrs) => self.addrs("server.tls_listen", addrs),
        };
        for (i, addr) in tls_listen.iter().enumerate() {
            if addr.port() != 0 && listen.contains(addr) {
                let problem = Problem::new(
                    format!("server.tls_listen[{i}]"),
                    format!("{addr} is also in server.listen"),
                );
                self.report(problem.hint("TLS and plain HTTP need ports of their own"));
            }
        }
        let tls = self.tls_certs(raw.tls.unwrap_or_default(), !tls_listen.is_empty());
        let max_inflight_body = raw
            .max_inflight_body
            .and_then(|t| self.positive_size("server.max_inflight_body", &t))
            .unwrap_or(defaults::server::MAX_INFLIGHT_BODY);
        let send_timeout = self.timeout(
            "server.send_timeout",
            raw.send_timeout.as_ref(),
            defaults::server::SEND_TIMEOUT,
        );
        let http2_keepalive_interval = self.timeout(
            "server.http2_keepalive_interval",
            raw.http2_keepalive_interval.as_ref(),
            defaults::server::HTTP2_KEEPALIVE_INTERVAL,
        );
        let http2_keepalive_timeout = self.timeout(
            "server.http2_keepalive_timeout",
            raw.http2_keepalive_timeout.as_ref(),
            defaults::server::HTTP2_KEEPALIVE_TIMEOUT,
        );
        ServerConfig {
            listen,
            threads,
            max_connections,
            backlog: u32::try_from(backlog).unwrap_or(u32::MAX),
            keepalive_timeout,
            keepalive_requests: u32::try_from(keepalive_requests).unwrap_or(u32::MAX),
            max_header_size: usize::try_from(max_header_size).unwrap_or(usize::MAX),
            header_read_timeout,
            shutdown_timeout,
            tls_listen,
            tls,
            h2c: raw.h2c.unwrap_or(defaults::server::H2C),
            max_inflight_body,
            send_timeout,
            http2_keepalive_interval,
            http2_keepalive_timeout,
        }
    }

    /// `[[server.tls]]`: every entry loaded (files read, key matched to its
    /// certificate), so a bad file fails `check` and start, never a handshake.
    fn tls_certs(&mut self, raw: Vec<RawTls>, listening: bool) -> Vec<crate::config::tls::TlsCert> {
        if listening && raw.is_empty() {
            let problem = Problem::new(
                "server.tls",
                "server.tls_listen is set but no certificate is configured",
            );
            self.report(problem.hint(
                "add [[server.tls]] with cert = \"/path/fullchain.pem\" and key = \"/path/key.pem\"",
            ));
        }
        if !listening && !raw.is_empty() {
            let problem = Problem::new(
                "server.tls",
                "certificates are configured but server.tls_listen is not set",
            );
            self.report(problem.hint(r#"e.g. tls_listen = ["0.0.0.0:443"]"#));
        }
        let mut certs = Vec::new();
        for (i, entry) in raw.into_iter().enumerate() {
            let at = format!("server.tls[{i}]");
            let Some(cert) = entry.cert else {
                self.missing(
                    &format!("{at}.cert"),
                    r#"cert = "/etc/ssl/example.pem" and key = "/etc/ssl/example.key""#,
                );
                continue;
            };
            let names = entry.names.unwrap_or_default();
            if names.iter().any(|n| n.trim().is_empty()) {
                self.report(Problem::new(format!("{at}.names"), "a name is empty"));
                continue;
            }
            // No `key`: the certificate file holds it too (a combined PEM).
            let key = entry.key.as_deref().map(std::path::Path::new);
            match crate::config::tls::load(cert.as_ref(), key, names) {
                // The first entry is the default certificate: it needs no
                // name (a `-subj /CN=localhost` one); Config::warnings says
                // so. The others are only ever chosen by name.
                Ok(loaded) if loaded.names.is_empty() && i > 0 => {
                    let problem = Problem::new(
                        format!("{at}.cert"),
                        format!(
                            "{cert}: the certificate has no DNS names (subjectAltName) to match \
                             SNI against, and only the first [[server.tls]] entry, the default, \
                             is served without one"
                        ),
                    );
                    self.report(problem.hint(
                        r#"list the names it is for: names = ["example.com"], or make it the first entry"#,
                    ));
                }
                Ok(loaded) => certs.push(loaded),
                Err(reason) => self.report(Problem::new(at, reason)),
            }
        }
        certs
    }

    fn listen_addrs(&mut self, raw: Vec<String>) -> Vec<SocketAddr> {
        if raw.is_empty() {
            let problem = Problem::new("server.listen", "must not be empty");
            self.report(problem.hint(r#"e.g. listen = ["127.0.0.1:8080"]"#));
        }
        self.addrs("server.listen", raw)
    }

    /// A list of listen addresses, each checked, none twice.
    fn addrs(&mut self, key: &str, raw: Vec<String>) -> Vec<SocketAddr> {
        let mut listen: Vec<SocketAddr> = Vec::new();
        for (i, text) in raw.iter().enumerate() {
            let path = format!("{key}[{i}]");
            let Some(addr) = self.socket_addr(&path, text) else {
                continue;
            };
            // Port 0 binds a fresh port each time, so repeating it is fine.
            if addr.port() != 0 && listen.contains(&addr) {
                self.report(Problem::new(path, format!("{addr} is listed twice")));
            }
            listen.push(addr);
        }
        listen
    }

    fn admin(&mut self, raw: RawAdmin, server: &ServerConfig) -> AdminConfig {
        let placeholder = SocketAddr::from(([127, 0, 0, 1], 0));
        let Some(text) = raw.listen else {
            self.missing(
                "admin.listen",
                r#"listen = "127.0.0.1:9090", or remove [admin]"#,
            );
            return AdminConfig {
                listen: placeholder,
                token: None,
                purge_allow: Vec::new(),
                names: Vec::new(),
                purge_token: defaults::admin::PURGE_TOKEN,
            };
        };
        let listen = self
            .socket_addr("admin.listen", &text)
            .unwrap_or(placeholder);
        if listen.port() != 0
            && (server.listen.contains(&listen) || server.tls_listen.contains(&listen))
        {
            let problem =
                Problem::new("admin.listen", format!("{listen} is also a proxy listener"));
            self.report(problem.hint("give the admin API its own port"));
        }
        let token = self.admin_token(raw.token, raw.token_file);
        if token.is_none() && !listen.ip().is_loopback() {
            let problem = Problem::new(
                "admin.listen",
                format!("{listen} is not a loopback address and the admin API has no token"),
            );
            self.report(problem.hint(
                "set admin.token or admin.token_file (or CALMCACHE_ADMIN_TOKEN), \
                 or listen on 127.0.0.1",
            ));
        }
        let purge_allow = match raw.purge_allow {
            None => defaults::admin::PURGE_ALLOW
                .iter()
                .filter_map(|n| Network::parse(n))
                .collect(),
            Some(list) => list
                .iter()
                .filter_map(|text| {
                    let net = Network::parse(text);
                    if net.is_none() {
                        let problem = Problem::new(
                            "admin.purge_allow",
                            format!("{text:?} is not an IP network"),
                        );
                        self.report(problem.hint(r#"write e.g. "10.0.0.0/8" or "::1""#));
                    }
                    net
                })
                .collect(),
        };
        let names = raw
            .names
            .unwrap_or_default()
            .iter()
            .filter_map(|text| {
                let name = text.trim().trim_end_matches('.').to_ascii_lowercase();
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
                if !valid {
                    let problem = Problem::new(
                        "admin.names",
                        format!("{text:?} is not a host name"),
                    );
                    self.report(problem.hint(
                        r#"names without scheme or port, e.g. names = ["admin.example"]; IP addresses and localhost are always accepted"#,
                    ));
                    return None;
                }
                Some(name)
            })
            .collect();
        let purge_token = raw.purge_token.unwrap_or(defaults::admin::PURGE_TOKEN);
        if purge_token && token.is_none() {
            let problem = Problem::new(
                "admin.purge_token",
                "PURGE needs the admin token, and none is configured".to_string(),
            );
            self.report(problem.hint(
                "set admin.token or admin.token_file (or CALMCACHE_ADMIN_TOKEN), \
                 or purge_token = false",
            ));
        }
        AdminConfig {
            listen,
            token,
            purge_allow,
            names,
            purge_token,
        }
    }

    /// `admin.token`, else the file `admin.token_file` (trimmed), else the
    /// environment variable `CALMCACHE_ADMIN_TOKEN`.
    fn admin_token(&mut self, token: Option<String>, file: Option<String>) -> Option<String> {
        let checked = |this: &mut Self, path: &str, text: String| -> Option<String> {
            let text = text.trim().to_owned();
            if text.is_empty() {
                this.report(
                    Problem::new(path, "the admin token is empty".to_string())
                        .hint("use a long random string, e.g. `openssl rand -hex 32`"),
                );
                return None;
            }
            if text.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
                this.report(
                    Problem::new(
                        path,
                        "the admin token has spaces or control characters".to_string(),
                    )
                    .hint("a bearer token is printable ASCII without spaces"),
                );
                return None;
            }
            Some(text)
        };
        match (token, file) {
            (Some(_), Some(_)) => {
                self.report(
                    Problem::new(
                        "admin.token",
                        "both token and token_file are set".to_string(),
                    )
                    .hint("keep one of them"),
                );
                None
            }
            (Some(token), None) => checked(self, "admin.token", token),
            (None, Some(path)) => match std::fs::read_to_string(&path) {
                Ok(text) => checked(self, "admin.token_file", text),
                Err(e) => {
                    self.report(Problem::new(
                        "admin.token_file",
                        format!("cannot read {path}: {e}"),
                    ));
                    None
                }
            },
            (None, None) => std::env::var("CALMCACHE_ADMIN_TOKEN")
                .ok()
                .and_then(|t| checked(self, "CALMCACHE_ADMIN_TOKEN", t)),
        }
    }

    /// `[access_log]`: `path` (an absolute file path or "stdout") and `format`.
    /// Whether the file can be opened is checked at start.
    fn access_log(&mut self, raw: RawAccessLog) -> AccessLogConfig {
        let target = match raw.path.as_deref().map(str::trim) {
            None => {
                self.missing(
                    "access_log.path",
                    r#"path = "/var/log/calmcache/access.log" or path = "stdout""#,
                );
                LogTarget::Stdout
            }
            Some("") => {
                let problem = Problem::new("access_log.path", "must not be empty");
                self.report(problem.hint(r#"e.g. "/var/log/calmcache/access.log" or "stdout""#));
                LogTarget::Stdout
            }
            Some("stdout") => LogTarget::Stdout,
            Some(p) if !std::path::Path::new(p).is_absolute() => {
                let problem =
                    Problem::new("access_log.path", format!("{p:?} is not an absolute path"));
                self.report(problem.hint(
                    r#"a relative path would depend on the directory calmcache starts in; or write "stdout""#,
                ));
                LogTarget::Stdout
            }
            Some(p) => LogTarget::File(std::path::PathBuf::from(p)),
        };
        let format = match raw.format.as_deref() {
            None => defaults::access_log::FORMAT,
            Some(text) => match LogFormat::ALL.iter().find(|f| f.as_str() == text) {
                Some(format) => *format,
                None => {
                    let problem =
                        Problem::new("access_log.format", format!("{text:?} is not a log format"));
                    self.report(problem.hint(r#""combined" or "json""#));
                    defaults::access_log::FORMAT
                }
            },
        };
        AccessLogConfig { target, format }
    }

    /// `[fleet]`: Redis nodes (`redis://` / `rediss://` URLs, one or a
    /// cluster's list), credentials, and the shared tier's limits.
    fn fleet(&mut self, raw: RawFleet) -> FleetConfig {
        let (nodes, cluster) = match raw.redis {
            None => {
                self.missing(
                    "fleet.redis",
                    r#"redis = "redis://127.0.0.1:6379" (or a list of cluster nodes)"#,
                );
                (Vec::new(), false)
            }
            Some(RawRedisNodes::One(url)) => (vec![url], false),
            Some(RawRedisNodes::Cluster(urls)) => {
                if urls.is_empty() {
                    self.report(
                        Problem::new("fleet.redis", "the list of cluster nodes is empty")
                            .hint(r#"e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"]"#),
                    );
                }
                (urls, true)
            }
        };
        for (i, url) in nodes.iter().enumerate() {
            let path = if cluster {
                format!("fleet.redis[{i}]")
            } else {
                "fleet.redis".to_string()
            };
            let shown = super::redact_url(url);
            let scheme_ok = url.starts_with("redis://") || url.starts_with("rediss://");
            if !scheme_ok {
                self.report(
                    Problem::new(
                        &path,
                        format!("{shown:?} is not a redis:// or rediss:// URL"),
                    )
                    .hint(r#"e.g. "redis://127.0.0.1:6379" (rediss:// for TLS)"#),
                );
            } else if let Err(e) = redis::IntoConnectionInfo::into_connection_info(url.as_str()) {
                self.report(Problem::new(&path, format!("{shown:?}: {e}")));
            }
        }
        let password = match (raw.password, raw.password_file) {
            (Some(_), Some(_)) => {
                self.report(
                    Problem::new("fleet.password", "both password and password_file are set")
                        .hint("keep one of them"),
                );
                None
            }
            (Some(p), None) => Some(p),
            (None, Some(path)) => match std::fs::read_to_string(&path) {
                Ok(text) => Some(text.trim().to_owned()),
                Err(e) => {
                    self.report(Problem::new(
                        "fleet.password_file",
                        format!("cannot read {path}: {e}"),
                    ));
                    None
                }
            },
            (None, None) => None,
        };
        let prefix = raw
            .prefix
            .unwrap_or_else(|| defaults::fleet::PREFIX.to_string());
        if prefix.contains(['{', '}']) || prefix.bytes().any(|b| b.is_ascii_control() || b == b' ')
        {
            self.report(
                Problem::new("fleet.prefix", format!("{prefix:?} has braces, spaces or control characters"))
                    .hint("braces would change the cluster hash slot of calmcache's keys; e.g. \"cc:\" or \"shop-cache:\""),
            );
        }
        let max_object_size = match raw.max_object_size.as_ref() {
            None => defaults::fleet::MAX_OBJECT_SIZE,
            Some(text) => self
                .positive_size("fleet.max_object_size", text)
                .unwrap_or(defaults::fleet::MAX_OBJECT_SIZE),
        };
        let timeout = self.timeout(
            "fleet.timeout",
            raw.timeout.as_ref(),
            defaults::fleet::TIMEOUT,
        );
        let mut lease = self.timeout("fleet.lease", raw.lease.as_ref(), defaults::fleet::LEASE);
        if lease < LEASE_MIN {
            self.report(
                Problem::new(
                    "fleet.lease",
                    format!("{lease:?} is shorter than {LEASE_MIN:?}"),
                )
                .hint("the lease is renewed every third of it while the fetch runs: keep it at least 300ms (the default is 3s)"),
            );
            lease = LEASE_MIN;
        }
        let (tls_ca, tls_client) =
            self.fleet_tls(&nodes, cluster, raw.tls_ca, raw.tls_cert, raw.tls_key);
        let secret = raw.secret_file.and_then(|path| self.fleet_secret(&path));
        FleetConfig {
            nodes,
            cluster,
            user: raw.user,
            password,
            prefix,
            max_object_size,
            timeout,
            lease,
            tls_ca,
            tls_client,
            secret,
        }
    }

    fn socket_addr(&mut self, path: &str, text: &str) -> Option<SocketAddr> {
        let addr = text.parse::<SocketAddr>().ok();
        if addr.is_none() {
            let problem = Problem::new(path, format!("{text:?} is not an IP address and port"));
            self.report(problem.hint(
                r#"write e.g. "127.0.0.1:8080" or "[::1]:8080"; host names are not allowed here"#,
            ));
        }
        addr
    }

    fn upstreams(&mut self, raw: BTreeMap<String, RawUpstream>) -> Vec<UpstreamConfig> {
        if raw.is_empty() {
            let problem = Problem::new("upstreams", "no upstreams defined");
            self.report(
                problem.hint(r#"add e.g. [upstreams.app] with servers = ["127.0.0.1:8081"]"#),
            );
        }
        raw.into_iter()
            .map(|(name, upstream)| self.upstream(name, upstream))
            .collect()
    }

    fn upstream(&mut self, name: String, mut raw: RawUpstream) -> UpstreamConfig {
        let path = format!("upstreams.{}", toml_key(&name));
        let at = |key: &str| format!("{path}.{key}");
        let health = self.health(&path, &raw);
        let (mut servers, written) = self.servers(&at("servers"), raw.servers.take(), &health);
        let tls = self.upstream_tls(&path, &at("servers"), &mut servers, &written, &raw);
        UpstreamConfig {
            servers,
            tls,
            keepalive: self.count(
                &at("keepalive"),
                raw.keepalive,
                defaults::upstream::KEEPALIVE,
                0,
            ),
            connect_timeout: self.duration(
                &at("connect_timeout"),
                raw.connect_timeout.as_ref(),
                defaults::upstream::CONNECT_TIMEOUT,
            ),
            read_timeout: self.duration(
                &at("read_timeout"),
                raw.read_timeout.as_ref(),
                defaults::upstream::READ_TIMEOUT,
            ),
            send_timeout: self.duration(
                &at("send_timeout"),
                raw.send_timeout.as_ref(),
                defaults::upstream::SEND_TIMEOUT,
            ),
            refresh_concurrency: self.count(
                &at("refresh_concurrency"),
                raw.refresh_concurrency,
                defaults::upstream::REFRESH_CONCURRENCY,
                1,
            ),
            max_fails: health.max_fails,
            fail_timeout: health.fail_timeout,
            fail_statuses: health.fail_statuses,
            health_check: health.health_check,
            name,
        }
    }

    /// The servers (address, weight and passive health settings:
    /// `health`'s unless its table form gives its own), and the scheme
    /// each one wrote (`https://`, `http://`, or none); their schemes are
    /// `http` until [`Checker::upstream_tls`] settles them.
    fn servers(
        &mut self,
        path: &str,
        raw: Option<Vec<RawUpstreamServer>>,
        health: &health::Health,
    ) -> (Vec<UpstreamServer>, Vec<Option<Scheme>>) {
        let example = r#"servers = ["127.0.0.1:8081"]"#;
        let Some(servers) = raw else {
            self.missing(path, example);
            return (Vec::new(), Vec::new());
        };
        if servers.is_empty() {
            self.report(Problem::new(path, "must not be empty").hint(format!("e.g. {example}")));
        }
        let mut out = (Vec::new(), Vec::new());
        for (i, server) in servers.into_iter().enumerate() {
            let at = format!("{path}[{i}]");
            let (address, passive, weight) = match server {
                RawUpstreamServer::Address(address) => (address, health.passive(), 1),
                RawUpstreamServer::Table(table) => {
                    let passive = self.server_health(&at, &table, health);
                    let weight = self.weight(&format!("{at}.weight"), table.weight);
                    let Some(address) = table.address else {
                        self.missing(&format!("{at}.address"), r#"address = "127.0.0.1:8081""#);
                        continue;
                    };
                    (address, passive, weight)
                }
            };
            let (address, written) = parse_server(&address);
            let address = match address {
                Ok(address) => address,
                Err(bad) => {
                    let at = if health.passive() == passive {
                        at
                    } else {
                        format!("{at}.address")
                    };
                    self.bad_value(at, bad);
                    // A placeholder: the problem makes the config an `Err`.
                    http::uri::Authority::from_static("invalid:1")
                }
            };
            out.0.push(UpstreamServer {
                address,
                scheme: Scheme::Http,
                weight,
                health: passive,
            });
            out.1.push(written);
        }
        out
    }

    fn zone(&mut self, name: String, raw: RawZone) -> ZoneConfig {
        let path = format!("zones.{}", toml_key(&name));
        let at = |key: &str| format!("{path}.{key}");
        let kind = self.zone_kind(&at("kind"), raw.kind.as_deref());
        let max_size = match &raw.max_size {
            None => {
                self.missing(&at("max_size"), r#"max_size = "256MiB""#);
                None
            }
            Some(text) => self.positive_size(&at("max_size"), text),
        };
        let max_object_size = match &raw.max_object_size {
            None => max_size.map(defaults::zone::max_object_size),
            Some(text) => self.positive_size(&at("max_object_size"), text),
        };
        if let (Some(max), Some(object)) = (max_size, max_object_size) {
            if object > max {
                let message = format!(
                    "{} is larger than max_size ({})",
                    units::format_size(object),
                    units::format_size(max)
                );
                let problem = Problem::new(at("max_object_size"), message);
                self.report(problem.hint("an object must fit in its zone"));
            }
        }
        let disk = kind == ZoneKind::Disk;
        let path_buf = match (&raw.path, disk) {
            (Some(p), true) if p.trim().is_empty() => {
                self.report(Problem::new(at("path"), "must not be empty"));
                None
            }
            (Some(p), true) if !std::path::Path::new(p).is_absolute() => {
                let problem = Problem::new(at("path"), format!("{p:?} is not an absolute path"));
                self.report(
                    problem
                        .hint("a relative path would depend on the directory calmcache starts in"),
                );
                None
            }
            (Some(p), true) => Some(std::path::PathBuf::from(p)),
            (None, true) => {
                self.missing(&at("path"), r#"path = "/var/cache/calmcache/ssd""#);
                None
            }
            (Some(_), false) => {
                self.only_disk(&at("path"));
                None
            }
            (None, false) => None,
        };
        if !disk && raw.inactive.is_some() {
            self.only_disk(&at("inactive"));
        }
        if !disk && raw.min_free.is_some() {
            self.only_disk(&at("min_free"));
        }
        let inactive = self.duration(
            &at("inactive"),
            raw.inactive.as_ref(),
            defaults::zone::INACTIVE,
        );
        if disk && inactive < Duration::from_secs(1) {
            let problem = Problem::new(at("inactive"), "must be at least 1s");
            self.report(problem.hint("the manager looks at last use to the second"));
        }
        let min_free = match &raw.min_free {
            Some(text) if disk => self
                .positive_size(&at("min_free"), text)
                .unwrap_or(defaults::zone::MIN_FREE),
            _ => defaults::zone::MIN_FREE,
        };
        let weight = self.count(&at("weight"), raw.weight, defaults::zone::WEIGHT, 1);
        ZoneConfig {
            name,
            kind,
            max_size: max_size.unwrap_or(0),
            max_object_size: max_object_size.unwrap_or(0),
            path: path_buf,
            inactive,
            min_free,
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
        }
    }

    /// Two disk zones in one directory would evict and load each other's files.
    fn shared_disk_paths(&mut self, zones: &[ZoneConfig]) {
        for (i, zone) in zones.iter().enumerate() {
            let Some(path) = &zone.path else { continue };
            let Some(other) = zones[..i].iter().find(|z| {
                z.path
                    .as_ref()
                    .is_some_and(|p| p.starts_with(path) || path.starts_with(p))
            }) else {
                continue;
            };
            let message = if other.path.as_ref() == Some(path) {
                format!(
                    "{} is also the path of zone {:?}",
                    path.display(),
                    other.name
                )
            } else {
                format!(
                    "{} and the path of zone {:?} are inside one another",
                    path.display(),
                    other.name
                )
            };
            let problem = Problem::new(format!("zones.{}.path", toml_key(&zone.name)), message);
            self.report(problem.hint("each disk zone needs a directory of its own"));
        }
    }

    fn only_disk(&mut self, path: &str) {
        let problem = Problem::new(path, "only disk zones take this key");
        self.report(problem.hint(r#"set kind = "disk", or remove the key"#));
    }

    fn zone_kind(&mut self, path: &str, raw: Option<&str>) -> ZoneKind {
        let kinds: Vec<&str> = ZoneKind::ALL.iter().map(|kind| kind.as_str()).collect();
        let Some(text) = raw else {
            self.missing(path, r#"kind = "memory""#);
            return ZoneKind::Memory;
        };
        if let Some(kind) = ZoneKind::ALL.iter().find(|kind| kind.as_str() == text) {
            return *kind;
        }
        let problem = Problem::new(path, format!("unknown zone kind {text:?}"));
        self.report(problem.hint(suggest::names_hint("allowed kinds", text, &kinds)));
        ZoneKind::Memory
    }

    /// A size above 0, or `None` after reporting why not.
    fn positive_size(&mut self, path: &str, text: &Text) -> Option<u64> {
        let size = match text {
            Text::Str(text) => units::parse_size(text),
            Text::Number(_) => Err(BadValue {
                message: format!("{text} is not a size"),
                hint: SIZE_HINT.to_owned(),
            }),
        };
        match size {
            Ok(0) => {
                self.report(Problem::new(path, "must be above 0").hint(SIZE_HINT));
                None
            }
            Ok(size) => Some(size),
            Err(bad) => {
                self.bad_value(path, bad);
                None
            }
        }
    }

    /// The duration at `path`, `default` when absent or (after reporting) invalid.
    fn duration(&mut self, path: &str, raw: Option<&Text>, default: Duration) -> Duration {
        let parsed = match raw {
            None => return default,
            Some(Text::Str(text)) => units::parse_duration(text),
            // A bare number is most likely seconds with the unit forgotten.
            Some(Text::Number(number)) => Err(BadValue {
                message: format!("{number} is not a duration"),
                hint: format!(r#"add a unit and quotes, e.g. "{number}s"; {DURATION_HINT}"#),
            }),
        };
        parsed.unwrap_or_else(|bad| {
            self.bad_value(path, bad);
            default
        })
    }

    /// A clock's limit at `path`: above 0 and at most [`MAX_TIMEOUT`] (the
    /// clocks add it to the time now), `default` when absent or invalid.
    fn timeout(&mut self, path: &str, raw: Option<&Text>, default: Duration) -> Duration {
        let duration = self.duration(path, raw, default);
        let message = if duration.is_zero() {
            "must be above 0".to_string()
        } else if duration > MAX_TIMEOUT {
            format!("{duration:?} is more than the largest timeout, 365d")
        } else {
            return duration;
        };
        self.report(Problem::new(path, message).hint(r#"write e.g. "60s""#));
        default
    }

    /// A count at `path` of at least `min`, `default` when absent or invalid.
    fn count(&mut self, path: &str, raw: Option<i64>, default: usize, min: usize) -> usize {
        let Some(value) = raw else {
            return default;
        };
        match usize::try_from(value) {
            Ok(count) if count >= min => count,
            _ => {
                self.report(Problem::new(
                    path,
                    format!("must be at least {min}, got {value}"),
                ));
                default
            }
        }
    }

    fn bad_value(&mut self, path: impl Into<String>, bad: BadValue) {
        self.report(Problem::new(path, bad.message).hint(bad.hint));
    }
}

/// A `servers` entry: its authority, parsed once, and the scheme it wrote
/// (also when the rest is wrong, so a scheme `tls` contradicts is reported too).
fn parse_server(text: &str) -> (Result<http::uri::Authority, BadValue>, Option<Scheme>) {
    let (address, written) = match upstream_tls::split_scheme(text) {
        Ok(split) => split,
        Err(bad) => return (Err(bad), None),
    };
    let authority = check_host_port(&address).and_then(|()| {
        address.parse().map_err(|e| BadValue {
            message: format!("{address:?} is not host:port"),
            hint: format!("{e}"),
        })
    });
    (authority, written)
}

/// Accepts `host:port` (`[v6]:port` for IPv6); the host is resolved later.
fn check_host_port(text: &str) -> Result<(), BadValue> {
    let bad = |hint: &str| {
        Err(BadValue {
            message: format!("{text:?} is not host:port"),
            hint: hint.to_owned(),
        })
    };
    if text.contains("://") {
        return bad(r#"write host:port, http://host:port or https://host:port"#);
    }
    if text.contains('/') {
        return bad("write host:port without a path; routes decide the path");
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return bad(r#"add the port, e.g. "127.0.0.1:8081""#);
    };
    if !matches!(port.parse::<u16>(), Ok(1..)) {
        return bad("the port must be 1 to 65535");
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match v6.parse::<Ipv6Addr>() {
            Ok(_) => Ok(()),
            Err(_) => bad(r#"write IPv6 addresses in brackets, e.g. "[::1]:8081""#),
        };
    }
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if host.contains(':') {
        return bad(r#"write IPv6 addresses in brackets, e.g. "[::1]:8081""#);
    }
    if host.is_empty() || !host.chars().all(host_char) {
        return bad(r#"the host must be a name or IP address, e.g. "origin.internal:8081""#);
    }
    Ok(())
}
