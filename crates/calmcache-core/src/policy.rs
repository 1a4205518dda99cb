//! Refresh policies: when a cached object is served, refreshed early, or fetched.

/// How a route refreshes objects that are about to expire or have expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshMode {
    /// Every request for a missing or expired object goes to the origin until one is stored.
    None,
    /// One fetch per key at a time; others wait for it.
    Lock,
    /// XFetch (Vattani et al., VLDB 2015): probabilistic early refresh in the request's path.
    Per,
    /// PER with delta = max(fetch time, 10% of TTL), refreshed in the background.
    Sus,
}

impl RefreshMode {
    /// The config spelling of this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshMode::None => "none",
            RefreshMode::Lock => "lock",
            RefreshMode::Per => "per",
            RefreshMode::Sus => "sus",
        }
    }
}
