//! `[limits.<name>]`: per-client limits that routes share by name, as
//! NGINX's `limit_req_zone` / `limit_conn_zone` zones are shared by
//! locations. Only the types: `validate/limits.rs` checks the table, the
//! state (one table of clients per limit) lives in `net/limit/`.

use std::time::Duration;

/// One named limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConfig {
    /// The table's name: routes list it in `limits`, metrics label by it.
    pub name: String,
    /// What is limited: a request rate or requests in progress.
    pub kind: LimitKind,
    /// The status a refused request gets (default 429; NGINX's is 503).
    pub status: u16,
    /// Which requests count: all, or only those bound for the origin.
    pub applies_to: AppliesTo,
    /// The most clients tracked at once; the least recently seen is
    /// forgotten first (NGINX's zone size, counted in clients).
    pub max_clients: usize,
}

/// `rate` (limit_req) or `connections` (limit_conn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// A leaky bucket per client: `rate`, `burst`, `delay`.
    Rate(RateLimit),
    /// At most this many requests in progress per client (each HTTP/2
    /// stream counts, as NGINX counts requests).
    Connections(u32),
}

/// NGINX's `limit_req rate=.. burst=.. [nodelay | delay=N]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second, times 1000 (`"10r/s"` is 10 000, `"30r/m"`
    /// 500): NGINX's own unit, so a rate below 1r/s is exact.
    pub milli_per_second: u64,
    /// Requests above the rate a client may have waiting or sent at once.
    pub burst: u32,
    /// Which of the burst go at once and which wait for the rate.
    pub delay: Delay,
}

impl RateLimit {
    /// The time the bucket takes to drain one request.
    pub fn interval(&self) -> Duration {
        Duration::from_micros(1_000_000_000 / self.milli_per_second.max(1))
    }
}

/// `delay`: how requests within `burst` are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// `"nodelay"`: every request within the burst goes at once.
    NoDelay,
    /// A count: the first N excess requests go at once, the rest of the
    /// burst waits until the rate lets it through (0, the default: every
    /// excess request waits, as NGINX without `nodelay`).
    After(u32),
}

/// `applies_to`: the requests a limit counts and refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliesTo {
    /// Every request of the route (NGINX's meaning).
    All,
    /// Only requests that go to the origin (a miss, a pass, a refetch, a
    /// tunnel): an answer from the cache is never limited nor counted.
    Origin,
}

impl AppliesTo {
    /// Every value, in the spelling the config uses.
    pub const ALL: [AppliesTo; 2] = [AppliesTo::All, AppliesTo::Origin];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AppliesTo::All => "all",
            AppliesTo::Origin => "origin",
        }
    }
}
