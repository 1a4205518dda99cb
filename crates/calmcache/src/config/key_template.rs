//! Cache key templates (`key = "$scheme$host$uri$is_args$args"`), compiled
//! once from the config and rendered per request.
//!
//! Owns the variable names and what each reads from a request. It must not
//! decide what is cached: the proxy asks for a key and looks it up.
//!
//! Variables follow NGINX's names and meaning, with the differences noted:
//!
//! | variable | value |
//! |---|---|
//! | `$scheme` | `http` or `https` |
//! | `$host` | the Host header lower-cased, port kept as sent; empty if absent |
//! | `$uri` | the normalised path (see below), without the query |
//! | `$args` | the query string without `?` |
//! | `$is_args` | `?` when the query is non-empty, else empty |
//! | `$request_uri` | the normalised path and the query as sent |
//! | `$method` | the request method, e.g. `GET` |
//! | `$arg_NAME` | the raw value of the first query argument `NAME`; empty if absent |
//! | `$http_NAME` | request header `NAME` (`_` for `-`), several field lines joined with `, ` |
//! | `$cookie_NAME` | the value of cookie `NAME`; empty if absent |
//!
//! Differences from NGINX:
//! - `$uri` is the path as the edge normalised it (edge.rs): unreserved
//!   escapes decoded and others upper-cased, dot-segments removed, repeated
//!   slashes merged unless the route sets `merge_slashes = false`. Reserved
//!   escapes stay encoded: NGINX decodes everything, so there `/a%2Fb` and
//!   `/a/b` share a key; here they never do.
//! - `$arg_NAME` and `$cookie_NAME` read the name spelled exactly as in
//!   the template. A request that spells it another way some origin reads
//!   as that name (`?pag%65=2`, `?Page=2`, `Cookie: lang =de`), gives it
//!   twice or with an empty value is ambiguous ([`KeyTemplate::is_ambiguous`]):
//!   the proxy passes it to the origin and stores nothing.
//! - Variable names are lower-case: `$HOST` is an error, not `$host`.
//!
//! A name is `[A-Za-z0-9_]+` and runs as far as it can, so `$urix` is the
//! (unknown) variable `urix`; write `${uri}x` for `$uri` followed by `x`.
//! Every other character is literal text. A `$` not followed by a name is an
//! error (there is no escape for a literal `$`).

use std::fmt::Write as _;

use http::{HeaderMap, HeaderName, Method};

use crate::config::{request_names, suggest};

/// The variables without a `NAME` part, as written after `$`.
const FIXED: [&str; 7] = [
    "scheme",
    "host",
    "uri",
    "args",
    "is_args",
    "request_uri",
    "method",
];

/// The variables that take a `NAME`, as written after `$` (before the `_`).
const PREFIXED: [&str; 3] = ["arg", "http", "cookie"];

/// A compiled `key` template: literal text and variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    /// As written in the config.
    text: String,
    /// What to render, in order; never empty.
    parts: Vec<Part>,
}

/// One piece of a template (also of a header value template,
/// `value_template.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Literal(String),
    Scheme,
    Host,
    Uri,
    Args,
    IsArgs,
    RequestUri,
    Method,
    /// `$arg_NAME`: the name as written (case-sensitive).
    Arg(String),
    /// `$http_NAME`: the header, `_` already turned into `-`.
    Http(HeaderName),
    /// `$cookie_NAME`: the name as written (case-sensitive).
    Cookie(String),
}

/// The parts of [`KeyTemplate::DEFAULT`].
const DEFAULT_PARTS: [Part; 5] = [
    Part::Scheme,
    Part::Host,
    Part::Uri,
    Part::IsArgs,
    Part::Args,
];

/// The request parts a template reads.
pub struct RequestView<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The request method.
    pub method: &'a Method,
    /// The Host header (or the URI authority) as sent, port included;
    /// empty if absent. Rendering lower-cases it.
    pub host: &'a str,
    /// The request target in origin form, e.g. `/a/b?c=d`.
    pub path_and_query: &'a str,
    /// The request headers.
    pub headers: &'a HeaderMap,
}

impl RequestView<'_> {
    /// The path without the query.
    fn path(&self) -> &str {
        self.path_and_query
            .split_once('?')
            .map_or(self.path_and_query, |(path, _)| path)
    }

    /// The query without `?`; empty when there is none.
    fn query(&self) -> &str {
        self.path_and_query
            .split_once('?')
            .map_or("", |(_, query)| query)
    }
}

impl KeyTemplate {
    /// The template used when a route sets no `key`.
    pub const DEFAULT: &'static str = super::defaults::route::KEY;

    /// Compiles `text`. The error names the problem, e.g.
    /// `unknown variable "$hots" (did you mean "$host"?)`.
    pub fn parse(text: &str) -> Result<KeyTemplate, String> {
        if text.is_empty() {
            return Err("empty template".to_owned());
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(dollar) = rest.find('$') {
            literal.push_str(&rest[..dollar]);
            let (name, after) = variable_name(&rest[dollar..])?;
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            parts.push(variable(name)?);
            rest = after;
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        if parts.iter().all(|part| matches!(part, Part::Literal(_))) {
            return Err(format!(
                "{text:?} has no variables, so every request would share one cached response"
            ));
        }
        Ok(KeyTemplate {
            text: text.to_owned(),
            parts,
        })
    }

    /// True for the default template (however it is spelt, e.g. with
    /// braces): the proxy may then key on (scheme, host, path_and_query)
    /// without rendering.
    pub fn is_default(&self) -> bool {
        self.parts == DEFAULT_PARTS
    }

    /// True when the key renders `part` (a variable the key reads).
    pub(crate) fn has_part(&self, part: &Part) -> bool {
        self.parts.contains(part)
    }

    /// True when the key reads request header `name` (`$http_NAME`, or
    /// `Cookie` for `$cookie_NAME`).
    pub fn reads_header(&self, name: &HeaderName) -> bool {
        self.parts.iter().any(|part| part.reads_header(name))
    }

    /// True when a part the key reads may not be what the origin reads:
    /// an `$http_NAME` field on several lines, or an `$arg_NAME` /
    /// `$cookie_NAME` that is repeated, empty, or spelled another way an
    /// origin reads as the same name (`?pag%65=2`, `Cookie: lang =de`; see
    /// `request_names.rs`). The key reads the first exact spelling, many
    /// origins the last (Django, PHP) or a decoded one, so such a request
    /// could store one value's answer under another's key; it is passed to
    /// the origin, never stored.
    pub fn is_ambiguous(&self, query: &str, headers: &HeaderMap) -> bool {
        self.parts.iter().any(|part| match part {
            Part::Arg(name) => request_names::arg_mentions(query, name).is_ambiguous(),
            Part::Cookie(name) => request_names::cookie_mentions(headers, name).is_ambiguous(),
            Part::Http(name) => headers.get_all(name).iter().nth(1).is_some(),
            _ => false,
        })
    }

    /// The template text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Renders the key for `req` into `out` (cleared first), so callers can
    /// reuse a buffer.
    pub fn render(&self, req: &RequestView<'_>, out: &mut String) {
        out.clear();
        for part in &self.parts {
            part.render(req, out);
        }
    }
}

/// Where a part is rendered: a key (a `String`, other bytes escaped so
/// different values never render the same) or a header value (bytes as
/// they are; `value_template.rs` checks the whole value).
pub(crate) trait Out {
    /// Text as it is.
    fn text(&mut self, text: &str);
    /// A request field's bytes.
    fn bytes(&mut self, bytes: &[u8]);
}

impl Out for String {
    fn text(&mut self, text: &str) {
        self.push_str(text);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        push_bytes(self, bytes);
    }
}

impl Out for Vec<u8> {
    fn text(&mut self, text: &str) {
        self.extend_from_slice(text.as_bytes());
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Part {
    /// Appends what this part reads of `req` to `out`: the one place that
    /// says what each variable is worth.
    pub(crate) fn render(&self, req: &RequestView<'_>, out: &mut impl Out) {
        match self {
            Part::Literal(text) => out.text(text),
            Part::Scheme => out.text(req.scheme),
            // The edge lower-cases the host it admits: as it is, mostly.
            Part::Host if !req.host.bytes().any(|b| b.is_ascii_uppercase()) => out.text(req.host),
            Part::Host => out.text(&req.host.to_ascii_lowercase()),
            Part::Uri => out.text(req.path()),
            Part::Args => out.text(req.query()),
            Part::IsArgs => {
                if !req.query().is_empty() {
                    out.text("?");
                }
            }
            Part::RequestUri => out.text(req.path_and_query),
            Part::Method => out.text(req.method.as_str()),
            Part::Arg(name) => out.text(arg_value(req.query(), name).unwrap_or("")),
            Part::Http(name) => {
                for (i, value) in req.headers.get_all(name).iter().enumerate() {
                    if i > 0 {
                        out.text(", ");
                    }
                    out.bytes(value.as_bytes());
                }
            }
            Part::Cookie(name) => {
                if let Some(value) = cookie_value(req.headers, name) {
                    out.bytes(value);
                }
            }
        }
    }

    /// The header a part reads (`$http_NAME`; `Cookie` for `$cookie_NAME`).
    pub(crate) fn reads_header(&self, name: &HeaderName) -> bool {
        match self {
            Part::Http(read) => read == name,
            Part::Cookie(_) => *name == http::header::COOKIE,
            _ => false,
        }
    }
}

impl Default for KeyTemplate {
    /// The [`KeyTemplate::DEFAULT`] template.
    fn default() -> Self {
        KeyTemplate {
            text: KeyTemplate::DEFAULT.to_owned(),
            parts: DEFAULT_PARTS.to_vec(),
        }
    }
}

/// Splits `$name...` or `${name}...` (`text` starts with `$`) into the name
/// and the text after it.
pub(crate) fn variable_name(text: &str) -> Result<(&str, &str), String> {
    let body = text.get(1..).unwrap_or("");
    if let Some(braced) = body.strip_prefix('{') {
        let Some((name, after)) = braced.split_once('}') else {
            return Err(format!("{text:?}: \"${{\" is missing its closing \"}}\""));
        };
        if name.is_empty() {
            return Err(r#""${}" needs a variable name"#.to_owned());
        }
        if !name.bytes().all(is_name_byte) {
            return Err(format!(
                "\"${{{name}}}\" is not a variable name (letters, digits and \"_\" only)"
            ));
        }
        return Ok((name, after));
    }
    let end = body
        .bytes()
        .position(|b| !is_name_byte(b))
        .unwrap_or(body.len());
    if end == 0 {
        let shown: String = text.chars().take(8).collect();
        return Err(format!(
            "\"$\" must be followed by a variable name, at {shown:?}"
        ));
    }
    // Name bytes are ASCII, so `end` is a char boundary.
    Ok(body.split_at(end))
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The part for variable `name` (without `$`).
pub(crate) fn variable(name: &str) -> Result<Part, String> {
    let fixed = match name {
        "scheme" => Some(Part::Scheme),
        "host" => Some(Part::Host),
        "uri" => Some(Part::Uri),
        "args" => Some(Part::Args),
        "is_args" => Some(Part::IsArgs),
        "request_uri" => Some(Part::RequestUri),
        "method" => Some(Part::Method),
        _ => None,
    };
    if let Some(part) = fixed {
        return Ok(part);
    }
    for prefix in PREFIXED {
        let Some(rest) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('_'))
        else {
            continue;
        };
        if rest.is_empty() {
            return Err(format!("\"${prefix}_\" needs a name"));
        }
        return match prefix {
            "arg" => Ok(Part::Arg(rest.to_owned())),
            "cookie" => Ok(Part::Cookie(rest.to_owned())),
            _ => header_name(rest).map(Part::Http),
        };
    }
    Err(unknown_variable(name))
}

/// `$http_x_forwarded_for` -> `x-forwarded-for`.
fn header_name(rest: &str) -> Result<HeaderName, String> {
    let lower: String = rest
        .chars()
        .map(|c| {
            if c == '_' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    HeaderName::from_bytes(lower.as_bytes())
        .map_err(|_| format!("\"$http_{rest}\" does not name a header"))
}

/// `unknown variable "$hots" (did you mean "$host"?)`; prefixed variables
/// are suggested with their name kept (`$args_page` -> `$arg_page`).
fn unknown_variable(name: &str) -> String {
    let near_prefixed = name.split_once('_').and_then(|(prefix, rest)| {
        let near = match prefix {
            "header" => Some("http"),
            _ => suggest::closest(prefix, PREFIXED),
        };
        near.filter(|_| !rest.is_empty())
            .map(|near| format!("{near}_{rest}"))
    });
    let near = near_prefixed.or_else(|| suggest::closest(name, FIXED).map(str::to_owned));
    match near {
        Some(near) => format!("unknown variable \"${name}\" (did you mean \"${near}\"?)"),
        None => format!("unknown variable \"${name}\""),
    }
}

/// The raw value of the first argument `name` in `query`: `""` for a bare
/// `name`, `None` if absent.
fn arg_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some((key, value)) if key == name => Some(value),
            None if pair == name => Some(""),
            _ => None,
        })
}

/// The value of the first cookie called `name` in the Cookie header(s).
fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    cookies(headers).find_map(|(key, value)| (key == name.as_bytes()).then_some(value))
}

/// Every `name=value` pair of the Cookie header(s), in order (pairs
/// without `=` are skipped).
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&[u8], &[u8])> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|line| line.as_bytes().split(|b| *b == b';'))
        .filter_map(|pair| {
            let pair = pair.trim_ascii_start();
            let eq = pair.iter().position(|b| *b == b'=')?;
            let (key, value) = pair.split_at(eq);
            Some((key, value.get(1..).unwrap_or(b"").trim_ascii_end()))
        })
}

/// Header bytes as text: UTF-8 as is; any other byte as `\xNN`, so that
/// different values never render the same.
fn push_bytes(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains('\\') => out.push_str(text),
        _ => {
            for &b in bytes {
                if b.is_ascii() && b != b'\\' {
                    out.push(char::from(b));
                } else {
                    // Writing to a String cannot fail.
                    let _ = write!(out, "\\x{b:02x}");
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "key_template_props.rs"]
mod props;

#[cfg(test)]
#[path = "key_template_tests.rs"]
mod tests;
