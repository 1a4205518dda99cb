#![allow(clippy::unwrap_used)]

use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use super::{Client, ClientAsk, MediaRange, Passed, PassedCompression};
use crate::http::body::ResponseBody;
use crate::http::compress::Coding;

fn on() -> PassedCompression {
    PassedCompression {
        codings: vec![Coding::Gzip],
        types: ["text/*", "application/json"]
            .iter()
            .map(|t| MediaRange::parse(t).unwrap())
            .collect(),
        min_length: 20,
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn client(pairs: &[(&str, &str)]) -> Client {
    on().client(ClientAsk {
        headers: &headers(pairs),
        head_only: false,
    })
}

#[test]
fn the_client_side_reads_accept_encoding_range_and_head() {
    let gzip = Client::Takes(Coding::Gzip);
    assert_eq!(client(&[("accept-encoding", "gzip, deflate")]), gzip);
    assert_eq!(client(&[("accept-encoding", "br;q=1, *;q=0.5")]), gzip);
    assert_eq!(client(&[("accept-encoding", "gzip;q=0")]), Client::Identity);
    assert_eq!(client(&[("accept-encoding", "br")]), Client::Identity);
    assert_eq!(
        client(&[("accept-encoding", "gzip;q=0.5, identity")]),
        Client::Identity
    );
    assert_eq!(client(&[]), Client::Identity);
    assert_eq!(
        client(&[("accept-encoding", "gzip"), ("range", "bytes=0-9")]),
        Client::Identity
    );
    let head = on().client(ClientAsk {
        headers: &headers(&[("accept-encoding", "gzip")]),
        head_only: true,
    });
    assert_eq!(head, Client::Identity);
}

#[test]
fn the_answer_side_follows_nginx_and_rfc_9110() {
    let gzip = Client::Takes(Coding::Gzip);
    let html = ("content-type", "text/html; charset=utf-8");
    let encode = Passed::Encode(Coding::Gzip);
    type Row<'a> = (u16, &'a [(&'a str, &'a str)], Passed);
    let table: &[Row<'_>] = &[
        (200, &[html], encode),
        (404, &[html], encode),
        (403, &[("content-type", "application/json")], encode),
        (200, &[("content-type", "TEXT/CSS")], encode),
        (200, &[html, ("content-length", "20")], encode),
        // Statuses NGINX never compresses.
        (
            206,
            &[html, ("content-range", "bytes 0-9/100")],
            Passed::Untouched,
        ),
        (204, &[html], Passed::Untouched),
        (304, &[html], Passed::Untouched),
        (500, &[html], Passed::Untouched),
        (301, &[html], Passed::Untouched),
        // Already encoded, or forbidden to transform.
        (
            200,
            &[html, ("content-encoding", "gzip")],
            Passed::Untouched,
        ),
        (
            200,
            &[html, ("content-encoding", "identity")],
            Passed::Untouched,
        ),
        (
            200,
            &[html, ("cache-control", "public, no-transform")],
            Passed::Untouched,
        ),
        (
            200,
            &[html, ("content-range", "bytes 0-9/10")],
            Passed::Untouched,
        ),
        // Short, or a length that cannot be read.
        (200, &[html, ("content-length", "19")], Passed::Untouched),
        (200, &[html, ("content-length", "x")], Passed::Untouched),
        // Types not listed, missing, or given twice.
        (200, &[("content-type", "image/png")], Passed::Untouched),
        (200, &[], Passed::Untouched),
        (200, &[html, html], Passed::Untouched),
    ];
    for (status, pairs, want) in table {
        let status = StatusCode::from_u16(*status).unwrap();
        let got = on().decide(gzip, status, &headers(pairs));
        assert_eq!(got, *want, "{status} {pairs:?}");
    }
    let plain = on().decide(Client::Identity, StatusCode::OK, &headers(&[html]));
    assert_eq!(plain, Passed::Varies);
    let off = PassedCompression::default().decide(gzip, StatusCode::OK, &headers(&[html]));
    assert_eq!(off, Passed::Untouched);
}

#[test]
fn any_type_takes_an_answer_without_content_type() {
    let mut any = on();
    any.types = vec![MediaRange::Any];
    let got = any.decide(
        Client::Takes(Coding::Gzip),
        StatusCode::OK,
        &HeaderMap::new(),
    );
    assert_eq!(got, Passed::Encode(Coding::Gzip));
}

#[test]
fn media_ranges_parse_and_refuse() {
    assert_eq!(MediaRange::parse("*"), Some(MediaRange::Any));
    assert_eq!(
        MediaRange::parse("Text/*"),
        Some(MediaRange::Type("text".into()))
    );
    assert_eq!(
        MediaRange::parse("image/svg+xml"),
        Some(MediaRange::Exact("image/svg+xml".into()))
    );
    for bad in [
        "",
        "text",
        "text/",
        "/html",
        "text/html; charset=utf-8",
        "te xt/html",
        "*/html",
    ] {
        assert_eq!(MediaRange::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn an_encoded_answer_loses_its_length_and_gets_a_weak_etag_and_vary() {
    let mut resp = Response::new(ResponseBody::full(&b"<p>hello hello hello hello</p>"[..]));
    *resp.headers_mut() = headers(&[
        ("content-type", "text/html"),
        ("content-length", "30"),
        ("accept-ranges", "bytes"),
        ("etag", "\"v1\""),
        ("vary", "Cookie"),
    ]);
    let resp = on().apply(Client::Takes(Coding::Gzip), resp);
    let h = resp.headers();
    assert_eq!(h["content-encoding"], "gzip");
    assert_eq!(h["etag"], "W/\"v1\"");
    assert!(!h.contains_key("content-length"));
    assert!(!h.contains_key("accept-ranges"));
    let vary: Vec<_> = h.get_all("vary").iter().collect();
    assert_eq!(vary, ["Cookie", "Accept-Encoding"]);
}

#[test]
fn an_identity_answer_that_could_be_encoded_varies() {
    let mut resp = Response::new(ResponseBody::full(&b"<p>hello hello hello hello</p>"[..]));
    *resp.headers_mut() = headers(&[
        ("content-type", "text/html"),
        ("content-length", "30"),
        ("vary", "accept-encoding"),
    ]);
    let resp = on().apply(Client::Identity, resp);
    let h = resp.headers();
    assert!(!h.contains_key("content-encoding"));
    assert_eq!(h["content-length"], "30");
    assert_eq!(h.get_all("vary").iter().count(), 1);
}
