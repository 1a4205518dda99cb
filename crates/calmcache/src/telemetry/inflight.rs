//! The `[server] max_inflight_body` budget: bytes of response bodies that
//! fills in progress hold in RAM (a streamed fill's window or kept chunks, a
//! small body being collected), summed in one relaxed atomic gauge. A fill
//! that starts while the gauge is at or past the budget streams through
//! uncached instead of buffering. No lock: a fill adds and subtracts its own
//! bytes through a [`Held`] guard, which gives them back when dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::telemetry::counter::Counter;

/// The gauge, its limit and the fills refused a buffer.
#[derive(Debug)]
pub struct Inflight {
    /// `server.max_inflight_body` of the running generation.
    limit: AtomicU64,
    /// Bytes held now.
    held: AtomicU64,
    /// Fills that streamed through uncached because the budget was spent.
    pub over_budget: Counter,
}

impl Inflight {
    /// An empty gauge with `limit` bytes of room.
    pub fn new(limit: u64) -> Inflight {
        Inflight {
            limit: AtomicU64::new(limit),
            held: AtomicU64::new(0),
            over_budget: Counter::default(),
        }
    }

    /// A reload's new `max_inflight_body` (fills already running keep going).
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Bytes held by fills now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The budget in bytes.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// A guard for one fill's bytes, or `None` (counted) when the budget is
    /// spent and the fill must not buffer.
    pub fn admit(self: &Arc<Self>) -> Option<Held> {
        if self.held() >= self.limit() {
            self.over_budget.inc();
            return None;
        }
        Some(Held {
            inflight: self.clone(),
            bytes: 0,
        })
    }
}

/// One fill's share of the gauge; dropping it gives the bytes back.
#[derive(Debug)]
pub struct Held {
    inflight: Arc<Inflight>,
    bytes: u64,
}

impl Held {
    /// The fill now holds `n` more bytes.
    pub fn add(&mut self, n: u64) {
        self.bytes += n;
        self.inflight.held.fetch_add(n, Ordering::Relaxed);
    }

    /// The fill let go of `n` bytes.
    pub fn sub(&mut self, n: u64) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.inflight.held.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.inflight.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn held_bytes_come_back_and_a_spent_budget_refuses() {
        let inflight = Arc::new(Inflight::new(10));
        let mut a = inflight.admit().unwrap();
        a.add(6);
        a.sub(2);
        let mut b = inflight.admit().unwrap();
        b.add(6);
        assert_eq!(inflight.held(), 10);
        assert!(inflight.admit().is_none());
        assert_eq!(inflight.over_budget.get(), 1);
        drop(a);
        assert_eq!(inflight.held(), 6);
        drop(b);
        assert_eq!(inflight.held(), 0);
    }
}
