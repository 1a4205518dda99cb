#![allow(clippy::unwrap_used)]

use super::*;

fn render(template: &str, target: &str, headers: &[(&str, &str)]) -> String {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let req = RequestView {
        scheme: "https",
        method: &Method::GET,
        host: "Example.COM:8443",
        path_and_query: target,
        headers: &map,
    };
    let mut out = String::from("left over");
    KeyTemplate::parse(template).unwrap().render(&req, &mut out);
    out
}

fn error(template: &str) -> String {
    KeyTemplate::parse(template).unwrap_err()
}

#[test]
fn repeated_keyed_parts_are_ambiguous() {
    let t = KeyTemplate::parse("$uri|$arg_lang|$cookie_id|$http_x_tenant").unwrap();
    let h = |pairs: &[(&str, &str)]| {
        let mut map = HeaderMap::new();
        for (n, v) in pairs {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    };
    assert!(!t.is_ambiguous("lang=de&x=1&x=2", &h(&[("cookie", "id=1; other=2")])));
    assert!(t.is_ambiguous("lang=de&lang=fr", &h(&[])));
    assert!(t.is_ambiguous("lang&lang=fr", &h(&[])));
    assert!(t.is_ambiguous("", &h(&[("cookie", "id=1; id=2")])));
    assert!(t.is_ambiguous("", &h(&[("cookie", "id=1"), ("cookie", "id=2")])));
    assert!(t.is_ambiguous("", &h(&[("x-tenant", "a"), ("x-tenant", "b")])));
    assert!(!t.is_ambiguous("language=x&lang=de", &h(&[("cookie", "idx=1; id=2")])));
}

#[test]
fn default_template() {
    let default = KeyTemplate::default();
    assert_eq!(KeyTemplate::parse(KeyTemplate::DEFAULT).unwrap(), default);
    assert!(default.is_default());
    assert_eq!(default.as_str(), "$scheme$host$uri$is_args$args");
    let braced = KeyTemplate::parse("${scheme}${host}${uri}${is_args}${args}").unwrap();
    assert!(braced.is_default());
    assert_eq!(braced.as_str(), "${scheme}${host}${uri}${is_args}${args}");
    for other in ["$scheme$host$request_uri", "$scheme$host$uri$is_args$args|"] {
        assert!(!KeyTemplate::parse(other).unwrap().is_default(), "{other}");
    }
    assert_eq!(
        render(KeyTemplate::DEFAULT, "/a/b?c=d", &[]),
        "httpsexample.com:8443/a/b?c=d"
    );
    assert_eq!(
        render(KeyTemplate::DEFAULT, "/a/b", &[]),
        "httpsexample.com:8443/a/b"
    );
}

#[test]
fn request_line_variables() {
    assert_eq!(render("$scheme", "/", &[]), "https");
    assert_eq!(render("$host", "/", &[]), "example.com:8443");
    assert_eq!(render("$method", "/", &[]), "GET");
    assert_eq!(render("$uri", "/a%2Fb/../c?x=1", &[]), "/a%2Fb/../c");
    assert_eq!(render("$args", "/a?x=1&y=%20", &[]), "x=1&y=%20");
    assert_eq!(render("$args", "/a", &[]), "");
    assert_eq!(render("$is_args", "/a?x", &[]), "?");
    assert_eq!(render("$is_args", "/a?", &[]), "");
    assert_eq!(render("$is_args", "/a", &[]), "");
    assert_eq!(render("$request_uri", "/a?x=1", &[]), "/a?x=1");
    assert_eq!(render("$request_uri", "/a?", &[]), "/a?");
}

#[test]
fn empty_host_when_absent() {
    let headers = HeaderMap::new();
    let req = RequestView {
        scheme: "http",
        method: &Method::HEAD,
        host: "",
        path_and_query: "/",
        headers: &headers,
    };
    let mut out = String::new();
    let template = KeyTemplate::parse("$method|$host|$uri").unwrap();
    template.render(&req, &mut out);
    assert_eq!(out, "HEAD||/");
}

#[test]
fn arg_variables() {
    let query = "/p?page=2&Sort=asc&bare&page=3&e%20n=x&empty=";
    assert_eq!(render("$arg_page", query, &[]), "2");
    assert_eq!(render("$arg_Sort", query, &[]), "asc");
    assert_eq!(render("[$arg_sort]", query, &[]), "[]");
    assert_eq!(render("[$arg_bare]", query, &[]), "[]");
    assert_eq!(render("[$arg_empty]", query, &[]), "[]");
    assert_eq!(render("[$arg_missing]", query, &[]), "[]");
    assert_eq!(render("[$arg_page]", "/p", &[]), "[]");
    assert_eq!(render("$arg_q", "/s?q=a%20b+c", &[]), "a%20b+c");
}

#[test]
fn http_variables() {
    let headers = [
        ("accept-language", "de"),
        ("x-device", "mobile"),
        ("x-device", "tablet"),
    ];
    assert_eq!(render("$http_accept_language", "/", &headers), "de");
    assert_eq!(render("$http_X_Device", "/", &headers), "mobile, tablet");
    assert_eq!(render("[$http_authorization]", "/", &headers), "[]");
}

#[test]
fn header_bytes_that_are_not_utf8_stay_distinct() {
    let mut map = HeaderMap::new();
    map.insert("x-a", http::HeaderValue::from_bytes(b"caf\xe9").unwrap());
    map.insert("x-b", http::HeaderValue::from_bytes(b"caf\xe8").unwrap());
    map.insert("x-c", http::HeaderValue::from_static("caf\\xe9"));
    let req = RequestView {
        scheme: "http",
        method: &Method::GET,
        host: "h",
        path_and_query: "/",
        headers: &map,
    };
    let mut outs = Vec::new();
    for template in ["$http_x_a", "$http_x_b", "$http_x_c"] {
        let mut out = String::new();
        KeyTemplate::parse(template).unwrap().render(&req, &mut out);
        outs.push(out);
    }
    assert_eq!(outs, ["caf\\xe9", "caf\\xe8", "caf\\x5cxe9"]);
}

#[test]
fn cookie_variables() {
    let headers = [
        ("cookie", "session=abc; lang=de"),
        ("cookie", "theme=dark;lang=fr"),
    ];
    assert_eq!(render("$cookie_session", "/", &headers), "abc");
    assert_eq!(render("$cookie_lang", "/", &headers), "de");
    assert_eq!(render("$cookie_theme", "/", &headers), "dark");
    assert_eq!(render("[$cookie_Theme]", "/", &headers), "[]");
    assert_eq!(render("[$cookie_sess]", "/", &headers), "[]");
    assert_eq!(render("[$cookie_session]", "/", &[]), "[]");
}

#[test]
fn braces_and_literals() {
    assert_eq!(render("${uri}x", "/a?b", &[]), "/ax");
    assert_eq!(render("${arg_b}_$uri", "/a?b=1", &[]), "1_/a");
    assert_eq!(render("v2:$uri:{}é", "/a", &[]), "v2:/a:{}é");
    assert_eq!(render("$uri$uri", "/a", &[]), "/a/a");
    assert_eq!(render("$uri-$method", "/a", &[]), "/a-GET");
}

#[test]
fn render_reuses_the_buffer() {
    let template = KeyTemplate::parse("$uri").unwrap();
    let headers = HeaderMap::new();
    let mut out = String::with_capacity(64);
    for path in ["/long/path/here", "/b"] {
        let req = RequestView {
            scheme: "http",
            method: &Method::GET,
            host: "h",
            path_and_query: path,
            headers: &headers,
        };
        template.render(&req, &mut out);
    }
    assert_eq!(out, "/b");
}

#[test]
fn odd_templates_and_requests_never_panic() {
    let templates = [
        "$",
        "${",
        "}",
        "$$",
        "$$$",
        "${é}",
        "é$",
        "$é",
        "${uri}}",
        "{$uri}",
        "${${uri}}",
        "$uri${",
        "$arg_é",
        "${arg_}",
        "$http_x__y",
        "$cookie_a$cookie_",
    ];
    for template in templates {
        if let Ok(compiled) = KeyTemplate::parse(template) {
            for target in ["", "?", "??", "/é?é=é&&=&é", "&="] {
                render(compiled.as_str(), target, &[("cookie", ";=;a;=b")]);
            }
        }
    }
    assert_eq!(render("${uri}}", "/a", &[]), "/a}");
    assert_eq!(render("$http_x__y", "/", &[("x--y", "v")]), "v");
    assert_eq!(render("[$cookie_a]", "/", &[("cookie", ";=;a;=b")]), "[]");
}

#[test]
fn errors_name_the_problem() {
    assert_eq!(error(""), "empty template");
    assert_eq!(
        error("$scheme$hots$uri"),
        r#"unknown variable "$hots" (did you mean "$host"?)"#
    );
    assert_eq!(
        error("$HOST"),
        r#"unknown variable "$HOST" (did you mean "$host"?)"#
    );
    assert_eq!(
        error("$urix"),
        r#"unknown variable "$urix" (did you mean "$uri"?)"#
    );
    assert_eq!(
        error("$args_page"),
        r#"unknown variable "$args_page" (did you mean "$arg_page"?)"#
    );
    assert_eq!(
        error("$header_accept"),
        r#"unknown variable "$header_accept" (did you mean "$http_accept"?)"#
    );
    assert_eq!(
        error("$is_argz"),
        r#"unknown variable "$is_argz" (did you mean "$is_args"?)"#
    );
    assert_eq!(error("$zzz"), r#"unknown variable "$zzz""#);
    assert_eq!(error("$arg_"), r#""$arg_" needs a name"#);
    assert_eq!(error("${http_}"), r#""$http_" needs a name"#);
    assert_eq!(error("$cookie_"), r#""$cookie_" needs a name"#);
    assert_eq!(
        error("$uri${host"),
        r#""${host": "${" is missing its closing "}""#
    );
    assert_eq!(error("${}"), r#""${}" needs a variable name"#);
    assert_eq!(
        error("${ho-st}"),
        r#""${ho-st}" is not a variable name (letters, digits and "_" only)"#
    );
    assert_eq!(
        error("$uri$"),
        r#""$" must be followed by a variable name, at "$""#
    );
    assert_eq!(
        error("$uri/$-x"),
        r#""$" must be followed by a variable name, at "$-x""#
    );
    assert_eq!(
        error("$uri$é"),
        r#""$" must be followed by a variable name, at "$é""#
    );
    assert_eq!(
        error("static"),
        r#""static" has no variables, so every request would share one cached response"#
    );
}
