//! Client connections (issue 6): TLS with certificates chosen by SNI,
//! HTTP/2 over TLS and h2c checked with curl, bad certificate files as
//! config errors, the head and idle clocks, graceful shutdown, and reload
//! (valid and invalid, under load, with listeners re-bound and zones kept).

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{free_port, scratch, signal, wait_until, Child};
use calmcache::Config;
use calmcache_testkit::tls::{tls_get, TestCa};
use calmcache_testkit::{get, get_with, Origin, Proxy};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `curl` over TLS to `name` (resolved to the proxy), trusting the test CA:
/// (HTTP version, status, headers and body).
fn curl(ca: &TestCa, port: u16, name: &str, path: &str, proto: &str) -> (String, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-i",
            proto,
            "--max-time",
            "10",
            "--cacert",
            ca.ca_pem.to_str().unwrap(),
            "--resolve",
            &format!("{name}:{port}:127.0.0.1"),
            "-w",
            "\n%{http_version}",
            &format!("https://{name}:{port}{path}"),
        ])
        .output()
        .expect("curl (apt-get install curl)");
    assert!(
        out.status.success(),
        "curl {proto} https://{name}:{port}{path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (response, version) = text.rsplit_once('\n').unwrap();
    (version.trim().to_owned(), response.to_owned())
}

fn tls_keys(a: &calmcache_testkit::tls::Leaf, b: &calmcache_testkit::tls::Leaf) -> String {
    format!(
        "tls_listen = [\"127.0.0.1:0\"]\n\
         [[server.tls]]\ncert = {:?}\nkey = {:?}\n\
         [[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        a.cert.display().to_string(),
        a.key.display().to_string(),
        b.cert.display().to_string(),
        b.key.display().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_picks_the_certificate_by_sni_and_speaks_http2_to_curl() {
    let origin = Origin::start().await;
    let dir = scratch("conn-tls");
    let ca = TestCa::new(&dir);
    let a = ca.leaf("a", &["a.test"]);
    let b = ca.leaf("b", &["b.test", "*.b.test"]);
    let proxy = Proxy::new(&origin).server(&tls_keys(&a, &b)).start().await;
    let addr = proxy.tls_addr();
    let client = ca.client(&[b"h2", b"http/1.1"]);
    // Each name gets its own certificate (verified against the CA by name).
    for (name, leaf) in [("a.test", &a), ("b.test", &b), ("www.b.test", &b)] {
        let reply = tls_get(addr, name, client.clone(), None).await.unwrap();
        assert_eq!(reply.leaf, leaf.der, "certificate for {name}");
        assert_eq!(reply.alpn.as_deref(), Some(&b"h2"[..]), "ALPN for {name}");
    }
    // An unknown name gets the first certificate (its verification fails).
    let unknown = tls_get(addr, "c.test", client.clone(), None).await;
    assert!(unknown.is_err(), "c.test must not verify");
    // HTTP/1.1 over TLS by ALPN, with a request.
    let h1 = ca.client(&[b"http/1.1"]);
    let reply = tls_get(addr, "a.test", h1, Some("/h1")).await.unwrap();
    assert_eq!(reply.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert!(
        reply.response.starts_with("HTTP/1.1 200"),
        "{}",
        reply.response
    );
    // curl: HTTP/2 over TLS, cached like HTTP/1.1 (hit on the second).
    let port = addr.port();
    let (version, first) = curl(&ca, port, "a.test", "/page", "--http2");
    assert_eq!(version, "2", "{first}");
    assert!(first.starts_with("HTTP/2 200"), "{first}");
    let (version, second) = curl(&ca, port, "a.test", "/page", "--http2");
    assert_eq!(version, "2");
    let status_line = second
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("cache-status"))
        .unwrap_or_default()
        .to_owned();
    assert!(status_line.contains("hit"), "{second}");
    assert_eq!(origin.hits_for("/page"), 1);
    // The key carries the scheme: over plain HTTP it is another object.
    let plain = get_with(
        Method::GET,
        &proxy.url("/page"),
        &[("host", &format!("a.test:{}", addr.port()))],
    )
    .await;
    assert!(
        plain.cache_status().contains("miss"),
        "{}",
        plain.cache_status()
    );
    assert_eq!(origin.hits_for("/page"), 2);
    let (version, h1) = curl(&ca, port, "b.test", "/page11", "--http1.1");
    assert_eq!(version, "1.1", "{h1}");
    // The origin learns the client came over TLS.
    let seen = origin.requests();
    let forwarded = seen.iter().find(|r| r.path_and_query == "/page").unwrap();
    assert_eq!(forwarded.headers["x-forwarded-proto"], "https");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_is_served_on_plain_listeners_when_enabled() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).server("h2c = true").start().await;
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "--max-time",
            "10",
            "--http2-prior-knowledge",
            "-w",
            "%{http_version} %{http_code}",
            &proxy.url("/h2c"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200");
    // HTTP/1.1 still works on the same listener.
    assert_eq!(get(&proxy.url("/h1")).await.status, 200);
    proxy.stop().await;
}

#[test]
fn bad_certificate_files_are_config_errors_naming_the_file() {
    let dir = scratch("conn-badcert");
    let ca = TestCa::new(&dir);
    let a = ca.leaf("a", &["a.test"]);
    let b = ca.leaf("b", &["b.test"]);
    let base = "[upstreams.o]\nservers = [\"127.0.0.1:1\"]\n[[routes]]\nupstream = \"o\"\n";
    let cases = [
        // A key that belongs to another certificate.
        (
            a.cert.clone(),
            b.key.clone(),
            "does not belong to the certificate",
        ),
        // A missing file.
        (
            dir.join("nope.pem"),
            a.key.clone(),
            "cannot read the certificate",
        ),
        // A key file holding a certificate (the same file as `cert`: read
        // as a combined PEM, which lacks the key).
        (
            a.cert.clone(),
            a.cert.clone(),
            "no private key in it (found 1 certificate)",
        ),
        // A key file holding a certificate only.
        (
            a.cert.clone(),
            b.cert.clone(),
            "cannot read the private key: no private key in it",
        ),
    ];
    for (cert, key, reason) in cases {
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\ntls_listen = [\"127.0.0.1:0\"]\n\
             [[server.tls]]\ncert = {:?}\nkey = {:?}\n{base}",
            cert.display().to_string(),
            key.display().to_string()
        );
        let e = Config::from_toml(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("server.tls[0]"), "{e}");
        assert!(e.contains(reason), "{reason}: {e}");
        let named = if reason.contains("private key") {
            &key
        } else {
            &cert
        };
        assert!(e.contains(&named.display().to_string()), "{e}");
    }
    // tls_listen without a certificate.
    let text =
        format!("[server]\nlisten = [\"127.0.0.1:0\"]\ntls_listen = [\"127.0.0.1:0\"]\n{base}");
    let e = Config::from_toml(&text, "t.toml").unwrap_err().to_string();
    assert!(e.contains("no certificate is configured"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads until the peer closes (0 bytes or an error); the time it took.
async fn until_closed(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_are_cut_after_header_read_timeout_but_idle_keepalive_is_not() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .server("header_read_timeout = \"1s\"\nkeepalive_timeout = \"30s\"")
        .start()
        .await;
    let addr = proxy.host();
    // Half a head, then nothing: closed after about 1 s.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let took = until_closed(&mut slow, Duration::from_secs(10)).await;
    let took = took.expect("a slow head must be cut");
    assert!(
        took >= Duration::from_millis(800),
        "cut too early: {took:?}"
    );
    assert!(took < Duration::from_secs(5), "cut too late: {took:?}");
    // A connection that sends nothing at all is cut as well.
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert!(until_closed(&mut silent, Duration::from_secs(10))
        .await
        .is_some());
    // After a whole request, idling 2 s (past header_read_timeout, within
    // keepalive_timeout) keeps the connection for the next request.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    for i in 0..2 {
        if i == 1 {
            // The subject: an idle pause past header_read_timeout.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let req = format!("GET /idle{i} HTTP/1.1\r\nHost: x\r\n\r\n");
        idle.write_all(req.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(text.starts_with("HTTP/1.1 200"), "request {i}: {text}");
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_after_keepalive_timeout() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .server("keepalive_timeout = \"1s\"\nheader_read_timeout = \"10s\"")
        .start()
        .await;
    let mut conn = tokio::net::TcpStream::connect(proxy.host()).await.unwrap();
    conn.write_all(b"GET /k HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let took = until_closed(&mut conn, Duration::from_secs(10)).await;
    let took = took.expect("idle keepalive must end");
    assert!(took < Duration::from_secs(5), "{took:?}");
    proxy.stop().await;
}

/// One request on `conn`, its answer read (a 200 that fits one read).
async fn one_request(conn: &mut tokio::net::TcpStream, path: &str) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text}");
}

// The connection's clocks (net/conn.rs) after many requests: the head
// clock and the idle clock still keep their deadlines (kept as a guard
// for any change to how the timer is moved; see bench/HISTORY.md
// `i29-lazy-clock`).

/// Asserts that the connection ended within `[from, to)` of the wait's start.
fn assert_ended_between(took: Option<Duration>, from: Duration, to: Duration, what: &str) {
    let took = took.unwrap_or_else(|| panic!("{what}: the connection stayed open"));
    assert!(took >= from, "{what}: ended too early: {took:?}");
    assert!(took < to, "{what}: ended too late: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_after_served_requests_is_cut_after_header_read_timeout() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .server("header_read_timeout = \"1s\"\nkeepalive_timeout = \"30s\"")
        .start()
        .await;
    let mut conn = tokio::net::TcpStream::connect(proxy.host()).await.unwrap();
    for i in 0..20 {
        one_request(&mut conn, &format!("/served{}", i % 2)).await;
    }
    // The subject: half a head on a connection whose idle clock runs.
    conn.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let took = until_closed(&mut conn, Duration::from_secs(10)).await;
    let (from, to) = (Duration::from_millis(800), Duration::from_secs(5));
    assert_ended_between(took, from, to, "a slow head after served requests");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_clock_runs_from_the_last_answer_of_a_busy_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .server("keepalive_timeout = \"2s\"\nheader_read_timeout = \"1s\"")
        .start()
        .await;
    let mut conn = tokio::net::TcpStream::connect(proxy.host()).await.unwrap();
    // Requests for 3 s: past the first head clock and one idle clock, so
    // the timer fires early at least once while requests come. Bounded.
    let started = Instant::now();
    for i in 0..100_000 {
        if started.elapsed() >= Duration::from_secs(3) {
            break;
        }
        one_request(&mut conn, &format!("/busy{}", i % 2)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = until_closed(&mut conn, Duration::from_secs(10)).await;
    let (from, to) = (Duration::from_millis(1800), Duration::from_secs(5));
    assert_ended_between(took, from, to, "idle keepalive after a busy spell");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_requests_in_flight_finish() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).start().await;
    let url = proxy.url("/slow");
    let addr = proxy.host();
    let in_flight =
        tokio::spawn(
            async move { get_with(Method::GET, &url, &[("x-origin-delay-ms", "1500")]).await },
        );
    // Let it reach the origin, then stop with time to spare.
    wait_until(
        Duration::from_secs(5),
        "the request reaches the origin",
        async || origin.hits_for("/slow") > 0,
    )
    .await;
    let stopping = tokio::spawn(proxy.stop_within(Duration::from_secs(10)));
    // No new connections once stopping.
    wait_until(Duration::from_secs(5), "the listener closed", async || {
        tokio::net::TcpStream::connect(&addr).await.is_err()
    })
    .await;
    let reply = in_flight.await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.elapsed >= Duration::from_millis(1400));
    stopping.await.unwrap();
}

/// A load of keepalive clients: every answer must be 200.
struct Load {
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(addr: String, clients: usize) -> Load {
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let tasks = (0..clients)
            .map(|c| {
                let (ok, failed, stopped, addr) =
                    (ok.clone(), failed.clone(), stopped.clone(), addr.clone());
                tokio::spawn(async move {
                    let mut errors = Vec::new();
                    let mut sender = None;
                    // Bounded: 20,000 requests or the stop, whichever first.
                    for i in 0..20_000u32 {
                        if *stopped.borrow() {
                            break;
                        }
                        if sender.is_none() {
                            let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
                            let (s, conn) = hyper::client::conn::http1::handshake(
                                hyper_util::rt::TokioIo::new(stream),
                            )
                            .await
                            .unwrap();
                            tokio::spawn(conn);
                            sender = Some(s);
                        }
                        let s = sender.as_mut().unwrap();
                        if s.ready().await.is_err() {
                            // The server closed it between requests (keepalive_requests).
                            sender = None;
                            continue;
                        }
                        let req = http::Request::get(format!("/load/{}", (c as u32 * 7 + i) % 50))
                            .header("host", &addr)
                            .body(http_body_util::Empty::<bytes::Bytes>::new())
                            .unwrap();
                        match s.send_request(req).await {
                            Ok(resp) => {
                                use http_body_util::BodyExt;
                                let status = resp.status();
                                let closing = resp.headers().get("connection").is_some();
                                let body = resp.into_body().collect().await;
                                if status == 200 && body.is_ok() {
                                    ok.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    failed.fetch_add(1, Ordering::Relaxed);
                                    errors.push(format!("status {status}"));
                                }
                                if closing {
                                    sender = None;
                                }
                            }
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                errors.push(e.to_string());
                                sender = None;
                            }
                        }
                    }
                    errors
                })
            })
            .collect();
        Load {
            ok,
            failed,
            stop,
            tasks,
        }
    }

    /// Waits until the load has had `more` answers since this call.
    async fn runs_on(&self, more: u64) {
        let from = self.ok.load(Ordering::Relaxed);
        wait_until(Duration::from_secs(20), "the load runs on", async || {
            self.ok.load(Ordering::Relaxed) >= from + more
        })
        .await;
    }

    async fn finish(self) -> (u64, u64, Vec<String>) {
        let _ = self.stop.send(true);
        let mut errors = Vec::new();
        for t in self.tasks {
            errors.extend(t.await.unwrap());
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            errors,
        )
    }
}

fn reload_config(origin: &Origin, listen: &[String], admin: u16, extra_route: &str) -> String {
    let listen: Vec<String> = listen.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[server]\nlisten = [{}]\nthreads = 2\nkeepalive_requests = 100000\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [upstreams.origin]\nservers = [\"{}\"]\n\
         [zones.ram]\nkind = \"memory\"\nmax_size = \"16MiB\"\n\
         {extra_route}\
         [[routes]]\nname = \"all\"\nupstream = \"origin\"\nzone = \"ram\"\nttl = {{ 200 = \"1h\" }}\n",
        listen.join(", "),
        origin.addr()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_fails_no_request_and_keeps_the_zone() {
    let origin = Origin::start().await;
    let dir = scratch("conn-reload");
    let path = dir.join("calmcache.toml");
    let (first, second, admin) = (free_port(), free_port(), free_port());
    let one = vec![format!("127.0.0.1:{first}")];
    std::fs::write(&path, reload_config(&origin, &one, admin, "")).unwrap();
    let config = Config::from_file(&path).unwrap();
    let running = calmcache::start_from(&config, Some(path.clone()))
        .await
        .unwrap();
    let addr = format!("127.0.0.1:{first}");
    // Stored before the reloads.
    let before = get(&format!("http://{addr}/kept")).await;
    assert_eq!(before.status, 200);
    let load = Load::start(addr.clone(), 16);
    load.runs_on(50).await;

    // An invalid config: refused with every problem, the old one stays.
    std::fs::write(&path, "[server]\nlisten = [\"nope\"]\nthreads = -1\n").unwrap();
    let errors = running.reloader().reload_file().await.unwrap_err();
    let all = errors.problems().join("\n");
    assert!(all.contains("server.listen[0]"), "{all}");
    assert!(all.contains("server.threads"), "{all}");
    load.runs_on(50).await;

    // A valid one: a new route, a second listener, the zone unchanged.
    let two = vec![addr.clone(), format!("127.0.0.1:{second}")];
    let route = "[[routes]]\nname = \"fresh\"\nmatch = \"^/fresh\"\nupstream = \"origin\"\n";
    std::fs::write(&path, reload_config(&origin, &two, admin, route)).unwrap();
    let outcome = running.reloader().reload_file().await.unwrap();
    assert!(
        outcome
            .notes
            .iter()
            .any(|n| n.contains(&second.to_string())),
        "{:?}",
        outcome.notes
    );
    load.runs_on(50).await;
    // Through the admin endpoint too (same file: nothing to re-bind).
    let r = get_with(
        Method::POST,
        &format!("http://127.0.0.1:{admin}/reload"),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    load.runs_on(50).await;
    let status = get(&format!("http://127.0.0.1:{admin}/status")).await;
    let status: serde_json::Value = serde_json::from_str(&status.body).unwrap();
    assert_eq!(status["reloads"]["ok"], 2, "{}", status["reloads"]);
    assert_eq!(status["reloads"]["failed"], 1, "{}", status["reloads"]);
    let metrics = get(&format!("http://127.0.0.1:{admin}/metrics")).await.body;
    assert!(
        metrics.contains("calmcache_reloads_total{result=\"failed\"} 1"),
        "{metrics}"
    );
    let (ok, failed, errors) = load.finish().await;
    assert_eq!(failed, 0, "failed requests during reloads: {errors:?}");
    assert!(ok > 100, "the load ran ({ok} answers)");

    // The new route (uncached, no zone) and the new listener serve.
    let a = get(&format!("http://127.0.0.1:{second}/fresh/1")).await;
    let b = get(&format!("http://{addr}/fresh/1")).await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200));
    assert_eq!(
        origin.hits_for("/fresh/1"),
        2,
        "the fresh route does not cache"
    );
    // The zone kept its contents: still a hit, no second origin request.
    let after = get(&format!("http://{addr}/kept")).await;
    assert!(
        after.cache_status().contains("hit"),
        "{}",
        after.cache_status()
    );
    assert_eq!(origin.hits_for("/kept"), 1);

    // Dropping the first listener: it stops accepting, the second serves.
    std::fs::write(&path, reload_config(&origin, &two[1..], admin, "")).unwrap();
    running.reloader().reload_file().await.unwrap();
    let what = format!("{addr} no longer accepting");
    wait_until(Duration::from_secs(5), &what, async || {
        tokio::net::TcpStream::connect(&addr).await.is_err()
    })
    .await;
    assert_eq!(
        get(&format!("http://127.0.0.1:{second}/kept")).await.status,
        200
    );
    running.shutdown(Duration::from_secs(2)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reloads_on_sighup_and_calmcache_reload_and_stops_gracefully_on_sigterm() {
    let origin = Origin::start().await;
    let dir = scratch("conn-bin-reload");
    let path = dir.join("calmcache.toml");
    let (port, admin) = (free_port(), free_port());
    let listen = vec![format!("127.0.0.1:{port}")];
    std::fs::write(&path, reload_config(&origin, &listen, admin, "")).unwrap();
    let bin = env!("CARGO_BIN_EXE_calmcache");
    let log = dir.join("stderr.log");
    let mut child = Child(
        Command::new(bin)
            .args(["serve", "--config", path.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    crate::wait_listening(port).await;
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
    assert_eq!(get(&url("/a")).await.status, 200);
    // `calmcache reload` with a broken file: refused before it is sent.
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, good.replace("threads = 2", "threads = -3")).unwrap();
    let out = Command::new(bin)
        .args(["reload", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.threads"));
    // SIGHUP with the broken file: logged, still serving.
    signal(&child, "-HUP");
    let logged = |text: &str, n: usize| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches(text)
            .count()
            >= n
    };
    wait_until(Duration::from_secs(5), "no refusal logged", async || {
        logged("reload refused", 1)
    })
    .await;
    assert_eq!(get(&url("/b")).await.status, 200);
    // A good file through `calmcache reload`: a new route applies.
    let route = "[[routes]]\nname = \"new\"\nmatch = \"^/new\"\nupstream = \"origin\"\n";
    std::fs::write(&path, reload_config(&origin, &listen, admin, route)).unwrap();
    let out = Command::new(bin)
        .args(["reload", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"reloaded\":true"));
    get(&url("/new/x")).await;
    get(&url("/new/x")).await;
    assert_eq!(origin.hits_for("/new/x"), 2, "the new route does not cache");
    // SIGHUP with the good file: reloaded again.
    signal(&child, "-HUP");
    wait_until(
        Duration::from_secs(5),
        "no second reload logged",
        async || logged("config reloaded", 2),
    )
    .await;
    // SIGTERM during a slow request: it finishes, then the process exits 0.
    let slow = tokio::spawn({
        let url = url("/slow");
        async move { get_with(Method::GET, &url, &[("x-origin-delay-ms", "1000")]).await }
    });
    wait_until(
        Duration::from_secs(5),
        "the request reaches the origin",
        async || origin.hits_for("/slow") > 0,
    )
    .await;
    signal(&child, "-TERM");
    let reply = slow.await.unwrap();
    assert_eq!(reply.status, 200);
    let status = wait_until(
        Duration::from_secs(10),
        "calmcache exiting after SIGTERM",
        async || child.0.try_wait().unwrap(),
    )
    .await;
    assert!(status.success(), "{status:?}");
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}
