//! Config tests for upstream health keys: defaults, and each bad value
//! reported with its TOML path.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::{Config, ConfigError, Problem};

fn upstream(keys: &str) -> String {
    with_servers(r#"["127.0.0.1:8081"]"#, keys)
}

fn with_servers(servers: &str, keys: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\n[upstreams.app]\nservers = {servers}\n\
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

#[test]
fn a_server_may_have_its_own_max_fails_and_fail_timeout() {
    let servers = r#"["127.0.0.1:8081", { address = "127.0.0.1:8082", max_fails = 3 },
        { address = "127.0.0.1:8083", fail_timeout = "1m" }]"#;
    let config = Config::from_toml(&with_servers(servers, "max_fails = 2"), "t.toml").unwrap();
    let u = &config.upstreams[0];
    assert_eq!(
        super::tests::addresses(u),
        ["127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"]
    );
    let passive: Vec<(u32, u64)> = u
        .servers
        .iter()
        .map(|s| (s.health.max_fails, s.health.fail_timeout.as_secs()))
        .collect();
    assert_eq!(passive, [(2, 10), (3, 10), (2, 60)]);
}

#[test]
fn bad_server_tables_name_their_key() {
    let cases = [
        (
            r#"[{ max_fails = 3 }]"#,
            "upstreams.app.servers[0].address",
            "missing required key",
        ),
        (
            r#"[{ address = "127.0.0.1:1", max_fails = -2 }]"#,
            "upstreams.app.servers[0].max_fails",
            "got -2",
        ),
        (
            r#"[{ address = "127.0.0.1:1", fail_timeout = "soon" }]"#,
            "upstreams.app.servers[0].fail_timeout",
            "not a duration",
        ),
        (
            r#"[{ address = "ftp://x:1", max_fails = 2 }]"#,
            "upstreams.app.servers[0].address",
            "not host:port",
        ),
        (
            r#"[{ address = "127.0.0.1:1", backup = true }]"#,
            "upstreams.app.servers[0]",
            "unknown field",
        ),
        (r#"[8081]"#, "upstreams.app.servers[0]", "host:port"),
    ];
    for (servers, path, words) in cases {
        let found = match Config::from_toml(&with_servers(servers, ""), "t.toml") {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("{servers}: expected an invalid config, got {other:?}"),
        };
        assert_eq!(found.len(), 1, "{servers}: {found:#?}");
        let text = found[0].to_string();
        assert!(found[0].path.starts_with(path), "{servers}: {text}");
        assert!(text.contains(words), "{servers}: {text:?} lacks {words:?}");
    }
}
