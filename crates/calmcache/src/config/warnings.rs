//! [`Config::warnings`]: what a valid config does that its author may not
//! expect. Never a refusal: `calmcache check` prints them (exit 0), the
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
        warnings
    }
}
