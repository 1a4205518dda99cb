//! [`Config::warnings`]: what a valid config does that its author may not
//! expect (a default certificate without names, an upstream with
//! `tls_verify = false`, a route no request reaches, fleet mode without a
//! secret, a `match` anchored at the end that a query can satisfy, a token
//! or password inline in a file every user can read, a limit no route
//! lists). Never a refusal:
//! `calmcache check` prints them (exit 0), the
//! proxy logs them when it starts and at each reload.
//!
//! Owns the wording of each warning; the validation that lets the config
//! through is `validate.rs`'s.

use super::{Config, Problem};

impl Config {
    /// Logs each of [`Config::warnings`] on a line of its own (at start and
    /// at each reload; `calmcache check` prints the same).
    pub(crate) fn log_warnings(&self) {
        for warning in self.warnings() {
            // The target these lines had in run/server.rs, where a filter may name it.
            tracing::warn!(target: "calmcache::run::server", "config: {warning}");
        }
    }

    /// Each warning with its TOML path, in file order; empty for most
    /// configs.
    pub fn warnings(&self) -> Vec<Problem> {
        let mut warnings = Vec::new();
        // Only the first entry can have no name (validate.rs refuses the
        // others): it is the default, sent whatever name a client asks for.
        if let Some(default) = self.server.tls.first().filter(|c| c.names.is_empty()) {
            let problem = Problem::new(
                "server.tls[0].cert",
                format!(
                    "{}: the certificate has no DNS names (subjectAltName): it is served as \
                     the default to every TLS client, and clients that check the name they \
                     asked for (browsers, curl without -k) refuse it",
                    default.cert.display()
                ),
            );
            warnings.push(problem.hint(
                "fine for tests and internal clients that trust it as it is; for a public \
                 name, use a certificate whose subjectAltName lists it",
            ));
        }
        // An upstream whose origins' certificates are not checked.
        for upstream in &self.upstreams {
            if upstream.tls.as_ref().is_some_and(|tls| !tls.verify) {
                let problem = Problem::new(
                    format!("upstreams.{}.tls_verify", super::toml_key(&upstream.name)),
                    "false: the origin's certificate is NOT checked; anyone on the path \
                     can pose as the origin and have its answers cached",
                );
                warnings.push(problem.hint(
                    "to trust a private CA or a self-signed origin, set tls_ca_file to its \
                     certificate and keep tls_verify = true",
                ));
            }
        }
        warnings.extend(self.unreachable_routes());
        warnings.extend(self.unsigned_fleet());
        warnings.extend(self.fleet_budget_without_fleet());
        warnings.extend(self.matches_reached_by_a_query());
        warnings.extend(self.posts_cached_by_ttl());
        warnings.extend(self.secrets_readable());
        warnings.extend(self.unused_limits());
        warnings.extend(self.ignored_vary());
        warnings.extend(self.unkeyed_request_rules());
        warnings
    }

    /// A request rule on a caching route whose value reads what a client
    /// chooses (`$http_`, `$cookie_`, `$arg_`) and the key does not: the
    /// origin may answer by that value, and the answer is stored for every
    /// client of the key (one client's tenant or session served to all).
    fn unkeyed_request_rules(&self) -> Vec<Problem> {
        let mut found = Vec::new();
        for (i, route) in self.routes.iter().enumerate() {
            if route.storage.zone.is_none() {
                continue;
            }
            for (name, value) in &route.headers.request.set {
                let unkeyed = value.unkeyed(&route.storage.key);
                if unkeyed.is_empty() {
                    continue;
                }
                let path = format!("routes[{i}].request_headers.set.{}", name.as_str());
                let message = format!(
                    "sends {} to the origin, which the key does not read: an answer the origin \
                     makes by it is stored for every client of the key",
                    unkeyed.join(", ")
                );
                found.push(Problem::new(path, message).hint(
                    "add the variable to the route's key, or keep such requests out of the \
                     cache (no_store, or a route without a zone)",
                ));
            }
        }
        found
    }

    /// `ignore_headers` naming `Vary` on a caching route: one stored answer
    /// serves every client, whatever the headers the origin varied on
    /// (language, cookies, device). Without `compress` the client's
    /// Accept-Encoding reaches the origin, so a compressed answer stored for
    /// one client goes to clients that cannot read it.
    fn ignored_vary(&self) -> Vec<Problem> {
        let routes = self.routes.iter().enumerate();
        routes
            .filter(|(_, route)| {
                route.storage.zone.is_some()
                    && route
                        .freshness
                        .ignore_headers
                        .contains(calmcache_core::IgnorableField::Vary)
            })
            .map(|(i, route)| {
                let mut message = String::from(
                    "\"Vary\" is ignored: one stored answer goes to every client, whatever \
                     the request headers the origin varied it on (language, cookies, device)",
                );
                if route.answers.compress.is_empty() {
                    message.push_str(
                        "; and without compress the client's Accept-Encoding reaches the \
                         origin, so an answer compressed for one client is served to clients \
                         that did not accept it",
                    );
                }
                let problem = Problem::new(format!("routes[{i}].ignore_headers"), message);
                problem.hint(
                    "ignore Vary only when the origin's answer is the same for every client; \
                     set compress = [\"gzip\"] so the origin is asked for identity bodies and \
                     calmcache negotiates the coding itself",
                )
            })
            .collect()
    }

    /// A `[limits.NAME]` no route lists limits nothing (a route applies a
    /// limit only by naming it in its `limits`).
    fn unused_limits(&self) -> Vec<Problem> {
        let used = |at: usize| self.routes.iter().any(|r| r.limits.contains(&at));
        let unused = self.limits.iter().enumerate().filter(|(at, _)| !used(*at));
        unused
            .map(|(_, limit)| {
                let path = format!("limits.{}", super::toml_key(&limit.name));
                let problem = Problem::new(path, "no route lists this limit: it limits nothing");
                problem.hint(format!(
                    "add limits = [{:?}] to the routes it is for",
                    limit.name
                ))
            })
            .collect()
    }

    /// `fleet_max_inflight` without `[fleet]`: no other node shares the
    /// budget, so only `max_inflight` (if set) bounds the origin.
    fn fleet_budget_without_fleet(&self) -> Vec<Problem> {
        if self.fleet.is_some() {
            return Vec::new();
        }
        let shared = self.upstreams.iter().filter(|u| u.fleet_max_inflight > 0);
        shared
            .map(|upstream| {
                let problem = Problem::new(
                    format!(
                        "upstreams.{}.fleet_max_inflight",
                        super::toml_key(&upstream.name)
                    ),
                    "is set but fleet mode is off ([fleet] missing): it has no effect",
                );
                problem.hint(
                    "add a [fleet] table to share the budget across nodes, or bound this node \
                     alone with max_inflight",
                )
            })
            .collect()
    }

    /// Fleet mode without `secret_file`: nothing read from Redis can be told
    /// from a forgery, so Redis write access is control of every node.
    fn unsigned_fleet(&self) -> Option<Problem> {
        let fleet = self.fleet.as_ref().filter(|f| f.secret.is_none())?;
        let problem = Problem::new(
            "fleet.secret_file",
            format!(
                "not set: shared entries and purges are not signed, so anyone who can write \
                 to Redis under {:?} can make every node serve a body of their choosing \
                 (as a hit) and purge every node",
                fleet.prefix
            ),
        );
        Some(problem.hint(
            "give every node the same secret file (e.g. `openssl rand -hex 32 > \
             /etc/calmcache/fleet.secret`) and set secret_file; nodes without one keep \
             working unsigned, but refuse and are refused by nodes with one",
        ))
    }

    /// `cache_post = true` with a route `ttl`: the ttl is explicit
    /// freshness, so every POST answer is stored, and an identical POST
    /// within it never reaches the origin (a mutation sent twice is done
    /// once).
    fn posts_cached_by_ttl(&self) -> Vec<Problem> {
        let routes = self.routes.iter().enumerate();
        routes
            .filter(|(_, route)| route.requests.cache_post && !route.freshness.ttl.is_empty())
            .map(|(i, _)| {
                Problem::new(
                    format!("routes[{i}].cache_post"),
                    "true together with a route `ttl`: the ttl makes every POST answer \
                     fresh, so an identical POST within it is answered from the cache and \
                     never reaches the origin, even one that changes something",
                )
                .hint(
                    "keep cache_post for routes whose POSTs are all reads (GraphQL \
                     queries, JSON-RPC reads), or drop the ttl and let the origin mark the \
                     answers it means to be cached (Cache-Control: max-age)",
                )
            })
            .collect()
    }

    /// `match` regexes anchored at the end that a query can satisfy: a
    /// static-files route on `'\.(css|js)$'` also takes
    /// `/account.php?x.css`, and stores that private page for everyone.
    /// A route that also has `path` is left alone: its `path` already keeps a
    /// query from choosing it.
    fn matches_reached_by_a_query(&self) -> Vec<Problem> {
        let reached = self.routes.iter().enumerate().filter_map(|(i, route)| {
            if route.matching.path_matcher.is_some() {
                return None;
            }
            let pattern = route.matching.matcher.as_ref()?.as_str();
            super::route_regex::query_reaches_end_anchor(pattern).then_some((i, pattern))
        });
        reached
            .map(|(i, pattern)| {
                let quoted = toml_regex(pattern);
                Problem::new(
                    format!("routes[{i}].match"),
                    format!(
                        "{quoted} is anchored at the end, but `match` sees the path and \
                         the query: a request whose query ends that way takes this route \
                         (`/account.php?x.css` for a `\\.css$`)"
                    ),
                )
                .hint(format!(
                    "to match the path only, as NGINX's location does, write \
                     path = {quoted}; if the query is meant, name it (`\\?`) in the regex"
                ))
            })
            .collect()
    }

    /// A secret written inline in a config file every user of the machine
    /// can read (the usual umask makes new files 0644; the package installs
    /// its config 0640 root:calmcache).
    fn secrets_readable(&self) -> Option<Problem> {
        let mode = self.secrets.readable_by_others()?;
        let paths = self.secrets.paths.join(", ");
        let problem = Problem::new(
            self.secrets.paths[0].clone(),
            format!(
                "the config file is readable by every user (mode {mode:04o}) and holds \
                 a secret inline ({paths})"
            ),
        );
        Some(problem.hint(
            "move it to a file only calmcache reads (admin.token_file, fleet.password_file; \
             a Redis URL without its password plus fleet.password_file), or \
             chmod 640 the config (chown root:calmcache)",
        ))
    }

    /// Routes no request can reach: an earlier route without `match` takes
    /// every request of the hosts it answers for (every host, without
    /// `hosts`), so a later route whose hosts are all among them is never
    /// used (e.g. a catch-all written before the routes it was meant to
    /// follow: routes are first-match).
    fn unreachable_routes(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        for (j, later) in self.routes.iter().enumerate() {
            let shadow = self.routes[..j].iter().enumerate().find(|(_, earlier)| {
                // A file route hands on what it has no file for (unless
                // its absent file is a 404).
                let falls_through = matches!(&earlier.kind,
                    super::answering::RouteKind::Files(f) if f.absent == super::answering::Absent::Next);
                let (first, then) = (&earlier.matching, &later.matching);
                earlier.matches_all()
                    && !falls_through
                    && covers(&first.hosts, &then.hosts)
                    // A route limited to listeners shadows only routes on them.
                    && covers(&first.listeners, &then.listeners)
            });
            if let Some((i, earlier)) = shadow {
                let takes = if earlier.matching.hosts.is_empty() {
                    "every request"
                } else {
                    "every request for its hosts"
                };
                let problem = Problem::new(
                    format!("routes[{j}]"),
                    format!(
                        "never used: routes[{i}] ({}) has no `match` or `path` and takes {takes} first",
                        earlier.name
                    ),
                );
                out.push(problem.hint(
                    "routes are tried in file order: move this one above it, or give that one a match",
                ));
            }
        }
        out
    }
}

/// Whether an earlier route's `hosts` or `listeners` (empty: every one)
/// take everything a later route's do: every one, or a non-empty list all
/// among them.
fn covers<T: PartialEq>(earlier: &[T], later: &[T]) -> bool {
    earlier.is_empty() || (!later.is_empty() && later.iter().all(|x| earlier.contains(x)))
}

/// A regex as a TOML value the user can paste: a literal string (`'...'`,
/// no escapes, as the docs write regexes) unless it holds a `'` or a line
/// break, then a basic string.
fn toml_regex(pattern: &str) -> String {
    if pattern.contains(['\'', '\n', '\r']) {
        super::error::toml_string(pattern)
    } else {
        format!("'{pattern}'")
    }
}
