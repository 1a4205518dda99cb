#![allow(clippy::unwrap_used)]
use super::*;
use crate::http::headers::is_websocket_upgrade;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(*name, HeaderValue::from_static(value));
    }
    h
}

#[test]
fn upgrade_is_recognised_in_token_lists_whatever_the_case() {
    let yes = [
        headers(&[("connection", "Upgrade"), ("upgrade", "websocket")]),
        headers(&[
            ("connection", "keep-alive, UPGRADE"),
            ("upgrade", "WebSocket"),
        ]),
        headers(&[
            ("connection", "keep-alive"),
            ("connection", "upgrade"),
            ("upgrade", "h2c, websocket/13"),
        ]),
    ];
    for h in &yes {
        assert!(is_websocket_upgrade(h), "{h:?}");
    }
    let no = [
        headers(&[("upgrade", "websocket")]),
        headers(&[("connection", "upgrade")]),
        headers(&[("connection", "upgrade"), ("upgrade", "h2c")]),
        headers(&[("connection", "upgrade-ish"), ("upgrade", "websocket")]),
    ];
    for h in &no {
        assert!(!is_websocket_upgrade(h), "{h:?}");
    }
}

#[test]
fn the_accept_value_is_rfc_6455s() {
    // RFC 6455 §1.3's worked example.
    assert_eq!(
        accept_for(b"dGhlIHNhbXBsZSBub25jZQ=="),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
}

#[test]
fn only_a_websocket_101_for_this_key_opens_a_tunnel() {
    let key = HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ==");
    let good = [
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
    ];
    assert_eq!(bad_switch(&headers(&good), &key), None);
    let cases: [&[(&'static str, &'static str)]; 5] = [
        &[good[0], ("upgrade", "h2c"), good[2]],
        &[good[1], good[2]],
        &[good[0], good[1]],
        &[good[0], good[1], ("sec-websocket-accept", "AAAA")],
        &[good[0], good[1], good[2], good[2]],
    ];
    for case in cases {
        assert!(bad_switch(&headers(case), &key).is_some(), "{case:?}");
    }
}

/// An HTTP/2 extended CONNECT's head, as hyper hands it over.
fn extended_connect(fields: &[(&'static str, &'static str)]) -> http::request::Parts {
    let mut req = Request::builder()
        .method(Method::CONNECT)
        .uri("https://example.com/chat?room=1")
        .version(http::Version::HTTP_2)
        .body(())
        .unwrap();
    *req.headers_mut() = headers(fields);
    req.extensions_mut()
        .insert(hyper::ext::Protocol::from_static("websocket"));
    req.into_parts().0
}

#[test]
fn an_extended_connect_becomes_an_http1_handshake_with_a_key_of_its_own() {
    let mut parts = extended_connect(&[("sec-websocket-version", "13")]);
    let asked = Asked::of(&mut parts, Handshake::Connect).unwrap();
    assert_eq!(parts.method, Method::GET);
    assert!(parts.extensions.get::<hyper::ext::Protocol>().is_none());
    assert_eq!(parts.headers[header::HOST], "example.com");
    assert_eq!(parts.headers[header::SEC_WEBSOCKET_KEY], asked.key);
    // RFC 6455 §4.1: 16 random bytes in base64; a fresh one each time.
    use base64::Engine as _;
    let nonce = base64::engine::general_purpose::STANDARD
        .decode(asked.key.as_bytes())
        .unwrap();
    assert_eq!(nonce.len(), 16);
    let mut again = extended_connect(&[("sec-websocket-version", "13")]);
    assert_ne!(
        Asked::of(&mut again, Handshake::Connect).unwrap().key,
        asked.key
    );
    let mut unversioned = extended_connect(&[]);
    let refused = Asked::of(&mut unversioned, Handshake::Connect).err();
    assert_eq!(refused, Some("no Sec-WebSocket-Version"));
    let mut keyless = extended_connect(&[("sec-websocket-version", "13")]);
    let refused = Asked::of(&mut keyless, Handshake::Upgrade).err();
    assert_eq!(refused, Some("no Sec-WebSocket-Key"));
}

#[test]
fn the_101_is_a_200_without_accept_on_http2_and_stays_a_101_on_http1() {
    let switched = || {
        let mut resp = Response::new(());
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        *resp.headers_mut() = headers(&[
            ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            ("sec-websocket-protocol", "chat"),
        ]);
        resp.into_parts().0
    };
    let mut h2 = switched();
    switched_head(&mut h2, Handshake::Connect);
    assert_eq!(h2.status, StatusCode::OK);
    assert!(!h2.headers.contains_key(header::SEC_WEBSOCKET_ACCEPT));
    assert!(!h2.headers.contains_key(header::UPGRADE));
    assert_eq!(h2.headers[header::SEC_WEBSOCKET_PROTOCOL], "chat");
    let mut h1 = switched();
    switched_head(&mut h1, Handshake::Upgrade);
    assert_eq!(h1.status, StatusCode::SWITCHING_PROTOCOLS);
    assert!(h1.headers.contains_key(header::SEC_WEBSOCKET_ACCEPT));
    assert_eq!(h1.headers[header::UPGRADE], "websocket");
}

#[test]
fn the_upgrade_sent_on_is_exactly_websocket() {
    let mut h = headers(&[("sec-websocket-key", "k")]);
    set_upgrade(&mut h);
    assert_eq!(h["upgrade"], "websocket");
    assert_eq!(h["connection"], "upgrade");
    assert_eq!(h.len(), 3);
}
