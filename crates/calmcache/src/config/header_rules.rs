//! A route's header rules, as validated: `request_headers` (NGINX's
//! `proxy_set_header`), `response_headers` (`add_header`, `add_header ...
//! always`, `proxy_hide_header`) and `expires`, and the fields no rule may
//! touch, each with the reason `check` gives ([`request_refusal`],
//! [`response_refusal`]).
//!
//! Owns the rules' types and the refusal lists. Must not: apply them
//! (proxy/header_rules.rs does), nor read a request.

use std::time::Duration;

use http::HeaderName;

use crate::config::key_template::KeyTemplate;
use crate::config::value_template::ValueTemplate;

/// A route's `request_headers`, `response_headers` and `expires`.
#[derive(Clone, Debug, Default)]
pub struct HeaderRules {
    /// On every request sent upstream for the route.
    pub request: RequestRules,
    /// On every answer the route gives a client.
    pub response: ResponseRules,
}

/// `request_headers = { set = {...}, remove = [...] }`.
#[derive(Clone, Debug, Default)]
pub struct RequestRules {
    /// Fields set (replacing any the client sent), in name order. A `""`
    /// value is a removal (NGINX's way) and is in `remove` instead.
    pub set: Vec<(HeaderName, ValueTemplate)>,
    /// Fields removed.
    pub remove: Vec<HeaderName>,
}

impl RequestRules {
    /// No rule: the upstream request is left as it is.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

/// `response_headers = { add = {...}, always = {...}, remove = [...] }`
/// and `expires`.
#[derive(Clone, Debug, Default)]
pub struct ResponseRules {
    /// Set on answers with a status in [`ADD_STATUSES`] (NGINX's
    /// `add_header` without `always`), replacing the origin's field.
    pub add: Vec<(HeaderName, ValueTemplate)>,
    /// Set on every answer (`add_header ... always`).
    pub always: Vec<(HeaderName, ValueTemplate)>,
    /// Removed from every answer (`proxy_hide_header`).
    pub remove: Vec<HeaderName>,
    /// `Expires` and `Cache-Control` on answers with a status in
    /// [`ADD_STATUSES`].
    pub expires: Expires,
}

impl ResponseRules {
    /// No rule: answers leave as they are, at no cost.
    pub fn is_empty(&self) -> bool {
        self.add.is_empty()
            && self.always.is_empty()
            && self.remove.is_empty()
            && self.expires == Expires::Off
    }

    /// True when a value reads the request (`$host`, `$http_NAME`...): it
    /// is then kept until the answer.
    pub fn reads_request(&self) -> bool {
        self.add
            .iter()
            .chain(&self.always)
            .any(|(_, value)| value.reads_request())
    }
}

/// The statuses NGINX's `add_header` (without `always`) and `expires`
/// apply to.
pub(crate) const ADD_STATUSES: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// `expires` (NGINX's directive of that name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expires {
    /// `"off"`: the origin's fields pass as they are (the default).
    #[default]
    Off,
    /// `"epoch"`: `Expires` in 1970, `Cache-Control: no-cache`.
    Epoch,
    /// `"max"`: `Expires` in 2037, `Cache-Control: max-age=315360000`.
    Max,
    /// A duration: `Expires` that far from now, `Cache-Control: max-age`.
    After(Duration),
}

impl Expires {
    /// As `expires` is written (`"off"`, `"epoch"`, `"max"`, `"1h"`): for
    /// the summary.
    pub fn describe(self) -> String {
        match self {
            Expires::Off => "off".into(),
            Expires::Epoch => "epoch".into(),
            Expires::Max => "max".into(),
            Expires::After(d) => format!("{}s", d.as_secs()),
        }
    }
}

/// Why a request rule may not set or remove `name` on a route keyed by
/// `key`; `None` when it may. Host may be set: the key reads the host the
/// client asked for, which the edge admitted, and the origin is told which
/// site to serve (NGINX's `proxy_set_header Host`): two client hosts stay
/// two keys.
pub(crate) fn request_refusal(name: &HeaderName, key: &KeyTemplate) -> Option<&'static str> {
    let reason = match name.as_str() {
        "host" => return None,
        "accept-encoding" => {
            "the cache negotiates codings itself (it stores what it asked for and compresses \
             per client); a rule would make the stored encodings disagree with the request"
        }
        "if-match"
        | "if-none-match"
        | "if-modified-since"
        | "if-unmodified-since"
        | "if-range"
        | "range" => {
            "the cache manages conditional and range requests: it asks for whole answers to \
             store and adds its own validators to revalidate"
        }
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "te"
        | "trailer" | "upgrade" | "content-length" | "expect" => {
            "a hop-by-hop or framing field: the proxy frames each upstream request itself"
        }
        _ if key.reads_header(name) => {
            "the route's key reads it: the origin must see what the answer was keyed by"
        }
        _ => return None,
    };
    Some(reason)
}

/// Why a response rule may not add, set or remove `name` (on a route that
/// caches when `cached`); `None` when it may. `expires` is set when the
/// route's `expires` writes `Cache-Control` and `Expires` itself.
pub(crate) fn response_refusal(
    name: &HeaderName,
    cached: Cached,
    expires: Expires,
) -> Option<&'static str> {
    let reason = match name.as_str() {
        "content-length" | "transfer-encoding" | "content-encoding" | "content-range" => {
            "it describes the body as sent (the proxy frames, encodes and slices it per client)"
        }
        "connection" | "keep-alive" | "proxy-connection" | "te" | "trailer" | "upgrade" => {
            "a hop-by-hop field: each connection's own"
        }
        "vary" => "clients and downstream caches must see what the cache selected the answer by",
        "age" | "cache-status" => "the cache's own report of this answer",
        "accept-ranges" => "the cache answers ranges of stored answers itself",
        "set-cookie" => {
            "a cookie is per client: one set by the edge would ride on answers the cache \
             shares (removing Set-Cookie is allowed)"
        }
        "etag" | "last-modified" if cached == Cached::Yes => {
            "the cache answers conditional requests with the stored validators: clients must \
             hold the same ones"
        }
        "cache-control" | "expires" if expires != Expires::Off => "`expires` sets it",
        _ => return None,
    };
    Some(reason)
}

/// Whether a route has a zone: some refusals hold only for cached answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    /// The route has a zone.
    Yes,
    /// Every answer is passed.
    No,
}

/// `removing Set-Cookie` is the one refused name a `remove` may name.
pub(crate) fn may_remove(name: &HeaderName) -> bool {
    *name == http::header::SET_COOKIE
}

#[cfg(test)]
#[path = "header_rules_tests.rs"]
mod tests;
