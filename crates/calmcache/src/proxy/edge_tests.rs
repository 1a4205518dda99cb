//! Unit tests of the edge's checks and normalisation; the behaviour through
//! real sockets is in tests/it/request_integrity.rs and hostile.rs.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use http::{Request, StatusCode, Version};

use super::*;

fn peer() -> Peer {
    Peer::plain(SocketAddr::from(([127, 0, 0, 1], 5000)))
}

fn norm(path: &str) -> String {
    normalise_path(path, Decode::Unreserved, Slashes::Merge)
        .unwrap()
        .into_owned()
}

#[test]
fn paths_are_normalised_per_rfc_3986() {
    for (path, want) in [
        ("/", "/"),
        ("/a/b?", "/a/b?"),
        ("/%61pi/me", "/api/me"),
        ("/%7euser", "/~user"),
        ("/a%2fb", "/a%2Fb"),
        ("/a%2Fb", "/a%2Fb"),
        ("/./api/me", "/api/me"),
        ("/a/../api/me", "/api/me"),
        ("/../../api", "/api"),
        ("/a/b/..", "/a/"),
        ("/a/.", "/a/"),
        ("/a/%2e%2E/b", "/b"),
        ("//api/me", "/api/me"),
        ("/a///b//", "/a/b/"),
        ("/a//../b", "/b"),
        ("/.hidden/..x", "/.hidden/..x"),
        ("/%20", "/%20"),
    ] {
        assert_eq!(norm(path), want, "{path}");
    }
}

#[test]
fn raw_utf8_in_a_path_passes_unchanged() {
    // Regression: bytes were pushed as chars, so `é` (C3 A9) became `Ã©`
    // whenever the path also held an escape.
    assert_eq!(norm("/%41/é"), "/A/é");
    assert_eq!(norm("/é/%7e"), "/é/~");
}

#[test]
fn unchanged_paths_are_borrowed() {
    for path in ["/", "/api/me", "/a.b/c..d/", "/x.y"] {
        let out = normalise_path(path, Decode::Unreserved, Slashes::Merge).unwrap();
        assert!(matches!(out, Cow::Borrowed(_)), "{path}");
    }
}

#[test]
fn slashes_are_kept_when_asked() {
    let kept = normalise_path("/a//b/./c", Decode::Unreserved, Slashes::Keep).unwrap();
    assert_eq!(kept, "/a//b/c");
}

#[test]
fn the_matching_form_decodes_every_printable_escape() {
    let m = |p| {
        normalise_path(p, Decode::Printable, Slashes::Merge)
            .unwrap()
            .into_owned()
    };
    assert_eq!(m("/api%2Fme"), "/api/me");
    assert_eq!(m("/x/..%2F..%2Fapi/me"), "/api/me");
    // `%`, `?`, `#` and non-printable bytes stay encoded.
    assert_eq!(m("/a%25b%3fc%23d%01"), "/a%25b%3Fc%23d%01");
}

#[test]
fn bad_escapes_are_refused() {
    // `%+1`: from_str_radix takes a sign; an escape is two hex digits.
    for path in ["/%", "/%4", "/%zz", "/a%g0", "/%+1", "/%-1"] {
        assert!(
            normalise_path(path, Decode::Unreserved, Slashes::Merge).is_err(),
            "{path}"
        );
    }
}

#[test]
fn a_nul_in_the_path_is_refused_in_either_form() {
    // NGINX answers 400: a NUL ends the path for C origins (`/a.css%00.php`).
    for decode in [Decode::Unreserved, Decode::Printable] {
        for path in ["/%00", "/a.css%00.php", "/a/%00/b"] {
            let refused = normalise_path(path, decode, Slashes::Merge).unwrap_err();
            assert!(refused.to_string().contains("%00"), "{refused}");
        }
        assert!(normalise_path("/a%2500", decode, Slashes::Merge).is_ok());
    }
}

#[test]
fn hosts_are_checked_and_normalised() {
    for (raw, scheme, want) in [
        ("example.com", "http", "example.com"),
        ("Example.COM", "http", "example.com"),
        ("example.com:80", "http", "example.com"),
        ("example.com:443", "https", "example.com"),
        ("example.com:443", "http", "example.com:443"),
        ("example.com.", "http", "example.com"),
        ("example.com:", "http", "example.com"),
        ("127.0.0.1:8080", "http", "127.0.0.1:8080"),
        ("[::1]:8080", "http", "[::1]:8080"),
        ("[::1]", "http", "[::1]"),
        ("h:08080", "http", "h:8080"),
        ("h:080", "http", "h"),
    ] {
        assert_eq!(normalise_host(raw, scheme).unwrap(), want, "{raw}");
    }
    for raw in [
        "", "a b", "a@b", "a,b", "a/b", "[::1", "[zz]", "a:b", "a:1:2", "a:99999", "a:123456",
        "[::1]x", ":80",
    ] {
        assert!(normalise_host(raw, "http").is_err(), "{raw:?}");
    }
}

fn h1(lines: &[(&str, &str)]) -> Request<()> {
    let mut req = Request::builder().uri("/x").version(Version::HTTP_11);
    for (name, value) in lines {
        req = req.header(*name, *value);
    }
    req.body(()).unwrap()
}

fn status(result: Result<Admitted, ProxyError>) -> StatusCode {
    match result {
        Ok(_) => StatusCode::OK,
        Err(e) => e.status(),
    }
}

#[test]
fn http10_may_come_without_a_host() {
    // HAProxy's default health check: `OPTIONS / HTTP/1.0` without Host.
    let mut req = h1(&[]);
    *req.version_mut() = Version::HTTP_10;
    admit(&mut req, peer()).unwrap();
    assert!(!req.headers().contains_key("host"));
}

#[test]
fn http11_needs_exactly_one_valid_host() {
    assert_eq!(status(admit(&mut h1(&[]), peer())), StatusCode::BAD_REQUEST);
    let two = &[("host", "a"), ("host", "b")];
    assert_eq!(status(admit(&mut h1(two), peer())), StatusCode::BAD_REQUEST);
    let odd = &[("host", "a b")];
    assert_eq!(status(admit(&mut h1(odd), peer())), StatusCode::BAD_REQUEST);
    let mut ok = h1(&[("host", "A.example:80")]);
    admit(&mut ok, peer()).unwrap();
    assert_eq!(ok.headers()["host"], "a.example");
}

#[test]
fn http2_authority_becomes_the_host() {
    let mut req = Request::builder()
        .uri("http://Site.example/a/../b")
        .version(Version::HTTP_2)
        .body(())
        .unwrap();
    admit(&mut req, peer()).unwrap();
    assert_eq!(req.headers()["host"], "site.example");
    assert_eq!(req.uri(), "/b");
    // Already normalised: the authority stays in the URI (no allocation on
    // a hit) until ensure_host gives the upstream request its Host.
    let mut plain = Request::builder()
        .uri("http://site.example/b")
        .version(Version::HTTP_2)
        .body(())
        .unwrap();
    admit(&mut plain, peer()).unwrap();
    assert!(!plain.headers().contains_key("host"));
    let mut upstream = plain.headers().clone();
    ensure_host(&mut upstream, plain.uri());
    assert_eq!(upstream["host"], "site.example");
    let mut disagree = Request::builder()
        .uri("http://a.example/")
        .version(Version::HTTP_2)
        .header("host", "b.example")
        .body(())
        .unwrap();
    assert_eq!(
        status(admit(&mut disagree, peer())),
        StatusCode::BAD_REQUEST
    );
    let mut spaced = Request::builder()
        .uri("http://a.example/")
        .version(Version::HTTP_2)
        .header("accept", "text/html ")
        .body(())
        .unwrap();
    assert_eq!(status(admit(&mut spaced, peer())), StatusCode::BAD_REQUEST);
}

#[test]
fn http2_cookie_crumbs_are_joined() {
    let mut req = Request::builder()
        .uri("http://a.example/")
        .version(Version::HTTP_2)
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(())
        .unwrap();
    admit(&mut req, peer()).unwrap();
    let all: Vec<_> = req.headers().get_all("cookie").iter().collect();
    assert_eq!(all, ["a=1; b=2"]);
    let mut h1_lines = h1(&[("host", "a"), ("cookie", "x=1"), ("cookie", "lang=de")]);
    admit(&mut h1_lines, peer()).unwrap();
    let all: Vec<_> = h1_lines.headers().get_all("cookie").iter().collect();
    assert_eq!(all, ["x=1; lang=de"]);
}

#[test]
fn framing_fields_are_refused_or_normalised() {
    let host = ("host", "a");
    for (te, want) in [
        ("chunked", StatusCode::OK),
        ("Chunked", StatusCode::OK),
        ("cow, chunked", StatusCode::NOT_IMPLEMENTED),
        ("gzip, chunked", StatusCode::NOT_IMPLEMENTED),
        ("chunked, chunked", StatusCode::BAD_REQUEST),
    ] {
        let got = status(admit(&mut h1(&[host, ("transfer-encoding", te)]), peer()));
        assert_eq!(got, want, "{te}");
    }
    for cl in ["+5", "-1", "5 5", "0x5", "99999999999999999999", "", "1,2"] {
        let got = status(admit(&mut h1(&[host, ("content-length", cl)]), peer()));
        assert_eq!(got, StatusCode::BAD_REQUEST, "{cl:?}");
    }
    let mut padded = h1(&[host, ("content-length", "010")]);
    admit(&mut padded, peer()).unwrap();
    assert_eq!(padded.headers()["content-length"], "10");
    let mut twice = h1(&[host, ("content-length", "7"), ("content-length", "7")]);
    admit(&mut twice, peer()).unwrap();
    assert_eq!(twice.headers().get_all("content-length").iter().count(), 1);
    let mut listed = h1(&[host, ("content-length", "7, 7")]);
    admit(&mut listed, peer()).unwrap();
    assert_eq!(listed.headers()["content-length"], "7");
}

#[test]
fn only_100_continue_is_expected() {
    let host = ("host", "a");
    let mut ok = h1(&[host, ("expect", "100-Continue")]);
    admit(&mut ok, peer()).unwrap();
    assert!(!ok.headers().contains_key("expect"));
    let odd = &[host, ("expect", "wait-for-me")];
    assert_eq!(
        status(admit(&mut h1(odd), peer())),
        StatusCode::EXPECTATION_FAILED
    );
}

#[test]
fn targets_that_are_not_paths_are_refused() {
    for uri in ["*", "http://u:p@a/x", "http://user@a/"] {
        let mut req = Request::builder()
            .uri(uri)
            .header("host", "a")
            .body(())
            .unwrap();
        assert_eq!(
            status(admit(&mut req, peer())),
            StatusCode::BAD_REQUEST,
            "{uri}"
        );
    }
    let mut absolute = Request::builder()
        .uri("http://a/x/./y?q=1")
        .header("host", "a")
        .body(())
        .unwrap();
    admit(&mut absolute, peer()).unwrap();
    assert_eq!(absolute.uri(), "/x/y?q=1");
    let mut other = Request::builder()
        .uri("http://b/x")
        .header("host", "a")
        .body(())
        .unwrap();
    assert_eq!(status(admit(&mut other, peer())), StatusCode::BAD_REQUEST);
}

#[test]
fn routes_match_the_decoded_form_when_it_differs() {
    let mut req = h1(&[("host", "a")]);
    *req.uri_mut() = "/x/..%2Fapi%2fme?q".parse().unwrap();
    let admitted = admit(&mut req, peer()).unwrap();
    assert_eq!(req.uri(), "/x/..%2Fapi%2Fme?q");
    assert_eq!(admitted.match_target("/unused"), "/api/me?q");
    assert!(
        admitted.recheck(),
        "the route must be checked for both forms"
    );
}

#[test]
fn websocket_handshakes_are_noticed() {
    let ws = h1(&[
        ("host", "a"),
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
    ]);
    let seen = |req: &Request<()>| admit(&mut req.clone_parts(), peer()).unwrap().websocket;
    assert_eq!(seen(&ws), Handshake::Upgrade);
    let h2c = h1(&[("host", "a"), ("connection", "Upgrade"), ("upgrade", "h2c")]);
    assert_eq!(seen(&h2c), Handshake::None);
}

/// An HTTP/2 `CONNECT` to `uri`, with `:protocol` when given.
fn connect(uri: &str, protocol: Option<&'static str>) -> Request<()> {
    let mut req = Request::builder()
        .method(http::Method::CONNECT)
        .uri(uri)
        .version(Version::HTTP_2)
        .body(())
        .unwrap();
    if let Some(p) = protocol {
        req.extensions_mut()
            .insert(hyper::ext::Protocol::from_static(p));
    }
    req
}

#[test]
fn extended_connect_is_a_websocket_handshake_for_websocket_only() {
    let mut ws = connect("https://a/chat?room=1", Some("websocket"));
    assert_eq!(
        admit(&mut ws, peer()).unwrap().websocket,
        Handshake::Connect
    );
    assert_eq!(ws.uri().path(), "/chat");
    let mut upper = connect("https://a/chat", Some("WebSocket"));
    assert_eq!(
        admit(&mut upper, peer()).unwrap().websocket,
        Handshake::Connect
    );
    let other = admit(&mut connect("https://a/x", Some("webtransport")), peer()).unwrap_err();
    assert_eq!(other.status(), StatusCode::NOT_IMPLEMENTED);
    // A plain CONNECT keeps its answer: its target is not a path.
    let plain = admit(&mut connect("a:443", None), peer()).unwrap_err();
    assert_eq!(plain.status(), StatusCode::BAD_REQUEST);
}

trait CloneParts {
    fn clone_parts(&self) -> Self;
}

impl CloneParts for Request<()> {
    fn clone_parts(&self) -> Self {
        let mut req = Request::builder()
            .uri(self.uri().clone())
            .version(self.version());
        for (name, value) in self.headers() {
            req = req.header(name, value);
        }
        req.body(()).unwrap()
    }
}

#[test]
fn forwarding_fields_are_recognised() {
    for name in [
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-ssl",
        "x-forwarded-anything",
        "forwarded",
        "x-original-url",
        "x-rewrite-url",
        "x-http-method-override",
    ] {
        assert!(is_forwarding(name), "{name}");
    }
    for name in ["x-forwarded-for", "accept", "x-request-id", "from"] {
        assert!(!is_forwarding(name), "{name}");
    }
    for name in ["x-original-url", "x-rewrite-url", "x-http-method-override"] {
        assert!(is_override(name), "{name}");
    }
    assert!(!is_override("x-forwarded-host"));
}
