//! [`ConfigError`] and [`Problem`]: how a bad config is reported to the user.
//!
//! Owns the wording of the report (one problem per line, each with its TOML
//! path) and the process exit code. It must not decide what is a problem:
//! `raw.rs` and `validate.rs` do.

use std::fmt;
use std::path::PathBuf;

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{}: cannot read config: {source}", path.display())]
    Io {
        /// The file we tried to read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file was read but is not a valid config.
    #[error("{}", render(source_name, problems))]
    Invalid {
        /// Names the config in messages, usually the file path.
        source_name: String,
        /// Every problem found, in file order where possible; never empty.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The process exit code for a config that cannot be used: 2, the usual
    /// code for a usage error, so scripts can tell it from a runtime failure.
    pub fn exit_code(&self) -> i32 {
        2
    }
}

/// One thing wrong with a config, located by its TOML path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The TOML path of the offending key, e.g. `routes[2].zone`; empty when
    /// the problem is the document itself (a TOML syntax error at the top).
    pub path: String,
    /// What is wrong, e.g. `no zone named "sdd"`.
    pub message: String,
    /// How to fix it, when we can tell, e.g. `zones: disk, ssd`.
    pub hint: Option<String>,
}

impl Problem {
    /// A problem at `path` without a hint.
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            message: message.into(),
            hint: None,
        }
    }

    /// The same problem with `hint` attached.
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

/// One line per problem: `<source>: <path>: <message> (hint: <hint>)`.
fn render(source_name: &str, problems: &[Problem]) -> String {
    let lines: Vec<String> = problems
        .iter()
        .map(|problem| format!("{source_name}: {problem}"))
        .collect();
    lines.join("\n")
}

/// A key as it must be written in a TOML path: bare when TOML allows it
/// (`app`, `200`), quoted otherwise (`"my.app"`), so a path can be pasted back.
pub(crate) fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

/// `text` as a TOML basic string (`"..."`), escaped as TOML reads it back.
pub(crate) fn toml_string(text: &str) -> String {
    use fmt::Write as _;
    let mut out = String::from('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
