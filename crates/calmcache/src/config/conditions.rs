//! Request conditions for `bypass` and `no_store` (`"cookie:NAME"`,
//! `"header:NAME"`, `"arg:NAME"`), parsed once from the config.
//!
//! Owns the condition syntax and what "matches" means for each kind. It must
//! not decide what a match does: the proxy skips the lookup for `bypass`
//! (NGINX `proxy_cache_bypass`) and does not store for `no_store` (NGINX
//! `proxy_no_cache`).
//!
//! | condition | matches when |
//! |---|---|
//! | `cookie:PREFIX` | some cookie in the Cookie header(s) has a name starting with `PREFIX` |
//! | `header:NAME` | header `NAME` is present with a non-empty value |
//! | `arg:NAME` | the query has argument `NAME` with a value other than `0` |
//!
//! `cookie:` is a prefix match because the cookies users care about carry a
//! suffix: WordPress sets `wordpress_logged_in_<hash>`, so
//! `cookie:wordpress_logged_in` is what matches a logged-in user. Cookie
//! names are compared case-sensitively, as browsers send them.
//!
//! `arg:` is like NGINX's "not empty and not 0" for `$arg_NAME`, except that
//! a bare `?preview` and an empty `?preview=` count as set: only `=0` turns
//! the argument off. Every occurrence counts (`?preview=0&preview=1`
//! matches), because origins disagree on which repeated argument wins (PHP
//! takes the last). Names are compared as sent, case-sensitively and without
//! percent-decoding: `?pre%76iew=1` does not match `arg:preview`, although an
//! origin that decodes would see `preview`. So do not rely on `arg:` alone
//! to keep private responses out of the cache; pair it with the cookie or
//! header that authorises them.

use std::fmt;

use http::{HeaderMap, HeaderName};

/// The kinds, as written before the `:`.
const KINDS: [&str; 3] = ["cookie", "header", "arg"];

/// One `bypass` / `no_store` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// `cookie:PREFIX`: a cookie whose name starts with the prefix.
    Cookie(String),
    /// `header:NAME`: the header, present with a non-empty value.
    Header(HeaderName),
    /// `arg:NAME`: the query argument, set to anything but `0`.
    Arg(String),
}

impl Condition {
    /// Parses `"cookie:wordpress_logged_in"`, `"header:Authorization"`,
    /// `"arg:preview"`. The error names what is wrong, e.g.
    /// `"cookies:x": unknown condition kind "cookies" (expected "cookie", "header" or "arg")`.
    pub fn parse(text: &str) -> Result<Condition, String> {
        let Some((kind, name)) = text.split_once(':') else {
            return Err(format!(
                r#"{text:?} is not a condition (expected "cookie:NAME", "header:NAME" or "arg:NAME")"#
            ));
        };
        if !KINDS.contains(&kind) {
            return Err(format!(
                r#"{text:?}: unknown condition kind {kind:?} (expected "cookie", "header" or "arg")"#
            ));
        }
        if name.is_empty() {
            return Err(format!("{text:?}: the {kind} name is empty"));
        }
        match kind {
            "cookie" => {
                check_chars(text, kind, name, |c| {
                    c.is_ascii_graphic() && !matches!(c, ';' | '=' | ',' | '"' | '\\')
                })?;
                Ok(Condition::Cookie(name.to_owned()))
            }
            "arg" => {
                check_chars(text, kind, name, |c| {
                    !c.is_control() && !c.is_whitespace() && !matches!(c, '&' | '=' | '#' | '?')
                })?;
                Ok(Condition::Arg(name.to_owned()))
            }
            _ => HeaderName::from_bytes(name.as_bytes())
                .map(Condition::Header)
                .map_err(|_| format!("{text:?}: {name:?} is not a valid header name")),
        }
    }

    /// Whether the request with `headers` and `query` (without `?`) meets
    /// this condition; see the module docs for each kind.
    pub fn matches(&self, headers: &HeaderMap, query: Option<&str>) -> bool {
        match self {
            Condition::Cookie(prefix) => {
                cookie_names(headers).any(|name| name.starts_with(prefix.as_bytes()))
            }
            Condition::Header(name) => headers
                .get_all(name)
                .iter()
                .any(|value| !value.as_bytes().trim_ascii().is_empty()),
            Condition::Arg(name) => query.is_some_and(|query| arg_is_set(query, name)),
        }
    }
}

impl fmt::Display for Condition {
    /// As written in the config (header names lower-cased), e.g. `cookie:wp-postpass`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Cookie(prefix) => write!(f, "cookie:{prefix}"),
            Condition::Header(name) => write!(f, "header:{name}"),
            Condition::Arg(name) => write!(f, "arg:{name}"),
        }
    }
}

/// True when any of `conditions` matches.
pub(crate) fn any_match(
    conditions: &[Condition],
    headers: &HeaderMap,
    query: Option<&str>,
) -> bool {
    conditions
        .iter()
        .any(|condition| condition.matches(headers, query))
}

/// Refuses a name with a character `allowed` rejects, naming it.
fn check_chars(
    text: &str,
    kind: &str,
    name: &str,
    allowed: impl Fn(char) -> bool,
) -> Result<(), String> {
    match name.chars().find(|c| !allowed(*c)) {
        Some(bad) => Err(format!("{text:?}: {kind} names cannot contain {bad:?}")),
        None => Ok(()),
    }
}

/// The name of every cookie in every Cookie field line. A piece without `=`
/// counts as a name, so that a condition errs towards matching.
fn cookie_names(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|line| line.as_bytes().split(|b| *b == b';'))
        .map(|pair| {
            let name = pair.split(|b| *b == b'=').next().unwrap_or(pair);
            name.trim_ascii()
        })
}

/// Whether some occurrence of `name` in `query` is bare or has a value other than `0`.
fn arg_is_set(query: &str, name: &str) -> bool {
    query.split('&').any(|pair| match pair.split_once('=') {
        Some((key, value)) => key == name && value != "0",
        None => pair == name,
    })
}

#[cfg(test)]
#[path = "conditions_tests.rs"]
mod tests;
