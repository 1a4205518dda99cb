//! A route's header rules applied (config/header_rules.rs has them and
//! the fields they may not touch): `request_headers` on every request sent
//! upstream ([`to_upstream`]: fills, revalidations, refreshes and range
//! fetches through the fill's request, passes, WebSocket handshakes), and
//! `response_headers` and `expires` on every answer a client is sent
//! ([`to_client`], hits included, once, where the answer leaves), never on
//! the stored copy.
//!
//! A variable that renders no valid field value (a request field with a
//! byte no value may hold) drops that field and counts it in the route's
//! `header_values_dropped`.
//!
//! Invariant: a route without rules pays one length check per request and
//! allocates nothing here.
//! Must not: decide what is cached or read a raw client field the edge did
//! not admit.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri};

use crate::config::header_rules::{Expires, ADD_STATUSES};
use crate::config::key_template::RequestView;
use crate::config::value_template::{ValueTemplate, Vars};
use crate::config::RouteConfig;
use crate::net::conn::Peer;
use crate::proxy::answer::{Answer, Told};
use crate::proxy::state::Route;
use crate::telemetry::stats::Activity;

/// NGINX's `expires max`: a year past which no cache needs a date.
const MAX_EXPIRES: &str = "Thu, 31 Dec 2037 23:55:55 GMT";
/// NGINX's `expires epoch`.
const EPOCH_EXPIRES: &str = "Thu, 01 Jan 1970 00:00:01 GMT";
/// `max-age` of `expires max` (ten years, as NGINX), in seconds.
const MAX_AGE_MAX: u64 = 315_360_000;

/// Applies the route's `request_headers` to `headers`, a request on its
/// way upstream for `method` `uri` (its Host set, its forwarding fields
/// added) on behalf of `client`.
pub(crate) fn to_upstream(
    route: &Route,
    method: &Method,
    uri: &Uri,
    headers: &mut HeaderMap,
    client: Peer,
) {
    let rules = &route.cfg.headers.request;
    if rules.is_empty() {
        return;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let vars = Vars {
        request: RequestView {
            scheme: client.scheme(),
            method,
            host,
            path_and_query: uri.path_and_query().map_or("/", |pq| pq.as_str()),
            headers,
        },
        remote_addr: crate::proxy::edge::client_ip(&route.cfg, headers, client.addr.ip()),
        server_port: client.port,
        cache_status: "",
    };
    // Every value renders from the request as it came, then all are set.
    let rendered = render_all(route, &rules.set, &vars);
    for name in &rules.remove {
        headers.remove(name);
    }
    for (name, value) in rendered {
        match value {
            Some(value) => headers.insert(name.clone(), value),
            None => headers.remove(name),
        };
    }
}

/// Each value of `rules` for `vars`; a value that renders invalid is
/// `None` (and counted).
fn render_all<'r>(
    route: &Route,
    rules: &'r [(HeaderName, ValueTemplate)],
    vars: &Vars<'_>,
) -> Vec<(&'r HeaderName, Option<HeaderValue>)> {
    rules
        .iter()
        .map(|(name, template)| {
            let value = template.render(vars);
            if value.is_none() {
                route.activity.header_values_dropped.inc();
            }
            (name, value)
        })
        .collect()
}

/// What a route's response rules read of the request, kept from routing
/// until the answer leaves: only for routes with response rules.
pub(crate) struct Kept {
    scheme: &'static str,
    method: Method,
    /// The admitted host, the target and the fields: only when a value
    /// reads the request (else empty: nothing allocated).
    host: String,
    path_and_query: String,
    headers: HeaderMap,
    remote_addr: IpAddr,
    server_port: u16,
}

/// What [`to_client`] will need of `req`, or `None` (at no cost) when the
/// route has no response rules.
pub(crate) fn keep<B>(
    route: &RouteConfig,
    req: &http::Request<B>,
    client: Peer,
) -> Option<Box<Kept>> {
    let rules = &route.headers.response;
    if rules.is_empty() {
        return None;
    }
    let reads = rules.reads_request();
    let copy = |text: &str| {
        if reads {
            text.to_owned()
        } else {
            String::new()
        }
    };
    Some(Box::new(Kept {
        scheme: client.scheme(),
        method: req.method().clone(),
        host: copy(crate::http::headers::host_of(req)),
        path_and_query: copy(req.uri().path_and_query().map_or("/", |pq| pq.as_str())),
        headers: if reads {
            req.headers().clone()
        } else {
            HeaderMap::new()
        },
        remote_addr: crate::proxy::edge::client_ip(route, req.headers(), client.addr.ip()),
        server_port: client.port,
    }))
}

/// Applies the route's `response_headers` and `expires` to `answer`, as it
/// is sent to the client: `remove` first, then `add` (on the statuses
/// NGINX's `add_header` takes), `always`, and `expires` (same statuses).
pub(crate) fn to_client(
    route: &RouteConfig,
    activity: &Activity,
    answer: &mut Answer<'_>,
    kept: &Kept,
) {
    let rules = &route.headers.response;
    let cache_status = match &answer.told {
        Told::Answered(_, report) | Told::Refused(Some((_, report))) => {
            report.status.upstream_cache_status()
        }
        Told::Refused(None) | Told::Limited(_) | Told::Unclassed => "",
    };
    let vars = Vars {
        request: RequestView {
            scheme: kept.scheme,
            method: &kept.method,
            host: &kept.host,
            path_and_query: &kept.path_and_query,
            headers: &kept.headers,
        },
        remote_addr: kept.remote_addr,
        server_port: kept.server_port,
        cache_status,
    };
    let resp = &mut answer.resp;
    let listed = ADD_STATUSES.contains(&resp.status().as_u16());
    let headers = resp.headers_mut();
    for name in &rules.remove {
        headers.remove(name);
    }
    if listed {
        set_all(activity, headers, &rules.add, &vars);
    }
    set_all(activity, headers, &rules.always, &vars);
    if listed {
        expires(headers, rules.expires, SystemTime::now());
    }
}

fn set_all(
    activity: &Activity,
    headers: &mut HeaderMap,
    rules: &[(HeaderName, ValueTemplate)],
    vars: &Vars<'_>,
) {
    for (name, template) in rules {
        match template.render(vars) {
            Some(value) => {
                headers.insert(name.clone(), value);
            }
            None => {
                activity.header_values_dropped.inc();
                headers.remove(name);
            }
        }
    }
}

/// `text`, made of digits, letters, `,`, `:`, `-`, `=` and spaces: always
/// a valid value (the empty value otherwise, never reached).
fn header_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// NGINX's `expires`: `Expires` and `Cache-Control` replaced.
fn expires(headers: &mut HeaderMap, expires: Expires, now: SystemTime) {
    let (date, cache_control) = match expires {
        Expires::Off => return,
        Expires::Epoch => (
            HeaderValue::from_static(EPOCH_EXPIRES),
            HeaderValue::from_static("no-cache"),
        ),
        Expires::Max => (
            HeaderValue::from_static(MAX_EXPIRES),
            HeaderValue::from_static("max-age=315360000"),
        ),
        Expires::After(after) => {
            // Past ten years, "max"'s: an HTTP date cannot say a year past
            // 9999 (httpdate panics), and no cache keeps an answer longer.
            let after = after.min(Duration::from_secs(MAX_AGE_MAX));
            let at = now
                .checked_add(after)
                .unwrap_or(now + Duration::from_secs(MAX_AGE_MAX));
            (
                header_value(calmcache_core::freshness::format_date(at)),
                header_value(format!("max-age={}", after.as_secs())),
            )
        }
    };
    headers.insert(header::EXPIRES, date);
    headers.insert(header::CACHE_CONTROL, cache_control);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A config's `expires = "3000000d"` (year 10000 and later) panicked in
    /// httpdate on every answer of the route.
    #[test]
    fn an_expires_past_year_9999_is_max() {
        let mut headers = HeaderMap::new();
        let after = Duration::from_secs(3_000_000 * 86_400);
        expires(&mut headers, Expires::After(after), SystemTime::now());
        assert_eq!(headers[header::CACHE_CONTROL], "max-age=315360000");
    }

    #[test]
    fn expires_writes_both_fields_as_nginx() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let mut h = HeaderMap::new();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
        expires(&mut h, Expires::After(Duration::from_secs(3600)), now);
        assert_eq!(h[header::CACHE_CONTROL], "max-age=3600");
        assert_eq!(h[header::EXPIRES], "Sun, 09 Sep 2001 02:46:40 GMT");
        expires(&mut h, Expires::Epoch, now);
        assert_eq!(h[header::CACHE_CONTROL], "no-cache");
        assert_eq!(h[header::EXPIRES], EPOCH_EXPIRES);
        expires(&mut h, Expires::Max, now);
        assert_eq!(h[header::CACHE_CONTROL], "max-age=315360000");
        let mut untouched = HeaderMap::new();
        expires(&mut untouched, Expires::Off, now);
        assert!(untouched.is_empty());
    }
}
