//! How a response relates to the cache: the RFC 9211 `Cache-Status` vocabulary.

/// How one response was produced; `as_str` feeds both the `Cache-Status`
/// header and metric labels.
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
    /// Fresh, but this request drew an early refresh (PER) and fetched it.
    RefreshedEarly,
    /// The route does not cache, or the method is not cacheable.
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
            CacheStatus::RefreshedEarly => "refreshed-early",
            CacheStatus::Bypass => "bypass",
        }
    }

    /// The RFC 9211 parameters after the cache name, without `ttl` (added by the
    /// caller, who knows the object): e.g. `hit`, `fwd=miss; stored`.
    pub fn header_params(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::HitRefreshEarly => "hit; detail=refresh-early",
            CacheStatus::StaleWhileRevalidate => "hit; detail=stale-while-revalidate",
            CacheStatus::StaleRefreshInFlight => "hit; detail=refresh-in-flight",
            CacheStatus::StaleIfError => "fwd=stale; detail=stale-if-error",
            CacheStatus::MissStored => "fwd=miss; stored",
            CacheStatus::MissNotStored => "fwd=miss",
            CacheStatus::MissCollapsed => "fwd=miss; collapsed",
            CacheStatus::ExpiredStored => "fwd=stale; stored",
            CacheStatus::ExpiredCollapsed => "fwd=stale; collapsed",
            CacheStatus::RefreshedEarly => "fwd=stale; stored; detail=refresh-early",
            CacheStatus::Bypass => "fwd=bypass",
        }
    }
}
