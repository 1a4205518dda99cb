//! TOML text -> [`RawConfig`], with every key serde refuses reported at once.
//!
//! Every `Raw*` struct denies unknown fields, and serde stops at the first
//! refusal. So a refused key (an unknown one, or a value of the wrong type)
//! is recorded with its TOML path, its line and, for an unknown key, the
//! nearest expected field (serde's message lists them), then removed from
//! the document, which is deserialized again, until it goes through. The
//! mechanism knows no key name: a field added to a `Raw*` struct needs
//! nothing here. Unknown keys alone leave a [`RawConfig`] that validation
//! checks further (its problems are added to theirs); a wrong type stops
//! before validation, which would only report the removed key as missing.
//!
//! `toml_edit` (the parser `toml` is built on) keeps the document as a tree
//! that can lose a key, and the original's key positions for the lines.

use serde_path_to_error::Segment;
use toml_edit::{ImDocument, Item};

use super::error::{toml_key, Problem};
use super::raw::RawConfig;
use super::suggest;

/// The most problems one parse reports: each is found by deserializing the
/// whole document again.
const MOST_PROBLEMS: usize = 64;

/// A file that deserialized, maybe once its unknown keys were set aside.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) raw: RawConfig,
    /// One problem per unknown key, in file order.
    pub(crate) unknown_keys: Vec<Problem>,
}

/// Parses `text`: a TOML syntax error is one problem (with its line and
/// column); otherwise every refused key is found (see the module doc).
pub(crate) fn parse(text: &str) -> Result<Parsed, Vec<Problem>> {
    let original = ImDocument::parse(text).map_err(|e| {
        let message = at_position(one_line(e.message()), text, e.span().map(|s| s.start));
        vec![Problem::new("", message)]
    })?;
    let mut doc = original.clone().into_mut();
    let (mut unknown_keys, mut wrong) = (Vec::new(), Vec::new());
    loop {
        let deserializer = toml_edit::de::Deserializer::from(doc.clone());
        let error = match serde_path_to_error::deserialize::<_, RawConfig>(deserializer) {
            Ok(raw) if wrong.is_empty() => return Ok(Parsed { raw, unknown_keys }),
            Ok(_) => break,
            Err(error) => error,
        };
        let steps = steps(error.path());
        let inner = error.into_inner();
        let position = inner.span().map(|s| s.start).or_else(|| {
            steps
                .as_deref()
                .and_then(|s| key_offset(original.as_item(), s))
        });
        let path = steps.as_deref().map(path_text).unwrap_or_default();
        let message = at_position(one_line(inner.message()), text, position);
        let problem = Problem::new(path, message);
        if inner.message().starts_with(UNKNOWN_FIELD) {
            unknown_keys.push(match unknown_field_hint(inner.message()) {
                Some(hint) => problem.hint(hint),
                None => problem,
            });
        } else {
            wrong.push(problem);
        }
        let removed = steps.is_some_and(|s| remove(doc.as_item_mut(), &s));
        if !removed || unknown_keys.len() + wrong.len() >= MOST_PROBLEMS {
            break;
        }
    }
    Err(unknown_keys.into_iter().chain(wrong).collect())
}

/// One step of a TOML path.
enum Step {
    Key(String),
    Index(usize),
}

/// The steps of serde's path; `None` when a step is not a key or an index
/// (an enum variant), so the key cannot be found again in the document.
fn steps(path: &serde_path_to_error::Path) -> Option<Vec<Step>> {
    path.iter()
        .map(|segment| match segment {
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// The path as a user would write it in TOML: `routes[0].ttl.200`,
/// `upstreams."my.app".servers`; empty for the document itself.
fn path_text(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Index(index) => out.push_str(&format!("[{index}]")),
            Step::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&toml_key(key));
            }
        }
    }
    out
}

/// The item one step below `item`.
fn child<'a>(item: &'a Item, step: &Step) -> Option<&'a Item> {
    match step {
        Step::Key(key) => item.get(key.as_str()),
        Step::Index(index) => item.get(*index),
    }
}

/// Where the last step of `steps` is written in the original document: the
/// key itself, or an array element.
fn key_offset(root: &Item, steps: &[Step]) -> Option<usize> {
    let (last, parents) = steps.split_last()?;
    let mut item = root;
    for step in parents {
        item = child(item, step)?;
    }
    let span = match last {
        Step::Key(key) => item.as_table_like()?.get_key_value(key)?.0.span(),
        Step::Index(index) => item.get(*index)?.span(),
    };
    span.map(|s| s.start)
}

/// Removes the key or element at `steps`; false when it is not there.
fn remove(root: &mut Item, steps: &[Step]) -> bool {
    let Some((last, parents)) = steps.split_last() else {
        return false;
    };
    let mut item = root;
    for step in parents {
        // `get_mut` would insert a missing key: look first.
        if child(item, step).is_none() {
            return false;
        }
        let next = match step {
            Step::Key(key) => item.get_mut(key.as_str()),
            Step::Index(index) => item.get_mut(*index),
        };
        let Some(next) = next else {
            return false;
        };
        item = next;
    }
    match (last, item) {
        (Step::Key(key), item) => item
            .as_table_like_mut()
            .is_some_and(|table| table.remove(key).is_some()),
        (Step::Index(index), Item::ArrayOfTables(tables)) if *index < tables.len() => {
            tables.remove(*index);
            true
        }
        (Step::Index(index), Item::Value(toml_edit::Value::Array(array)))
            if *index < array.len() =>
        {
            array.remove(*index);
            true
        }
        _ => false,
    }
}

/// toml puts some details on a second line; a problem is one line.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message.lines().map(str::trim).collect();
    lines.join(": ")
}

/// `message (line L, column C)` for byte `offset` of `text`, when known.
fn at_position(message: String, text: &str, offset: Option<usize>) -> String {
    match offset {
        Some(offset) => {
            let (line, column) = line_column(text, offset);
            format!("{message} (line {line}, column {column})")
        }
        None => message,
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// How serde's message for a key a struct does not have begins.
const UNKNOWN_FIELD: &str = "unknown field `";

/// For serde's "unknown field `zonee`, expected one of `name`, `zone`, ..."
/// message: `did you mean "zone"?` when one expected field is a near miss
/// (the message lists them all already).
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.strip_prefix(UNKNOWN_FIELD)?;
    let (unknown, expected) = rest.split_once('`')?;
    // Every other back-quoted word in the message is an expected field.
    let fields = expected.split('`').skip(1).step_by(2);
    let near = suggest::closest(unknown, fields)?;
    Some(format!("did you mean {near:?}?"))
}
