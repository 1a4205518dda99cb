//! A location's header directives as route header rules: `proxy_set_header`
//! (-> `request_headers.set`, with NGINX's default `Host $proxy_host` where
//! no level in force names Host), `add_header` (-> `response_headers.add`, or
//! `.always` with `always`), `proxy_hide_header` (->
//! `response_headers.remove`) and `expires` (-> `expires`).
//!
//! Owns which rules carry over: the ones `calmcache check` takes, with the
//! variables calmcache's values know. A rule calmcache already follows
//! (`Host $host`, `X-Forwarded-For $proxy_add_x_forwarded_for`, the
//! WebSocket pair) or one check refuses (a field the key reads, framing,
//! hop-by-hop, the cache's own) is commented with the reason. It must not
//! decide the route's other keys.

use super::note_skipped;
use super::settings::Settings;
use super::toml_out::{Section, Value};
use super::tree::Directive;
use super::units;
use super::variables::variables_with;

/// Request fields a rule may not set (see docs/headers.md).
const REQUEST_REFUSED: [&str; 16] = [
    "accept-encoding",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    "range",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "expect",
];

/// Response fields no rule may touch (see docs/headers.md).
const RESPONSE_REFUSED: [&str; 13] = [
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "content-range",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "vary",
    "age",
    "cache-status",
];

/// Writes the header rules of a route (`caching`: it has a zone;
/// `proxy_host`: NGINX's `$proxy_host` when the route proxies to a fixed
/// `proxy_pass`).
pub(crate) fn rules(route: &mut Section, s: &Settings, caching: bool, proxy_host: Option<&str>) {
    let key = match route.get("key") {
        Some(Value::Str(k)) => k.clone(),
        _ => String::new(),
    };
    let mut request = Table::default();
    for d in s.all("proxy_set_header") {
        request_rule(d, &key, proxy_host, &mut request, route);
    }
    if let Some(host) = proxy_host {
        default_host(s, host, &key, &mut request, route);
    }
    if !request.0.is_empty() {
        route.set(
            "request_headers",
            Value::Table(vec![("set".into(), Value::Table(request.0))]),
        );
    }
    response_rules(route, s, caching);
}

/// Writes the response header rules alone (`add_header`,
/// `proxy_hide_header`, `expires`): a route that answers itself sends no
/// request upstream.
pub(crate) fn response_rules(route: &mut Section, s: &Settings, caching: bool) {
    let expires = expires(route, s);
    let (mut add, mut always, mut remove) = (Table::default(), Table::default(), Vec::new());
    for d in s.all("add_header") {
        let [name, value, rest @ ..] = d.args.as_slice() else {
            continue;
        };
        let target = if rest.iter().any(|a| a == "always") {
            &mut always
        } else {
            &mut add
        };
        match response_refusal(name, caching, expires, Use::Add) {
            Some(why) => route.note(note_skipped(d, why)),
            None => target.put(d, name, value, RESPONSE_VARS, route),
        }
    }
    for d in s.all("proxy_hide_header") {
        let Some(name) = d.args.first() else { continue };
        match response_refusal(name, caching, expires, Use::Remove) {
            Some(why) => route.note(note_skipped(d, why)),
            None if remove
                .iter()
                .any(|r: &Value| matches!(r, Value::Str(n) if n.eq_ignore_ascii_case(name))) => {}
            None => {
                route.note(format!("From `{}` ({}).", d.text(), d.pos));
                remove.push(Value::Str(name.clone()))
            }
        }
    }
    let mut response = Vec::new();
    for (k, t) in [("add", add), ("always", always)] {
        if !t.0.is_empty() {
            response.push((k.to_owned(), Value::Table(t.0)));
        }
    }
    if !remove.is_empty() {
        response.push(("remove".to_owned(), Value::List(remove)));
    }
    if !response.is_empty() {
        route
            .set("response_headers", Value::Table(response))
            .note("From add_header / proxy_hide_header: calmcache's add replaces a field the origin sent instead of sending it twice.");
    }
}

/// The variables a request value knows beyond a key's.
const REQUEST_VARS: &[&str] = &["remote_addr", "server_port"];
/// The variables a response value knows beyond a key's.
const RESPONSE_VARS: &[&str] = &["remote_addr", "server_port", "upstream_cache_status"];

/// Field name -> value, in order, one entry per name.
#[derive(Default)]
struct Table(Vec<(String, Value)>);

impl Table {
    fn put(&mut self, d: &Directive, name: &str, value: &str, vars: &[&str], route: &mut Section) {
        if self.0.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            route.note(note_skipped(
                d,
                "a field named twice: calmcache sends one value per rule (the first)",
            ));
            return;
        }
        match variables_with(value, vars) {
            Ok(v) => {
                route.note(format!("From `{}` ({}).", d.text(), d.pos));
                self.0.push((name.to_owned(), Value::Str(v)));
            }
            Err(why) => route.note(note_skipped(d, &why)),
        }
    }
}

/// NGINX's default `proxy_set_header Host $proxy_host` where no level in
/// force names Host (a level with any proxy_set_header replaces the outer
/// ones, as `Settings` already does): calmcache would send the client's.
fn default_host(s: &Settings, host: &str, key: &str, table: &mut Table, route: &mut Section) {
    let named = s.all("proxy_set_header").iter().any(|d| {
        d.args
            .first()
            .is_some_and(|n| n.eq_ignore_ascii_case("host"))
    });
    if named {
        return;
    }
    if reads_field(key, "host") {
        return route.note(format!(
            "NGINX sends `Host: {host}` ($proxy_host, its default) upstream; not carried over: \
             the route's key reads Host, so the origin gets the client's"
        ));
    }
    route.note(format!(
        "Host = \"{host}\": NGINX's default (proxy_set_header Host $proxy_host, the host of \
         proxy_pass) where no proxy_set_header Host is in force; calmcache would send the \
         client's Host."
    ));
    table
        .0
        .insert(0, ("Host".to_owned(), Value::Str(host.to_owned())));
}

fn request_rule(
    d: &Directive,
    key: &str,
    proxy_host: Option<&str>,
    table: &mut Table,
    route: &mut Section,
) {
    let [name, value] = d.args.as_slice() else {
        return route.note(note_skipped(d, "proxy_set_header takes a name and a value"));
    };
    // `$proxy_host` alone is the proxy_pass host, known when it is fixed.
    let value = match proxy_host {
        Some(host) if value == "$proxy_host" || value == "${proxy_host}" => host,
        _ => value.as_str(),
    };
    let lower = name.to_ascii_lowercase();
    let why = match (lower.as_str(), value) {
        ("upgrade", "$http_upgrade") => return, // the websocket key
        ("connection", v) if v.eq_ignore_ascii_case("upgrade") || v == "$connection_upgrade" => {
            return
        }
        ("host", "$host" | "$http_host") => {
            Some("calmcache sends the client's Host already")
        }
        ("x-forwarded-for", "$proxy_add_x_forwarded_for") | ("x-forwarded-proto", "$scheme") => {
            Some("calmcache appends X-Forwarded-For and sets X-Forwarded-Proto itself (see trusted_proxies)")
        }
        (n, _) if REQUEST_REFUSED.contains(&n) => Some(
            "calmcache frames upstream requests, asks for codings and validates itself: check refuses a rule on this field",
        ),
        (n, _) if reads_field(key, n) => {
            Some("the route's key reads this field: the origin must see what the answer was keyed by")
        }
        _ => None,
    };
    match why {
        Some(why) => route.note(note_skipped(d, why)),
        None => table.put(d, name, value, REQUEST_VARS, route),
    }
}

/// Whether `key` reads request field `lower` (`$http_NAME`, `Cookie` for
/// `$cookie_NAME`).
fn reads_field(key: &str, lower: &str) -> bool {
    if lower == "cookie" && key.contains("$cookie_") {
        return true;
    }
    key.to_ascii_lowercase()
        .contains(&format!("$http_{}", lower.replace('-', "_")))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    Add,
    Remove,
}

/// Why a response rule on `name` is refused, if it is.
fn response_refusal(name: &str, caching: bool, expires: bool, how: Use) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    Some(match lower.as_str() {
        n if RESPONSE_REFUSED.contains(&n) || n == "accept-ranges" => {
            "calmcache frames, encodes and selects answers itself: check refuses a rule on this field"
        }
        "set-cookie" if how == Use::Add => {
            "a cookie set by the edge would ride on answers the cache shares"
        }
        "etag" | "last-modified" if caching => {
            "the cache answers conditional requests with the stored validators"
        }
        "cache-control" | "expires" if expires => "expires sets it",
        _ => return None,
    })
}

/// `expires` -> `expires`; whether one is in force.
fn expires(route: &mut Section, s: &Settings) -> bool {
    let Some(d) = s.last("expires") else {
        return false;
    };
    let arg = d.args.first().map(String::as_str).unwrap_or("");
    let value = match arg {
        "off" | "epoch" | "max" => Some(arg.to_owned()),
        t => units::duration(t),
    };
    match value {
        Some(v) => {
            let on = v != "off";
            route
                .set("expires", Value::Str(v))
                .note(format!("From `{}` ({}).", d.text(), d.pos));
            on
        }
        None => {
            route.note(note_skipped(
                d,
                "calmcache's expires takes off, epoch, max or a time ahead",
            ));
            false
        }
    }
}
