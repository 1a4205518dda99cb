//! A location's caching directives as `[[routes]]` keys.
//!
//! Owns `proxy_cache_valid` (-> `ttl`), `proxy_cache_key` (-> `key`),
//! `proxy_cache_lock`, `proxy_cache_use_stale`,
//! `proxy_cache_background_update` (-> `refresh`, `lock_timeout`,
//! `stale_while_revalidate`, `stale_if_error`), `proxy_cache_bypass` /
//! `proxy_no_cache` (-> `bypass` / `no_store`), `proxy_ignore_headers`
//! (-> `ignore_headers`), `gzip` (-> `compress_passed*`), the
//! WebSocket `proxy_set_header` pair (-> `websocket`) and a comment for every
//! other `proxy_*` directive. The zone itself is chosen in `zones.rs`.

use super::note_skipped;
use super::settings::Settings;
use super::toml_out::{Section, Value};
use super::tree::Directive;
use super::units;

/// NGINX's `proxy_cache_key` default.
const NGINX_DEFAULT_KEY: &str = "$scheme$proxy_host$request_uri";

/// Variables a calmcache key template knows, with their NGINX spelling.
const KEY_VARS: [(&str, &str); 9] = [
    ("scheme", "$scheme"),
    ("host", "$host"),
    ("http_host", "$host"),
    ("server_name", "$host"),
    ("uri", "$uri"),
    ("args", "$args"),
    ("is_args", "$is_args"),
    ("request_uri", "$request_uri"),
    ("request_method", "$method"),
];

/// Writes the caching keys of a route that caches (`inactive_ms`: how long
/// its zone keeps an unused object, the bound of NGINX's stale copies).
pub(crate) fn caching_keys(route: &mut Section, s: &Settings, upstream: &str, inactive_ms: u64) {
    ttl(route, s);
    route.set("heuristic_fraction", Value::Float(0.0)).note(
        "NGINX caches a response without Cache-Control/Expires only for a proxy_cache_valid \
         time; calmcache would otherwise give it a heuristic lifetime from Last-Modified.",
    );
    route
        .set("client_cache_control", Value::Str("ignore".into()))
        .note(
            "NGINX ignores the client's Cache-Control/Pragma (a browser reload does not bypass \
         the cache); calmcache honours them by default.",
        );
    key(route, s, upstream);
    refresh(route, s, inactive_ms);
    conditions(route, s, "proxy_cache_bypass", "bypass");
    conditions(route, s, "proxy_no_cache", "no_store");
    ignore_headers(route, s);
    if let Some(d) = s.last("proxy_cache_convert_head") {
        route.set(
            "convert_head",
            Value::Bool(d.args.first().map(String::as_str) == Some("on")),
        );
    }
}

/// Why NGINX stores nothing for a location that names a zone, if it does
/// not: without `proxy_cache_valid` only the origin's freshness
/// (Cache-Control, Expires, X-Accel-Expires) makes an answer storable, and
/// with Cache-Control and Expires ignored only X-Accel-Expires is left,
/// which calmcache does not read. Such a location's route does not cache:
/// caching it would store every answer with a lifetime of 0 and serve it
/// stale under the stale windows NGINX grants only to stored answers.
pub(crate) fn stores_nothing(s: &Settings) -> Option<String> {
    if s.last("proxy_cache_valid").is_some() {
        return None;
    }
    let ignored = |field: &str| {
        s.all("proxy_ignore_headers")
            .iter()
            .flat_map(|d| &d.args)
            .any(|a| a.eq_ignore_ascii_case(field))
    };
    if !ignored("Cache-Control") || !ignored("Expires") {
        return None;
    }
    let accel = if ignored("X-Accel-Expires") {
        "NGINX stores nothing here"
    } else {
        "NGINX stores only answers carrying X-Accel-Expires here, a field calmcache does not read"
    };
    Some(format!(
        "proxy_cache without proxy_cache_valid, Cache-Control and Expires ignored (proxy_ignore_headers): \
         {accel}; this route proxies without caching."
    ))
}

/// `proxy_cache_valid [code ...] time` -> `ttl`.
fn ttl(route: &mut Section, s: &Settings) {
    let mut table: Vec<(String, Value)> = Vec::new();
    let mut comments = Vec::new();
    for d in s.all("proxy_cache_valid") {
        let Some((time, codes)) = d.args.split_last() else {
            continue;
        };
        let Some(time) = units::duration(time) else {
            route.note(note_skipped(d, "not an NGINX time"));
            continue;
        };
        // No status: 200, 301 and 302, as NGINX.
        let codes: Vec<String> = if codes.is_empty() {
            vec!["200".into(), "301".into(), "302".into()]
        } else {
            codes.to_vec()
        };
        for code in codes {
            table.retain(|(c, _)| *c != code);
            table.push((code, Value::Str(time.clone())));
        }
        comments.push(format!("`{}` ({})", d.text(), d.pos));
        if d.args.iter().any(|a| a == "any") {
            comments.push(
                "calmcache's \"any\" leaves out statuses a request causes (400, 405, 413, 429...): \
                 list one by number to cache it"
                    .into(),
            );
        }
    }
    if table.is_empty() {
        return;
    }
    let entry = route.set("ttl", Value::Table(table));
    entry.note(format!(
        "From {}. As in NGINX, the origin's Cache-Control/Expires win over these (override_origin = false).",
        comments.join(", ")
    ));
}

/// `proxy_cache_key` -> `key`, when every variable has a calmcache spelling.
fn key(route: &mut Section, s: &Settings, upstream: &str) {
    let Some(d) = s.last("proxy_cache_key") else {
        route.note(format!(
            "NGINX's default key is {NGINX_DEFAULT_KEY}; calmcache's default \
             ($scheme$host$uri$is_args$args) also tells sites apart by Host."
        ));
        return;
    };
    let Some(text) = d.args.first() else { return };
    match key_template(text, upstream) {
        Ok(key) => {
            route
                .set("key", Value::Str(key))
                .note(format!("From `{}` ({}).", d.text(), d.pos));
        }
        Err(why) => route.note(note_skipped(
            d,
            &format!("{why}; calmcache's default key is used"),
        )),
    }
}

/// An NGINX key with its variables in calmcache's spelling.
pub(crate) fn key_template(text: &str, upstream: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        let (name, after) = if let Some(inner) = rest.strip_prefix('{') {
            let end = inner.find('}').ok_or("an unclosed ${")?;
            (&inner[..end], &inner[end + 1..])
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        let known = KEY_VARS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned());
        let var = match known {
            Some(v) => v,
            None if name == "proxy_host" => upstream.to_owned(),
            None if ["arg_", "http_", "cookie_"]
                .iter()
                .any(|p| name.starts_with(p)) =>
            {
                format!("${{{name}}}")
            }
            None => return Err(format!("${name} has no calmcache equivalent")),
        };
        // Braces keep a following letter out of the name.
        match var.strip_prefix('$') {
            Some(bare) if !var.starts_with("${") => out.push_str(&format!("${{{bare}}}")),
            _ => out.push_str(&var),
        }
        rest = after;
    }
    out.push_str(rest);
    Ok(out)
}

/// Lock, stale and background update -> the route's refresh keys.
fn refresh(route: &mut Section, s: &Settings, inactive_ms: u64) {
    let lock = s.on("proxy_cache_lock");
    let stale: Vec<&str> = s
        .last("proxy_cache_use_stale")
        .map(|d| d.args.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let updating = stale.contains(&"updating");
    let background = s.on("proxy_cache_background_update");
    let inactive = units::duration_text(inactive_ms);
    let (mode, why) = match (lock, updating) {
        (false, false) => (
            "none",
            "NGINX without proxy_cache_lock sends every request for an expired or missing \
             object to the origin; refresh = \"none\" does the same. calmcache's default, \
             \"sus\", would refresh popular objects once, ahead of expiry, in the background.",
        ),
        (true, false) => (
            "lock",
            "proxy_cache_lock on: one request fetches, the others wait for it (lock_timeout).",
        ),
        (_, true) => (
            "lock",
            "proxy_cache_lock/use_stale updating: one request per key refreshes, the others \
             are served the stale copy meanwhile (stale_while_revalidate). refresh = \"sus\" \
             would refresh ahead of expiry instead, so no request ever sees an expired copy.",
        ),
    };
    route.set("refresh", Value::Str(mode.into())).note(why);
    lock_timeout(route, s, lock);
    if updating {
        let entry = route.set("stale_while_revalidate", Value::Str(inactive.clone()));
        entry.note(format!(
            "proxy_cache_use_stale updating: NGINX serves a stale copy while it is being \
             updated, for as long as the zone keeps it (inactive = {inactive}), so this window is \
             the zone's inactive time."
        ));
        if !background {
            entry.note(
                "Without proxy_cache_background_update NGINX makes the first request after expiry \
                 wait for the fresh copy; calmcache serves that request the stale copy too and \
                 refreshes in the background (one origin request either way).",
            );
        }
    }
    stale_if_error(route, &stale, &inactive);
    if background && !updating {
        route.note("proxy_cache_background_update needs proxy_cache_use_stale updating in NGINX: nothing to carry over.");
    }
}

/// `proxy_cache_lock_timeout` (or NGINX's default under a lock) -> `lock_timeout`.
fn lock_timeout(route: &mut Section, s: &Settings, lock: bool) {
    if let Some(d) = s.last("proxy_cache_lock_timeout") {
        if let Some(t) = d.args.first().and_then(|t| units::duration(t)) {
            route.set("lock_timeout", Value::Str(t)).note(format!(
                "From `{}` ({}): NGINX then fetches without caching; calmcache fetches itself \
                 (and stores the answer).",
                d.text(),
                d.pos
            ));
        }
    } else if lock {
        route
            .set("lock_timeout", Value::Str("5s".into()))
            .note("NGINX's proxy_cache_lock_timeout default.");
    }
}

/// The error arguments of `proxy_cache_use_stale` -> `stale_if_error`, for
/// the zone's inactive time (NGINX keeps serving the stale copy that long).
fn stale_if_error(route: &mut Section, stale: &[&str], inactive: &str) {
    const ERRORS: [&str; 10] = [
        "error",
        "timeout",
        "invalid_header",
        "http_500",
        "http_502",
        "http_503",
        "http_504",
        "http_403",
        "http_404",
        "http_429",
    ];
    let errors: Vec<&str> = stale
        .iter()
        .copied()
        .filter(|a| ERRORS.contains(a))
        .collect();
    if !errors.is_empty() {
        route
            .set("stale_if_error", Value::Str(inactive.to_owned()))
            .note(format!(
            "proxy_cache_use_stale {}: NGINX has no duration here and serves the stale copy as \
             long as the zone keeps it (inactive = {inactive}). calmcache serves it on connection \
             errors, timeouts and every 5xx answer, whichever of them NGINX listed.",
            errors.join(" ")
        ));
    }
}

/// `proxy_cache_bypass` / `proxy_no_cache` -> `bypass` / `no_store`.
fn conditions(route: &mut Section, s: &Settings, directive: &str, key: &str) {
    let mut list = Vec::new();
    for d in s.all(directive) {
        for arg in &d.args {
            match condition(arg) {
                Some(c) => list.push(Value::Str(c)),
                None => route.note(format!(
                    "not carried over: `{arg}` of `{}` ({}): {key} understands $cookie_NAME, \
                     $arg_NAME and $http_NAME only",
                    d.text(),
                    d.pos
                )),
            }
        }
    }
    if !list.is_empty() {
        let from = s
            .all(directive)
            .iter()
            .map(|d| format!("{}", d.pos))
            .collect::<Vec<_>>()
            .join(", ");
        route.set(key, Value::List(list)).note(format!(
            "From {directive} ({from}). \"cookie:NAME\" matches cookies whose name starts with \
             NAME (NGINX's $cookie_NAME needs the exact name); \"arg:\" and \"header:\" match a \
             value other than empty (and, for arg, \"0\") as NGINX does."
        ));
    }
}

/// `$cookie_x` -> `cookie:x`, `$arg_x` -> `arg:x`, `$http_x_y` -> `header:x-y`.
pub(crate) fn condition(var: &str) -> Option<String> {
    let name = var.strip_prefix('$')?;
    let name = name
        .strip_prefix('{')
        .and_then(|n| n.strip_suffix('}'))
        .unwrap_or(name);
    let ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if let Some(n) = name.strip_prefix("cookie_").filter(|n| ok(n)) {
        return Some(format!("cookie:{n}"));
    }
    if let Some(n) = name.strip_prefix("arg_").filter(|n| ok(n)) {
        return Some(format!("arg:{n}"));
    }
    if let Some(n) = name.strip_prefix("http_").filter(|n| ok(n)) {
        return Some(format!("header:{}", n.replace('_', "-")));
    }
    None
}

/// The response fields calmcache's route `ignore_headers` takes, as written.
const IGNORABLE: [&str; 5] = [
    "Set-Cookie",
    "Cache-Control",
    "Expires",
    "Vary",
    "X-Accel-Expires",
];

/// `proxy_ignore_headers ...` (every line of the level: NGINX adds them up)
/// -> route `ignore_headers`, with NGINX's meaning field by field
/// (`Cache-Control` alone leaves `Expires` in force, unlike
/// `override_origin`). The `X-Accel-*` fields calmcache does not act on
/// are commented.
fn ignore_headers(route: &mut Section, s: &Settings) {
    let all = s.all("proxy_ignore_headers");
    let mut names: Vec<Value> = Vec::new();
    let mut from = Vec::new();
    for d in all {
        let mut took = false;
        for arg in &d.args {
            match IGNORABLE.iter().find(|h| arg.eq_ignore_ascii_case(h)) {
                Some(h) => {
                    took = true;
                    let v = Value::Str((*h).to_owned());
                    if !names.contains(&v) {
                        names.push(v);
                    }
                }
                None => route.note(format!(
                    "not carried over: `{arg}` of `{}` ({}): calmcache does not act on this \
                     field, so there is nothing to ignore",
                    d.text(),
                    d.pos
                )),
            }
        }
        if took {
            from.push(format!("`{}` ({})", d.text(), d.pos));
        }
    }
    if names.is_empty() {
        return;
    }
    let vary = names.contains(&Value::Str("Vary".into()));
    let entry = route.set("ignore_headers", Value::List(names));
    for f in from {
        entry.note(format!("From {f}."));
    }
    entry.note(
        "These origin fields do not decide storing and lifetime, as in NGINX; an ignored \
         Set-Cookie is removed from the stored copy (the client that fetched it still gets it).",
    );
    if vary {
        entry.note(
            "Ignoring Vary serves one stored answer to every client: check warns; keep the \
             origin from varying on Cookie or Accept-Language here.",
        );
    }
}

/// `gzip on` (with `gzip_types`, `gzip_min_length`) -> `compress_passed =
/// ["gzip"]` and its types (NGINX always includes text/html) and minimum
/// length, on a route that proxies.
pub(crate) fn gzip(route: &mut Section, s: &Settings) {
    let Some(on) = s.last("gzip") else {
        return;
    };
    if on.args.first().map(String::as_str) != Some("on") {
        return;
    }
    route
        .set(
            "compress_passed",
            Value::List(vec![Value::Str("gzip".into())]),
        )
        .note(format!(
            "From `{}` ({}): answers calmcache does not store are gzipped on the fly for \
             clients that take gzip (stored answers: compress, below, on a route that stores).",
            on.text(),
            on.pos
        ));
    let mut types = vec![Value::Str("text/html".into())];
    let mut from = None;
    for d in s.all("gzip_types") {
        from = Some(format!("From `{}` ({}).", d.text(), d.pos));
        for t in &d.args {
            let v = Value::Str(t.clone());
            if !types.contains(&v) {
                types.push(v);
            }
        }
    }
    let entry = route.set("compress_passed_types", Value::List(types));
    entry.note(from.unwrap_or_else(|| "NGINX's gzip_types default: text/html alone.".into()));
    let length = s.last("gzip_min_length");
    let n = length
        .and_then(|d| d.args.first())
        .and_then(|n| nginx_bytes(n));
    match (length, n) {
        (Some(d), Some(n)) => {
            route
                .set("compress_passed_min_length", Value::Int(n))
                .note(format!("From `{}` ({}).", d.text(), d.pos));
        }
        (Some(d), None) => route.note(note_skipped(d, "not a number of bytes")),
        (None, _) => {}
    }
    gzip_stored(route, on);
}

/// `gzip on` on a route that stores: NGINX gzips its cache hits too, so
/// the stored answers are gzipped once (`compress`). Found by the
/// side-by-side table (issue 28): hits went out uncompressed.
fn gzip_stored(route: &mut Section, on: &Directive) {
    if route.get("zone").is_none() {
        return;
    }
    route
        .set("compress", Value::List(vec![Value::Str("gzip".into())]))
        .note(format!(
            "From `{}` ({}): NGINX gzips cache hits too; calmcache gzips a stored answer once \
             (text-like types, 256 bytes or more; its own list, not gzip_types) and serves it by \
             each client's Accept-Encoding.",
            on.text(),
            on.pos
        ));
}

/// An NGINX size (`1024`, `1k`, `1m`) in bytes.
fn nginx_bytes(text: &str) -> Option<i64> {
    let (digits, unit) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 1024),
        (i, 'm' | 'M') => (&text[..i], 1024 * 1024),
        _ => (text, 1),
    };
    digits.parse::<i64>().ok()?.checked_mul(unit)
}

/// Whether this location passes WebSocket upgrades: NGINX does only with
/// `proxy_set_header Upgrade $http_upgrade` and `Connection` "upgrade".
pub(crate) fn websocket(s: &Settings) -> Option<(bool, String)> {
    let headers = s.all("proxy_set_header");
    let value_of = |name: &str| {
        headers
            .iter()
            .find(|d| d.args.first().is_some_and(|n| n.eq_ignore_ascii_case(name)))
            .and_then(|d| d.args.get(1))
            .map(String::as_str)
    };
    let upgrade = value_of("Upgrade") == Some("$http_upgrade");
    let connection = value_of("Connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("upgrade") || v == "$connection_upgrade");
    Some(if upgrade && connection {
        (true, "proxy_set_header Upgrade $http_upgrade + Connection \"upgrade\": WebSocket upgrades pass.".to_owned())
    } else {
        (
            false,
            "NGINX passes no WebSocket upgrade without proxy_set_header Upgrade/Connection; \
             calmcache would (websocket = true is its default)."
                .to_owned(),
        )
    })
}

/// Comments for the `proxy_*` directives no key above carries.
pub(crate) fn others(route: &mut Section, s: &Settings) {
    for d in s.every() {
        let why = match d.name.as_str() {
            "proxy_cache"
            | "proxy_cache_valid"
            | "proxy_cache_key"
            | "proxy_cache_lock"
            | "proxy_cache_lock_timeout"
            | "proxy_cache_use_stale"
            | "proxy_cache_background_update"
            | "proxy_cache_bypass"
            | "proxy_no_cache"
            | "proxy_ignore_headers"
            | "proxy_cache_convert_head"
            | "proxy_connect_timeout"
            | "proxy_read_timeout"
            | "proxy_send_timeout"
            | "proxy_ssl_name"
            | "proxy_ssl_trusted_certificate"
            | "proxy_ssl_certificate"
            | "proxy_ssl_certificate_key"
            | "proxy_ssl_verify"
            | "proxy_ssl_server_name"
            | "gzip"
            | "gzip_types"
            | "gzip_min_length"
            | "add_header"
            | "expires"
            | "proxy_set_header"
            | "proxy_hide_header"
            | "root"
            | "index"
            | "limit_req"
            | "limit_conn"
            | "limit_req_status"
            | "limit_conn_status"
            // Error pages: pages.rs; access rules: commented where written.
            | "error_page"
            | "proxy_intercept_errors"
            | "auth_basic"
            | "auth_request"
            | "deny"
            | "satisfy"
            | "limit_except"
            | "rewrite"
            | "if" => continue,
            "proxy_http_version" => "calmcache always speaks HTTP/1.1 to upstreams, with keepalive",
            "proxy_pass_header" => "calmcache relays the origin's headers",
            "proxy_buffering"
            | "proxy_buffers"
            | "proxy_buffer_size"
            | "proxy_busy_buffers_size"
            | "proxy_max_temp_file_size"
            | "proxy_temp_path"
            | "proxy_temp_file_write_size" => {
                "calmcache streams answers to clients as they arrive (no buffering to tune)"
            }
            "proxy_cache_methods" => "calmcache caches GET and HEAD",
            "proxy_cache_min_uses" => {
                if let Some(note) = min_uses(d) {
                    route.note(note);
                }
                continue;
            }
            "proxy_cache_revalidate" => {
                "calmcache always revalidates with If-None-Match/If-Modified-Since when it can"
            }
            "proxy_next_upstream" | "proxy_next_upstream_tries" | "proxy_next_upstream_timeout" => {
                "calmcache retries a bodiless GET/HEAD once on the next server when a server fails"
            }
            "proxy_redirect" | "proxy_cookie_domain" | "proxy_cookie_path" => {
                "calmcache does not rewrite answers"
            }
            "proxy_ssl_protocols" | "proxy_ssl_ciphers" | "proxy_ssl_session_reuse" => {
                "calmcache's TLS client (rustls) speaks TLS 1.2 and 1.3 with its own cipher suites"
            }
            _ => "calmcache has no equivalent",
        };
        route.note(note_skipped(d, why));
    }
}

/// `proxy_cache_min_uses N` against the zones' `admission`: 1 is NGINX's
/// default and calmcache's answer too (nothing to say); 2 or more is what
/// `admission = "frequent"` (the default, so no key is written) does, with
/// a note on where the rules differ.
fn min_uses(d: &Directive) -> Option<String> {
    let arg = d.args.first().map(String::as_str).unwrap_or_default();
    match arg.parse::<u64>() {
        Ok(1) => {
            super::ledger::carried(d);
            None
        }
        Ok(n) if n >= 2 => Some(format!(
            "`{}` ({}): carried by the disk zones' admission = \"frequent\" (calmcache's \
             default). It differs from NGINX's rule: it counts only once a zone is 90% full \
             (with room, the first miss is stored), and then stores a new URL on its second \
             miss, where NGINX waits for {n} requests. A memory zone has no admission: it stores the first miss \
             (its S3-FIFO evicts one-hit URLs first).",
            d.text(),
            d.pos
        )),
        _ => Some(note_skipped(d, "not a whole number of uses of 1 or more")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn key_templates() {
        assert_eq!(
            key_template("$scheme$host$request_uri", "up").unwrap(),
            "${scheme}${host}${request_uri}"
        );
        assert_eq!(key_template("$proxy_host$uri", "up").unwrap(), "up${uri}");
        assert_eq!(
            key_template("$cookie_user|$http_x_a", "up").unwrap(),
            "${cookie_user}|${http_x_a}"
        );
        assert!(key_template("$remote_addr", "up").is_err());
    }

    #[test]
    fn conditions_from_variables() {
        assert_eq!(
            condition("$cookie_nocache").as_deref(),
            Some("cookie:nocache")
        );
        assert_eq!(condition("$arg_preview").as_deref(), Some("arg:preview"));
        assert_eq!(
            condition("$http_x_no_cache").as_deref(),
            Some("header:x-no-cache")
        );
        assert_eq!(condition("$skip_cache"), None);
    }
}
