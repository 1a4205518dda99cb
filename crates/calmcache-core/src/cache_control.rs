//! Parsing of `Cache-Control` response directives (RFC 9111 §5.2).
//!
//! Pure: takes header values as text, keeps only what the cache acts on.

use std::time::Duration;

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
    /// `private` (§5.2.2.7): a shared cache must not store it.
    pub private: bool,
    /// `public` (§5.2.2.9).
    pub public: bool,
    /// `must-revalidate` (§5.2.2.2): never serve stale.
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8): shared caches never serve stale.
    pub proxy_revalidate: bool,
    /// `stale-while-revalidate=N` (RFC 5861 §3).
    pub stale_while_revalidate: Option<Duration>,
    /// `stale-if-error=N` (RFC 5861 §4).
    pub stale_if_error: Option<Duration>,
}

impl CacheControl {
    /// Parses every `Cache-Control` value of a response; unknown directives are ignored
    /// (RFC 9111 §5.2.3) and a malformed delta-seconds leaves that directive unset.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut cc = CacheControl::default();
        for value in values {
            for directive in value.split(',') {
                cc.apply(directive.trim());
            }
        }
        cc
    }

    fn apply(&mut self, directive: &str) {
        let (name, arg) = match directive.split_once('=') {
            Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
            None => (directive, None),
        };
        let seconds = || arg.and_then(delta_seconds);
        match name.to_ascii_lowercase().as_str() {
            "max-age" => self.max_age = seconds().or(self.max_age),
            "s-maxage" => self.s_maxage = seconds().or(self.s_maxage),
            "no-store" => self.no_store = true,
            // `no-cache="Set-Cookie"` only restricts those fields; we treat any
            // qualified form conservatively as a plain no-cache.
            "no-cache" => self.no_cache = true,
            // `private="field"` likewise: a shared cache stays out of it.
            "private" => self.private = true,
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "stale-while-revalidate" => self.stale_while_revalidate = seconds(),
            "stale-if-error" => self.stale_if_error = seconds(),
            _ => {}
        }
    }

    /// True when a shared cache must not serve this response stale (§5.2.2.2, §5.2.2.8).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }
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
mod tests {
    use super::*;

    #[test]
    fn parses_the_directives_a_shared_cache_needs() {
        let cc = CacheControl::parse([
            "public, max-age=60, s-maxage=\"120\"",
            "stale-while-revalidate=10, stale-if-error=3600, X-Unknown=1",
        ]);
        assert_eq!(cc.max_age, Some(Duration::from_secs(60)));
        assert_eq!(cc.s_maxage, Some(Duration::from_secs(120)));
        assert!(cc.public);
        assert_eq!(cc.stale_while_revalidate, Some(Duration::from_secs(10)));
        assert_eq!(cc.stale_if_error, Some(Duration::from_secs(3600)));
    }

    #[test]
    fn case_and_spacing_do_not_matter() {
        let cc = CacheControl::parse(["No-Store ,PRIVATE,  Must-Revalidate"]);
        assert!(cc.no_store && cc.private && cc.must_revalidate);
    }

    #[test]
    fn bad_delta_seconds_are_ignored() {
        // RFC 9111 §1.2.2: a recipient that cannot parse delta-seconds ignores it.
        let cc = CacheControl::parse(["max-age=-1, s-maxage=abc"]);
        assert_eq!(cc.max_age, None);
        assert_eq!(cc.s_maxage, None);
        let big = CacheControl::parse(["max-age=99999999999999999999999"]);
        assert_eq!(big.max_age, Some(Duration::from_secs(2_147_483_648)));
    }
}
