//! What a route does with a request it takes: proxy it to its `upstream`
//! (the default, and every route before issue 28), answer it itself with
//! `return` (NGINX's `return`), or serve files from `root` (NGINX's `root`
//! with `try_files $uri @next`). Exactly one of the three; `check` refuses
//! none or two (validate/answering.rs).
//!
//! Only says what the user asked for: the proxy's `proxy/answering/`
//! answers. Must not touch the file system or build responses.

use std::path::PathBuf;

use http::StatusCode;

use super::key_template::{KeyTemplate, RequestView};
use super::RouteConfig;

/// What a route does with the requests it takes.
#[derive(Debug, Clone)]
pub enum RouteKind {
    /// Proxy to the upstream (an index into `Config::upstreams`), caching
    /// in the route's zone if it has one.
    Proxy {
        /// Index into `Config::upstreams`.
        upstream: usize,
    },
    /// Answer with a fixed status, and a `Location` or a body (`return`).
    Return(Return),
    /// Serve the file under `root` (`root`, `index`); an absent file falls
    /// through to the next route that takes the request, or is a 404
    /// (`absent`).
    Files(Files),
}

impl RouteKind {
    /// How `/status` and the summary name the kind of a route that
    /// answers itself; `None` for a proxied route.
    pub fn answers(&self) -> Option<&'static str> {
        match self {
            RouteKind::Proxy { .. } => None,
            RouteKind::Return(_) => Some("return"),
            RouteKind::Files(_) => Some("files"),
        }
    }
}

/// `return = { status = 301, location = "https://$host$request_uri" }`.
#[derive(Debug, Clone)]
pub struct Return {
    /// The status every request gets.
    pub status: StatusCode,
    /// The `Location` (the redirect statuses, which need one).
    pub location: Option<Template>,
    /// The body (other statuses); `None`: NGINX's small HTML page for a
    /// status from 300 up, nothing below.
    pub body: Option<Template>,
    /// The body's `Content-Type` (default `text/plain`).
    pub content_type: String,
}

/// The statuses NGINX's `return code URL` sends a `Location` with.
pub(crate) const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// `root = "/srv/www"`, `index = ["index.html"]`.
#[derive(Debug, Clone)]
pub struct Files {
    /// The directory the request's path is looked up under.
    pub root: PathBuf,
    /// File names tried, in order, for a path ending in `/`.
    pub index: Vec<String>,
    /// What a request whose file is not there gets.
    pub absent: Absent,
}

/// `absent`: what a file route does when the request's file is not there
/// (no file, or a directory without an index file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// `"next"`: on to the next route that takes the request (NGINX's
    /// `try_files $uri @next`).
    Next,
    /// `"404"`: answered here as NGINX's bare `root` does: 404 for no file,
    /// 403 for a directory without an index file, 301 to `path/` for a
    /// directory asked without its slash. Error pages apply.
    NotFound,
}

impl Absent {
    /// Parses `"next"` or `"404"`.
    pub fn parse(text: &str) -> Option<Absent> {
        match text {
            "next" => Some(Absent::Next),
            "404" => Some(Absent::NotFound),
            _ => None,
        }
    }

    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Absent::Next => "next",
            Absent::NotFound => "404",
        }
    }
}

/// A `location` or `body`: text with the variables key templates know
/// (`$host`, `$request_uri`, ...), or plain text without any.
#[derive(Debug, Clone)]
pub enum Template {
    /// No variables: sent as written.
    Literal(String),
    /// Rendered per request ([`KeyTemplate::render`]).
    Vars(KeyTemplate),
}

impl Template {
    /// Parses `text`: plain when it has no `$`, else a key template (whose
    /// error names the variable it does not know).
    pub fn parse(text: &str) -> Result<Template, String> {
        if text.contains('$') {
            KeyTemplate::parse(text).map(Template::Vars)
        } else {
            Ok(Template::Literal(text.to_owned()))
        }
    }

    /// The text for `req`, into `out` (cleared first).
    pub fn render(&self, req: &RequestView<'_>, out: &mut String) {
        match self {
            Template::Literal(text) => {
                out.clear();
                out.push_str(text);
            }
            Template::Vars(template) => template.render(req, out),
        }
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        match self {
            Template::Literal(text) => text,
            Template::Vars(template) => template.as_str(),
        }
    }
}

/// One `error_pages` entry: `"500 502 503 504" = "/50x.html"` (NGINX's
/// `error_page`).
#[derive(Debug, Clone)]
pub struct ErrorPage {
    /// The statuses it replaces (300-599).
    pub statuses: Vec<u16>,
    /// The status the client gets.
    pub status: PageStatus,
    /// Where the page comes from.
    pub target: PageTarget,
}

/// The status of an error page's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStatus {
    /// The original answer's (NGINX's default).
    Original,
    /// `=` alone: the error page's own.
    Target,
    /// `=200`: this one.
    Set(StatusCode),
}

/// Where an error page comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageTarget {
    /// A path, routed again as a GET (internal routes reachable).
    Uri(String),
    /// `@name`: the route of that name.
    Named(String),
}

impl RouteConfig {
    /// The error page for an answer with `status`, if the route has one.
    pub fn error_page(&self, status: u16) -> Option<&ErrorPage> {
        self.error_pages
            .iter()
            .find(|p| p.statuses.contains(&status))
    }
}
