//! How a response relates to the cache: the RFC 9211 `Cache-Status` vocabulary.
//!
//! [`CacheStatus`] is the category a response is counted under (metrics,
//! logs); [`Report`] is everything our `Cache-Status` member says about it;
//! [`AnswerClass`] is the coarser class an answer is broken down by (hit,
//! miss, stale, revalidated, bypass), computed only by [`CacheStatus::class`]:
//! the proxy's counters, latency histograms, `/status`, the dashboard and
//! the access log all read it from there.

use std::fmt::Write;

/// How one response was produced; `as_str` feeds metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Served fresh from the cache.
    Hit,
    /// Served fresh from the cache; a background refresh was started (SUS).
    HitRefreshEarly,
    /// Not in this node's zones, served from the fleet's shared tier (a
    /// copy another node stored in Redis): no origin request.
    SharedHit,
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
    /// Every status, in declaration order.
    pub const ALL: [CacheStatus; 15] = [
        CacheStatus::Hit,
        CacheStatus::HitRefreshEarly,
        CacheStatus::SharedHit,
        CacheStatus::StaleWhileRevalidate,
        CacheStatus::StaleRefreshInFlight,
        CacheStatus::StaleIfError,
        CacheStatus::MissStored,
        CacheStatus::MissNotStored,
        CacheStatus::MissCollapsed,
        CacheStatus::ExpiredStored,
        CacheStatus::ExpiredCollapsed,
        CacheStatus::Revalidated,
        CacheStatus::RequestForced,
        CacheStatus::RefreshedEarly,
        CacheStatus::Bypass,
    ];

    /// The class of an answer with this status: the one place it is decided.
    pub fn class(self) -> AnswerClass {
        match self {
            CacheStatus::Hit | CacheStatus::HitRefreshEarly | CacheStatus::SharedHit => {
                AnswerClass::Hit
            }
            CacheStatus::StaleWhileRevalidate
            | CacheStatus::StaleRefreshInFlight
            | CacheStatus::StaleIfError => AnswerClass::Stale,
            CacheStatus::Revalidated => AnswerClass::Revalidated,
            CacheStatus::MissStored
            | CacheStatus::MissNotStored
            | CacheStatus::MissCollapsed
            | CacheStatus::ExpiredStored
            | CacheStatus::ExpiredCollapsed
            | CacheStatus::RequestForced
            | CacheStatus::RefreshedEarly => AnswerClass::Miss,
            CacheStatus::Bypass => AnswerClass::Bypass,
        }
    }

    /// Label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::HitRefreshEarly => "hit-refresh-early",
            CacheStatus::SharedHit => "hit-fleet",
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

    /// NGINX's `$upstream_cache_status` word for this answer (HIT, MISS,
    /// EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS), within the same
    /// [`AnswerClass`] as [`CacheStatus::class`]: dashboards and scripts
    /// written for NGINX's `X-Cache-Status` read calmcache's unchanged.
    /// A stale copy served while its refresh runs is UPDATING (NGINX's
    /// `proxy_cache_use_stale updating`), one served because the origin
    /// failed is STALE; a fetch the client's directives forced, or an early
    /// refresh, is a MISS or EXPIRED as NGINX has no word for them.
    pub fn upstream_cache_status(self) -> &'static str {
        match self {
            CacheStatus::Hit | CacheStatus::HitRefreshEarly | CacheStatus::SharedHit => "HIT",
            CacheStatus::StaleWhileRevalidate | CacheStatus::StaleRefreshInFlight => "UPDATING",
            CacheStatus::StaleIfError => "STALE",
            CacheStatus::MissStored
            | CacheStatus::MissNotStored
            | CacheStatus::MissCollapsed
            | CacheStatus::RequestForced => "MISS",
            CacheStatus::ExpiredStored
            | CacheStatus::ExpiredCollapsed
            | CacheStatus::RefreshedEarly => "EXPIRED",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Bypass => "BYPASS",
        }
    }

    /// The report this category implies; the caller fills in `fwd-status`,
    /// `ttl` and refines `fwd` (`uri-miss` or `vary-miss`).
    pub fn report(self) -> Report {
        let (fwd, stored, collapsed, detail) = match self {
            CacheStatus::Hit => (None, false, false, None),
            CacheStatus::HitRefreshEarly => (None, false, false, Some("refresh-early")),
            CacheStatus::SharedHit => (None, false, false, Some("fleet")),
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

/// The five classes answers are broken down by (metric labels, `/status`,
/// the dashboard, the access log). The discriminants index arrays of
/// per-class counters and histograms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnswerClass {
    /// Fresh from the cache.
    Hit = 0,
    /// Fetched from the origin (stored or not, waited for or not).
    Miss = 1,
    /// A stale copy served (stale-while-revalidate, stale-if-error...).
    Stale = 2,
    /// Revalidated with the origin (304), the stored body reused.
    Revalidated = 3,
    /// Passed through without the cache.
    Bypass = 4,
}

impl AnswerClass {
    /// Every class, in index order.
    pub const ALL: [AnswerClass; 5] = [
        AnswerClass::Hit,
        AnswerClass::Miss,
        AnswerClass::Stale,
        AnswerClass::Revalidated,
        AnswerClass::Bypass,
    ];

    /// Its label: `hit`, `miss`, `stale`, `revalidated`, `bypass`.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerClass::Hit => "hit",
            AnswerClass::Miss => "miss",
            AnswerClass::Stale => "stale",
            AnswerClass::Revalidated => "revalidated",
            AnswerClass::Bypass => "bypass",
        }
    }

    /// Its position in [`AnswerClass::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The class at `index` in [`AnswerClass::ALL`], if there is one.
    pub fn from_index(index: usize) -> Option<AnswerClass> {
        AnswerClass::ALL.get(index).copied()
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
    fn every_status_has_the_class_its_report_implies() {
        for status in CacheStatus::ALL {
            let r = status.report();
            let want = match status {
                CacheStatus::Revalidated => AnswerClass::Revalidated,
                _ if r.fwd == Some(Fwd::Bypass) => AnswerClass::Bypass,
                // Served from the cache although past freshness: stale.
                _ if matches!(
                    r.detail,
                    Some("stale-while-revalidate" | "refresh-in-flight" | "stale-if-error")
                ) =>
                {
                    AnswerClass::Stale
                }
                _ if r.fwd.is_none() => AnswerClass::Hit,
                _ => AnswerClass::Miss,
            };
            assert_eq!(status.class(), want, "{status:?}");
        }
    }

    #[test]
    fn nginx_words_stay_within_the_answer_class() {
        for status in CacheStatus::ALL {
            let word = status.upstream_cache_status();
            let class = match word {
                "HIT" => AnswerClass::Hit,
                "MISS" | "EXPIRED" => AnswerClass::Miss,
                "STALE" | "UPDATING" => AnswerClass::Stale,
                "REVALIDATED" => AnswerClass::Revalidated,
                "BYPASS" => AnswerClass::Bypass,
                other => panic!("{other} is not one of NGINX's words"),
            };
            assert_eq!(status.class(), class, "{status:?}");
        }
    }

    #[test]
    fn classes_keep_their_labels_and_indices() {
        // Metric labels, /status keys and array indices are public or
        // persistent: they must not move.
        let labels: Vec<&str> = AnswerClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(labels, ["hit", "miss", "stale", "revalidated", "bypass"]);
        for (i, class) in AnswerClass::ALL.into_iter().enumerate() {
            assert_eq!(class.index(), i);
            assert_eq!(AnswerClass::from_index(i), Some(class));
        }
        assert_eq!(AnswerClass::from_index(5), None);
        assert_eq!(AnswerClass::from_index(usize::MAX), None);
        // ALL lists every status once.
        let mut seen = std::collections::HashSet::new();
        assert!(CacheStatus::ALL.iter().all(|s| seen.insert(*s)));
        assert_eq!(CacheStatus::HitRefreshEarly.class(), AnswerClass::Hit);
        assert_eq!(CacheStatus::RefreshedEarly.class(), AnswerClass::Miss);
        assert_eq!(CacheStatus::StaleIfError.class(), AnswerClass::Stale);
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
