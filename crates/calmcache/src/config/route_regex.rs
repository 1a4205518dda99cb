//! What a route's `match` regex can reach, read from its structure: the
//! `check` warning about a `match` anchored at the end that a query can
//! satisfy (`'\.(css|js)$'` takes `/account.php?x.css`, which NGINX's
//! `location` never would: it sees the path only).
//!
//! Owns that one judgement; the wording is `warnings.rs`'s. It must not
//! refuse anything: such a `match` is valid and may be meant.

use regex_syntax::hir::{Class, Hir, HirKind, Look};

/// A class taking more characters than this is broad (`.`, `\S`, `[^/]`):
/// it takes `?` by accident. A narrower one that lists `?` (`[?&]`) means it.
const BROAD: u32 = 64;

/// True when `pattern` is anchored at the end (`$`, `\z`) and a request
/// could satisfy it with its query: it is not anchored at the start (the
/// match may begin inside the query), or a broad class (`.`, `[^/]`) can
/// step over the `?`. A pattern that names `?` itself (`\?`, `[?&]`) is
/// about the query on purpose and is not reported.
pub(crate) fn query_reaches_end_anchor(pattern: &str) -> bool {
    let Ok(hir) = regex_syntax::Parser::new().parse(pattern) else {
        return false;
    };
    let props = hir.properties();
    if !props.look_set_suffix().contains(Look::End) {
        return false;
    }
    let reach = scan(&hir);
    if reach.named {
        return false;
    }
    !props.look_set_prefix().contains(Look::Start) || reach.broad
}

/// How a regex can take a `?`.
#[derive(Default)]
struct Reach {
    /// A literal `?` or a narrow class that lists it.
    named: bool,
    /// A broad class that takes it.
    broad: bool,
}

fn scan(hir: &Hir) -> Reach {
    let mut reach = Reach::default();
    walk(hir, &mut reach);
    reach
}

fn walk(hir: &Hir, reach: &mut Reach) {
    match hir.kind() {
        HirKind::Literal(literal) => reach.named |= literal.0.contains(&b'?'),
        HirKind::Class(class) => {
            let (takes, size) = class_takes(class);
            if takes && size > BROAD {
                reach.broad = true;
            } else if takes {
                reach.named = true;
            }
        }
        HirKind::Repetition(rep) if rep.max != Some(0) => walk(&rep.sub, reach),
        HirKind::Capture(capture) => walk(&capture.sub, reach),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => {
            subs.iter().for_each(|sub| walk(sub, reach));
        }
        HirKind::Repetition(_) | HirKind::Empty | HirKind::Look(_) => {}
    }
}

/// Whether `class` takes `?`, and how many characters it takes.
fn class_takes(class: &Class) -> (bool, u32) {
    match class {
        Class::Unicode(c) => c.ranges().iter().fold((false, 0), |(takes, size), r| {
            let span = u32::from(r.end()).saturating_sub(u32::from(r.start())) + 1;
            (
                takes || (r.start()..=r.end()).contains(&'?'),
                size.saturating_add(span),
            )
        }),
        Class::Bytes(c) => c.ranges().iter().fold((false, 0), |(takes, size), r| {
            let span = u32::from(r.end()) - u32::from(r.start()) + 1;
            (takes || (r.start()..=r.end()).contains(&b'?'), size + span)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::query_reaches_end_anchor;

    #[test]
    fn end_anchored_matches_a_query_can_satisfy() {
        for reached in [
            r"\.(css|js|png)$",
            r"\.css\z",
            r"^/static/.*\.css$",
            r"^/[^/]+\.js$",
            r"^/a/\S+$",
            r"(?i)\.JPG$",
        ] {
            assert!(query_reaches_end_anchor(reached), "{reached}");
        }
        for safe in [
            // Not anchored at the end, or only in one branch.
            r"^/api/",
            r"\.css",
            r"^/(admin|account)(/|\?|$)",
            // Anchored at both ends, nothing that steps over `?`.
            r"^/favicon\.ico$",
            r"^/a/[a-z0-9]+\.css$",
            r"^/[^?]*\.css$",
            // About the query on purpose.
            r"^/search\?q=.*$",
            r"[?&]page=[0-9]+$",
            // Multi-line `$` is not the end of the target; invalid: not ours.
            r"(?m)\.css$",
            r"\.css($",
        ] {
            assert!(!query_reaches_end_anchor(safe), "{safe}");
        }
    }
}
