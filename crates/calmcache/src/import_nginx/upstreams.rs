//! `upstream` blocks and `proxy_pass` targets as `[upstreams.<name>]`.
//!
//! Owns the server list (`weight=`, `max_fails=`, `fail_timeout=`, `backup`,
//! `down`), `keepalive`, the upstream a direct `proxy_pass http://host:port`
//! gets, and the per-upstream keys NGINX sets per location (timeouts and
//! `proxy_ssl_*`). It must not build routes.

use super::settings::Settings;
use super::toml_out::{Section, Value};
use super::tree::Directive;
use super::units;
use super::{note_skipped, Notes};

/// Where a `proxy_pass` sends requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// `upstream` block name, or `host:port`.
    pub(crate) host: String,
    /// `https://`.
    pub(crate) tls: bool,
    /// The URI part after the host (`/app/` in `http://up/app/`), if any.
    pub(crate) uri: Option<String>,
}

/// Parses `proxy_pass URL`; `Err` says why it cannot be carried over.
pub(crate) fn target(pass: &Directive) -> Result<Target, String> {
    let [url] = pass.args.as_slice() else {
        return Err("proxy_pass takes one URL (a missing ';'?)".to_owned());
    };
    if url.contains('$') {
        return Err(
            "a proxy_pass with variables is chosen per request; calmcache's upstreams are fixed"
                .to_owned(),
        );
    }
    let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err("only http:// and https:// URLs can be carried over".to_owned());
    };
    if let Some(socket) = rest.strip_prefix("unix:") {
        // NGINX: http://unix:/path:/uri, the path ended by ':'.
        let (path, uri) = socket.split_once(':').unwrap_or((socket, ""));
        unix_path_ok(path)?;
        if tls {
            return Err("calmcache speaks plain HTTP over a unix socket".to_owned());
        }
        return Ok(Target {
            host: format!("unix:{path}"),
            tls,
            uri: Some(uri.to_owned()).filter(|u| !u.is_empty()),
        });
    }
    let (host, uri) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(rest[i..].to_owned())),
        None => (rest, None),
    };
    Ok(Target {
        host: host.to_owned(),
        tls,
        uri,
    })
}

impl Target {
    /// NGINX's `$proxy_host`, the Host it sends upstream when no
    /// `proxy_set_header Host` is in force: the host as written in
    /// `proxy_pass`, with its port unless it is the scheme's default;
    /// `localhost` for a unix socket.
    pub(crate) fn proxy_host(&self) -> String {
        if self.host.starts_with("unix:") {
            return "localhost".to_owned();
        }
        let default = if self.tls { ":443" } else { ":80" };
        match self.host.strip_suffix(default) {
            Some(bare) if !bare.is_empty() => bare.to_owned(),
            _ => self.host.clone(),
        }
    }
}

/// The calmcache name of the upstream a direct `host:port` gets.
pub(crate) fn direct_name(host: &str) -> String {
    host.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `host` with the scheme's default port when it has none.
fn with_port(host: &str, tls: bool) -> String {
    let has_port = match host.rfind(':') {
        Some(i) => !host.ends_with(']') && host[i + 1..].chars().all(|c| c.is_ascii_digit()),
        None => false,
    };
    if has_port {
        host.to_owned()
    } else if tls {
        format!("{host}:443")
    } else {
        format!("{host}:80")
    }
}

/// A direct `proxy_pass http(s)://host:port`'s upstream of one server.
pub(crate) fn direct(target: &Target, pass: &Directive) -> Section {
    let name = direct_name(&target.host);
    let mut section = Section::new(format!("[upstreams.{}]", super::toml_out::key(&name)));
    section.note(format!(
        "From `{}` ({}): an upstream of this one server.",
        pass.text(),
        pass.pos
    ));
    let address = if target.host.starts_with("unix:") {
        target.host.clone()
    } else {
        with_port(&target.host, target.tls)
    };
    let server = if target.tls {
        format!("https://{address}")
    } else {
        address
    };
    section.set("servers", Value::List(vec![Value::Str(server)]));
    single_server_fails(&mut section);
    section
}

/// NGINX never marks the only server of an upstream down.
fn single_server_fails(section: &mut Section) {
    section.set("max_fails", Value::Int(0)).note(
        "NGINX never marks the only server of an upstream down; max_fails = 0 \
         keeps sending it requests after failures, as NGINX does.",
    );
}

/// An `upstream NAME { ... }` block: its `server` lines, then the
/// upstream-level directives, each turned into keys or a note.
pub(crate) fn block(block: &Directive, notes: &mut Notes) -> (String, Section) {
    let name = block.args.first().cloned().unwrap_or_default();
    super::ledger::carried(block);
    let mut section = Section::new(format!("[upstreams.{}]", super::toml_out::key(&name)));
    section.note(format!("From `upstream {name}` ({}).", block.pos));
    let mut servers = Vec::new();
    for d in block.children() {
        if d.name != "server" {
            upstream_directive(d, &mut section);
        } else if let Some(server) = server(d, &mut section) {
            super::ledger::carried(d);
            servers.push(server);
        }
    }
    if servers.is_empty() {
        notes.push(format!(
            "upstream {name} ({}) has no server calmcache can use: a placeholder address is written.",
            block.pos
        ));
        servers.push(Value::Str("127.0.0.1:8080".to_owned()));
    }
    let single = servers.len() == 1;
    section.set_first("servers", Value::List(servers));
    if single {
        single_server_fails(&mut section);
    }
    if section.get("keepalive").is_none() {
        section.note(
            "NGINX opens a new connection per request without `keepalive`; calmcache keeps \
             up to 32 idle connections per server (keepalive = 32).",
        );
    }
    (name, section)
}

/// One directive of an `upstream` block other than `server`: `keepalive`
/// and the balancing ones become keys; the rest get a note saying why not.
fn upstream_directive(d: &Directive, section: &mut Section) {
    match d.name.as_str() {
        "keepalive" => match d.args.first().and_then(|n| n.parse::<i64>().ok()) {
            Some(n) => {
                super::ledger::carried(d);
                section.set("keepalive", Value::Int(n)).note(format!(
                    "`{}` ({}): NGINX keeps this many idle connections per worker \
                     process for the whole upstream, calmcache per server.",
                    d.text(),
                    d.pos
                ));
            }
            None => section.note(note_skipped(d, "not a number")),
        },
        "zone" => section.note(note_skipped(
            d,
            "calmcache's upstream state is shared by its worker threads without a zone",
        )),
        "least_conn" => {
            super::ledger::carried(d);
            section
                .set("balance", Value::Str("least_conn".into()))
                .note(format!("From `{}` ({}).", d.text(), d.pos));
        }
        "hash" => hash(d, section),
        "ip_hash" | "random" | "least_time" => section.note(note_skipped(
            d,
            "calmcache balances by round robin, least_conn or a hash of a key template \
             (balance = \"hash\"; a key cannot read the client address)",
        )),
        "keepalive_timeout" | "keepalive_requests" | "keepalive_time" => {
            section.note(note_skipped(
                d,
                "calmcache keeps idle upstream connections until the server closes them",
            ))
        }
        _ => section.note(note_skipped(d, "calmcache has no equivalent")),
    }
}

/// `hash KEY [consistent]`: balance = "hash" with KEY as hash_key.
fn hash(d: &Directive, section: &mut Section) {
    let Some(key) = d.args.first() else {
        return section.note(note_skipped(d, "hash needs a key"));
    };
    let key = match super::variables::variables(key) {
        Ok(key) if key.contains('$') => key,
        Ok(_) => {
            return section.note(note_skipped(
                d,
                "a key without variables sends every request to one server",
            ))
        }
        Err(why) => return section.note(note_skipped(d, &why)),
    };
    super::ledger::carried(d);
    let consistent = d.args.get(1).is_some_and(|a| a == "consistent");
    let why = if consistent {
        format!(
            "From `{}` ({}): a consistent hash ring, as NGINX's ketama.",
            d.text(),
            d.pos
        )
    } else {
        format!(
            "From `{}` ({}): calmcache's hash is always consistent (a ring), so which server \
             a key goes to differs from NGINX's plain hash, and adding a server moves about 1/n \
             of the keys instead of most.",
            d.text(),
            d.pos
        )
    };
    section.set("balance", Value::Str("hash".into())).note(why);
    section.set("hash_key", Value::Str(key));
}

/// Whether `path` is a socket path calmcache takes: absolute, at most 107
/// bytes (sun_path).
fn unix_path_ok(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("calmcache takes an absolute unix socket path".into());
    }
    if path.len() > 107 {
        return Err("a unix socket path is at most 107 bytes".into());
    }
    Ok(())
}

/// One `server ADDRESS [weight=N] [max_fails=N] [fail_timeout=T] ...;`.
fn server(d: &Directive, section: &mut Section) -> Option<Value> {
    let Some(address) = d.args.first() else {
        section.note(note_skipped(d, "a server needs an address"));
        return None;
    };
    let address = match address.strip_prefix("unix:") {
        Some(path) => {
            if let Err(why) = unix_path_ok(path) {
                section.note(note_skipped(d, &why));
                return None;
            }
            address.clone()
        }
        None => with_port(address, false),
    };
    let mut table = vec![("address".to_owned(), Value::Str(address))];
    let mut never_down = false;
    for param in &d.args[1..] {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        match (key, value) {
            ("weight", n) if n.parse::<i64>().is_ok() => {
                table.push(("weight".to_owned(), Value::Int(n.parse().unwrap_or(1))));
            }
            ("max_fails", n) if n.parse::<i64>().is_ok() => {
                table.push(("max_fails".to_owned(), Value::Int(n.parse().unwrap_or(1))));
            }
            ("fail_timeout", t) if units::millis(t) == Some(0) => {
                // NGINX keeps a failed server out only until `now -
                // checked > fail_timeout`: with 0, never past the second it
                // failed in. calmcache refuses fail_timeout = "0s"; the
                // meaning is max_fails = 0 (never marked down).
                never_down = true;
                section.note(format!(
                    "`{param}` of `{}` ({}): NGINX then never keeps the server out; \
                     written as max_fails = 0 (never marked down)",
                    d.text(),
                    d.pos
                ));
            }
            ("fail_timeout", t) if units::duration(t).is_some() => {
                table.push((
                    "fail_timeout".to_owned(),
                    Value::Str(units::duration(t).unwrap_or_default()),
                ));
            }
            ("down", _) => {
                section.note(note_skipped(d, "a server marked down is left out"));
                return None;
            }
            ("backup", _) => {
                section.note(note_skipped(
                    d,
                    "calmcache has no backup servers: this one is left out; list it \
                     with the others to share the load instead",
                ));
                return None;
            }
            _ => section.note(format!(
                "not carried over: `{param}` of `{}` ({}): calmcache has no equivalent",
                d.text(),
                d.pos
            )),
        }
    }
    if never_down {
        table.retain(|(key, _)| key != "max_fails");
        table.push(("max_fails".to_owned(), Value::Int(0)));
    }
    Some(if table.len() == 1 {
        table.remove(0).1
    } else {
        Value::Table(table)
    })
}

/// The per-upstream keys NGINX sets per location: `proxy_*_timeout` and
/// `proxy_ssl_*`. The first location to use an upstream sets them; a later
/// one that differs gets a note.
pub(crate) fn location_keys(
    section: &mut Section,
    settings: &Settings,
    tls: bool,
    notes: &mut Notes,
) {
    const TIMEOUTS: [(&str, &str); 3] = [
        ("proxy_connect_timeout", "connect_timeout"),
        ("proxy_read_timeout", "read_timeout"),
        ("proxy_send_timeout", "send_timeout"),
    ];
    for (directive, key) in TIMEOUTS {
        if let Some(d) = settings.last(directive) {
            match d.args.first().and_then(|t| units::duration(t)) {
                Some(value) => set_once(section, key, Value::Str(value), d, notes),
                None => notes.push(note_skipped(d, "not an NGINX time")),
            }
        }
    }
    if tls {
        set_once(section, "tls", Value::Bool(true), &tls_directive(), notes);
    }
    let ssl: [(&str, &str); 5] = [
        ("proxy_ssl_name", "tls_server_name"),
        ("proxy_ssl_trusted_certificate", "tls_ca_file"),
        ("proxy_ssl_certificate", "tls_client_cert"),
        ("proxy_ssl_certificate_key", "tls_client_key"),
        ("proxy_ssl_verify", "tls_verify"),
    ];
    for (directive, key) in ssl {
        let Some(d) = settings.last(directive) else {
            continue;
        };
        let Some(arg) = d.args.first() else { continue };
        if !tls {
            notes.push(note_skipped(
                d,
                "this location's proxy_pass is not https://",
            ));
            continue;
        }
        let value = match key {
            "tls_verify" => Value::Bool(arg == "on"),
            _ if arg.contains('$') => {
                notes.push(note_skipped(d, "variables are not supported here"));
                continue;
            }
            _ => Value::Str(arg.clone()),
        };
        set_once(section, key, value, d, notes);
    }
    if let Some(d) = settings.last("proxy_ssl_server_name") {
        let note = if d.args.first().map(String::as_str) == Some("on") {
            "calmcache always sends SNI (tls_server_name, else the server's host name)"
        } else {
            "calmcache always sends SNI; NGINX's default (off) sends none"
        };
        notes.push(format!("`{}` ({}): {note}.", d.text(), d.pos));
    }
    if tls && settings.last("proxy_ssl_verify").is_none() {
        notes.push(
            "NGINX does not verify an https:// origin's certificate unless proxy_ssl_verify is on; \
             calmcache does by default (tls_verify = true): set tls_verify = false to keep NGINX's behaviour."
                .to_owned(),
        );
    }
}

fn tls_directive() -> Directive {
    Directive {
        name: "proxy_pass".to_owned(),
        args: vec!["https://...".to_owned()],
        pos: super::lexer::Pos {
            file: std::sync::Arc::from("-"),
            line: 0,
        },
        block: None,
    }
}

pub(crate) fn set_once(
    section: &mut Section,
    key: &str,
    value: Value,
    from: &Directive,
    notes: &mut Notes,
) {
    match section.get(key) {
        None => {
            let entry = section.set(key, value);
            if from.pos.line > 0 {
                entry.note(format!("From `{}` ({}).", from.text(), from.pos));
            }
        }
        Some(old) if *old == value => {}
        Some(old) => notes.push(format!(
            "`{}` ({}) differs from the upstream's {key} = {}: calmcache sets it per \
             upstream, and the first location that uses it set it.",
            from.text(),
            from.pos,
            super::toml_out::value(old)
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::import_nginx::tree::parse_text;

    fn first(text: &str) -> Directive {
        parse_text(text, "t.conf", std::path::Path::new("/"))
            .unwrap()
            .remove(0)
    }

    #[test]
    fn proxy_pass_targets() {
        let t = target(&first("proxy_pass https://api.example.com:8443/v1/;")).unwrap();
        assert_eq!(
            t,
            Target {
                host: "api.example.com:8443".into(),
                tls: true,
                uri: Some("/v1/".into())
            }
        );
        assert!(target(&first("proxy_pass http://$host;")).is_err());
        let t = target(&first("proxy_pass http://unix:/run/app.sock:/x/;")).unwrap();
        assert_eq!(t.host, "unix:/run/app.sock");
        assert_eq!(t.uri.as_deref(), Some("/x/"));
        assert!(target(&first("proxy_pass http://unix:tmp/s:;")).is_err());
        assert!(target(&first("proxy_pass https://unix:/tmp/s:;")).is_err());
        assert_eq!(with_port("example.com", true), "example.com:443");
        assert_eq!(with_port("[::1]", false), "[::1]:80");
    }

    #[test]
    fn upstream_block_servers() {
        let mut notes = Vec::new();
        let (name, section) = block(
            &first("upstream app { server 10.0.0.1:81 weight=3 max_fails=2 fail_timeout=30s; server b; server c backup; keepalive 16; least_conn; }"),
            &mut notes,
        );
        assert_eq!(name, "app");
        let text = crate::import_nginx::toml_out::value(section.get("servers").unwrap());
        assert_eq!(
            text,
            r#"[{ address = "10.0.0.1:81", weight = 3, max_fails = 2, fail_timeout = "30s" }, "b:80"]"#
        );
        assert_eq!(section.get("keepalive"), Some(&Value::Int(16)));
        assert!(section.comments.iter().any(|c| c.contains("backup")));
        assert_eq!(
            section.get("balance"),
            Some(&Value::Str("least_conn".into()))
        );
    }

    #[test]
    fn unix_servers_and_hash_balance() {
        let mut notes = Vec::new();
        let (_, section) = block(
            &first("upstream app { server unix:/run/app.sock weight=2; server unix:rel.sock; hash $request_uri consistent; }"),
            &mut notes,
        );
        let text = crate::import_nginx::toml_out::value(section.get("servers").unwrap());
        assert_eq!(text, r#"[{ address = "unix:/run/app.sock", weight = 2 }]"#);
        assert!(section.comments.iter().any(|c| c.contains("unix:rel.sock")));
        assert_eq!(section.get("balance"), Some(&Value::Str("hash".into())));
        assert_eq!(
            section.get("hash_key"),
            Some(&Value::Str("$request_uri".into()))
        );
        let (_, plain) = block(
            &first("upstream b { server a:1; hash $arg_id; }"),
            &mut notes,
        );
        assert_eq!(plain.get("hash_key"), Some(&Value::Str("$arg_id".into())));
        assert!(plain
            .entries
            .iter()
            .any(|e| e.comments.iter().any(|c| c.contains("differs"))));
        let (_, odd) = block(
            &first("upstream c { server a:1; hash $remote_addr; }"),
            &mut notes,
        );
        assert!(odd.get("balance").is_none());
    }

    /// Mastodon's `server 127.0.0.1:3000 fail_timeout=0;`: calmcache's
    /// check refuses fail_timeout = "0s"; NGINX's meaning is a server never
    /// kept out, max_fails = 0 (issue 28, importer mistake 2).
    #[test]
    fn fail_timeout_zero_is_a_server_never_marked_down() {
        for line in [
            "server 127.0.0.1:3000 fail_timeout=0;",
            "server 127.0.0.1:3000 max_fails=3 fail_timeout=0s;",
            "server 127.0.0.1:3000 fail_timeout=0 max_fails=3;",
        ] {
            let mut notes = Vec::new();
            let (_, section) = block(&first(&format!("upstream app {{ {line} }}")), &mut notes);
            let text = crate::import_nginx::toml_out::value(section.get("servers").unwrap());
            assert_eq!(
                text, r#"[{ address = "127.0.0.1:3000", max_fails = 0 }]"#,
                "{line}"
            );
            assert!(
                section
                    .comments
                    .iter()
                    .any(|c| c.contains("fail_timeout=0")),
                "{line}: {:?}",
                section.comments
            );
        }
    }
}
