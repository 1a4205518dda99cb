//! Validation: [`RawConfig`] -> [`Config`], collecting every problem.
//!
//! Owns the ranges and the cross references (routes -> upstreams and
//! zones); the defaults are `defaults.rs`'s. It must not stop at the first
//! problem: each check records a [`Problem`] with its TOML path and carries
//! on with a placeholder value, so one run tells the user everything to
//! fix. The placeholders never escape: any problem turns the whole result
//! into `Err`.
//!
//! This file: the [`Checker`] and its value readers (durations, sizes,
//! counts) and `[access_log]`. One file per section in `validate/`:
//! `server.rs`, `admin.rs`, `upstreams.rs` (with `health.rs` and
//! `upstream_tls.rs`), `zones.rs`, `routes.rs` (with `answering.rs`: what
//! a route does; `freshness.rs`: its freshness and refresh keys),
//! `fleet.rs` (with `fleet_tls.rs` and `fleet_secret.rs`).

mod admin;
mod answering;
mod balance;
mod compress_passed;
mod early_hints;
mod fleet;
mod fleet_secret;
mod fleet_tls;
mod freshness;
mod header_rules;
mod health;
mod limits;
mod proxy_protocol;
mod routes;
mod server;
mod upstream_tls;
mod upstreams;
mod zones;

use std::time::Duration;

use super::defaults;
use super::error::Problem;
use super::raw::{RawAccessLog, RawConfig, Text};
use super::units::{self, BadValue, DURATION_HINT, SIZE_HINT};
use super::{Config, ZoneConfig};
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
    let proxied = raw.routes.is_empty() || raw.routes.iter().any(|r| !r.answers_itself());
    let upstreams = check.upstreams(raw.upstreams, proxied);
    let zones: Vec<ZoneConfig> = raw
        .zones
        .into_iter()
        .map(|(name, zone)| check.zone(name, zone))
        .collect();
    check.shared_disk_paths(&zones);
    let limits = check.limits(raw.limits);
    let route_limits: Vec<Vec<String>> = raw.routes.iter().map(|r| r.limits.clone()).collect();
    let mut routes = check.routes(raw.routes, &upstreams, &zones);
    check.route_limits(&mut routes, route_limits, &limits);
    check.route_listeners_exist(&routes, &server);
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
        limits,
        secrets: super::InlineSecrets::default(),
    })
}

/// Collects problems while the checks run.
#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    /// A list of names or values (`compress`, `compress_passed_types`):
    /// each parsed by `parse`, in config order; one listed twice is
    /// reported, one `parse` refuses is reported as `refused` says.
    fn distinct<T: PartialEq>(
        &mut self,
        path: &str,
        raw: &[String],
        parse: impl Fn(&str) -> Option<T>,
        refused: impl Fn(String, &str) -> Problem,
    ) -> Vec<T> {
        let mut out: Vec<T> = Vec::with_capacity(raw.len());
        for (i, text) in raw.iter().enumerate() {
            let at = format!("{path}[{i}]");
            match parse(text) {
                Some(item) if out.contains(&item) => {
                    self.report(Problem::new(at, format!("{text:?} is listed twice")));
                }
                Some(item) => out.push(item),
                None => self.report(refused(at, text)),
            }
        }
        out
    }

    fn report(&mut self, problem: Problem) {
        self.problems.push(problem);
    }

    fn missing(&mut self, path: &str, example: &str) {
        self.report(Problem::new(path, "missing required key").hint(format!("e.g. {example}")));
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
