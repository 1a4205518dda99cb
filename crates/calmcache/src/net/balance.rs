//! How an upstream chooses a request's server beyond round robin (its
//! `balance`): the consistent hash ring of `"hash"` and the comparison of
//! `"least_conn"`, as pure pieces `upstream.rs` asks; and [`InFlight`], the
//! count of a server's requests in flight that least_conn reads.
//!
//! - `"hash"` (NGINX `hash KEY consistent`, ketama-style): every server
//!   puts [`POINTS`] points per unit of weight on a ring of 64-bit hashes
//!   of its address; a request goes to the first point at or after the
//!   hash of its rendered `hash_key`, and when that server is down (or
//!   failed this request) to the next distinct server along the ring. A
//!   server's points depend on its address alone, so adding a server takes
//!   about 1/n of the keys, all to the new one, and a server back up gets
//!   its own keys back.
//! - `"least_conn"` (NGINX `least_conn`): the server with the fewest
//!   requests in flight for its weight (`active / weight`, compared by
//!   cross-multiplication), ties to the first in round-robin order.
//!
//! Owns no health or budget: `upstream.rs` says who is up and takes slots.
//! Imports `config/` (the key template) and nothing else of the crate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{HeaderMap, Request};

use crate::config::key_template::{KeyTemplate, RequestView};

/// Ring points per unit of weight: ketama's (and NGINX's) 160.
pub(crate) const POINTS: u32 = 160;

/// A consistent hash ring: points sorted by hash, each naming its server.
#[derive(Debug)]
pub(crate) struct Ring {
    /// (point, server index), sorted by point.
    points: Vec<(u64, usize)>,
    /// How many servers it was built for.
    servers: usize,
}

impl Ring {
    /// The ring of `servers` (address, weight), in config order.
    pub(crate) fn new<'a>(servers: impl ExactSizeIterator<Item = (&'a str, u32)>) -> Ring {
        let count = servers.len();
        let mut points = Vec::new();
        for (index, (address, weight)) in servers.enumerate() {
            let n = weight.max(1).saturating_mul(POINTS);
            points.extend((0..n).map(|k| (point(address, k), index)));
        }
        points.sort_unstable();
        Ring {
            points,
            servers: count,
        }
    }

    /// The servers in the order a key hashed to `hash` tries them: the
    /// first point at or after it, then along the ring (wrapping), each
    /// server once.
    pub(crate) fn order(&self, hash: u64) -> RingOrder<'_> {
        let start = self.points.partition_point(|&(p, _)| p < hash);
        RingOrder {
            ring: self,
            at: start,
            walked: 0,
            first: 0,
            seen: Vec::new(),
            given: 0,
        }
    }
}

/// The servers along the ring from a key's point ([`Ring::order`]).
pub(crate) struct RingOrder<'a> {
    ring: &'a Ring,
    at: usize,
    walked: usize,
    /// Servers already given: the first alone, then (allocated only when
    /// the walk goes past it) a flag per server.
    first: usize,
    seen: Vec<bool>,
    given: usize,
}

impl Iterator for RingOrder<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let points = &self.ring.points;
        while self.walked < points.len() && self.given < self.ring.servers {
            let (_, server) = points[(self.at + self.walked) % points.len()];
            self.walked += 1;
            if self.given == 0 {
                self.first = server;
            } else {
                if self.seen.is_empty() {
                    self.seen = vec![false; self.ring.servers];
                    self.seen[self.first] = true;
                }
                match self.seen.get_mut(server) {
                    Some(seen) if !*seen => *seen = true,
                    _ => continue,
                }
            }
            self.given += 1;
            return Some(server);
        }
        None
    }
}

/// The hash of a server's `k`-th point.
fn point(address: &str, k: u32) -> u64 {
    let mut bytes = Vec::with_capacity(address.len() + 5);
    bytes.extend_from_slice(address.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&k.to_le_bytes());
    hash(&bytes)
}

/// FNV-1a with splitmix64's finaliser: stable across runs, builds and
/// nodes (so every node of a fleet sends a key to the same server).
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    calmcache_core::key::mix64(h)
}

/// The hash of `key` rendered for `req` (a request on its way upstream:
/// origin-form target, `Host` set by the edge). `$scheme` is the
/// `X-Forwarded-Proto` calmcache itself set (http/headers.rs
/// add_forwarded), `http` without one.
pub(crate) fn request_hash<B>(key: &KeyTemplate, req: &Request<B>) -> u64 {
    let headers: &HeaderMap = req.headers();
    let text = |name: http::header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let scheme = match text(http::header::HeaderName::from_static("x-forwarded-proto")) {
        "https" => "https",
        _ => "http",
    };
    let view = RequestView {
        scheme,
        method: req.method(),
        host: text(http::header::HOST),
        path_and_query: req.uri().path_and_query().map_or("/", |p| p.as_str()),
        headers,
    };
    let mut rendered = String::with_capacity(64);
    key.render(&view, &mut rendered);
    hash(rendered.as_bytes())
}

/// least_conn: among the servers `load` gives a load for (`None`: not a
/// candidate: down, or excluded), the one with the fewest requests in
/// flight per unit of weight; ties go to the first from `start` in
/// round-robin order (`start` taken modulo `n`).
pub(crate) fn least_conn(
    n: usize,
    start: usize,
    load: impl Fn(usize) -> Option<Load>,
) -> Option<usize> {
    let mut best: Option<(usize, Load)> = None;
    for k in 0..n {
        let i = start.wrapping_add(k) % n;
        let Some(this) = load(i) else {
            continue;
        };
        if best.is_none_or(|(_, b)| this.fewer_than(b)) {
            best = Some((i, this));
        }
    }
    best.map(|(i, _)| i)
}

/// A server's requests in flight and its weight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Requests in flight now.
    pub active: usize,
    /// Its `weight` (at least 1).
    pub weight: u32,
}

impl Load {
    /// `self.active / self.weight < other.active / other.weight`, exactly.
    fn fewer_than(self, other: Load) -> bool {
        let mine = self.active as u128 * u128::from(other.weight.max(1));
        let theirs = other.active as u128 * u128::from(self.weight.max(1));
        mine < theirs
    }
}

/// One request in flight at a server, counted until dropped (the answer's
/// body ended, failed, or was let go).
#[derive(Debug)]
pub(crate) struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Counts one more in `count`.
    pub(crate) fn enter(count: &Arc<AtomicUsize>) -> InFlight {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[path = "balance_tests.rs"]
mod tests;
