//! Hostile inputs at the request edge (issue 11): request smuggling shapes,
//! bad syntax and odd versions over HTTP/1.1 written byte for byte, and
//! malformed HTTP/2 (fields, pseudo-headers, lengths, CONTINUATION floods,
//! rapid resets) written frame by frame, against a proxy in front of a
//! [`RawRecorder`] that judges the exact bytes it gets.
//!
//! Every case says what the client must see and whether the origin may see
//! anything at all; a test plays all of its cases, prints one line per case
//! (`PASS`/`FAIL`, with the proxy's actual answer), and fails at the end
//! listing the failed ones. The origin must never receive a malformed
//! request (`assert_well_formed`).
//!
//! The proxy has two routes: `^/c/` caches (zone, the origin's `max-age=60`),
//! everything else (`/p/...`) goes through without a zone.

use std::fmt::Write as _;
use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::raw::h2::{code, code_name, pseudo, H2Conn, H2Outcome, H2_LIMIT};
use calmcache_testkit::raw::hpack::encode_literal;
use calmcache_testkit::raw::{
    send_raw_keepalive, try_send_raw, RawConn, RawRecorder, RawRequest, RawResponse,
};
use calmcache_testkit::tls::TestCa;
use calmcache_testkit::Proxy;

/// A proxy in front of `recorder`: `^/c/` cached, the rest without a zone;
/// `server` adds `[server]` keys.
async fn proxy(recorder: &RawRecorder, server: &str) -> RunningProxy {
    Proxy::with_upstream(recorder.addr())
        .no_default_ttl()
        .route("match = \"^/c/\"\n\n[[routes]]\nname = \"plain\"\nupstream = \"origin\"")
        .server(server)
        .start()
        .await
}

/// What the origin got during one case.
struct Seen {
    /// Complete requests.
    complete: Vec<RawRequest>,
    /// Requests the proxy aborted (head, part of a body).
    incomplete: Vec<RawRequest>,
    /// Anything at all (complete, aborted, unreadable).
    any: usize,
}

type Check = Box<dyn Fn(&RawResponse, &Seen) -> Result<(), String>>;

/// The answer is one of `codes` and the origin saw nothing.
fn refuse(codes: &'static [u16]) -> Check {
    Box::new(move |r, seen| {
        if !codes.contains(&r.status) {
            return Err(format!(
                "want {codes:?}, got {}; the origin saw {:?}",
                r.describe(),
                heads(seen)
            ));
        }
        if seen.any > 0 {
            return Err(format!(
                "answered {} but the origin saw {} request(s): {:?}",
                r.status,
                seen.any,
                heads(seen)
            ));
        }
        Ok(())
    })
}

/// The answer is 200 and `check` holds for what the origin got (at least
/// one complete request).
fn serve(check: fn(&[RawRequest]) -> Result<(), String>) -> Check {
    Box::new(move |r, seen| {
        if r.status != 200 {
            return Err(format!("want 200, got {}: {:?}", r.describe(), body(r)));
        }
        if seen.complete.is_empty() {
            return Err("200 but the origin got no complete request".into());
        }
        check(&seen.complete)
    })
}

/// Either refused with one of `codes` (origin untouched) or served as `check` says.
fn refuse_or_serve(codes: &'static [u16], check: fn(&[RawRequest]) -> Result<(), String>) -> Check {
    let (a, b) = (refuse(codes), serve(check));
    Box::new(move |r, seen| {
        if r.status == 200 {
            b(r, seen)
        } else {
            a(r, seen)
        }
    })
}

/// RFC 9112 §6.3 (3): Content-Length with Transfer-Encoding. Refused (400),
/// or, as the RFC also allows, processed by Transfer-Encoding alone: the
/// Content-Length removed before anything is forwarded, and the client
/// connection closed after the answer. hyper's parser removes the
/// Content-Length before calmcache sees the request, so the second is what
/// happens; the origin must see one framing only (the recorder's checks).
fn te_overrides_cl() -> Check {
    let refused = refuse(&[400]);
    Box::new(move |r, seen| {
        if r.status != 200 {
            return refused(r, seen);
        }
        if !r.closed {
            return Err(format!(
                "served but the connection stayed open: {}",
                r.describe()
            ));
        }
        for q in &seen.complete {
            if !q.header_all("content-length").is_empty() {
                return Err(format!(
                    "the origin got a Content-Length: {:?}",
                    q.head_text()
                ));
            }
            if q.method == "POST" && q.body != b"hello" {
                return Err(format!("the origin got body {:?}", q.body));
            }
        }
        Ok(())
    })
}

/// A malformed chunked body: 400 (never 502), and no complete request at
/// the origin (an aborted one is fine: the proxy may have begun streaming).
fn bad_body() -> Check {
    Box::new(|r, seen| {
        if r.status != 400 {
            return Err(format!("want 400, got {}", r.describe()));
        }
        if !seen.complete.is_empty() {
            return Err(format!(
                "the origin got a complete request: {:?} body {:?}",
                heads(seen),
                seen.complete
                    .iter()
                    .map(|q| String::from_utf8_lossy(&q.body).into_owned())
                    .collect::<Vec<_>>()
            ));
        }
        Ok(())
    })
}

fn heads(seen: &Seen) -> Vec<String> {
    seen.complete
        .iter()
        .chain(&seen.incomplete)
        .map(RawRequest::head_text)
        .collect()
}

fn body(r: &RawResponse) -> String {
    String::from_utf8_lossy(&r.body).chars().take(200).collect()
}

fn no_te_or_trailers(reqs: &[RawRequest]) -> Result<(), String> {
    for r in reqs {
        let te = r.header_all("te");
        if !(te.is_empty() || te == ["trailers"]) {
            return Err(format!("the origin got TE {te:?}"));
        }
    }
    Ok(())
}

fn one_length_hello(reqs: &[RawRequest]) -> Result<(), String> {
    let r = &reqs[0];
    let cl = r.header_all("content-length");
    if cl != ["5"] || r.body != b"hello" {
        return Err(format!(
            "origin got Content-Length {cl:?}, body {:?}",
            r.body
        ));
    }
    Ok(())
}

/// A cache fetch may drop a GET's body: then no length at all is fine.
fn at_most_one_length(reqs: &[RawRequest]) -> Result<(), String> {
    let r = &reqs[0];
    let cl = r.header_all("content-length");
    if cl.len() > 1 || (cl.len() == 1 && r.body != b"hello") {
        return Err(format!(
            "origin got Content-Length {cl:?}, body {:?}",
            r.body
        ));
    }
    Ok(())
}

fn length_10(reqs: &[RawRequest]) -> Result<(), String> {
    let r = &reqs[0];
    let cl = r.header_all("content-length");
    let chunked = r.header_all("transfer-encoding") == ["chunked"];
    if !(cl == ["10"] || (cl.is_empty() && chunked)) || r.body != b"0123456789" {
        return Err(format!(
            "origin got Content-Length {cl:?}, body {:?}",
            r.body
        ));
    }
    Ok(())
}

fn body_hello(reqs: &[RawRequest]) -> Result<(), String> {
    if reqs[0].body != b"hello" {
        return Err(format!("origin got body {:?}", reqs[0].body));
    }
    Ok(())
}

fn anything(_: &[RawRequest]) -> Result<(), String> {
    Ok(())
}

fn target_is_c_abs(reqs: &[RawRequest]) -> Result<(), String> {
    if reqs[0].target != "/c/abs" {
        return Err(format!("origin got target {:?}", reqs[0].target));
    }
    Ok(())
}

fn no_underscore_names(reqs: &[RawRequest]) -> Result<(), String> {
    for r in reqs {
        if let Some((n, _)) = r.headers.iter().find(|(n, _)| n.contains('_')) {
            return Err(format!("origin got a header named {n:?}"));
        }
        if !r.header_all("transfer-encoding").is_empty() && r.body != b"hello" {
            return Err(format!("origin got {:?}", r.head_text()));
        }
    }
    Ok(())
}

fn host_kept(reqs: &[RawRequest]) -> Result<(), String> {
    if reqs[0].header_all("host").len() != 1 {
        return Err(format!("origin got {:?}", reqs[0].head_text()));
    }
    Ok(())
}

fn own_forwarded_proto(reqs: &[RawRequest]) -> Result<(), String> {
    if reqs[0].header_all("x-forwarded-proto") != ["http"] {
        return Err(format!("origin got {:?}", reqs[0].head_text()));
    }
    Ok(())
}

/// One HTTP/1 case: the bytes sent and the check of the outcome.
struct Case {
    name: String,
    bytes: Vec<u8>,
    check: Check,
}

/// Plays `cases` one after another (each on a new connection), prints one
/// line each, checks the origin's requests, and fails listing the failures.
async fn play(
    title: &str,
    recorder: &RawRecorder,
    proxy: &RunningProxy,
    cases: Vec<Case>,
) -> Vec<String> {
    let addr = proxy.running().proxy_addrs[0];
    let mut report = String::new();
    let mut failed = Vec::new();
    for case in &cases {
        let (before, before_any) = (recorder.count(), recorder.seen());
        let before_incomplete = recorder.incomplete().len();
        let outcome = try_send_raw(addr, &case.bytes).await;
        // The origin's side of a refused request may still be on its way.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let seen = Seen {
            complete: recorder.requests()[before..].to_vec(),
            incomplete: recorder.incomplete()[before_incomplete..].to_vec(),
            any: recorder.seen() - before_any,
        };
        let verdict = match &outcome {
            Ok(r) => (case.check)(r, &seen),
            Err(e) => Err(format!("no answer: {e}")),
        };
        let answer = match &outcome {
            Ok(r) => r.describe(),
            Err(e) => format!("error: {e}"),
        };
        match verdict {
            Ok(()) => {
                let _ = writeln!(report, "PASS {title}: {} -> {answer}", case.name);
            }
            Err(e) => {
                let _ = writeln!(report, "FAIL {title}: {} -> {answer}: {e}", case.name);
                failed.push(format!("{title}: {}: {e}", case.name));
            }
        }
    }
    println!("{report}");
    failed
}

/// Fails listing every failed case and every malformed request the origin got.
fn finish(failed: &[String], recorder: &RawRecorder) {
    let violations = recorder.violations();
    assert!(
        failed.is_empty() && violations.is_empty(),
        "{} case(s) failed:\n  {}\nthe origin got {} malformed request(s):\n  {}",
        failed.len(),
        failed.join("\n  "),
        violations.len(),
        violations.join("\n  ")
    );
}

fn case(name: impl Into<String>, bytes: impl Into<Vec<u8>>, check: Check) -> Case {
    Case {
        name: name.into(),
        bytes: bytes.into(),
        check,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_framing_conflicts_and_bad_lengths_are_refused() {
    let recorder = RawRecorder::start().await;
    let proxy = proxy(&recorder, "").await;
    let h = proxy.host();
    let post = |path: &str, fields: &str, body: &str| {
        format!("POST {path} HTTP/1.1\r\nHost: {h}\r\n{fields}\r\n{body}")
    };
    let get =
        |path: &str, fields: &str| format!("GET {path} HTTP/1.1\r\nHost: {h}\r\n{fields}\r\n");
    let mut cases = vec![
        // RFC 9112 §6.3 (3): both framings is a smuggling attempt.
        case(
            "CL + TE chunked (GET, cached)",
            get(
                "/c/clte",
                "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            ) + "0\r\n\r\n",
            te_overrides_cl(),
        ),
        case(
            "CL + TE chunked (POST, no zone)",
            post(
                "/p/clte",
                "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            te_overrides_cl(),
        ),
        case(
            "TE chunked + CL (POST, no zone, TE first)",
            post(
                "/p/tecl",
                "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            te_overrides_cl(),
        ),
        // RFC 9112 §6.3 (5): differing lengths are unrecoverable.
        case(
            "two Content-Length, different",
            post(
                "/p/cl2",
                "Content-Length: 5\r\nContent-Length: 6\r\n",
                "hello!",
            ),
            refuse(&[400]),
        ),
        case(
            "Content-Length: 5, 6 (one line)",
            post("/p/cl2list", "Content-Length: 5, 6\r\n", "hello!"),
            refuse(&[400]),
        ),
        // The same value twice may be folded into one (RFC 9110 §8.6).
        case(
            "two Content-Length, same value",
            post(
                "/p/clsame",
                "Content-Length: 5\r\nContent-Length: 5\r\n",
                "hello",
            ),
            refuse_or_serve(&[400], one_length_hello),
        ),
        case(
            "two Content-Length, same value (GET, cached)",
            get("/c/clsame", "Content-Length: 5\r\nContent-Length: 5\r\n") + "hello",
            refuse_or_serve(&[400], at_most_one_length),
        ),
        // RFC 9110 §8.6: Content-Length = 1*DIGIT.
        case(
            "Content-Length: 010 (10 bytes)",
            post("/p/cl010", "Content-Length: 010\r\n", "0123456789"),
            refuse_or_serve(&[400], length_10),
        ),
    ];
    for (label, value) in [
        ("+5", "+5"),
        ("-1", "-1"),
        ("5 5", "5 5"),
        ("0x5", "0x5"),
        ("25 digits", "1234567890123456789012345"),
        ("empty", ""),
        ("5.0", "5.0"),
    ] {
        cases.push(case(
            format!("Content-Length: {label}"),
            post(
                &format!("/p/cl-{}", label.replace(' ', "")),
                &format!("Content-Length: {value}\r\n"),
                "hello",
            ),
            refuse(&[400]),
        ));
    }
    // RFC 9112 §7.1: chunk-size = 1*HEXDIG, each chunk ends with CRLF.
    for (label, chunks) in [
        ("chunk size zz", "zz\r\nhello\r\n0\r\n\r\n"),
        (
            "chunk size of 19 hex digits",
            "fffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        ),
        ("chunk size -5", "-5\r\nhello\r\n0\r\n\r\n"),
        ("chunk size 0x5", "0x5\r\nhello\r\n0\r\n\r\n"),
        ("chunk data without its CRLF", "5\r\nhelloXX0\r\n\r\n"),
        ("chunk longer than its size", "3\r\nhello\r\n0\r\n\r\n"),
        ("chunk size line with a bare LF", "5\nhello\r\n0\r\n\r\n"),
    ] {
        let path = format!("/p/chunk-{}", label.replace(' ', "-"));
        cases.push(case(
            label,
            post(&path, "Transfer-Encoding: chunked\r\n", chunks),
            bad_body(),
        ));
    }
    cases.extend([
        // RFC 9112 §7.1.1: extensions may be ignored, never forwarded raw.
        case(
            "chunk extension 5;name=value",
            post(
                "/p/chunkext",
                "Transfer-Encoding: chunked\r\n",
                "5;name=value\r\nhello\r\n0\r\n\r\n",
            ),
            serve(body_hello),
        ),
        // RFC 9112 §6.1: a coding we do not know; chunked must be last.
        case(
            "Transfer-Encoding: cow, chunked",
            post(
                "/p/tecow",
                "Transfer-Encoding: cow, chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            refuse(&[501]),
        ),
        case(
            "Transfer-Encoding: gzip, chunked",
            post(
                "/p/tegzip",
                "Transfer-Encoding: gzip, chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            refuse(&[501]),
        ),
        case(
            "Transfer-Encoding: chunked, cow (chunked not last)",
            post(
                "/p/techunkedcow",
                "Transfer-Encoding: chunked, cow\r\n",
                "hello",
            ),
            refuse(&[400, 501]),
        ),
        case(
            "Transfer-Encoding twice (chunked, chunked)",
            post(
                "/p/te2",
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            refuse(&[400, 501]),
        ),
        // RFC 9112 §6.1: TE in an HTTP/1.0 request is a smuggling sign.
        case(
            "Transfer-Encoding: chunked on HTTP/1.0",
            format!(
                "POST /p/te10 HTTP/1.0\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\n\
                 5\r\nhello\r\n0\r\n\r\n"
            ),
            refuse(&[400]),
        ),
        // Not a Transfer-Encoding at all: it must not reach the origin as
        // one either (some servers read `_` as `-`).
        case(
            "Transfer_Encoding: chunked (underscore) with a CL body",
            post(
                "/p/underscore",
                "Content-Length: 5\r\nTransfer_Encoding: chunked\r\n",
                "hello",
            ),
            serve(no_underscore_names),
        ),
        case(
            "Transfer_Encoding: chunked (underscore), GET cached",
            get("/c/underscore", "Transfer_Encoding: chunked\r\n"),
            serve(no_underscore_names),
        ),
    ]);
    let failed = play("h1 framing", &recorder, &proxy, cases).await;
    finish(&failed, &recorder);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_bad_syntax_targets_and_hosts_are_refused() {
    let recorder = RawRecorder::start().await;
    let proxy = proxy(&recorder, "").await;
    let h = proxy.host();
    let get =
        |path: &str, fields: &str| format!("GET {path} HTTP/1.1\r\nHost: {h}\r\n{fields}\r\n");
    let mut cases = vec![
        // RFC 9112 §2.2: a bare LF may be read as a line end; then the
        // origin must see CRLF.
        case(
            "bare LF line endings",
            format!("GET /c/lf HTTP/1.1\nHost: {h}\nX-A: 1\n\n"),
            refuse_or_serve(&[400], anything),
        ),
        // RFC 9112 §5.2: obs-fold is refused by a proxy (or replaced by SP).
        case(
            "obs-fold (space)",
            get("/c/fold", "X-A: a\r\n b\r\n"),
            refuse(&[400]),
        ),
        case(
            "obs-fold (tab)",
            get("/c/fold2", "X-A: a\r\n\tb\r\n"),
            refuse(&[400]),
        ),
        // RFC 9112 §3: one SP between the parts, HTTP-version is case-sensitive.
        case(
            "request line with two spaces",
            format!("GET  /c/rl HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "request line with a tab",
            format!("GET\t/c/rl HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "request line without a version",
            format!("GET /c/rl\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "request line with a trailing space",
            format!("GET /c/rl HTTP/1.1 \r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "lowercase http/1.1",
            format!("GET /c/rl http/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        // RFC 9112 §3.2: origin-form starts with `/`; `*` only with OPTIONS.
        case(
            "target !",
            format!("GET ! HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "target @evil",
            format!("GET @evil HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "target * with GET",
            format!("GET * HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "target ..",
            format!("GET .. HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        // RFC 9110 §4.2.4: userinfo is not allowed in http(s) URIs.
        case(
            "absolute-form with userinfo",
            format!("GET http://user:pw@{h}/c/abs-userinfo HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        // RFC 9112 §3.2.2: the target's authority replaces Host; they must not disagree.
        case(
            "absolute-form with another authority than Host",
            format!("GET http://other.example/c/abs-other HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            refuse(&[400]),
        ),
        case(
            "absolute-form agreeing with Host",
            format!("GET http://{h}/c/abs HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            serve(target_is_c_abs),
        ),
        // RFC 9112 §3.2: exactly one valid Host in HTTP/1.1.
        case("no Host", "GET /c/nohost HTTP/1.1\r\n\r\n", refuse(&[400])),
        case(
            "two Host lines",
            get("/c/host2", &format!("Host: {h}\r\n")),
            refuse(&[400]),
        ),
        case(
            "Host: a b",
            "GET /c/hostsp HTTP/1.1\r\nHost: a b\r\n\r\n",
            refuse(&[400]),
        ),
        case(
            "Host: a@b",
            "GET /c/hostat HTTP/1.1\r\nHost: a@b\r\n\r\n",
            refuse(&[400]),
        ),
    ];
    // RFC 9110 §5.5: CR, LF and NUL are never valid in a field value; other
    // controls are refused too; names are tokens.
    for (label, line) in [
        ("NUL in a value", &b"X-A: a\0b"[..]),
        ("CR alone in a value", b"X-A: a\rb"),
        ("DEL in a value", b"X-A: a\x7fb"),
        ("0x01 in a value", b"X-A: a\x01b"),
        ("ESC in a value", b"X-A: a\x1bb"),
        ("NUL in a name", b"X-\0A: b"),
        ("CR in a name", b"X-\rA: b"),
        ("DEL in a name", b"X-\x7fA: b"),
        ("0x01 in a name", b"X-\x01A: b"),
        ("space before the colon", b"X-A : b"),
        ("empty name", b": b"),
    ] {
        let path = format!("/c/ctl-{}", label.replace(' ', "-"));
        let mut bytes = format!("GET {path} HTTP/1.1\r\nHost: {h}\r\n").into_bytes();
        bytes.extend_from_slice(line);
        bytes.extend_from_slice(b"\r\n\r\n");
        cases.push(case(label, bytes, refuse(&[400])));
    }
    // The same shapes as POSTs with a body on the route without a zone
    // (`{t}` is the target, `{h}` the proxy's host).
    for (label, head) in [
        ("no Host", "POST {t} HTTP/1.1\r\n"),
        (
            "two Host lines",
            "POST {t} HTTP/1.1\r\nHost: {h}\r\nHost: {h}\r\n",
        ),
        ("Host: a b", "POST {t} HTTP/1.1\r\nHost: a b\r\n"),
        ("Host: a@b", "POST {t} HTTP/1.1\r\nHost: a@b\r\n"),
        (
            "obs-fold",
            "POST {t} HTTP/1.1\r\nHost: {h}\r\nX-A: a\r\n b\r\n",
        ),
        (
            "NUL in a value",
            "POST {t} HTTP/1.1\r\nHost: {h}\r\nX-A: a\0b\r\n",
        ),
        ("target !", "POST ! HTTP/1.1\r\nHost: {h}\r\n"),
        ("target ..", "POST .. HTTP/1.1\r\nHost: {h}\r\n"),
        (
            "absolute-form with userinfo",
            "POST http://user:pw@{h}{t} HTTP/1.1\r\nHost: {h}\r\n",
        ),
        (
            "absolute-form with another authority than Host",
            "POST http://other.example{t} HTTP/1.1\r\nHost: {h}\r\n",
        ),
    ] {
        let target = format!("/p/syntax-{}", label.replace(' ', "-"));
        let head = head.replace("{t}", &target).replace("{h}", &h);
        cases.push(case(
            format!("{label} (POST, no zone)"),
            format!("{head}Content-Length: 5\r\n\r\nhello"),
            refuse(&[400]),
        ));
    }
    let failed = play("h1 syntax", &recorder, &proxy, cases).await;
    finish(&failed, &recorder);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_expect_te_and_connection_options() {
    let recorder = RawRecorder::start().await;
    let proxy = proxy(&recorder, "").await;
    let h = proxy.host();
    let get =
        |path: &str, fields: &str| format!("GET {path} HTTP/1.1\r\nHost: {h}\r\n{fields}\r\n");
    let cases = vec![
        // RFC 9110 §10.1.1: an expectation we cannot meet is 417.
        case(
            "Expect: something-else",
            get("/c/expect", "Expect: something-else\r\n"),
            refuse(&[417]),
        ),
        // RFC 9110 §10.1.4: TE is hop-by-hop; forward it only as `trailers`.
        case(
            "TE: gzip",
            get("/c/te-gzip", "TE: gzip\r\n"),
            serve(no_te_or_trailers),
        ),
        case(
            "TE: trailers",
            get("/c/te-trailers", "TE: trailers\r\n"),
            serve(no_te_or_trailers),
        ),
        case(
            "TE: gzip (no zone)",
            get("/p/te-gzip", "TE: gzip\r\n"),
            serve(no_te_or_trailers),
        ),
        // RFC 9110 §7.6.1: Connection options must not strip what the
        // proxy itself needs to send.
        case(
            "Connection: host",
            get("/p/connhost", "Connection: host\r\n"),
            serve(host_kept),
        ),
        case(
            "Connection: host (cached)",
            get("/c/connhost", "Connection: host\r\n"),
            serve(host_kept),
        ),
        case(
            "Connection: X-Forwarded-Proto",
            get(
                "/p/connxfp",
                "Connection: X-Forwarded-Proto\r\nX-Forwarded-Proto: https\r\n",
            ),
            serve(own_forwarded_proto),
        ),
    ];
    let failed = play("h1 options", &recorder, &proxy, cases).await;
    finish(&failed, &recorder);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_expect_100_continue_sends_the_body_once() {
    // RFC 9110 §10.1.1: the body goes once the proxy says 100 (or the client
    // stops waiting for it), and reaches the origin once.
    let recorder = RawRecorder::start().await;
    let proxy = proxy(&recorder, "").await;
    let h = proxy.host();
    let addr = proxy.running().proxy_addrs[0];
    let mut conn = RawConn::connect(addr).await.unwrap();
    conn.send(
        format!(
            "POST /p/continue HTTP/1.1\r\nHost: {h}\r\nContent-Length: 5\r\n\
             Expect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let early = conn.peek_within(Duration::from_secs(1)).await;
    conn.send(b"hello").await.unwrap();
    let reply = conn.read_response(false).await.unwrap();
    println!(
        "Expect: 100-continue -> first bytes {:?}, then {}",
        String::from_utf8_lossy(&early).lines().next(),
        reply.describe()
    );
    assert_eq!(reply.status, 200, "{}", reply.head);
    assert!(
        reply.interim.iter().all(|&s| s == 100),
        "{:?}",
        reply.interim
    );
    let got = recorder.requests();
    assert_eq!(got.len(), 1, "the origin got {got:?}");
    assert_eq!(got[0].body, b"hello");
    recorder.assert_well_formed();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_http10_keep_alive_gets_one_connection_header() {
    let recorder = RawRecorder::start().await;
    let proxy = proxy(&recorder, "").await;
    let addr = proxy.running().proxy_addrs[0];
    let h = proxy.host();
    let req = |path: &str| {
        format!("GET {path} HTTP/1.0\r\nHost: {h}\r\nConnection: keep-alive\r\n\r\n").into_bytes()
    };
    let (a, b) = (req("/c/k10a"), req("/p/k10b"));
    let replies = send_raw_keepalive(addr, &[&a, &b]).await.unwrap();
    for r in &replies {
        println!(
            "HTTP/1.0 keep-alive -> {} {:?}",
            r.describe(),
            r.header_all("connection")
        );
    }
    assert_eq!(
        replies.len(),
        2,
        "the connection closed after the first answer"
    );
    for r in &replies {
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.header_all("connection"), ["keep-alive"], "{}", r.head);
    }
    recorder.assert_well_formed();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_last_keepalive_request_says_only_close() {
    // The last request allowed on a connection: exactly `Connection: close`
    // (never `close, keep-alive`), then the connection closes.
    let recorder = RawRecorder::start().await;
    let proxy = proxy(&recorder, "keepalive_requests = 2").await;
    let addr = proxy.running().proxy_addrs[0];
    let h = proxy.host();
    let req = |path: &str| {
        format!("GET {path} HTTP/1.0\r\nHost: {h}\r\nConnection: keep-alive\r\n\r\n").into_bytes()
    };
    let (a, b) = (req("/c/k10c"), req("/p/k10d"));
    let replies = send_raw_keepalive(addr, &[&a, &b]).await.unwrap();
    for r in &replies {
        println!(
            "HTTP/1.0 keep-alive, keepalive_requests = 2 -> {} {:?}",
            r.describe(),
            r.header_all("connection")
        );
    }
    assert_eq!(replies.len(), 2);
    assert_eq!(
        replies[0].header_all("connection"),
        ["keep-alive"],
        "{}",
        replies[0].head
    );
    assert_eq!(
        replies[1].header_all("connection"),
        ["close"],
        "{}",
        replies[1].head
    );
    assert!(
        replies[1].closed,
        "the connection stayed open after Connection: close"
    );
    // HTTP/1.1 too: the second answer closes, with one Connection header.
    let a = format!("GET /c/k11a HTTP/1.1\r\nHost: {h}\r\n\r\n").into_bytes();
    let b = format!("GET /c/k11b HTTP/1.1\r\nHost: {h}\r\n\r\n").into_bytes();
    let replies = send_raw_keepalive(addr, &[&a, &b]).await.unwrap();
    assert_eq!(replies.len(), 2);
    assert_eq!(
        replies[1].header_all("connection"),
        ["close"],
        "{}",
        replies[1].head
    );
    assert!(replies[1].closed);
    recorder.assert_well_formed();
    proxy.stop().await;
}

// ---------------------------------------------------------------- HTTP/2

/// TLS keys for a listener with one certificate for `localhost`.
fn tls_server_keys(ca: &TestCa) -> String {
    let leaf = ca.leaf("h2", &["localhost"]);
    format!(
        "tls_listen = [\"127.0.0.1:0\"]\n[[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string()
    )
}

/// One HTTP/2 case: the header fields (names exactly as given) and an
/// optional body; the checker sees the outcome and what the origin got.
struct H2Case {
    name: String,
    fields: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    check: H2Check,
}

type H2Check = Box<dyn Fn(&H2Outcome, &Seen) -> Result<(), String>>;

/// RFC 9113 §8.1.1: a malformed request is a stream error of type
/// PROTOCOL_ERROR; a 400 is as good (the server answered before reading
/// on). The origin sees nothing. A GOAWAY(PROTOCOL_ERROR) is safe as well
/// (h2 treats some malformations, e.g. in the pseudo-header order, as a
/// connection error): also accepted.
fn h2_malformed() -> H2Check {
    Box::new(|o, seen| {
        let reset = o.rst == Some(code::PROTOCOL_ERROR)
            || (o.status.is_none() && o.goaway == Some(code::PROTOCOL_ERROR));
        if !(reset || o.status == Some(400)) {
            return Err(format!(
                "want RST_STREAM(PROTOCOL_ERROR) or 400, got {}",
                o.describe()
            ));
        }
        if seen.any > 0 {
            return Err(format!(
                "the origin saw {} request(s): {:?}",
                seen.any,
                heads(seen)
            ));
        }
        Ok(())
    })
}

fn h2_status(want: u16, check: fn(&[RawRequest]) -> Result<(), String>) -> H2Check {
    Box::new(move |o, seen| {
        if o.status != Some(want) {
            return Err(format!("want {want}, got {}", o.describe()));
        }
        if want == 200 {
            if seen.complete.is_empty() {
                return Err("200 but the origin got no complete request".into());
            }
            check(&seen.complete)?;
        } else if seen.any > 0 {
            return Err(format!(
                "the origin saw {} request(s): {:?}",
                seen.any,
                heads(seen)
            ));
        }
        Ok(())
    })
}

/// A 400 or a reset (any code), the origin untouched.
fn h2_refused() -> H2Check {
    Box::new(|o, seen| {
        if !(o.status == Some(400)
            || (o.status.is_none() && (o.rst.is_some() || o.goaway.is_some())))
        {
            return Err(format!("want 400 or a reset, got {}", o.describe()));
        }
        if seen.any > 0 {
            return Err(format!(
                "the origin saw {} request(s): {:?}",
                seen.any,
                heads(seen)
            ));
        }
        Ok(())
    })
}

/// A body whose length disagrees with `content-length`: reset or 400, and
/// no complete request at the origin (an aborted one is fine).
fn h2_bad_length() -> H2Check {
    Box::new(|o, seen| {
        let ok = o.rst == Some(code::PROTOCOL_ERROR) || o.status == Some(400);
        if !ok {
            return Err(format!(
                "want RST_STREAM(PROTOCOL_ERROR) or 400, got {}",
                o.describe()
            ));
        }
        if !seen.complete.is_empty() {
            return Err(format!(
                "the origin got a complete request: {:?}, body of {} bytes",
                heads(seen),
                seen.complete[0].body.len()
            ));
        }
        Ok(())
    })
}

fn host_is_authority(reqs: &[RawRequest]) -> Result<(), String> {
    let want = reqs[0].header("x-test-authority").unwrap_or_default();
    if reqs[0].header_all("host") != [want.clone()] {
        return Err(format!(
            "origin got Host {:?}, want {want:?}: {:?}",
            reqs[0].header_all("host"),
            reqs[0].head_text()
        ));
    }
    Ok(())
}

fn body_is_hello(reqs: &[RawRequest]) -> Result<(), String> {
    host_is_authority(reqs)?;
    body_hello(reqs)
}

fn h2case(
    name: impl Into<String>,
    fields: &[(&str, &str)],
    body: Option<&[u8]>,
    check: H2Check,
) -> H2Case {
    H2Case {
        name: name.into(),
        fields: fields
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: body.map(<[u8]>::to_vec),
        check,
    }
}

/// How to reach the proxy over HTTP/2.
#[derive(Clone)]
enum H2Via {
    H2c(std::net::SocketAddr),
    Tls(std::net::SocketAddr, std::sync::Arc<rustls::ClientConfig>),
}

impl H2Via {
    async fn connect(&self) -> std::io::Result<H2Conn> {
        match self {
            H2Via::H2c(addr) => H2Conn::h2c(*addr).await,
            H2Via::Tls(addr, config) => H2Conn::tls(*addr, "localhost", config.clone()).await,
        }
    }
}

/// Plays HTTP/2 cases, each on a new connection, like [`play`].
async fn play_h2(
    title: &str,
    recorder: &RawRecorder,
    via: &H2Via,
    cases: Vec<H2Case>,
) -> Vec<String> {
    let mut report = String::new();
    let mut failed = Vec::new();
    for case in &cases {
        let (before, before_any) = (recorder.count(), recorder.seen());
        let before_incomplete = recorder.incomplete().len();
        let outcome = match via.connect().await {
            Ok(mut conn) => {
                let fields: Vec<(&str, &str)> = case
                    .fields
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                let stream = conn.next_stream();
                conn.headers(stream, &fields, case.body.is_none()).await;
                if let Some(body) = &case.body {
                    // As given, in one DATA frame, ignoring content-length.
                    conn.data(stream, body, true).await;
                }
                Ok(conn.outcome(stream, H2_LIMIT).await)
            }
            Err(e) => Err(e.to_string()),
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let seen = Seen {
            complete: recorder.requests()[before..].to_vec(),
            incomplete: recorder.incomplete()[before_incomplete..].to_vec(),
            any: recorder.seen() - before_any,
        };
        let (verdict, answer) = match &outcome {
            Ok(o) => ((case.check)(o, &seen), o.describe()),
            Err(e) => (Err(format!("no connection: {e}")), format!("error: {e}")),
        };
        match verdict {
            Ok(()) => {
                let _ = writeln!(report, "PASS {title}: {} -> {answer}", case.name);
            }
            Err(e) => {
                let _ = writeln!(report, "FAIL {title}: {} -> {answer}: {e}", case.name);
                failed.push(format!("{title}: {}: {e}", case.name));
            }
        }
    }
    println!("{report}");
    failed
}

/// A proxy with h2c on its plain listener and a TLS listener (ALPN h2),
/// and the two ways to reach it.
async fn h2_proxy(
    recorder: &RawRecorder,
    name: &str,
) -> (RunningProxy, H2Via, H2Via, std::path::PathBuf) {
    let dir = crate::scratch(name);
    let ca = TestCa::new(&dir);
    let keys = format!("h2c = true\n{}", tls_server_keys(&ca));
    let proxy = proxy(recorder, &keys).await;
    let h2c = H2Via::H2c(proxy.running().proxy_addrs[0]);
    let tls = H2Via::Tls(proxy.tls_addr(), ca.client(&[b"h2"]));
    (proxy, h2c, tls, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_malformed_fields_and_pseudo_headers_are_refused() {
    let recorder = RawRecorder::start().await;
    let (proxy, h2c, tls, dir) = h2_proxy(&recorder, "hostile-h2-fields").await;
    // Leaked: field lists mix it with 'static literals (a few bytes per test).
    let a: &'static str = Box::leak(proxy.host().into_boxed_str());
    let base = |path: &'static str| pseudo("GET", path, a);
    let with = |path: &'static str, extra: &[(&'static str, &'static str)]| {
        let mut f = base(path);
        f.extend_from_slice(extra);
        f
    };
    let mut cases = vec![
        // RFC 9113 §8.2.2: TE may only be "trailers".
        h2case(
            "te: gzip",
            &with("/c/te-gzip", &[("te", "gzip")]),
            None,
            h2_malformed(),
        ),
        h2case(
            "te: trailers",
            &with(
                "/c/te-trailers",
                &[("te", "trailers"), ("x-test-authority", a)],
            ),
            None,
            h2_status(200, host_is_authority),
        ),
    ];
    // RFC 9113 §8.2.2: connection-specific fields make a request malformed.
    for (n, v) in [
        ("connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "h2c"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
    ] {
        let path: &'static str = Box::leak(format!("/c/connspec-{n}").into_boxed_str());
        cases.push(h2case(
            format!("{n}: {v}"),
            &with(path, &[(n, v)]),
            None,
            h2_malformed(),
        ));
    }
    // RFC 9113 §8.3.1, §8.3: pseudo-header misuse.
    let p = |path: &'static str| (":path", path);
    let m = (":method", "GET");
    let s = (":scheme", "http");
    let au = (":authority", a);
    cases.extend([
        h2case("missing :path", &[m, s, au], None, h2_malformed()),
        h2case(
            "missing :method",
            &[s, p("/c/nomethod"), au],
            None,
            h2_malformed(),
        ),
        h2case(
            "missing :scheme",
            &[m, p("/c/noscheme"), au],
            None,
            h2_malformed(),
        ),
        h2case(
            ":path empty",
            &[m, s, (":path", ""), au],
            None,
            h2_malformed(),
        ),
        h2case(
            ":path not starting with /",
            &[m, s, (":path", "c/rel"), au],
            None,
            h2_malformed(),
        ),
        h2case(
            "duplicate :method",
            &[m, (":method", "POST"), s, p("/c/dup"), au],
            None,
            h2_malformed(),
        ),
        h2case(
            "duplicate :path",
            &[m, s, p("/c/dup1"), p("/c/dup2"), au],
            None,
            h2_malformed(),
        ),
        h2case(
            "pseudo after a regular field",
            &[m, s, ("x-a", "1"), p("/c/order"), au],
            None,
            h2_malformed(),
        ),
        h2case(
            ":status in a request",
            &[m, s, p("/c/status"), au, (":status", "200")],
            None,
            h2_malformed(),
        ),
        h2case(
            "unknown pseudo :foo",
            &[m, s, p("/c/foo"), au, (":foo", "bar")],
            None,
            h2_malformed(),
        ),
        // RFC 9113 §8.2.1: field names are lowercase.
        h2case(
            "uppercase field name",
            &[m, s, p("/c/upper"), au, ("X-Upper", "1")],
            None,
            h2_malformed(),
        ),
        h2case(
            "field name with a space",
            &[m, s, p("/c/namesp"), au, ("x a", "1")],
            None,
            h2_malformed(),
        ),
        h2case(
            "field name with a colon inside",
            &[m, s, p("/c/namecolon"), au, ("x:a", "1")],
            None,
            h2_malformed(),
        ),
    ]);
    // RFC 9113 §8.2.1: no leading or trailing SP/HTAB, no CR, LF, NUL in values.
    for (label, v) in [
        ("leading space", " v"),
        ("trailing space", "v "),
        ("leading tab", "\tv"),
        ("trailing tab", "v\t"),
        ("CR", "a\rb"),
        ("LF", "a\nb"),
        ("NUL", "a\0b"),
    ] {
        let path: &'static str =
            Box::leak(format!("/c/ws-{}", label.replace(' ', "-")).into_boxed_str());
        cases.push(h2case(
            format!("value with {label}"),
            &[m, s, p(path), au, ("x-a", v)],
            None,
            h2_refused(),
        ));
    }
    // RFC 9113 §8.3.1: Host and :authority must agree; one is needed.
    cases.extend([
        // RFC 9113 §8.3.1: no userinfo in :authority.
        h2case(
            ":authority with userinfo",
            &[m, s, p("/c/userinfo"), (":authority", "user@localhost")],
            None,
            h2_refused(),
        ),
        h2case(
            "host disagreeing with :authority",
            &[m, s, p("/c/hostdiff"), au, ("host", "other.example")],
            None,
            h2_status(400, anything),
        ),
        h2case(
            "no :authority and no host",
            &[m, s, p("/c/noauth")],
            None,
            h2_status(400, anything),
        ),
        h2case(
            "only :authority: the origin gets Host",
            &[m, s, p("/c/authonly"), au, ("x-test-authority", a)],
            None,
            h2_status(200, host_is_authority),
        ),
        h2case(
            "only host (no :authority)",
            &[m, s, p("/c/hostonly"), ("host", a), ("x-test-authority", a)],
            None,
            h2_status(200, host_is_authority),
        ),
    ]);
    let mut failed = play_h2("h2c fields", &recorder, &h2c, cases).await;
    // Over TLS, one of each kind.
    let cases = vec![
        h2case(
            "te: gzip (TLS)",
            &with("/c/tls-te", &[("te", "gzip")]),
            None,
            h2_malformed(),
        ),
        h2case(
            "connection: keep-alive (TLS)",
            &with("/c/tls-conn", &[("connection", "keep-alive")]),
            None,
            h2_malformed(),
        ),
        h2case(
            "uppercase field name (TLS)",
            &[
                m,
                (":scheme", "https"),
                p("/c/tls-upper"),
                au,
                ("X-Upper", "1"),
            ],
            None,
            h2_malformed(),
        ),
        h2case(
            "only :authority (TLS)",
            &[
                m,
                (":scheme", "https"),
                p("/c/tls-auth"),
                (":authority", "localhost"),
                ("x-test-authority", "localhost"),
            ],
            None,
            h2_status(200, host_is_authority),
        ),
    ];
    failed.extend(play_h2("h2 TLS fields", &recorder, &tls, cases).await);
    finish(&failed, &recorder);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_bodies_lengths_and_versions_reach_the_http1_origin() {
    let recorder = RawRecorder::start().await;
    let (proxy, h2c, tls, dir) = h2_proxy(&recorder, "hostile-h2-bodies").await;
    // Leaked: field lists mix it with 'static literals (a few bytes per test).
    let a: &'static str = Box::leak(proxy.host().into_boxed_str());
    let post =
        |path: &'static str, scheme: &'static str, authority: &'static str, cl: &'static str| {
            let mut f = vec![
                (":method", "POST"),
                (":scheme", scheme),
                (":path", path),
                (":authority", authority),
            ];
            if !cl.is_empty() {
                f.push(("content-length", cl));
            }
            f
        };
    let with_auth = |mut f: Vec<(&'static str, &'static str)>, auth: &'static str| {
        f.push(("x-test-authority", auth));
        f
    };
    let mut failed = Vec::new();
    for (via, scheme, auth, tag) in [
        (&h2c, "http", a, "h2c"),
        (&tls, "https", "localhost", "TLS"),
    ] {
        let cases = vec![
            // RFC 9113 §8.1.1: content-length must match the DATA.
            h2case(
                format!("content-length 5, 10 bytes of DATA ({tag})"),
                &post("/p/len-more", scheme, auth, "5"),
                Some(b"helloworld"),
                h2_bad_length(),
            ),
            h2case(
                format!("content-length 10, 5 bytes then END_STREAM ({tag})"),
                &post("/p/len-less", scheme, auth, "10"),
                Some(b"hello"),
                h2_bad_length(),
            ),
            h2case(
                format!("content-length 5, 10 bytes of DATA, cached route ({tag})"),
                &post("/c/len-more", scheme, auth, "5"),
                Some(b"helloworld"),
                h2_bad_length(),
            ),
            // The request must leave as HTTP/1.1 for the HTTP/1.1 pool.
            h2case(
                format!("POST, no zone ({tag})"),
                &with_auth(post("/p/post", scheme, auth, "5"), auth),
                Some(b"hello"),
                h2_status(200, body_is_hello),
            ),
            h2case(
                format!("POST without content-length, no zone ({tag})"),
                &with_auth(post("/p/post-nocl", scheme, auth, ""), auth),
                Some(b"hello"),
                h2_status(200, body_is_hello),
            ),
            h2case(
                format!("GET, no zone ({tag})"),
                &[
                    (":method", "GET"),
                    (":scheme", scheme),
                    (":path", "/p/get"),
                    (":authority", auth),
                    ("x-test-authority", auth),
                ],
                None,
                h2_status(200, host_is_authority),
            ),
            h2case(
                format!("GET, cached ({tag})"),
                &[
                    (":method", "GET"),
                    (":scheme", scheme),
                    (":path", "/c/get"),
                    (":authority", auth),
                    ("x-test-authority", auth),
                ],
                None,
                h2_status(200, host_is_authority),
            ),
        ];
        failed.extend(play_h2(&format!("h2 bodies {tag}"), &recorder, via, cases).await);
    }
    finish(&failed, &recorder);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_a_large_body_streams_whole_to_the_origin() {
    let recorder = RawRecorder::start().await;
    let (proxy, h2c, tls, dir) = h2_proxy(&recorder, "hostile-h2-large").await;
    let a = proxy.host();
    let a = a.as_str();
    // A 1 MiB body streamed within flow control arrives whole, over h2c
    // and over TLS, and the origin's answer (which names the size it got)
    // comes back.
    let big: Vec<u8> = (0..1024 * 1024).map(|i: u32| (i % 251) as u8).collect();
    let mut failed = Vec::new();
    for (via, scheme, auth, tag) in [
        (&h2c, "http", a, "h2c"),
        (&tls, "https", "localhost", "TLS"),
    ] {
        let before = recorder.count();
        let mut conn = via.connect().await.unwrap();
        let len = big.len().to_string();
        let fields = [
            (":method", "POST"),
            (":scheme", scheme),
            (":path", "/p/big"),
            (":authority", auth),
            ("content-length", len.as_str()),
        ];
        let o = conn.request(&fields, Some(&big)).await;
        println!("1 MiB POST ({tag}) -> {}", o.describe());
        let got = &recorder.requests()[before..];
        let answer = String::from_utf8_lossy(&o.body).into_owned();
        if o.status != Some(200) {
            failed.push(format!(
                "1 MiB POST ({tag}): want 200, got {}",
                o.describe()
            ));
        } else if got.len() != 1 || got[0].body != big {
            failed.push(format!(
                "1 MiB POST ({tag}): the origin got {} request(s), bodies of {:?} bytes",
                got.len(),
                got.iter().map(|r| r.body.len()).collect::<Vec<_>>()
            ));
        } else if !answer.starts_with("got 1048576 bytes") {
            failed.push(format!(
                "1 MiB POST ({tag}): the answer's body was {answer:?}"
            ));
        }
    }
    finish(&failed, &recorder);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// One CONTINUATION flood on a new connection: HEADERS without
/// END_HEADERS, then up to 10,000 CONTINUATION frames of `fragment(i)`,
/// reading between every 64; returns (frames sent, cut off by the server).
async fn continuation_flood(
    via: &H2Via,
    a: &str,
    fragment: impl Fn(usize) -> Vec<u8>,
) -> (usize, bool, String) {
    let mut conn = via.connect().await.unwrap();
    let stream = conn.next_stream();
    let mut fields = pseudo("GET", "/c/flood", a);
    fields.push(("host", a));
    conn.headers_raw(stream, &encode_literal(&fields), 0).await;
    let mut sent = 0;
    let started = std::time::Instant::now();
    for i in 0..10_000 {
        if !conn.continuation(stream, &fragment(i), false).await {
            break;
        }
        sent += 1;
        if i % 64 == 0 {
            conn.drain(Duration::ZERO).await;
            if conn.closed || conn.goaway.is_some() {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    let closed = conn.closes_within(Duration::from_secs(3)).await;
    let what = format!(
        "{sent} frames sent in {:?}; goaway {:?}, closed {closed}, write error {:?}",
        started.elapsed(),
        conn.goaway.map(code_name),
        conn.write_error
    );
    (sent, conn.goaway.is_some() || closed, what)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_continuation_flood_is_cut_off() {
    // CVE-2024-27316 and kin: a header block that never ends must not be
    // read (and buffered) for ever, whether its fragments carry fields
    // (the header list limit) or nothing at all (a frame count limit).
    let recorder = RawRecorder::start().await;
    let (proxy, h2c, tls, dir) = h2_proxy(&recorder, "hostile-h2-flood").await;
    let a = proxy.host();
    let value = "v".repeat(1000);
    let mut failed = Vec::new();
    for (via, tag) in [(&h2c, "h2c"), (&tls, "TLS")] {
        let fat = |i: usize| encode_literal(&[(format!("x-flood-{i}").as_str(), value.as_str())]);
        let empty = |_: usize| Vec::new();
        for (kind, cut, what) in [
            ("1 KiB fragments", continuation_flood(via, &a, fat).await),
            ("empty fragments", continuation_flood(via, &a, empty).await),
        ]
        .map(|(k, (_, cut, what))| (k, cut, what))
        {
            println!("CONTINUATION flood, {kind} ({tag}): {what}");
            if !cut {
                failed.push(format!("{kind} ({tag}): the server kept reading: {what}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_eq!(recorder.seen(), 0, "a flood's request reached the origin");
    // The proxy still serves (with a host that agrees: this test is not
    // about Host).
    let mut fresh = h2c.connect().await.unwrap();
    let mut fields = pseudo("GET", "/c/after-flood", &a);
    fields.push(("host", &a));
    let o = fresh.request(&fields, None).await;
    assert_eq!(o.status, Some(200), "after the flood: {}", o.describe());
    recorder.assert_well_formed();
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends up to `pairs` HEADERS+RST_STREAM(CANCEL) pairs for `GET
/// {prefix}/slow/...` on `conn`, `batch` pairs per write with `pause` between
/// writes, reading what the server says meanwhile; stops at a GOAWAY, a
/// close or 10 s. Returns how many pairs went out.
async fn reset_pairs(
    conn: &mut H2Conn,
    prefix: &str,
    pairs: u32,
    batch: u32,
    pause: Duration,
    a: &str,
) -> u32 {
    use calmcache_testkit::raw::h2::{flag, frame};
    let started = std::time::Instant::now();
    let mut sent = 0u32;
    while sent < pairs {
        let mut frames = Vec::with_capacity(2 * batch as usize);
        for _ in 0..batch {
            let stream = conn.next_stream();
            let path = format!("{prefix}/slow/{stream}");
            let mut fields = pseudo("GET", &path, a);
            fields.push(("host", a));
            let flags = flag::END_HEADERS | flag::END_STREAM;
            frames.push((frame::HEADERS, flags, stream, encode_literal(&fields)));
            let cancel = code::CANCEL.to_be_bytes().to_vec();
            frames.push((frame::RST_STREAM, 0, stream, cancel));
        }
        if !conn.send_frames(&frames).await {
            break;
        }
        sent += batch;
        conn.drain(pause).await;
        if conn.closed || conn.goaway.is_some() || started.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_rapid_reset_does_not_pile_up_origin_requests() {
    let recorder = RawRecorder::start().await;
    let proxy = proxy(&recorder, "h2c = true").await;
    let addr = proxy.running().proxy_addrs[0];
    let a = proxy.host();
    // CVE-2023-44487: 5,000 pairs as fast as the socket takes them, 100 per write.
    let mut conn = H2Conn::h2c(addr).await.unwrap();
    let started = std::time::Instant::now();
    let sent = reset_pairs(&mut conn, "/p", 5_000, 100, Duration::ZERO, &a).await;
    // Let whatever was started reach the origin.
    let _ = conn.closes_within(Duration::from_millis(1000)).await;
    let seen = recorder.seen();
    println!(
        "rapid reset (burst): {sent} HEADERS+RST_STREAM pairs in {:?}; goaway {:?}, closed {}; the origin saw {seen} request(s)",
        started.elapsed(),
        conn.goaway.map(code_name),
        conn.closed
    );
    // Each reset stream should be cancelled before (or while) it is
    // forwarded. 1,000 (a fifth) leaves room for requests already on their
    // way when their reset arrives, and is far below one per pair, which is
    // what an unprotected proxy shows.
    assert!(
        seen < 1_000,
        "the origin saw {seen} requests of {sent} reset streams"
    );
    // Paced: 10 pairs per write, 2 ms apart, so the server has taken each
    // stream in (handed it to the proxy) before its reset arrives; h2's
    // count of resets of streams not yet taken in sees fewer of these. On
    // the no-zone route and on the cached one, each on a new connection.
    for prefix in ["/p", "/c"] {
        let mut conn = H2Conn::h2c(addr).await.unwrap();
        let before = recorder.seen();
        let started = std::time::Instant::now();
        let pause = Duration::from_millis(2);
        let sent = reset_pairs(&mut conn, prefix, 2_000, 10, pause, &a).await;
        let _ = conn.closes_within(Duration::from_millis(1000)).await;
        let seen = recorder.seen() - before;
        println!(
            "rapid reset (paced, {prefix}): {sent} pairs in {:?}; goaway {:?}, closed {}; the origin saw {seen} request(s)",
            started.elapsed(),
            conn.goaway.map(code_name),
            conn.closed
        );
        assert!(
            seen < 1_000,
            "the origin saw {seen} requests of {sent} reset streams (paced, {prefix})"
        );
    }
    // The proxy still serves (with a host that agrees: this test is not
    // about Host).
    let mut fresh = H2Conn::h2c(addr).await.unwrap();
    let mut fields = pseudo("GET", "/c/after-reset", &a);
    fields.push(("host", &a));
    let o = fresh.request(&fields, None).await;
    assert_eq!(o.status, Some(200), "after the resets: {}", o.describe());
    recorder.assert_well_formed();
    proxy.stop().await;
}
