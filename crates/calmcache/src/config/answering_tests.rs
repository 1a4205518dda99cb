//! Route kinds: `upstream`, `return`, `root` (exactly one), and the checks
//! of `return`, `root`, `index`, `internal`, each problem at its TOML path.
#![allow(clippy::unwrap_used)]

use super::answering::{RouteKind, Template};
use super::{Config, ConfigError};

const SERVER: &str = "[server]\nlisten = [\"127.0.0.1:0\"]\n";

fn routes(routes: &str) -> String {
    format!("{SERVER}[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n[zones.ram]\nkind = \"memory\"\nmax_size = \"1MiB\"\n{routes}")
}

fn problems(text: &str) -> Vec<(String, String)> {
    match Config::from_toml(text, "t.toml") {
        Err(ConfigError::Invalid { problems, .. }) => {
            problems.into_iter().map(|p| (p.path, p.message)).collect()
        }
        Ok(_) => Vec::new(),
        Err(other) => panic!("{other}"),
    }
}

fn one(routes_text: &str) -> (String, String) {
    let found = problems(&routes(routes_text));
    assert_eq!(found.len(), 1, "{found:#?}");
    found.into_iter().next().unwrap()
}

#[test]
fn a_route_does_exactly_one_thing() {
    let two = one("[[routes]]\nupstream = \"app\"\nreturn = { status = 204 }\n");
    assert_eq!(two.0, "routes[0]");
    assert!(two.1.contains("upstream and return"), "{}", two.1);
    let three = one("[[routes]]\nupstream = \"app\"\nreturn = { status = 204 }\nroot = \"/srv\"\n");
    assert!(
        three.1.contains("upstream and return and root"),
        "{}",
        three.1
    );
    let none = one("[[routes]]\nname = \"x\"\n");
    assert_eq!(none.0, "routes[0].upstream");
}

#[test]
fn return_and_files_parse_into_their_kinds() {
    let text = format!(
        "{SERVER}[[routes]]\nhosts = [\"example.com\"]\nreturn = {{ status = 301, location = \"https://$host$request_uri\" }}\n\
         [[routes]]\nreturn = {{ status = 404, body = \"gone\\n\" }}\n\
         [[routes]]\nroot = \"/srv/www\"\ninternal = true\n"
    );
    let config = Config::from_toml(&text, "t.toml").unwrap();
    let RouteKind::Return(redirect) = &config.routes[0].kind else {
        panic!("not a return");
    };
    assert_eq!(redirect.status.as_u16(), 301);
    assert!(matches!(redirect.location, Some(Template::Vars(_))));
    let RouteKind::Return(gone) = &config.routes[1].kind else {
        panic!("not a return");
    };
    assert!(matches!(&gone.body, Some(Template::Literal(b)) if b == "gone\n"));
    assert_eq!(gone.content_type, "text/plain");
    let RouteKind::Files(files) = &config.routes[2].kind else {
        panic!("not files");
    };
    assert_eq!(files.index, ["index.html"]);
    assert!(config.routes[2].internal);
    assert!(config.upstreams.is_empty(), "no upstream needed");
    let summary = config.summary();
    assert!(
        summary.contains("route0 for example.com return 301 -> https://$host$request_uri"),
        "{summary}"
    );
    assert!(
        summary.contains("route2 files /srv/www, internal"),
        "{summary}"
    );
}

#[test]
fn return_is_checked_as_nginx_would() {
    let at = |keys: &str| one(&format!("[[routes]]\nreturn = {{ {keys} }}\n"));
    assert_eq!(at("status = 301").0, "routes[0].return.location");
    assert_eq!(at("location = \"/x\"").0, "routes[0].return.status");
    let location_on_404 = at("status = 404, location = \"/x\"");
    assert_eq!(location_on_404.0, "routes[0].return.location");
    assert_eq!(
        at("status = 301, location = \"/x\", body = \"b\"").0,
        "routes[0].return.body"
    );
    assert_eq!(at("status = 204, body = \"b\"").0, "routes[0].return.body");
    assert_eq!(at("status = 999").0, "routes[0].return.status");
    assert_eq!(at("status = 444").0, "routes[0].return.status");
    assert_eq!(at("status = 101").0, "routes[0].return.status");
    assert_eq!(
        at("status = 302, location = \"$hots/x\"").0,
        "routes[0].return.location"
    );
    assert_eq!(
        at("status = 302, location = \"evil.example\"").0,
        "routes[0].return.location"
    );
    assert_eq!(
        at("status = 302, location = \"/a b\"").0,
        "routes[0].return.location"
    );
    assert_eq!(
        at("status = 302, location = \"/a\\r\\nX: y\"").0,
        "routes[0].return.location"
    );
    assert_eq!(
        at("status = 200, content_type = \"text/html\"").0,
        "routes[0].return.content_type"
    );
    assert_eq!(
        at("status = 200, body = \"x\", content_type = \"a\\nb\"").0,
        "routes[0].return.content_type"
    );
    let unknown = problems(&routes(
        "[[routes]]\nreturn = { status = 200, bdy = \"x\" }\n",
    ));
    assert!(
        unknown.iter().any(|(p, _)| p == "routes[0].return.bdy"),
        "{unknown:?}"
    );
}

#[test]
fn files_and_answering_routes_have_no_zone() {
    assert_eq!(one("[[routes]]\nroot = \"srv/www\"\n").0, "routes[0].root");
    assert_eq!(
        one("[[routes]]\nroot = \"/srv\"\nindex = [\"../x\"]\n").0,
        "routes[0].index[0]"
    );
    assert_eq!(
        one("[[routes]]\nroot = \"/srv\"\nindex = [\"a/b\"]\n").0,
        "routes[0].index[0]"
    );
    assert_eq!(
        one("[[routes]]\nupstream = \"app\"\nindex = [\"i.html\"]\n").0,
        "routes[0].index"
    );
    assert_eq!(
        one("[[routes]]\nroot = \"/srv\"\nzone = \"ram\"\n").0,
        "routes[0].zone"
    );
    assert_eq!(
        one("[[routes]]\nreturn = { status = 204 }\nwarm = [\"/\"]\n").0,
        "routes[0].warm"
    );
}

/// A `limits` on a file route was accepted and limited nothing (the review
/// of issue 28): refused, with where limits apply.
#[test]
fn limits_on_a_route_that_answers_itself_are_refused() {
    let text = routes(
        "[limits.perip]\nrate = \"1r/s\"\n[[routes]]\nroot = \"/srv\"\nlimits = [\"perip\"]\n",
    );
    let found = problems(&text);
    assert!(
        found
            .iter()
            .any(|(path, message)| path == "routes[0].limits"
                && message.contains("routes with an upstream")),
        "{found:#?}"
    );
}

#[test]
fn a_proxied_route_still_needs_upstreams() {
    let text = format!(
        "{SERVER}[[routes]]\nreturn = {{ status = 204 }}\n[[routes]]\nupstream = \"app\"\n"
    );
    let found = problems(&text);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["upstreams", "routes[1].upstream"]);
}

#[test]
fn a_catch_all_file_route_shadows_nothing_but_a_return_does() {
    let text = format!(
        "{SERVER}[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n\
         [[routes]]\nroot = \"/srv/www\"\n[[routes]]\nupstream = \"app\"\n"
    );
    let config = Config::from_toml(&text, "t.toml").unwrap();
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    for answers in [
        "return = { status = 204 }",
        "root = \"/srv/www\"\nabsent = \"404\"",
    ] {
        let shadowed = text.replace("root = \"/srv/www\"", answers);
        let config = Config::from_toml(&shadowed, "t.toml").unwrap();
        let warnings = config.warnings();
        assert_eq!(warnings.len(), 1, "{answers}: {warnings:?}");
        assert_eq!(warnings[0].path, "routes[1]");
    }
}

/// `absent`: "next" (the default) or "404", only with root; anything else
/// named at its path, with the two spellings.
#[test]
fn absent_says_what_a_file_route_does_without_the_file() {
    use super::answering::Absent;
    let text = routes(
        "[[routes]]\nroot = \"/srv\"\n[[routes]]\nroot = \"/srv\"\nabsent = \"next\"\n\
         [[routes]]\nroot = \"/srv\"\nabsent = \"404\"\n[[routes]]\nupstream = \"app\"\n",
    );
    let config = Config::from_toml(&text, "t.toml").unwrap();
    let absent: Vec<Absent> = config.routes[..3]
        .iter()
        .map(|r| match &r.kind {
            RouteKind::Files(f) => f.absent,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(absent, [Absent::Next, Absent::Next, Absent::NotFound]);
    let summary = config.summary();
    assert!(summary.contains("files /srv, absent 404"), "{summary}");
    let bad = one("[[routes]]\nroot = \"/srv\"\nabsent = \"403\"\n");
    assert_eq!(bad.0, "routes[0].absent");
    assert!(bad.1.contains("\"403\""), "{}", bad.1);
    let proxied = one("[[routes]]\nupstream = \"app\"\nabsent = \"404\"\n");
    assert_eq!(
        proxied,
        (
            "routes[0].absent".into(),
            "absent is for a route with root".into()
        )
    );
    let returns = one("[[routes]]\nreturn = { status = 204 }\nabsent = \"404\"\n");
    assert_eq!(returns.0, "routes[0].absent");
}

#[test]
fn error_pages_parse_as_nginx_error_page() {
    use super::answering::{PageStatus, PageTarget};
    let text = routes(
        "[[routes]]\nname = \"errors\"\npath = '^/errors/'\nroot = \"/srv/errors\"\ninternal = true\n\
         [[routes]]\nupstream = \"app\"\nintercept_errors = true\n\
         error_pages = { \"404\" = \"/errors/404.html\", \"500 502 503 504\" = \"=503 /errors/50x.html\", \"403\" = \"= @errors\" }\n",
    );
    let config = Config::from_toml(&text, "t.toml").unwrap();
    let route = &config.routes[1];
    assert!(route.intercept_errors);
    let page = route.error_page(502).unwrap();
    assert_eq!(
        page.status,
        PageStatus::Set(http::StatusCode::SERVICE_UNAVAILABLE)
    );
    assert_eq!(page.target, PageTarget::Uri("/errors/50x.html".into()));
    assert_eq!(route.error_page(404).unwrap().status, PageStatus::Original);
    let named = route.error_page(403).unwrap();
    assert_eq!(named.status, PageStatus::Target);
    assert_eq!(named.target, PageTarget::Named("errors".into()));
    assert!(route.error_page(500).is_some() && route.error_page(501).is_none());
}

#[test]
fn bad_error_pages_name_their_entry() {
    let at = |pages: &str| {
        one(&format!(
            "[[routes]]\nname = \"p\"\nreturn = {{ status = 204 }}\n[[routes]]\nupstream = \"app\"\nerror_pages = {{ {pages} }}\n"
        ))
    };
    assert_eq!(at("\"200\" = \"/x\"").0, "routes[1].error_pages.200");
    assert_eq!(
        at("\"404 x\" = \"/x\"").0,
        "routes[1].error_pages.\"404 x\""
    );
    assert_eq!(at("\"404\" = \"x.html\"").0, "routes[1].error_pages.404");
    assert_eq!(at("\"404\" = \"=999 /x\"").0, "routes[1].error_pages.404");
    assert_eq!(at("\"404\" = \"@\"").0, "routes[1].error_pages.404");
    let missing = at("\"404\" = \"@nope\"");
    assert_eq!(
        missing,
        (
            "routes[1].error_pages".into(),
            "no route named \"nope\"".into()
        )
    );
    let proxied = one(
        "[[routes]]\nname = \"app\"\nupstream = \"app\"\nerror_pages = { \"502\" = \"@app\" }\n",
    );
    assert!(proxied.1.contains("proxies"), "{}", proxied.1);
}
