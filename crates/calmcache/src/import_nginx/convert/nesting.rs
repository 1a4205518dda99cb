//! NGINX's choice of a location, nested locations included, as an ordered
//! list of first-match routes, each with the conditions a path must meet.
//!
//! NGINX (ngx_http_core_find_location, src/http/ngx_http_core_module.c)
//! picks, level by level from the server: an exact `=` location equal to
//! the path wins at once; else the longest prefix location of the level
//! that matches, and the search goes on among the locations nested in it.
//! When the deepest level is done without an exact or regex match, the
//! regex locations are tried, innermost level first: the regexes nested in
//! the deepest prefix, then those of the level above unless the prefix
//! chosen below it is `^~`, and so on up to the server's; the first regex
//! that matches is chosen, and then the regexes nested in it are tried the
//! same way. Without a regex match, the deepest prefix is chosen.
//!
//! As routes (first match wins), per level: its exact locations; then, for
//! each prefix that is `^~`, has nested locations, or extends one that
//! does (longest first), a block of its own: its nested levels, then every
//! regex NGINX would try under it, each restricted to the prefix, then the
//! prefix itself; then the level's regexes (with the ones of the levels
//! above); then its plain prefixes, longest first. A regex location
//! nested in a regex location carries both conditions.
//!
//! A route has one `path` regex (on the path) and one `match` regex (on
//! the path and query). A prefix condition (or a regex that is one, like
//! `^/uploads/`) is exact on either; two regexes that are not prefixes
//! cannot be intersected without look-ahead, which calmcache's regex
//! engine lacks: the outer one goes on `match` (which also sees the
//! query), or is left out when `match` is taken, each with a comment. It
//! must not write route keys or read directives.

use super::{Location, Modifier};
use crate::import_nginx::pathre::{self, RouteRegex};

/// One condition a path must meet.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Cond {
    /// Starts with the text (`/` is every path).
    Prefix { text: String, ci: bool },
    /// Is the text.
    Exact { text: String, ci: bool },
    /// Matches the regex (NGINX's source text).
    Regex { pattern: String, ci: bool },
}

/// One route to write: the location it takes requests to, and the
/// conditions (outermost first).
pub(super) struct Planned<'a> {
    pub(super) loc: &'a Location,
    pub(super) conds: Vec<Cond>,
}

/// The routes of one server's `locations`, in first-match order, and
/// notes where a nested location cannot be placed.
pub(super) fn plan(locations: &[Location]) -> (Vec<Planned<'_>>, Vec<String>) {
    let mut p = Planner::default();
    p.level(locations, &[], &[]);
    (p.out, p.notes)
}

#[derive(Default)]
struct Planner<'a> {
    out: Vec<Planned<'a>>,
    notes: Vec<String>,
}

fn is_prefix(loc: &Location) -> bool {
    matches!(loc.modifier, Modifier::Prefix | Modifier::NoRegex)
}

fn is_regex(loc: &Location) -> bool {
    matches!(loc.modifier, Modifier::Regex { .. })
}

/// The condition a location itself sets.
fn cond(loc: &Location) -> Cond {
    match loc.modifier {
        Modifier::Exact => Cond::Exact {
            text: loc.pattern.clone(),
            ci: false,
        },
        Modifier::Regex { case_insensitive } => Cond::Regex {
            pattern: loc.pattern.clone(),
            ci: case_insensitive,
        },
        Modifier::Prefix | Modifier::NoRegex | Modifier::Named => Cond::Prefix {
            text: loc.pattern.clone(),
            ci: false,
        },
    }
}

fn with(ctx: &[Cond], c: Cond) -> Vec<Cond> {
    let mut v = ctx.to_vec();
    v.push(c);
    v
}

impl<'a> Planner<'a> {
    /// The routes of one level: `ctx` the conditions of the prefixes above,
    /// `pending` the regexes of the levels above NGINX tries after this
    /// level's own.
    fn level(&mut self, locs: &'a [Location], ctx: &[Cond], pending: &[&'a Location]) {
        for loc in locs.iter().filter(|l| l.modifier == Modifier::Exact) {
            self.out.push(Planned {
                loc,
                conds: with(ctx, cond(loc)),
            });
        }
        let regexes: Vec<&Location> = locs.iter().filter(|l| is_regex(l)).collect();
        let mut tried = regexes.clone();
        tried.extend_from_slice(pending);
        let mut prefixes: Vec<&Location> = locs.iter().filter(|l| is_prefix(l)).collect();
        prefixes.sort_by_key(|l| std::cmp::Reverse(l.pattern.len()));
        let blocks = own_blocks(&prefixes);
        for (&p, &own) in prefixes.iter().zip(&blocks) {
            if !own {
                continue;
            }
            let mut below: Vec<&Location> = Vec::new();
            if p.modifier != Modifier::NoRegex {
                below.extend_from_slice(&regexes);
            }
            below.extend_from_slice(pending);
            let inner = with(ctx, cond(p));
            self.level(&p.nested, &inner, &below);
            self.out.push(Planned {
                loc: p,
                conds: inner,
            });
        }
        for r in tried {
            self.regex(r, ctx);
        }
        for (&p, &own) in prefixes.iter().zip(&blocks) {
            if !own {
                self.out.push(Planned {
                    loc: p,
                    conds: with(ctx, cond(p)),
                });
            }
        }
    }

    /// A regex location that matched under `ctx`: the regexes nested in it
    /// first, then itself.
    fn regex(&mut self, r: &'a Location, ctx: &[Cond]) {
        let inner = with(ctx, cond(r));
        for n in &r.nested {
            if is_regex(n) {
                self.regex(n, &inner);
            } else {
                // NGINX accepts a prefix nested in a regex location only when its
                // text starts with the regex's source text, which no real path does.
                self.notes.push(format!(
                    "not carried over: location {} ({}): a prefix or exact location nested in \
                     the regex location at {} is not matched as NGINX would (only regexes are \
                     looked up inside a regex location here)",
                    n.pattern, n.pos, r.pos
                ));
            }
        }
        self.out.push(Planned {
            loc: r,
            conds: inner,
        });
    }
}

/// Which prefixes (longest first) need a block of their own: `^~`, with
/// nested locations, or extending a prefix that needs one (its paths must
/// be taken before that prefix's block catches them).
fn own_blocks(prefixes: &[&Location]) -> Vec<bool> {
    let mut own: Vec<bool> = prefixes
        .iter()
        .map(|p| p.modifier == Modifier::NoRegex || !p.nested.is_empty())
        .collect();
    // Shortest first, so a chain of extensions is followed.
    for i in (0..prefixes.len()).rev() {
        if own[i] {
            continue;
        }
        own[i] = (i + 1..prefixes.len())
            .any(|j| own[j] && prefixes[i].pattern.starts_with(&prefixes[j].pattern));
    }
    own
}

/// A regex that only says "starts with this text" (`^/uploads/`) or "is
/// this text" (`^/a$`): the text and whether it is exact.
fn literal(pattern: &str) -> Option<(String, bool)> {
    let body = pattern.strip_prefix('^')?;
    let (body, exact) = match body.strip_suffix('$') {
        Some(b) if !b.ends_with('\\') => (b, true),
        _ => (body, false),
    };
    let mut text = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() => text.push(e),
                _ => return None,
            },
            '.' | '^' | '$' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|' => {
                return None
            }
            c => text.push(c),
        }
    }
    Some((text, exact))
}

/// The route keys for `conds`, or `None` when no path can meet them all
/// (two prefixes that exclude each other); `notes` says what is not exact.
pub(super) fn keys(
    conds: &[Cond],
    notes: &mut Vec<String>,
) -> Result<Option<Vec<RouteRegex>>, String> {
    let mut literals: Vec<(String, bool, bool)> = Vec::new(); // text, exact, ci
    let mut regexes: Vec<(String, bool)> = Vec::new();
    for c in conds {
        match c {
            Cond::Prefix { text, ci } => literals.push((text.clone(), false, *ci)),
            Cond::Exact { text, ci } => literals.push((text.clone(), true, *ci)),
            Cond::Regex { pattern, ci } => match literal(pattern) {
                Some((text, exact)) => literals.push((text, exact, *ci)),
                None => regexes.push((pattern.clone(), *ci)),
            },
        }
    }
    let lit = match strongest(&literals) {
        // `/` (not exact) is every path: no condition.
        Ok(lit) => lit.filter(|(text, exact, _)| *exact || text != "/"),
        Err(()) => return Ok(None),
    };
    let mut out = Vec::new();
    match (regexes.pop(), lit) {
        (None, None) => {}
        (None, Some((text, exact, ci))) => out.push(pathre::literal_path(&text, exact, ci)),
        (Some((re, ci)), lit) => {
            out.push(pathre::location(&re, ci)?);
            if let Some((text, exact, lci)) = lit {
                out.push(pathre::literal_target(&text, exact, lci));
            } else if let Some((outer, oci)) = regexes.pop() {
                notes.push(format!(
                    "The enclosing regex location {outer:?} is written as `match`, which sees \
                     the query too: a query matching it where the path does not takes this \
                     route (calmcache cannot intersect two path regexes: no look-ahead)."
                ));
                out.push(RouteRegex::Target(
                    pathre::location(&outer, oci)?.regex().to_owned(),
                ));
            }
            for (outer, _) in regexes {
                notes.push(format!(
                    "The enclosing regex location {outer:?} is not part of this route's \
                     condition: calmcache's route holds one path and one match regex and cannot \
                     intersect more (no look-ahead); this route may take paths NGINX would not."
                ));
            }
        }
    }
    Ok(Some(out))
}

/// The literal condition that implies the others (the longest), or
/// `Err` when two cannot both hold.
fn strongest(literals: &[(String, bool, bool)]) -> Result<Option<(String, bool, bool)>, ()> {
    let Some(best) = literals
        .iter()
        .max_by_key(|(text, exact, _)| (*exact, text.len()))
        .cloned()
    else {
        return Ok(None);
    };
    let fits = |(text, exact, ci): &(String, bool, bool)| {
        let (a, b) = if *ci {
            (best.0.to_lowercase(), text.to_lowercase())
        } else {
            (best.0.clone(), text.clone())
        };
        if *exact {
            a == b
        } else {
            a.starts_with(&b)
        }
    };
    if literals.iter().all(fits) {
        Ok(Some(best))
    } else {
        Err(())
    }
}
