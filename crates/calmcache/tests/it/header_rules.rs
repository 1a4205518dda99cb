//! Header rules (`request_headers`, `response_headers`, `expires`, NGINX's
//! proxy_set_header / add_header / proxy_hide_header / expires) and routes
//! limited to listeners, over HTTP/1.1, h2c and HTTP/2 over TLS, on cached
//! and uncached routes: Host rewritten for the origin while the key keeps
//! the client's host, X-Real-IP from the trusted client address, `add` vs
//! `always` on 200 and 404, a hidden field on a hit, X-Cache-Status through
//! MISS, HIT, UPDATING, STALE, EXPIRED and BYPASS, request rules on
//! revalidations, refreshes and range fetches, `expires`, and one route on the plain
//! listener only and another on the TLS one only.

use std::time::Duration;

use calmcache_testkit::wire::{Wire, Wires};
use calmcache_testkit::{wait_until, Origin, Proxy};
use http::Method;

/// A cached route (`/c/...`, 60 s) and an uncached one (everything else),
/// both with `rules`.
fn two_routes(origin: &Origin, rules: &str) -> Proxy {
    Proxy::new(origin).route(&format!(
        "path = \"^/c/\"\nttl = {{ 200 = \"60s\", 404 = \"60s\" }}\n{rules}\n\n\
         [[routes]]\nname = \"pass\"\nupstream = \"origin\"\n{rules}\n"
    ))
}

async fn get(
    wires: &Wires,
    wire: &Wire,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> calmcache_testkit::Reply {
    wires.send(wire, Method::GET, host, path, headers, "").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_is_rewritten_for_the_origin_while_the_key_keeps_the_clients_host() {
    let origin = Origin::start().await;
    let rules =
        "request_headers = { set = { Host = \"app.internal\", \"X-Real-IP\" = \"$remote_addr\", \
                 \"X-Port\" = \"$server_port\", \"X-Asked\" = \"$scheme://$host$request_uri\" }, \
                 remove = [\"X-Debug\"] }";
    let wires = Wires::start(two_routes(&origin, rules), "").await;
    for wire in &wires.all {
        let label = wire.label();
        for prefix in ["/c/", "/p/"] {
            let path = format!("{prefix}{}", label.replace(' ', "-"));
            let debug = [("x-debug", "1"), ("x-real-ip", "6.6.6.6")];
            let a = get(&wires, wire, "a.test", &path, &debug).await;
            let b = get(&wires, wire, "b.test", &path, &debug).await;
            assert_eq!(
                (a.status.as_u16(), b.status.as_u16()),
                (200, 200),
                "{label} {path}"
            );
            let seen = origin.requests_for(&path);
            assert_eq!(seen.len(), 2, "{label} {path}: two client hosts, two keys");
            for (r, host) in seen.iter().zip(["a.test", "b.test"]) {
                assert_eq!(r.headers["host"], "app.internal", "{label} {path}");
                assert_eq!(
                    r.headers["x-real-ip"], "127.0.0.1",
                    "{label}: never the client's own"
                );
                assert!(!r.headers.contains_key("x-debug"), "{label} {path}");
                let port = match wire {
                    Wire::H2Tls(_) => wires.proxy.tls_addr().port(),
                    _ => wires.proxy.running().proxy_addrs[0].port(),
                };
                assert_eq!(r.headers["x-port"], port.to_string().as_str(), "{label}");
                let scheme = if matches!(wire, Wire::H2Tls(_)) {
                    "https"
                } else {
                    "http"
                };
                let asked = format!("{scheme}://{host}{path}");
                assert_eq!(r.headers["x-asked"], asked.as_str(), "{label}");
            }
            let again = get(&wires, wire, "a.test", &path, &[]).await;
            if prefix == "/c/" {
                assert!(again.is_hit(), "{label}: {}", again.cache_status());
                assert_eq!(again.body, a.body, "{label}: a.test's own copy");
                assert_eq!(origin.hits_for(&path), 2, "{label}");
            } else {
                assert_eq!(origin.hits_for(&path), 3, "{label}: passed each time");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_real_ip_is_the_address_a_trusted_proxy_forwarded_for() {
    let origin = Origin::start().await;
    let rules = "request_headers = { set = { \"X-Real-IP\" = \"$remote_addr\" } }";
    let trusted = Proxy::new(&origin).no_zone().route(&format!(
        "{rules}\ntrusted_proxies = [\"127.0.0.0/8\", \"10.0.0.0/8\"]"
    ));
    let wires = Wires::start(trusted, "").await;
    for wire in &wires.all {
        let label = wire.label();
        let path = format!("/t/{}", label.replace(' ', "-"));
        // The client, then a proxy of ours, then the one that reached us.
        let chain = [("x-forwarded-for", "203.0.113.9, 10.1.2.3")];
        get(&wires, wire, "a.test", &path, &chain).await;
        let forged = [("x-forwarded-for", "not-an-address")];
        get(&wires, wire, "a.test", &path, &forged).await;
        let seen = origin.requests_for(&path);
        assert_eq!(seen[0].headers["x-real-ip"], "203.0.113.9", "{label}");
        assert_eq!(
            seen[1].headers["x-real-ip"], "127.0.0.1",
            "{label}: no address, the peer"
        );
    }
    let untrusted = Proxy::new(&origin)
        .no_zone()
        .route(&format!("{rules}\ntrusted_proxies = [\"10.0.0.0/8\"]"));
    let wires = Wires::start(untrusted, "").await;
    for wire in &wires.all {
        let path = format!("/u/{}", wire.label().replace(' ', "-"));
        let forged = [
            ("x-forwarded-for", "203.0.113.9"),
            ("x-real-ip", "203.0.113.9"),
        ];
        get(&wires, wire, "a.test", &path, &forged).await;
        let seen = origin.requests_for(&path);
        assert_eq!(
            seen[0].headers["x-real-ip"],
            "127.0.0.1",
            "{}",
            wire.label()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_is_for_success_and_redirects_always_is_for_every_status_and_remove_hides() {
    let origin = Origin::start().await;
    let rules = "response_headers = { add = { \"X-Frame-Options\" = \"DENY\" }, \
                 always = { \"X-Served-By\" = \"edge $server_port\" }, remove = [\"X-Powered-By\"] }\n\
                 expires = \"1h\"";
    let wires = Wires::start(two_routes(&origin, rules), "").await;
    let powered = [("x-origin-header", "X-Powered-By: PHP/5")];
    for wire in &wires.all {
        let label = wire.label();
        for prefix in ["/c/", "/p/"] {
            let path = format!("{prefix}{}", label.replace(' ', "-"));
            let ok = get(&wires, wire, "a.test", &path, &powered).await;
            assert_eq!(ok.status, 200, "{label} {path}");
            assert_eq!(ok.header("x-frame-options"), "DENY", "{label} {path}");
            assert!(
                ok.header("x-served-by").starts_with("edge "),
                "{label} {path}"
            );
            assert!(!ok.has_header("x-powered-by"), "{label} {path}");
            assert_eq!(ok.header("cache-control"), "max-age=3600", "{label} {path}");
            assert!(ok.has_header("expires"), "{label} {path}");
            // Hits too, and the stored copy kept the origin's fields.
            let hit = get(&wires, wire, "a.test", &path, &powered).await;
            assert!(
                !hit.has_header("x-powered-by"),
                "{label} {path}: hidden on a hit"
            );
            assert_eq!(hit.header("x-frame-options"), "DENY", "{label} {path}");
            let not_found = format!("{path}-404");
            let status = [("x-origin-status", "404"), powered[0]];
            let missing = get(&wires, wire, "a.test", &not_found, &status).await;
            assert_eq!(missing.status, 404, "{label}");
            assert!(
                !missing.has_header("x-frame-options"),
                "{label}: add skips a 404"
            );
            assert!(
                missing.header("x-served-by").starts_with("edge "),
                "{label}: always"
            );
            assert!(!missing.has_header("x-powered-by"), "{label}");
            assert_ne!(
                missing.header("cache-control"),
                "max-age=3600",
                "{label}: expires skips a 404"
            );
        }
        let cached = format!("/c/{}", label.replace(' ', "-"));
        assert_eq!(origin.hits_for(&cached), 1, "{label}: the second was a hit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_cache_status_goes_miss_hit_then_updating_and_bypass_on_a_passed_route() {
    let origin = Origin::start().await;
    let rules =
        "response_headers = { always = { \"X-Cache-Status\" = \"$upstream_cache_status\" } }";
    let proxy = Proxy::new(&origin).no_default_ttl().route(&format!(
        "path = \"^/c/\"\nrefresh = \"none\"\n{rules}\n\n\
         [[routes]]\nname = \"pass\"\nupstream = \"origin\"\n{rules}\n"
    ));
    let wires = Wires::start(proxy, "").await;
    let short = [(
        "x-origin-cache-control",
        "max-age=1, stale-while-revalidate=60",
    )];
    for wire in &wires.all {
        let label = wire.label();
        let path = format!("/c/{}", label.replace(' ', "-"));
        let first = get(&wires, wire, "a.test", &path, &short).await;
        assert_eq!(first.header("x-cache-status"), "MISS", "{label}");
        let second = get(&wires, wire, "a.test", &path, &short).await;
        assert_eq!(second.header("x-cache-status"), "HIT", "{label}");
        // Time is the subject: once the copy is a second old it is served
        // stale while it is refreshed.
        let what = format!("{label}: X-Cache-Status UPDATING");
        wait_until(Duration::from_secs(10), &what, async || {
            let r = get(&wires, wire, "a.test", &path, &short).await;
            let status = r.header("x-cache-status").to_owned();
            assert!(
                ["HIT", "UPDATING"].contains(&status.as_str()),
                "{label}: {status}"
            );
            status == "UPDATING"
        })
        .await;
        let passed = get(
            &wires,
            wire,
            "a.test",
            &format!("/p/{label}").replace(' ', "-"),
            &[],
        )
        .await;
        assert_eq!(passed.header("x-cache-status"), "BYPASS", "{label}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidations_and_background_refreshes_carry_the_request_rules() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).no_default_ttl().route(
        "refresh = \"none\"\nrequest_headers = { set = { Host = \"app.internal\", \"X-Real-IP\" = \"$remote_addr\" } }",
    );
    let wires = Wires::start(proxy, "").await;
    for wire in &wires.all {
        let label = wire.label();
        for (path, steer) in [
            ("/reval", "max-age=1"),
            ("/swr", "max-age=1, stale-while-revalidate=60"),
        ] {
            let path = format!("{path}/{}", label.replace(' ', "-"));
            let headers = [
                ("x-origin-cache-control", steer),
                ("x-origin-header", "ETag: \"v1\""),
            ];
            get(&wires, wire, "a.test", &path, &headers).await;
            // Time is the subject: the copy expires after a second, then
            // is revalidated in the request's path or refreshed behind it.
            let what = format!("{label} {path}: a second origin request");
            wait_until(Duration::from_secs(10), &what, async || {
                get(&wires, wire, "a.test", &path, &headers).await;
                origin.hits_for(&path) >= 2
            })
            .await;
            let seen = origin.requests_for(&path);
            assert!(
                seen[1..]
                    .iter()
                    .any(|r| r.headers.contains_key("if-none-match")),
                "{label} {path}: a conditional request"
            );
            for r in &seen {
                assert_eq!(r.headers["host"], "app.internal", "{label} {path}");
                assert_eq!(r.headers["x-real-ip"], "127.0.0.1", "{label} {path}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_fetch_of_an_object_too_large_to_store_carries_the_request_rules() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .zone("64MiB", "1KiB")
        .route("request_headers = { set = { Host = \"app.internal\" } }");
    let wires = Wires::start(proxy, "").await;
    for wire in &wires.all {
        let label = wire.label();
        let path = format!("/big/{}", label.replace(' ', "-"));
        let headers = [("x-origin-body-bytes", "4096"), ("range", "bytes=0-9")];
        let r = get(&wires, wire, "a.test", &path, &headers).await;
        // The test origin ignores Range: its 200 is relayed as it came.
        assert_eq!(r.status, 200, "{label}");
        let seen = origin.requests_for(&path);
        let ranged: Vec<_> = seen
            .iter()
            .filter(|r| r.headers.contains_key("range"))
            .collect();
        assert_eq!(ranged.len(), 1, "{label}: sent again with its Range");
        for r in &seen {
            assert_eq!(r.headers["host"], "app.internal", "{label}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_cache_status_is_stale_when_a_failing_origin_is_stood_in_for_and_expired_after() {
    let origin = Origin::start().await;
    let rules =
        "response_headers = { always = { \"X-Cache-Status\" = \"$upstream_cache_status\" } }";
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route(&format!("refresh = \"none\"\n{rules}"));
    let wires = Wires::start(proxy, "").await;
    let failing = [
        ("x-origin-cache-control", "max-age=1, stale-if-error=60"),
        ("x-origin-status", "500"),
    ];
    for wire in &wires.all {
        let label = wire.label();
        let storable = [("x-origin-cache-control", "max-age=1")];
        for (prefix, then, want) in [
            ("/sie/", &failing[..], "STALE"),
            ("/exp/", &storable[..], "EXPIRED"),
        ] {
            let path = format!("{prefix}{}", label.replace(' ', "-"));
            let first = [("x-origin-cache-control", "max-age=1, stale-if-error=60")];
            let r = get(&wires, wire, "a.test", &path, &first).await;
            assert_eq!(r.header("x-cache-status"), "MISS", "{label}");
            // Time is the subject: the copy expires after a second.
            let what = format!("{label} {path}: X-Cache-Status {want}");
            wait_until(Duration::from_secs(10), &what, async || {
                let r = get(&wires, wire, "a.test", &path, then).await;
                r.header("x-cache-status") == want
            })
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_limited_to_the_plain_listener_and_one_to_the_tls_listener() {
    let (plain, tls) = (Origin::start().await, Origin::start().await);
    // The plain listener is 127.0.0.1:0, the TLS one 127.0.0.2:0.
    let proxy = Proxy::new(&plain).no_zone().route(&format!(
        "listeners = [\"127.0.0.1:0\"]\n\n\
         [upstreams.tls]\nservers = [\"{}\"]\n\n\
         [[routes]]\nname = \"tls\"\nupstream = \"tls\"\nzone = \"ram\"\n\
         ttl = {{ 200 = \"60s\" }}\nlisteners = [\"127.0.0.2:0\"]\n",
        tls.addr()
    ));
    let wires = Wires::start_with_tls_on(proxy, "", "127.0.0.2:0").await;
    for wire in &wires.all {
        let label = wire.label();
        let path = format!("/l/{}", label.replace(' ', "-"));
        let r = get(&wires, wire, "a.test", &path, &[]).await;
        assert_eq!(r.status, 200, "{label}");
        let again = get(&wires, wire, "a.test", &path, &[]).await;
        match wire {
            Wire::H2Tls(_) => {
                assert_eq!(tls.hits_for(&path), 1, "{label}: the TLS route, cached");
                assert!(again.is_hit(), "{label}");
                assert_eq!(plain.hits_for(&path), 0, "{label}");
            }
            _ => {
                assert_eq!(plain.hits_for(&path), 2, "{label}: the plain route, passed");
                assert_eq!(tls.hits_for(&path), 0, "{label}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_without_a_route_of_its_own_answers_404() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).route("listeners = [\"127.0.0.2:0\"]");
    let wires = Wires::start_with_tls_on(proxy, "", "127.0.0.2:0").await;
    for wire in &wires.all {
        let r = get(&wires, wire, "a.test", "/only-tls", &[]).await;
        let want = if matches!(wire, Wire::H2Tls(_)) {
            200
        } else {
            404
        };
        assert_eq!(r.status, want, "{}", wire.label());
    }
    assert_eq!(
        origin.hits_for("/only-tls"),
        1,
        "the plain requests never reached it"
    );
}

#[test]
fn check_refuses_rules_that_would_touch_what_the_cache_reads() {
    let config = "[server]\nlisten = [\"127.0.0.1:8080\"]\n[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n\
                  [zones.ram]\nkind = \"memory\"\nmax_size = \"1MiB\"\n\
                  [[routes]]\nupstream = \"app\"\nzone = \"ram\"\nkey = \"$host$uri$http_x_device\"\n\
                  listeners = [\"127.0.0.1:443\"]\n\
                  request_headers = { set = { \"X-Device\" = \"phone\" } }\n\
                  response_headers = { remove = [\"ETag\"] }\n";
    let e = calmcache::Config::from_toml(config, "t.toml")
        .unwrap_err()
        .to_string();
    for want in [
        "routes[0].listeners[0]",
        "127.0.0.1:8080",
        "routes[0].request_headers.set.X-Device",
        "the route's key reads it",
        "routes[0].response_headers.remove[0]",
        "stored validators",
    ] {
        assert!(e.contains(want), "{want}:\n{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_routes_404_carries_its_always_rules_not_its_add_rules() {
    // NGINX: `internal; add_header X-A a; add_header X-B b always;` answers
    // a client's request 404 with X-B only.
    let origin = Origin::start().await;
    let rules = "response_headers = { add = { \"X-Frame-Options\" = \"DENY\" }, \
                 always = { \"X-Served-By\" = \"edge $server_port\" } }";
    let routes = format!(
        "path = \"^/private/\"\ninternal = true\n{rules}\n\n\
         [[routes]]\nname = \"hidden\"\npath = \"^/hidden$\"\ninternal = true\n\
         return = {{ status = 200, body = \"hidden\" }}\n{rules}\n\n\
         [[routes]]\nname = \"pass\"\nupstream = \"origin\"\n"
    );
    let wires = Wires::start(Proxy::new(&origin).route(&routes), "").await;
    for wire in &wires.all {
        let label = wire.label();
        for path in ["/private/x", "/hidden"] {
            let reply = get(&wires, wire, "a.test", path, &[]).await;
            assert_eq!(reply.status, 404, "{label} {path}");
            assert!(
                reply.header("x-served-by").starts_with("edge "),
                "{label} {path}: always"
            );
            assert!(
                !reply.has_header("x-frame-options"),
                "{label} {path}: add skips a 404"
            );
        }
    }
    assert_eq!(origin.hits(), 0);
}
