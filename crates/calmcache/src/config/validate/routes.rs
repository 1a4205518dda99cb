//! Route checks: `[[routes]]` -> [`RouteConfig`].
//!
//! Owns the route defaults and the route -> upstream / zone references,
//! which become indexes into [`Config::upstreams`](crate::config::Config::upstreams) and
//! `zones`. Like the rest of validation it reports and carries on.

use std::collections::HashMap;

use regex::Regex;

use super::Checker;
use crate::config::answering::RouteKind;
use crate::config::conditions::Condition;
use crate::config::defaults::route;
use crate::config::error::Problem;
use crate::config::hosts::HostPattern;
use crate::config::key_template::KeyTemplate;
use crate::config::raw::{RawRoute, Text};
use crate::config::ZoneKind;
use crate::config::{
    suggest, BodyKey, ClientCacheControl, RouteAnswers, RouteConfig, RouteMatching, RouteRequests,
    RouteStorage, RouteWarm, UpstreamConfig, ZoneConfig,
};
use crate::http::compress::Coding;

/// The hint for a `key` template that does not compile.
const KEY_HINT: &str = "variables: $scheme, $host, $uri, $args, $is_args, $request_uri, \
                        $method, $arg_NAME, $http_NAME, $cookie_NAME";
/// The hint for a `bypass` / `no_store` entry that does not parse.
const CONDITION_HINT: &str =
    r#"e.g. "cookie:wordpress_logged_in" (a name prefix), "header:Authorization", "arg:preview""#;

/// The names routes may refer to, in index order.
struct Names<'a> {
    upstreams: Vec<&'a str>,
    zones: Vec<&'a str>,
    kinds: Vec<ZoneKind>,
}

impl Checker {
    pub(super) fn routes(
        &mut self,
        raw: Vec<RawRoute>,
        upstreams: &[UpstreamConfig],
        zones: &[ZoneConfig],
    ) -> Vec<RouteConfig> {
        if raw.is_empty() {
            let problem = Problem::new("routes", "no routes defined; every request would fail");
            self.report(problem.hint(r#"add a [[routes]] section with upstream = "<name>""#));
        }
        let names = Names {
            upstreams: upstreams.iter().map(|u| u.name.as_str()).collect(),
            zones: zones.iter().map(|z| z.name.as_str()).collect(),
            kinds: zones.iter().map(|z| z.kind).collect(),
        };
        let routes: Vec<RouteConfig> = raw
            .into_iter()
            .enumerate()
            .map(|(index, route)| self.route(index, route, &names))
            .collect();
        self.unique_names(&routes);
        self.error_page_names(&routes);
        routes
    }

    /// One route, each part of it built by its own function below; the
    /// parts are checked in the order of the example file's keys as far as
    /// they allow, so problems come out in a predictable order.
    fn route(&mut self, index: usize, mut raw: RawRoute, names: &Names<'_>) -> RouteConfig {
        let path = format!("routes[{index}]");
        let header_keys = super::header_rules::RawHeaderKeys {
            request: raw.request_headers.take(),
            response: raw.response_headers.take(),
            expires: raw.expires.take(),
        };
        let name = self.route_name(&format!("{path}.name"), index, raw.name.clone());
        let matching = self.route_matching(&path, &raw);
        let kind = self.route_kind(&path, &raw, names);
        let storage = self.route_storage(&path, &raw, names);
        let warm = self.route_warm(&path, &raw, names, &matching.hosts);
        let cached = match storage.zone {
            Some(_) => crate::config::header_rules::Cached::Yes,
            None => crate::config::header_rules::Cached::No,
        };
        let headers = self.header_rules(&path, header_keys, &storage.key, cached);
        RouteConfig {
            name,
            kind,
            internal: raw.internal.unwrap_or(route::INTERNAL),
            error_pages: self.error_pages(&path, raw.error_pages.as_ref()),
            intercept_errors: raw.intercept_errors.unwrap_or(route::INTERCEPT_ERRORS),
            matching,
            storage,
            freshness: self.route_freshness(&path, &raw),
            refresh: self.route_refresh(&path, &raw),
            requests: self.route_requests(&path, &raw),
            answers: self.route_answers(&path, &raw),
            warm,
            headers,
            // Resolved by route_limits (validate/limits.rs) once every
            // route is read.
            limits: Vec::new(),
        }
    }

    /// `match`, `path`, `hosts`, `listeners`.
    fn route_matching(&mut self, path: &str, raw: &RawRoute) -> RouteMatching {
        let at = |key: &str| format!("{path}.{key}");
        RouteMatching {
            matcher: raw
                .pattern
                .as_ref()
                .and_then(|pattern| self.regex(&at("match"), pattern)),
            path_matcher: raw
                .path
                .as_ref()
                .and_then(|pattern| self.regex(&at("path"), pattern)),
            hosts: self.hosts(&at("hosts"), raw.hosts.as_deref()),
            listeners: self.listener_names(&at("listeners"), raw.listeners.as_deref()),
        }
    }

    /// What the route does: `return`, `root`, or (neither) proxy to its
    /// `upstream`.
    fn route_kind(&mut self, path: &str, raw: &RawRoute, names: &Names<'_>) -> RouteKind {
        if let Some(kind) = self.answering(path, raw) {
            return kind;
        }
        let at = format!("{path}.upstream");
        let upstream = self.route_upstream(&at, raw.upstream.as_deref(), names);
        // 0 is a placeholder: a missing upstream was reported.
        RouteKind::Proxy {
            upstream: upstream.unwrap_or(0),
        }
    }

    /// `zone`/`zones`, `memory`, `key`, `bypass`, `no_store`.
    fn route_storage(&mut self, path: &str, raw: &RawRoute, names: &Names<'_>) -> RouteStorage {
        let at = |key: &str| format!("{path}.{key}");
        let zones = self.route_zones(&at, raw, names);
        RouteStorage {
            zone: zones.first().copied(),
            memory: self.route_memory(&at, raw, names, &zones),
            zones,
            key: self.key(&at("key"), raw.key.as_deref()),
            bypass: self.conditions(&at("bypass"), &raw.bypass),
            no_store: self.conditions(&at("no_store"), &raw.no_store),
        }
    }

    /// `warm` and `warm_host` (checked against the route's `hosts`).
    fn route_warm(
        &mut self,
        path: &str,
        raw: &RawRoute,
        names: &Names<'_>,
        hosts: &[HostPattern],
    ) -> RouteWarm {
        let at = format!("{path}.warm_host");
        RouteWarm {
            host: self.warm_host(&at, raw.warm_host.clone(), hosts),
            paths: self.warm(path, raw, names),
        }
    }

    /// `client_cache_control`, `convert_head`, `cache_post`, `body_key`,
    /// `max_body_key`, `websocket`, `merge_slashes`,
    /// `underscores_in_headers`, `trusted_proxies`.
    fn route_requests(&mut self, path: &str, raw: &RawRoute) -> RouteRequests {
        let at = |key: &str| format!("{path}.{key}");
        RouteRequests {
            client_cache_control: self.client_cache_control(
                &at("client_cache_control"),
                raw.client_cache_control.as_deref(),
            ),
            convert_head: raw.convert_head.unwrap_or(route::CONVERT_HEAD),
            cache_post: raw.cache_post.unwrap_or(route::CACHE_POST),
            body_key: self.body_key(&at("body_key"), raw.body_key.as_deref()),
            max_body_key: self.max_body_key(&at("max_body_key"), raw.max_body_key.as_ref()),
            websocket: raw.websocket.unwrap_or(route::WEBSOCKET),
            merge_slashes: raw.merge_slashes.unwrap_or(route::MERGE_SLASHES),
            underscores_in_headers: raw
                .underscores_in_headers
                .unwrap_or(route::UNDERSCORES_IN_HEADERS),
            trusted_proxies: self.networks(&at("trusted_proxies"), &raw.trusted_proxies),
        }
    }

    /// `compress`, `forward_targeted_cache_control`, `cache_status_key`,
    /// `expose_cache_tags`, `early_hints*`, `compress_passed*`.
    fn route_answers(&mut self, path: &str, raw: &RawRoute) -> RouteAnswers {
        RouteAnswers {
            compress: self.compress(&format!("{path}.compress"), &raw.compress),
            forward_targeted_cache_control: raw
                .forward_targeted_cache_control
                .unwrap_or(route::FORWARD_TARGETED_CACHE_CONTROL),
            cache_status_key: raw.cache_status_key.unwrap_or(route::CACHE_STATUS_KEY),
            expose_cache_tags: raw.expose_cache_tags.unwrap_or(route::EXPOSE_CACHE_TAGS),
            early_hints: self.early_hints(
                path,
                raw.early_hints,
                &raw.early_hints_links,
                &raw.early_hints_origins,
            ),
            compress_passed: self.compress_passed(path, raw),
        }
    }

    /// `trusted_proxies`: CIDR networks (`10.0.0.0/8`, `::1/128`) or single
    /// addresses (taken as /32 or /128).
    pub(super) fn networks(&mut self, path: &str, raw: &[String]) -> Vec<ipnet::IpNet> {
        let mut out = Vec::with_capacity(raw.len());
        for (i, text) in raw.iter().enumerate() {
            let parsed = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(net) => out.push(net.trunc()),
                Err(_) => self.report(
                    Problem::new(
                        format!("{path}[{i}]"),
                        format!("{text:?} is not an address or a CIDR network"),
                    )
                    .hint(r#"e.g. "10.0.0.0/8", "192.168.1.10", "::1/128""#),
                ),
            }
        }
        out
    }

    fn route_upstream(
        &mut self,
        path: &str,
        raw: Option<&str>,
        names: &Names<'_>,
    ) -> Option<usize> {
        if let Some(name) = raw {
            return self.resolve(path.to_owned(), "upstream", name, &names.upstreams);
        }
        let hint = match names.upstreams.first() {
            Some(first) => format!(
                "e.g. upstream = {first:?}; upstreams: {}",
                names.upstreams.join(", ")
            ),
            None => "define an [upstreams.<name>] and name it here".to_owned(),
        };
        self.report(Problem::new(path, "missing required key").hint(hint));
        None
    }

    fn route_name(&mut self, path: &str, index: usize, raw: Option<String>) -> String {
        match raw {
            Some(name) if name.trim().is_empty() => {
                let problem = Problem::new(path, "must not be empty");
                self.report(problem.hint("remove it to get the default name"));
                name
            }
            Some(name) => name,
            None => route::name(index),
        }
    }

    /// Route names label metrics, so two routes must not share one.
    fn unique_names(&mut self, routes: &[RouteConfig]) {
        let mut first_use: HashMap<&str, usize> = HashMap::new();
        for (index, route) in routes.iter().enumerate() {
            let Some(first) = first_use.get(route.name.as_str()) else {
                first_use.insert(&route.name, index);
                continue;
            };
            let message = format!(
                "route name {:?} is already used by routes[{first}]",
                route.name
            );
            let problem = Problem::new(format!("routes[{index}].name"), message);
            self.report(problem.hint("route names label metrics and must be unique"));
        }
    }

    /// The index of `name` in `names`, or `None` after reporting it.
    /// `memory = "ram"`: a memory zone in front of disk zones.
    fn route_memory(
        &mut self,
        at: &dyn Fn(&str) -> String,
        raw: &RawRoute,
        names: &Names<'_>,
        zones: &[usize],
    ) -> Option<usize> {
        let name = raw.memory.as_ref()?;
        let index = self.resolve(at("memory"), "zone", name, &names.zones)?;
        if names.kinds.get(index) != Some(&ZoneKind::Memory) {
            let problem = Problem::new(at("memory"), format!("zone {name:?} is not a memory zone"));
            self.report(
                problem.hint("memory names a kind = \"memory\" zone to keep hot objects in"),
            );
            return None;
        }
        if zones.is_empty()
            || zones
                .iter()
                .any(|z| names.kinds.get(*z) != Some(&ZoneKind::Disk))
        {
            let problem = Problem::new(
                at("memory"),
                "a memory front needs the route's zones to be disk zones",
            );
            self.report(problem.hint("set zone or zones to disk zones, or remove memory"));
            return None;
        }
        Some(index)
    }

    /// `zone = "x"` or `zones = ["x", "y"]` (not both), each name resolved once.
    fn route_zones(
        &mut self,
        at: &dyn Fn(&str) -> String,
        raw: &RawRoute,
        names: &Names<'_>,
    ) -> Vec<usize> {
        if let (Some(_), false) = (&raw.zone, raw.zones.is_empty()) {
            let problem = Problem::new(at("zones"), "a route takes zone or zones, not both");
            self.report(problem.hint("zones = [\"a\", \"b\"] spreads keys over several zones"));
        }
        if let Some(name) = &raw.zone {
            return self
                .resolve(at("zone"), "zone", name, &names.zones)
                .into_iter()
                .collect();
        }
        let mut out: Vec<usize> = Vec::new();
        for (i, name) in raw.zones.iter().enumerate() {
            let path = format!("{}[{i}]", at("zones"));
            match self.resolve(path.clone(), "zone", name, &names.zones) {
                Some(index) if out.contains(&index) => {
                    self.report(Problem::new(path, format!("{name:?} is listed twice")));
                }
                Some(index) => out.push(index),
                None => {}
            }
        }
        out
    }

    fn resolve(&mut self, path: String, what: &str, name: &str, names: &[&str]) -> Option<usize> {
        let found = names.iter().position(|candidate| *candidate == name);
        if found.is_none() {
            let hint = suggest::names_hint(&format!("{what}s"), name, names);
            self.report(Problem::new(path, format!("no {what} named {name:?}")).hint(hint));
        }
        found
    }

    fn regex(&mut self, path: &str, pattern: &str) -> Option<Regex> {
        match Regex::new(pattern) {
            Ok(regex) => Some(regex),
            Err(error) => {
                let message = format!("invalid regex {pattern:?}: {}", regex_reason(&error));
                self.report(Problem::new(path, message));
                None
            }
        }
    }

    fn key(&mut self, path: &str, raw: Option<&str>) -> KeyTemplate {
        let Some(text) = raw else {
            return KeyTemplate::default();
        };
        KeyTemplate::parse(text).unwrap_or_else(|message| {
            let hint = if text.is_empty() {
                format!("remove it for the default {:?}", KeyTemplate::DEFAULT)
            } else {
                KEY_HINT.to_owned()
            };
            self.report(Problem::new(path, message).hint(hint));
            KeyTemplate::default()
        })
    }

    /// `bypass` / `no_store`: each entry parsed, none listed twice.
    fn conditions(&mut self, path: &str, raw: &[String]) -> Vec<Condition> {
        let mut conditions: Vec<Condition> = Vec::new();
        for (i, text) in raw.iter().enumerate() {
            let at = format!("{path}[{i}]");
            match Condition::parse(text) {
                Ok(condition) if conditions.contains(&condition) => {
                    self.report(Problem::new(at, format!("{text:?} is listed twice")));
                }
                Ok(condition) => conditions.push(condition),
                Err(message) => self.report(Problem::new(at, message).hint(CONDITION_HINT)),
            }
        }
        conditions
    }

    fn client_cache_control(&mut self, path: &str, raw: Option<&str>) -> ClientCacheControl {
        let Some(text) = raw else {
            return route::CLIENT_CACHE_CONTROL;
        };
        let all = ClientCacheControl::ALL;
        if let Some(value) = all.iter().find(|value| value.as_str() == text) {
            return *value;
        }
        let values: Vec<&str> = all.iter().map(|value| value.as_str()).collect();
        let problem = Problem::new(path, format!("unknown client_cache_control {text:?}"));
        self.report(problem.hint(suggest::names_hint("values", text, &values)));
        route::CLIENT_CACHE_CONTROL
    }

    /// `body_key`: `bytes` or `json`.
    fn body_key(&mut self, path: &str, raw: Option<&str>) -> BodyKey {
        let Some(text) = raw else {
            return route::BODY_KEY;
        };
        if let Some(value) = BodyKey::ALL.iter().find(|value| value.as_str() == text) {
            return *value;
        }
        let values: Vec<&str> = BodyKey::ALL.iter().map(|value| value.as_str()).collect();
        let problem = Problem::new(path, format!("unknown body_key {text:?}"));
        self.report(problem.hint(suggest::names_hint("values", text, &values)));
        route::BODY_KEY
    }

    /// `max_body_key`: a size above 0, at most 16 MiB (the body is held
    /// whole in memory before the lookup).
    fn max_body_key(&mut self, path: &str, raw: Option<&Text>) -> usize {
        const CAP: u64 = 16 * 1024 * 1024;
        let Some(text) = raw else {
            return route::MAX_BODY_KEY as usize;
        };
        match self.positive_size(path, text) {
            Some(size) if size > CAP => {
                let problem = Problem::new(path, format!("{text} is over 16MiB"));
                let hint = "a keyed body is held whole in memory before the lookup; \
                            larger bodies pass uncached";
                self.report(problem.hint(hint));
                route::MAX_BODY_KEY as usize
            }
            Some(size) => usize::try_from(size).unwrap_or(usize::MAX),
            None => route::MAX_BODY_KEY as usize,
        }
    }

    /// `compress`: known codings, none listed twice, in config order.
    fn compress(&mut self, path: &str, raw: &[String]) -> Vec<Coding> {
        self.distinct(path, raw, Coding::parse, |at, text| {
            let message = format!(
                "{text:?} is not a coding calmcache can make ({})",
                expected_codings()
            );
            Problem::new(at, message)
        })
    }

    /// Warm paths must be origin-form (`/...`) and need a zone to fill.
    fn warm(&mut self, path: &str, raw: &RawRoute, names: &Names<'_>) -> Vec<String> {
        // A route that answers itself is told it has no zone (answering.rs).
        let cache_less = raw.zone.is_none() && raw.zones.is_empty() && !raw.answers_itself();
        if !raw.warm.is_empty() && cache_less {
            let problem = Problem::new(format!("{path}.warm"), "warming needs a zone to fill");
            let hint = match names.zones.first() {
                Some(zone) => format!("set zone = {zone:?} on this route, or remove warm"),
                None => "define a [zones.<name>] and set zone on this route, or remove warm".into(),
            };
            self.report(problem.hint(hint));
        }
        for (i, target) in raw.warm.iter().enumerate() {
            if !target.starts_with('/') {
                let problem = Problem::new(
                    format!("{path}.warm[{i}]"),
                    format!("{target:?} does not start with '/'"),
                );
                self.report(problem.hint(r#"write a path and query, e.g. "/feed/?page=1""#));
            }
        }
        raw.warm.clone()
    }

    /// `warm_host`, or the first exact name of `hosts`; one the route's
    /// `hosts` do not match is refused (its warm copies would be stored
    /// under a host that never routes here).
    fn warm_host(
        &mut self,
        path: &str,
        raw: Option<String>,
        hosts: &[HostPattern],
    ) -> Option<String> {
        let Some(host) = raw else {
            return hosts.iter().find_map(|h| h.exact().map(str::to_owned));
        };
        let bad = host.is_empty() || host.contains(|c: char| c == '/' || c.is_whitespace());
        if bad {
            let problem = Problem::new(path, format!("{host:?} is not a host"));
            self.report(problem.hint(r#"write a Host header value, e.g. "example.com""#));
        } else if !crate::config::hosts::any_matches(hosts, &host.to_ascii_lowercase()) {
            let problem = Problem::new(path, format!("{host:?} is not one of the route's hosts"));
            self.report(problem.hint("warm with a name the route answers for, or omit warm_host"));
        }
        Some(host)
    }

    /// `hosts`: names as NGINX's `server_name` has them
    /// ([`HostPattern`]); an empty list is refused (omit the key for every
    /// host).
    fn hosts(&mut self, path: &str, raw: Option<&[String]>) -> Vec<HostPattern> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        if raw.is_empty() {
            let problem = Problem::new(path, "is empty: the route would answer for no host");
            self.report(problem.hint("omit hosts to answer for every host"));
            return Vec::new();
        }
        let mut out = Vec::with_capacity(raw.len());
        for (i, text) in raw.iter().enumerate() {
            match HostPattern::parse(text) {
                Ok(pattern) => out.push(pattern),
                Err(why) => {
                    let problem = Problem::new(format!("{path}[{i}]"), format!("{text:?} {why}"));
                    self.report(problem.hint(
                        r#"write "example.com", "*.example.com" (names under it) or ".example.com" (both)"#,
                    ));
                }
            }
        }
        out
    }
}

/// The regex crate's multi-line message reduced to its `error:` line, so a
/// problem stays on one line.
fn regex_reason(error: &regex::Error) -> String {
    let text = error.to_string();
    let reason = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map(str::to_owned);
    reason.unwrap_or_else(|| text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// `expected "br" or "gzip"`, from [`Coding::ALL`].
fn expected_codings() -> String {
    let quoted: Vec<String> = Coding::ALL
        .iter()
        .map(|coding| format!("{:?}", coding.as_str()))
        .collect();
    match quoted.split_last() {
        Some((last, [])) => format!("expected {last}"),
        Some((last, rest)) => format!("expected {} or {last}", rest.join(", ")),
        None => "none are available".to_owned(),
    }
}
