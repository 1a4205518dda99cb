//! `server_name`, and NGINX's choice of a server block by Host written as
//! groups of routes with `hosts`.
//!
//! Owns which names carry over (exact, `*.x`, `.x`: the forms of
//! `config::hosts`), what the others mean (`_`, `""` and names no Host can
//! have: no name; `www.x.*`, `~regex`, `$hostname`: not carried over), and
//! the order of the groups, which picks NGINX's server for every Host: each
//! server by its exact names, then by its wildcard names (longest suffix
//! first), then the default server without `hosts` for every other Host and
//! for requests without one. It must not build routes.

use std::cmp::Reverse;

use super::tree::Directive;
use super::Notes;
use crate::config::hosts::HostPattern;

/// The names of one server block.
#[derive(Debug, Default)]
pub(crate) struct Names {
    /// `server (file:line)`, for comments.
    pub(crate) label: String,
    exact: Vec<HostPattern>,
    wildcard: Vec<HostPattern>,
    /// Names calmcache cannot express, as written.
    unsupported: Vec<String>,
}

/// A run of routes: one server's routes, restricted to `hosts` (`None`:
/// every host), with the comment that says why they are there.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// Index of the server.
    pub(crate) server: usize,
    pub(crate) hosts: Option<Vec<String>>,
    pub(crate) note: String,
}

impl Names {
    /// A server block's names, none read yet.
    pub(crate) fn new(label: String) -> Names {
        Names {
            label,
            ..Names::default()
        }
    }

    /// Reads one `server_name` directive; `notes` gets a comment on every
    /// name that does not become a `hosts` entry.
    pub(crate) fn read(&mut self, d: &Directive, notes: &mut Notes) {
        for name in &d.args {
            let skipped = |why: &str| format!("server_name \"{name}\" ({}): {why}", d.pos);
            if name.is_empty() || name == "_" {
                let what = match name.as_str() {
                    "" => "the empty name (NGINX's for requests without Host)",
                    _ => "the usual catch-all spelling, a name no Host has",
                };
                notes.push(skipped(&format!(
                    "{what}: no name for this server; calmcache sends requests without Host to \
                     the default server's routes."
                )));
                continue;
            }
            if name.starts_with('~') || name.starts_with('$') || name.ends_with(".*") {
                let why = match name.chars().next() {
                    Some('~') => "a regex name",
                    Some('$') => "the machine's host name, not known here (write it in hosts)",
                    _ => "a trailing wildcard",
                };
                notes.push(format!(
                    "not carried over: {}",
                    skipped(&format!(
                        "{why}: calmcache's hosts take exact names, \"*.x\" and \".x\" only."
                    ))
                ));
                self.unsupported.push(name.clone());
                continue;
            }
            match HostPattern::parse(name) {
                Ok(p) => {
                    let list = match p.exact() {
                        Some(_) => &mut self.exact,
                        None => &mut self.wildcard,
                    };
                    if !list.contains(&p) {
                        list.push(p);
                    }
                }
                Err(why) => notes.push(skipped(&format!(
                    "{why}, so no Host is this name: this server has no name from it."
                ))),
            }
        }
    }

    /// Whether any of its names became a `hosts` entry.
    pub(crate) fn usable(&self) -> bool {
        !self.exact.is_empty() || !self.wildcard.is_empty()
    }
}

/// The suffix a wildcard pattern matches under.
fn suffix_len(p: &HostPattern) -> usize {
    match p {
        HostPattern::Under { suffix, .. } => suffix.len(),
        HostPattern::Exact(name) => name.len(),
    }
}

/// The groups for `servers` (`default`: the index of the default server), in
/// route order, and comments on the servers no group reaches.
pub(crate) fn plan(servers: &[&Names], default: usize) -> (Vec<Group>, Notes) {
    if servers.len() < 2 {
        let all = Group {
            server: default,
            hosts: None,
            note: String::new(),
        };
        return (vec![all], Vec::new());
    }
    let mut groups = exact_groups(servers, default);
    groups.extend(wildcard_groups(servers, default));
    groups.push(default_group(servers, default));
    (groups, left_out(servers, default))
}

/// Whether server `i`'s name `p` needs a group of its own: a name of the
/// default server does only where another server's wildcard, tried before
/// the catch-all, would take it.
fn needed(servers: &[&Names], default: usize, i: usize, p: &HostPattern) -> bool {
    if i != default {
        return true;
    }
    let probe = match p {
        HostPattern::Exact(name) => name.clone(),
        HostPattern::Under { suffix, .. } => format!("x.{suffix}"),
    };
    servers.iter().enumerate().any(|(j, s)| {
        j != default
            && s.wildcard
                .iter()
                .any(|w| suffix_len(w) <= suffix_len(p) && w.matches(&probe))
    })
}

fn shown(ps: &[&HostPattern]) -> Vec<String> {
    ps.iter().map(|p| p.to_string()).collect()
}

/// One group per server with exact names: NGINX tries them first.
fn exact_groups(servers: &[&Names], default: usize) -> Vec<Group> {
    let mut groups = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let exact: Vec<&HostPattern> = s
            .exact
            .iter()
            .filter(|p| needed(servers, default, i, p))
            .collect();
        if !exact.is_empty() {
            groups.push(Group {
                server: i,
                hosts: Some(shown(&exact)),
                note: format!(
                    "{} by its exact names: NGINX tries exact names before wildcards.",
                    s.label
                ),
            });
        }
    }
    groups
}

/// The wildcard names, longest suffix first, one group per run of one
/// server's names.
fn wildcard_groups(servers: &[&Names], default: usize) -> Vec<Group> {
    let mut wild: Vec<(usize, &HostPattern)> = servers
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.wildcard.iter().map(move |p| (i, p)))
        .filter(|(i, p)| needed(servers, default, *i, p))
        .collect();
    wild.sort_by_key(|(_, p)| Reverse(suffix_len(p)));
    let mut groups = Vec::new();
    let mut start = 0;
    while start < wild.len() {
        let server = wild[start].0;
        let end = start + wild[start..].iter().take_while(|w| w.0 == server).count();
        let run: Vec<&HostPattern> = wild[start..end].iter().map(|w| w.1).collect();
        groups.push(Group {
            server,
            hosts: Some(shown(&run)),
            note: format!(
                "{} by its wildcard names: NGINX takes the longest matching one, so longer \
                 suffixes come first.",
                servers[server].label
            ),
        });
        start = end;
    }
    groups
}

/// The default server's catch-all group, last.
fn default_group(servers: &[&Names], default: usize) -> Group {
    let d = servers[default];
    let own: Vec<String> = d
        .exact
        .iter()
        .chain(&d.wildcard)
        .filter(|p| !needed(servers, default, default, p))
        .map(ToString::to_string)
        .collect();
    let mut note = format!(
        "{}, the default server (NGINX's for every other Host, and for requests without \
         one): no hosts.",
        d.label
    );
    if !own.is_empty() {
        note.push_str(&format!(
            " Its names {} need no group above: no other server's name takes them.",
            own.join(" ")
        ));
    }
    Group {
        server: default,
        hosts: None,
        note,
    }
}

/// A comment on each server no group reaches.
fn left_out(servers: &[&Names], default: usize) -> Notes {
    let mut notes = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        if i == default || s.usable() {
            continue;
        }
        notes.push(if s.unsupported.is_empty() {
            format!(
                "{} is left out: it has no name (no server_name, or only \"_\"/\"\") and is not \
                 the default server, so NGINX gives it no request by Host.",
                s.label
            )
        } else {
            format!(
                "{} is left out: calmcache cannot express any of its names ({}), and without \
                 hosts its routes would take every other server's requests; requests for those \
                 names get the default server's routes.",
                s.label,
                s.unsupported.join(" ")
            )
        });
    }
    notes
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    use super::*;
    use crate::import_nginx::tree::parse_text;

    fn names(text: &str, label: &str) -> (Names, Notes) {
        let tree = parse_text(text, "t.conf", Path::new("/")).unwrap();
        let mut n = Names::new(label.into());
        let mut notes = Vec::new();
        for d in &tree {
            n.read(d, &mut notes);
        }
        (n, notes)
    }

    #[test]
    fn names_are_sorted_into_exact_wildcard_none_and_unsupported() {
        let (n, notes) = names(
            "server_name Example.COM *.a.test .b.test _ \"\" www.c.* ~^x\\d+$ bad:1 example.com;",
            "s",
        );
        assert_eq!(n.exact, [HostPattern::parse("example.com").unwrap()]);
        assert_eq!(n.wildcard.len(), 2);
        assert_eq!(n.unsupported, ["www.c.*", "~^x\\d+$"]);
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(notes[2].starts_with("not carried over: server_name \"www.c.*\" (t.conf:1)"));
        assert!(notes[4].contains("no Host is this name"), "{}", notes[4]);
    }

    #[test]
    fn the_default_servers_names_need_a_group_only_when_another_wildcard_takes_them() {
        let (a, _) = names("server_name a.test .x.a.test;", "A");
        let (b, _) = names("server_name *.a.test;", "B");
        let (d, _) = names("server_name d.test *.d.test;", "D");
        let (groups, notes) = plan(&[&d, &a, &b], 0);
        let got: Vec<(usize, Option<Vec<String>>)> =
            groups.into_iter().map(|g| (g.server, g.hosts)).collect();
        let hosts = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            got,
            [
                (1, hosts(&["a.test"])),
                (1, hosts(&[".x.a.test"])),
                (2, hosts(&["*.a.test"])),
                (0, None),
            ]
        );
        assert!(notes.is_empty());
        let last = &plan(&[&d, &a, &b], 0).0[3].note;
        assert!(
            last.contains("Its names d.test *.d.test need no group"),
            "{last}"
        );
        // D's names under a.test would go to B without a group of their own.
        let (d, _) = names("server_name d.a.test;", "D");
        let (groups, _) = plan(&[&a, &b, &d], 2);
        assert_eq!(groups[1].hosts, hosts(&["d.a.test"]));
    }
}
