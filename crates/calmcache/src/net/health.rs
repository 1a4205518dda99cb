//! Upstream server health: whether a server may be sent requests, from the
//! outcomes of real requests (passive, NGINX's `max_fails` / `fail_timeout`)
//! and of background checks (active, NGINX Plus's `health_check`).
//!
//! ```text
//!          max_fails failures within fail_timeout
//!   Up ───────────────────────────────────────────> Down (until = now + fail_timeout)
//!   ^                                                 │ fail_timeout passed:
//!   │ the trial got a response head                   │ the next request is the one trial
//!   └────────────────────────────── Trial <───────────┘ (others still skip the server)
//!                                     │ the trial failed
//!                                     └───────────────> Down (until = now + fail_timeout)
//! ```
//!
//! What counts as a failure: a failed connect (refused, `connect_timeout`,
//! a TLS handshake that failed) always; a failed exchange (no head within
//! `read_timeout`, closed before the head) only when [`crate::net::blame`]
//! finds the server, not one URL, at fault (several paths failing while
//! the server answers nothing), so one client cannot take a live origin out.
//! A trial that fails either way keeps the server down.
//!
//! An active check that fails `fails` times in a row marks the server down
//! on its own account until `passes` checks in a row succeed; a server is
//! used only when neither account has it down.
//!
//! This module owns the state machine and the check loop; it must not
//! choose servers (`upstream.rs` does, round robin over the ones
//! [`ServerHealth::admit`] lets through) or send client requests. The
//! request path reads one atomic per server while the server is up; the
//! per-server mutex is taken only on a failure, while the server is down,
//! and by the checker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::watch;

use crate::config::HealthCheckConfig;
use crate::net::blame::{Blame, FailedPaths, PathKey, UrlBlame};
use crate::telemetry::counter::Counter;

/// The health settings of one upstream, shared by its servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Failures within `fail_timeout` that mark a server down; 0: never.
    pub max_fails: u32,
    /// The counting window, and how long a down server is skipped.
    pub fail_timeout: Duration,
    /// Response statuses that count as failures (none by default).
    pub fail_statuses: Vec<u16>,
    /// Active checks, if configured.
    pub check: Option<HealthCheckConfig>,
}

/// One server's health, kept across reloads while its settings are unchanged.
#[derive(Debug)]
pub(crate) struct ServerHealth {
    /// `host:port`, as configured.
    pub server: String,
    settings: Settings,
    /// Neither passively nor actively down: the request path's only read
    /// while the server is healthy.
    available: AtomicBool,
    state: Mutex<State>,
    /// Failed requests charged to the server since start.
    fails_total: Counter,
    /// Failed exchanges blamed on their URL, not the server, since start.
    url_fails_total: Counter,
    /// When the server last answered, and the judge of failed exchanges.
    blame: UrlBlame,
    /// Active checks sent, and those that failed.
    checks: Counter,
    checks_failed: Counter,
}

#[derive(Debug, Default)]
struct State {
    /// Failures counted in the window that began at `window_start`.
    fails: u32,
    window_start: Option<Instant>,
    /// Passively down: skipped until `until`, then one trial.
    down: Option<Down>,
    /// The one trial request is in flight.
    trial: bool,
    /// Paths whose exchange failed within `fail_timeout` (for blame).
    failed_paths: FailedPaths,
    last_failure: Option<String>,
    /// Actively down (since when), and the run of check results that goes
    /// against the current account (fails while up, passes while down).
    check_down: Option<SystemTime>,
    check_streak: u32,
    last_check: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Down {
    until: Instant,
    since: SystemTime,
}

/// What [`ServerHealth::admit`] allows one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The server is up: send.
    Normal,
    /// The server was down and its `fail_timeout` passed: this request is
    /// its one trial.
    Trial,
    /// Down (or another request is its trial): choose another server.
    Skip,
}

/// What one exchange says of its server's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A response head came (any status not in `fail_statuses`).
    Answered,
    /// A response head with a status in `fail_statuses`: relayed, but a failure.
    FailingStatus(String),
    /// Failed to connect (why): counts against the server.
    Failed(String),
    /// The exchange failed (why) after connecting: no head within
    /// `read_timeout`, or closed before it. Blamed on the URL `path` unless
    /// [`crate::net::blame`] finds the server at fault.
    UrlFailed {
        /// `ReadTimeout: ...` or `Broken: ...`.
        why: String,
        /// The request's host and path.
        path: PathKey,
    },
    /// Failed, but not surely the server's doing (the client's body, a
    /// malformed head): neither a success nor a failure.
    Neutral,
}

impl Verdict {
    /// True for [`Verdict::Failed`] and [`Verdict::UrlFailed`]: no
    /// response, and not the client's doing (worth another try).
    pub(crate) fn counts(&self) -> bool {
        matches!(self, Verdict::Failed(_) | Verdict::UrlFailed { .. })
    }
}

/// A request on its way to one server: report how it went with
/// [`Attempt::report`]; dropped without it (the client went away), a trial
/// lets the next request try.
#[derive(Debug)]
pub(crate) struct Attempt {
    health: Arc<ServerHealth>,
    admit: Admit,
    reported: bool,
}

impl Attempt {
    /// Records how the exchange went.
    pub(crate) fn report(mut self, verdict: Verdict) {
        match verdict {
            Verdict::Answered => {
                self.reported = true;
                self.health.blame.answered(Instant::now());
                if self.admit == Admit::Trial {
                    self.health.trial_succeeded();
                }
            }
            Verdict::Failed(why) => {
                self.reported = true;
                self.health.failed(self.admit, &why, Instant::now());
            }
            // A status in fail_statuses counts against the server, but it is
            // an answer: the server is alive, so other URLs' failed exchanges
            // stay theirs (blame.rs).
            Verdict::FailingStatus(why) => {
                self.reported = true;
                let now = Instant::now();
                self.health.blame.answered(now);
                self.health.failed(self.admit, &why, now);
            }
            Verdict::UrlFailed { why, path } => {
                self.reported = true;
                self.health
                    .url_failed(self.admit, &why, path, Instant::now());
            }
            // Drop releases a trial without a verdict.
            Verdict::Neutral => {}
        }
    }

    /// Whether the server was up, or this is its trial.
    pub(crate) fn admit(&self) -> Admit {
        self.admit
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.reported && self.admit == Admit::Trial {
            self.health.lock().trial = false;
        }
    }
}

/// Why a server is not used, for the all-down error and the status page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Requests go to it.
    Up,
    /// Skipped after failed requests until its `fail_timeout` passes.
    Down,
    /// Its `fail_timeout` passed and one trial request is in flight.
    Trial,
    /// Skipped because its active health check fails.
    CheckFailed,
}

impl ServerState {
    /// The label for metrics and the dashboard.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Up => "up",
            ServerState::Down => "down",
            ServerState::Trial => "trial",
            ServerState::CheckFailed => "check_failed",
        }
    }
}

/// One server in `/status`.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    /// `host:port`.
    pub server: String,
    /// `up`, `down`, `trial` or `check_failed`.
    pub state: ServerState,
    /// Failures counted in the current `fail_timeout` window.
    pub fails: u32,
    /// Failed requests charged to the server since start (or since its
    /// settings changed).
    pub fails_total: u64,
    /// Failed exchanges (read timeout, closed before the head) blamed on
    /// their URL rather than the server, since start.
    pub url_fails_total: u64,
    /// The last failure, e.g. `ConnectFailed: connection refused`.
    pub last_failure: Option<String>,
    /// Seconds since the server went down (passively or actively).
    pub down_for_seconds: Option<f64>,
    /// Seconds until the trial request may go (passively down only; 0:
    /// the next request to choose it is the trial).
    pub retry_in_seconds: Option<f64>,
    /// Active checks sent, if configured.
    pub checks: Option<u64>,
    /// Active checks failed.
    pub checks_failed: Option<u64>,
    /// The last check's outcome, e.g. `200 OK` or `ReadTimeout`.
    pub last_check: Option<String>,
}

impl ServerHealth {
    /// A server that starts up.
    pub(crate) fn new(server: String, settings: Settings) -> Arc<Self> {
        Arc::new(ServerHealth {
            server,
            settings,
            available: AtomicBool::new(true),
            state: Mutex::new(State::default()),
            fails_total: Counter::default(),
            url_fails_total: Counter::default(),
            blame: UrlBlame::new(),
            checks: Counter::default(),
            checks_failed: Counter::default(),
        })
    }

    /// The settings this state was built with (a reload keeps the state
    /// only when they are unchanged).
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// True when `status` counts as a failure (`fail_statuses`).
    pub(crate) fn fails_on(&self, status: http::StatusCode) -> bool {
        !self.settings.fail_statuses.is_empty()
            && self.settings.fail_statuses.contains(&status.as_u16())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding it; a poisoned state is still valid.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up on both accounts (one atomic load): weighted round robin counts
    /// only these.
    pub(crate) fn is_up(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    /// Whether a request may go to this server now, as an [`Attempt`] to
    /// report on, or `None` to choose another.
    pub(crate) fn admit(self: &Arc<Self>, now: Instant) -> Option<Attempt> {
        let admit = if self.available.load(Ordering::Acquire) {
            Admit::Normal
        } else {
            self.lock().admit(now)
        };
        (admit != Admit::Skip).then(|| Attempt {
            health: self.clone(),
            admit,
            reported: false,
        })
    }

    fn trial_succeeded(&self) {
        tracing::info!(server = %self.server, "trial request answered: server up");
        let mut state = self.lock();
        state.trial = false;
        state.down = None;
        state.fails = 0;
        state.window_start = None;
        self.publish(&state);
    }

    fn failed(&self, admit: Admit, reason: &str, now: Instant) {
        let mut state = self.lock();
        self.charge(&mut state, admit, reason, now);
    }

    /// A failed exchange on `path`: the URL's unless it is a trial (the
    /// server was found dead already) or blame finds the server at fault.
    fn url_failed(&self, admit: Admit, reason: &str, path: PathKey, now: Instant) {
        let mut state = self.lock();
        let window = self.settings.fail_timeout;
        let blame = match admit {
            Admit::Trial => Blame::Server,
            _ => self.blame.judge(&mut state.failed_paths, path, now, window),
        };
        match blame {
            Blame::Server => self.charge(&mut state, admit, reason, now),
            Blame::Url => {
                self.url_fails_total.inc();
                tracing::debug!(server = %self.server, reason, "failed exchange blamed on its URL");
            }
        }
    }

    /// One failure against the server: down after `max_fails` within
    /// `fail_timeout`, or again after a failed trial.
    fn charge(&self, state: &mut State, admit: Admit, reason: &str, now: Instant) {
        self.fails_total.inc();
        state.last_failure = Some(reason.to_owned());
        let s = &self.settings;
        if s.max_fails == 0 {
            return;
        }
        if admit == Admit::Trial {
            tracing::info!(server = %self.server, reason, "trial request failed: server stays down");
            state.trial = false;
            state.fails = state.fails.saturating_add(1);
            let since = state.down.map_or_else(SystemTime::now, |d| d.since);
            state.down = Some(Down {
                until: now + s.fail_timeout,
                since,
            });
        } else if state.down.is_none() {
            // A request begun before the server went down adds nothing.
            let expired = match state.window_start {
                Some(w) => now.saturating_duration_since(w) >= s.fail_timeout,
                None => true,
            };
            if expired {
                state.window_start = Some(now);
                state.fails = 0;
            }
            state.fails = state.fails.saturating_add(1);
            if state.fails >= s.max_fails {
                tracing::warn!(
                    server = %self.server,
                    fails = state.fails,
                    reason,
                    "upstream server down for fail_timeout {:?}",
                    s.fail_timeout
                );
                state.down = Some(Down {
                    until: now + s.fail_timeout,
                    since: SystemTime::now(),
                });
            }
        }
        self.publish(state);
    }

    /// Records one active check: `Ok(outcome)` passed, `Err(outcome)` failed.
    pub(crate) fn checked(&self, result: Result<String, String>) {
        self.checks.inc();
        let Some(check) = &self.settings.check else {
            return;
        };
        let mut state = self.lock();
        let passed = result.is_ok();
        if !passed {
            self.checks_failed.inc();
        }
        let outcome = result.unwrap_or_else(|e| e);
        // A result that agrees with the current account ends any run against it.
        let against = passed == state.check_down.is_some();
        state.check_streak = if against { state.check_streak + 1 } else { 0 };
        if passed && state.check_streak >= check.passes {
            tracing::info!(server = %self.server, outcome, "health check passes: server up");
            state.check_down = None;
            state.check_streak = 0;
        } else if !passed && state.check_streak >= check.fails {
            tracing::warn!(server = %self.server, outcome, "health check fails: server down");
            state.check_down = Some(SystemTime::now());
            state.check_streak = 0;
            state.last_failure = Some(format!("health check: {outcome}"));
        }
        state.last_check = Some(outcome);
        self.publish(&state);
    }

    fn publish(&self, state: &State) {
        let available = state.down.is_none() && state.check_down.is_none();
        self.available.store(available, Ordering::Release);
    }

    /// Why the server is not used now (`None`: it is up), for the
    /// all-down error: `127.0.0.1:8081: failed 3 times, retry in 7s (last:
    /// ConnectFailed: connection refused)`.
    pub(crate) fn why_down(&self, now: Instant) -> Option<String> {
        if self.available.load(Ordering::Acquire) {
            return None;
        }
        let state = self.lock();
        let last = state.last_failure.as_deref().unwrap_or("unknown");
        if state.check_down.is_some() {
            let path = self.settings.check.as_ref().map_or("", |c| c.path.as_str());
            let outcome = state.last_check.as_deref().unwrap_or("unknown");
            let why = format!(
                "{}: failing health check GET {path} ({outcome})",
                self.server
            );
            return Some(why);
        }
        let down = state.down?;
        let retry = down.until.saturating_duration_since(now);
        let times = if state.fails == 1 { "time" } else { "times" };
        let when = if state.trial {
            "a trial request is in flight".to_owned()
        } else {
            format!("retry in {}", round_up(retry))
        };
        Some(format!(
            "{}: failed {} {times}, {when} (last: {last})",
            self.server, state.fails
        ))
    }

    /// This server for `/status`.
    pub(crate) fn status(&self, now: Instant) -> ServerStatus {
        let state = self.lock();
        let wall = SystemTime::now();
        let since = |t: SystemTime| wall.duration_since(t).unwrap_or_default().as_secs_f64();
        let server_state = if state.check_down.is_some() {
            ServerState::CheckFailed
        } else if state.trial {
            ServerState::Trial
        } else if state.down.is_some() {
            ServerState::Down
        } else {
            ServerState::Up
        };
        let down_since = match (state.down, state.check_down) {
            (Some(d), Some(c)) => Some(d.since.min(c)),
            (Some(d), None) => Some(d.since),
            (None, c) => c,
        };
        let active = self.settings.check.is_some();
        ServerStatus {
            server: self.server.clone(),
            state: server_state,
            fails: state.fails,
            fails_total: self.fails_total.get(),
            url_fails_total: self.url_fails_total.get(),
            last_failure: state.last_failure.clone(),
            down_for_seconds: down_since.map(since),
            retry_in_seconds: state
                .down
                .map(|d| d.until.saturating_duration_since(now).as_secs_f64()),
            checks: active.then(|| self.checks.get()),
            checks_failed: active.then(|| self.checks_failed.get()),
            last_check: state.last_check.clone(),
        }
    }
}

impl State {
    fn admit(&mut self, now: Instant) -> Admit {
        if self.check_down.is_some() {
            return Admit::Skip;
        }
        match self.down {
            None => Admit::Normal,
            Some(down) if now < down.until || self.trial => Admit::Skip,
            Some(_) => {
                self.trial = true;
                Admit::Trial
            }
        }
    }
}

/// `7s` for 6.2 s: the wait a client is told never undershoots.
fn round_up(d: Duration) -> String {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    format!("{secs}s")
}

/// Runs `check` for `server` every `interval` until `stop` turns true.
/// `probe` sends one check and says how it went.
pub(crate) async fn check_loop<F, Fut>(
    server: Arc<ServerHealth>,
    mut stop: watch::Receiver<bool>,
    probe: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    let Some(interval) = server.settings.check.as_ref().map(|c| c.interval) else {
        return;
    };
    loop {
        let result = tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            result = probe() => result,
        };
        server.checked(result);
        tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
