//! Keys read what origins read (issue 25, item 3): on a route keyed with
//! `$arg_page` and `$cookie_lang`, a request that spells a keyed name
//! another way an origin reads as that name (`?pag%65=2`, `Cookie: lang =de`)
//! or gives it twice is passed to the origin and never stored, over
//! HTTP/1.1, h2c and HTTP/2 over TLS. The origin echoes its request, so an
//! answer stored for the wrong key would show another request's target.

use calmcache_testkit::wire::TLS_NAME;
use calmcache_testkit::{Origin, Proxy, Reply, Wire, Wires};
use http::Method;

const ECHO: (&str, &str) = ("x-origin-echo", "1");

/// Request fields of a case.
type Fields = Vec<(&'static str, &'static str)>;

/// (attacker's target, its fields, then a clean request's target and fields).
type Case = (String, Fields, String, Fields);

/// `^/api/` uncached, then a catch-all keyed by path, `page` and `lang`.
fn keyed(origin: &Origin) -> Proxy {
    Proxy::new(origin).no_zone().route(
        "match = '^/api/'\n\n[[routes]]\nname = \"keyed\"\nupstream = \"origin\"\n\
         zone = \"ram\"\nttl = { any = \"30s\" }\nkey = \"$host$uri|$arg_page|$cookie_lang\"",
    )
}

async fn get(wires: &Wires, wire: &Wire, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut all = vec![ECHO];
    all.extend_from_slice(headers);
    let reply = wires
        .send(wire, Method::GET, TLS_NAME, path, &all, "")
        .await;
    assert_eq!(reply.status, 200, "{} {path}: {}", wire.label(), reply.body);
    reply
}

/// The target the origin was asked for, from the echo's first line.
fn target(reply: &Reply) -> &str {
    let first = reply.body.lines().next().unwrap_or_default();
    first.rsplit(' ').next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_spelling_of_a_keyed_name_is_never_stored_for_others() {
    // Regression (issue 25): `?pag%65=2` was keyed as "no page" while the
    // origin read page 2, `?page=1&pag%65=2` as page 1 while it read page 2
    // (the last), and `Cookie: lang =de` as "no lang" while Django, Go, Node
    // and Python read `lang=de`: one request stored its answer for everyone.
    let origin = Origin::start().await;
    let wires = Wires::start(keyed(&origin), "").await;
    for wire in &wires.all {
        let w = wire.label().replace(['/', ' ', '.'], "");
        let cases: [Case; 6] = [
            (
                format!("/{w}/a?pag%65=2"),
                vec![],
                format!("/{w}/a"),
                vec![],
            ),
            (
                format!("/{w}/b?page=1&pag%65=2"),
                vec![],
                format!("/{w}/b?page=1"),
                vec![],
            ),
            (format!("/{w}/c?PAGE=2"), vec![], format!("/{w}/c"), vec![]),
            (
                format!("/{w}/d?x=1;page=2"),
                vec![],
                format!("/{w}/d?x=1"),
                vec![],
            ),
            (
                format!("/{w}/e"),
                vec![("cookie", "lang =de")],
                format!("/{w}/e"),
                vec![],
            ),
            (
                format!("/{w}/f"),
                vec![("cookie", "lang=en; lang =de")],
                format!("/{w}/f"),
                vec![("cookie", "lang=en")],
            ),
        ];
        for (attack, attack_headers, victim, victim_headers) in cases {
            let what = format!("{} {attack} {attack_headers:?}", wire.label());
            for _ in 0..2 {
                let a = get(&wires, wire, &attack, &attack_headers).await;
                assert!(!a.is_stored_or_hit(), "{what}: {}", a.cache_status());
                assert_eq!(target(&a), attack, "{what}");
            }
            // The victim's own answer, stored for it: the route caches.
            let v = get(&wires, wire, &victim, &victim_headers).await;
            assert_eq!(target(&v), victim, "{what}: the victim got {}", v.body);
            assert!(
                v.cache_status().contains("stored"),
                "{what}: {}",
                v.cache_status()
            );
            let again = get(&wires, wire, &victim, &victim_headers).await;
            assert!(
                again.cache_status().contains("hit"),
                "{what}: {}",
                again.cache_status()
            );
        }
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_spellings_are_answered_on_cached_and_uncached_routes() {
    // Bad input never fails the request: each is passed to the origin (the
    // uncached route always passes), and the exact spelling is still cached.
    let origin = Origin::start().await;
    let wires = Wires::start(keyed(&origin), "").await;
    let odd = [
        "?%",
        "?%%=1",
        "?pag%6=2",
        "?page=%zz",
        "?page%00=1",
        "?=&=",
        "?page",
        "?page=",
        "?;;page=1;;",
        "?page[]=1",
    ];
    for wire in &wires.all {
        let w = wire.label().replace(['/', ' ', '.'], "");
        for prefix in ["/api/odd", "/odd"] {
            for query in odd {
                let path = format!("{prefix}{w}{query}");
                let cookie = [("cookie", "lang; =de; lang=, lang=x")];
                let reply = get(&wires, wire, &path, &cookie).await;
                assert_eq!(target(&reply), path, "{} {path}", wire.label());
            }
        }
        let exact = format!("/odd{w}?page=2");
        let first = get(&wires, wire, &exact, &[("cookie", "lang=de")]).await;
        assert!(
            first.cache_status().contains("stored"),
            "{}",
            first.cache_status()
        );
    }
    wires.proxy.stop().await;
}
