//! Whether a response may be stored, and for how long it stays fresh: RFC 9111
//! §3 (storing), §4.2.1 (freshness lifetime), §4.2.2 (heuristic freshness) and
//! §4.2.3 (age), RFC 5861 windows, RFC 9213 targeted fields.
//!
//! Pure arithmetic over header values and wall-clock times; the caller supplies
//! the times so tests need no clock.

use std::time::{Duration, SystemTime};

use http::header::{AGE, DATE, ETAG, EXPIRES, LAST_MODIFIED, SET_COOKIE, VARY};
use http::HeaderMap;

use crate::cache_control::CacheControl;
use crate::ignored::{IgnorableField, IgnoredFields};

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
    /// RFC 9111 §4.2.2: the fraction of `Date - Last-Modified` a response without
    /// explicit freshness stays fresh; 0 turns heuristics off.
    pub heuristic_fraction: f64,
    /// The cap on heuristic freshness.
    pub heuristic_max: Duration,
    /// The route's `ignore_headers`: response fields that do not count here
    /// (NGINX's `proxy_ignore_headers`); see [`IgnorableField`].
    pub ignored: IgnoredFields,
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
    /// `Vary: *`: no later request can ever match it (RFC 9111 §4.1).
    VaryStar,
    /// A status we do not cache (1xx, 206, 304) or one with no freshness at all.
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
            NotStorable::VaryStar => "vary-star",
            NotStorable::Status => "status",
            NotStorable::NoFreshness => "no-freshness",
        }
    }
}

/// Who gave a stored response its freshness lifetime. It decides whether the
/// cache may serve the response stale on its own account: RFC 9111 §4.2.4, "A
/// cache MUST NOT generate a stale response unless it is disconnected or doing
/// so is explicitly permitted by the client or origin server".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifetimeSource {
    /// The origin's `s-maxage`, `max-age` or `Expires` (§4.2.1).
    Origin,
    /// A fraction of the time since `Last-Modified` (§4.2.2): the origin said
    /// nothing about freshness, and so granted no stale use either.
    Heuristic,
    /// The route's `ttl` (the origin gave no freshness, or `override_origin`):
    /// the operator's lifetime, which the operator's refresh policy may stretch.
    Route,
}

impl LifetimeSource {
    /// Short token for logs and tests.
    pub fn as_str(self) -> &'static str {
        match self {
            LifetimeSource::Origin => "origin",
            LifetimeSource::Heuristic => "heuristic",
            LifetimeSource::Route => "route",
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
    /// serving it stale beyond the windows the origin explicitly granted;
    /// §5.2.2.4 no-cache forbids any use without revalidation.
    pub stale_forbidden: bool,
    /// RFC 8246 `immutable`: while fresh, client reloads need not revalidate.
    pub immutable: bool,
    /// Who gave `lifetime`: see [`Freshness::stale_use_granted`].
    pub source: LifetimeSource,
}

/// A storable response: its freshness and the fields that must not be kept
/// (`private="..."`, `no-cache="..."`), lower-cased.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Storable {
    /// Freshness of the stored response.
    pub freshness: Freshness,
    /// Header fields to drop from the stored copy.
    pub strip_fields: Vec<String>,
}

/// RFC 9110 §15.1: statuses a cache may store with heuristic freshness.
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

impl Freshness {
    /// How long after being stored the object stops being fresh.
    pub fn fresh_for(&self) -> Duration {
        self.lifetime.saturating_sub(self.initial_age)
    }

    /// Whether the cache may serve this response past its lifetime on its own
    /// account while a refresh runs (a refresh policy's stale window, RFC 9111
    /// §4.2.4): when the route's `ttl` gave the lifetime, or when stale use
    /// while revalidating was granted (the origin's `stale-while-revalidate`,
    /// RFC 5861 §3, or the route's own window); never past must-revalidate and
    /// the like. `stale-if-error` does not grant it: RFC 5861 §4 allows a stale
    /// answer only when the origin fails, and a refresh in flight is no failure.
    pub fn stale_use_granted(&self) -> bool {
        !self.stale_forbidden
            && (self.source == LifetimeSource::Route || !self.stale_while_revalidate.is_zero())
    }
}

/// Decides whether `exchange` may be stored by a shared cache and, if so, its freshness.
pub fn evaluate(exchange: &Exchange<'_>, rules: &StoreRules) -> Result<Storable, NotStorable> {
    let headers = exchange.headers;
    let (cc, targeted) = response_policy(headers, rules.ignored);
    let strip_fields = check_storable(exchange, &cc, rules.ignored)?;
    let explicit = if rules.override_origin {
        None
    } else {
        // RFC 9213 §2.1: a targeted field replaces Cache-Control and Expires.
        let expires = if targeted || rules.ignored.contains(IgnorableField::Expires) {
            ExpiresField::Skipped
        } else {
            ExpiresField::Read
        };
        explicit_lifetime(headers, &cc, expires, exchange.response_time)
    };
    let status = exchange.status;
    let (lifetime, initial_age, source) = match explicit {
        Some(lifetime) => (
            lifetime,
            corrected_initial_age(exchange),
            LifetimeSource::Origin,
        ),
        // The route's ttl counts from receipt, as NGINX's proxy_cache_valid and
        // Varnish's default_ttl do; only an Age from a cache upstream is charged.
        None => match rules.ttl {
            Some(ttl) => (ttl, age_value(headers), LifetimeSource::Route),
            None if heuristically_cacheable(status) || cc.public => (
                heuristic_lifetime(headers, exchange.response_time, rules)
                    .unwrap_or(Duration::ZERO),
                corrected_initial_age(exchange),
                LifetimeSource::Heuristic,
            ),
            None => return Err(NotStorable::NoFreshness),
        },
    };
    let no_cache = cc.no_cache && !rules.override_origin;
    let freshness = Freshness {
        // §5.2.2.4: no-cache = stored, but never used without revalidation.
        lifetime: if no_cache { Duration::ZERO } else { lifetime },
        initial_age,
        stale_while_revalidate: stale_window(
            &cc,
            cc.stale_while_revalidate,
            rules,
            rules.stale_while_revalidate,
        ),
        stale_if_error: stale_window(&cc, cc.stale_if_error, rules, rules.stale_if_error),
        stale_forbidden: !rules.override_origin && cc.forbids_stale(),
        immutable: cc.immutable,
        source,
    };
    // A response that is stale on arrival is still worth keeping when it has a
    // validator: the next request revalidates it (a 304 costs no body).
    let has_validator = headers.contains_key(ETAG) || headers.contains_key(LAST_MODIFIED);
    if freshness.fresh_for().is_zero()
        && freshness.stale_while_revalidate.is_zero()
        && freshness.stale_if_error.is_zero()
        && !has_validator
    {
        return Err(if no_cache {
            NotStorable::NoCache
        } else {
            NotStorable::NoFreshness
        });
    }
    Ok(Storable {
        freshness,
        strip_fields,
    })
}

/// The origin's caching directives for this response (RFC 9213 §2.1: a
/// targeted field first) and whether a targeted field gave them. With
/// `Cache-Control` ignored, the field of that name says nothing: the
/// directives are a targeted field's or none.
fn response_policy(headers: &HeaderMap, ignored: IgnoredFields) -> (CacheControl, bool) {
    let (cc, targeted) = CacheControl::for_response(headers);
    if targeted || !ignored.contains(IgnorableField::CacheControl) {
        return (cc, targeted);
    }
    (CacheControl::default(), false)
}

/// RFC 9111 §3: what a shared cache must not store. Returns the fields that
/// may not be kept with the stored response: the ones the origin named
/// (`private="..."`, `no-cache="..."`) and, when the route ignores them,
/// `Set-Cookie` (stored despite it, never kept) and `Vary` (one answer for
/// every client, which no longer says it varies).
fn check_storable(
    exchange: &Exchange<'_>,
    cc: &CacheControl,
    ignored: IgnoredFields,
) -> Result<Vec<String>, NotStorable> {
    let status = exchange.status;
    // 206 needs range-aware storage, 304 only updates a stored response (§4.3.4),
    // 1xx are not final responses.
    if !(200..600).contains(&status) || status == 206 || status == 304 {
        return Err(NotStorable::Status);
    }
    // §5.2.2.3 must-understand: a cache that understands the status may
    // store it despite no-store.
    if cc.no_store && !(cc.must_understand && understood(status)) {
        return Err(NotStorable::NoStore);
    }
    // ... and must not store a status it does not understand.
    if cc.must_understand && !understood(status) {
        return Err(NotStorable::Status);
    }
    if cc.private {
        return Err(NotStorable::Private);
    }
    // §5.2.2.7 private="f": a shared cache must not store f; §5.2.2.4
    // no-cache="f": f must not be reused without revalidation. Dropping f from
    // the stored copy satisfies both.
    let mut strip: Vec<String> = cc.private_fields.clone();
    strip.extend(cc.no_cache_fields.iter().cloned());
    if exchange.headers.contains_key(SET_COOKIE) && !strip.iter().any(|f| f == "set-cookie") {
        if !ignored.contains(IgnorableField::SetCookie) {
            return Err(NotStorable::SetCookie);
        }
        strip.push("set-cookie".to_owned());
    }
    // §3.5: a shared cache may reuse an answer to an authorised request only when
    // the response explicitly allows it.
    if exchange.request_has_authorization
        && !(cc.public || cc.s_maxage.is_some() || cc.must_revalidate)
    {
        return Err(NotStorable::Authorization);
    }
    if ignored.contains(IgnorableField::Vary) {
        if exchange.headers.contains_key(VARY) {
            strip.push("vary".to_owned());
        }
        return Ok(strip);
    }
    // §4.1: "Vary: *" always fails to match.
    if exchange
        .headers
        .get_all(VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|name| name.trim() == "*")
    {
        return Err(NotStorable::VaryStar);
    }
    Ok(strip)
}

/// Final statuses defined by RFC 9110 §15, whose caching semantics calmcache knows.
fn understood(status: u16) -> bool {
    matches!(status, 200..=206 | 300..=303 | 305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505)
}

/// RFC 9111 §4.2.2: a fraction of the time since Last-Modified, capped.
fn heuristic_lifetime(
    headers: &HeaderMap,
    response_time: SystemTime,
    rules: &StoreRules,
) -> Option<Duration> {
    if rules.heuristic_fraction.is_nan() || rules.heuristic_fraction <= 0.0 {
        return None;
    }
    let modified = parse_date(headers.get(LAST_MODIFIED)?.as_bytes())?;
    let date = headers
        .get(DATE)
        .and_then(|d| parse_date(d.as_bytes()))
        .unwrap_or(response_time);
    let since = date.duration_since(modified).ok()?;
    let lifetime = Duration::try_from_secs_f64(since.as_secs_f64() * rules.heuristic_fraction)
        .unwrap_or(rules.heuristic_max);
    Some(lifetime.min(rules.heuristic_max))
}

/// Whether `Expires` may give a lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExpiresField {
    /// Read it (RFC 9111 §4.2.1).
    Read,
    /// A targeted field replaced it (RFC 9213 §2.1), or the route ignores it.
    Skipped,
}

/// RFC 9111 §4.2.1: s-maxage, then max-age, then Expires minus Date.
fn explicit_lifetime(
    headers: &HeaderMap,
    cc: &CacheControl,
    expires: ExpiresField,
    response_time: SystemTime,
) -> Option<Duration> {
    if let Some(d) = cc.s_maxage.or(cc.max_age) {
        return Some(d);
    }
    if expires == ExpiresField::Skipped {
        return None;
    }
    let mut lines = headers.get_all(EXPIRES).iter();
    let expires = lines.next()?;
    // More than one Expires: invalid, so already expired (§5.3, §4.2.1).
    if lines.next().is_some() {
        return Some(Duration::ZERO);
    }
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
/// when absent. Only the first field line counts, and of a list in it only
/// the first member (`Age: 7200, 0` is 7200 s old); one that is not a
/// delta-seconds (`abc`, `-1`, `1.5`) is ignored (§1.2.2).
fn age_value(headers: &HeaderMap) -> Duration {
    let Some(value) = headers.get(AGE) else {
        return Duration::ZERO;
    };
    value
        .to_str()
        .ok()
        .and_then(|s| s.split(',').next())
        .and_then(|first| crate::cache_control::delta_seconds(first.trim()))
        .unwrap_or(Duration::ZERO)
}

const DATE_RESOLUTION: Duration = Duration::from_secs(1);

/// An HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, RFC 850 or asctime) from a
/// header value, OWS around it ignored. The one date parser: freshness,
/// preconditions and If-Range all read dates with it. RFC 9111 §4.2: "a
/// cache recipient SHOULD match the field value case-insensitively", so an
/// IMF-fixdate or asctime date the strict parser refuses is read again with
/// names in any case and the weekday not checked against the date. The
/// layout itself stays strict: dashes, missing commas, extra spaces or a
/// one-digit hour make a date invalid.
pub fn parse_date(bytes: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    httpdate::parse_http_date(text)
        .ok()
        .or_else(|| lenient_date(text))
}

/// `at` as an IMF-fixdate (RFC 9110 §5.6.7), the form a sender must use:
/// the one date writer (`expires` on a route's answers).
pub fn format_date(at: SystemTime) -> String {
    httpdate::fmt_http_date(at)
}

fn lenient_date(text: &str) -> Option<SystemTime> {
    const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    // Fixed byte positions below: only ASCII text has them on char boundaries.
    if !text.is_ascii() {
        return None;
    }
    let b = text.as_bytes();
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let weekday = text
        .get(0..3)
        .is_some_and(|w| WEEKDAYS.iter().any(|d| d.eq_ignore_ascii_case(w)));
    if !weekday {
        return None;
    }
    let (day, month, year, time) = if b.len() == 29
        && at(3, b',')
        && [4, 7, 11, 16, 25].iter().all(|&i| at(i, b' '))
        && text[26..].eq_ignore_ascii_case("GMT")
    {
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
        (&text[5..7], &text[8..11], &text[12..16], &text[17..25])
    } else if b.len() == 24 && [3, 7, 10, 19].iter().all(|&i| at(i, b' ')) {
        // asctime: "Sun Nov  6 08:49:37 1994"
        let day = &text[8..10];
        (
            day.strip_prefix(' ').unwrap_or(day),
            &text[4..7],
            &text[20..24],
            &text[11..19],
        )
    } else {
        return None;
    };
    let digits = |t: &str, n: usize| t.len() == n && t.bytes().all(|c| c.is_ascii_digit());
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as i64 + 1;
    let tb = time.as_bytes();
    if !(digits(day, 2) || digits(day, 1))
        || !digits(year, 4)
        || !(digits(&time[0..2], 2)
            && tb[2] == b':'
            && digits(&time[3..5], 2)
            && tb[5] == b':'
            && digits(&time[6..8], 2))
    {
        return None;
    }
    let num = |t: &str| t.parse::<i64>().ok();
    let (day, year) = (num(day)?, num(year)?);
    let (h, m, sec) = (num(&time[0..2])?, num(&time[3..5])?, num(&time[6..8])?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=days_in_month).contains(&day) || h > 23 || m > 59 || sec > 59 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + m * 60 + sec).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

#[cfg(test)]
#[path = "freshness_tests.rs"]
mod tests;
