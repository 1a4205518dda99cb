//! The `proxy_*` (and `gzip*`, `add_header`, `expires`, `root`, `index`,
//! `limit_*`, `error_page`) directives a location inherits from its server
//! and `http`, and the access rules and rewrites in effect ([`GUARDS`]).
//!
//! Owns NGINX's inheritance rule: a directive written at a level replaces
//! every directive of the same name inherited from above (so one
//! `proxy_set_header` in a location drops all of the server's), and a level
//! without it inherits the parent's. It must not interpret the directives.

use std::collections::BTreeMap;

use super::ledger;
use super::tree::Directive;

/// Inherited directives by name, in the order written at their level.
#[derive(Clone, Debug, Default)]
pub(crate) struct Settings {
    by_name: BTreeMap<String, Vec<Directive>>,
}

/// Whether `name` is inherited down the levels (and read per location).
pub(crate) fn inherited(name: &str) -> bool {
    (name.starts_with("proxy_") && !matches!(name, "proxy_pass" | "proxy_cache_path"))
        || matches!(
            name,
            "gzip"
                | "gzip_types"
                | "gzip_min_length"
                | "add_header"
                | "expires"
                | "root"
                | "index"
                | "limit_req"
                | "limit_conn"
                | "limit_req_status"
                | "limit_conn_status"
                | "error_page"
        )
}

/// Access rules and rewrites calmcache cannot say (commented where they
/// are written), kept down the levels so that no file route serves what
/// one of them guards or sends elsewhere: a location under `auth_basic`,
/// `deny` or a server's `rewrite` must not become a public file route.
pub(crate) const GUARDS: [&str; 7] = [
    "auth_basic",
    "auth_request",
    "deny",
    "satisfy",
    "limit_except",
    "rewrite",
    "if",
];

impl Settings {
    /// This level's settings: the parent's, with every name `level` writes
    /// replaced by the level's own directives of that name.
    pub(crate) fn child(&self, level: &[Directive]) -> Settings {
        let mut own: BTreeMap<String, Vec<Directive>> = BTreeMap::new();
        for d in level
            .iter()
            .filter(|d| inherited(&d.name) || GUARDS.contains(&d.name.as_str()))
            .filter(|d| d.block.is_none() || matches!(d.name.as_str(), "limit_except" | "if"))
        {
            own.entry(d.name.clone()).or_default().push(d.clone());
        }
        let mut by_name = self.by_name.clone();
        by_name.extend(own);
        Settings { by_name }
    }

    /// Every directive named `name` in effect, each marked carried over
    /// (ledger): the caller maps them all.
    pub(crate) fn all(&self, name: &str) -> &[Directive] {
        let all = self.by_name.get(name).map_or(&[][..], Vec::as_slice);
        all.iter().for_each(ledger::carried);
        all
    }

    /// The last directive named `name` in effect, marked carried over; the
    /// ones before it stay unmarked (so a caller that reads one of several
    /// leaves the others to a comment).
    pub(crate) fn last(&self, name: &str) -> Option<&Directive> {
        let last = self.by_name.get(name).and_then(|all| all.last());
        last.inspect(|d| ledger::carried(d))
    }

    /// The first argument of the last `name`, e.g. `on` for `proxy_cache_lock on`.
    pub(crate) fn arg(&self, name: &str) -> Option<&str> {
        self.last(name)
            .and_then(|d| d.args.first())
            .map(String::as_str)
    }

    /// Whether `name` is set to `on`.
    pub(crate) fn on(&self, name: &str) -> bool {
        self.arg(name) == Some("on")
    }

    /// Every directive named `name` in effect, not marked: the caller
    /// marks the ones it carries over.
    pub(crate) fn unmarked(&self, name: &str) -> &[Directive] {
        self.by_name.get(name).map_or(&[][..], Vec::as_slice)
    }

    /// The first access rule ([`GUARDS`]) in effect: `auth_basic off` is
    /// none.
    pub(crate) fn guard(&self) -> Option<&Directive> {
        GUARDS.iter().find_map(|name| {
            self.unmarked(name)
                .iter()
                .find(|d| !(d.name == "auth_basic" && d.args.first().is_some_and(|a| a == "off")))
        })
    }

    /// Every directive in effect, for the ones nobody read.
    pub(crate) fn every(&self) -> impl Iterator<Item = &Directive> {
        self.by_name.values().flatten()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::import_nginx::tree::parse_text;

    #[test]
    fn a_level_replaces_names_it_writes() {
        let tree = parse_text(
            "proxy_set_header A 1; proxy_set_header B 2; proxy_cache_lock on;\n\
             location / { proxy_set_header C 3; }",
            "t.conf",
            std::path::Path::new("/"),
        )
        .unwrap();
        let http = Settings::default().child(&tree);
        let loc = http.child(tree[3].children());
        assert_eq!(loc.all("proxy_set_header").len(), 1);
        assert!(loc.on("proxy_cache_lock"));
        assert_eq!(http.all("proxy_set_header").len(), 2);
    }
}
