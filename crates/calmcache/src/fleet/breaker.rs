//! The circuit breaker in front of Redis: after a run of failed calls
//! (errors or deadlines missed) it opens and the node stops calling Redis at
//! all, so a dead, hung or slow Redis adds no latency to requests; after a
//! pause (1 s, doubling to 30 s while probes fail) one probe call goes
//! through, and a success closes it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Failed calls in a row that open the breaker.
pub(crate) const OPEN_AFTER: u32 = 3;
/// The first pause once open; doubled per failed probe up to [`PAUSE_MAX`].
const PAUSE_MIN: Duration = Duration::from_secs(1);
const PAUSE_MAX: Duration = Duration::from_secs(30);

/// Where the breaker stands, for `/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BreakerState {
    /// Calls go to Redis.
    Closed,
    /// Calls are skipped until the pause ends.
    Open,
    /// One probe call is out; the rest are skipped.
    HalfOpen,
}

impl BreakerState {
    /// Every state, for the `state` label of `/metrics`.
    pub(crate) const ALL: [BreakerState; 3] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
    ];

    /// Its name: the `/status` value and the `/metrics` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// A call the breaker let through; report how it went.
#[must_use]
pub(crate) struct Pass {
    probe: bool,
}

struct State {
    failures: u32,
    pause: Duration,
    open_until: Option<Instant>,
    probing: bool,
}

/// One breaker per Redis link.
pub(crate) struct Breaker {
    /// True while open or half-open: the fast path reads only this.
    tripped: AtomicBool,
    state: Mutex<State>,
    /// Times it opened.
    pub(crate) opened: AtomicU64,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            tripped: AtomicBool::new(false),
            state: Mutex::new(State {
                failures: 0,
                pause: PAUSE_MIN,
                open_until: None,
                probing: false,
            }),
            opened: AtomicU64::new(0),
        }
    }
}

impl Breaker {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// May a call go to Redis now? Closed: yes (one atomic load). Open: no,
    /// until the pause has passed; then one probe.
    pub(crate) fn pass(&self) -> Option<Pass> {
        if !self.tripped.load(Ordering::Acquire) {
            return Some(Pass { probe: false });
        }
        let mut state = self.state();
        let due = state.open_until.is_some_and(|t| Instant::now() >= t);
        if due && !state.probing {
            state.probing = true;
            return Some(Pass { probe: true });
        }
        None
    }

    /// The call answered in time.
    pub(crate) fn success(&self, pass: Pass) {
        if !pass.probe && !self.tripped.load(Ordering::Acquire) {
            let mut state = self.state();
            state.failures = 0;
            return;
        }
        let mut state = self.state();
        state.failures = 0;
        state.pause = PAUSE_MIN;
        state.open_until = None;
        state.probing = false;
        self.tripped.store(false, Ordering::Release);
        tracing::info!("redis is answering again: fleet mode resumes");
    }

    /// The call failed or missed its deadline. True when this opened the
    /// breaker (or kept it open after a probe), so the caller may rebuild
    /// its connection.
    pub(crate) fn failure(&self, pass: Pass) -> bool {
        let mut state = self.state();
        if pass.probe {
            state.probing = false;
            state.pause = (state.pause * 2).min(PAUSE_MAX);
            state.open_until = Some(Instant::now() + state.pause);
            return true;
        }
        state.failures += 1;
        if state.failures >= OPEN_AFTER && !self.tripped.load(Ordering::Acquire) {
            state.pause = PAUSE_MIN;
            state.open_until = Some(Instant::now() + state.pause);
            self.tripped.store(true, Ordering::Release);
            self.opened.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                failures = state.failures,
                "redis failing: fleet mode paused, the node goes on alone"
            );
            return true;
        }
        false
    }

    /// The call's caller gave up on it before it ended: it says nothing
    /// about Redis, but a probe must not stay out for good (the next call
    /// probes instead).
    pub(crate) fn abandon(&self, pass: Pass) {
        if pass.probe {
            self.state().probing = false;
        }
    }

    /// Closed, open or half-open.
    pub(crate) fn current(&self) -> BreakerState {
        if !self.tripped.load(Ordering::Acquire) {
            return BreakerState::Closed;
        }
        if self.state().probing {
            BreakerState::HalfOpen
        } else {
            BreakerState::Open
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_metrics_name_the_states_alike() {
        for state in BreakerState::ALL {
            let json = serde_json::to_value(state).expect("a string");
            assert_eq!(json, state.as_str());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_a_run_probes_after_the_pause_and_closes_on_success() {
        let b = Breaker::default();
        for _ in 0..OPEN_AFTER - 1 {
            let p = b.pass().expect("closed");
            assert!(!b.failure(p));
        }
        // A success in between starts the count again.
        b.success(b.pass().expect("closed"));
        for _ in 0..OPEN_AFTER - 1 {
            let p = b.pass().expect("closed");
            b.failure(p);
        }
        assert_eq!(b.current(), BreakerState::Closed);
        let p = b.pass().expect("closed");
        assert!(b.failure(p), "the third in a row opens it");
        assert_eq!(b.current(), BreakerState::Open);
        assert!(b.pass().is_none(), "open: nothing goes through");
        tokio::time::advance(PAUSE_MIN).await;
        let probe = b.pass().expect("one probe after the pause");
        assert!(b.pass().is_none(), "only one probe");
        assert_eq!(b.current(), BreakerState::HalfOpen);
        // A failed probe: open again, for twice as long.
        assert!(b.failure(probe));
        tokio::time::advance(PAUSE_MIN).await;
        assert!(b.pass().is_none(), "the pause doubled");
        tokio::time::advance(PAUSE_MIN).await;
        let probe = b.pass().expect("a probe");
        b.success(probe);
        assert_eq!(b.current(), BreakerState::Closed);
        assert!(b.pass().is_some());
        assert_eq!(b.opened.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_its_caller_gave_up_on_lets_the_next_call_probe() {
        let b = Breaker::default();
        for _ in 0..OPEN_AFTER {
            let p = b.pass().expect("closed");
            b.failure(p);
        }
        tokio::time::advance(PAUSE_MIN).await;
        let probe = b.pass().expect("a probe");
        assert!(b.pass().is_none(), "only one probe");
        b.abandon(probe);
        assert_eq!(b.current(), BreakerState::Open);
        let probe = b.pass().expect("the next call probes");
        b.success(probe);
        assert_eq!(b.current(), BreakerState::Closed);
        // Plain calls given up on count for nothing.
        for _ in 0..OPEN_AFTER {
            b.abandon(b.pass().expect("closed"));
        }
        assert_eq!(b.current(), BreakerState::Closed);
    }
}
