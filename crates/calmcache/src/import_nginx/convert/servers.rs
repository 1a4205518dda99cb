//! The `server` and `location` contexts: a server block's `listen`s,
//! certificates and settings, and its locations as read (not yet ordered).

use super::*;

impl Converter<'_> {
    pub(super) fn server_block(&mut self, d: &Directive, http: &Settings) {
        let dirs = d.children();
        ledger::carried(d);
        let settings = http.child(dirs);
        let mut server = Server {
            default: false,
            names: Names::new(format!("server ({})", d.pos)),
            listens: Vec::new(),
            locations: Vec::new(),
            settings: settings.clone(),
            ret: None,
            pos: Some(d.pos.clone()),
        };
        let mut certs = Vec::new();
        let mut keys = Vec::new();
        let tls_before = self.tls_listen.len();
        for c in dirs {
            match c.name.as_str() {
                "listen" => {
                    server.default |= self.listen(c);
                    let addr = c.args.first().map(String::as_str).unwrap_or("80");
                    server
                        .listens
                        .push(listen_address(addr).map_or(addr.to_owned(), |(a, _)| a));
                }
                "location" => self.location(c, &settings, &mut server.locations),
                "return" => server.ret = Some(c.clone()),
                "ssl_certificate" => certs.push(c.clone()),
                "ssl_certificate_key" => keys.push(c.clone()),
                "server_name" => {
                    ledger::carried(c);
                    server.names.read(c, &mut self.top)
                }
                "ssl" if c.args.first().map(String::as_str) == Some("on") => {
                    self.top.push(note_skipped(
                        c,
                        "list the TLS addresses in server.tls_listen (done for `listen ... ssl`)",
                    ))
                }
                _ => self.http_directive(c),
            }
        }
        if certs.is_empty() && keys.is_empty() && self.tls_listen.len() > tls_before {
            (certs, keys) = self.http_certs.clone();
        }
        for (cert, key) in certs.iter().zip(keys.iter()) {
            ledger::carried(cert);
            ledger::carried(key);
            let cert_path = Value::Str(self.absolute(&cert.args[0]));
            if self.tls.iter().any(|t| t.get("cert") == Some(&cert_path)) {
                continue;
            }
            let mut section = Section::new("[[server.tls]]");
            section.note(format!(
                "From `{}` ({}) and `{}` ({}). calmcache picks the certificate by the client's SNI \
                 among the names in it; the first is the default.",
                cert.text(),
                cert.pos,
                key.text(),
                key.pos
            ));
            section.set("cert", cert_path);
            section.set("key", Value::Str(self.absolute(&key.args[0])));
            self.tls.push(section);
        }
        if certs.len() != keys.len() {
            self.top.push(format!(
                "server ({}): {} ssl_certificate and {} ssl_certificate_key: only pairs are carried over.",
                d.pos,
                certs.len(),
                keys.len()
            ));
        }
        if server.listens.is_empty() {
            server.listens.push("0.0.0.0:80".into()); // NGINX's default
        }
        server.listens.sort();
        server.listens.dedup();
        self.servers.push(server);
    }

    pub(super) fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') || path.starts_with("data:") {
            path.to_owned()
        } else {
            self.prefix.join(path).display().to_string()
        }
    }

    /// `listen ...`; returns whether it is `default_server`.
    pub(super) fn listen(&mut self, d: &Directive) -> bool {
        let Some(addr) = d.args.first() else {
            return false;
        };
        let mut ssl = false;
        let mut default = false;
        let mut proxy_protocol = false;
        for param in &d.args[1..] {
            match param.as_str() {
                "ssl" => ssl = true,
                "proxy_protocol" => proxy_protocol = true,
                "http2" => {}
                "default_server" | "default" => default = true,
                p if p.starts_with("backlog=") => {
                    if let Ok(n) = p["backlog=".len()..].parse::<i64>() {
                        self.server_set(d, "backlog", Value::Int(n));
                    }
                }
                "reuseport" => {}
                p => self.top.push(format!(
                    "not carried over: `{p}` of `{}` ({}): calmcache has no equivalent",
                    d.text(),
                    d.pos
                )),
            }
        }
        if !ssl && d.args.iter().any(|a| a == "http2") {
            self.h2c = true;
        }
        match listen_address(addr) {
            Ok((address, note)) => {
                ledger::carried(d);
                if let Some(note) = note {
                    self.top.push(format!("`{}` ({}): {note}", d.text(), d.pos));
                }
                if proxy_protocol {
                    self.real_ip.listener(&address);
                }
                let list = if ssl {
                    &mut self.tls_listen
                } else {
                    &mut self.listen
                };
                if !list.contains(&address) {
                    list.push(address);
                }
            }
            Err(why) => self.top.push(note_skipped(d, &why)),
        }
        default
    }

    /// A `location`, with the ones nested in it.
    pub(super) fn location(&mut self, d: &Directive, parent: &Settings, out: &mut Vec<Location>) {
        let settings = parent.child(d.children());
        let (modifier, pattern) = match d.args.as_slice() {
            [m, p] if m == "=" => (Modifier::Exact, p.clone()),
            [m, p] if m == "^~" => (Modifier::NoRegex, p.clone()),
            [m, p] if m == "~" => (
                Modifier::Regex {
                    case_insensitive: false,
                },
                p.clone(),
            ),
            [m, p] if m == "~*" => (
                Modifier::Regex {
                    case_insensitive: true,
                },
                p.clone(),
            ),
            [p] if p.starts_with('@') => (Modifier::Named, p.clone()),
            [p] => (Modifier::Prefix, p.clone()),
            _ => {
                self.top
                    .push(note_skipped(d, "not a location NGINX accepts"));
                return;
            }
        };
        let mut loc = Location {
            modifier,
            pattern,
            settings,
            pass: None,
            try_named: None,
            ret: None,
            internal: None,
            files: None,
            handler: None,
            directive: Some(d.clone()),
            pos: d.pos.clone(),
            notes: Vec::new(),
            nested: Vec::new(),
        };
        for c in d.children() {
            match c.name.as_str() {
                "proxy_pass" => loc.pass = Some(c.clone()),
                "location" => {
                    let settings = loc.settings.clone();
                    self.location(c, &settings, &mut loc.nested);
                }
                "try_files" if c.args.last().is_some_and(|a| a.starts_with('@')) => {
                    loc.try_named = Some(c.clone())
                }
                "return" => loc.ret = Some(c.clone()),
                "internal" => loc.internal = Some(c.clone()),
                "try_files" | "alias" if files::shape(c) => loc.files = Some(c.clone()),
                n if super::super::settings::inherited(n) => {}
                n => {
                    if !files::beside(n) && loc.handler.is_none() {
                        loc.handler = Some(c.clone());
                    }
                    let before = self.top.len();
                    self.http_directive(c);
                    // Comments about this location's own directives go on its route.
                    loc.notes.extend(self.top.drain(before..));
                }
            }
        }
        out.push(loc);
    }

    pub(super) fn finish_server(&mut self) {
        let mut listen = std::mem::take(&mut self.listen);
        if listen.is_empty() && self.tls_listen.is_empty() {
            listen.push("0.0.0.0:80".into());
            self.server
                .note("No listen directive: NGINX's default is *:80.");
        }
        if !self.tls_listen.is_empty() && self.tls.is_empty() {
            self.server.note(format!(
                "not carried over: the TLS listen addresses {:?}: no ssl_certificate/ssl_certificate_key pair.",
                self.tls_listen
            ));
            self.tls_listen.clear();
            if listen.is_empty() {
                listen.push("0.0.0.0:80".into());
            }
        }
        let mut entries = std::mem::take(&mut self.server.entries);
        if !listen.is_empty() {
            self.server.set(
                "listen",
                Value::List(listen.into_iter().map(Value::Str).collect()),
            );
        }
        if !self.tls_listen.is_empty() {
            self.server
                .set(
                    "tls_listen",
                    Value::List(self.tls_listen.drain(..).map(Value::Str).collect()),
                )
                .note("TLS listeners offer HTTP/2 and HTTP/1.1 by ALPN.");
        }
        if self.h2c {
            self.server
                .set("h2c", Value::Bool(true))
                .note("`http2` on a plain listen: HTTP/2 with prior knowledge.");
        }
        self.server.entries.append(&mut entries);
        self.finish_real_ip();
    }
}

/// A `listen` address as calmcache's "ip:port"; a note when it changed.
pub(super) fn listen_address(addr: &str) -> Result<(String, Option<String>), String> {
    if addr.starts_with("unix:") {
        return Err("calmcache listens on TCP only".into());
    }
    if addr.chars().all(|c| c.is_ascii_digit()) {
        return Ok((format!("0.0.0.0:{addr}"), None));
    }
    let (host, port) = match addr.rsplit_once(':') {
        Some((h, p))
            if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() && !addr.ends_with(']') =>
        {
            (h, p)
        }
        _ => (addr, "80"),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host == "*" {
        return Ok((format!("0.0.0.0:{port}"), None));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok((
            std::net::SocketAddr::new(ip, port.parse().unwrap_or(80)).to_string(),
            None,
        ));
    }
    if host == "localhost" {
        return Ok((
            format!("127.0.0.1:{port}"),
            Some("calmcache listens on IP addresses: localhost is 127.0.0.1 (add \"[::1]:PORT\" for IPv6).".into()),
        ));
    }
    Ok((
        format!("0.0.0.0:{port}"),
        Some(format!(
            "{host} is a host name and calmcache listens on IP addresses only: written as 0.0.0.0 (every address); put the address it resolves to."
        )),
    ))
}
