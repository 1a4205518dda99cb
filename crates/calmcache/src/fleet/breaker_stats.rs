//! What the circuit breaker reports: its state, the rule that opened it
//! and its counters, for `/status` and `/metrics` (the rules themselves:
//! breaker.rs).

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

/// The rule that opened the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OpenReason {
    /// [`OPEN_AFTER`](super::breaker::OPEN_AFTER) calls in a row failed.
    Consecutive,
    /// Half of the last 2 s' calls failed.
    Ratio,
    /// Calls cost more than 3/4 of the deadline on average.
    Latency,
}

impl OpenReason {
    /// Every reason, for the `reason` label of `/metrics`.
    pub(crate) const ALL: [OpenReason; 3] = [
        OpenReason::Consecutive,
        OpenReason::Ratio,
        OpenReason::Latency,
    ];

    /// Its name: the `/status` value and the `/metrics` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpenReason::Consecutive => "consecutive",
            OpenReason::Ratio => "ratio",
            OpenReason::Latency => "latency",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// `index() + 1`, or 0 for none (the last reason, in an atomic).
    pub(super) fn code(reason: Option<OpenReason>) -> u8 {
        reason.map_or(0, |r| r as u8 + 1)
    }

    pub(super) fn from_code(code: u8) -> Option<OpenReason> {
        OpenReason::ALL
            .get(usize::from(code).checked_sub(1)?)
            .copied()
    }
}

/// The breaker's counters, for `/status` and `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct OpenedBy {
    /// Opened by [`OPEN_AFTER`](super::breaker::OPEN_AFTER) failures in a row.
    pub consecutive: u64,
    /// Opened by half of the last 2 s' calls failing.
    pub ratio: u64,
    /// Opened by the latency average.
    pub latency: u64,
}

impl OpenedBy {
    /// The count for `reason`.
    pub(crate) fn by(&self, reason: OpenReason) -> u64 {
        match reason {
            OpenReason::Consecutive => self.consecutive,
            OpenReason::Ratio => self.ratio,
            OpenReason::Latency => self.latency,
        }
    }

    /// Every opening.
    pub(crate) fn total(&self) -> u64 {
        self.consecutive + self.ratio + self.latency
    }
}

/// What the breaker has done, and what its latency rule sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BreakerStats {
    /// Times it opened, by reason.
    pub opened_by: OpenedBy,
    /// Times a probe closed it.
    pub closed: u64,
    /// Why it opened last (none: never).
    pub last_reason: Option<OpenReason>,
    /// The latency average since it last closed, in microseconds.
    pub latency_us: u64,
    /// How late this node's timers fire (average), in microseconds: past
    /// the gate the latency rule is silent.
    pub lag_us: u64,
}
