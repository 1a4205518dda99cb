//! Plugged into monitoring (issue 16): the alert rules in
//! `dist/prometheus/` pass `promtool check rules` and their unit tests, and
//! every metric name the Grafana dashboard and the rules use is one a
//! running calmcache exports (a disk zone, active health checks and fleet
//! mode on a real `redis-server` switched on, so every family is there).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use calmcache_testkit::redis::Redis;
use calmcache_testkit::tools::debian_tool;
use calmcache_testkit::{get, request_with_body, Origin, Proxy};
use http::Method;

use crate::scratch;

fn dist(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../dist")
        .join(path)
}

fn promtool(args: &[&str], dir: &Path) -> Option<String> {
    let promtool = debian_tool("promtool", "prometheus")?;
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    Some(text)
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = dist("prometheus");
    let Some(checked) = promtool(&["check", "rules", "alerts.yml"], &dir) else {
        return;
    };
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts_test.yml"], &dir).unwrap();
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_alert_has_for_a_severity_and_what_to_check() {
    let text = std::fs::read_to_string(dist("prometheus/alerts.yml")).unwrap();
    let alerts: Vec<&str> = text.split("- alert: ").skip(1).collect();
    assert!(alerts.len() >= 5, "{} alerts", alerts.len());
    for alert in alerts {
        let name = alert.lines().next().unwrap_or("?");
        for needle in ["for: ", "severity: ", "summary: ", "description: ", "Check"] {
            assert!(alert.contains(needle), "alert {name} has no {needle:?}");
        }
    }
}

/// Every `calmcache_*` name in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("calmcache_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_use_is_exported() {
    let origin = Origin::start().await;
    let redis = Redis::start();
    // A limit, so Redis' memory has a used ratio (alerts.yml uses it).
    let limited = redis
        .command(&["CONFIG", "SET", "maxmemory", "64mb"])
        .unwrap();
    assert_eq!(limited, "+OK");
    let dir = scratch("metric-names");
    let proxy = Proxy::new(&origin)
        .disk_zone(&dir, "")
        .admin("listen = \"127.0.0.1:0\"\ntoken = \"metrics-token\"")
        .upstream("health_check = { path = \"/health\", interval = \"100ms\" }")
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    // Traffic: a miss, a hit, a purge.
    assert_eq!(get(&proxy.url("/a")).await.status, 200);
    assert_eq!(get(&proxy.url("/a")).await.status, 200);
    let purged = request_with_body(
        Method::POST,
        &proxy.admin_url("/purge"),
        &[
            ("authorization", "Bearer metrics-token"),
            ("content-type", "application/json"),
        ],
        r#"{"url": "/a"}"#.to_owned(),
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    // Active checks have run once.
    crate::wait_until(
        std::time::Duration::from_secs(10),
        "a health check",
        async || !origin.requests_for("/health").is_empty(),
    )
    .await;
    // Redis' memory has been read (a task, every 5 s from the start).
    crate::wait_until(
        std::time::Duration::from_secs(15),
        "redis memory read",
        async || proxy.status().await["fleet"]["redis"]["used_ratio"].is_f64(),
    )
    .await;
    let scrape = get(&proxy.admin_url("/metrics")).await;
    assert_eq!(scrape.status, 200);
    let exported: BTreeSet<String> = scrape
        .body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or("").to_owned())
        .collect();

    let mut missing = Vec::new();
    for file in ["grafana/calmcache.json", "prometheus/alerts.yml"] {
        let text = std::fs::read_to_string(dist(file)).unwrap();
        let used = names_in(&text);
        assert!(used.len() >= 5, "{file}: {used:?}");
        for name in used {
            if !exported.contains(&name) {
                missing.push(format!("{file}: {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "names not in /metrics:\n{}\n\nexported:\n{exported:#?}",
        missing.join("\n")
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_dashboard_is_importable_json_with_a_prometheus_input() {
    let text = std::fs::read_to_string(dist("grafana/calmcache.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(dashboard["__inputs"][0]["name"], "DS_PROMETHEUS");
    let panels = dashboard["panels"].as_array().unwrap();
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for wanted in [
        "Hit ratio",
        "Client requests vs origin requests",
        "Latency by cache status (p50, p99)",
        "Zone size vs max_size",
        "WebSockets",
        "Redis circuit breaker",
        "Origin budget",
    ] {
        assert!(
            titles.contains(&wanted),
            "no panel {wanted:?} in {titles:?}"
        );
    }
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}", "{panel}");
        }
    }
}
