//! Walks the directive tree and builds the calmcache document.
//!
//! Owns the contexts (main, `events`, `http`, `server`, `location`), the
//! `[server]` keys (`listen`, TLS certificates, client timeouts,
//! `worker_connections`), and NGINX's location selection turned into
//! first-match routes (nesting.rs says how, nested locations included;
//! routes.rs writes them). The servers' routes come in the groups
//! `server_names` plans (NGINX's choice of a server by Host), each
//! restricted to its `hosts`. A fragment without `http { }` (as blog posts
//! show them) is read as if it were inside one. Every directive it maps is
//! marked in the ledger; [`counted`] comments the rest.

use std::collections::HashSet;
use std::path::Path;

mod answers;
mod files;
mod nesting;
mod pages;
mod real_ip;
mod routes;
mod servers;

use super::cache;
use super::headers;
use super::ledger::{self, Census};
use super::lexer::Pos;
use super::pathre::RouteRegex;
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
    Regex {
        case_insensitive: bool,
    },
    /// `location @name`: reached by `try_files`, never by a path.
    Named,
}

struct Location {
    modifier: Modifier,
    pattern: String,
    settings: Settings,
    pass: Option<Directive>,
    /// `try_files ... @name`: requests go on to that named location.
    try_named: Option<Directive>,
    /// `return ...`: NGINX answers before proxying.
    ret: Option<Directive>,
    /// `internal`: requests from clients get 404.
    internal: Option<Directive>,
    /// `alias DIR` or `try_files $uri [$uri/] =404`: how a location that
    /// serves files says so (files.rs).
    files: Option<Directive>,
    /// The first directive that makes NGINX answer otherwise than with a
    /// file (`fastcgi_pass`, `rewrite`, a `try_files` shape not carried,
    /// ...): such a location never becomes a file route.
    handler: Option<Directive>,
    /// The `location` directive itself (None for a server without one).
    directive: Option<Directive>,
    pos: Pos,
    notes: Notes,
    /// The locations nested in this one, in file order.
    nested: Vec<Location>,
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
    /// A server-level `return`: it answers every request of the server.
    ret: Option<Directive>,
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
    limits: super::limits::Limits,
    servers: Vec<Server>,
    worker_processes: Option<i64>,
    access_log: Option<Section>,
    placeholder: bool,
    /// `ssl_certificate` / `ssl_certificate_key` at http level: servers
    /// without their own inherit them.
    http_certs: (Vec<Directive>, Vec<Directive>),
    /// `listen ... proxy_protocol`, `set_real_ip_from`, `real_ip_header`.
    real_ip: real_ip::RealIp,
}

/// The calmcache document for `tree` (`prefix`: the main file's directory,
/// for relative certificate paths; `main`: its name, for the header).
pub(crate) fn convert(tree: &[Directive], prefix: &Path, main: &str) -> Result<Doc, ImportError> {
    counted(tree, prefix, main).map(|(doc, _)| doc)
}

/// [`convert`], with how its directives fared (see ledger): every one
/// carried over or commented.
pub(crate) fn counted(
    tree: &[Directive],
    prefix: &Path,
    main: &str,
) -> Result<(Doc, Census), ImportError> {
    ledger::scope(tree, || convert_tree(tree, prefix, main))
}

fn convert_tree(tree: &[Directive], prefix: &Path, main: &str) -> Result<Doc, ImportError> {
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
        limits: Default::default(),
        servers: Vec::new(),
        worker_processes: None,
        access_log: None,
        placeholder: false,
        http_certs: (Vec::new(), Vec::new()),
        real_ip: Default::default(),
    };
    if tree.iter().any(|d| d.name == "http") {
        for d in tree {
            match d.name.as_str() {
                "http" => {
                    ledger::carried(d);
                    c.http(d.children())
                }
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
                ledger::carried(d);
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
                        ledger::carried(d);
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
        ledger::carried(d);
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
                "limit_req_zone" | "limit_conn_zone" => self.limits.zone(d, &mut self.top),
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
                "proxy_cache_path" | "map" | "split_clients" | "upstream" | "limit_req_zone"
                | "limit_conn_zone" => {}
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
                ret: None,
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
                ledger::carried(d);
                self.h2c = true;
            }
            "access_log" => self.access_log(d),
            "set_real_ip_from" | "real_ip_header" | "real_ip_recursive" => self.real_ip.directive(d),
            "error_log" => self.main_directive(d),
            "listen" | "server_name" => {
                self.top.push(note_skipped(d, "only meaningful inside a server block"))
            }
            "try_files" | "alias" => self.top.push(note_skipped(
                d,
                "calmcache's file routes take `root`, the `alias` of a prefix location that \
                 ends as the location does, and try_files $uri [$uri/] followed by @name or =404",
            )),
            "return" | "rewrite" | "autoindex" | "types" | "default_type" => self.top.push(note_skipped(
                d,
                "calmcache does not rewrite requests, list directories or retype files",
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
            "internal" => self.top.push(note_skipped(
                d,
                "NGINX takes internal only in a location (there it becomes the route's internal = true)",
            )),
            "if" | "set" | "allow" | "deny"
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
        ledger::carried(d);
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
        ledger::carried(d);
        let mut section = Section::new("[access_log]");
        section.note(format!(
            "From `{}` ({}): NGINX's combined format plus cache status and timings.",
            d.text(),
            d.pos
        ));
        section.set("path", Value::Str(arg.to_owned()));
        self.access_log = Some(section);
    }
}
