//! A location that serves files and nothing else: `root` (or the `alias`
//! of a prefix location that ends as the location does), optionally
//! `try_files $uri [$uri/] =404`, and no `proxy_pass`, `return`,
//! `try_files ... @name` or other content handler. NGINX answers the file
//! or 404 and never hands the request on: a file route with
//! `absent = "404"`.
//!
//! Owns which locations become such routes and which do not (a location
//! under an access rule calmcache cannot say, a handler such as
//! `fastcgi_pass`, a root with variables, no root at all); it must not
//! write the route's other keys (routes.rs does).

use super::routes::describe;
use super::*;

/// Directives that may stand beside a file location's `root` without
/// changing what NGINX serves from it (logging, socket tuning, types).
const BESIDE: [&str; 26] = [
    "access_log",
    "error_log",
    "log_not_found",
    "log_subrequest",
    "sendfile",
    "sendfile_max_chunk",
    "tcp_nopush",
    "tcp_nodelay",
    "aio",
    "directio",
    "output_buffers",
    "allow",
    "etag",
    "charset",
    "types",
    "default_type",
    "open_file_cache",
    "open_file_cache_valid",
    "open_file_cache_errors",
    "client_max_body_size",
    "keepalive_timeout",
    "send_timeout",
    "gzip_vary",
    "gzip_comp_level",
    "gzip_proxied",
    "gzip_static",
];

/// Whether `name` leaves a file location a file location.
pub(super) fn beside(name: &str) -> bool {
    BESIDE.contains(&name) || super::super::settings::GUARDS.contains(&name)
}

/// `alias DIR`, or `try_files` with `$uri` (and `$uri/`) then `=404` or
/// a fallback path (`/index.html`, a single-page app's).
pub(super) fn shape(d: &Directive) -> bool {
    match (d.name.as_str(), d.args.as_slice()) {
        ("alias", [_]) => true,
        ("try_files", [files @ .., last]) if last == "=404" || fallback(last).is_some() => {
            matches!(files, [a] if a == "$uri")
                || matches!(files, [a, b] if a == "$uri" && b == "$uri/")
        }
        _ => false,
    }
}

/// The plain HTML page a `try_files ... /index.html` falls back to (a
/// single-page app's). Not a script (`/index.php`): that one is the
/// origin's front controller, which an error page cannot reach.
fn fallback(last: &str) -> Option<&str> {
    Some(last).filter(|l| {
        l.starts_with('/')
            && !l.contains(['$', '?', '#'])
            && (l.ends_with(".html") || l.ends_with(".htm"))
    })
}

impl Converter<'_> {
    /// The file route of a location that only serves files, its keys
    /// `path`/`match`, `root`, `index` and `absent = "404"`; `None` (with
    /// the reason in `notes` where there is one) for any other location.
    pub(super) fn bare_files(
        &mut self,
        loc: &Location,
        m: &[RouteRegex],
        notes: &mut Notes,
    ) -> Option<Section> {
        if loc.pass.is_some()
            || loc.ret.is_some()
            || loc.try_named.is_some()
            || loc.handler.is_some()
        {
            return None;
        }
        if let Some(guard) = loc.settings.guard() {
            notes.push(format!(
                "`{}` ({}) guards or rewrites this location, which calmcache cannot say: \
                 its files are not served by a file route.",
                guard.text(),
                guard.pos
            ));
            return None;
        }
        let (dir, from) = match loc.files.as_ref().filter(|d| d.name == "alias") {
            Some(alias) => (self.alias_root(loc, alias, notes)?, alias),
            None => {
                let Some(root) = loc.settings.unmarked("root").last() else {
                    notes.push(
                        "No root in effect: NGINX serves these paths from its default root \
                         (html under its prefix), which the config does not name."
                            .into(),
                    );
                    return None;
                };
                if root.args.first().is_none_or(|d| d.contains('$')) {
                    notes.push(note_skipped(root, "a root with variables"));
                    return None;
                }
                (self.absolute(&root.args[0]), root)
            }
        };
        ledger::carried(from);
        let mut route = Section::new("[[routes]]");
        route.note(format!(
            "location {} ({}): the files of `{}` ({}); NGINX answers 404 for a path without a \
             file (403 for a directory without an index file, 301 for a directory without its \
             slash), and so does this route (absent = \"404\").",
            describe(loc),
            loc.pos,
            from.text(),
            from.pos
        ));
        for m in m {
            route.set(m.key(), Value::Str(m.regex().to_owned()));
        }
        route.set("root", Value::Str(dir));
        self.index(loc, &mut route);
        route.set("absent", Value::Str("404".into()));
        if let Some(try_files) = loc.files.as_ref().filter(|d| d.name == "try_files") {
            ledger::carried(try_files);
            route.note(format!(
                "From `{}` ({}): the file, else {}; a directory asked without its slash gets \
                 301 here, where NGINX's try_files $uri goes on.",
                try_files.text(),
                try_files.pos,
                match try_files.args.last().and_then(|l| fallback(l)) {
                    Some(path) => format!(
                        "{path} with 200 (the error page below: it must be a file this route \
                         or another file route serves)"
                    ),
                    None => "404".to_owned(),
                }
            ));
            if let Some(path) = try_files.args.last().and_then(|l| fallback(l)) {
                let page = vec![("404".to_owned(), Value::Str(format!("=200 {path}")))];
                route.set("error_pages", Value::Table(page));
            }
        }
        Some(route)
    }

    /// The root that makes `alias` serve the same files: the alias less
    /// the location's prefix, when it ends with it.
    fn alias_root(&self, loc: &Location, alias: &Directive, notes: &mut Notes) -> Option<String> {
        let dir = &alias.args[0];
        let prefix = matches!(
            loc.modifier,
            Modifier::Prefix | Modifier::NoRegex | Modifier::Exact
        );
        let root = dir
            .strip_suffix(loc.pattern.as_str())
            .filter(|r| prefix && !dir.contains('$') && !r.is_empty() && !r.ends_with('/'));
        match root {
            Some(root) => Some(self.absolute(root)),
            None => {
                notes.push(note_skipped(
                    alias,
                    "calmcache serves root + the request's path: an alias is carried over when \
                     it ends as its (prefix) location does, e.g. location /static/ { alias \
                     /srv/app/static/; } is root /srv/app",
                ));
                None
            }
        }
    }

    /// `index` in effect, the names a file route takes (plain names).
    fn index(&mut self, loc: &Location, route: &mut Section) {
        let Some(index) = loc.settings.unmarked("index").last() else {
            return;
        };
        let plain: Vec<Value> = index
            .args
            .iter()
            .filter(|n| !n.contains(['/', '$', '\\']) && *n != "." && *n != "..")
            .cloned()
            .map(Value::Str)
            .collect();
        if plain.len() < index.args.len() || plain.is_empty() {
            route.note(note_skipped(
                index,
                "index names with a path or a variable: calmcache's index takes file names",
            ));
            return;
        }
        ledger::carried(index);
        route.set("index", Value::List(plain));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::import_nginx::convert::convert;
    use crate::import_nginx::toml_out::render;
    use crate::import_nginx::tree::parse_text;
    use std::path::Path;

    /// The routes of `server { ... }` as TOML, and the text.
    fn routes(server: &str) -> (Vec<toml::Value>, String) {
        let text =
            format!("upstream app {{ server 10.0.0.1:8081; }}\nserver {{ listen 8080; {server} }}");
        let tree = parse_text(&text, "t.conf", Path::new("/etc/nginx")).unwrap();
        let out = render(&convert(&tree, Path::new("/etc/nginx"), "t.conf").unwrap());
        let v: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let routes = v["routes"].as_array().unwrap().clone();
        (routes, out)
    }

    fn files_route<'a>(routes: &'a [toml::Value], path: &str) -> &'a toml::Value {
        routes
            .iter()
            .find(|r| r.get("path").and_then(|p| p.as_str()) == Some(path))
            .unwrap_or_else(|| panic!("no route for {path}: {routes:#?}"))
    }

    #[test]
    fn a_location_with_only_root_answers_404_when_absent() {
        let (routes, out) = routes(
            "root /srv/www; index index.html index.htm;\n\
             location /static/ { expires 7d; add_header X-Static yes; gzip on; }\n\
             location = /robots.txt { try_files $uri =404; }\n\
             location /assets/ { alias /srv/app/assets/; }\n\
             location / { proxy_pass http://app; }",
        );
        let stat = files_route(&routes, "^/static/");
        assert_eq!(stat["root"].as_str(), Some("/srv/www"));
        assert_eq!(stat["absent"].as_str(), Some("404"));
        assert_eq!(stat["index"][1].as_str(), Some("index.htm"));
        assert_eq!(stat["expires"].as_str(), Some("7d"), "{out}");
        assert_eq!(
            stat["response_headers"]["add"]["X-Static"].as_str(),
            Some("yes")
        );
        assert_eq!(stat["compress_passed"][0].as_str(), Some("gzip"));
        assert!(stat.get("upstream").is_none() && stat.get("request_headers").is_none());
        let robots = files_route(&routes, "^/robots\\.txt$");
        assert_eq!(robots["absent"].as_str(), Some("404"));
        let assets = files_route(&routes, "^/assets/");
        assert_eq!(assets["root"].as_str(), Some("/srv/app"));
        assert!(!out.contains("PLACEHOLDER"), "{out}");
    }

    #[test]
    fn locations_that_are_not_only_files_are_not_file_routes() {
        let (routes, out) = routes(
            "root /srv/www;\n\
             location ~ \\.php$ { fastcgi_pass unix:/run/php.sock; }\n\
             location /private/ { auth_basic \"staff\"; }\n\
             location /closed/ { deny all; }\n\
             location /media/ { alias /data/uploads/; }\n\
             location /spa/ { try_files $uri /index.html?x; }\n\
             location /vars/ { root /srv/$host; }\n\
             location /moved/ { rewrite ^ /new/ permanent; }\n\
             location /php/ { try_files $uri /index.php; }",
        );
        for r in &routes {
            assert!(r.get("root").is_none(), "{r:#?}\n{out}");
        }
        assert!(out.contains("guards or rewrites this location"), "{out}");
        assert!(out.contains("`alias /data/uploads/`"), "{out}");
        assert!(out.contains("`try_files $uri /index.html?x`"), "{out}");
        assert!(out.contains("a root with variables"), "{out}");
        assert!(out.contains("`try_files $uri /index.php`"), "{out}");
    }

    /// A server-level rewrite or if runs before any location: none of its
    /// locations serves files.
    #[test]
    fn a_servers_rewrite_keeps_its_locations_from_serving_files() {
        let (got, out) = routes(
            "root /srv/www; rewrite ^/old/(.*)$ /new/$1 permanent;\n\
             location /static/ { }",
        );
        assert!(got.iter().all(|r| r.get("root").is_none()), "{out}");
        let (got, out) = routes("root /srv/www; if ($host = a) { return 404; }");
        assert!(got.iter().all(|r| r.get("root").is_none()), "{out}");
        let (got, out) = routes("root /srv/www;");
        assert_eq!(got[0]["absent"].as_str(), Some("404"), "{out}");
    }

    /// A single-page app's `try_files $uri /index.html`: the file, else the
    /// fallback with 200 (an error page), before the server's own 404 page.
    #[test]
    fn a_fallback_path_is_a_404_page_with_200() {
        let (got, out) = routes(
            "root /srv/www; error_page 404 500 /oops.html;\n\
             location /app/ { try_files $uri $uri/ /app/index.html; }",
        );
        let app = files_route(&got, "^/app/");
        assert_eq!(app["absent"].as_str(), Some("404"));
        assert_eq!(
            app["error_pages"]["404"].as_str(),
            Some("=200 /app/index.html"),
            "{out}"
        );
        assert_eq!(
            app["error_pages"]["500"].as_str(),
            Some("/oops.html"),
            "{out}"
        );
    }

    #[test]
    fn error_pages_are_inherited_as_nginx_and_pages_are_file_routes() {
        let (routes, out) = routes(
            "root /srv/www; error_page 404 /404.html; error_page 500 502 /50x.html;\n\
             location / { proxy_pass http://app; proxy_intercept_errors on; }\n\
             location /api/ { proxy_pass http://app; error_page 502 =503 /50x.html; }\n\
             location = /50x.html { internal; }\n\
             location /gone { return 410; }",
        );
        let all = files_route(&routes, "^/api/");
        assert_eq!(all["error_pages"]["502"].as_str(), Some("=503 /50x.html"));
        assert!(all["error_pages"].get("404").is_none(), "{out}");
        assert!(all.get("intercept_errors").is_none());
        let page = files_route(&routes, "^/50x\\.html$");
        assert_eq!(page["internal"].as_bool(), Some(true));
        assert_eq!(page["absent"].as_str(), Some("404"));
        let gone = files_route(&routes, "^/gone");
        assert_eq!(gone["error_pages"]["404"].as_str(), Some("/404.html"));
        let root = routes.iter().find(|r| r.get("path").is_none()).unwrap();
        assert_eq!(root["intercept_errors"].as_bool(), Some(true));
        assert_eq!(root["error_pages"]["500 502"].as_str(), Some("/50x.html"));
    }
}
