//! Header value templates: the values of a route's `request_headers` and
//! `response_headers` rules (`"X-Real-IP" = "$remote_addr"`), compiled
//! once from the config and rendered per request.
//!
//! Owns the variables a value may read beyond a key's ([`key_template`]'s,
//! which mean the same here):
//!
//! | variable | value |
//! |---|---|
//! | `$remote_addr` | the client's address, or the one a `trusted_proxies` proxy forwarded for |
//! | `$server_port` | the local port the request came in on |
//! | `$upstream_cache_status` | response values only: HIT, MISS, EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS (empty for an answer the cache did not class) |
//!
//! Unlike a key, a value may be literal text alone, and a request field a
//! variable reads is copied as its bytes (a key escapes them). Literal text
//! must be a valid field value (no control characters but tab); what a
//! variable brings is checked when rendered ([`ValueTemplate::render`]).
//! Must not: decide where a value goes (proxy/header_rules.rs does).
//!
//! [`key_template`]: crate::config::key_template

use std::net::IpAddr;

use http::HeaderValue;

use crate::config::key_template::{self, Out, Part, RequestView};
use crate::config::suggest;

/// Which rules a template belongs to: what it may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// `request_headers`: rendered before the answer exists.
    Request,
    /// `response_headers`: rendered for the answer to the client.
    Response,
}

/// The variables only values have (with the key's, for suggestions).
const OWN: [&str; 3] = ["remote_addr", "server_port", "upstream_cache_status"];

/// A compiled header value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueTemplate {
    /// As written in the config.
    text: String,
    /// What to render, in order.
    pieces: Vec<Piece>,
    /// The value when it is literal text alone: rendered once, here.
    fixed: Option<HeaderValue>,
}

/// One piece of a value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// Literal text or a key variable.
    Key(Part),
    /// `$remote_addr`.
    RemoteAddr,
    /// `$server_port`.
    ServerPort,
    /// `$upstream_cache_status`.
    UpstreamCacheStatus,
}

/// What a value's variables read beyond the request's own parts.
pub(crate) struct Vars<'a> {
    /// The request (after the edge: host, normalised target, fields).
    pub request: RequestView<'a>,
    /// `$remote_addr`.
    pub remote_addr: IpAddr,
    /// `$server_port`.
    pub server_port: u16,
    /// `$upstream_cache_status` (empty on the request side).
    pub cache_status: &'static str,
}

impl ValueTemplate {
    /// Compiles `text` for `side`. The error names the problem, e.g.
    /// `unknown variable "$remote_adr" (did you mean "$remote_addr"?)`.
    pub(crate) fn parse(text: &str, side: Side) -> Result<ValueTemplate, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(dollar) = rest.find('$') {
            literal(&rest[..dollar], &mut pieces)?;
            let (name, after) = key_template::variable_name(&rest[dollar..])?;
            pieces.push(piece(name, side)?);
            rest = after;
        }
        literal(rest, &mut pieces)?;
        let fixed = match pieces.as_slice() {
            [] => Some(HeaderValue::from_static("")),
            [Piece::Key(Part::Literal(text))] => HeaderValue::from_str(text).ok(),
            _ => None,
        };
        Ok(ValueTemplate {
            text: text.to_owned(),
            pieces,
            fixed,
        })
    }

    /// True for `""`: in `request_headers.set`, NGINX's way to remove.
    pub(crate) fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// True when a variable reads the request itself (anything but
    /// `$remote_addr`, `$server_port`, `$upstream_cache_status`): a
    /// response rule then needs the request kept until the answer.
    pub(crate) fn reads_request(&self) -> bool {
        self.pieces
            .iter()
            .any(|p| matches!(p, Piece::Key(part) if !matches!(part, Part::Literal(_))))
    }

    /// The variables this value reads that a client chooses freely
    /// (`$http_`, `$cookie_`, `$arg_`) and `key` does not read, as written:
    /// sent upstream on a caching route, the origin may answer by them while
    /// the answer is stored for every client of the key.
    pub(crate) fn unkeyed(&self, key: &key_template::KeyTemplate) -> Vec<String> {
        let chosen = |part: &Part| match part {
            Part::Http(name) => Some(format!("$http_{}", name.as_str().replace('-', "_"))),
            Part::Cookie(name) => Some(format!("$cookie_{name}")),
            Part::Arg(name) => Some(format!("$arg_{name}")),
            _ => None,
        };
        self.pieces
            .iter()
            .filter_map(|piece| match piece {
                Piece::Key(part) if !key.has_part(part) => chosen(part),
                _ => None,
            })
            .collect()
    }

    /// The value for `vars`; `None` when what a variable brought makes it
    /// no valid field value (the caller drops the field and counts it).
    /// A literal value costs no allocation.
    pub(crate) fn render(&self, vars: &Vars<'_>) -> Option<HeaderValue> {
        if let Some(fixed) = &self.fixed {
            return Some(fixed.clone());
        }
        let mut out: Vec<u8> = Vec::with_capacity(self.text.len() + 16);
        for piece in &self.pieces {
            match piece {
                Piece::Key(part) => part.render(&vars.request, &mut out),
                Piece::RemoteAddr => out.text(&vars.remote_addr.to_string()),
                Piece::ServerPort => out.text(&vars.server_port.to_string()),
                Piece::UpstreamCacheStatus => out.text(vars.cache_status),
            }
        }
        HeaderValue::from_maybe_shared(bytes::Bytes::from(out)).ok()
    }
}

/// Pushes literal `text` (if any), refusing what no field value may hold.
fn literal(text: &str, pieces: &mut Vec<Piece>) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\t') {
        return Err(format!(
            "{text:?} holds {c:?}: a header value cannot hold control characters"
        ));
    }
    pieces.push(Piece::Key(Part::Literal(text.to_owned())));
    Ok(())
}

/// The piece for variable `name` (without `$`) on `side`.
fn piece(name: &str, side: Side) -> Result<Piece, String> {
    match (name, side) {
        ("remote_addr", _) => return Ok(Piece::RemoteAddr),
        ("server_port", _) => return Ok(Piece::ServerPort),
        ("upstream_cache_status", Side::Response) => return Ok(Piece::UpstreamCacheStatus),
        ("upstream_cache_status", Side::Request) => {
            return Err(
                "\"$upstream_cache_status\" is known once there is an answer: only in \
                 response_headers"
                    .to_owned(),
            )
        }
        _ => {}
    }
    key_template::variable(name).map(Piece::Key).map_err(|e| {
        match suggest::closest(name, OWN).filter(|_| e.starts_with("unknown variable")) {
            Some(near) => format!("unknown variable \"${name}\" (did you mean \"${near}\"?)"),
            None => e,
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::{HeaderMap, Method};

    fn render(text: &str, side: Side, headers: &HeaderMap) -> Option<HeaderValue> {
        let template = ValueTemplate::parse(text, side).unwrap();
        let vars = Vars {
            request: RequestView {
                scheme: "https",
                method: &Method::GET,
                host: "example.com",
                path_and_query: "/a?b=1",
                headers,
            },
            remote_addr: "192.0.2.7".parse().unwrap(),
            server_port: 8443,
            cache_status: "HIT",
        };
        template.render(&vars)
    }

    #[test]
    fn values_read_the_key_variables_and_their_own() {
        let mut headers = HeaderMap::new();
        headers.insert("cookie", "sid=abc; lang=de".parse().unwrap());
        let value = "$remote_addr $server_port $scheme://$host$request_uri $cookie_lang";
        let got = render(value, Side::Request, &headers).unwrap();
        assert_eq!(got, "192.0.2.7 8443 https://example.com/a?b=1 de");
        let got = render("$upstream_cache_status", Side::Response, &headers).unwrap();
        assert_eq!(got, "HIT");
        assert_eq!(render("DENY", Side::Response, &headers).unwrap(), "DENY");
    }

    #[test]
    fn a_literal_value_is_rendered_once() {
        let template = ValueTemplate::parse("SAMEORIGIN", Side::Response).unwrap();
        assert!(template.fixed.is_some());
        assert!(!template.reads_request());
        assert!(ValueTemplate::parse("", Side::Request).unwrap().is_empty());
        let reads = ValueTemplate::parse("$host", Side::Response).unwrap();
        assert!(reads.reads_request());
        let own = ValueTemplate::parse("$remote_addr", Side::Response).unwrap();
        assert!(!own.reads_request(), "kept in the answer's own context");
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        let cases = [
            (
                "$remote_adr",
                Side::Request,
                "did you mean \"$remote_addr\"",
            ),
            ("$hots", Side::Request, "did you mean \"$host\""),
            (
                "$upstream_cache_status",
                Side::Request,
                "only in response_headers",
            ),
            ("a\nb", Side::Response, "control characters"),
            ("a\rb", Side::Request, "control characters"),
            ("50$", Side::Response, "must be followed by a variable name"),
        ];
        for (text, side, want) in cases {
            let e = ValueTemplate::parse(text, side).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_variable_that_brings_no_valid_value_gives_none() {
        let mut headers = HeaderMap::new();
        // obs-text passes hyper's parser; a value may carry it as it is.
        headers.insert("x-raw", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        let got = render("$http_x_raw", Side::Request, &headers).unwrap();
        assert_eq!(got.as_bytes(), b"caf\xe9");
        // A query argument cannot bring a control byte (the URI parser
        // refuses them), but a template render must never panic on one:
        // a literal join of two tabs and text is valid, a DEL is not.
        let template = ValueTemplate {
            text: String::new(),
            pieces: vec![Piece::Key(Part::Literal("a\u{7f}".into()))],
            fixed: None,
        };
        let vars = Vars {
            request: RequestView {
                scheme: "http",
                method: &Method::GET,
                host: "",
                path_and_query: "/",
                headers: &headers,
            },
            remote_addr: "::1".parse().unwrap(),
            server_port: 80,
            cache_status: "",
        };
        assert!(template.render(&vars).is_none());
    }
}
