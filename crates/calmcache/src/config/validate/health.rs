//! Upstream health checks: `max_fails`, `fail_timeout` and `health_check`
//! of `[upstreams.<name>]` -> the health fields of [`UpstreamConfig`].
//!
//! Owns their ranges (the defaults are `defaults.rs`'s). Like the rest of validation it
//! reports and carries on.

use std::time::Duration;

use super::Checker;
use crate::config::defaults::upstream;
use crate::config::error::Problem;
use crate::config::raw::{RawHealthCheck, RawServerTable, RawUpstream};
use crate::config::{HealthCheckConfig, PassiveHealth};

/// The passive and active health settings of one upstream.
pub(crate) struct Health {
    pub(super) max_fails: u32,
    pub(super) fail_timeout: Duration,
    pub(super) fail_statuses: Vec<u16>,
    pub(super) health_check: Option<HealthCheckConfig>,
}

impl Health {
    /// The upstream's `max_fails` and `fail_timeout`.
    pub(super) fn passive(&self) -> PassiveHealth {
        PassiveHealth {
            max_fails: self.max_fails,
            fail_timeout: self.fail_timeout,
        }
    }
}

impl Checker {
    /// A server's own `max_fails` / `fail_timeout` (table form of a
    /// `servers` entry at `path`), the upstream's where it gives none.
    pub(super) fn server_health(
        &mut self,
        path: &str,
        raw: &RawServerTable,
        upstream: &Health,
    ) -> PassiveHealth {
        let at = |key: &str| format!("{path}.{key}");
        let max_fails = self.small_count(&at("max_fails"), raw.max_fails, upstream.max_fails, 0);
        let fail_timeout = self.duration(
            &at("fail_timeout"),
            raw.fail_timeout.as_ref(),
            upstream.fail_timeout,
        );
        if fail_timeout.is_zero() {
            self.report(
                Problem::new(at("fail_timeout"), "must be more than 0")
                    .hint("to never mark this server down, set its max_fails = 0"),
            );
        }
        PassiveHealth {
            max_fails,
            fail_timeout,
        }
    }

    /// `max_fails`, `fail_timeout` and `health_check` at `path` (the upstream's).
    pub(super) fn health(&mut self, path: &str, raw: &RawUpstream) -> Health {
        let at = |key: &str| format!("{path}.{key}");
        let max_fails = self.small_count(&at("max_fails"), raw.max_fails, upstream::MAX_FAILS, 0);
        let fail_timeout = self.duration(
            &at("fail_timeout"),
            raw.fail_timeout.as_ref(),
            upstream::FAIL_TIMEOUT,
        );
        if fail_timeout.is_zero() {
            self.report(
                Problem::new(at("fail_timeout"), "must be more than 0")
                    .hint("to never mark servers down, set max_fails = 0"),
            );
        }
        let fail_statuses = self.fail_statuses(&at("fail_statuses"), raw.fail_statuses.as_deref());
        let health_check = raw
            .health_check
            .as_ref()
            .and_then(|c| self.health_check(&at("health_check"), c));
        Health {
            max_fails,
            fail_timeout,
            fail_statuses,
            health_check,
        }
    }

    /// `fail_statuses = [502, 503, 504]`: 429 and 500-599, each once.
    fn fail_statuses(&mut self, path: &str, raw: Option<&[i64]>) -> Vec<u16> {
        let mut out = Vec::new();
        for (i, &code) in raw.unwrap_or_default().iter().enumerate() {
            match u16::try_from(code) {
                Ok(status @ (429 | 500..=599)) if !out.contains(&status) => out.push(status),
                Ok(status) if out.contains(&status) => {
                    self.report(Problem::new(
                        format!("{path}[{i}]"),
                        format!("{code} is listed twice"),
                    ));
                }
                _ => {
                    let problem = Problem::new(
                        format!("{path}[{i}]"),
                        format!("{code} is not a failure status"),
                    );
                    self.report(
                        problem.hint("429 or 500 to 599, e.g. fail_statuses = [502, 503, 504]"),
                    );
                }
            }
        }
        out
    }

    fn health_check(&mut self, path: &str, raw: &RawHealthCheck) -> Option<HealthCheckConfig> {
        let at = |key: &str| format!("{path}.{key}");
        let example = r#"health_check = { path = "/healthz", interval = "5s" }"#;
        let check_path = match raw.path.as_deref() {
            None => {
                self.missing(&at("path"), example);
                None
            }
            Some(p) if !p.starts_with('/') || p.contains(char::is_whitespace) => {
                let problem = Problem::new(at("path"), format!("{p:?} is not an origin-form path"));
                self.report(problem.hint(r#"start it with "/", e.g. "/healthz""#));
                None
            }
            Some(p) if http::uri::PathAndQuery::try_from(p).is_err() => {
                let problem = Problem::new(at("path"), format!("{p:?} is not a valid path"));
                self.report(problem.hint("escape characters a URI may not hold, e.g. %20"));
                None
            }
            Some(p) => Some(p.to_owned()),
        };
        let interval = self.duration(
            &at("interval"),
            raw.interval.as_ref(),
            upstream::CHECK_INTERVAL,
        );
        let timeout = self.duration(
            &at("timeout"),
            raw.timeout.as_ref(),
            upstream::CHECK_TIMEOUT,
        );
        for (key, value) in [("interval", interval), ("timeout", timeout)] {
            if value.is_zero() {
                self.report(Problem::new(at(key), "must be more than 0").hint(r#"e.g. "5s""#));
            }
        }
        let fails = self.small_count(&at("fails"), raw.fails, upstream::CHECK_FAILS, 1);
        let passes = self.small_count(&at("passes"), raw.passes, upstream::CHECK_PASSES, 1);
        Some(HealthCheckConfig {
            path: check_path?,
            interval,
            timeout,
            fails,
            passes,
        })
    }

    /// A count at `path` from `min` to `u32::MAX`, `default` when absent or invalid.
    fn small_count(&mut self, path: &str, raw: Option<i64>, default: u32, min: u32) -> u32 {
        let Some(value) = raw else {
            return default;
        };
        match u32::try_from(value) {
            Ok(count) if count >= min => count,
            _ => {
                let message = format!("must be from {min} to {}, got {value}", u32::MAX);
                self.report(Problem::new(path, message));
                default
            }
        }
    }
}
