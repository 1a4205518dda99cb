//! Config tests for upstream health keys: defaults, and each bad value
//! reported with its TOML path.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::{Config, ConfigError, Problem};

fn upstream(keys: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\n[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n\
         {keys}\n\n[[routes]]\nupstream = \"app\"\n"
    )
}

fn problems(keys: &str) -> Vec<Problem> {
    match Config::from_toml(&upstream(keys), "test.toml") {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

fn one(keys: &str) -> (String, String) {
    let found = problems(keys);
    assert_eq!(found.len(), 1, "expected one problem, got {found:#?}");
    (found[0].path.clone(), found[0].to_string())
}

#[test]
fn defaults_are_nginx_s() {
    let config = Config::from_toml(&upstream(""), "test.toml").unwrap();
    let u = &config.upstreams[0];
    assert_eq!((u.max_fails, u.fail_timeout), (1, Duration::from_secs(10)));
    assert_eq!(u.health_check, None);
    assert!(u.fail_statuses.is_empty());
}

#[test]
fn health_check_defaults_and_keys() {
    let config = Config::from_toml(
        &upstream(
            "max_fails = 0\nfail_timeout = \"30s\"\nfail_statuses = [429, 503]\n\
             health_check = { path = \"/healthz?deep=1\", passes = 2 }",
        ),
        "test.toml",
    )
    .unwrap();
    let u = &config.upstreams[0];
    assert_eq!((u.max_fails, u.fail_timeout), (0, Duration::from_secs(30)));
    assert_eq!(u.fail_statuses, [429, 503]);
    let check = u.health_check.as_ref().unwrap();
    assert_eq!(check.path, "/healthz?deep=1");
    assert_eq!(check.interval, Duration::from_secs(5));
    assert_eq!(check.timeout, Duration::from_secs(5));
    assert_eq!((check.fails, check.passes), (1, 2));
}

#[test]
fn bad_values_name_their_key() {
    let cases = [
        ("max_fails = -1", "upstreams.app.max_fails", "got -1"),
        (
            "max_fails = \"abc\"",
            "upstreams.app.max_fails",
            "invalid type",
        ),
        (
            "fail_timeout = \"abc\"",
            "upstreams.app.fail_timeout",
            "not a duration",
        ),
        (
            "fail_timeout = 10",
            "upstreams.app.fail_timeout",
            "10 is not a duration",
        ),
        (
            "fail_timeout = \"0s\"",
            "upstreams.app.fail_timeout",
            "max_fails = 0",
        ),
        (
            "fail_statuses = [503, 404]",
            "upstreams.app.fail_statuses[1]",
            "404 is not a failure status",
        ),
        (
            "fail_statuses = [503, 503]",
            "upstreams.app.fail_statuses[1]",
            "listed twice",
        ),
        (
            "health_check = { interval = \"5s\" }",
            "upstreams.app.health_check.path",
            "missing required key",
        ),
        (
            "health_check = { path = \"healthz\" }",
            "upstreams.app.health_check.path",
            "origin-form",
        ),
        (
            "health_check = { path = \"/h\", interval = \"0s\" }",
            "upstreams.app.health_check.interval",
            "more than 0",
        ),
        (
            "health_check = { path = \"/h\", fails = 0 }",
            "upstreams.app.health_check.fails",
            "from 1",
        ),
        (
            "health_check = { path = \"/h\", every = \"5s\" }",
            "upstreams.app.health_check.every",
            "unknown field",
        ),
    ];
    for (keys, path, words) in cases {
        let (got_path, text) = one(keys);
        assert_eq!(got_path, path, "{keys}: {text}");
        assert!(text.contains(words), "{keys}: {text:?} lacks {words:?}");
    }
}
