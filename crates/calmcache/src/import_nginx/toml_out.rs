//! The TOML document the importer writes: sections of keys, each section
//! and key with `#` comment lines above it.
//!
//! Owns TOML spelling (string escapes, quoted keys, inline tables) and comment
//! wrapping. It must not decide what goes into the document.

use std::fmt::Write as _;

/// A whole document.
#[derive(Debug, Default)]
pub(crate) struct Doc {
    /// Comment lines at the top.
    pub(crate) header: Vec<String>,
    /// Sections in output order.
    pub(crate) sections: Vec<Section>,
}

/// `[server]`, `[upstreams.app]`, `[[routes]]`...
#[derive(Clone, Debug, Default)]
pub(crate) struct Section {
    /// The header line, e.g. `[zones.ssd_cache]`.
    pub(crate) title: String,
    /// Comment lines above the header.
    pub(crate) comments: Vec<String>,
    /// Keys in output order.
    pub(crate) entries: Vec<Entry>,
}

/// One `key = value` with its comments.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) value: Value,
    pub(crate) comments: Vec<String>,
}

/// A TOML value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    List(Vec<Value>),
    /// An inline table, keys in order.
    Table(Vec<(String, Value)>),
}

impl Section {
    /// A section titled `title`.
    pub(crate) fn new(title: impl Into<String>) -> Section {
        Section {
            title: title.into(),
            ..Section::default()
        }
    }

    /// Adds `key = value`.
    pub(crate) fn set(&mut self, key: &str, value: Value) -> &mut Entry {
        self.entries.retain(|e| e.key != key);
        self.entries.push(Entry {
            key: key.to_owned(),
            value,
            comments: Vec::new(),
        });
        self.entries.last_mut().expect("just pushed")
    }

    /// Adds `key = value` before the other keys.
    pub(crate) fn set_first(&mut self, key: &str, value: Value) -> &mut Entry {
        self.set(key, value);
        self.entries.rotate_right(1);
        &mut self.entries[0]
    }

    /// The value of `key`, if set.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|e| e.key == key).map(|e| &e.value)
    }

    /// Adds a comment line above the section.
    pub(crate) fn note(&mut self, text: impl Into<String>) {
        self.comments.push(text.into());
    }
}

impl Entry {
    /// Adds a comment line above the key.
    pub(crate) fn note(&mut self, text: impl Into<String>) -> &mut Entry {
        self.comments.push(text.into());
        self
    }
}

/// `key` as TOML writes it: bare when it can be (the config report's own quoting).
pub(crate) use crate::config::toml_key as key;
use crate::config::toml_string;

impl Doc {
    /// Every comment line of the document, header, sections and keys.
    pub(crate) fn comments(&self) -> impl Iterator<Item = &str> {
        let sections = self.sections.iter().flat_map(|s| {
            s.comments
                .iter()
                .chain(s.entries.iter().flat_map(|e| e.comments.iter()))
        });
        self.header.iter().chain(sections).map(String::as_str)
    }
}

/// The document as text.
pub(crate) fn render(doc: &Doc) -> String {
    let mut out = String::new();
    comment_lines(&mut out, &doc.header);
    for section in &doc.sections {
        out.push('\n');
        comment_lines(&mut out, &section.comments);
        let _ = writeln!(out, "{}", section.title);
        for entry in &section.entries {
            comment_lines(&mut out, &entry.comments);
            let _ = writeln!(out, "{} = {}", key(&entry.key), value(&entry.value));
        }
    }
    out
}

fn comment_lines(out: &mut String, lines: &[String]) {
    for line in lines {
        for wrapped in wrap(line, 78) {
            if wrapped.is_empty() {
                out.push_str("#\n");
            } else {
                let _ = writeln!(out, "# {wrapped}");
            }
        }
    }
}

/// `text` cut at spaces into lines of at most `width` characters (a longer
/// word stays whole); embedded newlines are kept.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for paragraph in text.split('\n') {
        let mut line = String::new();
        for word in paragraph.split(' ') {
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
    }
    lines
}

/// A value as TOML text.
pub(crate) fn value(value: &Value) -> String {
    match value {
        Value::Str(s) => string(s),
        Value::Int(n) => n.to_string(),
        Value::Float(f) if f.fract() == 0.0 && f.is_finite() => format!("{f:.1}"),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::List(items) => {
            let items: Vec<String> = items.iter().map(self::value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Table(pairs) if pairs.is_empty() => "{}".to_owned(),
        Value::Table(pairs) => {
            let pairs: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{} = {}", key(k), self::value(v)))
                .collect();
            format!("{{ {} }}", pairs.join(", "))
        }
    }
}

/// A literal string ('...') for text with backslashes (regexes read as
/// written), else a basic one.
fn string(s: &str) -> String {
    let literal_ok = s.contains('\\') && !s.contains('\'') && !s.chars().any(char::is_control);
    if literal_ok {
        format!("'{s}'")
    } else {
        toml_string(s)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn renders_sections_keys_and_comments() {
        let mut doc = Doc {
            header: vec!["top".into()],
            ..Doc::default()
        };
        let mut s = Section::new("[upstreams.\"a.b\"]");
        s.note("why");
        s.set(
            "servers",
            Value::List(vec![
                Value::Str("h:1".into()),
                Value::Table(vec![
                    ("address".into(), Value::Str("h:2".into())),
                    ("weight".into(), Value::Int(3)),
                ]),
            ]),
        )
        .note("servers note");
        s.set("match", Value::Str(r"^/a\.b".into()));
        s.set("q", Value::Str("say \"hi\"".into()));
        s.set("f", Value::Float(0.0));
        doc.sections.push(s);
        let text = render(&doc);
        assert_eq!(
            text,
            "# top\n\n# why\n[upstreams.\"a.b\"]\n# servers note\nservers = [\"h:1\", { address = \"h:2\", weight = 3 }]\n\
             match = '^/a\\.b'\nq = \"say \\\"hi\\\"\"\nf = 0.0\n"
        );
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            parsed["upstreams"]["a.b"]["servers"][1]["weight"].as_integer(),
            Some(3)
        );
    }

    #[test]
    fn wraps_long_comments() {
        let lines = wrap(&"word ".repeat(30), 20);
        assert!(lines.iter().all(|l| l.len() <= 20));
    }
}
