//! How a response relates to the cache: the RFC 9211 `Cache-Status` vocabulary.
//!
//! [`CacheStatus`] is the category a response is counted under (metrics,
//! logs); [`Report`] is everything our `Cache-Status` member says about it.

use std::fmt::Write;

/// How one response was produced; `as_str` feeds metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Served fresh from the cache.
    Hit,
    /// Served fresh from the cache; a background refresh was started (SUS).
    HitRefreshEarly,
    /// Served stale inside stale-while-revalidate; a background refresh runs.
    StaleWhileRevalidate,
    /// Served just-expired under SUS while the refresh of it is in flight.
    StaleRefreshInFlight,
    /// Served stale because the origin failed (stale-if-error).
    StaleIfError,
    /// Not in the cache: fetched, and stored.
    MissStored,
    /// Not in the cache: fetched, not storable.
    MissNotStored,
    /// Not in the cache: waited for another request's fetch.
    MissCollapsed,
    /// Expired: fetched anew (and stored if storable).
    ExpiredStored,
    /// Expired: waited for another request's fetch.
    ExpiredCollapsed,
    /// Stale and revalidated: the origin answered 304 and the stored body was reused.
    Revalidated,
    /// The client's request directives (`no-cache`, `max-age`...) sent it to the origin.
    RequestForced,
    /// Fresh, but this request drew an early refresh (PER) and fetched it.
    RefreshedEarly,
    /// The route does not cache, a `bypass` condition matched, or the method is not cacheable.
    Bypass,
}

impl CacheStatus {
    /// Label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::HitRefreshEarly => "hit-refresh-early",
            CacheStatus::StaleWhileRevalidate => "stale-while-revalidate",
            CacheStatus::StaleRefreshInFlight => "stale-refresh-in-flight",
            CacheStatus::StaleIfError => "stale-if-error",
            CacheStatus::MissStored => "miss-stored",
            CacheStatus::MissNotStored => "miss",
            CacheStatus::MissCollapsed => "miss-collapsed",
            CacheStatus::ExpiredStored => "expired",
            CacheStatus::ExpiredCollapsed => "expired-collapsed",
            CacheStatus::Revalidated => "revalidated",
            CacheStatus::RequestForced => "request-forced",
            CacheStatus::RefreshedEarly => "refreshed-early",
            CacheStatus::Bypass => "bypass",
        }
    }

    /// The report this category implies; the caller fills in `fwd-status`,
    /// `ttl` and refines `fwd` (`uri-miss` or `vary-miss`).
    pub fn report(self) -> Report {
        let (fwd, stored, collapsed, detail) = match self {
            CacheStatus::Hit => (None, false, false, None),
            CacheStatus::HitRefreshEarly => (None, false, false, Some("refresh-early")),
            CacheStatus::StaleWhileRevalidate => {
                (None, false, false, Some("stale-while-revalidate"))
            }
            CacheStatus::StaleRefreshInFlight => (None, false, false, Some("refresh-in-flight")),
            CacheStatus::StaleIfError => (Some(Fwd::Stale), false, false, Some("stale-if-error")),
            CacheStatus::MissStored => (Some(Fwd::UriMiss), true, false, None),
            CacheStatus::MissNotStored => (Some(Fwd::UriMiss), false, false, None),
            CacheStatus::MissCollapsed => (Some(Fwd::UriMiss), true, true, None),
            CacheStatus::ExpiredStored | CacheStatus::Revalidated => {
                (Some(Fwd::Stale), true, false, None)
            }
            CacheStatus::ExpiredCollapsed => (Some(Fwd::Stale), true, true, None),
            CacheStatus::RequestForced => (Some(Fwd::Request), true, false, None),
            CacheStatus::RefreshedEarly => (Some(Fwd::Stale), true, false, Some("refresh-early")),
            CacheStatus::Bypass => (Some(Fwd::Bypass), false, false, None),
        };
        Report {
            status: self,
            fwd,
            fwd_status: None,
            stored,
            collapsed,
            ttl: None,
            detail,
        }
    }
}

/// Why a request went to the origin (RFC 9211 §2.2 `fwd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fwd {
    /// Nothing stored for the key.
    UriMiss,
    /// Something stored for the URI, but no variant matched the request's Vary'd headers.
    VaryMiss,
    /// Not found, for no more specific reason.
    Miss,
    /// The request's directives (e.g. `no-cache`) asked for it.
    Request,
    /// The stored response was stale.
    Stale,
    /// Configuration: the route does not cache or a `bypass` condition matched.
    Bypass,
    /// The request method is not cacheable.
    Method,
}

impl Fwd {
    /// The RFC 9211 token.
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Miss => "miss",
            Fwd::Request => "request",
            Fwd::Stale => "stale",
            Fwd::Bypass => "bypass",
            Fwd::Method => "method",
        }
    }
}

/// Everything our `Cache-Status` member says about one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// The category it is counted under.
    pub status: CacheStatus,
    /// Why it went forward; `None` is a hit.
    pub fwd: Option<Fwd>,
    /// The status the origin answered the forwarded request with.
    pub fwd_status: Option<u16>,
    /// The forwarded response was stored.
    pub stored: bool,
    /// The request waited for another request's fetch.
    pub collapsed: bool,
    /// Seconds of freshness left (negative once stale).
    pub ttl: Option<i64>,
    /// Extra detail: a token (`stale-while-revalidate`, `no-store`...).
    pub detail: Option<&'static str>,
}

impl Report {
    /// With `fwd` replaced.
    pub fn fwd(mut self, fwd: Fwd) -> Self {
        if self.fwd.is_some() {
            self.fwd = Some(fwd);
        }
        self
    }

    /// With the origin's status.
    pub fn fwd_status(mut self, status: u16) -> Self {
        self.fwd_status = Some(status);
        self
    }

    /// With a detail token.
    pub fn detail(mut self, detail: &'static str) -> Self {
        self.detail = Some(detail);
        self
    }

    /// Writes the member `calmcache; hit; ttl=5` (RFC 9211 §2) into `out`,
    /// with `key="..."` when a key is given (sf-string: `"` and `\` escaped,
    /// non-printable bytes dropped).
    pub fn write_member(&self, key: Option<&str>, out: &mut String) {
        out.push_str("calmcache");
        match self.fwd {
            None => out.push_str("; hit"),
            Some(fwd) => {
                out.push_str("; fwd=");
                out.push_str(fwd.as_str());
            }
        }
        if let Some(status) = self.fwd_status {
            let _ = write!(out, "; fwd-status={status}");
        }
        if self.stored {
            out.push_str("; stored");
        }
        if self.collapsed {
            out.push_str("; collapsed");
        }
        if let Some(ttl) = self.ttl {
            let _ = write!(out, "; ttl={ttl}");
        }
        if let Some(key) = key {
            out.push_str("; key=\"");
            for c in key.chars().filter(|c| (' '..='~').contains(c)) {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        }
        if let Some(detail) = self.detail {
            out.push_str("; detail=");
            out.push_str(detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(r: Report, key: Option<&str>) -> String {
        let mut s = String::new();
        r.write_member(key, &mut s);
        s
    }

    #[test]
    fn members_follow_rfc_9211() {
        // RFC 9211 §2.1-§2.8: hit, fwd, fwd-status, stored, collapsed, ttl, key, detail.
        let hit = Report {
            ttl: Some(5),
            ..CacheStatus::Hit.report()
        };
        assert_eq!(member(hit, None), "calmcache; hit; ttl=5");
        let miss = CacheStatus::MissCollapsed
            .report()
            .fwd(Fwd::VaryMiss)
            .fwd_status(200);
        assert_eq!(
            member(miss, Some("http://a/\"b\"")),
            "calmcache; fwd=vary-miss; fwd-status=200; stored; collapsed; key=\"http://a/\\\"b\\\"\""
        );
        let reval = CacheStatus::Revalidated.report().fwd_status(304);
        assert_eq!(
            member(reval, None),
            "calmcache; fwd=stale; fwd-status=304; stored"
        );
        let swr = Report {
            ttl: Some(-2),
            ..CacheStatus::StaleWhileRevalidate.report()
        };
        assert_eq!(
            member(swr, None),
            "calmcache; hit; ttl=-2; detail=stale-while-revalidate"
        );
        // A hit has no fwd to refine.
        assert_eq!(CacheStatus::Hit.report().fwd(Fwd::Method).fwd, None);
    }
}
