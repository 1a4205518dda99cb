//! Per-client limits (`[limits.<name>]`): NGINX's `limit_req` (a leaky
//! bucket per client: `rate`, `burst`, `delay`) and `limit_conn` (requests
//! in progress per client), each a table of clients bounded by
//! `max_clients` (table.rs), and what they counted.
//!
//! Owns the arithmetic and the state; decides nothing about requests: the
//! request path (proxy/limit.rs) asks [`Limit::take`] or [`Limit::enter`]
//! with a client's [`ClientKey`] and acts on the answer. Imports config
//! and telemetry only.
//!
//! Invariant: a shard's lock is held for a few lines, never across an
//! `.await`; a route without limits never reaches this module.

mod table;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::limits::{AppliesTo, Delay, LimitConfig, LimitKind, RateLimit};
use crate::config::RouteConfig;
use crate::telemetry::counter::Counter;
use table::{lock, shape, Key, Spread, Table};

/// The key a client is limited by: its IPv4 address, or its IPv6 /64
/// (one host is usually given a whole /64, so keying by the full address
/// would let it take 2^64 fresh buckets). An IPv4-mapped IPv6 address is
/// its IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientKey(Key);

impl ClientKey {
    /// The key of `ip`.
    pub(crate) fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => ClientKey(u128::from(v4.to_ipv6_mapped())),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey(u128::from(v4.to_ipv6_mapped())),
                None => ClientKey(u128::from(v6) & !u128::from(u64::MAX)),
            },
        }
    }
}

/// A route's limits by the gate that applies them (proxy/limit.rs).
#[derive(Default)]
pub(crate) struct RouteLimits {
    /// `applies_to = "all"`: at admission.
    pub(crate) all: Box<[Arc<Limit>]>,
    /// `applies_to = "origin"`: once the request goes to the origin.
    pub(crate) origin: Box<[Arc<Limit>]>,
}

impl RouteLimits {
    /// `cfg`'s `limits`, from the generation's `limits` (config order).
    pub(crate) fn new(cfg: &RouteConfig, limits: &[Arc<Limit>]) -> Self {
        let listed = || cfg.limits.iter().filter_map(|&i| limits.get(i));
        let of = |applies: AppliesTo| {
            let picked = listed().filter(|l| l.cfg.applies_to == applies);
            picked.cloned().collect()
        };
        RouteLimits {
            all: of(AppliesTo::All),
            origin: of(AppliesTo::Origin),
        }
    }
}

/// What a rate limit says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within the rate (or the part of the burst that goes at once).
    Go,
    /// Within the burst: goes after this long, as the rate allows.
    Wait(Duration),
    /// Past the burst: refused; the bucket has room again after this long.
    Refuse(Duration),
}

/// What a limit counted; kept by name across reloads (never goes back).
#[derive(Default, Debug)]
pub(crate) struct LimitStats {
    /// Requests refused.
    pub rejected: Counter,
    /// Requests delayed to the rate.
    pub delayed: Counter,
}

/// One named limit and its clients.
pub(crate) struct Limit {
    /// As configured.
    pub cfg: LimitConfig,
    /// What it counted.
    pub stats: Arc<LimitStats>,
    state: State,
    /// Bucket times are milliseconds since this.
    epoch: Instant,
}

enum State {
    Rate(RateLimit, Table<Bucket>),
    Connections(u32, Conns),
}

/// A client's leaky bucket, in NGINX's units.
#[derive(Default, Clone, Copy)]
struct Bucket {
    /// Requests above the rate, times 1000.
    excess: u64,
    /// When the bucket was last filled, ms since the limit's epoch.
    last: u64,
}

impl Limit {
    /// The limit `cfg`: `previous` itself (its clients and counts) when it
    /// is the same limit, else a new table counting into `previous`'s
    /// stats.
    pub(crate) fn new(cfg: &LimitConfig, previous: Option<&Arc<Limit>>) -> Arc<Limit> {
        if let Some(old) = previous.filter(|old| old.cfg == *cfg) {
            return old.clone();
        }
        let state = match cfg.kind {
            LimitKind::Rate(rate) => State::Rate(rate, Table::new(cfg.max_clients)),
            LimitKind::Connections(n) => State::Connections(n, Conns::new(cfg.max_clients)),
        };
        Arc::new(Limit {
            cfg: cfg.clone(),
            stats: previous.map(|p| p.stats.clone()).unwrap_or_default(),
            state,
            epoch: Instant::now(),
        })
    }

    /// A request of `client` at `now` against a rate limit (NGINX's
    /// ngx_http_limit_req_lookup); a connections limit always says `Go`.
    pub(crate) fn take(&self, client: ClientKey, now: Instant) -> Verdict {
        let State::Rate(rate, table) = &self.state else {
            return Verdict::Go;
        };
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        table.with(client.0, |bucket, fresh| leak(rate, bucket, fresh, ms))
    }

    /// Takes back a request [`Limit::take`] let through, for one another
    /// limit then refused (NGINX's ngx_http_limit_req_account): the refused
    /// request must not cost the client its place in this bucket.
    pub(crate) fn give_back(&self, client: ClientKey) {
        if let State::Rate(_, table) = &self.state {
            table.with(client.0, |bucket, _| {
                bucket.excess = bucket.excess.saturating_sub(1000);
            });
        }
    }

    /// Enters a request of `client` into a connections limit: `None` when
    /// the client has as many in progress (or the table is full, as NGINX
    /// refuses then too). A rate limit lets every request in.
    pub(crate) fn enter(self: &Arc<Self>, client: ClientKey) -> Option<Entered> {
        let State::Connections(max, conns) = &self.state else {
            return Some(Entered(None));
        };
        conns
            .enter(client.0, *max)
            .then(|| Entered(Some((self.clone(), client.0))))
    }

    /// Clients tracked now.
    pub(crate) fn clients(&self) -> usize {
        match &self.state {
            State::Rate(_, table) => table.len(),
            State::Connections(_, conns) => conns.len(),
        }
    }
}

/// One request of a bucket last filled `bucket.last`, at `ms`. A refused
/// request leaves the bucket as it was.
fn leak(rate: &RateLimit, bucket: &mut Bucket, fresh: bool, ms: u64) -> Verdict {
    let per_s = rate.milli_per_second;
    let excess = if fresh {
        0
    } else {
        let drained = per_s.saturating_mul(ms.saturating_sub(bucket.last)) / 1000;
        (bucket.excess + 1000).saturating_sub(drained)
    };
    let burst = u64::from(rate.burst) * 1000;
    if excess > burst {
        // Room again once the excess has leaked down to the burst.
        return Verdict::Refuse(Duration::from_millis((excess - burst) * 1000 / per_s));
    }
    *bucket = Bucket { excess, last: ms };
    let free = match rate.delay {
        Delay::NoDelay => return Verdict::Go,
        Delay::After(n) => u64::from(n) * 1000,
    };
    if excess <= free {
        return Verdict::Go;
    }
    Verdict::Wait(Duration::from_millis((excess - free) * 1000 / per_s))
}

/// A connections limit's counts: a client is tracked only while it has a
/// request in progress, so its table holds at most the requests in
/// progress (bounded by `max_clients` all the same).
struct Conns {
    shards: Box<[Mutex<HashMap<Key, u32>>]>,
    each: usize,
    spread: Spread,
}

impl Conns {
    fn new(capacity: usize) -> Self {
        let (count, each) = shape(capacity);
        let shards = (0..count).map(|_| Mutex::new(HashMap::new())).collect();
        Conns {
            shards,
            each,
            spread: Spread::default(),
        }
    }

    fn shard(&self, key: Key) -> std::sync::MutexGuard<'_, HashMap<Key, u32>> {
        lock(&self.shards[self.spread.shard(key, self.shards.len())])
    }

    fn enter(&self, key: Key, max: u32) -> bool {
        let mut shard = self.shard(key);
        let full = shard.len() >= self.each;
        match shard.get_mut(&key) {
            Some(n) if *n >= max => false,
            Some(n) => {
                *n += 1;
                true
            }
            None if full => false,
            None => {
                shard.insert(key, 1);
                true
            }
        }
    }

    fn leave(&self, key: Key) {
        let mut shard = self.shard(key);
        if let Some(n) = shard.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                shard.remove(&key);
            }
        }
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

/// A request in progress under a connections limit: leaves it on drop
/// (`None` for a limit that counts no connections).
pub(crate) struct Entered(Option<(Arc<Limit>, Key)>);

impl Entered {
    /// Whether this holds a place (a connections limit's).
    pub(crate) fn holds(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Some((limit, key)) = self.0.take() {
            if let State::Connections(_, conns) = &limit.state {
                conns.leave(key);
            }
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
