//! Tests for the config pipeline: units, the valid path, defaults, and one
//! test per problem kind pinning its TOML path and wording.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use calmcache_core::RefreshMode;

use super::suggest::{closest, edit_distance};
use super::units::{format_size, parse_duration, parse_size, GIB, KIB, MIB, TIB};
use super::{ClientCacheControl, Config, ConfigError, Problem, ZoneKind};
use crate::config::conditions::Condition;
use crate::config::key_template::KeyTemplate;
use crate::http::compress::Coding;

const EXAMPLE: &str = include_str!("../../../../config.example.toml");

/// The shortest valid config: one listener, one upstream, one route.
const MINIMAL: &str = r#"
[server]
listen = ["127.0.0.1:0"]

[upstreams.app]
servers = ["127.0.0.1:8081"]

[[routes]]
upstream = "app"
"#;

/// A valid config with two zones whose last section is a route, so a test
/// can append route keys.
fn with_route(keys: &str) -> String {
    format!(
        r#"
[server]
listen = ["127.0.0.1:0"]

[upstreams.app]
servers = ["127.0.0.1:8081"]

[zones.ssd]
kind = "memory"
max_size = "1MiB"

[zones.disk]
kind = "memory"
max_size = "8MiB"

[[routes]]
upstream = "app"
{keys}
"#
    )
}

/// Each server's `host:port`, in order.
pub(super) fn addresses(upstream: &super::UpstreamConfig) -> Vec<String> {
    upstream
        .servers
        .iter()
        .map(|s| s.address.to_string())
        .collect()
}

fn load(text: &str) -> Config {
    match Config::from_toml(text, "test.toml") {
        Ok(config) => config,
        Err(error) => panic!("expected a valid config, got:\n{error}"),
    }
}

fn problems(text: &str) -> Vec<Problem> {
    match Config::from_toml(text, "test.toml") {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

fn only_problem(text: &str) -> Problem {
    let mut found = problems(text);
    assert_eq!(found.len(), 1, "expected one problem, got {found:#?}");
    found.remove(0)
}

fn paths(problems: &[Problem]) -> Vec<&str> {
    problems.iter().map(|p| p.path.as_str()).collect()
}

// ---- units ----

#[test]
fn durations_parse_exactly() {
    let cases = [
        ("0s", Duration::ZERO),
        ("500ms", Duration::from_millis(500)),
        ("5s", Duration::from_secs(5)),
        ("0.5s", Duration::from_millis(500)),
        ("0.001s", Duration::from_millis(1)),
        ("1.5m", Duration::from_secs(90)),
        ("2h", Duration::from_secs(7200)),
        ("0.1h", Duration::from_secs(360)),
        ("1.25ms", Duration::from_micros(1250)),
        (" 10 s ", Duration::from_secs(10)),
        ("1d", Duration::from_secs(86_400)),
        ("0.5d", Duration::from_secs(43_200)),
        ("7d", Duration::from_secs(7 * 86_400)),
        ("0.00000000000001d", Duration::ZERO),
        ("0.0000000001d", Duration::from_nanos(8_640)),
    ];
    for (text, want) in cases {
        assert_eq!(parse_duration(text), Ok(want), "{text:?}");
    }
}

#[test]
fn bad_durations_are_explained() {
    let bad = parse_duration("60").unwrap_err();
    assert_eq!(bad.message, r#""60" is not a duration"#);
    assert_eq!(bad.hint, r#"write e.g. "60s", "500ms""#);

    let unit = parse_duration("1w").unwrap_err();
    assert!(
        unit.hint.starts_with("units are ms, s, m, h, d;"),
        "{unit:?}"
    );

    let negative = parse_duration("-1s").unwrap_err();
    assert_eq!(negative.message, r#""-1s" is negative"#);

    for text in [
        "", "s", ".5s", "1.s", "1..5s", "1e3s", "5S", "five s", "+1s", "1D", "1 day",
    ] {
        assert!(parse_duration(text).is_err(), "{text:?} should not parse");
    }
    let huge = parse_duration("99999999999999999999999h").unwrap_err();
    assert!(huge.message.contains("too large"), "{huge:?}");
}

#[test]
fn sizes_parse_in_binary_units() {
    let cases = [
        ("0B", 0),
        ("1B", 1),
        ("512KiB", 512 * KIB),
        ("256MiB", 256 * MIB),
        ("2GiB", 2 * GIB),
        ("16 MiB", 16 * MIB),
        // A disk zone on a large drive (the README's `hdd` zone).
        ("2TiB", 2 * TIB),
        ("1 TiB", TIB),
    ];
    for (text, want) in cases {
        assert_eq!(parse_size(text), Ok(want), "{text:?}");
    }
}

#[test]
fn bad_sizes_are_explained() {
    let no_unit = parse_size("256").unwrap_err();
    assert_eq!(no_unit.message, r#""256" is not a size"#);

    for text in ["256MB", "1GB", "64kb", "64mib", "1K", "2TB", "2tib", "1T"] {
        assert_eq!(
            parse_size(text).unwrap_err().hint,
            "use KiB/MiB/GiB/TiB",
            "{text:?}"
        );
    }
    let fraction = parse_size("1.5GiB").unwrap_err();
    assert!(
        fraction.hint.starts_with("sizes are whole numbers"),
        "{fraction:?}"
    );
    assert!(parse_size("1PiB")
        .unwrap_err()
        .hint
        .starts_with("units are B, KiB, MiB, GiB, TiB"));
    assert!(parse_size("-1MiB").is_err());
    assert!(parse_size("16777216TiB")
        .unwrap_err()
        .message
        .contains("too large"));
    assert!(parse_size("99999999999GiB")
        .unwrap_err()
        .message
        .contains("too large"));
}

#[test]
fn sizes_format_in_the_largest_exact_unit() {
    assert_eq!(format_size(256 * MIB), "256 MiB");
    assert_eq!(format_size(2 * GIB), "2 GiB");
    assert_eq!(format_size(2 * TIB), "2 TiB");
    assert_eq!(format_size(1536 * GIB), "1536 GiB");
    assert_eq!(format_size(1536 * KIB), "1536 KiB");
    assert_eq!(format_size(1000), "1000 B");
    assert_eq!(format_size(0), "0 B");
}

#[test]
fn near_misses_are_suggested() {
    assert_eq!(edit_distance("sdd", "ssd"), 1);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("hots", "host"), 1);
    assert_eq!(edit_distance("ca", "abc"), 3);
    assert_eq!(edit_distance("abc", ""), 3);
    assert_eq!(edit_distance("zoen", "zone"), 1);
    assert_eq!(closest("hots", ["host", "uri"]), Some("host"));
    assert_eq!(closest("sdd", ["disk", "ssd"]), Some("ssd"));
    assert_eq!(closest("SSD", ["disk", "ssd"]), Some("ssd"));
    assert_eq!(closest("zonee", ["name", "zone"]), Some("zone"));
    assert_eq!(closest("memory", ["disk", "ssd"]), None);
}

// ---- valid configs ----

#[test]
fn full_config_is_typed() {
    let config = load(&with_route(
        r#"
name = "api"
match = '^/api/'
zone = "ssd"
ttl = { 200 = "1s", 404 = "10s", any = "5s" }
override_origin = true
refresh = "per"
per_beta = 2.5
stale_while_revalidate = "10s"
stale_if_error = "1h"
lock_timeout = "250ms"
sus_stale = "0s"
hit_for_miss = "5s"
warm = ["/", "/feed/"]
warm_host = "example.com"
key = "$scheme$host$uri$is_args$args|${cookie_lang}"
bypass = ["cookie:wordpress_logged_in", "header:Authorization", "arg:preview"]
no_store = ["cookie:wordpress_logged_in"]
client_cache_control = "ignore"
convert_head = false
compress = ["gzip", "br"]
heuristic_fraction = 0.25
heuristic_max = "12h"
forward_targeted_cache_control = true
cache_status_key = true
"#,
    ));
    assert_eq!(config.zones[0].name, "disk"); // sorted by name
    let route = &config.routes[0];
    assert_eq!(route.name, "api");
    assert!(route.matches("/api/users?id=1"));
    assert!(!route.matches("/static/app.js"));
    assert_eq!(
        config.upstreams[route.upstream().expect("proxied")].name,
        "app"
    );
    assert_eq!(
        route.storage.zone.map(|z| config.zones[z].name.as_str()),
        Some("ssd")
    );
    assert_eq!(route.freshness.ttl.get(200), Some(Duration::from_secs(1)));
    assert_eq!(route.freshness.ttl.get(404), Some(Duration::from_secs(10)));
    assert_eq!(route.freshness.ttl.get(500), Some(Duration::from_secs(5)));
    assert!(route.freshness.override_origin);
    assert_eq!(route.refresh.mode, RefreshMode::Per);
    assert_eq!(route.refresh.per_beta, 2.5);
    assert_eq!(
        route.freshness.stale_while_revalidate,
        Duration::from_secs(10)
    );
    assert_eq!(route.freshness.stale_if_error, Duration::from_secs(3600));
    assert_eq!(route.refresh.lock_timeout, Duration::from_millis(250));
    assert_eq!(route.refresh.sus_stale, Duration::ZERO);
    assert_eq!(route.refresh.hit_for_miss, Duration::from_secs(5));
    assert_eq!(route.warm.paths, ["/", "/feed/"]);
    assert_eq!(route.warm.host.as_deref(), Some("example.com"));
    assert_eq!(
        route.storage.key.as_str(),
        "$scheme$host$uri$is_args$args|${cookie_lang}"
    );
    assert!(!route.storage.key.is_default());
    assert_eq!(
        route.storage.bypass,
        [
            Condition::Cookie("wordpress_logged_in".into()),
            Condition::Header(http::header::AUTHORIZATION),
            Condition::Arg("preview".into()),
        ]
    );
    assert_eq!(
        route.storage.no_store,
        [Condition::Cookie("wordpress_logged_in".into())]
    );
    assert_eq!(
        route.requests.client_cache_control,
        ClientCacheControl::Ignore
    );
    assert!(!route.requests.convert_head);
    assert_eq!(route.answers.compress, [Coding::Gzip, Coding::Br]);
    assert_eq!(route.freshness.heuristic_fraction, 0.25);
    assert_eq!(
        route.freshness.heuristic_max,
        Duration::from_secs(12 * 3600)
    );
    assert!(route.answers.forward_targeted_cache_control);
    assert!(route.answers.cache_status_key);
}

#[test]
fn defaults_are_applied() {
    let config = load(MINIMAL);
    assert_eq!(config.server.listen, ["127.0.0.1:0".parse().unwrap()]);
    assert!(config.server.threads >= 1);
    assert!(config.admin.is_none());
    assert!(config.zones.is_empty());

    let upstream = &config.upstreams[0];
    assert_eq!(upstream.keepalive, 32);
    assert_eq!(upstream.connect_timeout, Duration::from_secs(5));
    assert_eq!(upstream.read_timeout, Duration::from_secs(60));
    assert_eq!(upstream.send_timeout, Duration::from_secs(60));
    assert_eq!(upstream.refresh_concurrency, 8);

    let route = &config.routes[0];
    assert_eq!(route.name, "route0");
    assert!(route.matching.matcher.is_none());
    assert!(route.matches("/anything?at=all"));
    assert_eq!(route.storage.zone, None);
    assert!(route.freshness.ttl.is_empty());
    assert_eq!(route.freshness.ttl.get(200), None);
    assert!(!route.freshness.override_origin);
    assert_eq!(route.refresh.mode, RefreshMode::Sus);
    assert_eq!(route.refresh.per_beta, 1.0);
    assert_eq!(route.freshness.stale_while_revalidate, Duration::ZERO);
    assert_eq!(route.freshness.stale_if_error, Duration::ZERO);
    assert_eq!(route.refresh.lock_timeout, Duration::from_secs(5));
    assert_eq!(route.refresh.sus_stale, Duration::from_secs(2));
    assert_eq!(route.refresh.hit_for_miss, Duration::from_secs(120));
    assert!(route.warm.paths.is_empty());
    assert_eq!(route.warm.host, None);
    assert_eq!(route.storage.key, KeyTemplate::default());
    assert!(route.storage.key.is_default());
    assert_eq!(route.storage.key.as_str(), "$scheme$host$uri$is_args$args");
    assert!(route.storage.bypass.is_empty());
    assert!(route.storage.no_store.is_empty());
    assert_eq!(
        route.requests.client_cache_control,
        ClientCacheControl::Honor
    );
    assert!(route.requests.convert_head);
    assert!(route.answers.compress.is_empty());
    assert_eq!(route.freshness.heuristic_fraction, 0.1);
    assert_eq!(route.freshness.heuristic_max, Duration::from_secs(86_400));
    assert!(!route.answers.forward_targeted_cache_control);
    assert!(!route.answers.cache_status_key);
}

#[test]
fn max_object_size_defaults_to_an_eighth_capped_at_64_mib() {
    let config = load(&with_route(""));
    let sizes: Vec<(u64, u64)> = config
        .zones
        .iter()
        .map(|z| (z.max_size, z.max_object_size))
        .collect();
    assert_eq!(sizes, [(8 * MIB, MIB), (MIB, 128 * KIB)]);

    let big = MINIMAL.replace(
        "[[routes]]",
        "[zones.big]\nkind = \"memory\"\nmax_size = \"4GiB\"\n\n[[routes]]",
    );
    let zone = &load(&big).zones[0];
    assert_eq!(zone.kind, ZoneKind::Memory);
    assert_eq!(zone.max_object_size, 64 * MIB);
}

#[test]
fn summary_is_one_line() {
    let text = r#"
[server]
listen = ["127.0.0.1:8080"]
[admin]
listen = "127.0.0.1:9090"
[upstreams.app]
servers = ["127.0.0.1:8081"]
[zones.ram]
kind = "memory"
max_size = "256MiB"
[[routes]]
name = "api"
match = '^/api/'
upstream = "app"
zone = "ram"
[[routes]]
upstream = "app"
"#;
    assert_eq!(
        load(text).summary(),
        "ok: listen 127.0.0.1:8080; admin 127.0.0.1:9090; 1 upstream (app: 1 server); \
         1 zone (ram: memory 256 MiB); 2 routes (api -> app via ram, refresh sus; \
         route1 -> app, no cache)"
    );
    assert_eq!(
        load(MINIMAL).summary(),
        "ok: listen 127.0.0.1:0; 1 upstream (app: 1 server); 0 zones; 1 route (route0 -> app, no cache)"
    );
}

#[test]
fn summary_names_changed_cache_settings() {
    let config = load(&with_route(
        r#"
zone = "ssd"
key = "$host$uri"
bypass = ["cookie:a", "arg:b"]
no_store = ["cookie:a"]
compress = ["br", "gzip"]
"#,
    ));
    assert_eq!(
        config.summary(),
        "ok: listen 127.0.0.1:0; 1 upstream (app: 1 server); \
         2 zones (disk: memory 8 MiB, ssd: memory 1 MiB); 1 route (route0 -> app via ssd, \
         refresh sus, key \"$host$uri\", bypass 2, no_store 1, compress br+gzip)"
    );
    let braced_default = load(&with_route(
        "zone = \"ssd\"\nkey = \"${scheme}${host}${uri}${is_args}${args}\"",
    ));
    assert!(braced_default
        .summary()
        .ends_with("(route0 -> app via ssd, refresh sus)"));
}

#[test]
fn example_file_parses_and_shows_the_defaults() {
    let example = load(EXAMPLE);
    let minimal = load(MINIMAL);
    assert_eq!(
        example.upstreams[0],
        super::UpstreamConfig {
            name: "app".into(),
            servers: vec![super::UpstreamServer {
                address: http::uri::Authority::from_static("127.0.0.1:8081"),
                ..minimal.upstreams[0].servers[0].clone()
            }],
            ..minimal.upstreams[0].clone()
        }
    );
    let zone = &example.zones[0];
    assert_eq!((zone.max_size, zone.max_object_size), (256 * MIB, 32 * MIB));
    let (documented, default) = (&example.routes[0], &minimal.routes[0]);
    assert_eq!(documented.refresh.mode, default.refresh.mode);
    assert_eq!(
        documented.freshness.override_origin,
        default.freshness.override_origin
    );
    assert_eq!(documented.refresh.per_beta, default.refresh.per_beta);
    assert_eq!(
        documented.freshness.stale_while_revalidate,
        default.freshness.stale_while_revalidate
    );
    assert_eq!(
        documented.freshness.stale_if_error,
        default.freshness.stale_if_error
    );
    assert_eq!(
        documented.refresh.lock_timeout,
        default.refresh.lock_timeout
    );
    assert_eq!(documented.refresh.sus_stale, default.refresh.sus_stale);
    assert_eq!(
        documented.refresh.hit_for_miss,
        default.refresh.hit_for_miss
    );
    assert_eq!(documented.warm.paths, default.warm.paths);
    assert_eq!(documented.storage.key, default.storage.key);
    assert_eq!(documented.storage.bypass, default.storage.bypass);
    assert_eq!(documented.storage.no_store, default.storage.no_store);
    assert_eq!(
        documented.requests.client_cache_control,
        default.requests.client_cache_control
    );
    assert_eq!(
        documented.requests.convert_head,
        default.requests.convert_head
    );
    assert_eq!(documented.answers.compress, default.answers.compress);
    assert_eq!(
        documented.freshness.heuristic_fraction,
        default.freshness.heuristic_fraction
    );
    assert_eq!(
        documented.freshness.heuristic_max,
        default.freshness.heuristic_max
    );
    assert_eq!(
        documented.answers.forward_targeted_cache_control,
        default.answers.forward_targeted_cache_control
    );
    assert_eq!(
        documented.answers.cache_status_key,
        default.answers.cache_status_key
    );
    assert_eq!(
        documented.answers.expose_cache_tags,
        default.answers.expose_cache_tags
    );
    assert_eq!(documented.requests.websocket, default.requests.websocket);
    assert_eq!(
        documented.requests.merge_slashes,
        default.requests.merge_slashes
    );
    assert_eq!(
        documented.requests.underscores_in_headers,
        default.requests.underscores_in_headers
    );
    assert_eq!(
        documented.requests.trusted_proxies,
        default.requests.trusted_proxies
    );
    assert_eq!(documented.answers.early_hints, default.answers.early_hints);
    assert_eq!(example.routes[1].name, "route1");
}

/// `[admin]` `names` and `purge_token`: the example shows the defaults.
#[test]
fn example_admin_names_and_purge_token_are_the_defaults() {
    let example = load(EXAMPLE).admin.unwrap();
    let minimal = load(&format!(
        "{MINIMAL}\n[admin]\nlisten = \"127.0.0.1:9090\"\n"
    ))
    .admin
    .unwrap();
    assert_eq!(example.names, minimal.names);
    assert!(minimal.names.is_empty());
    assert_eq!(example.purge_token, minimal.purge_token);
    assert!(!minimal.purge_token);
}

/// The WordPress lines the example file shows commented out are valid.
#[test]
fn example_wordpress_lines_are_valid() {
    let lines: Vec<&str> = EXAMPLE
        .lines()
        .filter_map(|line| line.strip_prefix("# "))
        .filter(|line| {
            // `key = "$...`: a route's cache key, not a TLS key file.
            ["key = \"$", "bypass = ", "no_store = "]
                .iter()
                .any(|key| line.starts_with(key))
        })
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let config = load(&with_route(&format!(
        "zone = \"ssd\"\n{}",
        lines.join("\n")
    )));
    let route = &config.routes[0];
    assert!(route.storage.key.is_default());
    assert_eq!(route.storage.bypass.len(), 5);
    assert_eq!(route.storage.bypass, route.storage.no_store);
    assert!(route
        .storage
        .bypass
        .contains(&Condition::Cookie("wp-postpass".into())));
}

#[test]
fn ttl_prefers_the_exact_status() {
    let config = load(&with_route(r#"ttl = { 200 = "1s", any = "5s" }"#));
    let ttl = &config.routes[0].freshness.ttl;
    assert!(!ttl.is_empty());
    assert_eq!(ttl.get(200), Some(Duration::from_secs(1)));
    assert_eq!(ttl.get(301), Some(Duration::from_secs(5)));
    let only_status = load(&with_route(r#"ttl = { 200 = "1s" }"#));
    assert_eq!(only_status.routes[0].freshness.ttl.get(404), None);
}

// ---- parse errors: each with its path ----

#[test]
fn unknown_key_names_its_path() {
    let problem = only_problem(&with_route(r#"zonee = "ssd""#));
    assert_eq!(problem.path, "routes[0].zonee");
    assert!(
        problem.message.starts_with("unknown field `zonee`"),
        "{problem:?}"
    );
    assert!(
        problem.message.contains("(line 18, column 1)"),
        "{problem:?}"
    );
    assert_eq!(problem.hint.as_deref(), Some(r#"did you mean "zone"?"#));
}

#[test]
fn unknown_section_names_its_path() {
    let problem = only_problem(&format!("{MINIMAL}\n[cache]\nsize = 1\n"));
    assert_eq!(problem.path, "cache");
    assert!(
        problem.message.starts_with("unknown field `cache`"),
        "{problem:?}"
    );
}

/// Regression (issue 16): `check` stopped at the first unknown key, so a
/// file with three typos took three runs. Every unknown key is reported,
/// wherever it is (a section, an array of tables, an inline table in an
/// array, a nested inline table), each with its line and a near miss, and
/// validation still runs on the rest.
#[test]
fn every_unknown_key_is_reported_with_the_validation_problems() {
    let text = r#"
[server]
listen = ["127.0.0.1:0"]
thread = 2

[upstreams.app]
servers = ["127.0.0.1:8081", { address = "127.0.0.1:8082", max_fail = 3 }]
health_check = { path = "/", intervall = "5s" }

[zones.ram]
kind = "memory"
max_size = "lots"

[[routes]]
upstream = "app"
zonee = "ram"

[bogus]
x = 1
"#;
    let found = problems(text);
    assert_eq!(
        paths(&found),
        [
            "server.thread",
            "upstreams.app.servers[1].max_fail",
            "upstreams.app.health_check.intervall",
            "routes[0].zonee",
            "bogus",
            "zones.ram.max_size",
        ],
        "{found:#?}"
    );
    let hints: Vec<Option<&str>> = found.iter().map(|p| p.hint.as_deref()).collect();
    assert_eq!(hints[0], Some(r#"did you mean "threads"?"#));
    assert_eq!(hints[1], Some(r#"did you mean "max_fails"?"#));
    assert_eq!(hints[2], Some(r#"did you mean "interval"?"#));
    assert_eq!(hints[3], Some(r#"did you mean "zone"?"#));
    assert_eq!(hints[4], None, "nothing near `bogus`");
    for (problem, line_column) in found.iter().zip([
        "(line 4, column 1)",
        "(line 7, column 60)",
        "(line 8, column 30)",
        "(line 16, column 1)",
        "(line 18, column 2)",
    ]) {
        assert!(
            problem.message.starts_with("unknown field `")
                && problem.message.ends_with(line_column),
            "{problem:?} should end with {line_column}"
        );
    }
    assert!(found[5].message.contains("lots"), "{:?}", found[5]);
}

/// Wrong types are collected with unknown keys; validation, which would
/// report each removed key as missing, does not run then.
#[test]
fn wrong_types_are_collected_with_unknown_keys() {
    let text = MINIMAL
        .replace("listen = [\"127.0.0.1:0\"]", "listen = 8080\nbacklogg = 5")
        .replace(
            "upstream = \"app\"",
            "upstream = \"app\"\nwebsocket = \"yes\"",
        );
    let found = problems(&text);
    assert_eq!(
        paths(&found),
        ["server.backlogg", "server.listen", "routes[0].websocket"],
        "{found:#?}"
    );
    assert!(found[1].message.contains("invalid type"), "{:?}", found[1]);
    assert!(
        found[1].message.contains("(line 3, column 1)"),
        "{:?}",
        found[1]
    );
}

#[test]
fn wrong_type_names_its_path() {
    let text = MINIMAL.replace("servers = [\"127.0.0.1:8081\"]", "keepalive = \"many\"");
    let problem = only_problem(&text);
    assert_eq!(problem.path, "upstreams.app.keepalive");
    assert!(problem.message.contains("invalid type"), "{problem:?}");
}

#[test]
fn syntax_error_has_a_line() {
    let problem = only_problem("[server]\nlisten = [\"127.0.0.1:0\"\n");
    assert_eq!(problem.path, "");
    assert_eq!(
        problem.message,
        "invalid array: expected `]` (line 3, column 1)"
    );
    assert!(!problem.message.contains('\n'), "{problem:?}");
}

// ---- validation errors: every one, with its path ----

#[test]
fn missing_and_empty_server_listen() {
    let missing = MINIMAL.replace("listen = [\"127.0.0.1:0\"]", "threads = 2");
    assert_eq!(only_problem(&missing).path, "server.listen");
    assert_eq!(only_problem(&missing).message, "missing required key");
    let no_section = MINIMAL.replace("[server]\nlisten = [\"127.0.0.1:0\"]", "");
    assert_eq!(only_problem(&no_section).path, "server.listen");
    let empty = MINIMAL.replace("[\"127.0.0.1:0\"]", "[]");
    assert_eq!(only_problem(&empty).message, "must not be empty");
}

#[test]
fn bad_socket_addresses() {
    let text = MINIMAL.replace(
        "[\"127.0.0.1:0\"]",
        "[\"127.0.0.1:8080\", \"localhost:8080\", \"127.0.0.1:8080\"]",
    );
    let found = problems(&text);
    assert_eq!(paths(&found), ["server.listen[1]", "server.listen[2]"]);
    assert_eq!(
        found[0].message,
        r#""localhost:8080" is not an IP address and port"#
    );
    assert_eq!(found[1].message, "127.0.0.1:8080 is listed twice");

    let admin = format!("{MINIMAL}\n[admin]\nlisten = \"9090\"\n");
    assert_eq!(only_problem(&admin).path, "admin.listen");
    let no_listen = format!("{MINIMAL}\n[admin]\n");
    assert_eq!(only_problem(&no_listen).message, "missing required key");
}

#[test]
fn threads_zero_means_one_per_core_and_negatives_are_refused() {
    let zero = load(&MINIMAL.replace("[server]", "[server]\nthreads = 0"));
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    assert_eq!(zero.server.threads, cores);
    let text = MINIMAL.replace("[server]", "[server]\nthreads = -1");
    let problem = only_problem(&text);
    assert_eq!(problem.path, "server.threads");
    assert_eq!(problem.message, "must be at least 1, got -1");
}

#[test]
fn connection_limits_have_defaults_and_are_checked() {
    let default = load(MINIMAL);
    assert_eq!(default.server.max_connections, 10_000);
    assert_eq!(default.server.backlog, 4096);
    let set = load(&MINIMAL.replace(
        "[server]",
        "[server]\nmax_connections = 20000\nbacklog = 512",
    ));
    assert_eq!(
        (set.server.max_connections, set.server.backlog),
        (20_000, 512)
    );
    assert_eq!(default.server.keepalive_timeout, Duration::from_secs(75));
    assert_eq!(default.server.keepalive_requests, 1000);
    assert_eq!(default.server.max_header_size, 64 * 1024);
    let small = MINIMAL.replace("[server]", "[server]\nmax_header_size = \"4KiB\"");
    assert_eq!(only_problem(&small).path, "server.max_header_size");
    let zero = MINIMAL.replace("[server]", "[server]\nkeepalive_timeout = \"0s\"");
    assert_eq!(only_problem(&zero).path, "server.keepalive_timeout");
    for key in ["max_connections", "backlog", "keepalive_requests"] {
        let text = MINIMAL.replace("[server]", &format!("[server]\n{key} = 0"));
        let problem = only_problem(&text);
        assert_eq!(problem.path, format!("server.{key}"));
        assert_eq!(problem.message, "must be at least 1, got 0");
    }
}

#[test]
fn max_inflight_body_has_a_default_and_is_checked() {
    assert_eq!(load(MINIMAL).server.max_inflight_body, 256 * 1024 * 1024);
    let set = MINIMAL.replace("[server]", "[server]\nmax_inflight_body = \"64MiB\"");
    assert_eq!(load(&set).server.max_inflight_body, 64 * 1024 * 1024);
    for bad in ["\"0B\"", "\"lots\"", "1000"] {
        let text = MINIMAL.replace("[server]", &format!("[server]\nmax_inflight_body = {bad}"));
        assert_eq!(
            only_problem(&text).path,
            "server.max_inflight_body",
            "{bad}"
        );
    }
}

#[test]
fn send_timeout_and_http2_keepalive_have_defaults_and_are_checked() {
    let default = load(MINIMAL);
    assert_eq!(default.server.send_timeout, Duration::from_secs(60));
    assert_eq!(
        default.server.http2_keepalive_interval,
        Duration::from_secs(20)
    );
    assert_eq!(
        default.server.http2_keepalive_timeout,
        Duration::from_secs(20)
    );
    let set = load(&MINIMAL.replace(
        "[server]",
        "[server]\nsend_timeout = \"1500ms\"\nhttp2_keepalive_interval = \"5s\"\n\
         http2_keepalive_timeout = \"2s\"",
    ));
    assert_eq!(set.server.send_timeout, Duration::from_millis(1500));
    assert_eq!(set.server.http2_keepalive_interval, Duration::from_secs(5));
    assert_eq!(set.server.http2_keepalive_timeout, Duration::from_secs(2));
    for key in [
        "send_timeout",
        "http2_keepalive_interval",
        "http2_keepalive_timeout",
    ] {
        let path = format!("server.{key}");
        let zero = MINIMAL.replace("[server]", &format!("[server]\n{key} = \"0s\""));
        let problem = only_problem(&zero);
        assert_eq!(
            (problem.path.as_str(), problem.message.as_str()),
            (path.as_str(), "must be above 0")
        );
        let garbage = MINIMAL.replace("[server]", &format!("[server]\n{key} = \"soon\""));
        let problem = only_problem(&garbage);
        assert_eq!(problem.path, path);
        assert!(
            problem.message.contains("not a duration"),
            "{}",
            problem.message
        );
        let bare = MINIMAL.replace("[server]", &format!("[server]\n{key} = 60"));
        assert_eq!(only_problem(&bare).path, path);
        let huge = MINIMAL.replace("[server]", &format!("[server]\n{key} = \"400d\""));
        let problem = only_problem(&huge);
        assert_eq!(problem.path, path);
        assert!(
            problem.message.contains("largest timeout"),
            "{}",
            problem.message
        );
    }
}

#[test]
fn connection_clocks_tls_and_h2c_have_defaults_and_are_checked() {
    let default = load(MINIMAL);
    assert_eq!(default.server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(default.server.shutdown_timeout, Duration::from_secs(30));
    assert!(default.server.tls_listen.is_empty() && default.server.tls.is_empty());
    assert!(!default.server.h2c);
    let set = load(&MINIMAL.replace(
        "[server]",
        "[server]\nheader_read_timeout = \"2s\"\nshutdown_timeout = \"0s\"\nh2c = true",
    ));
    assert_eq!(set.server.header_read_timeout, Duration::from_secs(2));
    assert_eq!(set.server.shutdown_timeout, Duration::ZERO);
    assert!(set.server.h2c);
    let zero = MINIMAL.replace("[server]", "[server]\nheader_read_timeout = \"0s\"");
    assert_eq!(only_problem(&zero).path, "server.header_read_timeout");
    let bare = MINIMAL.replace("[server]", "[server]\ntls_listen = [\"127.0.0.1:8443\"]");
    let problem = only_problem(&bare);
    assert_eq!(problem.path, "server.tls");
    assert!(
        problem.message.contains("no certificate"),
        "{}",
        problem.message
    );
    let same = MINIMAL
        .replace("127.0.0.1:0", "127.0.0.1:8080")
        .replace("[server]", "[server]\ntls_listen = [\"127.0.0.1:8080\"]")
        + "\n[[server.tls]]\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"\n";
    let problems = problems(&same);
    assert!(
        problems.iter().any(|p| p.path == "server.tls_listen[0]"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.path == "server.tls[0]" && p.message.contains("/nonexistent/c.pem")),
        "{problems:?}"
    );
}

#[test]
fn upstreams_are_required_and_checked() {
    let none = "[server]\nlisten = [\"127.0.0.1:0\"]\n[[routes]]\nupstream = \"app\"\n";
    let found = problems(none);
    assert_eq!(paths(&found), ["upstreams", "routes[0].upstream"]);
    assert_eq!(found[1].hint.as_deref(), Some("no upstreams are defined"));

    let empty = MINIMAL.replace("[\"127.0.0.1:8081\"]", "[]");
    assert_eq!(only_problem(&empty).path, "upstreams.app.servers");

    let scheme = MINIMAL.replace("\"127.0.0.1:8081\"", "\"ws://127.0.0.1:8081\"");
    let problem = only_problem(&scheme);
    assert_eq!(problem.path, "upstreams.app.servers[0]");
    assert_eq!(
        problem.message,
        r#""ws://127.0.0.1:8081" is not host:port or an http:// or https:// origin"#
    );
    let plain = MINIMAL.replace("\"127.0.0.1:8081\"", "\"http://127.0.0.1:8081\"");
    assert_eq!(addresses(&load(&plain).upstreams[0]), ["127.0.0.1:8081"]);

    for bad in [
        "origin",
        "origin:0",
        "origin:http",
        ":80",
        "::1:80",
        "a b:80",
        "o:80/x",
    ] {
        let text = MINIMAL.replace("127.0.0.1:8081", bad);
        assert_eq!(
            only_problem(&text).path,
            "upstreams.app.servers[0]",
            "{bad}"
        );
    }
    for good in ["origin.internal:8081", "[::1]:8081", "10.0.0.1:80"] {
        load(&MINIMAL.replace("127.0.0.1:8081", good));
    }
}

#[test]
fn upstream_paths_quote_unusual_names() {
    let text = MINIMAL
        .replace("[upstreams.app]", "[upstreams.\"my.app\"]")
        .replace("[\"127.0.0.1:8081\"]", "[]")
        .replace("upstream = \"app\"", "upstream = \"my.app\"");
    assert_eq!(only_problem(&text).path, r#"upstreams."my.app".servers"#);
}

#[test]
fn bad_duration_names_its_path() {
    let text = MINIMAL.replace(
        "[\"127.0.0.1:8081\"]",
        "[\"127.0.0.1:8081\"]\nread_timeout = \"60\"",
    );
    let problem = only_problem(&text);
    assert_eq!(problem.path, "upstreams.app.read_timeout");
    assert_eq!(
        format!("test.toml: {problem}"),
        r#"test.toml: upstreams.app.read_timeout: "60" is not a duration (hint: write e.g. "60s", "500ms")"#
    );

    let bare = MINIMAL.replace(
        "[\"127.0.0.1:8081\"]",
        "[\"127.0.0.1:8081\"]\nconnect_timeout = 5",
    );
    let problem = only_problem(&bare);
    assert_eq!(problem.path, "upstreams.app.connect_timeout");
    assert_eq!(problem.message, "5 is not a duration");
    assert!(problem
        .hint
        .unwrap()
        .starts_with(r#"add a unit and quotes, e.g. "5s""#));
}

#[test]
fn upstream_counts_are_checked() {
    let text = MINIMAL.replace(
        "[\"127.0.0.1:8081\"]",
        "[\"127.0.0.1:8081\"]\nkeepalive = -1\nrefresh_concurrency = 0",
    );
    let found = problems(&text);
    assert_eq!(
        paths(&found),
        [
            "upstreams.app.keepalive",
            "upstreams.app.refresh_concurrency"
        ]
    );
    let zero_keepalive = MINIMAL.replace(
        "[\"127.0.0.1:8081\"]",
        "[\"127.0.0.1:8081\"]\nkeepalive = 0",
    );
    assert_eq!(load(&zero_keepalive).upstreams[0].keepalive, 0);
}

#[test]
fn zone_problems() {
    let zone =
        |keys: &str| MINIMAL.replace("[[routes]]", &format!("[zones.ram]\n{keys}\n[[routes]]"));

    let kind = only_problem(&zone("kind = \"tape\"\nmax_size = \"1MiB\""));
    assert_eq!(kind.path, "zones.ram.kind");
    assert_eq!(kind.message, r#"unknown zone kind "tape""#);
    assert_eq!(kind.hint.as_deref(), Some("allowed kinds: memory, disk"));
    // Disk zones need a path; only they take path, inactive and min_free.
    let path = only_problem(&zone("kind = \"disk\"\nmax_size = \"1MiB\""));
    assert_eq!(
        (path.path.as_str(), path.message.as_str()),
        ("zones.ram.path", "missing required key")
    );
    for key in [
        "path = \"/tmp/x\"",
        "inactive = \"1m\"",
        "min_free = \"1GiB\"",
    ] {
        let p = only_problem(&zone(&format!(
            "kind = \"memory\"\nmax_size = \"1MiB\"\n{key}"
        )));
        assert_eq!(p.message, "only disk zones take this key", "{key}");
    }
    let disk = load(&zone(
        "kind = \"disk\"\nmax_size = \"1MiB\"\npath = \"/var/cache/c\"\ninactive = \"1h\"\nmin_free = \"2GiB\"",
    ));
    let z = &disk.zones[0];
    assert_eq!(z.kind, ZoneKind::Disk);
    assert_eq!(
        z.path.as_deref(),
        Some(std::path::Path::new("/var/cache/c"))
    );
    assert_eq!(z.inactive, std::time::Duration::from_secs(3600));
    assert_eq!(z.min_free, 2 << 30);
    let two = MINIMAL.replace(
        "[[routes]]",
        "[zones.a]\nkind = \"disk\"\nmax_size = \"1MiB\"\npath = \"/c\"\n[zones.b]\nkind = \"disk\"\nmax_size = \"1MiB\"\npath = \"/c\"\n[[routes]]",
    );
    let shared = only_problem(&two);
    assert_eq!(shared.path, "zones.b.path");
    assert_eq!(shared.message, r#"/c is also the path of zone "a""#);
    let nested = only_problem(
        &two.replacen("path = \"/c\"", "path = \"/c/inner\"", 2)
            .replacen("path = \"/c/inner\"", "path = \"/c\"", 1),
    );
    assert_eq!(
        nested.message,
        r#"/c/inner and the path of zone "a" are inside one another"#
    );
    let relative = only_problem(&zone(
        "kind = \"disk\"\nmax_size = \"1MiB\"\npath = \"cache\"",
    ));
    assert_eq!(relative.message, r#""cache" is not an absolute path"#);
    let quick = only_problem(&zone(
        "kind = \"disk\"\nmax_size = \"1MiB\"\npath = \"/c\"\ninactive = \"500ms\"",
    ));
    assert_eq!(quick.message, "must be at least 1s");
    // zones = [..]: names resolved, no duplicates, not together with zone.
    let spread = MINIMAL.replace(
        "[[routes]]",
        "[zones.a]\nkind = \"memory\"\nmax_size = \"1MiB\"\n[zones.b]\nkind = \"memory\"\nmax_size = \"1MiB\"\nweight = 3\n[[routes]]\nzones = [\"a\", \"b\"]",
    );
    let c = load(&spread);
    assert_eq!(c.routes[0].storage.zones, [0, 1]);
    assert_eq!(c.routes[0].storage.zone, Some(0));
    assert_eq!(c.zones[1].weight, 3);
    let twice = only_problem(&spread.replace("zones = [\"a\", \"b\"]", "zones = [\"a\", \"a\"]"));
    assert_eq!(twice.path, "routes[0].zones[1]");
    let both =
        only_problem(&spread.replace("zones = [\"a\", \"b\"]", "zone = \"a\"\nzones = [\"b\"]"));
    assert_eq!(both.message, "a route takes zone or zones, not both");
    let weight = only_problem(&spread.replace("weight = 3", "weight = 0"));
    assert_eq!(weight.path, "zones.b.weight");
    // memory = "ram": a memory zone in front of disk zones only.
    let front = MINIMAL.replace(
        "[[routes]]",
        "[zones.ram]\nkind = \"memory\"\nmax_size = \"1MiB\"\n[zones.d]\nkind = \"disk\"\nmax_size = \"1MiB\"\npath = \"/c\"\n[[routes]]\nzone = \"d\"\nmemory = \"ram\"",
    );
    // Zones are sorted by name: d, ram.
    assert_eq!(load(&front).routes[0].storage.memory, Some(1));
    let not_memory = only_problem(&front.replace("memory = \"ram\"", "memory = \"d\""));
    assert_eq!(not_memory.message, r#"zone "d" is not a memory zone"#);
    let not_disk = only_problem(&front.replace("zone = \"d\"", "zone = \"ram\""));
    assert_eq!(not_disk.path, "routes[0].memory");
    let defaults = load(&zone("kind = \"disk\"\nmax_size = \"1MiB\"\npath = \"/c\""));
    assert_eq!(
        defaults.zones[0].inactive,
        std::time::Duration::from_secs(600)
    );
    assert_eq!(defaults.zones[0].min_free, 0);
    let kind = only_problem(&zone("max_size = \"1MiB\""));
    assert_eq!(
        (kind.path.as_str(), kind.message.as_str()),
        ("zones.ram.kind", "missing required key")
    );

    let size = only_problem(&zone("kind = \"memory\""));
    assert_eq!(size.path, "zones.ram.max_size");
    let size = only_problem(&zone("kind = \"memory\"\nmax_size = \"256MB\""));
    assert_eq!(size.path, "zones.ram.max_size");
    assert_eq!(size.hint.as_deref(), Some("use KiB/MiB/GiB/TiB"));
    let size = only_problem(&zone("kind = \"memory\"\nmax_size = \"0B\""));
    assert_eq!(size.message, "must be above 0");
    let size = only_problem(&zone("kind = \"memory\"\nmax_size = 1024"));
    assert_eq!(size.message, "1024 is not a size");

    let object = only_problem(&zone(
        "kind = \"memory\"\nmax_size = \"1MiB\"\nmax_object_size = \"2MiB\"",
    ));
    assert_eq!(object.path, "zones.ram.max_object_size");
    assert_eq!(object.message, "2 MiB is larger than max_size (1 MiB)");
    let object = only_problem(&zone(
        "kind = \"memory\"\nmax_size = \"1MiB\"\nmax_object_size = \"0KiB\"",
    ));
    assert_eq!(object.path, "zones.ram.max_object_size");
}

#[test]
fn no_routes() {
    let text = MINIMAL.replace("[[routes]]\nupstream = \"app\"\n", "");
    assert_eq!(only_problem(&text).path, "routes");
}

#[test]
fn unknown_names_list_what_exists() {
    let upstream = only_problem(&MINIMAL.replace("upstream = \"app\"", "upstream = \"origin\""));
    assert_eq!(upstream.path, "routes[0].upstream");
    assert_eq!(upstream.message, r#"no upstream named "origin""#);
    assert_eq!(upstream.hint.as_deref(), Some("upstreams: app"));

    let zone = only_problem(&with_route(r#"zone = "sdd""#));
    assert_eq!(zone.path, "routes[0].zone");
    assert_eq!(zone.message, r#"no zone named "sdd""#);
    assert_eq!(
        zone.hint.as_deref(),
        Some(r#"did you mean "ssd"? zones: disk, ssd"#)
    );

    let far = only_problem(&with_route(r#"zone = "tape""#));
    assert_eq!(far.hint.as_deref(), Some("zones: disk, ssd"));
    let none = only_problem(&format!("{MINIMAL}zone = \"ram\"\n"));
    assert_eq!(none.hint.as_deref(), Some("no zones are defined"));

    let missing = only_problem(&with_route("").replace("upstream = \"app\"", ""));
    assert_eq!(missing.path, "routes[0].upstream");
    assert_eq!(
        missing.hint.as_deref(),
        Some(r#"e.g. upstream = "app"; upstreams: app"#)
    );
}

#[test]
fn bad_regex_gives_the_reason() {
    let problem = only_problem(&with_route("match = '^/api/('"));
    assert_eq!(problem.path, "routes[0].match");
    assert_eq!(
        problem.message,
        r#"invalid regex "^/api/(": unclosed group"#
    );
}

#[test]
fn bad_ttl_keys_and_values() {
    let found = problems(&with_route(
        r#"ttl = { 200 = "1s", 700 = "1s", abc = "1s", "2xx" = "1s", 404 = "soon" }"#,
    ));
    assert_eq!(
        paths(&found),
        [
            "routes[0].ttl.2xx",
            "routes[0].ttl.404",
            "routes[0].ttl.700",
            "routes[0].ttl.abc"
        ]
    );
    assert_eq!(found[0].message, r#""2xx" is not a status code"#);
    assert_eq!(found[1].message, r#""soon" is not a duration"#);
}

#[test]
fn refresh_and_per_beta() {
    let mode = only_problem(&with_route(r#"refresh = "suss""#));
    assert_eq!(mode.path, "routes[0].refresh");
    assert_eq!(
        mode.hint.as_deref(),
        Some(r#"did you mean "sus"? modes: none, lock, per, sus"#)
    );
    for beta in ["0.0", "-1.0", "nan", "inf"] {
        let problem = only_problem(&with_route(&format!("per_beta = {beta}")));
        assert_eq!(problem.path, "routes[0].per_beta", "{beta}");
    }
    assert_eq!(
        load(&with_route("per_beta = 2")).routes[0].refresh.per_beta,
        2.0
    );
}

#[test]
fn route_names_must_be_unique() {
    let text = format!(
        "{}\n[[routes]]\nname = \"route0\"\nupstream = \"app\"\n[[routes]]\nname = \"\"\nupstream = \"app\"\n",
        with_route("")
    );
    let found = problems(&text);
    assert_eq!(paths(&found), ["routes[2].name", "routes[1].name"]);
    assert_eq!(found[0].message, "must not be empty");
    assert_eq!(
        found[1].message,
        r#"route name "route0" is already used by routes[0]"#
    );
}

#[test]
fn warm_needs_a_zone_and_paths() {
    let problem = only_problem(&with_route(r#"warm = ["/"]"#));
    assert_eq!(problem.path, "routes[0].warm");
    assert_eq!(
        problem.hint.as_deref(),
        Some(r#"set zone = "disk" on this route, or remove warm"#)
    );
    let path = only_problem(&with_route("zone = \"ssd\"\nwarm = [\"/\", \"feed/\"]"));
    assert_eq!(path.path, "routes[0].warm[1]");
    assert_eq!(path.message, r#""feed/" does not start with '/'"#);
    let host = only_problem(&with_route(
        "zone = \"ssd\"\nwarm_host = \"http://example.com\"",
    ));
    assert_eq!(host.path, "routes[0].warm_host");
}

#[test]
fn bad_key_templates() {
    let problem = only_problem(&with_route(r#"key = "$scheme$hots$uri""#));
    assert_eq!(problem.path, "routes[0].key");
    assert_eq!(
        problem.message,
        r#"unknown variable "$hots" (did you mean "$host"?)"#
    );
    assert_eq!(
        problem.hint.as_deref(),
        Some(
            "variables: $scheme, $host, $uri, $args, $is_args, $request_uri, $method, \
             $arg_NAME, $http_NAME, $cookie_NAME"
        )
    );
    let cases = [
        (r#"key = "$uri$arg_""#, r#""$arg_" needs a name"#),
        (
            r#"key = "${uri""#,
            r#""${uri": "${" is missing its closing "}""#,
        ),
        (
            r#"key = "$uri$""#,
            r#""$" must be followed by a variable name, at "$""#,
        ),
        (
            r#"key = "v1""#,
            r#""v1" has no variables, so every request would share one cached response"#,
        ),
    ];
    for (keys, message) in cases {
        let problem = only_problem(&with_route(keys));
        assert_eq!(problem.path, "routes[0].key", "{keys}");
        assert_eq!(problem.message, message, "{keys}");
    }
    let empty = only_problem(&with_route("key = \"\""));
    assert_eq!(
        format!("{empty}"),
        r#"routes[0].key: empty template (hint: remove it for the default "$scheme$host$uri$is_args$args")"#
    );
}

#[test]
fn bad_conditions_name_their_index() {
    let text = format!(
        "{}\n[[routes]]\nupstream = \"app\"\n{}\n{}\n",
        with_route(""),
        r#"bypass = ["cookie:a", "header:Authorization", "cookies:x", "header:authorization"]"#,
        r#"no_store = ["arg:", "header:bad name", "preview"]"#,
    );
    let found = problems(&text);
    assert_eq!(
        paths(&found),
        [
            "routes[1].bypass[2]",
            "routes[1].bypass[3]",
            "routes[1].no_store[0]",
            "routes[1].no_store[1]",
            "routes[1].no_store[2]",
        ]
    );
    assert_eq!(
        found[0].to_string(),
        r#"routes[1].bypass[2]: "cookies:x": unknown condition kind "cookies" (expected "cookie", "header" or "arg") (hint: e.g. "cookie:wordpress_logged_in" (a name prefix), "header:Authorization", "arg:preview")"#
    );
    assert_eq!(
        found[1].message,
        r#""header:authorization" is listed twice"#
    );
    assert_eq!(found[1].hint, None);
    assert_eq!(found[2].message, r#""arg:": the arg name is empty"#);
    assert_eq!(
        found[3].message,
        r#""header:bad name": "bad name" is not a valid header name"#
    );
    assert_eq!(
        found[4].message,
        r#""preview" is not a condition (expected "cookie:NAME", "header:NAME" or "arg:NAME")"#
    );
}

#[test]
fn bad_client_cache_control() {
    let problem = only_problem(&with_route(r#"client_cache_control = "honour""#));
    assert_eq!(problem.path, "routes[0].client_cache_control");
    assert_eq!(problem.message, r#"unknown client_cache_control "honour""#);
    assert_eq!(
        problem.hint.as_deref(),
        Some(r#"did you mean "honor"? values: honor, ignore"#)
    );
    let honor = load(&with_route(r#"client_cache_control = "honor""#));
    assert_eq!(
        honor.routes[0].requests.client_cache_control,
        ClientCacheControl::Honor
    );
    assert_eq!(ClientCacheControl::Ignore.as_str(), "ignore");
    let typed = only_problem(&with_route("client_cache_control = true"));
    assert_eq!(typed.path, "routes[0].client_cache_control");
}

#[test]
fn bad_compress_codings() {
    let found = problems(&with_route(r#"compress = ["br", "zstd", "BR", "gzip"]"#));
    assert_eq!(
        found.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            r#"routes[0].compress[1]: "zstd" is not a coding calmcache can make (expected "br" or "gzip")"#,
            r#"routes[0].compress[2]: "BR" is listed twice"#,
        ]
    );
    let typed = only_problem(&with_route(r#"compress = "gzip""#));
    assert_eq!(typed.path, "routes[0].compress");
    assert!(typed.message.contains("invalid type"), "{typed:?}");
}

#[test]
fn heuristic_fraction_and_max() {
    for (value, shown) in [
        ("1.5", "1.5"),
        ("-0.1", "-0.1"),
        ("2", "2"),
        ("nan", "NaN"),
        ("inf", "inf"),
    ] {
        let problem = only_problem(&with_route(&format!("heuristic_fraction = {value}")));
        assert_eq!(problem.path, "routes[0].heuristic_fraction", "{value}");
        assert_eq!(problem.message, format!("{shown} is outside 0..=1"));
        assert_eq!(
            problem.hint.as_deref(),
            Some("0.1 is the usual fraction; 0 turns heuristic freshness off")
        );
    }
    for (value, want) in [("0", 0.0), ("0.0", 0.0), ("-0.0", 0.0), ("1", 1.0)] {
        let route = &load(&with_route(&format!("heuristic_fraction = {value}"))).routes[0];
        assert_eq!(route.freshness.heuristic_fraction, want, "{value}");
        assert!(
            route.freshness.heuristic_fraction.is_sign_positive(),
            "{value}"
        );
    }

    let max = only_problem(&with_route(r#"heuristic_max = "1 week""#));
    assert_eq!(max.path, "routes[0].heuristic_max");
    assert_eq!(max.message, r#""1 week" is not a duration"#);
    let bare = only_problem(&with_route("heuristic_max = 86400"));
    assert_eq!(bare.message, "86400 is not a duration");
    let route = &load(&with_route(r#"heuristic_max = "0s""#)).routes[0];
    assert_eq!(route.freshness.heuristic_max, Duration::ZERO);
}

#[test]
fn body_keys_are_checked() {
    let route = &load(&with_route("")).routes[0];
    assert!(!route.requests.cache_post);
    assert_eq!(route.requests.body_key, crate::config::BodyKey::Bytes);
    assert_eq!(route.requests.max_body_key, 64 * 1024);
    let set = with_route("cache_post = true\nbody_key = \"json\"\nmax_body_key = \"1MiB\"");
    let route = &load(&set).routes[0];
    assert!(route.requests.cache_post);
    assert_eq!(route.requests.body_key, crate::config::BodyKey::Json);
    assert_eq!(route.requests.max_body_key, 1024 * 1024);
    let how = only_problem(&with_route(r#"body_key = "jsn""#));
    assert_eq!(how.path, "routes[0].body_key");
    assert_eq!(how.message, r#"unknown body_key "jsn""#);
    let big = only_problem(&with_route(r#"max_body_key = "1GiB""#));
    assert_eq!(big.path, "routes[0].max_body_key");
    assert!(big.message.contains("over 16MiB"), "{big:?}");
    let zero = only_problem(&with_route(r#"max_body_key = "0""#));
    assert_eq!(zero.path, "routes[0].max_body_key");
}

#[test]
fn boolean_route_keys_take_booleans() {
    for key in [
        "convert_head",
        "cache_post",
        "forward_targeted_cache_control",
        "cache_status_key",
        "expose_cache_tags",
        "websocket",
        "merge_slashes",
        "underscores_in_headers",
    ] {
        let problem = only_problem(&with_route(&format!("{key} = \"yes\"")));
        assert_eq!(problem.path, format!("routes[0].{key}"));
        assert!(problem.message.contains("invalid type"), "{problem:?}");
    }
}

#[test]
fn trusted_proxies_take_networks_and_addresses() {
    let route = &load(&with_route(
        r#"trusted_proxies = ["10.0.0.0/8", "192.168.1.10", "::1/128", "10.1.2.3/16"]"#,
    ))
    .routes[0];
    let shown: Vec<String> = route
        .requests
        .trusted_proxies
        .iter()
        .map(|n| n.to_string())
        .collect();
    // A host address with a prefix is taken as its network.
    assert_eq!(
        shown,
        ["10.0.0.0/8", "192.168.1.10/32", "::1/128", "10.1.0.0/16"]
    );
    let problem = only_problem(&with_route(r#"trusted_proxies = ["10.0.0.0/33"]"#));
    assert_eq!(problem.path, "routes[0].trusted_proxies[0]");
    assert_eq!(
        problem.message,
        r#""10.0.0.0/33" is not an address or a CIDR network"#
    );
}

#[test]
fn early_hints_keys_take_hint_links_and_origins() {
    let route = &load(&with_route(
        r#"early_hints_links = ["</a.css>; rel=preload; as=style", "<https://cdn.example>; rel=preconnect"]
early_hints_origins = ["HTTPS://CDN.example/"]"#,
    ))
    .routes[0];
    assert!(route.answers.early_hints.on);
    assert_eq!(route.answers.early_hints.links.len(), 2);
    assert_eq!(route.answers.early_hints.origins, ["https://cdn.example"]);
    assert!(
        !load(&with_route("early_hints = false")).routes[0]
            .answers
            .early_hints
            .on
    );
    let found = problems(&with_route(
        r#"early_hints_links = ["</a.css>; rel=stylesheet", "/b.css", "</a>; rel=preload, </b>; rel=preload"]
early_hints_origins = ["cdn.example", "https://cdn.example/path", "ftp://x"]"#,
    ));
    assert_eq!(
        paths(&found),
        [
            "routes[0].early_hints_links[0]",
            "routes[0].early_hints_links[1]",
            "routes[0].early_hints_links[2]",
            "routes[0].early_hints_origins[0]",
            "routes[0].early_hints_origins[1]",
            "routes[0].early_hints_origins[2]",
        ]
    );
    assert!(
        found[0].message.contains("rel must be preload"),
        "{}",
        found[0].message
    );
    assert_eq!(found[3].message, r#""cdn.example" is not an origin"#);
}

#[test]
fn ttl_any_never_covers_request_caused_statuses() {
    // A 400 one client provoked (e.g. gunicorn refusing a contradictory
    // X-Forwarded-SSL) was stored for everyone through `any`.
    let route = &load(&with_route(r#"ttl = { any = "5s", 405 = "1s" }"#)).routes[0];
    for status in [400, 413, 414, 431, 501] {
        assert_eq!(route.freshness.ttl.get(status), None, "{status}");
    }
    assert_eq!(route.freshness.ttl.get(405), Some(Duration::from_secs(1)));
    assert_eq!(route.freshness.ttl.get(404), Some(Duration::from_secs(5)));
    assert_eq!(route.freshness.ttl.get(200), Some(Duration::from_secs(5)));
}

#[test]
fn new_route_key_typos_are_suggested() {
    let problem = only_problem(&with_route(r#"nostore = ["cookie:a"]"#));
    assert_eq!(problem.path, "routes[0].nostore");
    assert_eq!(problem.hint.as_deref(), Some(r#"did you mean "no_store"?"#));
}

// ---- reporting ----

#[test]
fn every_problem_is_reported_at_once() {
    let text = r#"
[server]
listen = ["nowhere"]
threads = -2

[upstreams.app]
servers = ["tcp://127.0.0.1:8081"]
read_timeout = "60"

[zones.ssd]
kind = "memory"
max_size = "1GB"

[[routes]]
upstream = "ap"
zone = "sdd"
match = "("

[[routes]]
upstream = "app"
warm = ["feed"]
"#;
    let error = Config::from_toml(text, "calm.toml").unwrap_err();
    assert_eq!(error.exit_code(), 2);
    let want = [
        r#"calm.toml: server.listen[0]: "nowhere" is not an IP address and port (hint: write e.g. "127.0.0.1:8080" or "[::1]:8080"; host names are not allowed here)"#,
        "calm.toml: server.threads: must be at least 1, got -2",
        r#"calm.toml: upstreams.app.servers[0]: "tcp://127.0.0.1:8081" is not host:port or an http:// or https:// origin (hint: only http:// and https:// origins, e.g. "https://origin.example:443")"#,
        r#"calm.toml: upstreams.app.read_timeout: "60" is not a duration (hint: write e.g. "60s", "500ms")"#,
        r#"calm.toml: zones.ssd.max_size: "1GB" is not a size (hint: use KiB/MiB/GiB/TiB)"#,
        r#"calm.toml: routes[0].match: invalid regex "(": unclosed group"#,
        r#"calm.toml: routes[0].upstream: no upstream named "ap" (hint: did you mean "app"? upstreams: app)"#,
        r#"calm.toml: routes[0].zone: no zone named "sdd" (hint: did you mean "ssd"? zones: ssd)"#,
        r#"calm.toml: routes[1].warm: warming needs a zone to fill (hint: set zone = "ssd" on this route, or remove warm)"#,
        r#"calm.toml: routes[1].warm[0]: "feed" does not start with '/' (hint: write a path and query, e.g. "/feed/?page=1")"#,
    ];
    assert_eq!(error.to_string(), want.join("\n"));
}

#[test]
fn missing_file_is_an_io_error() {
    let error = Config::from_file(Path::new("/nonexistent/calmcache.toml")).unwrap_err();
    assert!(matches!(error, ConfigError::Io { .. }), "{error:?}");
    assert_eq!(error.exit_code(), 2);
    assert!(error
        .to_string()
        .starts_with("/nonexistent/calmcache.toml: cannot read config"));
}

// ---- access log ----

#[test]
fn access_log_is_off_without_its_table() {
    assert_eq!(load(MINIMAL).access_log, None);
}

#[test]
fn access_log_takes_a_file_or_stdout_and_a_format() {
    let file = load(&format!(
        "{MINIMAL}\n[access_log]\npath = \"/var/log/calmcache/access.log\"\n"
    ));
    assert_eq!(
        file.access_log,
        Some(super::AccessLogConfig {
            target: super::LogTarget::File("/var/log/calmcache/access.log".into()),
            format: super::access_log::LogFormat::Combined,
        })
    );
    let stdout = load(&format!(
        "{MINIMAL}\n[access_log]\npath = \"stdout\"\nformat = \"json\"\n"
    ));
    assert_eq!(
        stdout.access_log,
        Some(super::AccessLogConfig {
            target: super::LogTarget::Stdout,
            format: super::access_log::LogFormat::Json,
        })
    );
}

/// The commented-out table `header` of config.example.toml (up to the
/// next one): its header and `key = value` lines, uncommented.
fn example_section(header: &str) -> Vec<&'static str> {
    EXAMPLE
        .lines()
        .skip_while(|line| *line != header)
        .enumerate()
        .take_while(|(i, line)| *i == 0 || !line.starts_with("# ["))
        .filter_map(|(_, line)| line.strip_prefix("# "))
        .filter(|line| line.starts_with('[') || line.contains(" = "))
        .collect()
}

#[test]
fn example_access_log_lines_are_valid() {
    let section = example_section("# [access_log]");
    assert_eq!(section.len(), 3, "{section:?}");
    let config = load(&format!("{MINIMAL}\n{}\n", section.join("\n")));
    let log = config.access_log.unwrap();
    assert_eq!(log.format, super::access_log::LogFormat::Combined);
}

#[test]
fn example_fleet_lines_are_valid_and_show_the_defaults() {
    let section = example_section("# [fleet]");
    assert_eq!(section.len(), 16, "{section:?}");
    // One `redis` (not the cluster alternative), and no password: the
    // example's password and password_file are alternatives too. The TLS
    // files are checked on their own below, the secret file in
    // validate/fleet_secret.rs.
    let skipped = |l: &str| {
        l.starts_with("password") || l.starts_with("tls_") || l.starts_with("secret_file")
    };
    let single: Vec<&str> = section
        .iter()
        .copied()
        .filter(|l| !l.starts_with("redis = [") && !skipped(l))
        .collect();
    let example = load(&format!("{MINIMAL}\n{}\n", single.join("\n")))
        .fleet
        .unwrap();
    let defaults = load(&format!(
        "{MINIMAL}\n[fleet]\nredis = \"redis://127.0.0.1:6379\"\n"
    ))
    .fleet
    .unwrap();
    assert_eq!(example.user.as_deref(), Some("calmcache"));
    assert_eq!(
        super::FleetConfig {
            user: None,
            ..example
        },
        defaults,
        "the example's values are the defaults"
    );
    let cluster: Vec<&str> = section
        .iter()
        .copied()
        .filter(|l| !l.starts_with("redis = \"") && !skipped(l))
        .collect();
    let cluster = load(&format!("{MINIMAL}\n{}\n", cluster.join("\n")))
        .fleet
        .unwrap();
    assert!(cluster.cluster);
    assert_eq!(cluster.nodes.len(), 3);
    // The TLS keys are the real ones: over rediss:// the only problems are
    // the example's files, absent here.
    let tls: Vec<&str> = section
        .iter()
        .filter(|l| l.starts_with("tls_"))
        .copied()
        .collect();
    let found = problems(&format!(
        "{MINIMAL}\n[fleet]\nredis = \"rediss://127.0.0.1:6380\"\n{}\n",
        tls.join("\n")
    ));
    assert_eq!(
        paths(&found),
        ["fleet.tls_ca", "fleet.tls_cert", "fleet.tls_key"]
    );
    assert!(
        found
            .iter()
            .all(|p| p.message.contains(": cannot read the ")),
        "{found:#?}"
    );
}

#[test]
fn a_fleet_lease_too_short_to_renew_is_refused_by_name() {
    let with = |lease: &str| {
        format!("{MINIMAL}\n[fleet]\nredis = \"redis://127.0.0.1:6379\"\nlease = \"{lease}\"\n")
    };
    let problem = only_problem(&with("100ms"));
    assert_eq!(problem.path, "fleet.lease");
    assert!(problem.message.contains("300ms"), "{problem:?}");
    assert_eq!(
        load(&with("300ms")).fleet.unwrap().lease,
        Duration::from_millis(300)
    );
    assert_eq!(
        load(&with("30s")).fleet.unwrap().lease,
        Duration::from_secs(30)
    );
}

#[test]
fn access_log_problems_name_their_key() {
    let with = |keys: &str| format!("{MINIMAL}\n[access_log]\n{keys}\n");
    let missing = only_problem(&with("format = \"json\""));
    assert_eq!(missing.path, "access_log.path");
    assert_eq!(missing.message, "missing required key");
    let relative = only_problem(&with("path = \"logs/access.log\""));
    assert_eq!(
        relative.to_string(),
        r#"access_log.path: "logs/access.log" is not an absolute path (hint: a relative path would depend on the directory calmcache starts in; or write "stdout")"#
    );
    let empty = only_problem(&with("path = \" \""));
    assert_eq!(empty.path, "access_log.path");
    assert_eq!(empty.message, "must not be empty");
    let format = only_problem(&with("path = \"stdout\"\nformat = \"xml\""));
    assert_eq!(
        format.to_string(),
        r#"access_log.format: "xml" is not a log format (hint: "combined" or "json")"#
    );
    let both = problems(&with("path = \"log\"\nformat = \"Combined\""));
    assert_eq!(paths(&both), ["access_log.path", "access_log.format"]);
    let typo = only_problem(&with("path = \"stdout\"\nfromat = \"json\""));
    assert_eq!(typo.path, "access_log.fromat");
    assert_eq!(typo.hint.as_deref(), Some(r#"did you mean "format"?"#));
}

/// A CA, a client certificate it signed, and another key, as PEM files in
/// a fresh directory (removed on drop); also for the upstream TLS tests.
pub(super) struct FleetTlsFiles {
    pub(super) dir: std::path::PathBuf,
    pub(super) ca: String,
    pub(super) cert: String,
    pub(super) key: String,
    pub(super) other_key: String,
}

impl FleetTlsFiles {
    pub(super) fn new(tag: &str) -> FleetTlsFiles {
        let dir =
            std::env::temp_dir().join(format!("calmcache-fleet-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ca = calmcache_testkit::tls::TestCa::new(&dir);
        let client = ca.leaf("client", &[]);
        let other = ca.leaf("other", &["other.test"]);
        let path = |p: &Path| p.display().to_string();
        FleetTlsFiles {
            ca: path(&ca.ca_pem),
            cert: path(&client.cert),
            key: path(&client.key),
            other_key: path(&other.key),
            dir,
        }
    }

    pub(super) fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

impl Drop for FleetTlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fleet_toml(redis: &str, keys: &str) -> String {
    format!("{MINIMAL}\n[fleet]\nredis = {redis}\n{keys}\n")
}

#[test]
fn fleet_tls_files_are_read_with_the_config() {
    let files = FleetTlsFiles::new("ok");
    let keys = format!(
        "tls_ca = {:?}\ntls_cert = {:?}\ntls_key = {:?}",
        files.ca, files.cert, files.key
    );
    let fleet = load(&fleet_toml(r#""rediss://127.0.0.1:6380""#, &keys))
        .fleet
        .unwrap();
    let ca = fleet.tls_ca.as_ref().unwrap();
    assert_eq!(ca.path, Path::new(&files.ca));
    assert_eq!(ca.pem, std::fs::read(&files.ca).unwrap());
    let (cert, key) = fleet.tls_client.as_ref().unwrap();
    assert_eq!(cert.pem, std::fs::read(&files.cert).unwrap());
    assert_eq!(key.pem, std::fs::read(&files.key).unwrap());
    // The key never shows in a debug print, its path does.
    let shown = format!("{fleet:?}");
    assert!(shown.contains(&files.key), "{shown}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    // Each is optional: a CA alone (Redis with tls-auth-clients no), a
    // client certificate alone (a server certificate from a public CA), a
    // cluster's nodes, or none (the system's roots).
    let ca_only = load(&fleet_toml(
        r#""rediss://127.0.0.1:6380""#,
        &format!("tls_ca = {:?}", files.ca),
    ))
    .fleet
    .unwrap();
    assert!(ca_only.tls_ca.is_some() && ca_only.tls_client.is_none());
    let client_only = load(&fleet_toml(
        r#"["rediss://127.0.0.1:7000", "rediss://127.0.0.1:7001"]"#,
        &format!("tls_cert = {:?}\ntls_key = {:?}", files.cert, files.key),
    ))
    .fleet
    .unwrap();
    assert!(client_only.tls_ca.is_none() && client_only.tls_client.is_some());
    let bare = load(&fleet_toml(r#""rediss://127.0.0.1:6380""#, ""))
        .fleet
        .unwrap();
    assert!(bare.tls_ca.is_none() && bare.tls_client.is_none());
}

#[test]
fn fleet_tls_problems_name_their_key() {
    let files = FleetTlsFiles::new("bad");
    let tls = r#""rediss://127.0.0.1:6380""#;
    // Over plain redis:// the keys are a mistake: each is named.
    let plain = problems(&fleet_toml(
        r#""redis://127.0.0.1:6379""#,
        &format!(
            "tls_ca = {:?}\ntls_cert = {:?}\ntls_key = {:?}",
            files.ca, files.cert, files.key
        ),
    ));
    assert_eq!(
        paths(&plain),
        ["fleet.tls_ca", "fleet.tls_cert", "fleet.tls_key"]
    );
    assert_eq!(
        plain[0].to_string(),
        "fleet.tls_ca: only used over TLS, and fleet.redis is not a rediss:// URL \
         (hint: write rediss:// in fleet.redis to reach Redis over TLS, or remove tls_ca)"
    );
    // Both client keys or neither.
    let half = only_problem(&fleet_toml(tls, &format!("tls_cert = {:?}", files.cert)));
    assert_eq!(half.path, "fleet.tls_key");
    assert_eq!(half.message, "tls_cert is set but not tls_key");
    let half = only_problem(&fleet_toml(tls, &format!("tls_key = {:?}", files.key)));
    assert_eq!(half.path, "fleet.tls_cert");
    // Files that cannot be read or are not what they should be.
    let missing = files.dir.join("missing.pem").display().to_string();
    let junk = files.write("junk.pem", "not a pem file\n");
    let fake = files.write(
        "fake.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let cases = [
        (
            format!("tls_ca = {missing:?}"),
            "fleet.tls_ca",
            format!("{missing}: cannot read the CA certificates: "),
        ),
        (
            format!("tls_ca = {junk:?}"),
            "fleet.tls_ca",
            format!("{junk}: no certificate in it"),
        ),
        (
            format!("tls_ca = {fake:?}"),
            "fleet.tls_ca",
            format!("{fake}: not a valid X.509 certificate"),
        ),
        (
            format!("tls_cert = {junk:?}\ntls_key = {:?}", files.key),
            "fleet.tls_cert",
            format!("{junk}: no certificate in it"),
        ),
        (
            format!("tls_cert = {:?}\ntls_key = {junk:?}", files.cert),
            "fleet.tls_key",
            format!("{junk}: cannot read the private key"),
        ),
        (
            format!("tls_cert = {:?}\ntls_key = {missing:?}", files.cert),
            "fleet.tls_key",
            format!("{missing}: cannot read the private key: "),
        ),
        (
            format!(
                "tls_cert = {:?}\ntls_key = {:?}",
                files.cert, files.other_key
            ),
            "fleet.tls_key",
            format!(
                "{}: this key does not belong to the certificate {}",
                files.other_key, files.cert
            ),
        ),
    ];
    for (keys, path, start) in cases {
        let problem = only_problem(&fleet_toml(tls, &keys));
        assert_eq!(problem.path, path, "{keys}: {problem}");
        assert!(problem.message.starts_with(&start), "{keys}: {problem}");
    }
    // A bad certificate and a bad key: both reported at once.
    let both = problems(&fleet_toml(
        tls,
        &format!("tls_cert = {junk:?}\ntls_key = {missing:?}"),
    ));
    assert_eq!(paths(&both), ["fleet.tls_cert", "fleet.tls_key"]);
}

#[test]
fn fleet_urls_that_would_only_fail_when_connecting_are_refused() {
    // redis-rs would refuse #insecure at each connection (this build has
    // no certificate-skipping verifier): a node that looked cut off.
    let insecure = only_problem(&fleet_toml(
        r#""rediss://:secret@127.0.0.1:6380/#insecure""#,
        "",
    ));
    assert_eq!(insecure.path, "fleet.redis");
    assert_eq!(
        insecure.to_string(),
        r#"fleet.redis: "rediss://:***@127.0.0.1:6380/#insecure": #insecure (no check of Redis' certificate) is not supported (hint: trust the CA that signed it instead: tls_ca = "/etc/calmcache/redis-ca.pem")"#
    );
    let in_cluster = only_problem(&fleet_toml(
        r#"["rediss://127.0.0.1:7000", "rediss://127.0.0.1:7001#insecure"]"#,
        "",
    ));
    assert_eq!(in_cluster.path, "fleet.redis[1]");
    // A cluster is reached one way: redis-rs takes the first node's.
    let mixed = only_problem(&fleet_toml(
        r#"["rediss://127.0.0.1:7000", "redis://127.0.0.1:7001"]"#,
        "",
    ));
    assert_eq!(mixed.path, "fleet.redis");
    assert_eq!(
        mixed.message,
        "the cluster's nodes mix redis:// and rediss://"
    );
}

#[test]
fn hosts_take_nginx_server_name_forms_and_default_the_warm_host() {
    let config = load(&with_route(
        "hosts = [\"Example.com\", \"*.example.org\", \".example.net\"]\nzone = \"ssd\"\nwarm = [\"/\"]",
    ));
    let route = &config.routes[0];
    let shown: Vec<String> = route
        .matching
        .hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(shown, ["example.com", "*.example.org", ".example.net"]);
    assert!(
        config
            .summary()
            .contains("route0 for example.com *.example.org .example.net -> app via ssd"),
        "{}",
        config.summary()
    );
    assert_eq!(route.warm.host.as_deref(), Some("example.com"));
    // Without an exact name: no default (the listen address, as before).
    let config = load(&with_route("hosts = [\"*.example.org\"]"));
    assert_eq!(config.routes[0].warm.host, None);
    assert!(
        load(MINIMAL).routes[0].matching.hosts.is_empty(),
        "no key: every host"
    );
}

#[test]
fn bad_hosts_are_named_with_their_index_and_what_is_wrong() {
    let found = problems(&with_route(
        "hosts = [\"ok.test\", \"example.*\", \"a.test:80\", \"~^www\"]",
    ));
    assert_eq!(
        paths(&found),
        [
            "routes[0].hosts[1]",
            "routes[0].hosts[2]",
            "routes[0].hosts[3]"
        ]
    );
    assert!(found[1].message.contains("port"), "{}", found[1].message);
    assert!(found[0].hint.as_deref().unwrap().contains("*.example.com"));
    let empty = only_problem(&with_route("hosts = []"));
    assert_eq!(empty.path, "routes[0].hosts");
    assert_eq!(
        empty.hint.as_deref(),
        Some("omit hosts to answer for every host")
    );
    let warm = only_problem(&with_route(
        "hosts = [\"a.test\"]\nzone = \"ssd\"\nwarm = [\"/\"]\nwarm_host = \"b.test\"",
    ));
    assert_eq!(warm.path, "routes[0].warm_host");
    assert!(
        warm.message.contains("not one of the route's hosts"),
        "{}",
        warm.message
    );
    let unknown = only_problem(&with_route("host = [\"a.test\"]"));
    assert!(
        unknown.message.contains("hosts"),
        "did you mean: {unknown:?}"
    );
}

#[test]
fn a_route_behind_a_catch_all_is_warned_about() {
    let routes = |text: &str| {
        load(&with_route(&format!(
            "{text}\n[[routes]]\nname = \"later\"\nupstream = \"app\"\nmatch = '^/api/'\nhosts = [\"a.test\"]"
        )))
        .warnings()
    };
    // The first route takes every request: the later one is never used.
    let warned = routes("");
    assert_eq!(paths(&warned), ["routes[1]"], "{warned:#?}");
    assert!(warned[0]
        .message
        .contains("routes[0] (route0) has no `match`"));
    // Its match, or hosts the later route is not among, leave room.
    assert!(routes("match = '^/static/'").is_empty());
    assert!(routes("hosts = [\"b.test\"]").is_empty());
    assert!(
        routes("hosts = [\"a.test\", \"b.test\"]").len() == 1,
        "a.test is taken"
    );
    assert!(load(MINIMAL).warnings().is_empty());
}

#[test]
fn path_matches_the_path_only_and_match_both() {
    // Issue 25: a static-files `match` also took `/account.php?x.css`.
    let config = load(&with_route("path = '\\.(css|js)$'\nzone = \"ssd\""));
    let route = &config.routes[0];
    assert!(route.matches("/a/site.css"));
    assert!(route.matches("/a/site.css?v=3"));
    assert!(!route.matches("/account.php?x.css"));
    assert!(!route.matches("/account.php?.css"));
    assert!(!route.matches_all());
    let both = load(&with_route("path = '^/search$'\nmatch = '[?&]q='"));
    assert!(both.routes[0].matches("/search?q=a"));
    assert!(!both.routes[0].matches("/search"));
    assert!(!both.routes[0].matches("/search/x?q=a"));
    let bad = only_problem(&with_route("path = '(['"));
    assert_eq!(bad.path, "routes[0].path");
    assert!(bad.message.contains("invalid regex"), "{}", bad.message);
    // A route with `path` is no catch-all: a later one is reachable.
    let later = "\n[[routes]]\nupstream = \"app\"\nzone = \"ssd\"";
    assert!(load(&with_route(&format!("path = '^/a/'{later}")))
        .warnings()
        .is_empty());
}

#[test]
fn a_match_anchored_at_the_end_that_a_query_satisfies_is_warned_about() {
    let warned = load(&with_route("match = '\\.(css|js|png)$'\nzone = \"ssd\"")).warnings();
    assert_eq!(paths(&warned), ["routes[0].match"], "{warned:#?}");
    assert!(
        warned[0].message.contains("the path and the query"),
        "{}",
        warned[0].message
    );
    assert!(
        warned[0]
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains(r"path = '\.(css|js|png)$'")),
        "{:?}",
        warned[0].hint
    );
    for quiet in [
        "path = '\\.(css|js|png)$'",
        "match = '^/api/'",
        "match = '^/(admin|account)(/|\\?|$)'",
        "match = '^/favicon\\.ico$'",
    ] {
        assert!(load(&with_route(quiet)).warnings().is_empty(), "{quiet}");
    }
}

#[test]
fn the_origin_budget_keys_are_read_and_checked() {
    let upstream = |keys: &str| {
        MINIMAL.replace(
            "[\"127.0.0.1:8081\"]",
            &format!("[\"127.0.0.1:8081\"]\n{keys}"),
        )
    };
    // Defaults: no budget, a 5 s queue, no fleet budget, no stale_if_busy.
    let config = load(MINIMAL);
    let u = &config.upstreams[0];
    assert_eq!(
        (u.max_inflight, u.queue_timeout, u.fleet_max_inflight),
        (0, Duration::from_secs(5), 0)
    );
    assert_eq!(config.routes[0].freshness.stale_if_busy, Duration::ZERO);
    let set = load(&format!(
        "{}stale_if_busy = \"10m\"\n",
        upstream("max_inflight = 8\nqueue_timeout = \"2s\"\nfleet_max_inflight = 20")
    ));
    let u = &set.upstreams[0];
    assert_eq!(
        (u.max_inflight, u.queue_timeout, u.fleet_max_inflight),
        (8, Duration::from_secs(2), 20)
    );
    assert_eq!(
        set.routes[0].freshness.stale_if_busy,
        Duration::from_secs(600)
    );
    // A queue no request may wait in: refused, naming the key.
    let zero = only_problem(&upstream("max_inflight = 4\nqueue_timeout = \"0s\""));
    assert_eq!(zero.path, "upstreams.app.queue_timeout");
    assert!(zero.message.contains("max_inflight"), "{}", zero.message);
    // Without a budget a 0 s queue means nothing: accepted.
    assert!(load(&upstream("queue_timeout = \"0s\"")).upstreams[0]
        .queue_timeout
        .is_zero());
    let long = only_problem(&upstream("queue_timeout = \"400d\""));
    assert_eq!(long.path, "upstreams.app.queue_timeout");
    let negative = only_problem(&upstream("max_inflight = -1"));
    assert_eq!(negative.path, "upstreams.app.max_inflight");
    // A fleet budget without a local one: every queued request would poll
    // Redis. Refused, naming the key.
    let alone = only_problem(&upstream("fleet_max_inflight = 10"));
    assert_eq!(alone.path, "upstreams.app.fleet_max_inflight");
    assert!(alone.message.contains("max_inflight"), "{}", alone.message);
    let bad = only_problem(&format!("{MINIMAL}stale_if_busy = 5\n"));
    assert_eq!(bad.path, "routes[0].stale_if_busy");
}

#[test]
fn cache_post_with_a_route_ttl_is_warned_about() {
    let warned = load(&with_route("cache_post = true\nttl = { 200 = \"1m\" }")).warnings();
    assert_eq!(paths(&warned), ["routes[0].cache_post"], "{warned:#?}");
    assert!(warned[0].message.contains("never reaches the origin"));
    for alone in ["cache_post = true", "ttl = { 200 = \"1m\" }"] {
        let warned = load(&with_route(alone)).warnings();
        assert!(paths(&warned).is_empty(), "{alone}: {warned:#?}");
    }
}

#[test]
fn a_fleet_budget_without_fleet_mode_is_warned_about() {
    let text = MINIMAL.replace(
        "[\"127.0.0.1:8081\"]",
        "[\"127.0.0.1:8081\"]\nmax_inflight = 4\nfleet_max_inflight = 10",
    );
    let warned = load(&text).warnings();
    assert_eq!(
        paths(&warned),
        ["upstreams.app.fleet_max_inflight"],
        "{warned:#?}"
    );
    assert!(warned[0].message.contains("fleet mode is off"));
}

/// `server.proxy_protocol_listeners` and `proxy_protocol_from`: each
/// listener one of the server's, each source a network, neither without
/// the other (no "anyone" default); the summary names them.
#[test]
fn proxy_protocol_keys_are_checked_and_summed_up() {
    let default = load(MINIMAL);
    assert!(!default.server.proxy_protocol.is_on());
    let keys = |k: &str| MINIMAL.replace("[server]", &format!("[server]\n{k}"));
    let on = load(&keys(
        "proxy_protocol_listeners = [\"127.0.0.1:0\"]\nproxy_protocol_from = [\"10.0.0.0/8\", \"192.0.2.1\"]",
    ));
    let pp = &on.server.proxy_protocol;
    assert_eq!(pp.listeners, ["127.0.0.1:0".parse().unwrap()]);
    assert!(pp.trusts("10.1.2.3".parse().unwrap()));
    assert!(
        pp.trusts("::ffff:192.0.2.1".parse().unwrap()),
        "IPv4-mapped"
    );
    assert!(!pp.trusts("192.0.2.2".parse().unwrap()));
    assert!(
        on.summary()
            .contains("PROXY protocol on 127.0.0.1:0 from 10.0.0.0/8, 192.0.2.1/32"),
        "{}",
        on.summary()
    );
    let alone = only_problem(&keys("proxy_protocol_listeners = [\"127.0.0.1:0\"]"));
    assert_eq!(alone.path, "server.proxy_protocol_from");
    assert!(alone
        .message
        .contains("every connection to those listeners would be closed"));
    let sources = only_problem(&keys("proxy_protocol_from = [\"10.0.0.0/8\"]"));
    assert_eq!(sources.path, "server.proxy_protocol_listeners");
    let elsewhere = only_problem(&keys(
        "proxy_protocol_listeners = [\"127.0.0.1:9\"]\nproxy_protocol_from = [\"10.0.0.0/8\"]",
    ));
    assert_eq!(elsewhere.path, "server.proxy_protocol_listeners[0]");
    assert!(elsewhere
        .message
        .contains("neither in server.listen nor in server.tls_listen"));
    let bad = only_problem(&keys(
        "proxy_protocol_listeners = [\"127.0.0.1:0\"]\nproxy_protocol_from = [\"10.0.0.0/33\"]",
    ));
    assert_eq!(bad.path, "server.proxy_protocol_from[0]");
    let name = problems(&keys(
        "proxy_protocol_listeners = [\"lb:80\"]\nproxy_protocol_from = [\"10.0.0.0/8\"]",
    ));
    assert_eq!(paths(&name), ["server.proxy_protocol_listeners[0]"]);
}
