//! Per-client limits (issue 28, item 8: NGINX's limit_req and limit_conn):
//! a flood past the rate from one client is refused without reaching the
//! origin while other clients go on; a burst is delayed to the rate or
//! sent at once (`nodelay`); a connections limit counts requests in
//! progress until their body ends; `applies_to = "origin"` never limits an
//! answer from the cache; the client is the one behind a trusted proxy,
//! and only a trusted one. Over HTTP/1.1, h2c and HTTP/2 over TLS, on a
//! cached and an uncached route.
//!
//! Rates are per minute where time is not the subject, so no bucket
//! drains while a test runs.

use std::time::Duration;

use calmcache_testkit::wire::{Wire, TLS_NAME};
use calmcache_testkit::{Origin, Proxy, Reply, Wires};
use http::{Method, StatusCode};

use crate::wait_until;

/// Route `cached` (`/c/`, zone) and route `passed` (`/p/`, no zone), both
/// limited by `[limits.lim]` (`limit` holds its keys) and trusting
/// 127.0.0.1 as a proxy, so each test picks its clients by X-Forwarded-For.
async fn start(origin: &Origin, limit: &str) -> Wires {
    start_with(
        origin,
        "limits = [\"lim\"]",
        &format!("[limits.lim]\n{limit}"),
    )
    .await
}

/// As [`start`], with both routes' keys `keys` (their `limits`, and any
/// more) and the tables `tables` (the limits, any more routes).
async fn start_with(origin: &Origin, keys: &str, tables: &str) -> Wires {
    let routes = format!(
        "path = \"^/c/\"\n{keys}\ntrusted_proxies = [\"127.0.0.1\"]\n\
         ttl = {{ 200 = \"60s\" }}\n\n\
         [[routes]]\nname = \"passed\"\nupstream = \"origin\"\npath = \"^/p/\"\n\
         {keys}\ntrusted_proxies = [\"127.0.0.1\"]\n"
    );
    let builder = Proxy::new(origin).route(&routes).tables(tables);
    Wires::start(builder, "").await
}

/// A GET of `path` over `wire` from `client` (its X-Forwarded-For).
async fn get(wires: &Wires, wire: &Wire, path: &str, client: &str) -> Reply {
    let headers = [("x-forwarded-for", client)];
    wires
        .send(wire, Method::GET, TLS_NAME, path, &headers, "")
        .await
}

/// A figure of the limit's `/status` block.
async fn figure(wires: &Wires, name: &str) -> u64 {
    let status = wires.proxy.status().await;
    status["limits"]["lim"][name].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_the_rate_is_refused_before_the_origin_while_others_go_on() {
    let origin = Origin::start().await;
    let wires = start(&origin, "rate = \"1r/m\"\nburst = 2\ndelay = \"nodelay\"").await;
    let mut refused = 0;
    for (w, wire) in wires.all.iter().enumerate() {
        for route in ["c", "p"] {
            let flooder = format!("198.51.100.{}", w * 2 + usize::from(route == "p"));
            let before = origin.hits();
            // The rate's one and the burst's two go; the flood is refused.
            for i in 0..3 {
                let path = format!("/{route}/{w}/{i}");
                let reply = get(&wires, wire, &path, &flooder).await;
                assert_eq!(reply.status, 200, "{} {path}", wire.label());
            }
            for i in 3..8 {
                let path = format!("/{route}/{w}/{i}");
                let reply = get(&wires, wire, &path, &flooder).await;
                assert_eq!(reply.status, 429, "{} {path}", wire.label());
                let retry: u64 = reply.header("retry-after").parse().unwrap_or(0);
                // 1r/m is 16 milli-requests a second (NGINX rounds so too): 62.5 s.
                assert!((1..=63).contains(&retry), "Retry-After {retry}");
                refused += 1;
            }
            assert_eq!(
                origin.hits() - before,
                3,
                "a refusal never reaches the origin"
            );
            // Another client is unaffected.
            let other = format!("203.0.113.{w}");
            let path = format!("/{route}/{w}/other");
            let reply = get(&wires, wire, &path, &other).await;
            assert_eq!(reply.status, 200, "{} another client", wire.label());
        }
    }
    assert_eq!(figure(&wires, "rejected").await, refused);
    let metrics = calmcache_testkit::get(&wires.proxy.admin_url("/metrics"))
        .await
        .body;
    let line = format!("calmcache_limit_rejected_total{{limit=\"lim\"}} {refused}");
    assert!(metrics.contains(&line), "{metrics}");
    assert!(metrics.contains("calmcache_route_limited_total{route=\"passed\"} 15"));
    assert!(metrics.contains("calmcache_route_limited_total{route=\"test\"} 15"));
}

/// Sends `/p/<tag>/a` and `/p/<tag>/b` from one client (the second within
/// the burst), then `/p/<tag>/c` from another once `b` was sent: the order
/// the origin sees them in.
async fn burst_order(wires: &Wires, origin: &Origin, wire: &Wire, n: usize) -> Vec<String> {
    let tag = format!("d{n}");
    let client = format!("198.51.100.{}", 20 + n);
    let a = get(wires, wire, &format!("/p/{tag}/a"), &client).await;
    assert_eq!(a.status, 200);
    let b = {
        let wires_client = client.clone();
        let path = format!("/p/{tag}/b");
        async move { get(wires, wire, &path, &wires_client).await }
    };
    let c = async {
        // `b` is on its way first (it is polled first and sent at once).
        tokio::task::yield_now().await;
        let other = format!("203.0.113.{}", 20 + n);
        let c = get(wires, wire, &format!("/p/{tag}/c"), &other).await;
        assert_eq!(c.status, 200);
    };
    let (b, ()) = tokio::join!(b, c);
    assert_eq!(
        b.status,
        200,
        "{} a delayed request is answered",
        wire.label()
    );
    let prefix = format!("/p/{tag}/");
    let seen = origin.requests().into_iter().map(|r| r.path().to_owned());
    seen.filter(|p| p.starts_with(&prefix)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_waits_for_the_rate_unless_nodelay() {
    let origin = Origin::start().await;
    // 6r/m: the second request waits 10 s, far longer than a third one
    // from another client takes on any machine.
    let delayed = start(&origin, "rate = \"6r/m\"\nburst = 1").await;
    let runs = delayed.all.iter().enumerate();
    let orders = futures_util::future::join_all(
        runs.map(|(n, wire)| burst_order(&delayed, &origin, wire, n)),
    )
    .await;
    for (order, tag) in orders.iter().zip(["d0", "d1", "d2"]) {
        let want: Vec<String> = ["a", "c", "b"]
            .iter()
            .map(|s| format!("/p/{tag}/{s}"))
            .collect();
        assert_eq!(order, &want, "the delayed request reached the origin last");
    }
    assert_eq!(figure(&delayed, "delayed").await, 3);
    assert_eq!(figure(&delayed, "rejected").await, 0);

    let at_once = start(&origin, "rate = \"6r/m\"\nburst = 1\ndelay = \"nodelay\"").await;
    for (wire, tag) in at_once.all.iter().zip(["n1", "n2", "n3"]) {
        let client = format!("192.0.2.{}", tag.as_bytes()[1]);
        for path in ["a", "b"] {
            let reply = get(&at_once, wire, &format!("/p/{tag}/{path}"), &client).await;
            assert_eq!(reply.status, 200);
        }
        let third = get(&at_once, wire, &format!("/p/{tag}/x"), &client).await;
        assert_eq!(third.status, 429, "past the burst");
    }
    assert_eq!(figure(&at_once, "delayed").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_limit_holds_a_place_until_the_body_ends() {
    let origin = Origin::start().await;
    let wires = start(&origin, "connections = 1\nstatus = 503").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let client = format!("198.51.100.{}", 50 + w);
        let xff = [("x-forwarded-for", client.as_str())];
        // A body trickled in 8 pieces: in progress until its end.
        let slow = format!("/p/{w}/slow?x-origin-trickle-ms=500");
        let open = wires.open(wire, TLS_NAME, &slow, &xff).await;
        assert_eq!(open.status(), 200);
        let second = get(&wires, wire, &format!("/p/{w}/second"), &client).await;
        assert_eq!(
            second.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            wire.label()
        );
        assert!(second.has_header("retry-after"));
        let other = get(&wires, wire, &format!("/p/{w}/other"), "203.0.113.50").await;
        assert_eq!(other.status, 200, "another client is not limited");
        use http_body_util::BodyExt;
        let body = open.into_body().collect().await.map(|b| b.to_bytes().len());
        assert!(body.is_ok_and(|n| n > 0));
        let what = format!("{}: the place is free once the body ended", wire.label());
        wait_until(Duration::from_secs(10), &what, async || {
            let again = get(&wires, wire, &format!("/p/{w}/again"), &client).await;
            again.status == 200
        })
        .await;
    }
    wait_until(Duration::from_secs(10), "no client tracked", async || {
        figure(&wires, "clients").await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_applies_to_origin_a_cached_answer_is_never_limited() {
    let origin = Origin::start().await;
    let wires = start(&origin, "rate = \"1r/m\"\napplies_to = \"origin\"").await;
    for (w, wire) in wires.all.iter().enumerate() {
        let client = format!("198.51.100.{}", 70 + w);
        let cached = format!("/c/{w}/page");
        assert_eq!(get(&wires, wire, &cached, &client).await.status, 200);
        for _ in 0..10 {
            let hit = get(&wires, wire, &cached, &client).await;
            assert_eq!(hit.status, 200, "{}", wire.label());
            assert!(hit.is_hit(), "{}", hit.cache_status());
        }
        // Bound for the origin: the bucket, filled by the first miss, refuses.
        let miss = get(&wires, wire, &format!("/c/{w}/other"), &client).await;
        assert_eq!(miss.status, 429, "{}", wire.label());
        let passed = get(&wires, wire, &format!("/p/{w}/x"), &client).await;
        assert_eq!(passed.status, 429, "{}", wire.label());
        assert!(get(&wires, wire, &cached, &client).await.is_hit());
    }
    assert_eq!(origin.hits(), 3, "one miss per wire reached the origin");

    // The same with applies_to = "all": hits count (NGINX's meaning).
    let all = start(&origin, "rate = \"1r/m\"").await;
    let wire = &all.all[0];
    assert_eq!(get(&all, wire, "/c/all", "198.51.100.80").await.status, 200);
    assert_eq!(get(&all, wire, "/c/all", "198.51.100.80").await.status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trusted_proxy_names_the_client() {
    let origin = Origin::start().await;
    // A route that trusts nobody: X-Forwarded-For is the client's own
    // claim, and every request from 127.0.0.1 is one client.
    let routes = "limits = [\"lim\"]\n";
    let builder = Proxy::new(&origin)
        .no_zone()
        .route(routes)
        .tables("[limits.lim]\nrate = \"1r/m\"");
    let untrusted = Wires::start(builder, "").await;
    for (w, wire) in untrusted.all.iter().enumerate() {
        let path = format!("/u/{w}");
        let first = get(&untrusted, wire, &path, &format!("192.0.2.{w}")).await;
        // The first wire's request took the only place of 127.0.0.1.
        let want = if w == 0 { 200 } else { 429 };
        assert_eq!(first.status, want, "{}", wire.label());
        let forged = get(&untrusted, wire, &path, &format!("198.51.100.{w}")).await;
        assert_eq!(
            forged.status,
            429,
            "{}: a forged X-Forwarded-For",
            wire.label()
        );
    }

    // Behind a trusted proxy: the first untrusted address from the right.
    let trusted = start(&origin, "rate = \"1r/m\"").await;
    for (w, wire) in trusted.all.iter().enumerate() {
        let client = format!("198.51.100.{}", 90 + w);
        let path = format!("/p/t{w}");
        assert_eq!(get(&trusted, wire, &path, &client).await.status, 200);
        // The same client through a second trusted hop, or with a forged
        // address to its left: still the same client.
        let hop = format!("{client}, 127.0.0.1");
        assert_eq!(get(&trusted, wire, &path, &hop).await.status, 429);
        let forged = format!("10.9.9.9, {client}");
        assert_eq!(get(&trusted, wire, &path, &forged).await.status, 429);
        // Garbage in the header: the nearest address known (the trusted
        // proxy's own), not a fresh bucket per value.
        let garbage = format!("not-an-address-{w}");
        let first_garbage = get(&trusted, wire, &path, &garbage).await;
        assert_eq!(first_garbage.status, if w == 0 { 200 } else { 429 });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_tunnel_holds_its_connections_place_while_it_is_open() {
    let (server, _seen) = crate::websocket::echo_server().await;
    let proxy = Proxy::with_upstream(server)
        .route("limits = [\"ws\"]")
        .tables("[limits.ws]\nconnections = 1")
        .start()
        .await;
    let first = crate::websocket::connect(&proxy, "/chat").await;
    let url = format!("ws://{}/chat", proxy.host());
    let second = tokio_tungstenite::connect_async(url.as_str()).await;
    match second {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 429, "a second tunnel from the same client");
        }
        other => panic!("expected a 429 handshake, got {:?}", other.map(|(_, r)| r)),
    }
    drop(first);
    wait_until(
        Duration::from_secs(10),
        "the place left with the tunnel",
        async || tokio_tungstenite::connect_async(url.as_str()).await.is_ok(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_takes_one_origin_token_however_many_requests_join_it() {
    // burst 0: one request a minute may reach the origin from a client.
    let origin = Origin::start().await;
    let limit = "rate = \"1r/m\"\nburst = 0\napplies_to = \"origin\"";
    let wires = start(&origin, limit).await;
    for (w, wire) in wires.all.iter().enumerate() {
        let client = format!("198.51.100.{}", 110 + w);
        // The origin takes its time: the others join the first's flight.
        let path = format!("/c/{w}/flight?x-origin-delay-ms=400");
        let asks = (0..6).map(|_| get(&wires, wire, &path, &client));
        let replies = futures_util::future::join_all(asks).await;
        for reply in &replies {
            assert_eq!(
                reply.status,
                200,
                "{}: a follower took no token",
                wire.label()
            );
        }
        assert_eq!(
            origin.hits_for(&format!("/c/{w}/flight")),
            1,
            "{}",
            wire.label()
        );
        // The leader took the minute's token: the next miss is refused.
        let next = get(&wires, wire, &format!("/c/{w}/next"), &client).await;
        assert_eq!(next.status, 429, "{}", wire.label());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_the_origin_gate_gives_back_what_the_all_gate_took() {
    // `all`: 1r/m with a burst of 3 (4 at once), refusing with 429;
    // `origin`: 1r/m, no burst, refusing with 503; `conns`: one in progress.
    let origin = Origin::start().await;
    let tables = "[limits.all]\nrate = \"1r/m\"\nburst = 3\ndelay = \"nodelay\"\n\
                  [limits.origin]\nrate = \"1r/m\"\nburst = 0\napplies_to = \"origin\"\nstatus = 503\n\
                  [limits.conns]\nconnections = 1\n";
    let keys = "limits = [\"all\", \"conns\", \"origin\"]";
    let wires = start_with(&origin, keys, tables).await;
    for (w, wire) in wires.all.iter().enumerate() {
        let client = format!("198.51.100.{}", 120 + w);
        let page = format!("/c/{w}/page");
        assert_eq!(get(&wires, wire, &page, &client).await.status, 200);
        // Misses and passes past the origin's rate: each refused by the
        // origin gate, none costing the `all` gate a token.
        for i in 0..8 {
            let path = format!("/{}/{w}/{i}", if i % 2 == 0 { "c" } else { "p" });
            let reply = get(&wires, wire, &path, &client).await;
            assert_eq!(reply.status, 503, "{} {path}", wire.label());
        }
        // The `all` gate still has its burst: three hits go.
        for _ in 0..3 {
            let hit = get(&wires, wire, &page, &client).await;
            assert_eq!(
                hit.status,
                200,
                "{}: a refused request took a token",
                wire.label()
            );
            assert!(hit.is_hit());
        }
        assert_eq!(get(&wires, wire, &page, &client).await.status, 429);
    }
    assert_eq!(origin.hits(), 3, "one request per wire reached the origin");
    // No refused request is in progress.
    wait_until(Duration::from_secs(10), "no client tracked", async || {
        wires.proxy.status().await["limits"]["conns"]["clients"].as_u64() == Some(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_either_gate_and_of_connections_go_through_error_pages() {
    let origin = Origin::start().await;
    let tables = "[limits.all]\nrate = \"1r/m\"\nburst = 2\ndelay = \"nodelay\"\nstatus = 503\n\
                  [limits.origin]\nrate = \"1r/m\"\nburst = 0\napplies_to = \"origin\"\n\
                  [limits.conns]\nconnections = 1\nstatus = 503\n\n\
                  [[routes]]\nname = \"busy\"\npath = \"^/busy$\"\ninternal = true\n\
                  return = { status = 200, body = \"busy, come back later\\n\" }\n";
    let keys = "limits = [\"all\", \"conns\", \"origin\"]\n\
                error_pages = { \"429 503\" = \"/busy\" }";
    let wires = start_with(&origin, keys, tables).await;
    for (w, wire) in wires.all.iter().enumerate() {
        let client = format!("198.51.100.{}", 130 + w);
        assert_eq!(
            get(&wires, wire, &format!("/p/{w}/a"), &client)
                .await
                .status,
            200
        );
        // The origin gate's 429, as its page.
        let origin_gate = get(&wires, wire, &format!("/p/{w}/b"), &client).await;
        assert_eq!(origin_gate.status, 429, "{}", wire.label());
        assert_eq!(origin_gate.body, "busy, come back later\n");
        assert!(origin_gate.has_header("retry-after"), "{}", wire.label());
        // A connections refusal, as its page, while a body is in progress.
        let other = format!("203.0.113.{}", 130 + w);
        let xff = [("x-forwarded-for", other.as_str())];
        let slow = format!("/p/{w}/slow?x-origin-trickle-ms=500");
        let open = wires.open(wire, TLS_NAME, &slow, &xff).await;
        assert_eq!(open.status(), 200);
        let conns = get(&wires, wire, &format!("/p/{w}/c"), &other).await;
        assert_eq!(conns.status, 503, "{}", wire.label());
        assert_eq!(conns.body, "busy, come back later\n");
        drop(open);
        // The `all` gate's 503 (a third client: a miss, then hits until
        // its burst of 2 is spent), as its page.
        let third = format!("192.0.2.{}", 130 + w);
        let cached = format!("/c/{w}/cached");
        for _ in 0..3 {
            assert_eq!(get(&wires, wire, &cached, &third).await.status, 200);
        }
        let all_gate = get(&wires, wire, &cached, &third).await;
        assert_eq!(all_gate.status, 503, "{}", wire.label());
        assert_eq!(all_gate.body, "busy, come back later\n");
        assert!(all_gate.has_header("retry-after"), "{}", wire.label());
    }
}
