//! `[fleet]` -> [`FleetConfig`]: Redis nodes, credentials and the shared
//! tier's limits; its TLS files are `fleet_tls.rs`'s, its secret
//! `fleet_secret.rs`'s. Like the rest of validation it reports and carries on.

use super::{Checker, LEASE_MIN};
use crate::config::defaults;
use crate::config::error::Problem;
use crate::config::raw::{RawFleet, RawRedisNodes};
use crate::config::FleetConfig;

impl Checker {
    /// `[fleet]`: Redis nodes (`redis://` / `rediss://` URLs, one or a
    /// cluster's list), credentials, and the shared tier's limits.
    pub(super) fn fleet(&mut self, raw: RawFleet) -> FleetConfig {
        let (nodes, cluster) = self.redis_nodes(raw.redis);
        let password = self.fleet_password(raw.password, raw.password_file);
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
        let max_pieces_in_flight =
            self.max_pieces_in_flight(raw.max_pieces_in_flight.as_ref(), max_object_size);
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
            max_pieces_in_flight,
            stream_from_peers: raw
                .stream_from_peers
                .unwrap_or(defaults::fleet::STREAM_FROM_PEERS),
            timeout,
            lease,
            tls_ca,
            tls_client,
            secret,
        }
    }

    /// `fleet.max_pieces_in_flight`: at least `max_object_size`, or the
    /// largest objects could never be shared.
    fn max_pieces_in_flight(
        &mut self,
        raw: Option<&crate::config::raw::Text>,
        max_object_size: u64,
    ) -> u64 {
        let default = defaults::fleet::MAX_PIECES_IN_FLIGHT.max(max_object_size);
        let Some(text) = raw else {
            return default;
        };
        let Some(size) = self.positive_size("fleet.max_pieces_in_flight", text) else {
            return default;
        };
        if size < max_object_size {
            self.report(
                Problem::new(
                    "fleet.max_pieces_in_flight",
                    format!("{size} bytes is less than fleet.max_object_size ({max_object_size} bytes)"),
                )
                .hint("objects between the two could never be shared; e.g. four times max_object_size"),
            );
        }
        size
    }

    /// `fleet.redis`: the node URLs, each checked, and whether they are a
    /// cluster's (a list).
    fn redis_nodes(&mut self, raw: Option<RawRedisNodes>) -> (Vec<String>, bool) {
        let (nodes, cluster) = match raw {
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
            let shown = crate::config::redact_url(url);
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
        (nodes, cluster)
    }

    /// `fleet.password`, or the file `fleet.password_file` (trimmed); not both.
    fn fleet_password(&mut self, password: Option<String>, file: Option<String>) -> Option<String> {
        match (password, file) {
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
        }
    }
}
