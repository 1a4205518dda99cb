//! Waiting on a condition instead of sleeping: [`wait_until`] polls a check
//! every [`POLL`] until it holds, and fails the test with what was awaited
//! once a deadline passes. A test sleeps only where time itself is its
//! subject (a TTL running out, a timeout elapsing); every other pause is a
//! bounded wait for the thing the test needs (a reload applied, a file
//! written, a counter moved, a server up).
//!
//! Owns no fixtures and starts nothing: it only polls what it is given.

use std::time::{Duration, Instant};

/// How often [`wait_until`] checks its condition.
pub const POLL: Duration = Duration::from_millis(25);

/// What a check of [`wait_until`] answers: `bool` (holds or not), or
/// `Option<T>` (the value once it is there).
pub trait Check {
    /// What [`wait_until`] returns once the check holds.
    type Value;
    /// `Some` when the check holds.
    fn holds(self) -> Option<Self::Value>;
}

impl Check for bool {
    type Value = ();
    fn holds(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Check for Option<T> {
    type Value = T;
    fn holds(self) -> Option<T> {
        self
    }
}

/// Runs `check` every [`POLL`] until it holds and returns its value; panics
/// naming `what` once `limit` has passed. The check runs at least once and
/// once more at the deadline, so a slow machine fails only a real wait.
pub async fn wait_until<C: Check>(
    limit: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> C,
) -> C::Value {
    let deadline = Instant::now() + limit;
    loop {
        let past = Instant::now() >= deadline;
        if let Some(value) = check().await.holds() {
            return value;
        }
        assert!(!past, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}
