//! [`Config::warnings`]: what a valid config does that its author may not
//! expect (a default certificate without names, an upstream with
//! `tls_verify = false`, a route no request reaches, a token or password
//! inline in a file every user can read). Never a refusal: `calmcache check` prints them (exit 0), the
//! proxy logs them when it starts and at each reload.
//!
//! Owns the wording of each warning; the validation that lets the config
//! through is `validate.rs`'s.

use super::{Config, Problem};

impl Config {
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
        warnings.extend(self.secrets_readable());
        warnings
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
                earlier.matcher.is_none()
                    && (earlier.hosts.is_empty()
                        || (!later.hosts.is_empty()
                            && later.hosts.iter().all(|h| earlier.hosts.contains(h))))
            });
            if let Some((i, earlier)) = shadow {
                let takes = if earlier.hosts.is_empty() {
                    "every request"
                } else {
                    "every request for its hosts"
                };
                let problem = Problem::new(
                    format!("routes[{j}]"),
                    format!(
                        "never used: routes[{i}] ({}) has no `match` and takes {takes} first",
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
