//! `calmcache import-nginx`: an NGINX config as an equivalent calmcache TOML.
//!
//! ```text
//! nginx.conf --lexer--> tokens (file:line) --tree--> directives (includes expanded)
//!            --convert--> toml_out::Doc (sections, keys, comments) --render--> TOML text
//! ```
//!
//! Every directive is either carried over to a key (with a comment where
//! behaviour differs) or named in a `#` comment saying why not: none is
//! dropped silently (ledger.rs checks it over the whole tree and comments
//! what no mapping claimed). A config NGINX itself would refuse for its syntax
//! (unbalanced braces, an unterminated quote, a missing `;`, a wrong
//! argument count, an include that cannot be read, an include loop) is an
//! [`ImportError`] naming the file and line. Of the rest of the crate it
//! uses only config's TOML quoting and size units (`toml_key`,
//! `toml_string`, `largest_unit`), its host name forms (`HostPattern`,
//! for `server_name`) and its variable names (`key_template::variable`,
//! for `return`): its output is checked like any other config, by
//! `calmcache check`.

mod arity;
mod cache;
mod convert;
mod headers;
mod ledger;
mod lexer;
mod limits;
mod pathre;
mod server_names;
mod settings;
mod toml_out;
mod tree;
mod units;
mod upstreams;
mod variables;
mod zones;

use std::path::Path;

/// Why a config could not be imported, with the file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    /// `file:line` (or the file alone).
    pub(crate) place: String,
    /// What is wrong.
    pub(crate) message: String,
}

impl ImportError {
    pub(crate) fn at(pos: &lexer::Pos, message: impl Into<String>) -> ImportError {
        ImportError {
            place: pos.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn file(file: &str, message: impl Into<String>) -> ImportError {
        ImportError {
            place: file.to_owned(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

impl std::error::Error for ImportError {}

/// Comment lines collected for a section.
pub(crate) type Notes = Vec<String>;

/// "not carried over: `directive` (file:line): why".
pub(crate) fn note_skipped(d: &tree::Directive, why: &str) -> String {
    format!("not carried over: `{}` ({}): {why}", d.text(), d.pos)
}

/// Reads the NGINX config at `path` (and its includes) and returns the
/// calmcache TOML.
pub fn import_nginx(path: &Path) -> Result<String, ImportError> {
    let tree = tree::load(path)?;
    arity::check(&tree)?;
    let prefix = path.parent().unwrap_or(Path::new("."));
    let doc = convert::convert(&tree, prefix, &path.display().to_string())?;
    Ok(toml_out::render(&doc))
}

#[cfg(test)]
mod tests;
