//! The origin budget of one upstream (`max_inflight`): how many requests
//! are in flight to each of its servers, and ONE queue, in arrival order,
//! of the requests waiting for a slot on any of them.
//!
//! A [`Slot`] is one request's right to be at a server; dropping it (the
//! origin's answer is over: its body ended or was dropped) hands it
//! straight to the first live waiter, so a freed slot never sits idle
//! while someone waits, and a waiter that gave up (timed out, its client
//! gone) never keeps one: a slot sent into a dropped receiver comes back
//! with the receiver's drop and goes to the next waiter.
//!
//! Owns: the counts and the queue, behind one mutex per upstream, taken
//! only on the way to the origin (never on a cache hit, never across an
//! await). Does not choose among servers by health or round robin (the
//! upstream pool does, `upstream.rs`) nor ask the fleet (`shared_budget.rs`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::telemetry::metrics::UpstreamStats;

/// How a request may wait for an origin slot: decided by the request path
/// (`proxy/`), done here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// No usable copy: wait in the queue up to `queue_timeout`.
    Wait,
    /// A usable stale copy stands by, or a background refresh or warm-up:
    /// never queue; a full budget refuses at once.
    TryOnly,
    /// The refresh of a copy served past its lifetime because the origin
    /// was busy: wait up to `queue_timeout`, ahead of every
    /// [`Admission::Wait`] request (one per object, within
    /// `refresh_concurrency`: a crawler's first fetches cannot starve the
    /// objects clients keep asking for).
    Ahead,
}

/// Whether server `i` may be given a slot (it is up).
pub(crate) type IsUp = Box<dyn Fn(usize) -> bool + Send + Sync>;

/// The origin budget of one upstream.
pub(crate) struct Budget {
    /// Slots per server.
    limit: usize,
    /// How long a [`Admission::Wait`] request waits in the queue.
    pub(crate) queue_timeout: Duration,
    state: Mutex<State>,
    /// A down server never gets a slot, freed or free.
    is_up: IsUp,
    stats: Arc<UpstreamStats>,
}

struct State {
    /// Slots in use, per server.
    inflight: Vec<usize>,
    /// The [`Admission::Ahead`] waiters, first come first: served before
    /// any of `waiters`.
    ahead: VecDeque<oneshot::Sender<Slot>>,
    /// The waiters, first come first.
    waiters: VecDeque<oneshot::Sender<Slot>>,
}

impl State {
    /// Whether anyone waits in either lane (waiters that gave up at the
    /// front of a lane are dropped first: they must not hold a newcomer
    /// back, nor make the budget look full).
    fn queued(&mut self) -> bool {
        for lane in [&mut self.ahead, &mut self.waiters] {
            while lane.front().is_some_and(|w| w.is_closed()) {
                lane.pop_front();
            }
        }
        !self.ahead.is_empty() || !self.waiters.is_empty()
    }
}

/// One request's slot at server [`Slot::server`]; released on drop.
pub(crate) struct Slot {
    budget: Arc<Budget>,
    server: usize,
    /// False once its count was given back or moved on (never released twice).
    armed: bool,
}

/// What [`Budget::take`] found.
pub(crate) enum Taken {
    /// A free slot.
    Slot(Slot),
    /// None free; the request is queued (`Admission::Wait`, `Ahead`).
    Queued(Queued),
    /// None free, and the request may not wait (`Admission::TryOnly`).
    Full,
}

/// A place in the queue: [`Queued::wait`] for the slot.
pub(crate) struct Queued {
    rx: oneshot::Receiver<Slot>,
    budget: Arc<Budget>,
}

impl Budget {
    /// A budget of `limit` slots for each of `servers` servers.
    pub(crate) fn new(
        servers: usize,
        limit: usize,
        queue_timeout: Duration,
        is_up: IsUp,
        stats: Arc<UpstreamStats>,
    ) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            queue_timeout,
            state: Mutex::new(State {
                inflight: vec![0; servers],
                ahead: VecDeque::new(),
                waiters: VecDeque::new(),
            }),
            is_up,
            stats,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot at the first server of `order` with one free (the caller
    /// asked their health: a server down for its trial request may be in
    /// it); else a place in the queue (`Wait`) or `Full` (`TryOnly`).
    /// Waiters already queued go first: a free slot is theirs before a
    /// newcomer's.
    pub(crate) fn take(
        self: &Arc<Self>,
        order: impl IntoIterator<Item = usize>,
        admission: Admission,
    ) -> Taken {
        let mut state = self.lock();
        self.serve_waiters(&mut state);
        if !state.queued() {
            if let Some(slot) = self.take_in(&mut state, order) {
                return Taken::Slot(slot);
            }
        }
        let lane = match admission {
            Admission::TryOnly => return Taken::Full,
            Admission::Wait => &mut state.waiters,
            Admission::Ahead => &mut state.ahead,
        };
        let (tx, rx) = oneshot::channel();
        lane.retain(|w| !w.is_closed());
        lane.push_back(tx);
        Taken::Queued(Queued {
            rx,
            budget: self.clone(),
        })
    }

    /// Whether a request that may not wait would be refused now: no free
    /// slot at a server that is up, or others already waiting. A glance
    /// (the answer may change at once); the take decides.
    pub(crate) fn is_full(&self) -> bool {
        let mut state = self.lock();
        state.queued()
            || !(0..state.inflight.len()).any(|i| state.inflight[i] < self.limit && (self.is_up)(i))
    }

    /// A free slot at `server`, waiters or not: the one trial request of a
    /// server that is down (no waiter can be given a slot there).
    pub(crate) fn take_trial(self: &Arc<Self>, server: usize) -> Option<Slot> {
        let mut state = self.lock();
        self.take_in(&mut state, [server])
    }

    /// A free slot at `server` only (a retry on the next server), never queued.
    pub(crate) fn try_at(self: &Arc<Self>, server: usize) -> Option<Slot> {
        let mut state = self.lock();
        self.serve_waiters(&mut state);
        if state.queued() {
            return None;
        }
        self.take_in(&mut state, [server])
    }

    fn take_in(
        self: &Arc<Self>,
        state: &mut State,
        order: impl IntoIterator<Item = usize>,
    ) -> Option<Slot> {
        let server = order
            .into_iter()
            .find(|&i| state.inflight.get(i).is_some_and(|&n| n < self.limit))?;
        state.inflight[server] += 1;
        self.stats.budget.inflight.inc();
        Some(Slot {
            budget: self.clone(),
            server,
            armed: true,
        })
    }

    /// Hands free slots of servers that are up to the waiters, in order
    /// (a server back up, or a slot freed while its server was down).
    fn serve_waiters(self: &Arc<Self>, state: &mut State) {
        while state.queued() {
            let up = (0..state.inflight.len()).filter(|&i| (self.is_up)(i));
            let Some(slot) = self.take_in(state, up) else {
                return;
            };
            if let Some(mut back) = hand_over(state, slot) {
                // Nobody took it: give the count back (under the lock, no drop).
                back.armed = false;
                state.inflight[back.server] -= 1;
                self.stats.budget.inflight.dec();
            }
        }
    }

    /// The slot at `server` is free again: the first live waiter gets it
    /// (when the server is up), or the count goes down.
    fn release(self: &Arc<Self>, server: usize) {
        let mut state = self.lock();
        if (self.is_up)(server) && state.queued() {
            let slot = Slot {
                budget: self.clone(),
                server,
                armed: true,
            };
            let Some(mut back) = hand_over(&mut state, slot) else {
                return;
            };
            back.armed = false;
        }
        if let Some(n) = state.inflight.get_mut(server) {
            *n = n.saturating_sub(1);
        }
        self.stats.budget.inflight.dec();
    }

    /// Slots in use and requests queued now, for tests.
    #[cfg(test)]
    fn figures(&self) -> (Vec<usize>, usize) {
        let state = self.lock();
        let lanes = state.ahead.iter().chain(&state.waiters);
        let live = lanes.filter(|w| !w.is_closed()).count();
        (state.inflight.clone(), live)
    }
}

/// Sends `slot` to the first waiter still waiting, the `ahead` lane
/// first; the slot back when none is. Never drops a slot (the caller
/// holds the lock its drop takes).
fn hand_over(state: &mut State, mut slot: Slot) -> Option<Slot> {
    while let Some(waiter) = state
        .ahead
        .pop_front()
        .or_else(|| state.waiters.pop_front())
    {
        match waiter.send(slot) {
            Ok(()) => return None,
            Err(back) => slot = back,
        }
    }
    Some(slot)
}

impl Slot {
    /// The index of the server this slot is at.
    pub(crate) fn server(&self) -> usize {
        self.server
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.budget.release(self.server);
        }
    }
}

impl Queued {
    /// Waits for a slot until `deadline`; `None` once it passed. The wait
    /// is counted (`queued`, `queued_total`, `queue_wait_seconds_total`).
    pub(crate) async fn wait(mut self, deadline: Instant) -> Option<Slot> {
        // Counted out on drop too: a request whose client left mid-wait.
        let _waiting = Waiting::new(self.budget.stats.clone());
        match tokio::time::timeout_at(deadline, &mut self.rx).await {
            Ok(slot) => slot.ok(),
            // A slot sent as the clock ran out is still ours.
            Err(_) => self.rx.try_recv().ok(),
        }
    }
}

/// One request in the queue, for the figures: counted in when it starts
/// waiting, out (with the time it waited) however the wait ends.
struct Waiting {
    stats: Arc<UpstreamStats>,
    started: Instant,
}

impl Waiting {
    fn new(stats: Arc<UpstreamStats>) -> Waiting {
        stats.budget.queued.inc();
        stats.budget.queued_total.inc();
        Waiting {
            stats,
            started: Instant::now(),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.stats.budget.queued.dec();
        let waited = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.budget.queue_wait_micros.add(waited);
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
