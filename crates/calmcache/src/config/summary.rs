//! [`Config::summary`]: the one line printed when a config is accepted
//! (`calmcache check`, start-up log), so a user can see what the proxy
//! understood without reading the file again.

use super::limits::LimitConfig;
use super::units::format_size;
use super::{Config, RouteConfig, UpstreamConfig, ZoneConfig};

impl Config {
    /// One line describing the config, e.g. `ok: listen 127.0.0.1:8080;
    /// admin 127.0.0.1:9090; 1 upstream (app: 1 server); 1 zone (ram: memory
    /// 256 MiB); 2 routes (api -> app via ram, refresh sus; route1 -> app, no cache)`.
    /// A cached route also names the cache settings it changes from their
    /// defaults (`key`, `bypass`, `no_store`, `compress`).
    pub fn summary(&self) -> String {
        let listen: Vec<String> = self.server.listen.iter().map(|a| a.to_string()).collect();
        let mut parts = vec![format!("listen {}", listen.join(", "))];
        parts.extend(proxy_protocol_line(&self.server.proxy_protocol));
        if let Some(admin) = &self.admin {
            parts.push(format!("admin {}", admin.listen));
        }
        parts.push(counted(&self.upstreams, "upstream", ", ", upstream_line));
        parts.push(counted(&self.zones, "zone", ", ", zone_line));
        parts.push(counted(&self.routes, "route", "; ", |r| self.route_line(r)));
        if !self.limits.is_empty() {
            parts.push(counted(&self.limits, "limit", "; ", limit_line));
        }
        format!("ok: {}", parts.join("; "))
    }

    fn route_line(&self, route: &RouteConfig) -> String {
        let upstream = route
            .upstream()
            .and_then(|u| self.upstreams.get(u))
            .map_or("?", |u| u.name.as_str());
        let zones: Vec<&str> = route
            .storage
            .zones
            .iter()
            .filter_map(|&z| self.zones.get(z))
            .map(|z| z.name.as_str())
            .collect();
        let name = if route.matching.hosts.is_empty() {
            route.name.clone()
        } else {
            let hosts: Vec<String> = route
                .matching
                .hosts
                .iter()
                .map(ToString::to_string)
                .collect();
            format!("{} for {}", route.name, hosts.join(" "))
        };
        let name = if route.limits.is_empty() {
            name
        } else {
            let limits = route.limits.iter().filter_map(|&l| self.limits.get(l));
            let names: Vec<&str> = limits.map(|l| l.name.as_str()).collect();
            format!("{name} limited by {}", names.join("+"))
        };
        let name = format!("{name}{}", listener_names(route));
        if let Some(answers) = answering_line(route) {
            return format!("{name} {answers}");
        }
        let name = format!("{name}{}", internal(route));
        let rules = header_features(route);
        let rules = format!("{rules}{}", passed_features(route));
        if zones.is_empty() {
            return format!("{name} -> {upstream}, no cache{rules}");
        }
        format!(
            "{name} -> {upstream} via {}, refresh {}{}{rules}",
            zones.join("+"),
            route.refresh.mode.as_str(),
            cache_features(route)
        )
    }
}

/// `PROXY protocol on 0.0.0.0:443 from 10.0.0.0/8`, when a listener
/// expects it.
fn proxy_protocol_line(pp: &super::proxy_protocol::ProxyProtocolConfig) -> Option<String> {
    if !pp.is_on() {
        return None;
    }
    let on: Vec<String> = pp.listeners.iter().map(ToString::to_string).collect();
    let from: Vec<String> = pp.from.iter().map(ToString::to_string).collect();
    Some(format!(
        "PROXY protocol on {} from {}",
        on.join(", "),
        from.join(", ")
    ))
}

/// How a route that answers itself is summed up (`return 301 ->
/// https://$host$request_uri`, `files /srv/www`), `internal` after a
/// comma; `None` for a proxied route.
fn answering_line(route: &RouteConfig) -> Option<String> {
    use super::answering::RouteKind;
    let what = match &route.kind {
        RouteKind::Proxy { .. } => return None,
        RouteKind::Return(r) => match &r.location {
            Some(location) => format!("return {} -> {}", r.status.as_u16(), location.as_str()),
            None => format!("return {}", r.status.as_u16()),
        },
        RouteKind::Files(f) => match f.absent {
            super::answering::Absent::Next => format!("files {}", f.root.display()),
            absent => format!("files {}, absent {}", f.root.display(), absent.as_str()),
        },
    };
    Some(format!("{what}{}", internal(route)))
}

/// `, internal` for a route clients cannot reach, `, error_pages 2`,
/// `, intercept_errors`; empty for a route with none of them.
fn internal(route: &RouteConfig) -> String {
    let mut out = String::new();
    if route.internal {
        out.push_str(", internal");
    }
    if !route.error_pages.is_empty() {
        out.push_str(&format!(", error_pages {}", route.error_pages.len()));
    }
    if route.intercept_errors {
        out.push_str(", intercept_errors");
    }
    out
}

/// The cache settings a route changes from their defaults, each after a
/// comma, e.g. `, key "$host$uri", bypass 2, no_store 2, compress br+gzip`;
/// empty for a route with the defaults, to keep the line short.
fn cache_features(route: &RouteConfig) -> String {
    let mut out = String::new();
    if !route.storage.key.is_default() {
        out.push_str(&format!(", key {:?}", route.storage.key.as_str()));
    }
    if !route.storage.bypass.is_empty() {
        out.push_str(&format!(", bypass {}", route.storage.bypass.len()));
    }
    if !route.storage.no_store.is_empty() {
        out.push_str(&format!(", no_store {}", route.storage.no_store.len()));
    }
    if !route.answers.compress.is_empty() {
        let codings: Vec<&str> = route.answers.compress.iter().map(|c| c.as_str()).collect();
        out.push_str(&format!(", compress {}", codings.join("+")));
    }
    if !route.freshness.ignore_headers.is_empty() {
        let names: Vec<&str> = route
            .freshness
            .ignore_headers
            .iter()
            .map(|f| f.name())
            .collect();
        out.push_str(&format!(", ignore_headers {}", names.join("+")));
    }
    out
}

/// ` on 0.0.0.0:80` for a route limited to listeners; else empty.
fn listener_names(route: &RouteConfig) -> String {
    if route.matching.listeners.is_empty() {
        return String::new();
    }
    let names: Vec<String> = route
        .matching
        .listeners
        .iter()
        .map(ToString::to_string)
        .collect();
    format!(" on {}", names.join(" "))
}

/// The header rules a route has, e.g. `, request_headers 2, response_headers
/// 1, expires 3600s`; empty without any.
fn header_features(route: &RouteConfig) -> String {
    let rules = &route.headers;
    let mut out = String::new();
    let request = rules.request.set.len() + rules.request.remove.len();
    if request > 0 {
        out.push_str(&format!(", request_headers {request}"));
    }
    let response = &rules.response;
    let count = response.add.len() + response.always.len() + response.remove.len();
    if count > 0 {
        out.push_str(&format!(", response_headers {count}"));
    }
    if response.expires != super::header_rules::Expires::Off {
        out.push_str(&format!(", expires {}", response.expires.describe()));
    }
    out
}

/// `api: 10r/s burst 20 nodelay, origin, used by api` (`rate` as NGINX
/// writes it, per second or per minute), `conns: 3 connections`.
fn limit_line(limit: &LimitConfig) -> String {
    use super::limits::{AppliesTo, Delay, LimitKind};
    let mut out = format!("{}: ", limit.name);
    match limit.kind {
        LimitKind::Rate(rate) if rate.milli_per_second % 1000 == 0 => {
            out.push_str(&format!("{}r/s", rate.milli_per_second / 1000));
        }
        LimitKind::Rate(rate) => {
            // Rounded: "1r/m" is kept as 16 milli-requests a second.
            out.push_str(&format!("{}r/m", (rate.milli_per_second * 60 + 500) / 1000));
        }
        LimitKind::Connections(n) => out.push_str(&format!("{n} connections")),
    }
    if let LimitKind::Rate(rate) = limit.kind {
        if rate.burst > 0 {
            out.push_str(&format!(" burst {}", rate.burst));
        }
        match rate.delay {
            Delay::NoDelay => out.push_str(" nodelay"),
            Delay::After(0) => {}
            Delay::After(n) => out.push_str(&format!(" delay {n}")),
        }
    }
    if limit.applies_to == AppliesTo::Origin {
        out.push_str(", origin only");
    }
    if limit.status != 429 {
        out.push_str(&format!(", status {}", limit.status));
    }
    out
}

/// `, compress_passed gzip` when the route compresses passed answers.
fn passed_features(route: &RouteConfig) -> String {
    let codings = &route.answers.compress_passed.codings;
    if codings.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = codings.iter().map(|c| c.as_str()).collect();
    format!(", compress_passed {}", names.join("+"))
}

/// `, least_conn` or `, hash "$request_uri"`; empty for round robin.
fn balance_feature(upstream: &UpstreamConfig) -> String {
    match &upstream.balance {
        super::Balance::RoundRobin => String::new(),
        super::Balance::LeastConn => ", least_conn".to_owned(),
        super::Balance::Hash(key) => format!(", hash {:?}", key.as_str()),
    }
}

fn upstream_line(upstream: &UpstreamConfig) -> String {
    let count = upstream.servers.len();
    let tls = match upstream
        .servers
        .iter()
        .filter(|s| s.scheme.is_tls())
        .count()
    {
        0 => "",
        n if n == count => ", tls",
        _ => ", some tls",
    };
    let unix = match upstream.servers.iter().filter(|s| s.unix.is_some()).count() {
        0 => String::new(),
        n if n == count => ", unix sockets".to_owned(),
        n => format!(", {n} on unix sockets"),
    };
    format!(
        "{}: {count} {}{tls}{unix}{}",
        upstream.name,
        plural(count, "server"),
        balance_feature(upstream)
    )
}

fn zone_line(zone: &ZoneConfig) -> String {
    let size = format_size(zone.max_size);
    match &zone.path {
        Some(path) => format!(
            "{}: {} {size} at {}{}",
            zone.name,
            zone.kind.as_str(),
            path.display(),
            admission_note(zone.admission)
        ),
        None => format!("{}: {} {size}", zone.name, zone.kind.as_str()),
    }
}

/// What a disk zone's `admission` does, said where `check` lists the zone:
/// "frequent" (the default since issue 29) changed what a full zone stores.
fn admission_note(admission: calmcache_core::disk::Admission) -> &'static str {
    match admission {
        calmcache_core::disk::Admission::Frequent => {
            " (once 90% full, a new URL is stored on its second miss: admission = \"frequent\")"
        }
        calmcache_core::disk::Admission::All => " (every answer stored: admission = \"all\")",
    }
}

/// `"2 routes (a; b)"`, or just `"0 zones"` when there is nothing to list.
fn counted<T>(items: &[T], noun: &str, separator: &str, line: impl Fn(&T) -> String) -> String {
    let head = format!("{} {}", items.len(), plural(items.len(), noun));
    if items.is_empty() {
        return head;
    }
    let lines: Vec<String> = items.iter().map(line).collect();
    format!("{head} ({})", lines.join(separator))
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        noun.to_owned()
    } else {
        format!("{noun}s")
    }
}
