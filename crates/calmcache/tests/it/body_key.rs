//! Requests keyed by their body (issue 27, item 3): QUERY cached on every
//! route with a zone, POST where the route says `cache_post = true`; the
//! key holds the method and a digest of the body (its bytes, or its
//! canonical JSON), bodies past `max_body_key` or not JSON pass uncached,
//! identical bodies coalesce, a refresh re-sends the body, and a purge by
//! URL reaches every body variant. Over HTTP/1.1, h2c and HTTP/2 over TLS.

use std::time::Duration;

use calmcache_testkit::raw::RawConn;
use calmcache_testkit::wire::{Wire, TLS_NAME};
use calmcache_testkit::{Origin, Proxy, Reply, Wires};
use http::Method;

use crate::purge_integrity::{admin, TOKEN};
use crate::wait_until;

/// `/gql/...`: POST cached, JSON bodies canonicalised, 1 KiB at most;
/// `/bytes/...`: POST cached, keyed by bytes; `/slow/...`: as `/gql/`, for
/// the coalescing measure; anything else: POST passes, QUERY is cached.
async fn start(origin: &Origin) -> Wires {
    let gql = "match = \"^/gql/\"\ncache_post = true\nbody_key = \"json\"\n\
               max_body_key = \"1KiB\"\ncache_status_key = true\n";
    let more = "\n[[routes]]\nname = \"bytes\"\nupstream = \"origin\"\nzone = \"ram\"\n\
                match = \"^/bytes/\"\ncache_post = true\n\n\
                [[routes]]\nname = \"nozone\"\nupstream = \"origin\"\nmatch = \"^/nz/\"\n\n\
                [[routes]]\nname = \"plain\"\nupstream = \"origin\"\nzone = \"ram\"\n";
    let builder = Proxy::new(origin)
        .no_default_ttl()
        .admin(&admin())
        .route(&format!("{gql}{more}"));
    Wires::start(builder, "").await
}

/// JSON bodies, and explicitly fresh answers that name the request they
/// answer.
const FRESH: [(&str, &str); 3] = [
    ("content-type", "application/json"),
    ("x-origin-cache-control", "max-age=60"),
    ("x-origin-echo-body", "1"),
];

fn query() -> Method {
    Method::from_bytes(b"QUERY").unwrap()
}

async fn send(wires: &Wires, wire: &Wire, method: Method, path: &str, body: &str) -> Reply {
    let body = body.to_owned();
    wires.send(wire, method, TLS_NAME, path, &FRESH, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_is_cached_by_default_keyed_by_its_body() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/p/q{i}");
        let first = send(&wires, wire, query(), &path, "a=1").await;
        assert_eq!(first.status, 200, "{what}: {}", first.body);
        assert!(first.body.starts_with("QUERY n="), "{what}: {}", first.body);
        assert!(first.body.ends_with("body=a=1"), "{what}: {}", first.body);
        let hit = send(&wires, wire, query(), &path, "a=1").await;
        assert!(hit.is_hit(), "{what}: {}", hit.cache_status());
        assert_eq!(hit.body, first.body, "{what}");
        assert_eq!(origin.hits_for(&path), 1, "{what}");
        let other = send(&wires, wire, query(), &path, "a=2").await;
        assert!(!other.is_hit(), "{what}: another body, another entry");
        assert!(other.body.ends_with("body=a=2"), "{what}: {}", other.body);
        // A GET of the URL is not a QUERY of it, nor the reverse.
        let get = send(&wires, wire, Method::GET, &path, "").await;
        assert!(!get.is_hit(), "{what}: {}", get.cache_status());
        assert!(get.body.starts_with("GET "), "{what}: {}", get.body);
        assert_eq!(origin.hits_for(&path), 3, "{what}");
        let again = send(&wires, wire, query(), &path, "a=1").await;
        assert_eq!(again.body, first.body, "{what}: the QUERY's own entry");
        // Range is GET's: a QUERY gets the whole answer.
        let mut ranged = FRESH.to_vec();
        ranged.push(("range", "bytes=0-3"));
        let whole = wires
            .send(wire, query(), TLS_NAME, &path, &ranged, "a=1")
            .await;
        assert_eq!(whole.status, 200, "{what}");
        assert_eq!(whole.body, first.body, "{what}");
        // A route without a zone: passed, every time.
        let nz = format!("/nz/q{i}");
        for round in 1..=2 {
            send(&wires, wire, query(), &nz, "a=1").await;
            assert_eq!(origin.hits_for(&nz), round, "{what}");
        }
        let sent = origin.requests_for(&path);
        assert_eq!(sent[0].method.as_str(), "QUERY", "{what}");
        assert_eq!(sent[0].header("content-length"), Some("3"), "{what}");
        assert_eq!(&sent[0].body[..], b"a=1", "{what}");
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_is_cached_only_where_the_route_says_so_and_never_serves_another_method() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        // No cache_post: a pass, every time.
        let plain = format!("/p/post{i}");
        for round in 1..=2 {
            let r = send(&wires, wire, Method::POST, &plain, "x").await;
            assert!(
                r.cache_status().contains("fwd=method"),
                "{what}: {}",
                r.cache_status()
            );
            assert_eq!(origin.hits_for(&plain), round, "{what}");
        }
        // cache_post: stored, then a hit; its key shows method and digest.
        let path = format!("/gql/post{i}");
        let body = r#"{"query":"{ me { name } }"}"#;
        let post = send(&wires, wire, Method::POST, &path, body).await;
        assert!(post.body.starts_with("POST n="), "{what}: {}", post.body);
        let hit = send(&wires, wire, Method::POST, &path, body).await;
        assert!(hit.is_hit(), "{what}: {}", hit.cache_status());
        assert_eq!(hit.body, post.body, "{what}");
        let key = hit.cache_status_params().param("key").unwrap().to_owned();
        assert!(
            key.contains(&format!("{path} POST sha256:")),
            "{what}: {key}"
        );
        // The POST's answer serves neither a GET nor a QUERY of the URL,
        // and a GET's serves no POST.
        let get = send(&wires, wire, Method::GET, &path, "").await;
        assert!(get.body.starts_with("GET "), "{what}: {}", get.body);
        let q = send(&wires, wire, query(), &path, body).await;
        assert!(q.body.starts_with("QUERY "), "{what}: {}", q.body);
        assert_eq!(origin.hits_for(&path), 3, "{what}");
        let get_hit = send(&wires, wire, Method::GET, &path, "").await;
        assert!(
            get_hit.is_hit(),
            "{what}: a cached POST invalidates nothing"
        );
        let post_hit = send(&wires, wire, Method::POST, &path, body).await;
        assert_eq!(post_hit.body, post.body, "{what}");
        assert_eq!(origin.hits_for(&path), 3, "{what}");
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_answer_without_explicit_freshness_is_not_stored() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    for (i, wire) in wires.all.iter().enumerate() {
        let path = format!("/gql/heuristic{i}");
        // A Last-Modified would give a GET heuristic freshness.
        let modified = calmcache_testkit::http_date_ago(86_400);
        let lm = format!("Last-Modified: {modified}");
        let headers = [("x-origin-header", lm.as_str())];
        for round in 1..=2 {
            let r = wires
                .send(wire, Method::POST, TLS_NAME, &path, &headers, "{}")
                .await;
            assert_eq!(r.status, 200, "{}", wire.label());
            assert_eq!(
                origin.hits_for(&path),
                round,
                "{}: {}",
                wire.label(),
                r.cache_status()
            );
        }
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_json_bodies_share_an_entry_only_where_json_is_canonicalised() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let a = r#"{"query":"q","variables":{"id":1,"lang":"en"}}"#;
    let b = "{ \"variables\" : { \"lang\":\"en\", \"id\":1 },\n  \"query\":\"q\" }";
    let c = r#"{"query":"q","variables":{"id":2,"lang":"en"}}"#;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let json = format!("/gql/canon{i}");
        let first = send(&wires, wire, Method::POST, &json, a).await;
        let same = send(&wires, wire, Method::POST, &json, b).await;
        assert!(same.is_hit(), "{what}: {}", same.cache_status());
        assert_eq!(same.body, first.body, "{what}");
        let other = send(&wires, wire, Method::POST, &json, c).await;
        assert!(!other.is_hit(), "{what}: another value");
        assert_eq!(origin.hits_for(&json), 2, "{what}");
        let bytes = format!("/bytes/canon{i}");
        send(&wires, wire, Method::POST, &bytes, a).await;
        let not_same = send(&wires, wire, Method::POST, &bytes, b).await;
        assert!(!not_same.is_hit(), "{what}: bytes differ");
        let same_bytes = send(&wires, wire, Method::POST, &bytes, a).await;
        assert!(same_bytes.is_hit(), "{what}: {}", same_bytes.cache_status());
        assert_eq!(origin.hits_for(&bytes), 2, "{what}");
    }
    wires.proxy.stop().await;
}

/// FRESH with another Content-Type.
fn typed(media: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut headers = FRESH.to_vec();
    headers[0] = ("content-type", media);
    headers
}

/// The same bytes sent as another media type (a GraphQL server answers
/// `text/plain` with a 200 error) never share the JSON request's entry;
/// on a `body_key = "json"` route they pass uncached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_bytes_of_another_content_type_are_another_entry() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let body = r#"{"query":"{ me }"}"#;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let bytes = format!("/bytes/typed{i}");
        let json = send(&wires, wire, Method::POST, &bytes, body).await;
        assert!(!json.is_hit(), "{what}");
        for (hits, media) in [(2, "text/plain"), (3, "application/graphql")] {
            let headers = typed(media);
            let other = wires
                .send(
                    wire,
                    Method::POST,
                    TLS_NAME,
                    &bytes,
                    &headers,
                    body.to_owned(),
                )
                .await;
            assert!(!other.is_hit(), "{what} {media}: {}", other.cache_status());
            assert_eq!(origin.hits_for(&bytes), hits, "{what} {media}");
            let again = wires
                .send(
                    wire,
                    Method::POST,
                    TLS_NAME,
                    &bytes,
                    &headers,
                    body.to_owned(),
                )
                .await;
            assert!(again.is_hit(), "{what} {media}: {}", again.cache_status());
        }
        let json_again = send(&wires, wire, Method::POST, &bytes, body).await;
        assert!(json_again.is_hit(), "{what}: {}", json_again.cache_status());
        assert_eq!(origin.hits_for(&bytes), 3, "{what}");

        let gql = format!("/gql/typed{i}");
        for round in 1..=2 {
            let headers = typed("text/plain");
            let r = wires
                .send(
                    wire,
                    Method::POST,
                    TLS_NAME,
                    &gql,
                    &headers,
                    body.to_owned(),
                )
                .await;
            assert_eq!(r.status, 200, "{what}: {}", r.body);
            assert!(
                r.cache_status().contains("detail=body-not-json"),
                "{what}: {}",
                r.cache_status()
            );
            assert_eq!(origin.hits_for(&gql), round, "{what}");
        }
        let json = send(&wires, wire, Method::POST, &gql, body).await;
        assert!(!json.is_hit(), "{what}: {}", json.cache_status());
        let json = send(&wires, wire, Method::POST, &gql, body).await;
        assert!(json.is_hit(), "{what}: {}", json.cache_status());
    }
    let status = wires.proxy.status().await;
    let passed = 2 * wires.all.len();
    assert_eq!(
        status["routes"]["test"]["body_key_passed"], passed,
        "{status}"
    );
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_limit_or_not_json_pass_uncached_and_whole() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let big = format!("{{\"q\":\"{}\"}}", "x".repeat(3000));
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        for (name, body, detail) in [
            ("big", big.as_str(), "detail=body-too-large"),
            ("bad", "{\"q\":", "detail=body-not-json"),
            ("twice", "{\"q\":1,\"q\":2}", "detail=body-not-json"),
        ] {
            let path = format!("/gql/{name}{i}");
            for round in 1..=2 {
                let r = send(&wires, wire, Method::POST, &path, body).await;
                assert_eq!(r.status, 200, "{what} {name}: {}", r.body);
                assert!(
                    r.cache_status().contains(detail),
                    "{what}: {}",
                    r.cache_status()
                );
                assert_eq!(origin.hits_for(&path), round, "{what} {name}");
            }
            let sent = origin.requests_for(&path);
            assert_eq!(&sent[0].body[..], body.as_bytes(), "{what} {name}: whole");
            // On a cache_post route a POST is a read, passed or not: the
            // URL's GET entry stays.
            send(&wires, wire, Method::GET, &path, "").await;
            send(&wires, wire, Method::POST, &path, body).await;
            let get = send(&wires, wire, Method::GET, &path, "").await;
            assert!(get.is_hit(), "{what} {name}: {}", get.cache_status());
            assert_eq!(sent[0].method, Method::POST, "{what} {name}");
        }
    }
    let status = wires.proxy.status().await;
    assert_eq!(status["routes"]["test"]["body_key_passed"], 27, "{status}");
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_query_body_is_the_clients_400_and_reaches_nobody() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let addr = wires.proxy.running().proxy_addrs[0];
    let host = wires.proxy.host();
    let mut conn = RawConn::connect(addr).await.unwrap();
    let request = format!(
        "QUERY /p/bad HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"
    );
    let _ = conn.send(request.as_bytes()).await;
    let r = conn.read_response(false).await.unwrap();
    assert_eq!(r.status, 400, "{}", r.head);
    assert_eq!(origin.hits_for("/p/bad"), 0);
    wires.proxy.stop().await;
}

/// The issue's measure: 200 concurrent identical POST bodies to a 500 ms
/// GraphQL-like origin make 1 origin request; 200 different bodies make
/// 200. 200 over HTTP/1.1, 50 over each HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_bodies_coalesce_and_different_ones_do_not() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let slow = [
        ("content-type", "application/json"),
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-echo-body", "1"),
        ("x-origin-delay-ms", "500"),
    ];
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let n = if i == 0 { 200 } else { 50 };
        let same = format!("/gql/same{i}");
        let wires = &wires;
        let slow = &slow;
        let one = |body: String, path: &str| {
            let path = path.to_owned();
            async move {
                wires
                    .send(wire, Method::POST, TLS_NAME, &path, slow, body)
                    .await
            }
        };
        let body = r#"{"query":"{ hot }"}"#.to_owned();
        let replies =
            futures_util::future::join_all((0..n).map(|_| one(body.clone(), &same))).await;
        assert!(replies.iter().all(|r| r.status == 200), "{what}");
        assert!(replies.iter().all(|r| r.body == replies[0].body), "{what}");
        assert_eq!(
            origin.hits_for(&same),
            1,
            "{what}: {n} identical bodies, one fetch"
        );
        let different = format!("/gql/different{i}");
        let bodies = (0..n).map(|k| one(format!("{{\"query\":\"{{ item({k}) }}\"}}"), &different));
        let replies = futures_util::future::join_all(bodies).await;
        for (k, r) in replies.iter().enumerate() {
            assert!(
                r.body.ends_with(&format!("item({k}) }}\"}}")),
                "{what}: {}",
                r.body
            );
        }
        assert_eq!(
            origin.hits_for(&different),
            n as u64,
            "{what}: one fetch per body"
        );
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_re_sends_the_body() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let headers = [
        ("content-type", "application/json"),
        (
            "x-origin-cache-control",
            "max-age=1, stale-while-revalidate=60",
        ),
        ("x-origin-echo-body", "1"),
    ];
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/gql/refresh{i}");
        let body = r#"{"query":"{ clock }"}"#;
        let post = || wires.send(wire, Method::POST, TLS_NAME, &path, &headers, body);
        let first = post().await;
        assert!(first.body.starts_with("POST n="), "{what}");
        // Time is the subject: past the 1 s lifetime, a stale answer draws
        // a background refresh.
        wait_until(Duration::from_secs(10), "a refresh", async || {
            post().await;
            origin.hits_for(&path) >= 2
        })
        .await;
        let sent = origin.requests_for(&path);
        assert_eq!(sent[1].method, Method::POST, "{what}");
        wait_until(Duration::from_secs(5), "the refresh's body", async || {
            &origin.requests_for(&path)[1].body[..] == body.as_bytes()
        })
        .await;
        assert!(
            !sent[1].has_header("if-none-match"),
            "{what}: a POST is never conditional"
        );
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_by_url_prefix_or_tag_reaches_every_body_variant() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let wire = &wires.all[0];
    let tagged = [
        ("content-type", "application/json"),
        ("x-origin-cache-control", "max-age=60"),
        ("x-origin-echo-body", "1"),
        ("x-origin-header", "Cache-Tag: gql"),
    ];
    let bodies = ["{\"a\":1}", "{\"a\":2}", "{\"a\":3}"];
    let path = "/gql/purged";
    let store_all = async || {
        for body in bodies {
            wires
                .send(wire, Method::POST, TLS_NAME, path, &tagged, body)
                .await;
            wires
                .send(wire, query(), TLS_NAME, path, &tagged, body)
                .await;
        }
        wires
            .send(wire, Method::GET, TLS_NAME, path, &tagged, "")
            .await;
    };
    let all_hits = async || {
        let mut hits = 0;
        for body in bodies {
            for method in [Method::POST, query()] {
                let r = wires
                    .send(wire, method, TLS_NAME, path, &tagged, body)
                    .await;
                hits += usize::from(fresh_hit(&r));
            }
        }
        let r = wires
            .send(wire, Method::GET, TLS_NAME, path, &tagged, "")
            .await;
        hits + usize::from(fresh_hit(&r))
    };
    for order in [
        r#"{"url": "/gql/purged"}"#,
        r#"{"url": "/gql/purged", "soft": true}"#,
        r#"{"prefix": "/gql/pur"}"#,
        r#"{"tag": "gql"}"#,
    ] {
        store_all().await;
        assert_eq!(all_hits().await, 7, "{order}: all stored");
        let answer = wires.proxy.purge(TOKEN, order).await;
        assert!(answer["purged"].as_u64().unwrap() >= 7, "{order}: {answer}");
        let before = origin.hits_for(path);
        assert_eq!(all_hits().await, 0, "{order}: every variant purged");
        // A soft purge serves the stale copies while each is refreshed.
        wait_until(
            Duration::from_secs(10),
            "one fetch per variant",
            async || origin.hits_for(path) == before + 7,
        )
        .await;
    }
    wires.proxy.stop().await;
}

/// A hit on a fresh copy (a soft-purged one is served stale, `ttl` <= 0).
fn fresh_hit(r: &Reply) -> bool {
    r.is_hit() && r.cache_status_params().ttl().is_some_and(|ttl| ttl > 0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_by_the_key_cache_status_shows_removes_that_body_variant_only() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/gql/by-key{i}");
        send(&wires, wire, Method::POST, &path, "{\"a\":1}").await;
        send(&wires, wire, Method::POST, &path, "{\"a\":2}").await;
        let hit = send(&wires, wire, Method::POST, &path, "{\"a\":1}").await;
        assert!(hit.is_hit(), "{what}: {}", hit.cache_status());
        let key = hit.cache_status_params().param("key").unwrap().to_owned();
        let order = serde_json::json!({ "key": key }).to_string();
        let answer = wires.proxy.purge(TOKEN, &order).await;
        assert_eq!(answer["purged"], 1, "{what}: {key}: {answer}");
        let gone = send(&wires, wire, Method::POST, &path, "{\"a\":1}").await;
        assert!(!gone.is_hit(), "{what}: {}", gone.cache_status());
        let kept = send(&wires, wire, Method::POST, &path, "{\"a\":2}").await;
        assert!(kept.is_hit(), "{what}: {}", kept.cache_status());
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vary_on_top_of_the_body_keeps_its_variants_apart() {
    let origin = Origin::start().await;
    let wires = start(&origin).await;
    let headers = |lang: &'static str| {
        [
            ("content-type", "application/json"),
            ("x-origin-cache-control", "max-age=60"),
            ("x-origin-echo-body", "1"),
            ("x-origin-header", "Vary: Accept-Language"),
            ("accept-language", lang),
        ]
    };
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/gql/vary{i}");
        let post = async |lang: &'static str, body: &'static str| {
            let h = headers(lang);
            wires
                .send(wire, Method::POST, TLS_NAME, &path, &h, body)
                .await
        };
        let en = post("en", "{}").await;
        let fr = post("fr", "{}").await;
        assert_ne!(en.body, fr.body, "{what}");
        assert_eq!(post("en", "{}").await.body, en.body, "{what}");
        assert_eq!(post("fr", "{}").await.body, fr.body, "{what}");
        let other = post("en", "[]").await;
        assert!(other.body.ends_with("body=[]"), "{what}: {}", other.body);
        assert_eq!(origin.hits_for(&path), 3, "{what}");
    }
    wires.proxy.stop().await;
}

/// Fleet mode: GET answers are shared through Redis; body-keyed ones stay
/// in the node that fetched them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_keyed_entries_stay_out_of_the_fleets_shared_tier() {
    let origin = Origin::start().await;
    let redis = calmcache_testkit::redis::Redis::start();
    let a = crate::fleet::node_with(&origin, &redis, "60s", "").await;
    let b = crate::fleet::node_with(&origin, &redis, "60s", "").await;
    let host = [("host", "fleet.test")];
    let send = |node: &calmcache_testkit::RunningProxy, method: Method, path: &str| {
        let url = node.url(path);
        let body = if method == Method::GET { "" } else { "q=1" };
        async move { calmcache_testkit::request_with_body(method, &url, &host, body).await }
    };
    // A GET stored by one node is taken from Redis by the other.
    send(&a, Method::GET, "/shared").await;
    wait_until(Duration::from_secs(15), "the GET shared", async || {
        let r = send(&b, Method::GET, "/shared").await;
        r.status == 200 && origin.hits_for("/shared") == 1 && r.is_hit()
    })
    .await;
    // A QUERY stored by one node is fetched again by the other.
    let first = send(&a, query(), "/q").await;
    assert_eq!(first.status, 200);
    assert!(send(&a, query(), "/q").await.is_hit());
    let other = send(&b, query(), "/q").await;
    assert!(!other.is_hit(), "{}", other.cache_status());
    assert_eq!(origin.hits_for("/q"), 2);
    assert!(send(&b, query(), "/q").await.is_hit(), "kept locally");
    a.stop().await;
    b.stop().await;
}

/// After a restart, a disk zone's loader tells a purge by URL that body
/// variants of an earlier run may be there: the purge finds them before any
/// body-keyed request of this run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_by_url_after_a_restart_reaches_body_variants_on_disk() {
    let origin = Origin::start().await;
    let dir = crate::scratch("body-key-disk");
    let start = || {
        Proxy::new(&origin)
            .no_default_ttl()
            .admin(&admin())
            .disk_zone(&dir, "")
            .route("cache_post = true")
            .start()
    };
    let loaded = async |proxy: &calmcache_testkit::RunningProxy| {
        wait_until(Duration::from_secs(15), "the loader", async || {
            proxy.status().await["zones"]["ram"]["disk"]["loader_done"] == true
        })
        .await;
    };
    let post = async |proxy: &calmcache_testkit::RunningProxy| {
        let url = proxy.url("/d");
        calmcache_testkit::request_with_body(Method::POST, &url, &FRESH, "{}").await
    };
    let proxy = start().await;
    loaded(&proxy).await;
    post(&proxy).await;
    assert!(post(&proxy).await.is_hit());
    proxy.stop().await;

    let proxy = start().await;
    loaded(&proxy).await;
    // The hosts the loader found reach the route just after it is done.
    wait_until(
        Duration::from_secs(15),
        "the body variant purged",
        async || proxy.purge(TOKEN, r#"{"url": "/d"}"#).await["purged"] == 1,
    )
    .await;
    assert!(!post(&proxy).await.is_hit());
    assert_eq!(origin.hits_for("/d"), 2);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stored QUERY answer (any client can store one) makes purges of its
/// own URL sweep the URL's body variants, and no other: a purge of another
/// URL stays a lookup of its keys, never a scan of the zone (the tier
/// counts its scans).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_purge_of_a_url_with_body_variants_scans_for_them() {
    let origin = Origin::start().await;
    let tier = calmcache_testkit::CountingTier::new(64 << 20, 1 << 20);
    let builder = Proxy::new(&origin)
        .no_default_ttl()
        .admin(&admin())
        .zone_tier(tier.clone());
    let wires = Wires::start(builder, "").await;
    let scans = || {
        tier.counts()
            .scans
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/scan/q{i}");
        for body in ["{\"a\":1}", "{\"a\":2}"] {
            send(&wires, wire, query(), &path, body).await;
            let hit = send(&wires, wire, query(), &path, body).await;
            assert!(hit.is_hit(), "{what}: {}", hit.cache_status());
        }
        let get = format!("/scan/get{i}");
        send(&wires, wire, Method::GET, &get, "").await;
        assert!(send(&wires, wire, Method::GET, &get, "").await.is_hit());

        let before = scans();
        for other in [get.as_str(), "/scan/never"] {
            let purge = format!(r#"{{"url": "{other}"}}"#);
            wires.proxy.purge(TOKEN, &purge).await;
        }
        assert_eq!(
            scans(),
            before,
            "{what}: no scan for URLs without body variants"
        );
        assert!(
            !send(&wires, wire, Method::GET, &get, "").await.is_hit(),
            "{what}"
        );

        let purge = format!(r#"{{"url": "{path}"}}"#);
        let purged = wires.proxy.purge(TOKEN, &purge).await;
        assert_eq!(purged["purged"], 2, "{what}: {purged}");
        assert!(scans() > before, "{what}: its variants were swept");
        for body in ["{\"a\":1}", "{\"a\":2}"] {
            let r = send(&wires, wire, query(), &path, body).await;
            assert!(!r.is_hit(), "{what}: {}", r.cache_status());
        }
    }
    wires.proxy.stop().await;
}
