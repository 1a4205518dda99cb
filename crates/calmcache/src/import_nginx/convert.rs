//! Walks the directive tree and builds the calmcache document.
//!
//! Owns the contexts (main, `events`, `http`, `server`, `location`), the
//! `[server]` keys (`listen`, TLS certificates, client timeouts,
//! `worker_connections`), and NGINX's location selection turned into
//! first-match routes: exact `=` locations first, then `^~` prefixes
//! (longest first), then the regex locations in file order, then the other
//! prefixes (longest first). That order picks the same location for every
//! path unless a plain prefix extends a `^~` one, which gets a comment. The
//! servers' routes come in the groups `server_names` plans (NGINX's choice
//! of a server by Host), each restricted to its `hosts`. A fragment without
//! `http { }` (as blog posts show them) is read as if it were inside one.

use std::collections::HashSet;
use std::path::Path;

use super::cache;
use super::lexer::Pos;
use super::pathre::{self, RouteRegex};
use super::server_names::{self, Names};
use super::settings::Settings;
use super::toml_out::{Doc, Section, Value};
use super::tree::Directive;
use super::units;
use super::upstreams;
use super::zones::{Choice, Zones};
use super::{note_skipped, ImportError, Notes};

/// The upstream written when the config does not say where requests go.
const PLACEHOLDER: &str = "origin";

/// How a location matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Modifier {
    Exact,
    NoRegex,
    Prefix,
    Regex { case_insensitive: bool },
}

struct Location {
    modifier: Modifier,
    pattern: String,
    settings: Settings,
    pass: Option<Directive>,
    pos: Pos,
    notes: Notes,
}

struct Server {
    default: bool,
    /// Its `server_name`s.
    names: Names,
    /// The addresses of its `listen`s, as calmcache writes them, sorted.
    listens: Vec<String>,
    locations: Vec<Location>,
    /// The server's own settings, for a server without locations.
    settings: Settings,
    pos: Option<Pos>,
}

struct Converter<'a> {
    prefix: &'a Path,
    top: Notes,
    server: Section,
    listen: Vec<String>,
    tls_listen: Vec<String>,
    h2c: bool,
    tls: Vec<Section>,
    upstream_blocks: Vec<(String, Section)>,
    direct: Vec<(String, Section)>,
    zones: Zones,
    servers: Vec<Server>,
    worker_processes: Option<i64>,
    access_log: Option<Section>,
    placeholder: bool,
    /// `ssl_certificate` / `ssl_certificate_key` at http level: servers
    /// without their own inherit them.
    http_certs: (Vec<Directive>, Vec<Directive>),
}

/// The calmcache document for `tree` (`prefix`: the main file's directory,
/// for relative certificate paths; `main`: its name, for the header).
pub(crate) fn convert(tree: &[Directive], prefix: &Path, main: &str) -> Result<Doc, ImportError> {
    let mut c = Converter {
        prefix,
        top: Vec::new(),
        server: Section::new("[server]"),
        listen: Vec::new(),
        tls_listen: Vec::new(),
        h2c: false,
        tls: Vec::new(),
        upstream_blocks: Vec::new(),
        direct: Vec::new(),
        zones: Zones::default(),
        servers: Vec::new(),
        worker_processes: None,
        access_log: None,
        placeholder: false,
        http_certs: (Vec::new(), Vec::new()),
    };
    if tree.iter().any(|d| d.name == "http") {
        for d in tree {
            match d.name.as_str() {
                "http" => c.http(d.children()),
                _ => c.main_directive(d),
            }
        }
    } else {
        c.top.push(
            "The config has no http { } block: its directives are read as if they were inside one."
                .into(),
        );
        c.http(tree);
    }
    Ok(c.document(main))
}

impl Converter<'_> {
    /// Main-context directives (and `events`).
    fn main_directive(&mut self, d: &Directive) {
        match d.name.as_str() {
            "events" => {
                for e in d.children() {
                    self.main_directive(e);
                }
            }
            "worker_connections" => self.worker_connections(d),
            "worker_processes" => match d.args.first().map(String::as_str) {
                Some("auto") => self.top.push(format!(
                    "`{}` ({}): calmcache runs one worker thread per core by default (server.threads).",
                    d.text(),
                    d.pos
                )),
                Some(n) => match n.parse::<i64>() {
                    Ok(n) => {
                        self.worker_processes = Some(n);
                        self.server.set("threads", Value::Int(n)).note(format!(
                            "From `{}` ({}): worker threads in one process.",
                            d.text(),
                            d.pos
                        ));
                    }
                    Err(_) => self.top.push(note_skipped(d, "not a number")),
                },
                None => {}
            },
            "use" | "multi_accept" | "accept_mutex" | "accept_mutex_delay" => self.top.push(note_skipped(
                d,
                "calmcache uses epoll with one SO_REUSEPORT socket per worker thread, accepting in a loop",
            )),
            "worker_rlimit_nofile" => self.top.push(note_skipped(
                d,
                "calmcache raises its open files limit to the hard limit at start (set LimitNOFILE in systemd)",
            )),
            "user" | "pid" | "daemon" | "master_process" | "worker_cpu_affinity" | "worker_priority"
            | "pcre_jit" | "load_module" | "thread_pool" | "env" | "lock_file" | "timer_resolution"
            | "worker_shutdown_timeout" => self.top.push(note_skipped(
                d,
                "calmcache runs as one process in the foreground; its service manager sets the user",
            )),
            "error_log" => self.top.push(note_skipped(
                d,
                "calmcache logs to stderr (level from CALMCACHE_LOG, e.g. info)",
            )),
            _ => self.http_directive(d),
        }
    }

    fn worker_connections(&mut self, d: &Directive) {
        let Some(n) = d.args.first().and_then(|n| n.parse::<i64>().ok()) else {
            self.top.push(note_skipped(d, "not a number"));
            return;
        };
        let total = n * self.worker_processes.unwrap_or(1);
        self.server
            .set("max_connections", Value::Int(total))
            .note(format!(
            "From `{}` ({}): NGINX's limit is per worker process and counts upstream connections \
             too; calmcache's max_connections counts client connections of all threads together. \
             With worker_processes auto NGINX allows cores x {n}: raise this to match.",
            d.text(),
            d.pos
        ));
    }

    /// An `http` block, or a fragment read as one.
    fn http(&mut self, dirs: &[Directive]) {
        let settings = Settings::default().child(dirs);
        // Zones, maps and upstreams first: servers anywhere in the block use them.
        for d in dirs {
            match d.name.as_str() {
                "proxy_cache_path" => self.zones.path(d, &mut self.top),
                "map" | "split_clients" if d.block.is_some() => self.zones.variable(d),
                "upstream" if d.block.is_some() => {
                    let block = upstreams::block(d, &mut self.top);
                    self.upstream_blocks.push(block);
                }
                _ => {}
            }
        }
        let mut loose = Vec::new();
        for d in dirs {
            match d.name.as_str() {
                "proxy_cache_path" | "map" | "split_clients" | "upstream" => {}
                "ssl_certificate" => self.http_certs.0.push(d.clone()),
                "ssl_certificate_key" => self.http_certs.1.push(d.clone()),
                "server" if d.block.is_some() => self.server_block(d, &settings),
                "location" => loose.push(d.clone()),
                "events"
                | "worker_connections"
                | "worker_processes"
                | "user"
                | "error_log"
                | "pid"
                | "worker_rlimit_nofile"
                | "use"
                | "multi_accept" => self.main_directive(d),
                _ => self.http_directive(d),
            }
        }
        if !loose.is_empty() || self.servers.is_empty() {
            // A fragment: locations (or only settings) outside any server.
            let mut server = Server {
                default: false,
                names: Names::new("The locations outside any server".into()),
                listens: Vec::new(),
                locations: Vec::new(),
                settings: settings.clone(),
                pos: None,
            };
            for d in &loose {
                self.location(d, &settings, &mut server.locations);
            }
            self.servers.push(server);
        }
    }

    /// Directives of `http` or `server` that are not blocks we descend into.
    fn http_directive(&mut self, d: &Directive) {
        let name = d.name.as_str();
        if super::settings::inherited(name) {
            return; // read per location
        }
        let arg = d.args.first().map(String::as_str).unwrap_or("");
        match name {
            "keepalive_timeout" => {
                if units::millis(arg) == Some(0) {
                    self.top.push(note_skipped(d, "calmcache always keeps connections alive between requests"));
                } else {
                    self.server_time(d, "keepalive_timeout");
                }
                if d.args.len() > 1 {
                    self.top.push(format!(
                        "not carried over: the second argument of `{}` ({}): calmcache sends no Keep-Alive header",
                        d.text(),
                        d.pos
                    ));
                }
            }
            "client_header_timeout" => self.server_time(d, "header_read_timeout"),
            "send_timeout" => self.server_time(d, "send_timeout"),
            "keepalive_requests" => match arg.parse::<i64>() {
                Ok(n) => self.server_set(d, "keepalive_requests", Value::Int(n)),
                Err(_) => self.top.push(note_skipped(d, "not a number")),
            },
            "http2" if arg == "on" => {
                self.h2c = true;
            }
            "access_log" => self.access_log(d),
            "error_log" => self.main_directive(d),
            "listen" | "server_name" => {
                self.top.push(note_skipped(d, "only meaningful inside a server block"))
            }
            "gzip" => self.top.push(note_skipped(
                d,
                "calmcache compresses only with the route key compress = [\"gzip\"] (or \"br\"), once per stored object",
            )),
            "expires" | "add_header" => self.top.push(note_skipped(
                d,
                "calmcache does not change response headers; set them at the origin",
            )),
            "root" | "index" | "try_files" | "return" | "rewrite" | "alias" | "autoindex" | "error_page"
            | "types" | "default_type" => self.top.push(note_skipped(
                d,
                "calmcache does not serve files or write answers itself: the origin does",
            )),
            "sendfile" | "tcp_nopush" | "tcp_nodelay" | "aio" | "directio" | "output_buffers" => self
                .top
                .push(note_skipped(d, "calmcache picks its own socket and file I/O (splice, page cache)")),
            "resolver" | "resolver_timeout" => self.top.push(note_skipped(d, "calmcache resolves upstream host names with the system resolver")),
            "ssl_protocols" | "ssl_ciphers" | "ssl_prefer_server_ciphers" | "ssl_session_cache"
            | "ssl_session_timeout" | "ssl_session_tickets" | "ssl_dhparam" | "ssl_ecdh_curve" | "ssl_stapling" => {
                self.top.push(note_skipped(d, "calmcache's TLS (rustls) offers TLS 1.2 and 1.3 with its own cipher suites"))
            }
            "status_zone" | "zone" => self.top.push(note_skipped(d, "NGINX Plus monitoring: calmcache has /status, /metrics and a dashboard ([admin])")),
            "large_client_header_buffers" | "client_header_buffer_size" => self.top.push(note_skipped(
                d,
                "calmcache takes request heads up to server.max_header_size (default 64KiB)",
            )),
            "client_max_body_size" | "client_body_timeout" | "client_body_buffer_size" => {
                self.top.push(note_skipped(d, "calmcache streams request bodies to the origin without a size limit"))
            }
            "if" | "set" | "limit_req" | "limit_conn" | "limit_req_zone" | "limit_conn_zone" | "allow" | "deny"
            | "auth_basic" | "auth_request" => self.top.push(note_skipped(d, "calmcache has no equivalent")),
            _ => self.top.push(note_skipped(d, "calmcache has no equivalent")),
        }
    }

    fn server_time(&mut self, d: &Directive, key: &str) {
        match d.args.first().and_then(|t| units::duration(t)) {
            Some(t) => self.server_set(d, key, Value::Str(t)),
            None => self.top.push(note_skipped(d, "not an NGINX time")),
        }
    }

    fn server_set(&mut self, d: &Directive, key: &str, value: Value) {
        let mut notes = Vec::new();
        upstreams::set_once(&mut self.server, key, value, d, &mut notes);
        self.server.comments.extend(notes);
    }

    fn access_log(&mut self, d: &Directive) {
        let arg = d.args.first().map(String::as_str).unwrap_or("off");
        if arg == "off" || self.access_log.is_some() {
            if arg != "off" {
                self.top
                    .push(note_skipped(d, "calmcache writes one access log"));
            }
            return;
        }
        let path = Path::new(arg);
        if !path.is_absolute() || !path.parent().is_some_and(Path::exists) {
            self.top.push(note_skipped(
                d,
                "calmcache's [access_log] path needs an absolute file in an existing directory",
            ));
            return;
        }
        let mut section = Section::new("[access_log]");
        section.note(format!(
            "From `{}` ({}): NGINX's combined format plus cache status and timings.",
            d.text(),
            d.pos
        ));
        section.set("path", Value::Str(arg.to_owned()));
        self.access_log = Some(section);
    }

    fn server_block(&mut self, d: &Directive, http: &Settings) {
        let dirs = d.children();
        let settings = http.child(dirs);
        let mut server = Server {
            default: false,
            names: Names::new(format!("server ({})", d.pos)),
            listens: Vec::new(),
            locations: Vec::new(),
            settings: settings.clone(),
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
                "ssl_certificate" => certs.push(c.clone()),
                "ssl_certificate_key" => keys.push(c.clone()),
                "server_name" => server.names.read(c, &mut self.top),
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

    fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') || path.starts_with("data:") {
            path.to_owned()
        } else {
            self.prefix.join(path).display().to_string()
        }
    }

    /// `listen ...`; returns whether it is `default_server`.
    fn listen(&mut self, d: &Directive) -> bool {
        let Some(addr) = d.args.first() else {
            return false;
        };
        let mut ssl = false;
        let mut default = false;
        for param in &d.args[1..] {
            match param.as_str() {
                "ssl" => ssl = true,
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
                if let Some(note) = note {
                    self.top.push(format!("`{}` ({}): {note}", d.text(), d.pos));
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

    /// A `location` (and the ones nested in it, flattened).
    fn location(&mut self, d: &Directive, parent: &Settings, out: &mut Vec<Location>) {
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
            [p] if p.starts_with('@') => {
                self.top.push(note_skipped(
                    d,
                    "named locations (error_page/try_files targets) have no calmcache equivalent",
                ));
                return;
            }
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
            pos: d.pos.clone(),
            notes: Vec::new(),
        };
        let mut nested = Vec::new();
        for c in d.children() {
            match c.name.as_str() {
                "proxy_pass" => loc.pass = Some(c.clone()),
                "location" => nested.push(c.clone()),
                n if super::settings::inherited(n) => {}
                _ => {
                    let before = self.top.len();
                    self.http_directive(c);
                    // Comments about this location's own directives go on its route.
                    loc.notes.extend(self.top.drain(before..));
                }
            }
        }
        for n in &nested {
            loc.notes.push(format!(
                "The location at {} is nested in this one; it is written as a route of its own before it (NGINX matches nested locations within their parent only).",
                n.pos
            ));
            self.location(n, &loc.settings.clone(), out);
        }
        out.push(loc);
    }

    /// Builds the document once everything is read.
    fn document(mut self, main: &str) -> Doc {
        let mut routes = Vec::new();
        let servers = std::mem::take(&mut self.servers);
        self.host_groups(&servers, &mut routes);
        let mut doc = Doc::default();
        doc.header.push(format!(
            "calmcache config imported from the NGINX config {main} by `calmcache import-nginx`."
        ));
        doc.header.push("Check it with `calmcache check -c FILE`. Comments say what was not carried over and why, and where calmcache behaves differently.".into());
        doc.header.push(String::new());
        doc.header.extend(std::mem::take(&mut self.top));
        self.finish_server();
        doc.sections
            .push(std::mem::replace(&mut self.server, Section::new("")));
        doc.sections.append(&mut self.tls);
        let used: HashSet<String> = routes
            .iter()
            .filter_map(|r: &Section| match r.get("upstream") {
                Some(Value::Str(u)) => Some(u.clone()),
                _ => None,
            })
            .collect();
        for (name, mut section) in self.upstream_blocks.drain(..) {
            if !used.contains(&name) {
                section.note("No proxy_pass uses this upstream.");
            }
            doc.sections.push(section);
        }
        for (_, section) in self.direct.drain(..) {
            doc.sections.push(section);
        }
        if self.placeholder {
            let mut section = Section::new(format!("[upstreams.{PLACEHOLDER}]"));
            section.note(
                "PLACEHOLDER: the NGINX config does not say where (some) requests go (no proxy_pass); \
                 write your origin's address here.",
            );
            section.set(
                "servers",
                Value::List(vec![Value::Str("127.0.0.1:8080".into())]),
            );
            doc.sections.push(section);
        }
        for (_, section, _) in self.zones.zones.drain(..) {
            doc.sections.push(section);
        }
        doc.sections.extend(routes);
        if let Some(log) = self.access_log.take() {
            doc.sections.push(log);
        }
        doc
    }

    /// Every server's routes in the groups that pick NGINX's server by Host
    /// (see server_names), each group's routes restricted to its hosts.
    fn host_groups(&mut self, servers: &[Server], routes: &mut Vec<Section>) {
        let default = servers.iter().position(|s| s.default).unwrap_or(0);
        let names: Vec<&Names> = servers.iter().map(|s| &s.names).collect();
        let (groups, notes) = server_names::plan(&names, default);
        if servers.len() > 1 {
            self.top.push(
                "NGINX chooses a server block by Host: the routes carry each server's server_name \
                 as hosts, in the order that makes the first match NGINX's choice (exact names, then \
                 wildcards, longest first, then the default server for every other Host). A server \
                 can appear in several groups."
                    .into(),
            );
        } else if servers.iter().any(|s| s.names.usable()) {
            self.top.push(
                "server_name: NGINX answers every Host with the only server block, so its routes \
                 have no hosts."
                    .into(),
            );
        }
        if servers.windows(2).any(|w| w[0].listens != w[1].listens) {
            self.top.push(
                "The server blocks listen on different addresses: NGINX chooses among the servers \
                 of the address a request came in on, calmcache's routes serve every listener."
                    .into(),
            );
        }
        self.top.extend(notes);
        // Each server's routes are built once (their notes written once),
        // then copied into every group it is in.
        let mut built: Vec<Option<Vec<Section>>> = vec![None; servers.len()];
        for group in groups {
            let server = &servers[group.server];
            let first = routes.len();
            let own = match &built[group.server] {
                Some(own) => own.clone(),
                None => {
                    let mut own = Vec::new();
                    self.server_routes(server, &mut own);
                    built[group.server] = Some(own.clone());
                    own
                }
            };
            routes.extend(own);
            let Some(hosts) = group.hosts else {
                if let Some(route) = routes.get_mut(first).filter(|_| !group.note.is_empty()) {
                    route.comments.insert(0, group.note);
                }
                continue;
            };
            let list = Value::List(hosts.into_iter().map(Value::Str).collect());
            for route in &mut routes[first..] {
                route.set_first("hosts", list.clone());
            }
            if let Some(route) = routes.get_mut(first) {
                route.comments.insert(0, group.note);
                if !covers_every_path(server) {
                    route.comments.insert(
                        1,
                        "This server has no location for every path: a path none of its \
                         locations match goes on to the routes below, where NGINX would answer it \
                         from this server (usually 404)."
                            .into(),
                    );
                }
            }
        }
    }

    fn finish_server(&mut self) {
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
    }

    /// The routes of one server, in the order that picks NGINX's location.
    fn server_routes(&mut self, server: &Server, routes: &mut Vec<Section>) {
        if server.locations.is_empty() {
            let loc = Location {
                modifier: Modifier::Prefix,
                pattern: "/".into(),
                settings: server.settings.clone(),
                pass: None,
                pos: server.pos.clone().unwrap_or(Pos {
                    file: "-".into(),
                    line: 0,
                }),
                notes: vec!["This server has no location: one route for every path.".into()],
            };
            self.location_routes(&loc, None, routes);
            return;
        }
        let (order, notes) = order(&server.locations);
        self.top.extend(notes);
        for i in order {
            let loc = &server.locations[i];
            let m = match loc.modifier {
                Modifier::Exact => Ok(Some(pathre::exact(&loc.pattern))),
                Modifier::NoRegex | Modifier::Prefix if loc.pattern == "/" => Ok(None),
                Modifier::NoRegex | Modifier::Prefix => Ok(Some(pathre::prefix(&loc.pattern))),
                Modifier::Regex { case_insensitive } => {
                    pathre::location(&loc.pattern, case_insensitive).map(Some)
                }
            };
            match m {
                Ok(m) => self.location_routes(loc, m, routes),
                Err(why) => self.top.push(format!(
                    "not carried over: location {} ({}): {why}",
                    loc.pattern, loc.pos
                )),
            }
        }
    }

    /// The route (or, for a `map`-chosen zone, routes) of one location.
    fn location_routes(
        &mut self,
        loc: &Location,
        m: Option<RouteRegex>,
        routes: &mut Vec<Section>,
    ) {
        let mut notes = loc.notes.clone();
        let upstream = self.upstream_for(loc, &mut notes);
        let choice = match loc.settings.last("proxy_cache") {
            Some(d) => self.zones.choice(d, &mut notes),
            None => Choice::Off,
        };
        let plan = plan(m, choice, &mut notes);
        let first = routes.len();
        for (i, (m, choice)) in plan.into_iter().enumerate() {
            let mut route = Section::new("[[routes]]");
            if i == 0 {
                route.note(format!("location {} ({})", describe(loc), loc.pos));
            } else {
                route.note(format!(
                    "location {} ({}), map entry {i}",
                    describe(loc),
                    loc.pos
                ));
            }
            for m in m {
                route.set(m.key(), Value::Str(m.regex().to_owned()));
            }
            route.set("upstream", Value::Str(upstream.clone()));
            let inactive = match &choice {
                Choice::One(z) => {
                    route.set("zone", Value::Str(z.clone()));
                    Some(self.zones.inactive(z))
                }
                Choice::Hash(zs) => {
                    route.set(
                        "zones",
                        Value::List(zs.iter().cloned().map(Value::Str).collect()),
                    );
                    zs.iter().map(|z| self.zones.inactive(z)).max()
                }
                Choice::Off | Choice::ByMatch(..) => None,
            };
            if let Some(inactive) = inactive {
                cache::caching_keys(&mut route, &loc.settings, &upstream, inactive);
            }
            if let Some((ws, why)) = cache::websocket(&loc.settings) {
                route.set("websocket", Value::Bool(ws)).note(why);
            }
            if i > 0 {
                // The first route of the location carries the explanations.
                route.comments.truncate(1);
                route.note("The comments of the first route of this location apply here too.");
                route.entries.iter_mut().for_each(|e| e.comments.clear());
            }
            routes.push(route);
        }
        let route = &mut routes[first];
        cache::others(route, &loc.settings);
        route.comments.extend(notes);
    }

    /// The upstream a location sends to (a placeholder without proxy_pass).
    fn upstream_for(&mut self, loc: &Location, notes: &mut Notes) -> String {
        let Some(pass) = &loc.pass else {
            notes.push(
                "No proxy_pass: NGINX answers these requests itself (files, return, ...); calmcache \
                 only proxies, so they go to the placeholder upstream."
                    .into(),
            );
            self.placeholder = true;
            return PLACEHOLDER.into();
        };
        let target = match upstreams::target(pass) {
            Ok(t) => t,
            Err(why) => {
                notes.push(note_skipped(pass, &why));
                self.placeholder = true;
                return PLACEHOLDER.into();
            }
        };
        if let Some(uri) = &target.uri {
            if uri != "/" || loc.pattern != "/" {
                notes.push(format!(
                    "`{}` ({}): NGINX replaces the matched location prefix with {uri}; calmcache sends the \
                     request's path unchanged.",
                    pass.text(),
                    pass.pos
                ));
            }
        }
        let block = self
            .upstream_blocks
            .iter()
            .position(|(n, _)| *n == target.host);
        let (name, section) = match block {
            Some(i) => {
                let (name, section) = &mut self.upstream_blocks[i];
                (name.clone(), section)
            }
            None => {
                let name = upstreams::direct_name(&target.host);
                if !self.direct.iter().any(|(n, _)| *n == name) {
                    self.direct
                        .push((name.clone(), upstreams::direct(&target, pass)));
                }
                let (_, section) = self
                    .direct
                    .iter_mut()
                    .find(|(n, _)| *n == name)
                    .expect("just added");
                (name, section)
            }
        };
        upstreams::location_keys(section, &loc.settings, target.tls, notes);
        if block.is_none() {
            // A direct upstream has the scheme in its server string.
            section.entries.retain(|e| e.key != "tls");
        }
        name
    }
}

/// Whether some location of `server` matches every path (NGINX's `location /`).
fn covers_every_path(server: &Server) -> bool {
    server.locations.is_empty()
        || server
            .locations
            .iter()
            .any(|l| matches!(l.modifier, Modifier::Prefix | Modifier::NoRegex) && l.pattern == "/")
}

/// The routes of one location: its own regex (`path`) and, for a
/// `map`-chosen zone, one route per map entry, the location's `path` beside
/// the entry's `match`; then the default zone. Two regexes for the same key
/// (a location and a map on `$uri`) cannot share a route: the default only.
fn plan(
    m: Option<RouteRegex>,
    choice: Choice,
    notes: &mut Notes,
) -> Vec<(Vec<RouteRegex>, Choice)> {
    let own: Vec<RouteRegex> = m.into_iter().collect();
    let Choice::ByMatch(entries, default) = choice else {
        return vec![(own, choice)];
    };
    let mut plan = Vec::new();
    let clash = entries
        .iter()
        .any(|(entry, _)| own.iter().any(|m| m.key() == entry.key()));
    if clash {
        notes.push(
            "The map's entries and this location both match the path, which one calmcache route \
             cannot hold twice: this location caches in the map's default zone only."
                .into(),
        );
    } else {
        for (entry, zone) in entries {
            let mut both = own.clone();
            both.push(entry);
            plan.push((both, zone));
        }
    }
    plan.push((own, *default));
    plan
}

/// `= /x`, `^~ /x`, `~ re`, `/x`.
fn describe(loc: &Location) -> String {
    match loc.modifier {
        Modifier::Exact => format!("= {}", loc.pattern),
        Modifier::NoRegex => format!("^~ {}", loc.pattern),
        Modifier::Prefix => loc.pattern.clone(),
        Modifier::Regex {
            case_insensitive: false,
        } => format!("~ {}", loc.pattern),
        Modifier::Regex {
            case_insensitive: true,
        } => format!("~* {}", loc.pattern),
    }
}

/// Location indexes in first-match order (see the module doc), and notes
/// where the order cannot be exact.
fn order(locs: &[Location]) -> (Vec<usize>, Notes) {
    let mut notes = Vec::new();
    let by = |m: fn(&Modifier) -> bool| -> Vec<usize> {
        (0..locs.len()).filter(|&i| m(&locs[i].modifier)).collect()
    };
    let exact = by(|m| *m == Modifier::Exact);
    let mut no_regex = by(|m| *m == Modifier::NoRegex);
    let regex = by(|m| matches!(m, Modifier::Regex { .. }));
    let mut prefix = by(|m| *m == Modifier::Prefix);
    // A plain prefix that extends a ^~ one is the longest match for its paths,
    // so regexes would come first there; it must also come before the ^~ route.
    let extends: Vec<usize> = prefix
        .iter()
        .copied()
        .filter(|&q| {
            no_regex.iter().any(|&p| {
                locs[q].pattern.len() > locs[p].pattern.len()
                    && locs[q].pattern.starts_with(&locs[p].pattern)
            })
        })
        .collect();
    for &q in &extends {
        if !regex.is_empty() {
            notes.push(format!(
                "location {} ({}) extends a ^~ location: it comes before the ^~ route, so the regex \
                 locations are not tried for its paths as NGINX would (calmcache's regexes have no \
                 look-ahead to express it).",
                locs[q].pattern, locs[q].pos
            ));
        }
    }
    prefix.retain(|q| !extends.contains(q));
    no_regex.extend(extends);
    let longest_first =
        |v: &mut Vec<usize>| v.sort_by_key(|&i| std::cmp::Reverse(locs[i].pattern.len()));
    longest_first(&mut no_regex);
    longest_first(&mut prefix);
    let mut out = exact;
    out.extend(no_regex);
    out.extend(regex);
    out.extend(prefix);
    (out, notes)
}

/// A `listen` address as calmcache's "ip:port"; a note when it changed.
fn listen_address(addr: &str) -> Result<(String, Option<String>), String> {
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
