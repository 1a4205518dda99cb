//! `config.example.toml` pinned to `defaults.rs`: every key the example
//! shows (set, or commented out as `# key = value`) is a key the code knows,
//! shows the code's default, and every key the code knows is shown.
//!
//! The first time a key appears in a section is its documentation; later
//! lines in the same section (`# redis = [...]` after `# redis = "..."`,
//! the WordPress `bypass` after `bypass = []`) are variations. Lines
//! indented past `# ` (`#   servers = [...]`) are illustrations in prose.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use super::defaults::{self, Shown};
use super::units;

const EXAMPLE: &str = include_str!("../../../../config.example.toml");

/// One `key = value` line of the example, in its section.
struct Shows {
    line: usize,
    /// `section.key`, `upstreams.*.keepalive`.
    key: String,
    value: toml::Value,
}

/// A byte of a key or section name.
fn word(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.')
}

/// The section a `[header]` or `[[header]]` line names, maps' tables as
/// `upstreams.*`; `None` for any other line.
fn section(header: &str) -> Option<String> {
    let name = header.strip_prefix('[')?.trim_start_matches('[');
    let name = name.strip_suffix(']')?.trim_end_matches(']');
    if name.is_empty() || !name.bytes().all(word) {
        return None;
    }
    let mut parts = name.split('.');
    let first = parts.next()?;
    Some(match first {
        "upstreams" | "zones" | "limits" => format!("{first}.*"),
        _ => name.to_owned(),
    })
}

/// Every documented key line of the example; `Err` names a line that is
/// neither (an unknown section, a set line TOML refuses).
fn shown() -> Result<Vec<Shows>, String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut seen_here: BTreeSet<String> = BTreeSet::new();
    for (i, line) in EXAMPLE.lines().enumerate() {
        let line_no = i + 1;
        let (text, commented) = match line.strip_prefix("# ") {
            Some(text) => (text, true),
            None if line.starts_with('#') => continue,
            None => (line, false),
        };
        if let Some(name) = section(text) {
            current = name;
            if !defaults::SECTIONS.contains(&current.as_str()) {
                return Err(format!("line {line_no}: unknown section [{current}]"));
            }
            seen_here.clear();
            continue;
        }
        let Some((key, _)) = text.split_once(" = ") else {
            continue;
        };
        if key.is_empty() || !key.bytes().all(|b| word(b) && b != b'.') {
            continue;
        }
        let table = match text.parse::<toml::Table>() {
            Ok(table) => table,
            Err(_) if commented => continue,
            Err(e) => return Err(format!("line {line_no}: {e}")),
        };
        if !seen_here.insert(key.to_owned()) {
            continue;
        }
        for (key, value) in table {
            out.push(Shows {
                line: line_no,
                key: format!("{current}.{key}"),
                value,
            });
        }
    }
    Ok(out)
}

/// Why `value` is not what `expected` says the example must show, if it is not.
fn differs(expected: Shown, value: &toml::Value) -> Option<String> {
    let ok = match (expected, value) {
        (Shown::Example, _) => true,
        (Shown::Count(n), toml::Value::Integer(v)) => u64::try_from(*v) == Ok(n),
        (Shown::Bool(b), toml::Value::Boolean(v)) => *v == b,
        (Shown::Float(f), toml::Value::Float(v)) => (*v - f).abs() < f64::EPSILON,
        (Shown::Duration(d), toml::Value::String(v)) => units::parse_duration(v) == Ok(d),
        (Shown::Size(s), toml::Value::String(v)) => units::parse_size(v) == Ok(s),
        (Shown::Text(t), toml::Value::String(v)) => v == t,
        (Shown::Texts(list), toml::Value::Array(v)) => {
            v.len() == list.len() && v.iter().zip(list).all(|(a, b)| a.as_str() == Some(b))
        }
        (Shown::Empty, toml::Value::Array(v)) => v.is_empty(),
        (Shown::Empty, toml::Value::Table(v)) => v.is_empty(),
        _ => false,
    };
    (!ok).then(|| format!("shows {value}, the code's default is {expected:?}"))
}

/// The problems of one shown key: unknown, or not the default. An inline
/// table the code does not know as one key is checked key by key.
fn check(key: &str, value: &toml::Value, known: &[(&str, Shown)], out: &mut Vec<String>) {
    if let Some((_, expected)) = known.iter().find(|(name, _)| *name == key) {
        out.extend(differs(*expected, value).map(|why| format!("{key}: {why}")));
        return;
    }
    match value {
        toml::Value::Table(table) => {
            for (inner, value) in table {
                check(&format!("{key}.{inner}"), value, known, out);
            }
        }
        _ => out.push(format!("{key}: not a key the code knows (defaults::keys)")),
    }
}

#[test]
fn every_key_of_the_example_shows_the_code_default() {
    let known = defaults::keys();
    let mut problems = Vec::new();
    let shown = shown().unwrap();
    for shows in &shown {
        let mut found = Vec::new();
        check(&shows.key, &shows.value, &known, &mut found);
        problems.extend(
            found
                .into_iter()
                .map(|p| format!("line {}: {p}", shows.line)),
        );
    }
    let keys: BTreeSet<String> = shown.iter().map(|s| s.key.clone()).collect();
    for (key, _) in &known {
        let inside = |shown: &String| shown == key || key.starts_with(&format!("{shown}."));
        if !keys.iter().any(inside) {
            problems.push(format!("{key}: not shown in config.example.toml"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The zones' `max_object_size` lines show the default computed from
/// their `max_size` (an eighth, at most 64 MiB).
#[test]
fn the_example_zones_show_the_computed_max_object_size() {
    let shown = shown().unwrap();
    let size = |key: &str| -> Vec<u64> {
        shown
            .iter()
            .filter(|s| s.key == key)
            .map(|s| units::parse_size(s.value.as_str().unwrap()).unwrap())
            .collect()
    };
    let (max, object) = (size("zones.*.max_size"), size("zones.*.max_object_size"));
    assert_eq!(max.len(), object.len());
    for (max, object) in max.into_iter().zip(object) {
        assert_eq!(
            defaults::zone::max_object_size(max),
            object,
            "max_size {max}"
        );
    }
}

/// The table is well formed: every key in a known section, none twice.
#[test]
fn the_keys_table_has_each_key_once_in_a_known_section() {
    let mut seen = BTreeSet::new();
    for (key, _) in defaults::keys() {
        assert!(seen.insert(key), "{key} twice");
        let known = defaults::SECTIONS.iter().any(|s| {
            key.strip_prefix(s)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|rest| !rest.is_empty())
        });
        assert!(known, "{key}: no such section");
    }
}
