//! Upstreams over TLS (issue 16, part 5) against real TLS origins (rustls,
//! certificates from a throw-away CA made with rcgen): cached and uncached
//! routes over HTTP/1.1, h2c and HTTP/2 over TLS; keepalive reuse counted
//! in handshakes; verification failures (wrong CA, wrong name) answering
//! 502, storing nothing and marking the server down; `tls_server_name`;
//! `tls_verify = false`; a client certificate (mTLS, also from one combined
//! PEM); a WebSocket tunnel and active health checks over TLS; a reload
//! re-reading the CA file. Then server weights: smooth weighted round
//! robin's share and interleaving, and a server down sitting out.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use calmcache::Config;
use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::tls::TestCa;
use calmcache_testkit::{get, request, Origin, Proxy, Wires};
use futures_util::{SinkExt, StreamExt};
use http::Method;

use crate::{free_port, scratch};

/// A CA, and a TLS origin showing a leaf of it for `names`.
struct TlsOrigin {
    ca: TestCa,
    origin: Origin,
    dir: std::path::PathBuf,
}

impl TlsOrigin {
    async fn start(tag: &str, names: &[&str]) -> TlsOrigin {
        let dir = scratch(tag);
        let ca = TestCa::new(&dir.join("ca"));
        let leaf = ca.leaf("origin", names);
        let origin = Origin::start_tls(TestCa::server_config(&leaf, None)).await;
        TlsOrigin { ca, origin, dir }
    }

    /// `tls_ca_file = "<this CA>"` for the upstream.
    fn trust(&self) -> String {
        format!("tls_ca_file = {:?}\n", path(&self.ca.ca_pem))
    }

    /// `["https://127.0.0.1:PORT"]`.
    fn https(&self) -> String {
        format!("[\"https://{}\"]", self.origin.addr())
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `/status` -> `upstreams.origin.health[0]`.
async fn server_status(proxy: &RunningProxy) -> serde_json::Value {
    proxy.status().await["upstreams"]["origin"]["health"][0].clone()
}

/// Polls `/status` until the first server's status passes `until` (10 s at most).
async fn server_until(
    proxy: &RunningProxy,
    until: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    crate::wait_until(Duration::from_secs(10), "the server's status", async || {
        Some(server_status(proxy).await).filter(&until)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_origin_serves_cached_and_uncached_routes_on_every_wire() {
    let tls = TlsOrigin::start("utls-wires", &["127.0.0.1"]).await;
    let proxy = Proxy::new(&tls.origin)
        .servers(&tls.https())
        .upstream(&tls.trust());
    let wires = Wires::start(proxy, "").await;
    let host = wires.proxy.host();
    for wire in &wires.all {
        let label = wire.label();
        let cached = format!("/cached/{}", label.replace(' ', "-"));
        let first = wires.send(wire, Method::GET, &host, &cached, &[], "").await;
        assert_eq!(first.status, 200, "{label}: {}", first.body);
        assert!(
            first.cache_status().contains("fwd="),
            "{label}: {}",
            first.cache_status()
        );
        let second = wires.send(wire, Method::GET, &host, &cached, &[], "").await;
        assert_eq!(second.status, 200, "{label}");
        assert!(
            second.cache_status().contains("hit"),
            "{label}: {}",
            second.cache_status()
        );
        assert_eq!(second.body, first.body, "{label}");
        assert_eq!(tls.origin.hits_for(&cached), 1, "{label}");

        // Not storable: each request reaches the origin; a POST passes through.
        let uncached = format!("/uncached/{}", label.replace(' ', "-"));
        let no_store = [("x-origin-cache-control", "no-store")];
        for _ in 0..2 {
            let r = wires
                .send(wire, Method::GET, &host, &uncached, &no_store, "")
                .await;
            assert_eq!(r.status, 200, "{label}");
            let r = wires
                .send(wire, Method::POST, &host, &uncached, &[], "body")
                .await;
            assert_eq!(r.status, 200, "{label}");
        }
        assert_eq!(tls.origin.hits_for(&uncached), 4, "{label}");
        // The origin sees the client's Host, as over plain HTTP.
        let seen = tls.origin.requests_for(&uncached);
        assert_eq!(seen[0].header("host"), Some(host.as_str()), "{label}");
    }
    // Every handshake offered (and agreed on) HTTP/1.1.
    assert!(tls.origin.tls_connections() >= 1);
    assert_eq!(tls.origin.tls_alpn_http11(), tls.origin.tls_connections());
    assert_eq!(tls.origin.tls_failures(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_to_the_origin_are_kept_alive() {
    let tls = TlsOrigin::start("utls-keepalive", &["127.0.0.1"]).await;
    let proxy = Proxy::new(&tls.origin)
        .no_zone()
        .servers(&tls.https())
        .upstream(&tls.trust())
        .start()
        .await;
    for i in 0..20 {
        let r = get(&proxy.url(&format!("/k{i}"))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(tls.origin.hits(), 20);
    // One request at a time: one pooled connection (two workers may each
    // have opened one), never one handshake per request.
    let handshakes = tls.origin.tls_connections();
    assert!(
        (1..=2).contains(&handshakes),
        "{handshakes} handshakes for 20 requests"
    );
}

/// A request to a server whose certificate does not verify: 502, nothing
/// reaches the origin's HTTP layer or the zone, and the server is down.
async fn refused(proxy: &RunningProxy, origin: &Origin, why: &str) {
    let r = get(&proxy.url("/refused")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(origin.hits(), 0);
    let server = server_status(proxy).await;
    assert_eq!(server["state"], "down", "{server:#}");
    let failure = server["last_failure"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(failure.contains("tls handshake"), "{failure}");
    assert!(failure.contains(why), "{failure}");
    // Still refused (now without trying: the server is down); nothing stored.
    let again = get(&proxy.url("/refused")).await;
    assert_eq!(again.status, 502);
    assert!(
        !again.cache_status().contains("hit"),
        "{}",
        again.cache_status()
    );
    assert_eq!(origin.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_or_for_another_name_is_refused() {
    let tls = TlsOrigin::start("utls-verify", &["origin.test"]).await;
    let other = TestCa::new(&tls.dir.join("other"));
    let wrong_ca = Proxy::new(&tls.origin)
        .servers(&tls.https())
        .upstream(&format!(
            "tls_ca_file = {:?}\ntls_server_name = \"origin.test\"\n",
            path(&other.ca_pem)
        ))
        .start()
        .await;
    // Both test CAs have one name: rustls finds the issuer by it and the
    // signature fails (UnknownIssuer for a CA of another name).
    refused(&wrong_ca, &tls.origin, "invalid peer certificate").await;
    // The right CA, but the certificate is not for 127.0.0.1 (the default
    // name of an IP literal server) nor for another name.
    for name in ["", "tls_server_name = \"elsewhere.test\"\n"] {
        let wrong_name = Proxy::new(&tls.origin)
            .servers(&tls.https())
            .upstream(&format!("{}{name}", tls.trust()))
            .start()
            .await;
        refused(&wrong_name, &tls.origin, "not valid for name").await;
    }
    assert!(tls.origin.tls_failures() >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_name_sets_the_name_sent_and_verified() {
    let tls = TlsOrigin::start("utls-sni", &["origin.test"]).await;
    let proxy = Proxy::new(&tls.origin)
        .servers(&format!("[\"{}\"]", tls.origin.addr()))
        .upstream(&format!(
            "tls = true\ntls_server_name = \"origin.test\"\n{}",
            tls.trust()
        ))
        .start()
        .await;
    let r = get(&proxy.url("/sni")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The Host the origin sees is still the client's.
    let seen = tls.origin.requests_for("/sni");
    assert_eq!(seen[0].header("host"), Some(proxy.host().as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_false_accepts_a_self_signed_origin() {
    let dir = scratch("utls-noverify");
    let leaf = TestCa::self_signed(&dir, "self", &["localhost"]);
    let origin = Origin::start_tls(TestCa::server_config(&leaf, None)).await;
    let proxy = Proxy::new(&origin)
        .servers(&format!("[\"https://{}\"]", origin.addr()))
        .upstream("tls_verify = false")
        .start()
        .await;
    let r = get(&proxy.url("/self")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_requires_a_client_certificate_gets_it() {
    let dir = scratch("utls-mtls");
    let ca = TestCa::new(&dir);
    let leaf = ca.leaf("origin", &["127.0.0.1"]);
    let origin = Origin::start_tls(TestCa::server_config(&leaf, Some(&ca))).await;
    let client = ca.leaf("client", &["calmcache.test"]);
    let trust = format!("tls_ca_file = {:?}\n", path(&ca.ca_pem));
    let https = format!("[\"https://{}\"]", origin.addr());

    let without = Proxy::new(&origin)
        .no_zone()
        .servers(&https)
        .upstream(&trust)
        .start()
        .await;
    let r = get(&without.url("/m")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(origin.hits(), 0);
    assert!(origin.tls_failures() >= 1);

    let with = Proxy::new(&origin)
        .no_zone()
        .servers(&https)
        .upstream(&format!(
            "{trust}tls_client_cert = {:?}\ntls_client_key = {:?}\n",
            path(&client.cert),
            path(&client.key)
        ))
        .start()
        .await;
    let r = get(&with.url("/m")).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Key and chain in one file, as HAProxy takes them: no tls_client_key.
    let combined = dir.join("client-combined.pem");
    let mut pem = std::fs::read(&client.cert).unwrap();
    pem.extend(std::fs::read(&client.key).unwrap());
    std::fs::write(&combined, pem).unwrap();
    let one_file = Proxy::new(&origin)
        .no_zone()
        .servers(&https)
        .upstream(&format!("{trust}tls_client_cert = {:?}\n", path(&combined)))
        .start()
        .await;
    let r = get(&one_file.url("/m")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.hits(), 2);
}

/// A WebSocket echo server over TLS on 127.0.0.1:0.
async fn tls_echo(config: Arc<rustls::ServerConfig>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut ws) = tokio_tungstenite::accept_async(tls).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_tunnel_reaches_a_tls_origin() {
    use tokio_tungstenite::tungstenite::Message;
    let dir = scratch("utls-ws");
    let ca = TestCa::new(&dir);
    let leaf = ca.leaf("origin", &["127.0.0.1"]);
    let addr = tls_echo(TestCa::server_config(&leaf, None)).await;
    let proxy = Proxy::with_upstream(addr)
        .no_zone()
        .servers(&format!("[\"https://{addr}\"]"))
        .upstream(&format!("tls_ca_file = {:?}\n", path(&ca.ca_pem)))
        .start()
        .await;
    let url = format!("ws://{}/ws", proxy.host());
    let connecting = tokio_tungstenite::connect_async(url);
    let (mut ws, resp) = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .expect("handshake in time")
        .expect("handshake");
    assert_eq!(resp.status(), 101);
    for text in ["hello", "over tls"] {
        ws.send(Message::text(text)).await.unwrap();
        let echoed = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("echo in time")
            .expect("a message")
            .unwrap();
        assert_eq!(echoed, Message::text(text));
    }
    ws.close(None).await.unwrap();

    // A certificate that does not verify: the handshake is refused with a 502.
    let other = TestCa::new(&dir.join("other"));
    let wrong = Proxy::with_upstream(addr)
        .no_zone()
        .servers(&format!("[\"https://{addr}\"]"))
        .upstream(&format!("tls_ca_file = {:?}\n", path(&other.ca_pem)))
        .start()
        .await;
    let url = format!("ws://{}/ws", wrong.host());
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 502),
        other => panic!("expected a 502, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_health_checks_go_over_tls() {
    let tls = TlsOrigin::start("utls-health", &["127.0.0.1"]).await;
    let check = "health_check = { path = \"/healthz\", interval = \"100ms\" }\n";
    let good = Proxy::new(&tls.origin)
        .servers(&tls.https())
        .upstream(&format!("{}{check}", tls.trust()))
        .start()
        .await;
    let server = server_until(&good, |s| s["checks"].as_u64().unwrap_or(0) >= 2).await;
    assert_eq!(server["state"], "up", "{server:#}");
    assert_eq!(server["last_check"], "200 OK", "{server:#}");
    assert!(tls.origin.hits_for("/healthz") >= 2);

    // Checks that cannot verify the origin fail, and mark it down.
    let other = TestCa::new(&tls.dir.join("other"));
    let bad = Proxy::new(&tls.origin)
        .servers(&tls.https())
        .upstream(&format!(
            "tls_ca_file = {:?}\nmax_fails = 0\n{check}",
            path(&other.ca_pem)
        ))
        .start()
        .await;
    let server = server_until(&bad, |s| s["state"] == "check_failed").await;
    let last = server["last_check"].as_str().unwrap_or_default();
    let why = "tls handshake with 127.0.0.1: invalid peer certificate";
    assert!(last.contains(why), "{server:#}");
    assert_eq!(get(&bad.url("/x")).await.status, 502);
}

fn reload_config(port: u16, origin: &Origin, ca: &Path) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nthreads = 1\n\n\
         [upstreams.origin]\nservers = [\"https://{}\"]\ntls_ca_file = {:?}\nmax_fails = 0\n\n\
         [[routes]]\nupstream = \"origin\"\n",
        origin.addr(),
        path(ca)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reads_the_ca_file_again_and_keeps_the_old_one_when_it_is_bad() {
    let tls = TlsOrigin::start("utls-reload", &["127.0.0.1"]).await;
    let other = TestCa::new(&tls.dir.join("other"));
    let ca_file = tls.dir.join("trusted.pem");
    std::fs::copy(&other.ca_pem, &ca_file).unwrap();
    let port = free_port();
    let config_file = tls.dir.join("calmcache.toml");
    std::fs::write(&config_file, reload_config(port, &tls.origin, &ca_file)).unwrap();
    let config = Config::from_file(&config_file).unwrap();
    let running = calmcache::start_from(&config, Some(config_file.clone()))
        .await
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/r");
    assert_eq!(get(&url).await.status, 502);

    // The same path, now holding the origin's CA: trusted after a reload.
    std::fs::copy(&tls.ca.ca_pem, &ca_file).unwrap();
    running.reloader().reload_file().await.unwrap();
    assert_eq!(get(&url).await.status, 200);

    // A CA file that is no longer a certificate: the reload is refused with
    // the key and the file, and the running config keeps working.
    std::fs::write(&ca_file, "not a certificate\n").unwrap();
    let refused = running.reloader().reload_file().await.unwrap_err();
    let all = refused.problems().join("\n");
    assert!(all.contains("upstreams.origin.tls_ca_file"), "{all}");
    assert!(all.contains(&path(&ca_file)), "{all}");
    assert_eq!(get(&url).await.status, 200);
    running.shutdown(Duration::from_secs(1)).await;
}

/// Two plain origins behind one upstream, `a` with weight 3.
async fn weighted(a: &Origin, b: &Origin) -> RunningProxy {
    Proxy::new(a)
        .no_zone()
        .servers(&format!(
            "[{{ address = \"{}\", weight = 3 }}, \"{}\"]",
            a.addr(),
            b.addr()
        ))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_share_requests_smoothly() {
    let (a, b) = (Origin::start().await, Origin::start().await);
    let proxy = weighted(&a, &b).await;
    // One at a time: exactly NGINX's order, a a b a, over and over.
    for i in 0..40 {
        assert_eq!(get(&proxy.url(&format!("/s{i}"))).await.status, 200);
    }
    let order: Vec<char> = (0..40)
        .map(|i| {
            if a.hits_for(&format!("/s{i}")) == 1 {
                'a'
            } else {
                'b'
            }
        })
        .collect();
    for window in order.windows(4) {
        let bs = window.iter().filter(|&&c| c == 'b').count();
        assert_eq!(
            bs,
            1,
            "not interleaved: {}",
            order.iter().collect::<String>()
        );
    }

    // 400 requests, 8 at a time: 3:1 within a margin concurrency cannot reach.
    let (a0, b0) = (a.hits(), b.hits());
    let url = proxy.url("/many");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                assert_eq!(request(Method::GET, &url, &[]).await.status, 200);
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    let (to_a, to_b) = (a.hits() - a0, b.hits() - b0);
    assert_eq!(to_a + to_b, 400);
    assert!((280..=320).contains(&to_a), "a got {to_a}, b got {to_b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_server_that_is_down_sits_out() {
    let (a, b) = (Origin::start().await, Origin::start().await);
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let proxy = Proxy::new(&a)
        .no_zone()
        .servers(&format!(
            "[{{ address = \"{dead_addr}\", weight = 5 }}, {{ address = \"{}\", weight = 3 }}, \"{}\"]",
            a.addr(),
            b.addr()
        ))
        .upstream("fail_timeout = \"60s\"")
        .start()
        .await;
    // The first request meets the dead server, which goes down; its GET is
    // sent on to the next server. Every answer is a 200.
    for i in 0..80 {
        let r = get(&proxy.url(&format!("/d{i}"))).await;
        assert_eq!(r.status, 200, "{i}: {}", r.body);
    }
    assert_eq!(a.hits() + b.hits(), 80);
    // The two that are up share 3:1 (the first request's retry aside).
    assert!(
        (58..=62).contains(&a.hits()),
        "a {} b {}",
        a.hits(),
        b.hits()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_paths_are_fetched_from_a_tls_origin() {
    let tls = TlsOrigin::start("utls-warm", &["127.0.0.1"]).await;
    let proxy = Proxy::new(&tls.origin)
        .servers(&tls.https())
        .upstream(&tls.trust())
        .route("warm = [\"/warmed\"]\nttl = { 200 = \"60s\" }")
        .start()
        .await;
    crate::wait_until(Duration::from_secs(10), "warm fetch", async || {
        tls.origin.hits_for("/warmed") >= 1
    })
    .await;
    // The first request may join the warm fetch still in flight.
    assert_eq!(get(&proxy.url("/warmed")).await.status, 200);
    let r = get(&proxy.url("/warmed")).await;
    assert_eq!(r.status, 200);
    assert!(r.cache_status().contains("hit"), "{}", r.cache_status());
    assert_eq!(tls.origin.hits_for("/warmed"), 1);
}
