//! What a route does: `upstream`, `return` or `root` (exactly one), and the
//! checks of `return`, `root` and `index` -> [`RouteKind`]. A route that
//! answers itself has no zone (a file route's cache is the page cache; a
//! `return` costs less than a lookup). Reports and carries on.

use std::path::PathBuf;

use http::StatusCode;

use super::Checker;
use std::collections::BTreeMap;

use crate::config::answering::{
    Absent, ErrorPage, Files, PageStatus, PageTarget, Return, RouteKind, Template, REDIRECTS,
};
use crate::config::defaults::route;
use crate::config::error::Problem;
use crate::config::raw::{RawReturn, RawRoute};
use crate::config::RouteConfig;

/// The hint for a template that does not parse.
const TEMPLATE_HINT: &str = "variables: $scheme, $host, $uri, $args, $is_args, $request_uri, \
                             $method, $arg_NAME, $http_NAME, $cookie_NAME";

impl RawRoute {
    /// True when the route says `return` or `root` (and so needs no upstream).
    pub(crate) fn answers_itself(&self) -> bool {
        self.give_back.is_some() || self.root.is_some()
    }
}

impl Checker {
    /// The route's kind when it answers itself (`return`, `root`); `None`
    /// for a proxied route, whose `upstream` routes.rs resolves (and
    /// reports missing). Two of `upstream`, `return`, `root` are reported
    /// at the route's path.
    pub(super) fn answering(&mut self, path: &str, raw: &RawRoute) -> Option<RouteKind> {
        let said: Vec<&str> = [
            ("upstream", raw.upstream.is_some()),
            ("return", raw.give_back.is_some()),
            ("root", raw.root.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect();
        if said.len() > 1 {
            let problem = Problem::new(
                path,
                format!(
                    "a route does one thing, this one says {}",
                    said.join(" and ")
                ),
            );
            self.report(problem.hint(
                "keep one of upstream (proxy), return (answer itself), root (serve files); \
                 a file route falls through to the next route when the file is absent",
            ));
            return None;
        }
        for (key, set) in [
            ("index", raw.index.is_some()),
            ("absent", raw.absent.is_some()),
        ] {
            if set && raw.root.is_none() {
                let problem = Problem::new(
                    format!("{path}.{key}"),
                    format!("{key} is for a route with root"),
                );
                self.report(problem.hint(format!(r#"add root = "/srv/www", or remove {key}"#)));
            }
        }
        let kind = match (&raw.give_back, &raw.root) {
            (Some(give_back), _) => RouteKind::Return(self.give_back(path, give_back)),
            (None, Some(root)) => RouteKind::Files(self.files(path, root, raw)),
            (None, None) => return None,
        };
        self.no_zone(path, raw);
        Some(kind)
    }

    /// Keys that say where to cache, refused on a route that answers itself.
    fn no_zone(&mut self, path: &str, raw: &RawRoute) {
        let cache_keys = [
            ("zone", raw.zone.is_some()),
            ("zones", !raw.zones.is_empty()),
            ("memory", raw.memory.is_some()),
            ("warm", !raw.warm.is_empty()),
        ];
        for (key, _) in cache_keys.into_iter().filter(|(_, set)| *set) {
            let problem = Problem::new(
                format!("{path}.{key}"),
                "a route that answers itself (return, root) has no zone",
            );
            self.report(problem.hint(
                "remove it: a return costs less than a lookup, and files are kept by the \
                 page cache",
            ));
        }
        // Limits are applied on the proxied path only (proxy/limit.rs):
        // accepted here, they would limit nothing without a word.
        if !raw.limits.is_empty() {
            let problem = Problem::new(
                format!("{path}.limits"),
                "limits apply to routes with an upstream; a route that answers itself \
                 (return, root) is not limited",
            );
            self.report(problem.hint("remove it, or limit the proxied routes"));
        }
    }

    /// `return = { status, location, body, content_type }`.
    fn give_back(&mut self, path: &str, raw: &RawReturn) -> Return {
        let at = |key: &str| format!("{path}.return.{key}");
        let Some(status) = self.return_status(&at("status"), raw.status) else {
            // Placeholder: the problem is reported, the rest hangs on it.
            return Return {
                status: StatusCode::NOT_FOUND,
                location: None,
                body: None,
                content_type: String::new(),
            };
        };
        let redirect = REDIRECTS.contains(&status.as_u16());
        let location = match (&raw.location, redirect) {
            (Some(text), true) => self.location(&at("location"), text),
            (None, true) => {
                let problem = Problem::new(at("location"), format!("{status} needs a location"));
                self.report(problem.hint(r#"e.g. location = "https://$host$request_uri""#));
                None
            }
            (Some(_), false) => {
                let problem = Problem::new(
                    at("location"),
                    format!(
                        "location is for the redirects (301, 302, 303, 307, 308), not {status}"
                    ),
                );
                self.report(problem.hint("use a redirect status, or body for this one"));
                None
            }
            (None, false) => None,
        };
        let body = raw
            .body
            .as_ref()
            .and_then(|text| self.return_body(&at("body"), text, status, redirect));
        if raw.content_type.is_some() && raw.body.is_none() {
            let problem = Problem::new(at("content_type"), "content_type is for a body");
            self.report(problem.hint("add body, or remove content_type"));
        }
        let content_type = raw
            .content_type
            .clone()
            .unwrap_or_else(|| route::RETURN_CONTENT_TYPE.to_owned());
        if http::HeaderValue::from_str(&content_type).is_err() || content_type.is_empty() {
            let problem = Problem::new(
                at("content_type"),
                format!("{content_type:?} is not a media type"),
            );
            self.report(problem.hint(r#"e.g. "text/html; charset=utf-8""#));
        }
        Return {
            status,
            location,
            body,
            content_type,
        }
    }

    /// A final status (200-599); `None` after a report.
    fn return_status(&mut self, path: &str, raw: Option<i64>) -> Option<StatusCode> {
        let Some(code) = raw else {
            let problem = Problem::new(path, "missing required key");
            self.report(problem.hint("e.g. status = 301 with a location, or 404"));
            return None;
        };
        let status = u16::try_from(code)
            .ok()
            .filter(|c| (200..=599).contains(c) && *c != 444)
            .and_then(|c| StatusCode::from_u16(c).ok());
        match status {
            Some(status) => Some(status),
            None => {
                let problem = Problem::new(path, format!("{code} is not a final status (200-599)"));
                let hint = if code == 444 {
                    "NGINX's 444 closes the connection; calmcache answers: use e.g. 403 or 404"
                } else {
                    "e.g. 301, 204, 404, 410"
                };
                self.report(problem.hint(hint));
                None
            }
        }
    }

    /// A redirect's `location`: absolute (`https://...`), a path (`/...`),
    /// or a template that starts with a variable; literal text that is a
    /// valid field value.
    fn location(&mut self, path: &str, text: &str) -> Option<Template> {
        let template = self.template(path, text)?;
        let starts_well = text.starts_with('/')
            || text.starts_with('$')
            || text.starts_with("http://")
            || text.starts_with("https://");
        let bad_byte = text.bytes().any(|b| b.is_ascii_control() || b == b' ');
        if !starts_well || bad_byte {
            let problem = Problem::new(path, format!("{text:?} is not a redirect target"));
            self.report(problem.hint(
                r#"an absolute URL or a path without spaces, e.g. "https://$host$request_uri" or "/new/""#,
            ));
            return None;
        }
        Some(template)
    }

    /// A `body`: not on a redirect (NGINX's `return` takes a URL or a
    /// text, not both) nor on a status that has none (204, 304).
    fn return_body(
        &mut self,
        path: &str,
        text: &str,
        status: StatusCode,
        redirect: bool,
    ) -> Option<Template> {
        if redirect || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            let problem = Problem::new(path, format!("a {status} answer has no body"));
            self.report(problem.hint("remove body (a redirect takes a location)"));
            return None;
        }
        self.template(path, text)
    }

    fn template(&mut self, path: &str, text: &str) -> Option<Template> {
        match Template::parse(text) {
            Ok(template) => Some(template),
            Err(why) => {
                self.report(Problem::new(path, why).hint(TEMPLATE_HINT));
                None
            }
        }
    }

    /// `root` (an absolute directory; whether it exists is the server's
    /// business at request time, as NGINX's), `index` (plain names) and
    /// `absent`.
    fn files(&mut self, path: &str, root: &str, raw: &RawRoute) -> Files {
        let index = raw.index.as_deref();
        let dir = PathBuf::from(root);
        if !dir.is_absolute() || root.contains('\0') {
            let problem = Problem::new(
                format!("{path}.root"),
                format!("{root:?} is not an absolute directory"),
            );
            self.report(problem.hint(r#"e.g. root = "/srv/www""#));
        }
        let index: Vec<String> = match index {
            Some(names) => names.to_vec(),
            None => route::INDEX.iter().map(|n| (*n).to_owned()).collect(),
        };
        for (i, name) in index.iter().enumerate() {
            let plain = !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains(['/', '\\', '\0']);
            if !plain {
                let problem = Problem::new(
                    format!("{path}.index[{i}]"),
                    format!("{name:?} is not a file name"),
                );
                self.report(problem.hint(r#"a name in the directory, e.g. "index.html""#));
            }
        }
        let absent = self.absent(path, raw.absent.as_deref());
        Files {
            root: dir,
            index,
            absent,
        }
    }

    /// `absent = "next" | "404"`.
    fn absent(&mut self, path: &str, text: Option<&str>) -> Absent {
        let text = text.unwrap_or(route::ABSENT);
        Absent::parse(text).unwrap_or_else(|| {
            let problem = Problem::new(
                format!("{path}.absent"),
                format!("{text:?} is not what a file route does without the file"),
            );
            self.report(problem.hint(
                r#""next" (on to the next route, try_files $uri @next) or "404" (NGINX's bare root)"#,
            ));
            Absent::Next
        })
    }
}

/// The hint for an `error_pages` entry.
const PAGE_HINT: &str = r#"e.g. "404" = "/errors/404.html", "500 502 503 504" = "/50x.html", "404" = "=200 /empty.gif", "403" = "@login""#;

impl Checker {
    /// `error_pages`: status lists (300-599) to targets.
    pub(super) fn error_pages(
        &mut self,
        path: &str,
        raw: Option<&BTreeMap<String, String>>,
    ) -> Vec<ErrorPage> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let mut pages = Vec::with_capacity(raw.len());
        for (statuses, target) in raw {
            let at = format!(
                "{path}.error_pages.{}",
                crate::config::error::toml_key(statuses)
            );
            let codes: Option<Vec<u16>> = statuses
                .split_whitespace()
                .map(|s| s.parse::<u16>().ok().filter(|c| (300..=599).contains(c)))
                .collect();
            let Some(codes) = codes.filter(|c| !c.is_empty()) else {
                let problem = Problem::new(
                    &at,
                    format!("{statuses:?} is not a list of statuses 300-599"),
                );
                self.report(problem.hint(PAGE_HINT));
                continue;
            };
            match page_target(target) {
                Ok((status, target)) => pages.push(ErrorPage {
                    statuses: codes,
                    status,
                    target,
                }),
                Err(why) => self.report(Problem::new(&at, why).hint(PAGE_HINT)),
            }
        }
        pages
    }

    /// Every `@name` target names a route that answers itself (an error
    /// page from the origin is not there yet).
    pub(super) fn error_page_names(&mut self, routes: &[RouteConfig]) {
        for (index, route) in routes.iter().enumerate() {
            for page in &route.error_pages {
                let PageTarget::Named(name) = &page.target else {
                    continue;
                };
                let at = format!("routes[{index}].error_pages");
                match routes.iter().find(|r| &r.name == name) {
                    None => {
                        let problem = Problem::new(at, format!("no route named {name:?}"));
                        self.report(problem.hint("@name names a route by its name"));
                    }
                    Some(target) if target.upstream().is_some() => {
                        let problem = Problem::new(
                            at,
                            format!("route {name:?} proxies; an error page comes from a route with return or root"),
                        );
                        self.report(problem.hint("point it at a file route or a return route"));
                    }
                    Some(_) => {}
                }
            }
        }
    }
}

/// `"/50x.html"`, `"=200 /empty.gif"`, `"= /x"`, `"@name"`.
fn page_target(text: &str) -> Result<(PageStatus, PageTarget), String> {
    let (status, rest) = match text.strip_prefix('=') {
        None => (PageStatus::Original, text),
        Some(rest) => {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let after = rest[digits.len()..].trim_start();
            if digits.is_empty() {
                (PageStatus::Target, after)
            } else {
                let code = digits
                    .parse::<u16>()
                    .ok()
                    .filter(|c| (200..=599).contains(c))
                    .and_then(|c| StatusCode::from_u16(c).ok())
                    .ok_or_else(|| format!("={digits} is not a status 200-599"))?;
                (PageStatus::Set(code), after)
            }
        }
    };
    let target = if let Some(name) = rest.strip_prefix('@') {
        if name.is_empty() {
            return Err("@ names no route".to_owned());
        }
        PageTarget::Named(name.to_owned())
    } else if rest.starts_with('/')
        && !rest.contains('?')
        && rest.parse::<http::uri::PathAndQuery>().is_ok()
    {
        PageTarget::Uri(rest.to_owned())
    } else {
        return Err(format!(
            "{text:?} is not a path (\"/50x.html\") or a route (\"@name\")"
        ));
    };
    Ok((status, target))
}
