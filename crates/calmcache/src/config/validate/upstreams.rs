//! `[upstreams.<name>]` -> [`UpstreamConfig`]: each server parsed once into
//! an [`UpstreamServer`] (address, scheme, weight, passive health), the
//! pool's limits; health keys are `health.rs`'s, TLS keys
//! `upstream_tls.rs`'s. Like the rest of validation it reports and carries on.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::time::Duration;

use super::{health, upstream_tls, Checker};
use crate::config::defaults;
use crate::config::error::{toml_key, Problem};
use crate::config::raw::{RawUpstream, RawUpstreamServer};
use crate::config::units::BadValue;
use crate::config::{Scheme, UpstreamConfig, UpstreamServer};

impl Checker {
    /// The upstreams; none is a problem when some route proxies
    /// (`proxied`), not in a config whose routes all answer themselves.
    pub(super) fn upstreams(
        &mut self,
        raw: BTreeMap<String, RawUpstream>,
        proxied: bool,
    ) -> Vec<UpstreamConfig> {
        if raw.is_empty() && proxied {
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
        self.unix_without_tls(&at("tls"), &mut servers);
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
            max_inflight: self.count(
                &at("max_inflight"),
                raw.max_inflight,
                defaults::upstream::MAX_INFLIGHT,
                0,
            ),
            queue_timeout: self.queue_timeout(&at("queue_timeout"), &raw),
            fleet_max_inflight: self.fleet_max_inflight(&at("fleet_max_inflight"), &raw),
            max_fails: health.max_fails,
            fail_timeout: health.fail_timeout,
            fail_statuses: health.fail_statuses,
            health_check: health.health_check,
            balance: self.balance(&path, &raw),
            name,
        }
    }

    /// `fleet_max_inflight`: a count, only with `max_inflight` (the local
    /// budget bounds how many of this node's requests ask Redis at once;
    /// without it every queued request would poll Redis).
    fn fleet_max_inflight(&mut self, path: &str, raw: &RawUpstream) -> usize {
        let fleet = self.count(
            path,
            raw.fleet_max_inflight,
            defaults::upstream::FLEET_MAX_INFLIGHT,
            0,
        );
        if fleet > 0 && raw.max_inflight.is_none_or(|n| n <= 0) {
            let problem = Problem::new(path, "needs max_inflight, this node's own budget");
            self.report(problem.hint(
                "set max_inflight too (e.g. the fleet's budget divided by the nodes): it bounds \
                 how many of this node's requests wait on Redis for a fleet-wide slot",
            ));
            return defaults::upstream::FLEET_MAX_INFLIGHT;
        }
        fleet
    }

    /// `queue_timeout`: a duration, above 0 when `max_inflight` bounds the
    /// upstream (a queue no request may wait in would turn every busy
    /// moment into 503s).
    fn queue_timeout(&mut self, path: &str, raw: &RawUpstream) -> Duration {
        let timeout = self.duration(
            path,
            raw.queue_timeout.as_ref(),
            defaults::upstream::QUEUE_TIMEOUT,
        );
        if timeout > super::MAX_TIMEOUT {
            let problem = Problem::new(path, format!("{timeout:?} is more than 365d"));
            self.report(problem.hint(r#"write e.g. "5s""#));
            return defaults::upstream::QUEUE_TIMEOUT;
        }
        if timeout.is_zero() && raw.max_inflight.is_some_and(|n| n > 0) {
            let problem = Problem::new(path, "must be above 0 when max_inflight is set");
            self.report(problem.hint(
                r#"write e.g. "5s": how long a request with no stored copy waits for an origin slot"#,
            ));
            return defaults::upstream::QUEUE_TIMEOUT;
        }
        timeout
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
            if let Some(unix) = crate::config::unix_socket::parse(&address) {
                let at = if health.passive() == passive {
                    at
                } else {
                    format!("{at}.address")
                };
                out.0.push(self.unix_server(at, unix, weight, passive));
                out.1.push(None);
                continue;
            }
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
                unix: None,
            });
            out.1.push(written);
        }
        out
    }
}

impl Checker {
    /// A `unix:/path` server (issue 28): plain HTTP over the socket, keyed
    /// in the pool by a name of its own.
    fn unix_server(
        &mut self,
        at: String,
        parsed: Result<std::path::PathBuf, BadValue>,
        weight: u32,
        health: crate::config::PassiveHealth,
    ) -> UpstreamServer {
        let path = parsed.unwrap_or_else(|bad| {
            self.bad_value(at, bad);
            // A placeholder: the problem makes the config an `Err`.
            std::path::PathBuf::from("/invalid")
        });
        UpstreamServer {
            address: crate::config::unix_socket::pool_authority(&path),
            scheme: Scheme::Http,
            weight,
            health,
            unix: Some(path),
        }
    }

    /// `tls = true` with a unix server: refused (the socket is on this
    /// machine, readable by whom its file mode allows; TLS over it would
    /// protect nothing and no origin expects it).
    fn unix_without_tls(&mut self, at_tls: &str, servers: &mut [UpstreamServer]) {
        let mut refused = false;
        for server in servers.iter_mut().filter(|s| s.unix.is_some()) {
            if server.scheme.is_tls() && !refused {
                let problem = Problem::new(
                    at_tls,
                    format!(
                        "true, but {} is a unix socket: calmcache speaks plain HTTP over \
                         unix sockets (the socket never leaves this machine; its file mode \
                         says who may connect)",
                        server.label()
                    ),
                );
                self.report(
                    problem.hint(
                        "remove tls = true, or put the unix server in an upstream of its own",
                    ),
                );
                refused = true;
            }
            server.scheme = Scheme::Http;
        }
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
