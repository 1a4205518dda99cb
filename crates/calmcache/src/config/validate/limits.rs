//! Limit checks: `[limits.<name>]` -> [`LimitConfig`], and each route's
//! `limits` -> indexes into [`Config::limits`](crate::config::Config::limits).
//! Like the rest of validation it reports and carries on.

use std::collections::BTreeMap;

use super::Checker;
use crate::config::defaults::limit;
use crate::config::error::{toml_key, Problem};
use crate::config::limits::{AppliesTo, Delay, LimitConfig, LimitKind, RateLimit};
use crate::config::raw::{RawDelay, RawLimit};
use crate::config::{suggest, RouteConfig};

/// The hint for a `rate` that does not parse.
const RATE_HINT: &str = r#"requests per second or per minute, e.g. "10r/s" or "30r/m""#;
/// The hint for a table that is neither kind.
const KIND_HINT: &str = r#"rate = "10r/s" (NGINX limit_req) or connections = 10 (limit_conn)"#;
/// The largest `burst`, `delay`, `connections`: far past any real use, low
/// enough that the arithmetic in milli-requests never overflows.
const MAX_COUNT: i64 = 1_000_000;
/// The largest `max_clients` (about 100 MB of table).
const MAX_CLIENTS: i64 = 1_000_000;

impl Checker {
    /// `[limits.*]`, sorted by name.
    pub(super) fn limits(&mut self, raw: BTreeMap<String, RawLimit>) -> Vec<LimitConfig> {
        raw.into_iter()
            .map(|(name, limit)| self.limit(name, limit))
            .collect()
    }

    fn limit(&mut self, name: String, raw: RawLimit) -> LimitConfig {
        let path = format!("limits.{}", toml_key(&name));
        let at = |key: &str| format!("{path}.{key}");
        let kind = match (&raw.rate, raw.connections) {
            (Some(rate), None) => LimitKind::Rate(self.rate_limit(&path, rate, &raw)),
            (None, Some(count)) => {
                self.not_for_connections(&path, &raw);
                let count = self.bounded(&at("connections"), count, 1, MAX_COUNT);
                LimitKind::Connections(count)
            }
            (Some(_), Some(_)) => {
                let problem = Problem::new(path.clone(), "sets both `rate` and `connections`");
                self.report(problem.hint("one limit is one kind: define two and list both"));
                LimitKind::Connections(1)
            }
            (None, None) => {
                let problem = Problem::new(path.clone(), "sets neither `rate` nor `connections`");
                self.report(problem.hint(KIND_HINT));
                LimitKind::Connections(1)
            }
        };
        LimitConfig {
            name,
            kind,
            status: self.limit_status(&at("status"), raw.status),
            applies_to: self.applies_to(&at("applies_to"), raw.applies_to.as_deref()),
            max_clients: raw.max_clients.map_or(limit::MAX_CLIENTS, |n| {
                self.bounded(&at("max_clients"), n, 1, MAX_CLIENTS) as usize
            }),
        }
    }

    fn rate_limit(&mut self, path: &str, rate: &str, raw: &RawLimit) -> RateLimit {
        let at = |key: &str| format!("{path}.{key}");
        let milli_per_second = parse_rate(rate).unwrap_or_else(|| {
            let problem = Problem::new(at("rate"), format!("{rate:?} is not a rate"));
            self.report(problem.hint(RATE_HINT));
            1000
        });
        let burst = raw.burst.map_or(limit::BURST, |n| {
            self.bounded(&at("burst"), n, 0, MAX_COUNT)
        });
        let delay = match &raw.delay {
            None => limit::DELAY,
            Some(RawDelay::Text(text)) if text == "nodelay" => Delay::NoDelay,
            Some(RawDelay::Count(n)) => Delay::After(self.bounded(&at("delay"), *n, 0, MAX_COUNT)),
            Some(RawDelay::Text(text)) => {
                let problem = Problem::new(at("delay"), format!("{text:?} is not a delay"));
                self.report(
                    problem.hint(r#""nodelay", or how many excess requests go at once, e.g. 8"#),
                );
                limit::DELAY
            }
        };
        RateLimit {
            milli_per_second,
            burst,
            delay,
        }
    }

    /// A `connections` limit has no `burst` nor `delay`: said, not ignored.
    fn not_for_connections(&mut self, path: &str, raw: &RawLimit) {
        let set = [
            ("burst", raw.burst.is_some()),
            ("delay", raw.delay.is_some()),
        ];
        for (key, _) in set.iter().filter(|(_, set)| *set) {
            let problem = Problem::new(format!("{path}.{key}"), "applies to `rate` limits only");
            self.report(problem.hint("a `connections` limit refuses at once; remove it"));
        }
    }

    fn limit_status(&mut self, path: &str, raw: Option<i64>) -> u16 {
        match raw {
            None => limit::STATUS,
            Some(status @ 400..=599) => status as u16,
            Some(other) => {
                let problem = Problem::new(path, format!("{other} is not a 4xx or 5xx status"));
                self.report(problem.hint("e.g. 429 (the default) or 503 (NGINX's)"));
                limit::STATUS
            }
        }
    }

    fn applies_to(&mut self, path: &str, raw: Option<&str>) -> AppliesTo {
        let Some(text) = raw else {
            return limit::APPLIES_TO;
        };
        match AppliesTo::ALL.iter().find(|a| a.as_str() == text) {
            Some(applies) => *applies,
            None => {
                let values: Vec<&str> = AppliesTo::ALL.iter().map(|a| a.as_str()).collect();
                let problem = Problem::new(path, format!("{text:?} is not a value"));
                self.report(problem.hint(suggest::names_hint("values", text, &values)));
                limit::APPLIES_TO
            }
        }
    }

    /// `value` within `min..=max`, or `min` after reporting it.
    fn bounded(&mut self, path: &str, value: i64, min: i64, max: i64) -> u32 {
        if (min..=max).contains(&value) {
            return value as u32;
        }
        let message = format!("must be within {min}..={max}, got {value}");
        self.report(Problem::new(path, message));
        min as u32
    }

    /// Each route's `limits` (`raw`, in route order) resolved by name.
    pub(super) fn route_limits(
        &mut self,
        routes: &mut [RouteConfig],
        raw: Vec<Vec<String>>,
        limits: &[LimitConfig],
    ) {
        let names: Vec<&str> = limits.iter().map(|l| l.name.as_str()).collect();
        for (index, (route, listed)) in routes.iter_mut().zip(raw).enumerate() {
            for (i, name) in listed.iter().enumerate() {
                let path = format!("routes[{index}].limits[{i}]");
                match names.iter().position(|n| n == name) {
                    Some(at) if route.limits.contains(&at) => {
                        self.report(Problem::new(path, format!("{name:?} is listed twice")));
                    }
                    Some(at) => route.limits.push(at),
                    None => {
                        let hint = suggest::names_hint("limits", name, &names);
                        let problem = Problem::new(path, format!("no limit named {name:?}"));
                        self.report(problem.hint(hint));
                    }
                }
            }
        }
    }
}

/// `"10r/s"` -> 10 000, `"30r/m"` -> 500 (requests per second times 1000,
/// NGINX's unit); `None` for anything else, or a rate of 0.
pub(crate) fn parse_rate(text: &str) -> Option<u64> {
    let (count, per) = text.split_once("r/")?;
    let count: u64 = count.parse().ok().filter(|n| (1..=1_000_000).contains(n))?;
    match per {
        "s" => Some(count * 1000),
        "m" => Some((count * 1000 / 60).max(1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::parse_rate;
    use crate::config::limits::{AppliesTo, Delay, LimitKind, RateLimit};
    use crate::config::{Config, ConfigError, Problem};

    fn config(limits: &str, route: &str) -> String {
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n\n[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n\n\
             [[routes]]\nupstream = \"app\"\n{route}\n\n{limits}\n"
        )
    }

    fn problems(text: &str) -> Vec<Problem> {
        match Config::from_toml(text, "test.toml") {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("expected an invalid config, got {other:?}"),
        }
    }

    /// Each problem as `path: message (hint)`.
    fn said(text: &str) -> Vec<String> {
        let each = problems(text).into_iter();
        each.map(|p| format!("{}: {} ({})", p.path, p.message, p.hint.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn limits_read_with_their_defaults_and_routes_name_them() {
        let text = config(
            "[limits.api]\nrate = \"10r/s\"\nburst = 20\ndelay = \"nodelay\"\n\
             applies_to = \"origin\"\n\n[limits.conns]\nconnections = 3\nstatus = 503\n\n\
             [limits.slow]\nrate = \"1r/m\"",
            "limits = [\"conns\", \"api\", \"slow\"]",
        );
        let config = Config::from_toml(&text, "t").unwrap();
        let api = &config.limits[0];
        assert_eq!(api.name, "api");
        let rate = RateLimit {
            milli_per_second: 10_000,
            burst: 20,
            delay: Delay::NoDelay,
        };
        assert_eq!(api.kind, LimitKind::Rate(rate));
        assert_eq!((api.status, api.applies_to), (429, AppliesTo::Origin));
        assert_eq!(api.max_clients, 100_000);
        let conns = &config.limits[1];
        assert_eq!(conns.kind, LimitKind::Connections(3));
        assert_eq!((conns.status, conns.applies_to), (503, AppliesTo::All));
        assert_eq!(config.routes[0].limits, vec![1, 0, 2]);
        let summary = config.summary();
        assert!(
            summary.ends_with(
                "route0 limited by conns+api+slow -> app, no cache); 3 limits (api: 10r/s \
                 burst 20 nodelay, origin only; conns: 3 connections, status 503; slow: 1r/m)"
            ),
            "{summary}"
        );
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
        let unused = config_with("[limits.spare]\nrate = \"1r/s\"", "");
        let warned = Config::from_toml(&unused, "t").unwrap().warnings();
        assert_eq!(warned.len(), 1);
        assert_eq!(warned[0].path, "limits.spare");
        assert!(warned[0].message.contains("no route lists this limit"));
        let plain = Config::from_toml(&config_without_limits(), "t").unwrap();
        assert!(plain.limits.is_empty() && plain.routes[0].limits.is_empty());
    }

    fn config_without_limits() -> String {
        config("", "")
    }

    /// [`config`], for tests where a local `config` hides it.
    fn config_with(limits: &str, route: &str) -> String {
        config(limits, route)
    }

    #[test]
    fn check_explains_every_bad_value_with_its_path() {
        let text = config(
            "[limits.api]\nrate = \"10/s\"\nburst = -1\ndelay = \"later\"\n\
             applies_to = \"hits\"\nstatus = 200\nmax_clients = 0\n\n\
             [limits.b]\nconnections = 0\nburst = 2\n\n[limits.c]\n\n\
             [limits.d]\nrate = \"1r/s\"\nconnections = 1",
            "limits = [\"apj\", \"b\", \"b\"]",
        );
        let said = said(&text);
        let expect = [
            r#"limits.api.rate: "10/s" is not a rate (requests per second or per minute, e.g. "10r/s" or "30r/m")"#,
            "limits.api.burst: must be within 0..=1000000, got -1 ()",
            r#"limits.api.delay: "later" is not a delay ("nodelay", or how many excess requests go at once, e.g. 8)"#,
            "limits.api.status: 200 is not a 4xx or 5xx status (e.g. 429 (the default) or 503 (NGINX's))",
            r#"limits.api.applies_to: "hits" is not a value (values: all, origin)"#,
            "limits.api.max_clients: must be within 1..=1000000, got 0 ()",
            "limits.b.burst: applies to `rate` limits only (a `connections` limit refuses at once; remove it)",
            "limits.b.connections: must be within 1..=1000000, got 0 ()",
            "limits.c: sets neither `rate` nor `connections`",
            "limits.d: sets both `rate` and `connections`",
            r#"routes[0].limits[0]: no limit named "apj" (did you mean "api"? limits: api, b, c, d)"#,
            r#"routes[0].limits[2]: "b" is listed twice ()"#,
        ];
        for want in expect {
            assert!(
                said.iter().any(|s| s.starts_with(want)),
                "{want}\nnot in {said:#?}"
            );
        }
        assert_eq!(said.len(), expect.len(), "{said:#?}");
    }

    #[test]
    fn rates_read_as_nginx_writes_them() {
        assert_eq!(parse_rate("10r/s"), Some(10_000));
        assert_eq!(parse_rate("30r/m"), Some(500));
        assert_eq!(parse_rate("1r/m"), Some(16));
        for bad in [
            "10/s", "10r/h", "0r/s", "r/s", "-1r/s", "10 r/s", "10r/S", "",
        ] {
            assert_eq!(parse_rate(bad), None, "{bad}");
        }
    }
}
