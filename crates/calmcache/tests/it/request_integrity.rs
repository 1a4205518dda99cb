//! Request integrity (issue 11): every method and route kind over HTTP/1.1,
//! h2c and HTTP/2 over TLS; one trusted view of the request (authority,
//! normalised path, selecting fields) for route, key and upstream alike;
//! forwarding fields under control; answers a request caused never stored
//! for others; tunnels only for a real WebSocket handshake; interim answers
//! never taken for final ones. Each poisoning case uses an origin that
//! echoes its request, and shows that no request stores an answer another
//! client would get for a request it did not make.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use calmcache_testkit::wire::TLS_NAME;
use calmcache_testkit::{Origin, Proxy, Wire, Wires};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ECHO: (&str, &str) = ("x-origin-echo", "1");

/// Routes: `^/api/` and `^/ws` without a zone, then a catch-all cached for 5 s.
fn two_routes(origin: &Origin, cached: &str) -> Proxy {
    Proxy::new(origin).no_zone().route(&format!(
        "match = '^/(api|ws)/'\n\n[[routes]]\nname = \"cached\"\nupstream = \"origin\"\n\
         zone = \"ram\"\nttl = {{ any = \"5s\" }}\ncache_status_key = true\n{cached}"
    ))
}

fn line<'a>(body: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}: ");
    body.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_on_every_route_kind_passes_over_every_wire() {
    // Regression: an HTTP/2 request kept its version on the way to the
    // HTTP/1.1 pool (hyper: UserUnsupportedVersion), so every POST from a
    // browser over TLS and every GET on a route without a zone was a 502.
    let origin = Origin::start().await;
    let wires = Wires::start(two_routes(&origin, ""), "").await;
    let big = vec![b'x'; 1 << 20];
    for wire in &wires.all {
        for (method, path, body) in [
            (Method::GET, "/api/a", &b""[..]),
            (Method::POST, "/api/a", b"abc"),
            (Method::PUT, "/api/a", b"abcd"),
            (Method::PATCH, "/api/a", b"ab"),
            (Method::DELETE, "/api/a", b""),
            (Method::OPTIONS, "/api/a", b""),
            (Method::POST, "/page", b"abcde"),
            (Method::DELETE, "/page", b""),
            (Method::GET, "/page", b""),
            (Method::POST, "/api/big", &big),
        ] {
            let what = format!("{} {method} {path}", wire.label());
            let reply = wires
                .send(wire, method.clone(), TLS_NAME, path, &[ECHO], body.to_vec())
                .await;
            assert_eq!(reply.status, 200, "{what}: {}", reply.body);
            let first = reply.body.lines().next().unwrap_or_default();
            assert!(
                first.starts_with(&format!("{method} HTTP/1.1 {path}")),
                "{what}: {first}"
            );
            assert_eq!(line(&reply.body, "host"), [TLS_NAME], "{what}");
            assert_eq!(
                line(&reply.body, "body-bytes"),
                [body.len().to_string().as_str()],
                "{what}"
            );
        }
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_request_stores_what_an_http11_client_with_its_host_would_get() {
    // Regression: HTTP/2 requests reached the origin without any Host; a
    // multi-site origin answered with its default site (or a 400), stored
    // under the key of the :authority for HTTP/1.1 users too.
    let origin = Origin::start().await;
    let wires = Wires::start(two_routes(&origin, ""), "").await;
    let h2c = &wires.all[1];
    let first = wires
        .send(h2c, Method::GET, "site.example", "/who", &[ECHO], "")
        .await;
    assert_eq!(line(&first.body, "host"), ["site.example"]);
    let h1 = wires
        .send(
            &Wire::Http1,
            Method::GET,
            "Site.Example:80",
            "/who",
            &[],
            "",
        )
        .await;
    assert!(h1.cache_status().contains("hit"), "{}", h1.cache_status());
    assert_eq!(h1.body, first.body);
    assert_eq!(origin.hits_for("/who"), 1);
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_keys_and_the_origin_see_one_normalised_path() {
    // Regression: routes matched the raw path, so these skipped the uncached
    // `^/api/` route and fell to the cached catch-all (web cache deception
    // of a personal API answer).
    let origin = Origin::start().await;
    let wires = Wires::start(two_routes(&origin, ""), "").await;
    for wire in &wires.all {
        for path in [
            "/%61pi/me",
            "//api/me",
            "/./api/me",
            "/x/../api/me",
            "/api/./me",
            "/%2e/api/me",
        ] {
            let what = format!("{} {path}", wire.label());
            for _ in 0..2 {
                let reply = wires
                    .send(wire, Method::GET, TLS_NAME, path, &[ECHO], "")
                    .await;
                assert_eq!(reply.status, 200, "{what}");
                let status = reply.cache_status();
                assert!(
                    !status.contains("hit") && !status.contains("stored"),
                    "{what}: {status}"
                );
                assert!(
                    reply.body.starts_with("GET HTTP/1.1 /api/me\n"),
                    "{what}: {}",
                    reply.body
                );
            }
        }
        // Spellings whose decoded form routes elsewhere than the path the
        // origin gets are refused: an origin that does not decode `%2F`
        // would serve an uncached page through the cached route.
        for path in [
            "/api%2fme",
            "/api/me/..%2F..%2Fstatic%2Fa.css",
            "/account/settings/%2F..%2F..%2Fapi%2Fa.css/..",
        ] {
            let reply = wires
                .send(wire, Method::GET, TLS_NAME, path, &[ECHO], "")
                .await;
            assert_eq!(reply.status, 400, "{} {path}: {}", wire.label(), reply.body);
        }
    }
    // Refusals are counted (3 spellings over 3 wires).
    let status = wires.proxy.status().await;
    assert_eq!(status["requests_refused"], 9, "{status}");
    let metrics = calmcache_testkit::get(&wires.proxy.admin_url("/metrics")).await;
    assert!(
        metrics.body.contains("calmcache_requests_refused_total 9"),
        "{}",
        metrics.body
    );
    // Spellings of one cached path share one object.
    let first = wires
        .send(&Wire::Http1, Method::GET, TLS_NAME, "/page/a/b", &[], "")
        .await;
    assert!(
        first.cache_status().contains("stored"),
        "{}",
        first.cache_status()
    );
    for path in ["/page/a/./b", "/page//a/b", "/%70age/a/b", "/page/x/../a/b"] {
        let reply = wires
            .send(&Wire::Http1, Method::GET, TLS_NAME, path, &[], "")
            .await;
        assert!(
            reply.cache_status().contains("hit"),
            "{path}: {}",
            reply.cache_status()
        );
        assert_eq!(reply.body, first.body, "{path}");
    }
    assert_eq!(origin.hits_for("/page/a/b"), 1);
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_slashes_false_keeps_them_for_key_and_origin() {
    let origin = Origin::start().await;
    let proxy = two_routes(&origin, "merge_slashes = false").start().await;
    let doubled = calmcache_testkit::request(Method::GET, &proxy.url("//page"), &[ECHO]).await;
    assert!(
        doubled.body.starts_with("GET HTTP/1.1 //page\n"),
        "{}",
        doubled.body
    );
    let single = calmcache_testkit::request(Method::GET, &proxy.url("/page"), &[ECHO]).await;
    assert!(
        single.cache_status().contains("stored"),
        "{}",
        single.cache_status()
    );
    // Route matching still merges: `//api/x` is the uncached route.
    let api = calmcache_testkit::request(Method::GET, &proxy.url("//api/x"), &[ECHO]).await;
    assert!(
        !api.cache_status().contains("stored"),
        "{}",
        api.cache_status()
    );
    proxy.stop().await;
}

/// The fields an attacker sends to make the origin build another answer.
const SPOOFS: [(&str, &str); 9] = [
    ("x-forwarded-host", "evil.example"),
    ("x-forwarded-proto", "https"),
    ("x-forwarded-ssl", "on"),
    ("x-forwarded-port", "8443"),
    ("forwarded", "host=evil.example;proto=https"),
    ("x-original-url", "/evil"),
    ("x-rewrite-url", "/evil"),
    ("x_forwarded_host", "evil.example"),
    ("x-http-method-override", "DELETE"),
];

fn spoofed(body: &str) -> Vec<&str> {
    body.lines()
        .filter(|l| {
            l.contains("evil") || l.contains("8443") || l.contains("_") || l.contains("override")
        })
        .filter(|l| !l.starts_with("x-origin-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_forwarding_fields_never_shape_a_shared_answer() {
    let origin = Origin::start().await;
    let wires = Wires::start(two_routes(&origin, ""), "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let path = format!("/fwd{i}");
        let mut headers = vec![ECHO, ("x-forwarded-for", "1.2.3.4")];
        headers.extend(SPOOFS);
        let attack = wires
            .send(wire, Method::GET, TLS_NAME, &path, &headers, "")
            .await;
        let what = wire.label();
        assert!(spoofed(&attack.body).is_empty(), "{what}: {}", attack.body);
        let proto = if matches!(wire, Wire::H2Tls(_)) {
            "https"
        } else {
            "http"
        };
        assert_eq!(line(&attack.body, "x-forwarded-proto"), [proto], "{what}");
        assert_eq!(
            line(&attack.body, "x-forwarded-for"),
            ["1.2.3.4, 127.0.0.1"],
            "{what}"
        );
        // The victim gets the clean answer from the cache.
        let victim = wires
            .send(wire, Method::GET, TLS_NAME, &path, &[], "")
            .await;
        assert!(victim.cache_status().contains("hit"), "{what}");
        assert!(spoofed(&victim.body).is_empty(), "{what}");
        // Uncached routes get the same treatment.
        let pass = wires
            .send(wire, Method::POST, TLS_NAME, "/api/p", &headers, "x")
            .await;
        assert!(spoofed(&pass.body).is_empty(), "{what}: {}", pass.body);
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_proxies_and_keyed_fields_may_forward_them() {
    let origin = Origin::start().await;
    let trusted = two_routes(&origin, "trusted_proxies = [\"127.0.0.0/8\"]")
        .start()
        .await;
    let headers = [
        ECHO,
        ("x-forwarded-host", "evil.example"),
        ("x-forwarded-proto", "https"),
    ];
    let reply = calmcache_testkit::request(Method::GET, &trusted.url("/t"), &headers).await;
    assert_eq!(line(&reply.body, "x-forwarded-host"), ["evil.example"]);
    assert_eq!(line(&reply.body, "x-forwarded-proto"), ["https"]);
    // A trusted proxy's X-Forwarded-Proto is the request's scheme: the key too.
    let key = reply
        .cache_status_params()
        .param("key")
        .unwrap_or_default()
        .to_owned();
    assert!(key.starts_with("https://"), "{key}");
    trusted.stop().await;

    let keyed = two_routes(
        &origin,
        "key = \"$scheme$host$uri$is_args$args|$http_x_forwarded_host\"",
    )
    .start()
    .await;
    let attack = calmcache_testkit::request(
        Method::GET,
        &keyed.url("/k"),
        &[ECHO, ("x-forwarded-host", "evil.example")],
    )
    .await;
    assert_eq!(line(&attack.body, "x-forwarded-host"), ["evil.example"]);
    let victim = calmcache_testkit::request(Method::GET, &keyed.url("/k"), &[ECHO]).await;
    assert!(
        !victim.cache_status().contains("hit"),
        "{}",
        victim.cache_status()
    );
    assert!(
        line(&victim.body, "x-forwarded-host").is_empty(),
        "{}",
        victim.body
    );
    keyed.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_and_underscored_spoofs_never_pass() {
    let origin = Origin::start().await;
    // Even from a trusted proxy, a request for another URL or method is
    // not forwarded (proxies in front pass their clients' ones on).
    let trusted = two_routes(
        &origin,
        "trusted_proxies = [\"127.0.0.1\"]\nunderscores_in_headers = true",
    )
    .start()
    .await;
    let reply = calmcache_testkit::request(
        Method::GET,
        &trusted.url("/o"),
        &[
            ECHO,
            ("x-original-url", "/admin"),
            ("x-http-method-override", "DELETE"),
            ("x-forwarded-host", "lb.example"),
        ],
    )
    .await;
    assert!(
        !reply.body.contains("/admin") && !reply.body.contains("DELETE"),
        "{}",
        reply.body
    );
    assert_eq!(line(&reply.body, "x-forwarded-host"), ["lb.example"]);
    trusted.stop().await;
    // With underscores allowed, `X_Forwarded_Host` (X-Forwarded-Host to
    // CGI/WSGI servers) is still a forwarding field from an untrusted client.
    let underscores = two_routes(&origin, "underscores_in_headers = true")
        .start()
        .await;
    let reply = calmcache_testkit::request(
        Method::GET,
        &underscores.url("/u"),
        &[
            ECHO,
            ("x_forwarded_host", "evil.example"),
            ("x_app_flag", "1"),
        ],
    )
    .await;
    assert!(!reply.body.contains("evil"), "{}", reply.body);
    assert_eq!(line(&reply.body, "x_app_flag"), ["1"]);
    underscores.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_without_host_is_served_with_the_upstreams_name() {
    // HAProxy's default health check; the origin still gets a Host.
    let origin = Origin::start().await;
    let proxy = two_routes(&origin, "").start().await;
    let mut tcp = TcpStream::connect(proxy.host()).await.unwrap();
    tcp.write_all(b"GET /api/health HTTP/1.0\r\nx-origin-echo: 1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(
        answer.contains(&format!("host: {}", origin.addr())),
        "{answer}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_keyed_argument_or_cookie_is_never_stored() {
    // The key reads the first `lang`; Django and PHP read the last. Such a
    // request could store French under the key of `?lang=de`.
    let origin = Origin::start().await;
    let proxy = two_routes(&origin, "key = \"$scheme$host$uri|$arg_lang|$cookie_id\"")
        .start()
        .await;
    for (path, headers) in [
        ("/k?lang=de&lang=fr", vec![ECHO]),
        ("/k?lang=de", vec![ECHO, ("cookie", "id=1; id=2")]),
    ] {
        for _ in 0..2 {
            let r = calmcache_testkit::request(Method::GET, &proxy.url(path), &headers).await;
            assert_eq!(r.status, 200);
            assert!(
                !r.cache_status().contains("stored") && !r.cache_status().contains("hit"),
                "{path}: {}",
                r.cache_status()
            );
        }
    }
    let plain = calmcache_testkit::request(Method::GET, &proxy.url("/k?lang=de"), &[ECHO]).await;
    assert!(
        plain.cache_status().contains("stored"),
        "{}",
        plain.cache_status()
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cannot_make_the_origin_see_another_request_than_the_one_keyed() {
    // Regression: `Connection: Accept-Language` stripped the language the
    // variant was selected by, so the origin's default answer was stored as
    // the `de` variant for every German client; `Connection: host` removed
    // the Host the key was built on.
    let origin = Origin::start().await;
    let proxy = two_routes(
        &origin,
        "key = \"$scheme$host$uri$is_args$args|$http_x_tenant\"",
    )
    .start()
    .await;
    let url = proxy.url("/lang");
    let vary = ("x-origin-header", "Vary: Accept-Language");
    let attack = calmcache_testkit::request(
        Method::GET,
        &url,
        &[
            ECHO,
            vary,
            ("accept-language", "de"),
            ("x-tenant", "t1"),
            ("connection", "Accept-Language, host, X-Tenant"),
        ],
    )
    .await;
    // What the origin saw is what the answer was selected and keyed by.
    assert_eq!(line(&attack.body, "host"), [proxy.host().as_str()]);
    assert_eq!(line(&attack.body, "x-tenant"), ["t1"]);
    let german = calmcache_testkit::request(
        Method::GET,
        &url,
        &[ECHO, vary, ("accept-language", "de"), ("x-tenant", "t1")],
    )
    .await;
    assert_eq!(
        line(&german.body, "accept-language"),
        ["de"],
        "{}",
        german.body
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_a_request_caused_are_not_stored_through_ttl_any() {
    // Regression: with `ttl.any = "5s"` one request that made the origin
    // answer 400 (gunicorn refusing a contradictory X-Forwarded-SSL) was
    // served to everyone for 5 s.
    let origin = Origin::start().await;
    let proxy = two_routes(&origin, "").start().await;
    for status in [
        "400", "405", "406", "408", "413", "414", "429", "431", "501",
    ] {
        let path = format!("/caused{status}");
        let url = proxy.url(&path);
        let bad =
            calmcache_testkit::request(Method::GET, &url, &[("x-origin-status", status)]).await;
        assert_eq!(bad.status.as_str(), status);
        let victim = calmcache_testkit::get(&url).await;
        assert_eq!(victim.status, 200, "{status}: {}", victim.cache_status());
    }
    // 404 is the resource's answer: `any` covers it.
    let url = proxy.url("/gone");
    calmcache_testkit::request(Method::GET, &url, &[("x-origin-status", "404")]).await;
    assert_eq!(calmcache_testkit::get(&url).await.status, 404);
    proxy.stop().await;
    // Listed by number, a route may store it.
    let explicit = Proxy::new(&origin)
        .route("ttl = { any = \"5s\", 400 = \"5s\" }")
        .start()
        .await;
    let url = explicit.url("/listed");
    calmcache_testkit::request(Method::GET, &url, &[("x-origin-status", "400")]).await;
    assert_eq!(calmcache_testkit::get(&url).await.status, 400);
    explicit.stop().await;
}

/// An origin of one scripted exchange per connection: it records each
/// request head and answers with `answer(head)` (raw bytes), then keeps
/// the connection open for a while (a tunnel may use it).
async fn scripted(
    answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                let head = read_head(&mut tcp).await;
                seen.lock().unwrap().push(head.clone());
                let _ = tcp.write_all(&answer(&head)).await;
                // Echo whatever comes next (a tunnel's bytes), for a while.
                let mut buf = [0u8; 1024];
                while let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await
                {
                    if n == 0 || tcp.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, heads)
}

async fn read_head(tcp: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A scripted origin's answer to a request head.
type Answer = Box<dyn Fn(&str) -> Vec<u8> + Send + Sync>;

fn key_of(head: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix("sec-websocket-key: "))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn switch(upgrade: &str, accept: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: {upgrade}\r\nconnection: upgrade\r\n\
         sec-websocket-accept: {accept}\r\n\r\n"
    )
    .into_bytes()
}

const HANDSHAKE: &str =
    "GET /ws/chat HTTP/1.1\r\nHost: calm.test\r\nConnection: keep-alive, Upgrade\r\n\
    Upgrade: websocket, h2c\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

async fn handshake(proxy: &calmcache_testkit::RunningProxy) -> (String, TcpStream) {
    let mut tcp = TcpStream::connect(proxy.host()).await.unwrap();
    tcp.write_all(HANDSHAKE.as_bytes()).await.unwrap();
    let head = read_head(&mut tcp).await;
    (head, tcp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnels_open_only_on_this_handshakes_websocket_101() {
    // Regression: the client's whole Upgrade list went upstream, and any
    // 101 opened a tunnel, whatever it upgraded to.
    let (good, heads) = scripted(|head| {
        switch(
            "websocket",
            &calmcache::websocket_accept(key_of(head).as_bytes()),
        )
    })
    .await;
    let proxy = Proxy::with_upstream(good).no_zone().start().await;
    let (head, mut tcp) = handshake(&proxy).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(head.matches("sec-websocket-accept").count(), 1, "{head}");
    tcp.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), tcp.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"ping");
    let sent = heads.lock().unwrap()[0].to_ascii_lowercase();
    let upgrades: Vec<&str> = sent.lines().filter(|l| l.starts_with("upgrade:")).collect();
    assert_eq!(upgrades, ["upgrade: websocket"], "{sent}");
    assert!(sent.contains("\r\nconnection: upgrade\r\n"), "{sent}");
    proxy.stop().await;

    let wrong: [Answer; 3] = [
        Box::new(|_: &str| switch("websocket", "AAAAAAAAAAAAAAAAAAAAAAAAAAA=")),
        Box::new(|h: &str| switch("h2c", &calmcache::websocket_accept(key_of(h).as_bytes()))),
        Box::new(|_: &str| {
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n".to_vec()
        }),
    ];
    for (i, answer) in wrong.into_iter().enumerate() {
        let (bad, _) = scripted(answer).await;
        let proxy = Proxy::with_upstream(bad).no_zone().start().await;
        let (head, _) = handshake(&proxy).await;
        assert!(head.starts_with("HTTP/1.1 502"), "case {i}: {head}");
        proxy.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_answers_are_never_taken_for_the_final_one() {
    // A 101 to a request that asked no upgrade is an origin fault (it would
    // have ended the exchange and opened a tunnel); a 103 before the final
    // answer is dropped, never stored.
    let (odd, _) = scripted(|head| {
        if head.starts_with("GET /switch") {
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
                .to_vec()
        } else {
            b"HTTP/1.1 103 Early Hints\r\nlink: </x.css>; rel=preload\r\n\r\n\
              HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncache-control: max-age=60\r\n\r\nfinal"
                .to_vec()
        }
    })
    .await;
    let proxy = Proxy::with_upstream(odd).start().await;
    let switched = calmcache_testkit::get(&proxy.url("/switch")).await;
    assert_eq!(switched.status, 502);
    let early = calmcache_testkit::get(&proxy.url("/early")).await;
    assert_eq!((early.status.as_u16(), early.body.as_str()), (200, "final"));
    assert!(!early.has_header("link"));
    let again = calmcache_testkit::get(&proxy.url("/early")).await;
    assert!(
        again.cache_status().contains("hit"),
        "{}",
        again.cache_status()
    );
    assert_eq!(again.body, "final");
    proxy.stop().await;
}
