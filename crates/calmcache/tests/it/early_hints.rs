//! 103 Early Hints (issue 27): a navigation that waits for the origin gets a
//! 103 with the route's links, the stale copy's, or those of the last stored
//! answer, then its answer intact; over HTTP/1.1 (raw socket), HTTP/2 over
//! TLS and h2c (curl, whose nghttp2 prints the 103). Never to HTTP/1.0,
//! never on a hit, never to a request the route bypasses for credentials,
//! never with links to other origins the route does not name; an origin's
//! own 103 relayed on a pass-through route, filtered alike; two waiting
//! streams on one HTTP/2 connection get no misplaced hint.

use std::process::Command;
use std::time::Duration;

use calmcache_testkit::raw::RawConn;
use calmcache_testkit::tls::{Leaf, TestCa};
use calmcache_testkit::{Origin, Proxy, RunningProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::scratch;

const CSS: &str = "</app.css>; rel=preload; as=style";

/// A navigation to `path` whose origin answers after 100 ms, for 60 s,
/// with `Link: link` when given; `extra` adds header lines. It says
/// `Sec-Fetch-Mode: navigate` (as browsers do) unless `extra` sets a mode.
fn navigation(version: &str, path: &str, link: Option<&str>, extra: &str) -> Vec<u8> {
    let link = link.map_or(String::new(), |l| format!("x-origin-header: Link: {l}\r\n"));
    let mode = if extra.to_ascii_lowercase().contains("sec-fetch-mode") {
        ""
    } else {
        "Sec-Fetch-Mode: navigate\r\n"
    };
    format!(
        "GET {path} {version}\r\nHost: localhost\r\nAccept: text/html,*/*;q=0.8\r\n\
         x-origin-delay-ms: 100\r\nx-origin-cache-control: max-age=60\r\n\
         x-origin-body: page {path}\r\n{mode}{link}{extra}\r\n"
    )
    .into_bytes()
}

/// `request` with its `Sec-Fetch-Mode` line taken out (a client that is
/// not a browser).
fn without_mode(request: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(request)
        .replace("Sec-Fetch-Mode: navigate\r\n", "")
        .into_bytes()
}

async fn proxy(origin: &Origin, route: &str, server: &str) -> RunningProxy {
    Proxy::new(origin)
        .no_default_ttl()
        .route(route)
        .server(server)
        .start()
        .await
}

/// Every byte of one exchange on a fresh connection, read until the final
/// answer's body (of `body_len` bytes) is in.
async fn exchange(addr: std::net::SocketAddr, request: &[u8], body_len: usize) -> String {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        let last_head = text.rfind("HTTP/1.");
        if let Some(at) = last_head {
            let tail = &text[at..];
            if !tail.contains(" 103 ") {
                if let Some(end) = tail.find("\r\n\r\n") {
                    if tail.len() >= end + 4 + body_len {
                        return text;
                    }
                }
            }
        }
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, sock.read(&mut buf))
            .await
            .expect("answer within 10 s")
            .unwrap();
        if n == 0 {
            return String::from_utf8_lossy(&got).into_owned();
        }
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http11_miss_gets_103_before_its_intact_answer_and_a_hit_none() {
    let origin = Origin::start().await;
    let route = format!("early_hints_links = [{CSS:?}]");
    let proxy = proxy(&origin, &route, "").await;
    let addr = proxy.running().proxy_addrs[0];
    let body = "page /a";
    let text = exchange(addr, &navigation("HTTP/1.1", "/a", None, ""), body.len()).await;
    let expected = format!("HTTP/1.1 103 Early Hints\r\nlink: {CSS}\r\n\r\nHTTP/1.1 200 OK\r\n");
    assert!(text.starts_with(&expected), "{text}");
    assert!(text.ends_with(body), "{text}");
    // A hit answers at once: no hint.
    let mut conn = RawConn::connect(addr).await.unwrap();
    conn.send(&navigation("HTTP/1.1", "/a", None, ""))
        .await
        .unwrap();
    let hit = conn.read_response(false).await.unwrap();
    assert_eq!(
        (hit.status, hit.interim.clone()),
        (200, vec![]),
        "{}",
        hit.head
    );
    // Misses on the same keepalive connection, one after the other: each
    // gets its hint, and every answer stays intact.
    for path in ["/b", "/c"] {
        conn.send(&navigation("HTTP/1.1", path, None, ""))
            .await
            .unwrap();
        let miss = conn.read_response(false).await.unwrap();
        assert_eq!((miss.status, miss.interim.clone()), (200, vec![103]));
        assert_eq!(miss.body, format!("page {path}").as_bytes());
    }
    // HTTP/1.0 never.
    let old = exchange(addr, &navigation("HTTP/1.0", "/d", None, ""), 7).await;
    assert!(old.starts_with("HTTP/1.0 200"), "{old}");
    assert!(!old.contains("103"), "{old}");
    let early_hints = proxy.status().await["routes"]["test"]["early_hints"].as_u64();
    assert_eq!(early_hints, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_a_navigation_credentials_or_bypass_get_no_hint() {
    let origin = Origin::start().await;
    let route = format!("early_hints_links = [{CSS:?}]\nbypass = [\"cookie:session\"]");
    let proxy = proxy(&origin, &route, "").await;
    let addr = proxy.running().proxy_addrs[0];
    let mut conn = RawConn::connect(addr).await.unwrap();
    let cases = [
        ("/img", "Sec-Fetch-Mode: no-cors\r\n"),
        ("/auth", "Authorization: Basic eDp5\r\n"),
        ("/bypassed", "Cookie: session=1\r\n"),
    ];
    for (path, extra) in cases {
        conn.send(&navigation("HTTP/1.1", path, None, extra))
            .await
            .unwrap();
        let resp = conn.read_response(false).await.unwrap();
        assert_eq!((resp.status, resp.interim.clone()), (200, vec![]), "{path}");
    }
    // The same route hints a navigation; off, it does not.
    conn.send(&navigation(
        "HTTP/1.1",
        "/nav",
        None,
        "Sec-Fetch-Mode: navigate\r\n",
    ))
    .await
    .unwrap();
    assert_eq!(conn.read_response(false).await.unwrap().interim, vec![103]);
    let off = format!("early_hints = false\nearly_hints_links = [{CSS:?}]");
    let quiet = self::proxy(&origin, &off, "").await;
    let mut conn = RawConn::connect(quiet.running().proxy_addrs[0])
        .await
        .unwrap();
    conn.send(&navigation("HTTP/1.1", "/off", None, ""))
        .await
        .unwrap();
    assert_eq!(
        conn.read_response(false).await.unwrap().interim,
        Vec::<u16>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refetch_hints_the_stored_links_of_its_own_origin_and_named_ones() {
    let origin = Origin::start().await;
    let proxy = proxy(
        &origin,
        r#"early_hints_origins = ["https://cdn.example"]"#,
        "",
    )
    .await;
    let addr = proxy.running().proxy_addrs[0];
    let link = "</s.css>; rel=preload; as=style, </next>; rel=next, \
                <https://evil.example/x.js>; rel=preload; as=script, \
                <https://cdn.example/f.woff2>; rel=preload; as=font";
    // The first miss has nothing to hint yet.
    let first = exchange(addr, &navigation("HTTP/1.1", "/p", Some(link), ""), 7).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // A forced refetch (no-cache) waits: hinted from the stored copy.
    let again = navigation("HTTP/1.1", "/p", Some(link), "Cache-Control: no-cache\r\n");
    let text = exchange(addr, &again, 7).await;
    let hint = text.split("\r\n\r\n").next().unwrap();
    assert_eq!(
        hint,
        "HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload; as=style\r\n\
         link: <https://cdn.example/f.woff2>; rel=preload; as=font",
        "{text}"
    );
    assert!(text.ends_with("page /p"), "{text}");
}

/// `curl -i` of `urls` on one connection with `proto` (`--http2` over TLS,
/// `--http2-prior-knowledge` for h2c): each answer's header blocks and body.
fn curl(ca: Option<&TestCa>, proto: &str, urls: &[String], extra: &[&str]) -> Vec<String> {
    let dir = scratch("early-hints-curl");
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--no-progress-meter",
        "--max-time",
        "10",
        proto,
        "-H",
        "Accept: text/html",
    ]);
    cmd.args([
        "-H",
        "x-origin-delay-ms: 150",
        "-H",
        "x-origin-cache-control: max-age=60",
    ]);
    for e in extra {
        cmd.args(["-H", e]);
    }
    if let Some(ca) = ca {
        cmd.args(["--cacert", ca.ca_pem.to_str().unwrap()]);
    }
    if urls.len() > 1 {
        // Without --parallel-immediate curl waits for the first connection
        // and multiplexes the rest on it.
        cmd.args(["--parallel"]);
    }
    let outs: Vec<_> = (0..urls.len())
        .map(|i| dir.join(format!("out{i}")))
        .collect();
    for (url, out) in urls.iter().zip(&outs) {
        cmd.args(["-i", "-o", out.to_str().unwrap(), url]);
    }
    let done = cmd.output().expect("curl (apt-get install curl)");
    let outs: Vec<String> = outs
        .iter()
        .map(|o| std::fs::read_to_string(o).unwrap_or_default())
        .collect();
    assert!(
        done.status.success(),
        "curl: {:?} {}\n{outs:?}",
        done.status,
        String::from_utf8_lossy(&done.stderr)
    );
    outs
}

/// The status codes of a `curl -i` output, in order.
fn codes(out: &str) -> Vec<&str> {
    statuses(out)
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect()
}

/// The status lines of a `curl -i` output, in order.
fn statuses(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("HTTP/"))
        .map(str::trim)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_http2_and_http11_and_h2c_a_miss_gets_103_then_its_answer() {
    let origin = Origin::start().await;
    let ca = TestCa::new(&scratch("early-hints-tls"));
    let route = format!("early_hints_links = [{CSS:?}]");
    let proxy = h2_proxy(&origin, &route, &ca).await;
    let tls = format!("https://localhost:{}", proxy.tls_addr().port());
    let plain = format!("http://localhost:{}", proxy.running().proxy_addrs[0].port());
    for (ca, proto, base) in [
        (Some(&ca), "--http2", &tls),
        (Some(&ca), "--http1.1", &tls),
        (None, "--http2-prior-knowledge", &plain),
    ] {
        let path = format!("/h{}", proto.len());
        // HTTP/2 hints a request without fetch metadata; HTTP/1.1 only a
        // browser's navigation (a non-browser client may take the 103 for
        // the answer).
        if proto == "--http1.1" {
            let plain_client = &curl(ca, proto, &[format!("{base}/plain")], &[])[0];
            assert_eq!(codes(plain_client), ["200"], "{proto}: {plain_client}");
        }
        let mode = ["Sec-Fetch-Mode: navigate"];
        let extra: &[&str] = if proto == "--http1.1" { &mode } else { &[] };
        let miss = &curl(ca, proto, &[format!("{base}{path}")], extra)[0];
        assert_eq!(codes(miss), ["103", "200"], "{proto}: {miss}");
        assert!(
            miss.to_ascii_lowercase().contains(&format!("link: {CSS}")),
            "{miss}"
        );
        assert!(miss.contains(&format!("path={path}")), "{miss}");
        let hit = &curl(ca, proto, &[format!("{base}{path}")], &[])[0];
        assert_eq!(codes(hit), ["200"], "{proto}: {hit}");
    }
}

/// A proxy with h2c and a TLS listener for `localhost` (certificate of a
/// CA of its own, in `ca`).
async fn h2_proxy(origin: &Origin, route: &str, ca: &TestCa) -> RunningProxy {
    h2_proxy_with(origin, route, &ca.leaf("hints", &["localhost"])).await
}

async fn h2_proxy_with(origin: &Origin, route: &str, leaf: &Leaf) -> RunningProxy {
    let server = format!(
        "h2c = true\ntls_listen = [\"127.0.0.1:0\"]\n[[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    proxy(origin, route, &server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_waiting_streams_on_one_connection_get_no_misplaced_hint() {
    let origin = Origin::start().await;
    let ca = TestCa::new(&scratch("early-hints-two"));
    let proxy = h2_proxy(&origin, "", &ca).await;
    let base = format!("https://localhost:{}", proxy.tls_addr().port());
    // Each URL's answer links its own stylesheet (steered by its query).
    let urls: Vec<String> = (0..2)
        .map(|i| format!("{base}/{i}?x-origin-header=Link:%20%3C/{i}.css%3E;%20rel=preload"))
        .collect();
    for url in &urls {
        curl(Some(&ca), "--http2", std::slice::from_ref(url), &[]);
    }
    for round in 0..5 {
        let outs = curl(Some(&ca), "--http2", &urls, &["Cache-Control: no-cache"]);
        for (i, out) in outs.iter().enumerate() {
            let lines = statuses(out);
            assert_eq!(lines.last(), Some(&"HTTP/2 200"), "round {round}: {out}");
            if lines.len() > 1 {
                assert_eq!(lines, ["HTTP/2 103", "HTTP/2 200"], "{out}");
                let own = format!("</{i}.css>");
                let other = format!("</{}.css>", 1 - i);
                let hint = out.split("HTTP/2 200").next().unwrap();
                assert!(hint.contains(&own) && !hint.contains(&other), "{out}");
            }
            assert!(out.contains(&format!("path=/{i}")), "{out}");
        }
    }
}

/// Percent-encodes `text` for a query value.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The stylesheet: 100 ms at the origin, `private` (the proxy never
/// stores it, so each load fetches it from the origin; the browser keeps
/// it, which is how a preloaded answer is handed to the page), steered by
/// its query.
fn stylesheet() -> String {
    format!(
        "/app.css?x-origin-delay-ms=100&x-origin-cache-control=private%2C%20max-age%3D60&x-origin-header={}&x-origin-body={}",
        encoded("Content-Type: text/css"),
        encoded("body{color:#123}"),
    )
}

/// The page: 180 ms at the origin, stale at once (each load waits for the
/// origin), linking the stylesheet; its script logs the navigation's and
/// the stylesheet's resource timing as one console line.
fn page(css: &str) -> String {
    let html = format!(
        "<!doctype html><html><head><link rel=stylesheet href=\"{css}\"></head><body>page\
         <script>addEventListener('load',()=>setTimeout(()=>{{\
         const n=performance.getEntriesByType('navigation')[0];\
         const c=performance.getEntriesByType('resource').find(e=>e.name.includes('/app.css'));\
         console.log('TIMING '+JSON.stringify({{responseStart:n.responseStart,\
         finalStart:n.finalResponseHeadersStart||0,interim:n.firstInterimResponseStart||0,\
         load:n.loadEventStart,cssStart:c?c.startTime:-1,cssReq:c?c.requestStart:-1,\
         cssEnd:c?c.responseEnd:-1,\
         initiator:c?c.initiatorType:'',protocol:n.nextHopProtocol}}))}},0))</script>\
         </body></html>"
    );
    format!(
        "/page?x-origin-delay-ms=180&x-origin-cache-control=max-age%3D0&x-origin-header={}&x-origin-body={}",
        encoded("Content-Type: text/html"),
        encoded(&html),
    )
}

/// One page load's timing, as the page logged it (milliseconds from the
/// navigation's start). Chromium reports a hinted preload's resource
/// timing from when the page took it over (`cssStart` after `finalStart`),
/// so the order is read from the navigation's interim response and the
/// preload's initiator instead.
#[derive(Debug, serde::Deserialize)]
struct Timing {
    /// The first byte of the answer: the 103's when there is one.
    #[serde(rename = "responseStart")]
    response_start: f64,
    /// The final answer's head (`finalResponseHeadersStart`).
    #[serde(rename = "finalStart")]
    final_start: f64,
    /// The 103's arrival (`firstInterimResponseStart`), 0 without one.
    interim: f64,
    /// `loadEventStart`: the page and its stylesheet are in.
    load: f64,
    /// The stylesheet's entry: start, end, initiator.
    #[serde(rename = "cssStart")]
    css_start: f64,
    #[serde(rename = "cssEnd")]
    css_end: f64,
    initiator: String,
    /// `h2`: Chromium takes Early Hints over HTTP/2 (and 3) only.
    protocol: String,
}

/// The base64 SHA-256 of `leaf`'s public key (openssl), for chromium's
/// `--ignore-certificate-errors-spki-list`: unlike
/// `--ignore-certificate-errors` it makes the certificate valid, and
/// chromium stores nothing of a connection with certificate errors in its
/// HTTP cache, which is how a hinted preload reaches the page.
pub(crate) fn spki_hash(leaf: &Leaf) -> String {
    let script = format!(
        "openssl x509 -in {:?} -pubkey -noout | openssl pkey -pubin -outform der \
         | openssl dgst -sha256 -binary | base64",
        leaf.cert.display().to_string()
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Loads `url` in headless chromium (a fresh profile, trusting the key of
/// hash `spki`) and returns the timing its page logged.
async fn load(url: &str, spki: &str) -> Timing {
    let mut extra = vec![format!("--ignore-certificate-errors-spki-list={spki}")];
    if let Ok(log) = std::env::var("EARLY_HINTS_NETLOG") {
        extra.push(format!("--log-net-log={log}"));
        extra.push("--net-log-capture-mode=Everything".to_owned());
    }
    let run = crate::dashboard::chromium(url, 5_000, &extra).await;
    let line = run
        .console
        .iter()
        .find(|l| l.contains("TIMING "))
        .unwrap_or_else(|| panic!("no timing logged:\n{}", run.stderr));
    let json = line.split("TIMING ").nth(1).unwrap();
    let json = json
        .split("\", source:")
        .next()
        .unwrap()
        .replace("\\\"", "\"");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_starts_the_hinted_stylesheet_before_the_page_answers() {
    let origin = Origin::start().await;
    let ca = TestCa::new(&scratch("early-hints-chromium"));
    let css = stylesheet();
    let route = format!("early_hints_links = [\"<{css}>; rel=preload; as=style\"]");
    let leaf = ca.leaf("hints", &["localhost"]);
    let proxy = h2_proxy_with(&origin, &route, &leaf).await;
    let url = format!(
        "https://localhost:{}{}",
        proxy.tls_addr().port(),
        page(&css)
    );
    let timing = load(&url, &spki_hash(&leaf)).await;
    assert_eq!(timing.protocol, "h2", "{timing:?}");
    // The 103 came before the page's 200, and the stylesheet was fetched
    // because of it: Chromium starts an early-hints preload when the 103
    // arrives, before the final answer.
    assert!(timing.interim > 0.0, "{timing:?}");
    assert!(timing.interim < timing.final_start, "{timing:?}");
    assert_eq!(timing.response_start, timing.interim, "{timing:?}");
    assert_eq!(timing.initiator, "early-hints", "{timing:?}");
    assert!(timing.css_end > 0.0 && timing.css_start > 0.0, "{timing:?}");
    // Without hints: no 103, the stylesheet comes from the page's link.
    let quiet = format!("early_hints = false\n{route}");
    let proxy = h2_proxy_with(&origin, &quiet, &leaf).await;
    let url = format!(
        "https://localhost:{}{}",
        proxy.tls_addr().port(),
        page(&css)
    );
    let timing = load(&url, &spki_hash(&leaf)).await;
    assert_eq!(
        (timing.interim, timing.initiator.as_str()),
        (0.0, "link"),
        "{timing:?}"
    );
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `bench/earlyhints` runs this: 10 loads with hints and 10 without (a
/// fresh chromium profile each, a 180 ms page, a 100 ms stylesheet), and
/// prints the medians. Not a test: it asserts nothing about time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: bench/earlyhints"]
async fn measure_page_loads_with_and_without_hints() {
    let loads: usize = std::env::var("EARLY_HINTS_LOADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let origin = Origin::start().await;
    let ca = TestCa::new(&scratch("early-hints-measure"));
    let leaf = ca.leaf("hints", &["localhost"]);
    let spki = spki_hash(&leaf);
    let css = stylesheet();
    let route = format!("early_hints_links = [\"<{css}>; rel=preload; as=style\"]");
    let mut rows = Vec::new();
    for (name, keys) in [
        ("hints", route.clone()),
        ("no hints", format!("early_hints = false\n{route}")),
    ] {
        let proxy = h2_proxy_with(&origin, &keys, &leaf).await;
        let url = format!(
            "https://localhost:{}{}",
            proxy.tls_addr().port(),
            page(&css)
        );
        let mut timings = Vec::new();
        for _ in 0..loads {
            timings.push(load(&url, &spki).await);
        }
        let load_ms = median(timings.iter().map(|t| t.load).collect());
        let css_after = median(timings.iter().map(|t| t.css_end - t.final_start).collect());
        let hinted = timings
            .iter()
            .filter(|t| t.initiator == "early-hints")
            .count();
        println!(
            "{name:>9}: load {load_ms:6.1} ms (median of {loads}), stylesheet in {css_after:6.1} ms \
             after the page's 200, {hinted}/{loads} preloaded by the 103"
        );
        rows.push(load_ms);
    }
    println!("load with hints / without: {:.2}", rows[0] / rows[1]);
}

/// An origin that answers every request with a 103 (one link of its own
/// origin, one of another) and then `200 ok`, over raw HTTP/1.1.
async fn hinting_origin() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let answer =
                    "HTTP/1.1 103 Early Hints\r\nLink: </o.css>; rel=preload; as=style\r\n\
                              Link: <https://evil.example/x.js>; rel=preload; as=script\r\n\r\n\
                              HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                let _ = sock.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origins_own_103_is_relayed_on_a_pass_through_route_filtered() {
    let origin = hinting_origin().await;
    let proxy = Proxy::with_upstream(origin).no_zone().start().await;
    let addr = proxy.running().proxy_addrs[0];
    // HTTP/1.1 without fetch metadata: not relayed (it may not be a browser).
    let request = b"GET /p HTTP/1.1\r\nHost: localhost\r\nAccept: text/html\r\n\r\n";
    let text = exchange(addr, request, 2).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let request = b"GET /p HTTP/1.1\r\nHost: localhost\r\nAccept: text/html\r\n\
                    Sec-Fetch-Mode: navigate\r\n\r\n";
    let text = exchange(addr, request, 2).await;
    let hint = text.split("\r\n\r\n").next().unwrap();
    assert_eq!(
        hint, "HTTP/1.1 103 Early Hints\r\nlink: </o.css>; rel=preload; as=style",
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nok"), "{text}");
    // Not a navigation: nothing relayed.
    let request = b"GET /p HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n";
    let text = exchange(addr, request, 2).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http11_hints_only_a_browser_navigation_and_h2_also_no_fetch_metadata() {
    let origin = Origin::start().await;
    let route = format!("early_hints_links = [{CSS:?}]");
    let ca = TestCa::new(&scratch("early-hints-mode"));
    let proxy = h2_proxy(&origin, &route, &ca).await;
    let addr = proxy.running().proxy_addrs[0];
    // HTTP/1.1 without Sec-Fetch-Mode (Python's http.client, curl): no 103,
    // and the pooled connection's next answer is its own.
    let mut conn = RawConn::connect(addr).await.unwrap();
    let plain = without_mode(&navigation("HTTP/1.1", "/m1", None, ""));
    conn.send(&plain).await.unwrap();
    let resp = conn.read_response(false).await.unwrap();
    assert_eq!((resp.status, resp.interim.clone()), (200, vec![]));
    assert_eq!(resp.body, b"page /m1");
    // With navigate, on the same connection: hinted.
    conn.send(&navigation("HTTP/1.1", "/m2", None, ""))
        .await
        .unwrap();
    let resp = conn.read_response(false).await.unwrap();
    assert_eq!((resp.status, resp.interim.clone()), (200, vec![103]));
    assert_eq!(resp.body, b"page /m2");
    // h2c without fetch metadata: hinted (curl sends none).
    let h2c = format!("http://localhost:{}/m3", addr.port());
    let miss = &curl(None, "--http2-prior-knowledge", &[h2c], &[])[0];
    assert_eq!(codes(miss), ["103", "200"], "{miss}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_links_go_only_to_the_host_that_stored_them() {
    const TOKEN: &str = "hints-token";
    let origin = Origin::start().await;
    // The key omits the host: both hosts share one URL's memory slot.
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route("key = \"$uri\"")
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .start()
        .await;
    let addr = proxy.running().proxy_addrs[0];
    let link = "</a-only.css>; rel=preload; as=style";
    let on = |host: &str, extra: &str| {
        let req = navigation("HTTP/1.1", "/p", Some(link), extra);
        String::from_utf8_lossy(&req)
            .replace("Host: localhost", &format!("Host: {host}"))
            .into_bytes()
    };
    let first = exchange(addr, &on("a.example", ""), 7).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // Copy gone, memory kept: host A's next miss is hinted from memory.
    proxy.purge(TOKEN, r#"{"url": "/p"}"#).await;
    let again = exchange(addr, &on("a.example", ""), 7).await;
    assert!(
        again.starts_with(&format!("HTTP/1.1 103 Early Hints\r\nlink: {link}\r\n\r\n")),
        "{again}"
    );
    // Host B's miss on the same key: never host A's links.
    proxy.purge(TOKEN, r#"{"url": "/p"}"#).await;
    let other = navigation("HTTP/1.1", "/p", None, "");
    let other = String::from_utf8_lossy(&other).replace("Host: localhost", "Host: b.example");
    let text = exchange(addr, other.as_bytes(), 7).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(!text.contains("a-only"), "{text}");
}

/// Size of the big answer read slowly while a pipelined navigation waits.
const BIG: usize = 1 << 20;

/// Sends `/big` (a hit of [`BIG`] bytes) and the navigation `nav` pipelined
/// on one connection with a small receive buffer, and reads slowly (16 KiB,
/// then a pause: the proxy's socket stays full while the big answer's end
/// is in hyper's buffer and the navigation is dispatched). Every byte.
async fn pipelined_slowly(addr: std::net::SocketAddr, nav: &str) -> Vec<u8> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut sock = socket.connect(addr).await.unwrap();
    let mut requests = big_request();
    requests.extend(navigation("HTTP/1.1", nav, None, ""));
    sock.write_all(&requests).await.unwrap();
    let end = format!("page {nav}");
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !got.ends_with(end.as_bytes()) {
        let mut buf = vec![0u8; 16 * 1024];
        let n = tokio::time::timeout_at(deadline, sock.read(&mut buf))
            .await
            .expect("both answers within 20 s")
            .unwrap();
        assert!(n > 0, "closed after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
        // Time is the subject here: a reader slower than the proxy.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    got
}

fn big_request() -> Vec<u8> {
    format!(
        "GET /big HTTP/1.1\r\nHost: localhost\r\nx-origin-body: big\r\n\
         x-origin-body-bytes: {BIG}\r\nx-origin-cache-control: max-age=60\r\n\r\n"
    )
    .into_bytes()
}

/// Splits one HTTP/1.1 message head off `bytes`: its text and the rest.
fn head_of(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(bytes)));
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    (head, &bytes[end + 4..])
}

/// End to end over a real socket that fills: the bytes parse as whole
/// answers in order, a 103 only between the big answer's end and the
/// navigation's head. (The exact interleaving that hit the bug, a write
/// taken 0 bytes right after a completed flush, is pinned deterministically
/// by `net::conn`'s unit test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_never_lands_inside_the_previous_pipelined_answer() {
    let origin = Origin::start().await;
    let route = format!("early_hints_links = [{CSS:?}]");
    let proxy = proxy(&origin, &route, "").await;
    let addr = proxy.running().proxy_addrs[0];
    let warm = exchange(addr, &big_request(), BIG).await;
    assert!(warm.starts_with("HTTP/1.1 200"), "{}", &warm[..200]);
    let mut hinted = 0;
    for round in 0..3 {
        let nav = format!("/nav{round}");
        let got = pipelined_slowly(addr, &nav).await;
        // The big answer, whole: its head, then exactly its body.
        let (head, rest) = head_of(&got);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no content-length: {head}"));
        assert_eq!(len, BIG);
        let (body, mut rest) = rest.split_at(len);
        assert!(body.starts_with(b"big"), "round {round}");
        if let Some(at) = body[3..].iter().position(|b| *b != b'.') {
            let from = &body[3 + at..];
            let shown = String::from_utf8_lossy(&from[..from.len().min(200)]);
            panic!(
                "round {round}: bytes inside the big body at {}: {shown}",
                3 + at
            );
        }
        // Then the navigation's answer, its 103 (if any) just before it.
        if rest.starts_with(b"HTTP/1.1 103 ") {
            let (hint, after) = head_of(rest);
            assert_eq!(hint, format!("HTTP/1.1 103 Early Hints\r\nlink: {CSS}"));
            rest = after;
            hinted += 1;
        }
        let (head, body) = head_of(rest);
        assert!(head.starts_with("HTTP/1.1 200"), "round {round}: {head}");
        assert_eq!(body, format!("page {nav}").as_bytes(), "round {round}");
    }
    println!("{hinted}/3 pipelined navigations hinted");
}
