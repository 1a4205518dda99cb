//! The seam of a fleet-wide origin budget: an upstream's `fleet_max_inflight`
//! slots, shared by every node of a fleet, asked for after a local slot
//! (`max_inflight`) was taken and before the request leaves for the origin.
//!
//! Owns: the trait and its answers only. The upstream pool (net/) asks
//! through it; fleet mode (fleet/, which may import net/) implements it on
//! Redis. Nothing here knows Redis, and fleet/ never sees a request.
//!
//! Failing open: [`SharedTake::Unavailable`] (no Redis, breaker open, a
//! deadline passed, a bad answer) lets the request go on under the local
//! budget alone; only [`SharedTake::Full`] holds it back.

use std::future::Future;
use std::pin::Pin;

/// What a fleet-wide slot request answered.
pub(crate) enum SharedTake {
    /// A slot is this node's until the value is dropped (dropping it
    /// releases the slot, off the request path; a node that dies leaves
    /// its slots to expire).
    Granted(Box<dyn Send + Sync>),
    /// Every fleet-wide slot of the server is taken: wait (and ask again)
    /// or shed.
    Full,
    /// The shared store did not answer: go on under the local budget.
    Unavailable,
}

/// A fleet-wide budget of origin slots (fleet/ implements it on Redis).
pub(crate) trait SharedBudget: Send + Sync + 'static {
    /// Asks for one of `limit` fleet-wide slots for `server` (its
    /// `host:port`, as configured) of upstream `upstream`. Answers within
    /// the fleet's own deadline.
    fn take<'a>(
        &'a self,
        upstream: &'a str,
        server: &'a str,
        limit: u32,
    ) -> Pin<Box<dyn Future<Output = SharedTake> + Send + 'a>>;
}
