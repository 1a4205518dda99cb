//! Routes that cannot surprise (issue 25, item 6): a route's `path` sees the
//! path alone, as NGINX's `location`, so a static-files route cannot take
//! `/account.php?x.css`; `check` warns about an end-anchored `match` a query
//! can satisfy; `%00` in a path is refused with 400 before any route or
//! origin sees it. Over HTTP/1.1, h2c and HTTP/2 over TLS, on cached and
//! uncached routes; the origin echoes its request, so a page stored for
//! the wrong request would show another client's cookie.

use std::process::Command;

use calmcache_testkit::wire::TLS_NAME;
use calmcache_testkit::{Origin, Proxy, Reply, Wire, Wires};
use http::Method;

const ECHO: (&str, &str) = ("x-origin-echo", "1");
const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

/// The hand-written "static files" route of the issue, on `path`, then an
/// uncached catch-all (`route` holds the static route's matcher line).
fn static_files(origin: &Origin, matcher: &str) -> Proxy {
    Proxy::new(origin).route(&format!(
        "{matcher}\nttl = {{ 200 = \"60s\" }}\noverride_origin = true\n\
         cache_status_key = true\n\n[[routes]]\nname = \"app\"\nupstream = \"origin\""
    ))
}

async fn get(wires: &Wires, wire: &Wire, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut all = vec![ECHO];
    all.extend_from_slice(headers);
    wires
        .send(wire, Method::GET, TLS_NAME, path, &all, "")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_files_path_route_never_takes_a_query_that_ends_like_a_file() {
    // Regression (issue 25): with `match = '\.(css|js|png)$'`, the first
    // visitor's `/account.php?x.css` was stored and served to the next.
    let origin = Origin::start().await;
    let wires = Wires::start(static_files(&origin, "path = '\\.(css|js|png)$'"), "").await;
    for wire in &wires.all {
        let w = wire.label().replace(['/', ' ', '.'], "");
        let private = format!("/{w}/account.php?x.css");
        let first = get(&wires, wire, &private, &[("cookie", "sessionid=alice")]).await;
        assert_eq!(first.status, 200, "{} {private}", wire.label());
        assert!(
            !first.is_stored_or_hit(),
            "{}: {}",
            wire.label(),
            first.cache_status()
        );
        let next = get(&wires, wire, &private, &[]).await;
        assert!(
            !next.body.contains("alice"),
            "{}: {}",
            wire.label(),
            next.body
        );
        assert!(
            !next.is_stored_or_hit(),
            "{}: {}",
            wire.label(),
            next.cache_status()
        );
        // The static files themselves, a query included, are cached.
        for file in [format!("/{w}/site.css"), format!("/{w}/app.js?v=3")] {
            let a = get(&wires, wire, &file, &[]).await;
            assert!(
                a.cache_status().contains("stored"),
                "{file}: {}",
                a.cache_status()
            );
            let b = get(&wires, wire, &file, &[]).await;
            assert!(
                b.cache_status().contains("hit"),
                "{file}: {}",
                b.cache_status()
            );
        }
    }
    wires.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_the_path_is_refused_on_every_route_and_wire() {
    // Regression (issue 25): `%00` was forwarded and stored; NGINX answers
    // 400 (a NUL ends the path for C origins: `/a.css%00.php`).
    let origin = Origin::start().await;
    let wires = Wires::start(static_files(&origin, "path = '\\.(css|js|png)$'"), "").await;
    for wire in &wires.all {
        for path in ["/a.css%00.php", "/x%00.css", "/app/%00", "/app/a%00b?c=d"] {
            let reply = get(&wires, wire, path, &[]).await;
            assert_eq!(reply.status, 400, "{} {path}: {}", wire.label(), reply.body);
        }
        // An escaped percent sign is no NUL.
        let fine = get(&wires, wire, "/app/a%2500b?c=%00", &[]).await;
        assert_eq!(fine.status, 200, "{}: {}", wire.label(), fine.body);
    }
    for path in ["/a.css%00.php", "/x%00.css", "/app/%00", "/app/a%00b"] {
        assert_eq!(origin.hits_for(path), 0, "{path} reached the origin");
    }
    wires.proxy.stop().await;
}

#[test]
fn check_warns_about_a_match_a_query_can_satisfy_and_suggests_path() {
    let dir = crate::scratch("route-paths");
    let file = dir.join("calmcache.toml");
    let config = |matcher: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.app]\nservers = [\"127.0.0.1:1\"]\n\
             [zones.ram]\nkind = \"memory\"\nmax_size = \"1MiB\"\n[[routes]]\n{matcher}\n\
             upstream = \"app\"\nzone = \"ram\"\n[[routes]]\nupstream = \"app\"\n"
        )
    };
    let check = |text: String| {
        std::fs::write(&file, text).unwrap();
        let out = Command::new(BIN)
            .args(["check", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), said)
    };
    let (code, said) = check(config("match = '\\.(css|js|png)$'"));
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("routes[0].match"), "{said}");
    assert!(said.contains("path = '\\.(css|js|png)$'"), "{said}");
    let (code, said) = check(config("path = '\\.(css|js|png)$'"));
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("routes[0]"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
