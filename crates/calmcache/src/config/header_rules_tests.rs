//! `listeners`, `request_headers`, `response_headers` and `expires`: what
//! `check` takes and what it refuses, each with its TOML path and reason.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::Expires;
use crate::config::{Config, ConfigError, Problem};

/// A config with a plain and a TLS-less second plain listener, a zone, and
/// one route with `keys` (cached unless `keys` says otherwise).
fn config(route: &str) -> String {
    format!(
        r#"
[server]
listen = ["127.0.0.1:8080", "127.0.0.2:8080"]

[upstreams.app]
servers = ["127.0.0.1:8081"]

[zones.ram]
kind = "memory"
max_size = "1MiB"

[[routes]]
upstream = "app"
{route}
"#
    )
}

fn valid(route: &str) -> Config {
    Config::from_toml(&config(route), "t.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn problems(route: &str) -> Vec<Problem> {
    match Config::from_toml(&config(route), "t.toml") {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected problems for {route}, got {other:?}"),
    }
}

/// The one problem of `route`: its path, and its text (message and hint).
fn refused(route: &str) -> (String, String) {
    let found = problems(route);
    assert_eq!(found.len(), 1, "{route}: {found:#?}");
    let p = &found[0];
    (
        p.path.clone(),
        format!("{} {}", p.message, p.hint.clone().unwrap_or_default()),
    )
}

#[test]
fn rules_parse_with_nginx_meanings() {
    let c = valid(
        r#"zone = "ram"
listeners = ["127.0.0.2:8080"]
request_headers = { set = { Host = "app.internal", "X-Real-IP" = "$remote_addr", "X-Debug" = "" }, remove = ["X-Old"] }
response_headers = { add = { "X-Frame-Options" = "DENY" }, always = { "X-Cache-Status" = "$upstream_cache_status" }, remove = ["X-Powered-By", "Set-Cookie"] }
expires = "1h""#,
    );
    let route = &c.routes[0];
    assert_eq!(
        route.matching.listeners,
        ["127.0.0.2:8080".parse().unwrap()]
    );
    let set: Vec<&str> = route
        .headers
        .request
        .set
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(set, ["host", "x-real-ip"]);
    let removed: Vec<&str> = route
        .headers
        .request
        .remove
        .iter()
        .map(|n| n.as_str())
        .collect();
    assert_eq!(
        removed,
        ["x-old", "x-debug"],
        "an empty value removes, as NGINX"
    );
    let response = &route.headers.response;
    assert_eq!(response.add.len(), 1);
    assert_eq!(response.always.len(), 1);
    assert_eq!(response.remove.len(), 2, "hiding Set-Cookie is allowed");
    assert_eq!(response.expires, Expires::After(Duration::from_secs(3600)));
    assert!(
        c.summary()
            .contains("route0 on 127.0.0.2:8080 -> app via ram"),
        "{}",
        c.summary()
    );
    assert!(c
        .summary()
        .contains("request_headers 4, response_headers 4, expires 3600s"));
}

#[test]
fn defaults_touch_nothing() {
    let c = valid("");
    let route = &c.routes[0];
    assert!(route.matching.listeners.is_empty(), "every listener");
    assert!(route.headers.request.is_empty());
    assert!(route.headers.response.is_empty());
    assert_eq!(
        valid(r#"expires = "epoch""#).routes[0]
            .headers
            .response
            .expires,
        Expires::Epoch
    );
    assert_eq!(
        valid(r#"expires = "max""#).routes[0]
            .headers
            .response
            .expires,
        Expires::Max
    );
}

#[test]
fn a_listener_not_configured_is_refused_listing_the_listeners() {
    let (path, text) = refused(r#"listeners = ["0.0.0.0:443"]"#);
    assert_eq!(path, "routes[0].listeners[0]");
    assert!(
        text.contains("neither in server.listen nor in server.tls_listen"),
        "{text}"
    );
    assert!(text.contains("127.0.0.1:8080, 127.0.0.2:8080"), "{text}");
    let (path, text) = refused(r#"listeners = ["localhost:80"]"#);
    assert_eq!(path, "routes[0].listeners[0]");
    assert!(text.contains("is not an address"), "{text}");
    let (path, text) = refused("listeners = []");
    assert_eq!(path, "routes[0].listeners");
    assert!(text.contains("take no request"), "{text}");
}

#[test]
fn request_rules_may_not_touch_what_the_cache_reads() {
    let cases = [
        (r#"request_headers = { set = { "Accept-Encoding" = "gzip" } }"#,
         r#"routes[0].request_headers.set.Accept-Encoding"#, "negotiates codings"),
        (r#"request_headers = { remove = ["If-None-Match"] }"#,
         "routes[0].request_headers.remove[0]", "conditional and range"),
        (r#"request_headers = { remove = ["Range"] }"#,
         "routes[0].request_headers.remove[0]", "conditional and range"),
        (r#"request_headers = { set = { Connection = "close" } }"#,
         "routes[0].request_headers.set.Connection", "hop-by-hop or framing"),
        (r#"request_headers = { set = { "Content-Length" = "0" } }"#,
         "routes[0].request_headers.set.Content-Length", "hop-by-hop or framing"),
        ("key = \"$host$uri$http_x_device\"\nrequest_headers = { set = { \"X-Device\" = \"phone\" } }",
         "routes[0].request_headers.set.X-Device", "key reads it"),
        ("key = \"$host$uri$cookie_lang\"\nrequest_headers = { remove = [\"Cookie\"] }",
         "routes[0].request_headers.remove[0]", "key reads it"),
    ];
    for (route, path, why) in cases {
        let (got, text) = refused(route);
        assert_eq!(got, path, "{route}");
        assert!(text.contains(why), "{route}: {text}");
    }
    // Host may be set though the default key reads $host.
    valid(r#"request_headers = { set = { Host = "app.internal" } }"#);
}

#[test]
fn response_rules_may_not_touch_what_the_cache_answers_by() {
    let cached = "zone = \"ram\"\n";
    let cases = [
        (r#"response_headers = { add = { "Content-Length" = "1" } }"#, "describes the body"),
        (r#"response_headers = { remove = ["Content-Encoding"] }"#, "describes the body"),
        (r#"response_headers = { always = { Vary = "Cookie" } }"#, "selected the answer by"),
        (r#"response_headers = { remove = ["Age"] }"#, "the cache's own report"),
        (r#"response_headers = { add = { "Cache-Status" = "x" } }"#, "the cache's own report"),
        (r#"response_headers = { add = { "Set-Cookie" = "a=b" } }"#, "a cookie is per client"),
        (r#"response_headers = { add = { ETag = "\"1\"" } }"#, "stored validators"),
        (r#"response_headers = { remove = ["Last-Modified"] }"#, "stored validators"),
        ("expires = \"1h\"\nresponse_headers = { always = { \"Cache-Control\" = \"no-store\" } }",
         "`expires` sets it"),
    ];
    for (route, why) in cases {
        let (path, text) = refused(&format!("{cached}{route}"));
        assert!(
            path.starts_with("routes[0].response_headers."),
            "{route}: {path}"
        );
        assert!(text.contains(why), "{route}: {text}");
    }
    // An uncached route's validators are the origin's to rewrite.
    valid(r#"response_headers = { remove = ["ETag"] }"#);
}

#[test]
fn bad_names_and_values_are_refused_with_their_path() {
    let cases = [
        (
            r#"request_headers = { set = { "X Bad" = "1" } }"#,
            r#"routes[0].request_headers.set."X Bad""#,
            "not a header field name",
        ),
        (
            r#"response_headers = { add = { "X-A" = "a\nb" } }"#,
            "routes[0].response_headers.add.X-A",
            "control characters",
        ),
        (
            r#"request_headers = { set = { "X-A" = "$remote_adr" } }"#,
            "routes[0].request_headers.set.X-A",
            "did you mean \"$remote_addr\"",
        ),
        (
            r#"request_headers = { set = { "X-A" = "$upstream_cache_status" } }"#,
            "routes[0].request_headers.set.X-A",
            "only in response_headers",
        ),
        (
            r#"request_headers = { set = { "X-A" = "1", "x-a" = "2" } }"#,
            "routes[0].request_headers.set.x-a",
            "given twice",
        ),
        (
            r#"request_headers = { set = { "X-A" = "1" }, remove = ["X-A"] }"#,
            "routes[0].request_headers.remove",
            "both given a value and removed",
        ),
        (
            r#"response_headers = { add = { "X-A" = "1" }, always = { "X-A" = "1" } }"#,
            "routes[0].response_headers.always.x-a",
            "both `add` and `always`",
        ),
        (
            r#"request_headers = { sett = { "X-A" = "1" } }"#,
            "routes[0].request_headers",
            "sett",
        ),
        (r#"expires = "soon""#, "routes[0].expires", "e.g. \"1h\""),
        ("expires = 3600", "routes[0].expires", "not a duration"),
    ];
    for (route, path, why) in cases {
        let found = problems(route);
        let hit = found.iter().find(|p| p.path.starts_with(path));
        let Some(p) = hit else {
            panic!("{route}: no problem at {path}: {found:#?}");
        };
        let text = format!("{} {}", p.message, p.hint.clone().unwrap_or_default());
        assert!(text.contains(why), "{route}: {text}");
    }
}

#[test]
fn a_catch_all_on_one_listener_shadows_only_routes_on_it() {
    let text = |later: &str| {
        config(&format!(
            "listeners = [\"127.0.0.1:8080\"]\n\n[[routes]]\nupstream = \"app\"\n{later}"
        ))
    };
    let never = |later: &str| {
        let c = Config::from_toml(&text(later), "t.toml").unwrap();
        c.warnings()
            .iter()
            .any(|w| w.message.contains("never used"))
    };
    assert!(
        !never("listeners = [\"127.0.0.2:8080\"]"),
        "the other listener's route"
    );
    assert!(
        never("listeners = [\"127.0.0.1:8080\"]"),
        "the same listener's"
    );
    assert!(
        !never(""),
        "a route on every listener still takes the other one's requests"
    );
}

/// The review of issue 28: a request rule sending a client's own field or
/// cookie to the origin on a caching route, with a key that does not read
/// it, lets one client's answer (its tenant, its session) be stored for
/// every client. `check` warns, naming the rule and the variable.
#[test]
fn a_request_rule_reading_what_the_key_does_not_is_warned_about() {
    let warned = |route: &str| -> Vec<(String, String)> {
        valid(route)
            .warnings()
            .into_iter()
            .filter(|w| w.path.contains("request_headers"))
            .map(|w| (w.path, w.message))
            .collect()
    };
    let rule = r#"request_headers = { set = { "X-Org" = "$http_x_tenant", "X-Real-IP" = "$remote_addr" } }"#;
    let found = warned(&format!("zone = \"ram\"\n{rule}"));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].0, "routes[0].request_headers.set.x-org");
    assert!(found[0].1.contains("$http_x_tenant"), "{}", found[0].1);
    // Keyed, or on a route that stores nothing: no warning.
    let keyed = format!("zone = \"ram\"\nkey = \"$scheme$host$request_uri$http_x_tenant\"\n{rule}");
    assert!(warned(&keyed).is_empty());
    assert!(warned(rule).is_empty());
}
