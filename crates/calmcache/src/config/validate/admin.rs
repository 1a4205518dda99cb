//! `[admin]` -> [`AdminConfig`]: the listener (never a proxy port), the
//! token (inline, file or environment), who may PURGE, the names it
//! answers to. Like the rest of validation it reports and carries on.

use std::net::SocketAddr;

use super::Checker;
use crate::config::defaults;
use crate::config::error::Problem;
use crate::config::raw::RawAdmin;
use crate::config::{AdminConfig, Network, ServerConfig};

impl Checker {
    pub(super) fn admin(&mut self, raw: RawAdmin, server: &ServerConfig) -> AdminConfig {
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
        let purge_allow = self.purge_allow(raw.purge_allow);
        let names = self.admin_names(raw.names);
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

    /// `admin.purge_allow`: IP networks, loopback unless set.
    fn purge_allow(&mut self, raw: Option<Vec<String>>) -> Vec<Network> {
        match raw {
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
        }
    }

    /// `admin.names`: host names, lower-cased, without a trailing dot.
    fn admin_names(&mut self, raw: Option<Vec<String>>) -> Vec<String> {
        raw
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
            .collect()
    }
}
