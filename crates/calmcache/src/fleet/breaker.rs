//! The circuit breaker in front of Redis: when calls fail, miss their
//! deadline or Redis answers too slowly it opens and the node stops
//! calling Redis at all, so a dead, hung or slow Redis adds no latency to
//! requests. Once open, it stays open for a pause (1 s, doubling to 30 s
//! while real-call probes fail); after the pause a PING goes to Redis
//! every [`PING_EVERY`] (250 ms, from link.rs' probe task, off the request
//! path), and once one answers well the next real call is the probe: its
//! answer closes the breaker (the pause back to 1 s). A Redis that was
//! down is in use again within about a quarter second of answering,
//! however long it was down: failed PINGs do not lengthen the pause.
//!
//! Three rules open it (FLEET.md §6), checked in this order; the first that
//! holds is the reason counted in `/status` and `/metrics`:
//! - **consecutive**: [`OPEN_AFTER`] (5) calls in a row failed or missed
//!   the deadline;
//! - **ratio**: at least half of at least [`RATIO_MIN_CALLS`] (20) calls in
//!   the last 2 s failed or missed it;
//! - **latency**: the moving average (EWMA, weight 1/8) of the
//!   **sentinel's** PING round trips is over 3/4 of `fleet.timeout`
//!   (37.5 ms at the 50 ms default), over at least [`LATENCY_MIN_SAMPLES`]
//!   (20, 2 s of PINGs) since it last closed; a PING past the deadline
//!   costs the deadline.
//!
//! **Redis is sick, or this box is busy?** The latency rule judges only
//! the sentinel (breaker_sentinel.rs): a PING every 100 ms from a thread
//! and a connection of its own, that sleeps between PINGs, so the kernel
//! runs it soon after Redis answers however busy the node's workers are,
//! and its PING queues behind none of the node's calls. A request-path
//! call's time is never a sample: it is Redis' round trip plus however
//! long the node's workers took to run the call's task again. Issue 30
//! measured why that matters: on a saturated 2-core machine (Redis, 3
//! nodes, the origin and the client) acquire, commit and pieces alike cost
//! 5-10 ms on average and far more in bursts while a PING from another
//! process took 0.6-1.8 ms on average (at most 6-13 ms), and the rule cut
//! each node out of the fleet 1-10 times a minute (its fills fetched
//! alone: 1.23 origin fetches per object per lifetime against a goal of
//! 1.05). The earlier guard, a timer on the workers whose lag over
//! `timeout / 10` silenced the rule, did not hold: the timers lagged
//! 1.1-1.8 ms on average. With the sentinel (its PINGs: 0.9-1.5 ms on
//! average there) the latency rule opened 0 times in the same runs, and
//! fetches per lifetime fell to 1.12 (bench/HISTORY.md `i31-sat-sentinel`).
//! A call that fails or misses its deadline still counts for the failure
//! rules whatever the reason: the request path went without Redis.
//!
//! A sentinel tick that starts later than `timeout / 10` (at least 2 ms;
//! 5 ms at the default) is not reported: then the sentinel's own thread
//! was starved, and its PING measured that.
//!
//! **Hysteresis**: after a latency trip the breaker closes only once Redis
//! is clearly faster than the threshold that opened it: [`CALM_PINGS`] (3)
//! sentinel PINGs in a row past the pause must each answer within 5/8 of
//! the deadline (31.25 ms at the default); then one real call answered in
//! time closes it (its time, again, is not judged). Without it, a Redis
//! whose calls cost about the threshold (36 ms against 37.5) opened and
//! closed the breaker 3 times in 10 s (issue 30): one probe under the
//! threshold closed it, twenty calls reopened it. Fed 36, 37, 38, 39 ms in
//! turn for 10 s (the test
//! `a_cost_sitting_at_the_latency_threshold_does_not_flap`), the breaker
//! of 1806289 opened 7 times and closed 6; this one opens once and stays
//! open. A cost between 5/8 and 3/4 of the deadline keeps whatever state
//! the breaker is in. Not 1/2: a distant Redis whose round trip is just
//! over half the deadline (200 ms against 390 ms, the fault test
//! `a_node_goes_back_to_a_slow_redis_after_its_breaker_opened`) would
//! never be let back after one slow spell. After a failure trip
//! (consecutive, ratio) the probe task's PINGs count, and one answered in
//! time is enough: a Redis back from the dead is back.
//!
//! The latency threshold scales with the deadline, so a user who raises
//! `timeout` for a distant Redis does not trip it. It is 3/4 of it, not
//! FLEET.md's 1/2: a Redis whose round trip is between half the deadline
//! and the deadline answers every call in time and still saves the origin
//! its fetches.
//!
//! Only calls let through while it was closed, and since it last changed,
//! count for the rules: a call made before it opened that answers while it
//! is open says nothing about Redis now, and does not close it (only the
//! probe does).
//!
//! Lock-light: `pass()` while closed is one atomic load; a call's result
//! takes one short, uncontended per-link lock (as before these rules), and
//! so does each sentinel PING (10 a second).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

pub(crate) use super::breaker_stats::{BreakerState, BreakerStats, OpenReason, OpenedBy};
use super::ops_stats::Lane;

/// Failed calls in a row that open the breaker.
pub(crate) const OPEN_AFTER: u32 = 5;
/// The ratio rule: at least this many calls in the window, and at least
/// half of them failed.
pub(crate) const RATIO_MIN_CALLS: u32 = 20;
/// The ratio rule's window (2 s) in buckets: the last 1.75 to 2 s.
const BUCKET: Duration = Duration::from_millis(250);
const BUCKETS: usize = 8;
/// Sentinel PINGs (since the breaker last closed or the node started)
/// before the latency rule may open it: 2 s of them.
pub(crate) const LATENCY_MIN_SAMPLES: u32 = 20;
/// A new sample weighs 1/2^this in the latency average.
const LATENCY_WEIGHT_SHIFT: u32 = 3;
/// The node's timer lag: a timer every tick; a sample above the average
/// raises it to that sample, one below moves it 1/8 of the way.
const LAG_TICK: Duration = Duration::from_millis(20);
const LAG_WEIGHT_SHIFT: u32 = 3;
/// The least lag of a sentinel tick that keeps its PING out of the average
/// (tokio's timers have 1 ms resolution: an idle thread's lag is up to
/// about 1 ms).
const LAG_GATE_MIN: Duration = Duration::from_millis(2);
/// The first pause once open; doubled per failed probe up to [`PAUSE_MAX`].
const PAUSE_MIN: Duration = Duration::from_secs(1);
const PAUSE_MAX: Duration = Duration::from_secs(30);
/// While open past its pause, a PING this often (link.rs' probe task).
pub(crate) const PING_EVERY: Duration = Duration::from_millis(250);
/// After a latency trip: PINGs in a row under 5/8 of the deadline before
/// the real-call probe may go (about 3/4 s of a Redis clearly fast again).
pub(crate) const CALM_PINGS: u32 = 3;

/// How a PING went (the probe task's, or the sentinel's).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ping {
    /// Answered within the deadline, after this long.
    Answered(Duration),
    /// No answer within the deadline.
    TimedOut,
    /// An error or a closed connection.
    Failed,
}

/// A PING the breaker asked for; report how it went with
/// [`Breaker::pinged`].
#[must_use]
pub(crate) struct PingPass {
    /// The open phase it was asked in: an answer after a change is not
    /// counted.
    phase: u64,
}

/// A call the breaker let through; report how it went.
#[must_use]
pub(crate) struct Pass {
    probe: bool,
    /// The breaker's phase when it was let through: results from an
    /// earlier phase are not counted.
    phase: u64,
}

/// Calls in one bucket of the ratio rule's window.
#[derive(Clone, Copy, Default)]
struct Bucket {
    /// Which [`BUCKET`]-long slice of time since the breaker was made.
    slot: u64,
    calls: u32,
    failed: u32,
}

struct State {
    /// Failed calls in a row.
    failures: u32,
    /// The last 2 s of calls, a bucket per 250 ms.
    window: [Bucket; BUCKETS],
    /// The latency average, in microseconds, over `samples` calls.
    latency_us: u64,
    samples: u32,
    pause: Duration,
    open_until: Option<Instant>,
    /// PINGs in a row answered well enough to close it (after a latency
    /// trip: under 5/8 of the deadline) since the pause ended.
    good_pings: u32,
    probing: bool,
    /// Why it is open (none while closed).
    reason: Option<OpenReason>,
}

impl State {
    fn new() -> State {
        State {
            failures: 0,
            window: [Bucket::default(); BUCKETS],
            latency_us: 0,
            samples: 0,
            pause: PAUSE_MIN,
            open_until: None,
            good_pings: 0,
            probing: false,
            reason: None,
        }
    }

    /// Counts one call in the window at `slot`.
    fn record(&mut self, slot: u64, failed: bool) {
        let bucket = &mut self.window[slot_index(slot)];
        if bucket.slot != slot {
            *bucket = Bucket {
                slot,
                ..Bucket::default()
            };
        }
        bucket.calls = bucket.calls.saturating_add(1);
        bucket.failed = bucket.failed.saturating_add(u32::from(failed));
    }

    /// At least [`RATIO_MIN_CALLS`] calls in the window up to `slot`, half
    /// of them failed.
    fn ratio_exceeded(&self, slot: u64) -> bool {
        let (mut calls, mut failed) = (0u32, 0u32);
        for b in &self.window {
            if b.slot <= slot && slot - b.slot < BUCKETS as u64 {
                calls = calls.saturating_add(b.calls);
                failed = failed.saturating_add(b.failed);
            }
        }
        calls >= RATIO_MIN_CALLS && u64::from(failed) * 2 >= u64::from(calls)
    }

    /// One sentinel PING's round trip in the latency average.
    fn sample(&mut self, took: Duration) {
        let us = micros(took);
        self.latency_us = if self.samples == 0 {
            us
        } else {
            ewma(self.latency_us, us, LATENCY_WEIGHT_SHIFT)
        };
        self.samples = self.samples.saturating_add(1);
    }
}

/// A phase of the closed breaker (even).
fn is_closed(phase: u64) -> bool {
    phase.is_multiple_of(2)
}

fn slot_index(slot: u64) -> usize {
    // BUCKETS is small: the remainder fits.
    usize::try_from(slot % BUCKETS as u64).unwrap_or(0)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `average` moved toward `sample` by 1/2^`shift` of the difference.
fn ewma(average: u64, sample: u64, shift: u32) -> u64 {
    if sample >= average {
        average.saturating_add((sample - average) >> shift)
    } else {
        average - ((average - sample) >> shift)
    }
}

/// One breaker per Redis link.
pub(crate) struct Breaker {
    /// The connection it guards (what its warnings say).
    lane: Lane,
    /// Even while closed, odd while open or half-open; one more at every
    /// change. The fast path reads only this.
    phase: AtomicU64,
    state: Mutex<State>,
    /// Time zero of the ratio window's slots.
    born: Instant,
    /// The latency rule's threshold: 3/4 of the deadline.
    slow: Duration,
    /// After a latency trip, PINGs and the probe must answer within this
    /// to close it: 5/8 of the deadline (the hysteresis).
    calm: Duration,
    /// The deadline: what a sentinel PING that missed it cost.
    deadline: Duration,
    /// A sentinel tick that fires later than this is not sampled (its own
    /// thread was starved).
    lag_gate: Duration,
    /// The node's timer lag (average, microseconds), kept by
    /// [`Breaker::watch_lag`]: how busy the node is, shown in `/status`.
    lag_us: Arc<AtomicU64>,
    opened: [AtomicU64; OpenReason::ALL.len()],
    closed: AtomicU64,
    last_reason: AtomicU8,
}

impl Breaker {
    /// A closed breaker for control calls with deadline `timeout`.
    #[cfg(test)]
    pub(crate) fn new(timeout: Duration) -> Breaker {
        Breaker::for_lane(timeout, Lane::Control)
    }

    /// A closed breaker for calls on `lane` with deadline `timeout`.
    pub(crate) fn for_lane(timeout: Duration, lane: Lane) -> Breaker {
        Breaker {
            lane,
            phase: AtomicU64::new(0),
            state: Mutex::new(State::new()),
            born: Instant::now(),
            slow: timeout * 3 / 4,
            calm: timeout * 5 / 8,
            deadline: timeout,
            lag_gate: (timeout / 10).max(LAG_GATE_MIN),
            lag_us: Arc::new(AtomicU64::new(0)),
            opened: Default::default(),
            closed: AtomicU64::new(0),
            last_reason: AtomicU8::new(0),
        }
    }

    /// Starts the task that measures how late this node's timers fire on
    /// its workers (it ends when the breaker is dropped): shown in
    /// `/status` and `/metrics`, it tells a busy node; it judges nothing.
    pub(crate) fn watch_lag(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.lag_us);
        tokio::spawn(async move {
            loop {
                let asked = Instant::now();
                tokio::time::sleep(LAG_TICK).await;
                let late = micros(asked.elapsed().saturating_sub(LAG_TICK));
                let Some(lag) = weak.upgrade() else {
                    return;
                };
                // Up at once, down slowly: a node that lagged a moment ago
                // may lag again. The only writer: no update is lost.
                let average = ewma(lag.load(Ordering::Relaxed), late, LAG_WEIGHT_SHIFT);
                lag.store(average.max(late), Ordering::Relaxed);
            }
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ratio window's slot now.
    fn slot(&self) -> u64 {
        let since = self.born.elapsed().as_millis() / BUCKET.as_millis();
        u64::try_from(since).unwrap_or(u64::MAX)
    }

    /// May a call go to Redis now? Closed: yes (one atomic load). Open: no,
    /// until the pause has passed; then one probe.
    pub(crate) fn pass(&self) -> Option<Pass> {
        let phase = self.phase.load(Ordering::Acquire);
        if is_closed(phase) {
            return Some(Pass {
                probe: false,
                phase,
            });
        }
        let mut state = self.state();
        // The phase changes only under the lock: read it again there.
        let phase = self.phase.load(Ordering::Acquire);
        if is_closed(phase) {
            return Some(Pass {
                probe: false,
                phase,
            });
        }
        if self.ready(&state) && !state.probing {
            state.probing = true;
            return Some(Pass { probe: true, phase });
        }
        None
    }

    /// The pause has passed.
    fn paused_enough(state: &State) -> bool {
        state.open_until.is_some_and(|t| Instant::now() >= t)
    }

    /// Open, the pause passed and enough PINGs answered well: the next
    /// real call may probe.
    fn ready(&self, state: &State) -> bool {
        Self::paused_enough(state) && state.good_pings >= self.pings_needed(state)
    }

    /// PINGs answered well in a row before the real-call probe.
    fn pings_needed(&self, state: &State) -> u32 {
        if state.reason == Some(OpenReason::Latency) {
            CALM_PINGS
        } else {
            1
        }
    }

    /// Should the probe task PING now? Open on a failure rule, past the
    /// pause, and not yet ready for the real-call probe. After a latency
    /// trip the sentinel's PINGs count instead ([`Breaker::sentinel`]): the
    /// probe task runs on the node's workers, whose delays are not Redis'.
    /// One atomic load while closed.
    pub(crate) fn wants_ping(&self) -> Option<PingPass> {
        if is_closed(self.phase.load(Ordering::Acquire)) {
            return None;
        }
        let state = self.state();
        let phase = self.phase.load(Ordering::Acquire);
        let wanted = !is_closed(phase)
            && state.reason != Some(OpenReason::Latency)
            && Self::paused_enough(&state)
            && !self.ready(&state);
        wanted.then_some(PingPass { phase })
    }

    /// How the PING asked for went: a good one counts toward the real-call
    /// probe, a failed one starts the count again. It never lengthens the
    /// pause: a dead Redis is PINGed every [`PING_EVERY`] however long it
    /// stays dead, so it is used again soon after it answers.
    pub(crate) fn pinged(&self, ping: PingPass, result: Ping) {
        let mut state = self.state();
        if ping.phase != self.phase.load(Ordering::Acquire) {
            return;
        }
        self.count_ping(&mut state, result);
    }

    /// A PING toward the real-call probe: good if answered (after a latency
    /// trip: within 5/8 of the deadline, the hysteresis), or the count
    /// starts again.
    fn count_ping(&self, state: &mut State, result: Ping) {
        let good = match result {
            Ping::Answered(took) => state.reason != Some(OpenReason::Latency) || took <= self.calm,
            Ping::TimedOut | Ping::Failed => false,
        };
        state.good_pings = if good {
            state.good_pings.saturating_add(1)
        } else {
            0
        };
    }

    /// A tick of the sentinel starts later than this: its thread was
    /// starved, and its PING would measure that, not Redis.
    pub(crate) fn lag_gate(&self) -> Duration {
        self.lag_gate
    }

    /// The sentinel's PING (breaker_sentinel.rs: its own thread and
    /// connection, so its round trip is Redis' and the link's, not this
    /// node's workers'). Closed: a sample of the latency rule (a missed
    /// deadline costs the deadline; an error is no sample: the failure
    /// rules see the real calls fail). Open after a latency trip and past
    /// the pause: a PING toward the real-call probe.
    pub(crate) fn sentinel(&self, result: Ping) {
        let mut state = self.state();
        if is_closed(self.phase.load(Ordering::Acquire)) {
            let took = match result {
                Ping::Answered(took) => took,
                Ping::TimedOut => self.deadline,
                Ping::Failed => return,
            };
            state.sample(took);
            if self.too_slow(&state) {
                self.open(&mut state, OpenReason::Latency);
            }
            return;
        }
        if state.reason == Some(OpenReason::Latency)
            && Self::paused_enough(&state)
            && !self.ready(&state)
        {
            self.count_ping(&mut state, result);
        }
    }

    /// The call answered in time. Its time is not judged: a request-path
    /// call's time is this node's business as much as Redis' (the sentinel
    /// judges latency), so an answer in time is a success however long it
    /// took, the probe's included.
    pub(crate) fn success(&self, pass: Pass) {
        let mut state = self.state();
        if pass.probe {
            self.close(&mut state);
            return;
        }
        if pass.phase != self.phase.load(Ordering::Acquire) {
            return;
        }
        state.failures = 0;
        state.record(self.slot(), false);
    }

    /// The call failed or missed its deadline (both weigh alike: a call
    /// the request path went without). True when this opened the breaker
    /// (or kept it open after a probe), so the caller may rebuild its
    /// connection.
    pub(crate) fn failure(&self, pass: Pass) -> bool {
        let mut state = self.state();
        if pass.probe {
            self.probe_failed(&mut state);
            return true;
        }
        if pass.phase != self.phase.load(Ordering::Acquire) {
            return false;
        }
        state.failures = state.failures.saturating_add(1);
        let slot = self.slot();
        state.record(slot, true);
        let reason = if state.failures >= OPEN_AFTER {
            OpenReason::Consecutive
        } else if state.ratio_exceeded(slot) {
            OpenReason::Ratio
        } else {
            return false;
        };
        self.open(&mut state, reason);
        true
    }

    /// The call's caller gave up on it before it ended: it says nothing
    /// about Redis, but a probe must not stay out for good (the next call
    /// probes instead).
    pub(crate) fn abandon(&self, pass: Pass) {
        if pass.probe {
            self.state().probing = false;
        }
    }

    /// The latency rule holds: enough sentinel samples since it last
    /// closed, and an average over the threshold.
    fn too_slow(&self, state: &State) -> bool {
        state.samples >= LATENCY_MIN_SAMPLES && state.latency_us > micros(self.slow)
    }

    fn open(&self, state: &mut State, reason: OpenReason) {
        state.pause = PAUSE_MIN;
        state.open_until = Some(Instant::now() + state.pause);
        state.good_pings = 0;
        state.probing = false;
        state.reason = Some(reason);
        self.phase.fetch_add(1, Ordering::AcqRel);
        self.opened[reason.index()].fetch_add(1, Ordering::Relaxed);
        self.last_reason
            .store(OpenReason::code(Some(reason)), Ordering::Relaxed);
        match self.lane {
            Lane::Control => tracing::warn!(
                reason = reason.as_str(),
                failures_in_a_row = state.failures,
                latency_us = state.latency_us,
                "redis failing: fleet mode paused, the node goes on alone"
            ),
            Lane::Bulk => tracing::warn!(
                reason = reason.as_str(),
                failures_in_a_row = state.failures,
                "redis failing for large values: they stay local, small ones are still shared"
            ),
        }
    }

    fn probe_failed(&self, state: &mut State) {
        state.probing = false;
        state.good_pings = 0;
        state.pause = (state.pause * 2).min(PAUSE_MAX);
        state.open_until = Some(Instant::now() + state.pause);
    }

    fn close(&self, state: &mut State) {
        *state = State::new();
        self.phase.fetch_add(1, Ordering::AcqRel);
        self.closed.fetch_add(1, Ordering::Relaxed);
        tracing::info!("redis is answering again: fleet mode resumes");
    }

    /// Closed: calls go through (one atomic load).
    pub(crate) fn is_closed(&self) -> bool {
        is_closed(self.phase.load(Ordering::Acquire))
    }

    /// Closed, open or half-open.
    pub(crate) fn current(&self) -> BreakerState {
        if is_closed(self.phase.load(Ordering::Acquire)) {
            return BreakerState::Closed;
        }
        if self.state().probing {
            BreakerState::HalfOpen
        } else {
            BreakerState::Open
        }
    }

    /// Its counters and what the latency rule sees.
    pub(crate) fn stats(&self) -> BreakerStats {
        let n = |r: OpenReason| self.opened[r.index()].load(Ordering::Relaxed);
        BreakerStats {
            opened_by: OpenedBy {
                consecutive: n(OpenReason::Consecutive),
                ratio: n(OpenReason::Ratio),
                latency: n(OpenReason::Latency),
            },
            closed: self.closed.load(Ordering::Relaxed),
            last_reason: OpenReason::from_code(self.last_reason.load(Ordering::Relaxed)),
            latency_us: self.state().latency_us,
            lag_us: self.lag_us.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
