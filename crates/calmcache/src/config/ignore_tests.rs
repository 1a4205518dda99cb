//! Config tests for issue 28's items 4 and 5: a route's `ignore_headers`
//! (NGINX's proxy_ignore_headers) and unix-socket upstream servers; each
//! bad value reported with its TOML path.

#![allow(clippy::unwrap_used)]

use calmcache_core::{IgnorableField, IgnoredFields};

use super::{Config, ConfigError, Problem};

fn text(servers: &str, upstream: &str, route: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\n[upstreams.app]\nservers = {servers}\n\
         {upstream}\n\n[zones.ram]\nkind = \"memory\"\nmax_size = \"1MiB\"\n\n\
         [[routes]]\nupstream = \"app\"\nzone = \"ram\"\n{route}\n"
    )
}

fn route(keys: &str) -> String {
    text(r#"["127.0.0.1:8081"]"#, "", keys)
}

fn load(text: &str) -> Config {
    match Config::from_toml(text, "test.toml") {
        Ok(config) => config,
        Err(error) => panic!("expected a valid config, got:\n{error}"),
    }
}

fn problems(text: &str) -> Vec<String> {
    match Config::from_toml(text, "test.toml") {
        Err(ConfigError::Invalid { problems, .. }) => {
            problems.iter().map(Problem::to_string).collect()
        }
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

#[test]
fn ignore_headers_default_to_none() {
    let config = load(&route(""));
    assert_eq!(
        config.routes[0].freshness.ignore_headers,
        IgnoredFields::NONE
    );
}

#[test]
fn ignore_headers_read_nginx_names_in_any_case() {
    let config = load(&route(
        r#"ignore_headers = ["Set-Cookie", "cache-control", "EXPIRES", "Vary", "X-Accel-Expires"]"#,
    ));
    let ignored = config.routes[0].freshness.ignore_headers;
    for field in IgnorableField::ALL {
        assert!(ignored.contains(field), "{field:?}");
    }
}

#[test]
fn ignore_headers_refuse_other_names_and_repeats() {
    let found = problems(&route(
        r#"ignore_headers = ["Set-Cookie", "X-Accel-Redirect", "set-cookie", ""]"#,
    ));
    let fields = "fields: Set-Cookie, Cache-Control, Expires, Vary, X-Accel-Expires";
    assert_eq!(
        found,
        [
            format!(
                "routes[0].ignore_headers[1]: \"X-Accel-Redirect\" is not a field a route can \
                 ignore ({fields})"
            ),
            "routes[0].ignore_headers[2]: \"set-cookie\" is listed twice".to_owned(),
            format!(
                "routes[0].ignore_headers[3]: \"\" is not a field a route can ignore ({fields})"
            ),
        ]
    );
    let typed = problems(&route(r#"ignore_headers = "Vary""#));
    assert_eq!(typed.len(), 1, "{typed:?}");
    assert!(
        typed[0].starts_with("routes[0].ignore_headers"),
        "{typed:?}"
    );
}

#[test]
fn an_ignored_vary_is_warned_of_and_louder_without_compress() {
    let warned = load(&route(r#"ignore_headers = ["Vary"]"#)).warnings();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert_eq!(warned[0].path, "routes[0].ignore_headers");
    assert!(warned[0]
        .message
        .contains("one stored answer goes to every client"));
    assert!(
        warned[0].message.contains("Accept-Encoding"),
        "{}",
        warned[0].message
    );
    let compressing = load(&route("ignore_headers = [\"Vary\"]\ncompress = [\"gzip\"]")).warnings();
    assert_eq!(compressing.len(), 1, "{compressing:#?}");
    assert!(!compressing[0].message.contains("Accept-Encoding"));
    // Nothing else ignored is warned of.
    let quiet = route(r#"ignore_headers = ["Set-Cookie", "Cache-Control", "Expires"]"#);
    assert!(load(&quiet).warnings().is_empty());
}

#[test]
fn unix_servers_are_read_in_both_forms() {
    let servers =
        r#"["unix:/run/app.sock", { address = "unix:/run/b.sock", weight = 2 }, "127.0.0.1:8081"]"#;
    let config = load(&text(servers, "", ""));
    let read = &config.upstreams[0].servers;
    assert_eq!(
        read[0].unix.as_deref(),
        Some(std::path::Path::new("/run/app.sock"))
    );
    assert_eq!(read[0].label(), "unix:/run/app.sock");
    assert_eq!(
        (read[1].label(), read[1].weight),
        ("unix:/run/b.sock".to_owned(), 2)
    );
    assert_eq!(read[2].unix, None);
    assert_eq!(read[2].label(), "127.0.0.1:8081");
    assert_ne!(read[0].address, read[1].address, "one pool name per socket");
    // A socket absent at start is no config error: the app may start later.
    load(&text(
        r#"["unix:/nonexistent/calmcache-test.sock"]"#,
        "",
        "",
    ));
}

#[test]
fn bad_unix_servers_are_refused_with_their_toml_path() {
    let long = format!("unix:/{}", "s".repeat(107));
    let servers = format!(
        r#"["unix:", "unix:run/app.sock", {{ address = "unix:relative.sock", max_fails = 2 }}, "{long}"]"#
    );
    let found = problems(&text(&servers, "", ""));
    let paths: Vec<&str> = found
        .iter()
        .map(|p| p.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "upstreams.app.servers[0]",
            "upstreams.app.servers[1]",
            "upstreams.app.servers[2].address",
            "upstreams.app.servers[3]",
        ],
        "{found:#?}"
    );
    assert!(found[0].contains("names no socket"), "{}", found[0]);
    assert!(found[1].contains("must be absolute"), "{}", found[1]);
    assert!(
        found[3].contains("108 bytes, more than a unix socket address holds (107)"),
        "{}",
        found[3]
    );
}

#[test]
fn tls_over_a_unix_socket_is_refused_with_the_reason() {
    let found = problems(&text(r#"["unix:/run/app.sock"]"#, "tls = true", ""));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("upstreams.app.tls: true, but unix:/run/app.sock is a unix socket"),
        "{}",
        found[0]
    );
    // An https:// server beside a unix one is fine: TLS is per server.
    load(&text(
        r#"["unix:/run/app.sock", "https://127.0.0.1:8443"]"#,
        "",
        "",
    ));
}

#[test]
fn check_summary_shows_ignored_fields_and_unix_servers() {
    let one = load(&text(
        r#"["unix:/run/app.sock", "127.0.0.1:8081"]"#,
        "",
        r#"ignore_headers = ["Set-Cookie", "Vary"]"#,
    ))
    .summary();
    assert!(one.contains("(app: 2 servers, 1 on unix sockets)"), "{one}");
    assert!(one.contains("ignore_headers Set-Cookie+Vary"), "{one}");
    let all = load(&text(r#"["unix:/run/app.sock"]"#, "", "")).summary();
    assert!(all.contains("(app: 1 server, unix sockets)"), "{all}");
}
