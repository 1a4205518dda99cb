//! Parsing of `Cache-Control` directives (RFC 9111 §5.2): response directives,
//! request directives, and the targeted fields of RFC 9213
//! (`Calmcache-Cache-Control`, `CDN-Cache-Control`).
//!
//! Pure: takes header values as text, keeps only what the cache acts on.
//! Directive names are case-insensitive (§5.2), unknown directives are ignored
//! (§5.2.3), a malformed argument leaves that directive unset (§1.2.2), and when
//! a directive repeats, its first valid occurrence is used (§4.2.1).

use std::time::Duration;

use http::header::{HeaderName, CACHE_CONTROL, PRAGMA};
use http::HeaderMap;

/// The response directives calmcache acts on. Absent = `None` / `false`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age=N` (RFC 9111 §5.2.2.1).
    pub max_age: Option<Duration>,
    /// `s-maxage=N`: shared caches only (§5.2.2.10).
    pub s_maxage: Option<Duration>,
    /// `no-store` (§5.2.2.5).
    pub no_store: bool,
    /// `no-cache` without field names (§5.2.2.4): store, but revalidate before each use.
    pub no_cache: bool,
    /// `no-cache="a, b"` (§5.2.2.4): those fields must not be sent from the
    /// cache without revalidation; lower-cased.
    pub no_cache_fields: Vec<String>,
    /// `private` without field names (§5.2.2.7): a shared cache must not store it.
    pub private: bool,
    /// `private="a, b"` (§5.2.2.7): a shared cache must not store those fields; lower-cased.
    pub private_fields: Vec<String>,
    /// `public` (§5.2.2.9).
    pub public: bool,
    /// `must-revalidate` (§5.2.2.2): never serve stale.
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8): shared caches never serve stale.
    pub proxy_revalidate: bool,
    /// `no-transform` (§5.2.2.6): no compression by the cache.
    pub no_transform: bool,
    /// `immutable` (RFC 8246): the body never changes while fresh.
    pub immutable: bool,
    /// `must-understand` (§5.2.2.3): store despite no-store if the status is understood.
    pub must_understand: bool,
    /// `stale-while-revalidate=N` (RFC 5861 §3).
    pub stale_while_revalidate: Option<Duration>,
    /// `stale-if-error=N` (RFC 5861 §4).
    pub stale_if_error: Option<Duration>,
}

impl CacheControl {
    /// Parses every value of a response's directives.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut cc = CacheControl::default();
        for value in values {
            for (name, arg) in directives(value) {
                cc.apply(&name, arg.as_deref());
            }
        }
        cc
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        let seconds = || arg.and_then(delta_seconds);
        let fields = || arg.map(field_names).unwrap_or_default();
        match name {
            "max-age" => first(&mut self.max_age, seconds()),
            "s-maxage" => first(&mut self.s_maxage, seconds()),
            "no-store" => self.no_store = true,
            "no-cache" => match arg {
                Some(_) => self.no_cache_fields.extend(fields()),
                None => self.no_cache = true,
            },
            "private" => match arg {
                Some(_) => self.private_fields.extend(fields()),
                None => self.private = true,
            },
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "no-transform" => self.no_transform = true,
            "immutable" => self.immutable = true,
            "must-understand" => self.must_understand = true,
            "stale-while-revalidate" => first(&mut self.stale_while_revalidate, seconds()),
            "stale-if-error" => first(&mut self.stale_if_error, seconds()),
            _ => {}
        }
    }

    /// True when a shared cache must not serve this response stale (§5.2.2.2,
    /// §5.2.2.8, §5.2.2.10) or must revalidate every use (§5.2.2.4).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some() || self.no_cache
    }

    /// The policy of a response for calmcache: the first valid, non-empty
    /// targeted field (RFC 9213 §2.1: `Calmcache-Cache-Control`, then
    /// `CDN-Cache-Control`), else `Cache-Control`. The flag says a targeted
    /// field was used, in which case `Expires` must be ignored too.
    pub fn for_response(headers: &HeaderMap) -> (CacheControl, bool) {
        for name in TARGETED {
            if let Some(cc) = targeted(headers, name) {
                return (cc, true);
            }
        }
        (Self::parse(strs(headers, &CACHE_CONTROL)), false)
    }
}

/// RFC 9213 targeted fields calmcache obeys, most specific first.
pub static TARGETED: [&HeaderName; 2] = [&CALMCACHE_CACHE_CONTROL, &CDN_CACHE_CONTROL];
/// `Calmcache-Cache-Control`: meant for calmcache alone.
pub static CALMCACHE_CACHE_CONTROL: HeaderName = HeaderName::from_static("calmcache-cache-control");
/// `CDN-Cache-Control` (RFC 9213 §3): meant for every CDN-like cache.
pub static CDN_CACHE_CONTROL: HeaderName = HeaderName::from_static("cdn-cache-control");

/// A targeted field's directives when it is present, valid and non-empty.
/// RFC 9213 §2.1: its value is a Structured Fields Dictionary (RFC 8941);
/// one that does not parse as one is ignored as a whole.
fn targeted(headers: &HeaderMap, name: &HeaderName) -> Option<CacheControl> {
    let mut values = headers.get_all(name).iter().peekable();
    values.peek()?;
    let mut cc = CacheControl::default();
    let mut members = 0;
    for value in values {
        let text = value.to_str().ok()?;
        for (key, arg, quoted) in split(text) {
            if !is_sf_key(&key)
                || arg
                    .as_deref()
                    .is_some_and(|a| !quoted && !is_sf_bare_item(a))
            {
                return None;
            }
            // RFC 9213 §2.1: a directive whose value has the wrong type (a
            // string where an integer belongs) makes the field invalid.
            let integer = matches!(
                key.as_str(),
                "max-age" | "s-maxage" | "stale-while-revalidate" | "stale-if-error"
            );
            if integer && (quoted || arg.as_deref().is_some_and(|a| delta_seconds(a).is_none())) {
                return None;
            }
            members += 1;
            cc.apply(&key, arg.as_deref());
        }
    }
    (members > 0).then_some(cc)
}

fn is_sf_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'*'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*'))
}

fn is_sf_bare_item(arg: &str) -> bool {
    !arg.is_empty()
        && !arg
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
}

/// The request directives calmcache acts on (RFC 9111 §5.2.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCacheControl {
    /// `max-age=N` (§5.2.1.1): not older than N.
    pub max_age: Option<Duration>,
    /// `max-stale[=N]` (§5.2.1.2): `Some(None)` accepts any staleness.
    pub max_stale: Option<Option<Duration>>,
    /// `min-fresh=N` (§5.2.1.3): fresh for at least N more.
    pub min_fresh: Option<Duration>,
    /// `no-cache` (§5.2.1.4), or `Pragma: no-cache` without `Cache-Control` (§5.4).
    pub no_cache: bool,
    /// `no-store` (§5.2.1.5): store nothing of this exchange.
    pub no_store: bool,
    /// `only-if-cached` (§5.2.1.7): answer from the cache or 504.
    pub only_if_cached: bool,
}

impl RequestCacheControl {
    /// Parses a request's `Cache-Control` (and `Pragma` when it has none).
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let mut rcc = RequestCacheControl::default();
        if !headers.contains_key(CACHE_CONTROL) {
            rcc.no_cache = strs(headers, &PRAGMA)
                .flat_map(directives)
                .any(|(name, _)| name == "no-cache");
            return rcc;
        }
        for (name, arg) in strs(headers, &CACHE_CONTROL).flat_map(directives) {
            let seconds = || arg.as_deref().and_then(delta_seconds);
            match name.as_str() {
                "max-age" => first(&mut rcc.max_age, seconds()),
                "max-stale" if rcc.max_stale.is_none() => {
                    rcc.max_stale = match arg.as_deref() {
                        None => Some(None),
                        // A malformed value is ignored (§1.2.2).
                        Some(_) => seconds().map(Some),
                    };
                }
                "min-fresh" => first(&mut rcc.min_fresh, seconds()),
                "no-cache" => rcc.no_cache = true,
                "no-store" => rcc.no_store = true,
                "only-if-cached" => rcc.only_if_cached = true,
                _ => {}
            }
        }
        rcc
    }

    /// True when nothing in the request limits the use of a stored response.
    pub fn is_empty(&self) -> bool {
        *self == RequestCacheControl::default()
    }
}

fn first(slot: &mut Option<Duration>, value: Option<Duration>) {
    if slot.is_none() {
        *slot = value;
    }
}

fn strs<'a>(headers: &'a HeaderMap, name: &HeaderName) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
}

/// Splits one field value into `(lower-cased name, argument)` pairs, honouring
/// quoted strings (a comma inside `no-cache="a, b"` does not split) and
/// unescaping `\"` in them.
pub fn directives(value: &str) -> impl Iterator<Item = (String, Option<String>)> + '_ {
    split(value).map(|(name, arg, _)| (name.to_ascii_lowercase(), arg))
}

/// [`directives`] with names as written, and whether the argument was quoted.
fn split(value: &str) -> impl Iterator<Item = (String, Option<String>, bool)> + '_ {
    let mut rest = value;
    std::iter::from_fn(move || loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return None;
        }
        let end = rest.find([',', '=']).unwrap_or(rest.len());
        let name = rest[..end].trim().to_owned();
        rest = &rest[end..];
        let (arg, quoted) = match rest.strip_prefix('=') {
            Some(after) => {
                let after = after.trim_start();
                let (arg, tail) = argument(after);
                rest = tail;
                (Some(arg), after.starts_with('"'))
            }
            None => (None, false),
        };
        if !name.is_empty() {
            return Some((name, arg, quoted));
        }
    })
}

/// One argument: a quoted string (to its closing quote) or a token (to the
/// next comma). Returns the argument and the text after it.
fn argument(text: &str) -> (String, &str) {
    let Some(quoted) = text.strip_prefix('"') else {
        let end = text.find(',').unwrap_or(text.len());
        return (text[..end].trim().to_owned(), &text[end..]);
    };
    let mut out = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let tail = &quoted[i + 1..];
                let end = tail.find(',').unwrap_or(tail.len());
                return (out, &tail[end..]);
            }
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    out.push(escaped);
                }
            }
            c => out.push(c),
        }
    }
    // No closing quote: take what there is.
    (out, "")
}

/// The field names of `no-cache="..."` / `private="..."`, lower-cased.
fn field_names(arg: &str) -> Vec<String> {
    arg.split(',')
        .map(|f| f.trim().to_ascii_lowercase())
        .filter(|f| !f.is_empty())
        .collect()
}

/// RFC 9111 §1.2.2: delta-seconds; values past 2^31 are capped there.
pub(crate) fn delta_seconds(s: &str) -> Option<Duration> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = s.parse::<u64>().unwrap_or(u64::MAX).min(2_147_483_648);
    Some(Duration::from_secs(n))
}

#[cfg(test)]
#[path = "cache_control_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "cache_control_props.rs"]
mod props;
