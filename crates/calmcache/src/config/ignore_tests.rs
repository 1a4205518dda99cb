//! Config tests for issue 28's items 4 and 5: a route's `ignore_headers`
//! (NGINX's proxy_ignore_headers) and unix-socket upstream servers; each
//! bad value reported with its TOML path.

#![allow(clippy::unwrap_used)]

use calmcache_core::{IgnorableField, IgnoredFields};

use super::{Config, ConfigError, Problem};

fn config(servers: &str, upstream: &str, route: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\n[upstreams.app]\nservers = {servers}\n\
         {upstream}\n\n[zones.ram]\nkind = \"memory\"\nmax_size = \"1MiB\"\n\n\
         [[routes]]\nupstream = \"app\"\nzone = \"ram\"\n{route}\n"
    )
}

fn route(keys: &str) -> String {
    config(r#"["127.0.0.1:8081"]"#, "", keys)
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
    assert_eq!(config.routes[0].ignore_headers, IgnoredFields::NONE);
}

#[test]
fn ignore_headers_read_nginx_names_in_any_case() {
    let config = load(&route(
        r#"ignore_headers = ["Set-Cookie", "cache-control", "EXPIRES", "Vary", "X-Accel-Expires"]"#,
    ));
    let ignored = config.routes[0].ignore_headers;
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
