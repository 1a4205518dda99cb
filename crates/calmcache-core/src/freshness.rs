//! Whether a response may be stored, and for how long it stays fresh: RFC 9111
//! §3 (storing), §4.2.1 (freshness lifetime) and §4.2.3 (age), RFC 5861 windows.
//!
//! Pure arithmetic over header values and wall-clock times; the caller supplies
//! the times so tests need no clock.

use std::time::{Duration, SystemTime};

use http::header::{AGE, CACHE_CONTROL, DATE, EXPIRES, SET_COOKIE, VARY};
use http::HeaderMap;

use crate::cache_control::CacheControl;

/// What the route says about storing, for one response.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreRules {
    /// The route's `ttl` for this status, used when the origin gives no freshness.
    pub ttl: Option<Duration>,
    /// Use `ttl` even when the origin sends `Cache-Control`/`Expires`.
    pub override_origin: bool,
    /// The route's `stale_while_revalidate` window.
    pub stale_while_revalidate: Duration,
    /// The route's `stale_if_error` window.
    pub stale_if_error: Duration,
}

/// One request/response exchange with the origin, as the cache sees it.
#[derive(Clone, Copy, Debug)]
pub struct Exchange<'a> {
    /// The client request carried `Authorization` (RFC 9111 §3.5).
    pub request_has_authorization: bool,
    /// Response status code.
    pub status: u16,
    /// Response headers.
    pub headers: &'a HeaderMap,
    /// When the request was sent upstream.
    pub request_time: SystemTime,
    /// When the response head arrived.
    pub response_time: SystemTime,
}

/// Why a response is not stored; `as_str` feeds logs and `Cache-Status` detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStorable {
    /// `Cache-Control: no-store`.
    NoStore,
    /// `Cache-Control: private`.
    Private,
    /// `Cache-Control: no-cache`: would need revalidation on every use.
    NoCache,
    /// The response sets a cookie: personalised.
    SetCookie,
    /// The request carried `Authorization` and the response did not allow sharing.
    Authorization,
    /// The response varies on request headers.
    Vary,
    /// A status we do not cache (1xx, 206) or one with no freshness at all.
    Status,
    /// Nothing gives it a freshness lifetime above zero.
    NoFreshness,
}

impl NotStorable {
    /// Short token for logs and headers.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStorable::NoStore => "no-store",
            NotStorable::Private => "private",
            NotStorable::NoCache => "no-cache",
            NotStorable::SetCookie => "set-cookie",
            NotStorable::Authorization => "authorization",
            NotStorable::Vary => "vary",
            NotStorable::Status => "status",
            NotStorable::NoFreshness => "no-freshness",
        }
    }
}

/// How long a stored response is fresh, how old it already was, and how long
/// after expiry it may still be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freshness {
    /// RFC 9111 §4.2.1 freshness lifetime.
    pub lifetime: Duration,
    /// RFC 9111 §4.2.3 corrected_initial_age at the time it was received.
    pub initial_age: Duration,
    /// RFC 5861 §3: serve stale while one background refresh runs.
    pub stale_while_revalidate: Duration,
    /// RFC 5861 §4: serve stale when the origin fails.
    pub stale_if_error: Duration,
    /// RFC 9111 §4.2.4: must-revalidate, proxy-revalidate or s-maxage forbid
    /// serving it stale beyond the windows the origin explicitly granted.
    pub stale_forbidden: bool,
}

impl Freshness {
    /// How long after being stored the object stops being fresh.
    pub fn fresh_for(&self) -> Duration {
        self.lifetime.saturating_sub(self.initial_age)
    }
}

/// Decides whether `exchange` may be stored by a shared cache and, if so, its freshness.
pub fn evaluate(exchange: &Exchange<'_>, rules: &StoreRules) -> Result<Freshness, NotStorable> {
    let headers = exchange.headers;
    let cc = CacheControl::parse(header_strs(headers, CACHE_CONTROL));
    check_storable(exchange, &cc)?;
    let explicit = if rules.override_origin {
        None
    } else {
        explicit_lifetime(headers, &cc, exchange.response_time)
    };
    let (lifetime, initial_age) = match explicit {
        Some(lifetime) => (lifetime, corrected_initial_age(exchange)),
        // The route's ttl counts from receipt, as NGINX's proxy_cache_valid and
        // Varnish's default_ttl do; only an Age from a cache upstream is charged.
        None => (
            rules.ttl.ok_or(NotStorable::NoFreshness)?,
            age_value(headers),
        ),
    };
    let freshness = Freshness {
        lifetime,
        initial_age,
        stale_while_revalidate: stale_window(
            &cc,
            cc.stale_while_revalidate,
            rules,
            rules.stale_while_revalidate,
        ),
        stale_if_error: stale_window(&cc, cc.stale_if_error, rules, rules.stale_if_error),
        stale_forbidden: !rules.override_origin && cc.forbids_stale(),
    };
    if freshness.fresh_for().is_zero()
        && freshness.stale_while_revalidate.is_zero()
        && freshness.stale_if_error.is_zero()
    {
        return Err(NotStorable::NoFreshness);
    }
    Ok(freshness)
}

/// RFC 9111 §3: what a shared cache must not store.
fn check_storable(exchange: &Exchange<'_>, cc: &CacheControl) -> Result<(), NotStorable> {
    let status = exchange.status;
    // 206 needs range-aware storage; 1xx are not final responses.
    if !(200..600).contains(&status) || status == 206 {
        return Err(NotStorable::Status);
    }
    if cc.no_store {
        return Err(NotStorable::NoStore);
    }
    if cc.private {
        return Err(NotStorable::Private);
    }
    if cc.no_cache {
        return Err(NotStorable::NoCache);
    }
    if exchange.headers.contains_key(SET_COOKIE) {
        return Err(NotStorable::SetCookie);
    }
    // §3.5: a shared cache may reuse an answer to an authorised request only when
    // the response explicitly allows it.
    if exchange.request_has_authorization
        && !(cc.public || cc.s_maxage.is_some() || cc.must_revalidate)
    {
        return Err(NotStorable::Authorization);
    }
    if exchange
        .headers
        .get_all(VARY)
        .iter()
        .any(|v| !v.as_bytes().trim_ascii().is_empty())
    {
        return Err(NotStorable::Vary);
    }
    Ok(())
}

/// RFC 9111 §4.2.1: s-maxage, then max-age, then Expires minus Date.
fn explicit_lifetime(
    headers: &HeaderMap,
    cc: &CacheControl,
    response_time: SystemTime,
) -> Option<Duration> {
    if let Some(d) = cc.s_maxage.or(cc.max_age) {
        return Some(d);
    }
    let expires = headers.get(EXPIRES)?;
    // §5.3: an invalid Expires (e.g. "0") means already expired.
    let Some(expires) = parse_date(expires.as_bytes()) else {
        return Some(Duration::ZERO);
    };
    let date = headers.get(DATE).and_then(|d| parse_date(d.as_bytes()));
    let base = date.unwrap_or(response_time);
    Some(expires.duration_since(base).unwrap_or(Duration::ZERO))
}

/// RFC 9111 §4.2.3: corrected_initial_age = max(apparent_age, corrected_age_value).
fn corrected_initial_age(exchange: &Exchange<'_>) -> Duration {
    let headers = exchange.headers;
    let date = headers.get(DATE).and_then(|d| parse_date(d.as_bytes()));
    // Date has one-second resolution: the response was made somewhere in
    // [date, date + 1 s). Take the youngest age consistent with it, or every
    // sub-second lifetime would lose a random fraction of a second.
    let apparent_age = date
        .and_then(|d| {
            exchange
                .response_time
                .duration_since(d + DATE_RESOLUTION)
                .ok()
        })
        .unwrap_or(Duration::ZERO);
    let age_value = age_value(headers);
    let response_delay = exchange
        .response_time
        .duration_since(exchange.request_time)
        .unwrap_or(Duration::ZERO);
    apparent_age.max(age_value.saturating_add(response_delay))
}

/// The origin's own window wins when it sends one; stale service is forbidden by
/// must-revalidate, proxy-revalidate and s-maxage (RFC 9111 §4.2.4) unless the
/// origin explicitly grants it with an RFC 5861 directive.
fn stale_window(
    cc: &CacheControl,
    origin: Option<Duration>,
    rules: &StoreRules,
    route: Duration,
) -> Duration {
    if rules.override_origin {
        return route;
    }
    match origin {
        Some(d) => d,
        None if cc.forbids_stale() => Duration::ZERO,
        None => route,
    }
}

/// The `Age` header's delta-seconds (RFC 9111 §5.1, capped per §1.2.2), zero
/// when absent or invalid.
fn age_value(headers: &HeaderMap) -> Duration {
    headers
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| crate::cache_control::delta_seconds(s.trim()))
        .unwrap_or(Duration::ZERO)
}

const DATE_RESOLUTION: Duration = Duration::from_secs(1);

fn header_strs(headers: &HeaderMap, name: http::header::HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
}

fn parse_date(bytes: &[u8]) -> Option<SystemTime> {
    httpdate::parse_http_date(std::str::from_utf8(bytes).ok()?).ok()
}

#[cfg(test)]
#[path = "freshness_tests.rs"]
mod tests;
