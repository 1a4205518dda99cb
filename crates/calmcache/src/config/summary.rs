//! [`Config::summary`]: the one line printed when a config is accepted
//! (`calmcache check`, start-up log), so a user can see what the proxy
//! understood without reading the file again.

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
        if let Some(admin) = &self.admin {
            parts.push(format!("admin {}", admin.listen));
        }
        parts.push(counted(&self.upstreams, "upstream", ", ", upstream_line));
        parts.push(counted(&self.zones, "zone", ", ", zone_line));
        parts.push(counted(&self.routes, "route", "; ", |r| self.route_line(r)));
        format!("ok: {}", parts.join("; "))
    }

    fn route_line(&self, route: &RouteConfig) -> String {
        let upstream = self
            .upstreams
            .get(route.upstream)
            .map_or("?", |u| u.name.as_str());
        let zones: Vec<&str> = route
            .zones
            .iter()
            .filter_map(|&z| self.zones.get(z))
            .map(|z| z.name.as_str())
            .collect();
        let name = if route.hosts.is_empty() {
            route.name.clone()
        } else {
            let hosts: Vec<String> = route.hosts.iter().map(ToString::to_string).collect();
            format!("{} for {}", route.name, hosts.join(" "))
        };
        let passed = passed_features(route);
        if zones.is_empty() {
            return format!("{name} -> {upstream}, no cache{passed}");
        }
        format!(
            "{name} -> {upstream} via {}, refresh {}{}{passed}",
            zones.join("+"),
            route.refresh.as_str(),
            cache_features(route)
        )
    }
}

/// The cache settings a route changes from their defaults, each after a
/// comma, e.g. `, key "$host$uri", bypass 2, no_store 2, compress br+gzip`;
/// empty for a route with the defaults, to keep the line short.
fn cache_features(route: &RouteConfig) -> String {
    let mut out = String::new();
    if !route.key.is_default() {
        out.push_str(&format!(", key {:?}", route.key.as_str()));
    }
    if !route.bypass.is_empty() {
        out.push_str(&format!(", bypass {}", route.bypass.len()));
    }
    if !route.no_store.is_empty() {
        out.push_str(&format!(", no_store {}", route.no_store.len()));
    }
    if !route.compress.is_empty() {
        let codings: Vec<&str> = route.compress.iter().map(|c| c.as_str()).collect();
        out.push_str(&format!(", compress {}", codings.join("+")));
    }
    out
}

/// `, compress_passed gzip` when the route compresses passed answers.
fn passed_features(route: &RouteConfig) -> String {
    let codings = &route.compress_passed.codings;
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
    format!(
        "{}: {count} {}{tls}{}",
        upstream.name,
        plural(count, "server"),
        balance_feature(upstream)
    )
}

fn zone_line(zone: &ZoneConfig) -> String {
    let size = format_size(zone.max_size);
    match &zone.path {
        Some(path) => format!(
            "{}: {} {size} at {}",
            zone.name,
            zone.kind.as_str(),
            path.display()
        ),
        None => format!("{}: {} {size}", zone.name, zone.kind.as_str()),
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
