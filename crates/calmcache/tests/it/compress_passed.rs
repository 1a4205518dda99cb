//! Compression of answers calmcache does not store (`compress_passed =
//! ["gzip"]`, NGINX's `gzip on`), over HTTP/1.1, h2c and HTTP/2 over TLS:
//! private answers relayed by a fill and passed methods gzipped for a
//! client that takes it, decoding to the origin's bytes; identity for one
//! that does not; a 206, an already encoded answer and a HEAD untouched;
//! a streamed answer arriving in pieces; a stored answer unaffected.

use std::io::Write as _;
use std::time::Duration;

use calmcache_testkit::{Origin, Proxy, Reply, Wire, Wires};
use http::Method;
use http_body_util::BodyExt;

const AE: (&str, &str) = ("accept-encoding", "gzip, deflate, br;q=0");

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    decoder.write_all(bytes).unwrap();
    decoder.finish().unwrap()
}

async fn wires(origin: &Origin) -> Wires {
    let proxy = Proxy::new(origin).route("compress_passed = [\"gzip\"]");
    Wires::start(proxy, "").await
}

/// A 4000-byte private HTML page (never stored), with a strong ETag.
fn private_page() -> Vec<(&'static str, &'static str)> {
    vec![
        ("x-origin-cache-control", "private"),
        ("x-origin-body-bytes", "4000"),
        ("x-origin-header", "Content-Type: text/html; charset=utf-8"),
        ("x-origin-header", "ETag: \"v1\""),
    ]
}

async fn get(wires: &Wires, wire: &Wire, path: &str, headers: &[(&str, &str)]) -> Reply {
    let host = wires.proxy.host();
    wires
        .send(wire, Method::GET, &host, path, headers, "")
        .await
}

fn assert_gzipped(reply: &Reply, what: &str) -> Vec<u8> {
    assert_eq!(reply.status, 200, "{what}");
    assert_eq!(reply.header_all("content-encoding"), ["gzip"], "{what}");
    assert!(
        !reply.has_header("content-length")
            || reply.header("content-length") == reply.bytes.len().to_string(),
        "{what}"
    );
    assert!(
        reply
            .header_all("vary")
            .iter()
            .any(|v| v.eq_ignore_ascii_case("accept-encoding")),
        "{what}: {:?}",
        reply.headers
    );
    gunzip(&reply.bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_page_is_gzipped_for_a_client_that_takes_it_on_every_wire() {
    let origin = Origin::start().await;
    let wires = wires(&origin).await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/private/{i}");
        let mut headers = private_page();
        headers.push(("x-origin-ignore-conditionals", "1"));
        let plain = get(&wires, wire, &path, &headers).await;
        assert_eq!(plain.status, 200, "{what}");
        assert!(!plain.has_header("content-encoding"), "{what}");
        assert!(
            plain
                .header_all("vary")
                .iter()
                .any(|v| v.eq_ignore_ascii_case("accept-encoding")),
            "{what}: identity varies too"
        );
        assert_eq!(plain.header("etag"), "\"v1\"", "{what}");
        headers.push(AE);
        let zipped = get(&wires, wire, &path, &headers).await;
        let decoded = assert_gzipped(&zipped, what);
        assert!(
            zipped.bytes.len() < plain.bytes.len() / 4,
            "{what}: {} bytes",
            zipped.bytes.len()
        );
        // The origin's bytes (its body names its request count: the same but that).
        assert_eq!(decoded.len(), 4000, "{what}");
        assert_eq!(decoded[20..], plain.bytes[20..], "{what}");
        assert_eq!(zipped.header("etag"), "W/\"v1\"", "{what}: RFC 9110 §8.8.3");
        assert!(!zipped.has_header("accept-ranges"), "{what}");
        // A passed method goes through pass.rs: gzipped there too.
        let host = wires.proxy.host();
        let posted = wires
            .send(wire, Method::POST, &host, &path, &headers, "form=1")
            .await;
        let decoded = assert_gzipped(&posted, &format!("{what} POST"));
        assert_eq!(decoded.len(), 4000, "{what} POST");
        // HEAD: no body to encode; the answer still varies.
        let head = wires
            .send(wire, Method::HEAD, &host, &path, &headers, "")
            .await;
        assert!(!head.has_header("content-encoding"), "{what} HEAD");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_encoded_bodies_and_stored_answers_are_left_alone() {
    let origin = Origin::start().await;
    let wires = wires(&origin).await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        // A 206 from the origin to a Range request: untouched.
        let mut ranged = private_page();
        ranged.extend([
            AE,
            ("range", "bytes=0-99"),
            ("x-origin-status", "206"),
            ("x-origin-header", "Content-Range: bytes 0-3999/8000"),
        ]);
        let reply = get(&wires, wire, &format!("/range/{i}"), &ranged).await;
        assert_eq!(reply.status, 206, "{what}");
        assert!(!reply.has_header("content-encoding"), "{what}: 206");
        assert_eq!(reply.bytes.len(), 4000, "{what}: 206");
        // Already encoded by the origin: relayed byte for byte, one coding.
        let mut encoded = private_page();
        encoded.extend([AE, ("x-origin-header", "Content-Encoding: gzip")]);
        let reply = get(&wires, wire, &format!("/encoded/{i}"), &encoded).await;
        assert_eq!(reply.header_all("content-encoding"), ["gzip"], "{what}");
        assert!(
            reply.bytes.starts_with(b"path=/encoded/"),
            "{what}: not encoded twice"
        );
        // A type not listed (image/png) and a short page: identity.
        let png = [
            AE,
            ("x-origin-cache-control", "private"),
            ("x-origin-body-bytes", "4000"),
            ("x-origin-header", "Content-Type: image/png"),
        ];
        let reply = get(&wires, wire, &format!("/png/{i}"), &png).await;
        assert!(!reply.has_header("content-encoding"), "{what}: png");
        let short = [
            AE,
            ("x-origin-cache-control", "private"),
            ("x-origin-body", "tiny"),
            ("x-origin-header", "Content-Type: text/html"),
        ];
        let reply = get(&wires, wire, &format!("/short/{i}"), &short).await;
        assert!(!reply.has_header("content-encoding"), "{what}: 4 bytes");
        assert_eq!(reply.body, "tiny", "{what}");
        // A stored answer: compress_passed never touches the cache's objects.
        let stored = [
            AE,
            ("x-origin-cache-control", "max-age=60"),
            ("x-origin-body-bytes", "4000"),
            ("x-origin-header", "Content-Type: text/html"),
        ];
        let path = format!("/stored/{i}");
        let first = get(&wires, wire, &path, &stored).await;
        assert!(!first.has_header("content-encoding"), "{what}: stored miss");
        let hit = get(&wires, wire, &path, &stored).await;
        assert!(hit.is_hit(), "{what}: {}", hit.cache_status());
        assert!(!hit.has_header("content-encoding"), "{what}: hit");
        assert_eq!(hit.bytes.len(), 4000, "{what}: hit");
    }
}

/// A slow origin (server-sent events): the first event reaches the client,
/// gzipped and decodable, while the origin still holds the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_arrives_in_pieces_on_every_wire() {
    let origin = Origin::start().await;
    let wires = wires(&origin).await;
    let host = wires.proxy.host();
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let headers = [
            AE,
            ("x-origin-cache-control", "no-store"),
            ("x-origin-body", "event-one|event-two|"),
            ("x-origin-trickle-ms", "2000"),
            ("x-origin-pieces", "2"),
            ("x-origin-chunked", "1"),
            ("x-origin-header", "Content-Type: text/event-stream"),
        ];
        let done_before = origin.bodies_trickled();
        let resp = wires
            .open(wire, &host, &format!("/events/{i}"), &headers)
            .await;
        assert_eq!(resp.status(), 200, "{what}");
        assert_eq!(resp.headers()["content-encoding"], "gzip", "{what}");
        let mut body = resp.into_body();
        let mut decoder = flate2::write::GzDecoder::new(Vec::new());
        while decoder.get_ref().len() < 10 {
            let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
                .await
                .unwrap_or_else(|_| panic!("{what}: no first event"))
                .unwrap_or_else(|| panic!("{what}: body ended early"))
                .unwrap();
            if let Ok(data) = frame.into_data() {
                decoder.write_all(&data).unwrap();
                decoder.flush().unwrap();
            }
        }
        assert_eq!(
            origin.bodies_trickled(),
            done_before,
            "{what}: the first event came only after the origin finished"
        );
        assert_eq!(&decoder.get_ref()[..10], b"event-one|", "{what}");
        let rest = body.collect().await.unwrap().to_bytes();
        decoder.write_all(&rest).unwrap();
        assert_eq!(decoder.finish().unwrap(), b"event-one|event-two|", "{what}");
    }
}

/// Off by default: a route that does not say compress_passed relays the
/// origin's answer exactly (no Vary added, no encoding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_key_nothing_changes() {
    let origin = Origin::start().await;
    let wires = Wires::start(Proxy::new(&origin), "").await;
    let mut headers = private_page();
    headers.push(AE);
    for wire in &wires.all {
        let reply = get(&wires, wire, "/private/off", &headers).await;
        assert!(!reply.has_header("content-encoding"), "{}", wire.label());
        assert!(!reply.has_header("vary"), "{}", wire.label());
        assert_eq!(reply.header("etag"), "\"v1\"", "{}", wire.label());
    }
}
