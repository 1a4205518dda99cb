//! The health state machine with explicit clocks: NGINX's `max_fails` within
//! `fail_timeout`, one trial after it, active checks' `fails` / `passes`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

const FT: Duration = Duration::from_secs(10);

fn server(max_fails: u32, check: Option<(u32, u32)>) -> Arc<ServerHealth> {
    let check = check.map(|(fails, passes)| HealthCheckConfig {
        path: "/healthz".into(),
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(5),
        fails,
        passes,
    });
    let settings = Settings {
        max_fails,
        fail_timeout: FT,
        fail_statuses: Vec::new(),
        check,
    };
    ServerHealth::new("127.0.0.1:1".into(), settings)
}

fn fail(s: &Arc<ServerHealth>, now: Instant) {
    let attempt = s.admit(now).expect("admitted");
    s.failed(attempt.admit, "ConnectFailed: refused", now);
    std::mem::forget(attempt);
}

#[test]
fn one_failure_marks_down_with_the_defaults_then_one_trial_after_fail_timeout() {
    let s = server(1, None);
    let t0 = Instant::now();
    fail(&s, t0);
    assert!(s.admit(t0).is_none(), "down right after the failure");
    assert!(s.admit(t0 + FT - Duration::from_millis(1)).is_none());
    let trial = s.admit(t0 + FT).expect("the trial");
    assert_eq!(trial.admit, Admit::Trial);
    assert!(s.admit(t0 + FT).is_none(), "one trial at a time");
    assert_eq!(s.status(t0 + FT).state, ServerState::Trial);
    trial.report(Verdict::Answered);
    assert_eq!(s.admit(t0 + FT).map(|a| a.admit), Some(Admit::Normal));
    assert_eq!(s.status(t0 + FT).state, ServerState::Up);
}

#[test]
fn a_failed_trial_is_down_for_another_fail_timeout() {
    let s = server(1, None);
    let t0 = Instant::now();
    fail(&s, t0);
    let trial = s.admit(t0 + FT).expect("the trial");
    s.failed(trial.admit, "ReadTimeout", t0 + FT);
    std::mem::forget(trial);
    assert!(s.admit(t0 + FT + FT / 2).is_none());
    assert!(s.admit(t0 + FT * 2).is_some());
    let why = s.why_down(t0 + FT + FT / 2).expect("down");
    assert!(why.contains("failed 2 times"), "{why}");
    assert!(why.contains("retry in 5s"), "{why}");
    assert!(why.contains("ReadTimeout"), "{why}");
}

#[test]
fn a_cancelled_trial_lets_the_next_request_try() {
    let s = server(1, None);
    let t0 = Instant::now();
    fail(&s, t0);
    drop(s.admit(t0 + FT).expect("the trial"));
    assert_eq!(s.admit(t0 + FT).map(|a| a.admit), Some(Admit::Trial));
}

#[test]
fn max_fails_counts_within_the_window_only() {
    let s = server(3, None);
    let t0 = Instant::now();
    fail(&s, t0);
    fail(&s, t0 + Duration::from_secs(1));
    // The window of the first failure ended: this one starts a new count.
    fail(&s, t0 + FT);
    assert!(s.admit(t0 + FT).is_some());
    fail(&s, t0 + FT + Duration::from_secs(1));
    fail(&s, t0 + FT + Duration::from_secs(2));
    assert!(s.admit(t0 + FT + Duration::from_secs(2)).is_none());
}

#[test]
fn max_fails_zero_never_marks_down_but_counts() {
    let s = server(0, None);
    let t0 = Instant::now();
    for i in 0..5 {
        fail(&s, t0 + Duration::from_millis(i));
    }
    assert!(s.admit(t0).is_some());
    let status = s.status(t0);
    assert_eq!((status.state, status.fails_total), (ServerState::Up, 5));
}

#[test]
fn a_request_begun_before_the_server_went_down_does_not_extend_it() {
    let s = server(1, None);
    let t0 = Instant::now();
    let early = s.admit(t0).expect("up");
    fail(&s, t0);
    s.failed(early.admit, "late", t0 + FT / 2);
    std::mem::forget(early);
    assert!(
        s.admit(t0 + FT).is_some(),
        "still down until t0 + fail_timeout only"
    );
}

#[test]
fn active_checks_mark_down_after_fails_and_up_after_passes() {
    let s = server(1, Some((2, 2)));
    let t0 = Instant::now();
    s.checked(Err("503 Service Unavailable".into()));
    assert!(s.admit(t0).is_some(), "one failed check of two");
    s.checked(Err("503 Service Unavailable".into()));
    assert!(s.admit(t0).is_none());
    assert_eq!(s.status(t0).state, ServerState::CheckFailed);
    let why = s.why_down(t0).expect("down");
    assert!(why.contains("failing health check GET /healthz"), "{why}");
    s.checked(Ok("200 OK".into()));
    s.checked(Err("503 Service Unavailable".into()));
    s.checked(Ok("200 OK".into()));
    assert!(s.admit(t0).is_none(), "passes must be in a row");
    s.checked(Ok("200 OK".into()));
    assert!(s.admit(t0).is_some());
    let status = s.status(t0);
    assert_eq!((status.checks, status.checks_failed), (Some(6), Some(3)));
}

fn url_fail(s: &Arc<ServerHealth>, path: &str, now: Instant) {
    let attempt = s.admit(now).expect("admitted");
    let key = crate::net::blame::PathKey::new(b"h", path);
    s.url_failed(attempt.admit, "ReadTimeout", key, now);
    std::mem::forget(attempt);
}

/// The bug: with the defaults, one read timeout or one connection closed
/// before the head marked the only server down, and every URL got 502 for
/// fail_timeout. One URL failing, however often, is that URL's failure.
#[test]
fn one_url_failing_again_and_again_never_marks_the_server_down() {
    let s = server(1, None);
    let t0 = Instant::now();
    for i in 0..50 {
        url_fail(&s, "/broken", t0 + Duration::from_millis(i));
    }
    assert!(s.admit(t0 + Duration::from_millis(50)).is_some());
    let status = s.status(t0);
    assert_eq!(status.state, ServerState::Up);
    assert_eq!((status.fails_total, status.url_fails_total), (0, 50));
}

#[test]
fn several_paths_failing_on_a_silent_server_mark_it_down() {
    let s = server(1, None);
    let t0 = Instant::now();
    url_fail(&s, "/a", t0);
    url_fail(&s, "/b", t0);
    assert!(s.admit(t0).is_some(), "two paths are not yet the server");
    url_fail(&s, "/c", t0);
    assert!(s.admit(t0).is_none(), "three paths and no answer: down");
    // Its trial failing on any URL keeps it down.
    let trial = s.admit(t0 + FT).expect("the trial");
    let key = crate::net::blame::PathKey::new(b"h", "/a");
    s.url_failed(trial.admit, "Broken", key, t0 + FT);
    std::mem::forget(trial);
    assert!(s.admit(t0 + FT).is_none());
    assert_eq!(s.status(t0).fails_total, 2);
}

#[test]
fn an_answering_server_is_not_charged_for_failing_paths() {
    let s = server(1, None);
    let t0 = Instant::now();
    s.admit(t0).expect("up").report(Verdict::Answered);
    for path in ["/a", "/b", "/c", "/d"] {
        url_fail(&s, path, t0);
    }
    assert!(s.admit(t0).is_some());
    assert_eq!(s.status(t0).url_fails_total, 4);
}
