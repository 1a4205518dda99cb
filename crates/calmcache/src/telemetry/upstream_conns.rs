//! The connections calmcache opens to one upstream server, why, and who
//! closed them, next to the requests sent there: the figures that say how
//! well the keepalive pool reuses connections (issue 29: "a metric of
//! upstream connections opened per request").
//!
//! Owns the counters and their label enums; the pool's connector
//! (`net/origin_tls.rs`) and the upstream (`net/upstream.rs`) count into
//! them, `/status` and `/metrics` read them. Relaxed atomics only: one
//! add per request sent and one per connection opened or closed, never on
//! a cache hit. Must not know about sockets or the pool.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::telemetry::counter::Counter;

/// Why calmcache opened a connection to an upstream server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// A request found no idle connection in the pool (none yet, all
    /// busy, or the idle ones were closed by the origin or timed out).
    PoolEmpty,
    /// A WebSocket handshake: a switched connection is never reused, so
    /// each tunnel has a connection of its own (`net/upstream.rs`).
    Tunnel,
}

impl Opened {
    /// Every reason, in the order of their counters.
    pub(crate) const ALL: [Opened; 2] = [Opened::PoolEmpty, Opened::Tunnel];

    /// The `reason` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Opened::PoolEmpty => "pool_empty",
            Opened::Tunnel => "tunnel",
        }
    }
}

/// Who ended a pooled connection to an upstream server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// The origin: its end of the connection was seen closed or reset (its
    /// keep-alive timeout, `Connection: close`, a crash).
    Origin,
    /// calmcache: idle past the pool's timeout, the pool full, an answer
    /// not read to its end, a failed exchange, a shutdown.
    Calmcache,
}

impl Closed {
    /// Every side, in the order of their counters.
    pub(crate) const ALL: [Closed; 2] = [Closed::Origin, Closed::Calmcache];

    /// The `by` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Closed::Origin => "origin",
            Closed::Calmcache => "calmcache",
        }
    }
}

/// What became of an origin answer dropped before its end (a client gone
/// mid-body, a 5xx replaced by a stale copy, a refused upgrade's page):
/// its rest read and thrown away so its connection went back to the pool,
/// or its connection closed (`net/origin_body.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// The rest was read to its end: the connection is pooled again.
    Drained,
    /// More than the drain reads was left (a declared length at once, or
    /// bytes past it): closed.
    TooLarge,
    /// The rest did not come within the drain's wait: closed.
    TooSlow,
    /// The rest ended in an error (the origin reset it): closed.
    Failed,
}

impl Dropped {
    /// Every outcome, in the order of their counters.
    pub(crate) const ALL: [Dropped; 4] = [
        Dropped::Drained,
        Dropped::TooLarge,
        Dropped::TooSlow,
        Dropped::Failed,
    ];

    /// The `outcome` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Dropped::Drained => "drained",
            Dropped::TooLarge => "too_large",
            Dropped::TooSlow => "too_slow",
            Dropped::Failed => "failed",
        }
    }
}

/// One upstream server's connection figures. Kept across a reload with
/// the server's health (same address, scheme and health settings), so
/// the counters never go back.
#[derive(Debug, Default)]
pub(crate) struct ServerConns {
    /// Requests sent to the server (each try of a retried request counts,
    /// and each active health check: it takes a pooled connection too).
    pub(crate) requests: Counter,
    /// Connections opened, by [`Opened`].
    pub(crate) opened: [Counter; Opened::ALL.len()],
    /// Pooled connections ended, by [`Closed`] (a tunnel's connection is
    /// not counted here: it ends with its tunnel).
    pub(crate) closed: [Counter; Closed::ALL.len()],
    /// Answers dropped before their end, by [`Dropped`].
    pub(crate) dropped: [Counter; Dropped::ALL.len()],
}

impl ServerConns {
    /// Counts a connection opened for `why`.
    pub(crate) fn opened(&self, why: Opened) {
        self.opened[why as usize].inc();
    }

    /// Counts a pooled connection ended by `by`.
    pub(crate) fn closed(&self, by: Closed) {
        self.closed[by as usize].inc();
    }

    /// Counts an answer dropped before its end, and what became of it.
    pub(crate) fn dropped(&self, how: Dropped) {
        self.dropped[how as usize].inc();
    }

    /// Connections opened, for every reason.
    pub(crate) fn opened_total(&self) -> u64 {
        self.opened.iter().map(Counter::get).sum()
    }
}

/// Whether a request went out on a connection opened for it or on one
/// that had carried a request before (the access log's
/// `upstream_connection`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnUse {
    /// The connection's first request.
    New,
    /// A connection that carried a request before.
    Reused,
}

impl ConnUse {
    /// As the access log writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConnUse::New => "new",
            ConnUse::Reused => "reused",
        }
    }
}

/// The requests a pooled connection has carried, shared between the
/// connection and each of its answers (a response extension), so a
/// request can tell whether its connection was new.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnRequests(Arc<AtomicU32>);

impl ConnRequests {
    /// Counts one more request on the connection: [`ConnUse::New`] for its
    /// first.
    pub(crate) fn note(&self) -> ConnUse {
        match self.0.fetch_add(1, Ordering::Relaxed) {
            0 => ConnUse::New,
            _ => ConnUse::Reused,
        }
    }
}

/// Reuse as a share of requests: `1 - opened / requests`, in percent
/// (100 with no request; never below 0).
pub(crate) fn reuse_percent(opened: u64, requests: u64) -> f64 {
    if requests == 0 {
        return 100.0;
    }
    let opened = opened.min(requests) as f64;
    100.0 * (1.0 - opened / requests as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_is_the_share_of_requests_that_opened_nothing() {
        assert_eq!(reuse_percent(0, 0), 100.0);
        assert_eq!(reuse_percent(1, 1000), 99.9);
        assert_eq!(reuse_percent(5, 5), 0.0);
        // Tunnels and failed connects can open more than requests sent.
        assert_eq!(reuse_percent(7, 5), 0.0);
    }

    #[test]
    fn a_connection_is_new_for_its_first_request_only() {
        let uses = ConnRequests::default();
        let answer = uses.clone();
        assert_eq!(answer.note(), ConnUse::New);
        assert_eq!(uses.note(), ConnUse::Reused);
        assert_eq!(answer.note(), ConnUse::Reused);
    }
}
