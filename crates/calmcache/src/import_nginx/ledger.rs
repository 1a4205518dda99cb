//! The fate of every directive the parser read: carried over (by the code
//! that maps it) or commented (with its file:line). "Nothing is dropped
//! silently" is checked here, not hoped for: after a conversion,
//! [`account`] walks the whole tree and writes a `not carried over`
//! comment for every directive that no mapping claimed and no comment
//! named, and counts them ([`Census`]).
//!
//! The record lives in a thread-local set for the length of one
//! [`scope`]: the conversion is synchronous on one thread, and the
//! mappings that read a directive (down to `Settings`' accessors) sit many
//! calls below the converter. Outside a scope, marking does nothing. It
//! must not know what any directive means.

use std::cell::RefCell;
use std::collections::HashSet;

use super::toml_out::Doc;
use super::tree::Directive;

/// A directive's identity: file, line and text (two directives of one
/// line differ by their text).
type Key = (String, usize, String);

fn key(d: &Directive) -> Key {
    (d.pos.file.to_string(), d.pos.line, d.text())
}

thread_local! {
    static CARRIED: RefCell<Option<HashSet<Key>>> = const { RefCell::new(None) };
}

/// Marks `d` as carried over to the config (a key, a section, a route).
pub(crate) fn carried(d: &Directive) {
    CARRIED.with(|c| {
        if let Some(set) = c.borrow_mut().as_mut() {
            set.insert(key(d));
        }
    });
}

/// Marks `d` and every directive in its block as carried over.
pub(crate) fn carried_tree(d: &Directive) {
    carried(d);
    d.children().iter().for_each(carried_tree);
}

/// How the directives of one conversion fared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Every directive of the tree (blocks and what is inside them).
    pub(crate) directives: usize,
    /// Claimed by a mapping.
    pub(crate) carried: usize,
    /// Named with its file:line in a comment (the ones no mapping claimed
    /// nor commented get one here).
    pub(crate) commented: usize,
    /// Where the carried ones are (`file:line`), for tests.
    pub(crate) carried_at: HashSet<String>,
}

impl std::fmt::Display for Census {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "directives {}, carried {}, commented {}",
            self.directives, self.carried, self.commented
        )
    }
}

/// Runs `convert` with a fresh record, then [`account`]s for `tree`.
pub(crate) fn scope<E>(
    tree: &[Directive],
    convert: impl FnOnce() -> Result<Doc, E>,
) -> Result<(Doc, Census), E> {
    CARRIED.with(|c| *c.borrow_mut() = Some(HashSet::new()));
    let doc = convert();
    let carried = CARRIED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    let mut doc = doc?;
    let census = account(tree, &carried, &mut doc);
    Ok((doc, census))
}

/// Counts every directive of `tree` and comments the ones neither carried
/// nor already named in a comment as "`text` (file:line)".
fn account(tree: &[Directive], carried: &HashSet<Key>, doc: &mut Doc) -> Census {
    let comments: Vec<&str> = doc.comments().collect();
    let named = |d: &Directive| {
        let needle = format!("`{}` ({})", d.text(), d.pos);
        comments.iter().any(|c| c.contains(&needle))
    };
    let mut census = Census::default();
    let mut silent = Vec::new();
    let mut stack: Vec<&Directive> = tree.iter().rev().collect();
    while let Some(d) = stack.pop() {
        census.directives += 1;
        if carried.contains(&key(d)) {
            census.carried += 1;
            census.carried_at.insert(d.pos.to_string());
        } else {
            census.commented += 1;
            if !named(d) {
                silent.push(d);
            }
        }
        stack.extend(d.children().iter().rev());
    }
    for d in silent {
        doc.header.push(super::note_skipped(
            d,
            "nothing the importer maps reads it here (for a proxy_* directive: no location in \
             its scope uses it, e.g. no proxy_cache or proxy_pass there)",
        ));
    }
    census
}
