//! `[server]` and `[[server.tls]]` -> [`ServerConfig`]: listen addresses
//! (each checked, none twice), limits and clocks, TLS certificates loaded.
//! Like the rest of validation it reports and carries on.

use std::net::SocketAddr;
use std::time::Duration;

use super::Checker;
use crate::config::defaults;
use crate::config::error::Problem;
use crate::config::raw::{RawServer, RawTls, Text};
use crate::config::ServerConfig;

impl Checker {
    pub(super) fn server(&mut self, raw: RawServer) -> ServerConfig {
        let listen = self.listen(raw.listen);
        let threads = self.threads(raw.threads);
        let max_connections = self.at_least_one(
            "server.max_connections",
            raw.max_connections,
            defaults::server::MAX_CONNECTIONS,
        );
        let backlog = self.at_least_one("server.backlog", raw.backlog, defaults::server::BACKLOG);
        let keepalive_timeout = self.above_zero(
            "server.keepalive_timeout",
            raw.keepalive_timeout.as_ref(),
            defaults::server::KEEPALIVE_TIMEOUT,
        );
        let keepalive_requests = match raw.keepalive_requests {
            None => defaults::server::KEEPALIVE_REQUESTS,
            Some(n) => self.count(
                "server.keepalive_requests",
                Some(n),
                defaults::server::KEEPALIVE_REQUESTS,
                1,
            ),
        };
        let max_header_size = self.max_header_size(raw.max_header_size);
        let header_read_timeout = self.above_zero(
            "server.header_read_timeout",
            raw.header_read_timeout.as_ref(),
            defaults::server::HEADER_READ_TIMEOUT,
        );
        let shutdown_timeout = self.duration(
            "server.shutdown_timeout",
            raw.shutdown_timeout.as_ref(),
            defaults::server::SHUTDOWN_TIMEOUT,
        );
        let tls_listen = self.tls_listen(raw.tls_listen, &listen);
        let proxy_protocol = self.proxy_protocol(
            (raw.proxy_protocol_listeners, raw.proxy_protocol_from),
            &listen,
            &tls_listen,
        );
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
            proxy_protocol,
        }
    }

    /// `server.listen`: required, each an address.
    fn listen(&mut self, raw: Option<Vec<String>>) -> Vec<SocketAddr> {
        match raw {
            None => {
                self.missing("server.listen", r#"listen = ["127.0.0.1:8080"]"#);
                Vec::new()
            }
            Some(listen) => self.listen_addrs(listen),
        }
    }

    /// `server.threads`: absent or 0, one per core.
    fn threads(&mut self, raw: Option<i64>) -> usize {
        match raw {
            None | Some(0) => defaults::server::threads(),
            Some(threads) => self.count("server.threads", Some(threads), 1, 1),
        }
    }

    /// A count at `path` of at least 1: `default` when absent, 1 when invalid.
    fn at_least_one(&mut self, path: &str, raw: Option<i64>, default: usize) -> usize {
        match raw {
            None => default,
            Some(n) => self.count(path, Some(n), 1, 1),
        }
    }

    /// A duration at `path` that must be above 0 (reported when it is not).
    fn above_zero(&mut self, path: &str, raw: Option<&Text>, default: Duration) -> Duration {
        let duration = self.duration(path, raw, default);
        if duration.is_zero() {
            self.report(Problem::new(path, "must be above 0".to_string()));
        }
        duration
    }

    /// `server.max_header_size`: at least the smallest head buffer, 8 KiB.
    fn max_header_size(&mut self, raw: Option<Text>) -> u64 {
        let size = raw
            .and_then(|t| self.positive_size("server.max_header_size", &t))
            .unwrap_or(defaults::server::MAX_HEADER_SIZE);
        if size < 8 * 1024 {
            let problem = Problem::new(
                "server.max_header_size",
                format!("{size} bytes is below the smallest head buffer, 8 KiB"),
            );
            self.report(problem.hint(r#"write e.g. "16KiB""#));
        }
        size
    }

    /// `server.tls_listen`: each address checked, none also in `listen`.
    fn tls_listen(&mut self, raw: Option<Vec<String>>, listen: &[SocketAddr]) -> Vec<SocketAddr> {
        let Some(addrs) = raw else {
            return Vec::new();
        };
        let tls_listen = self.addrs("server.tls_listen", addrs);
        for (i, addr) in tls_listen.iter().enumerate() {
            if addr.port() != 0 && listen.contains(addr) {
                let problem = Problem::new(
                    format!("server.tls_listen[{i}]"),
                    format!("{addr} is also in server.listen"),
                );
                self.report(problem.hint("TLS and plain HTTP need ports of their own"));
            }
        }
        tls_listen
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

    pub(super) fn socket_addr(&mut self, path: &str, text: &str) -> Option<SocketAddr> {
        let addr = text.parse::<SocketAddr>().ok();
        if addr.is_none() {
            let problem = Problem::new(path, format!("{text:?} is not an IP address and port"));
            self.report(problem.hint(
                r#"write e.g. "127.0.0.1:8080" or "[::1]:8080"; host names are not allowed here"#,
            ));
        }
        addr
    }
}
