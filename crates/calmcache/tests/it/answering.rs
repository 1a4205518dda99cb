//! Routes that answer without the origin (docs/answering.md), over
//! HTTP/1.1, h2c and HTTP/2 over TLS: `return` (redirects with NGINX's
//! Location and page, a status with a body, 204), `internal` (404, never
//! the origin), and file routes (NGINX's validators, preconditions, a
//! range, HEAD, a large file streamed, an absent file falling through to a
//! cached proxied route), with bad input: traversal spellings, encoded
//! slashes, backslashes, NUL, symlinks out of the root, huge paths, a Host
//! no redirect may carry.

use std::os::unix::fs::symlink;

use calmcache_testkit::raw::send_raw;
use calmcache_testkit::wire::Wires;
use calmcache_testkit::{Origin, Proxy};
use http::Method;

use crate::scratch;

/// The builder's first route ("test") takes no request; `routes` follow it.
fn with_routes(origin: &Origin, routes: &str) -> Proxy {
    Proxy::new(origin).route(&format!(
        "path = '^/never-routed$'\nttl = {{ 200 = \"60s\" }}\n\n{routes}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_redirects_and_answers_on_every_wire() {
    let origin = Origin::start().await;
    let routes = "[[routes]]\nname = \"to-https\"\nhosts = [\"old.test\"]\n\
                  return = { status = 301, location = \"https://$host$request_uri\" }\n\n\
                  [[routes]]\nname = \"same-scheme\"\npath = '^/elsewhere$'\n\
                  return = { status = 308, location = \"$scheme://$host/new$is_args$args\" }\n\n\
                  [[routes]]\nname = \"ping\"\npath = '^/ping$'\nreturn = { status = 204 }\n\n\
                  [[routes]]\nname = \"gone\"\npath = '^/gone'\n\
                  return = { status = 410, body = \"gone: $uri\\n\" }\n\n\
                  [[routes]]\nname = \"app\"\nupstream = \"origin\"\n";
    let wires = Wires::start(with_routes(&origin, routes), "").await;
    for wire in &wires.all {
        let label = wire.label();
        let send = |method: Method, host: &'static str, path: &'static str| {
            wires.send(wire, method, host, path, &[], "")
        };
        let moved = send(Method::GET, "old.test", "/a/b?c=d&e").await;
        assert_eq!(moved.status, 301, "{label}");
        assert_eq!(
            moved.header("location"),
            "https://old.test/a/b?c=d&e",
            "{label}"
        );
        assert_eq!(moved.header("content-type"), "text/html", "{label}");
        assert!(
            moved.body.contains("<h1>301 Moved Permanently</h1>"),
            "{label}"
        );
        assert_eq!(moved.cache_status(), "calmcache; detail=return", "{label}");
        // NGINX's $host: the name without its port; any spelling of it.
        let ported = send(Method::GET, "OLD.test:8443", "/x").await;
        assert_eq!(ported.header("location"), "https://old.test/x", "{label}");
        let head = send(Method::HEAD, "old.test", "/a").await;
        assert_eq!(head.status, 301, "{label}");
        assert!(head.bytes.is_empty(), "{label}: HEAD has no body");
        // Any method is redirected, as NGINX's return.
        let post = wires
            .send(wire, Method::POST, "old.test", "/form", &[], "x=1")
            .await;
        assert_eq!(post.status, 301, "{label}");

        // $scheme is the client's: https over TLS.
        let scheme = if label == "HTTP/2 over TLS" {
            "https"
        } else {
            "http"
        };
        let same = send(Method::GET, "new.test", "/elsewhere").await;
        assert_eq!(same.status, 308, "{label}");
        assert_eq!(
            same.header("location"),
            format!("{scheme}://new.test/new"),
            "{label}"
        );
        assert!(
            same.body.contains("<h1>308 Permanent Redirect</h1>"),
            "{label}"
        );

        let ping = send(Method::GET, "new.test", "/ping").await;
        assert_eq!(ping.status, 204, "{label}");
        assert!(ping.bytes.is_empty(), "{label}");
        let gone = send(Method::GET, "new.test", "/gone/page").await;
        assert_eq!(gone.status, 410, "{label}");
        assert_eq!(gone.body, "gone: /gone/page\n", "{label}");
        assert_eq!(gone.header("content-type"), "text/plain", "{label}");
        let gone_head = send(Method::HEAD, "new.test", "/gone/page").await;
        assert!(gone_head.bytes.is_empty(), "{label}");
        assert_eq!(gone_head.header("content-length"), "17", "{label}");

        // Other hosts and paths reach the origin.
        let app = send(Method::GET, "new.test", "/a/b").await;
        assert_eq!(app.status, 200, "{label}");
        assert!(app.body.contains("path=/a/b"), "{label}");
    }
    assert_eq!(origin.hits_for("/ping") + origin.hits_for("/gone/page"), 0);
    assert_eq!(origin.hits_for("/form"), 0);
    let status = wires.proxy.status().await;
    let route = &status["routes"]["to-https"];
    assert_eq!(route["answers"], "return", "{route}");
    assert!(route.get("upstream").is_none(), "{route}");
    assert_eq!(route["requests"], 12, "{route}");
    assert_eq!(route["bypass"], 12, "{route}");
    assert_eq!(status["routes"]["app"]["upstream"], "origin");
    let metrics = calmcache_testkit::get(&wires.proxy.admin_url("/metrics")).await;
    assert!(
        metrics
            .body
            .contains("calmcache_route_requests_total{route=\"to-https\"} 12"),
        "{}",
        metrics.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_carries_no_injected_host() {
    let origin = Origin::start().await;
    let routes = "[[routes]]\nname = \"to-https\"\n\
                  return = { status = 302, location = \"https://$host$request_uri\" }\n";
    let proxy = with_routes(&origin, routes).start().await;
    let addr = proxy.running().proxy_addrs[0];
    // A CR/LF in Host ends the field: what follows is another request
    // field, never part of the Location.
    let split = "GET /x HTTP/1.1\r\nHost: a.test\r\nSet-Cookie: x=1\r\nConnection: close\r\n\r\n";
    let r = send_raw(addr, split.as_bytes()).await;
    assert_eq!(r.status, 302, "{}", r.head);
    let location: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(location, ["https://a.test/x"]);
    assert!(!r.head.to_ascii_lowercase().contains("set-cookie"));
    // A bare CR, spaces, a path or userinfo in Host: refused at the edge.
    for host in [
        "a.test\rSet-Cookie: x=1",
        "a.test/evil",
        "user@a.test",
        "a test",
        "a.test\\evil",
    ] {
        let head = format!("GET /x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let r = send_raw(addr, head.as_bytes()).await;
        assert_eq!(r.status, 400, "{host:?}: {}", r.head);
        assert!(
            !r.head.to_ascii_lowercase().contains("location"),
            "{host:?}"
        );
        assert!(
            !r.head.to_ascii_lowercase().contains("set-cookie"),
            "{host:?}"
        );
    }
    assert_eq!(origin.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_routes_answer_404_and_never_reach_the_origin() {
    let origin = Origin::start().await;
    let root = scratch("answering-internal");
    std::fs::write(root.join("dump.sql"), "secret").unwrap();
    let routes = format!(
        "[[routes]]\nname = \"backups\"\npath = '^/backups/'\nupstream = \"origin\"\ninternal = true\n\n\
         [[routes]]\nname = \"files\"\npath = '^/dump'\nroot = {:?}\ninternal = true\n\n\
         [[routes]]\nname = \"app\"\nupstream = \"origin\"\n",
        root.display().to_string()
    );
    let wires = Wires::start(with_routes(&origin, &routes), "").await;
    for wire in &wires.all {
        let label = wire.label();
        for path in ["/backups/db.tar", "/dump.sql"] {
            let r = wires.send(wire, Method::GET, "a.test", path, &[], "").await;
            assert_eq!(r.status, 404, "{label} {path}");
            assert!(!r.body.contains("secret"), "{label} {path}");
            assert_eq!(r.cache_status(), "calmcache; detail=internal", "{label}");
        }
        let other = wires
            .send(wire, Method::GET, "a.test", "/open", &[], "")
            .await;
        assert_eq!(other.status, 200, "{label}");
    }
    assert_eq!(origin.hits_for("/backups/db.tar"), 0);
    let status = wires.proxy.status().await;
    assert_eq!(status["routes"]["backups"]["requests"], 3);
    let _ = std::fs::remove_dir_all(&root);
}

/// A root with files, a directory without index, a large file, and
/// symlinks in and out of it.
fn site(name: &str) -> std::path::PathBuf {
    let root = scratch(name);
    std::fs::write(root.join("index.html"), "<p>home</p>").unwrap();
    std::fs::write(root.join("a.css"), "body{color:red}").unwrap();
    std::fs::write(root.join("app.js"), "x()").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let big: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let outside = root.with_extension("outside");
    std::fs::write(&outside, "outside the root").unwrap();
    symlink(&outside, root.join("out.txt")).unwrap();
    symlink("/etc/hostname", root.join("abs.txt")).unwrap();
    symlink("../", root.join("up")).unwrap();
    symlink("a.css", root.join("in.css")).unwrap();
    root
}

fn file_routes(origin: &Origin, root: &std::path::Path) -> Proxy {
    with_routes(
        origin,
        &format!(
            "[[routes]]\nname = \"static\"\nroot = {:?}\n\n\
             [[routes]]\nname = \"app\"\nupstream = \"origin\"\nzone = \"ram\"\n\
             ttl = {{ 200 = \"60s\" }}\n",
            root.display().to_string()
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_routes_serve_as_nginx_and_fall_through_when_absent() {
    let origin = Origin::start().await;
    let root = site("answering-files");
    let wires = Wires::start(file_routes(&origin, &root), "").await;
    let meta = std::fs::metadata(root.join("a.css")).unwrap();
    let mtime = meta
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let etag = format!("\"{mtime:x}-{:x}\"", meta.len());
    for wire in &wires.all {
        let label = wire.label();
        let get = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
            wires.send(wire, Method::GET, "a.test", path, headers, "")
        };
        let css = get("/a.css", &[]).await;
        assert_eq!(css.status, 200, "{label}");
        assert_eq!(css.body, "body{color:red}", "{label}");
        assert_eq!(css.header("content-type"), "text/css", "{label}");
        assert_eq!(css.header("etag"), etag, "{label}");
        assert_eq!(css.header("content-length"), "15", "{label}");
        assert_eq!(css.header("accept-ranges"), "bytes", "{label}");
        assert!(!css.header("last-modified").is_empty(), "{label}");
        assert_eq!(css.cache_status(), "calmcache; detail=file", "{label}");
        assert_eq!(
            get("/app.js", &[]).await.header("content-type"),
            "application/javascript"
        );
        let home = get("/", &[]).await;
        assert_eq!(home.body, "<p>home</p>", "{label}");
        assert_eq!(home.header("content-type"), "text/html", "{label}");
        assert_eq!(get("/in.css", &[]).await.body, "body{color:red}", "{label}");

        // Preconditions and a range.
        let inm: &'static str = Box::leak(etag.clone().into_boxed_str());
        let again = get("/a.css", Box::leak(Box::new([("if-none-match", inm)]))).await;
        assert_eq!(again.status, 304, "{label}");
        assert!(again.bytes.is_empty(), "{label}");
        let lm: &'static str = Box::leak(css.header("last-modified").to_owned().into_boxed_str());
        let since = get("/a.css", Box::leak(Box::new([("if-modified-since", lm)]))).await;
        assert_eq!(since.status, 304, "{label}");
        let failed = get("/a.css", &[("if-match", "\"other\"")]).await;
        assert_eq!(failed.status, 412, "{label}");
        let part = get("/a.css", &[("range", "bytes=0-3")]).await;
        assert_eq!(part.status, 206, "{label}");
        assert_eq!(part.body, "body", "{label}");
        assert_eq!(part.header("content-range"), "bytes 0-3/15", "{label}");
        let past = get("/a.css", &[("range", "bytes=100-")]).await;
        assert_eq!(past.status, 416, "{label}");
        let head = wires
            .send(wire, Method::HEAD, "a.test", "/a.css", &[], "")
            .await;
        assert_eq!(head.status, 200, "{label}");
        assert!(head.bytes.is_empty(), "{label}");
        assert_eq!(head.header("content-length"), "15", "{label}");
        let post = wires
            .send(wire, Method::POST, "a.test", "/a.css", &[], "x")
            .await;
        assert_eq!(post.status, 405, "{label}");
        assert_eq!(post.header("allow"), "GET, HEAD", "{label}");

        // A large file, streamed whole.
        let big = get("/big.bin", &[]).await;
        assert_eq!(big.status, 200, "{label}");
        assert_eq!(big.bytes.len(), 3 * 1024 * 1024, "{label}");
        assert!(
            big.bytes
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 251) as u8),
            "{label}"
        );
        let tail = get("/big.bin", &[("range", "bytes=-5")]).await;
        assert_eq!(tail.bytes.len(), 5, "{label}");

        // Absent, or a directory without index: on to the cached app route.
        for path in ["/missing.html", "/sub/", "/sub"] {
            let first = get(path, &[]).await;
            assert_eq!(first.status, 200, "{label} {path}");
            assert!(
                first.body.contains(&format!("path={path}")),
                "{label} {path}"
            );
        }
    }
    // Each absent path fetched once per scheme ($scheme is in the key:
    // http for HTTP/1.1 and h2c, https over TLS), then hit.
    for path in ["/missing.html", "/sub/", "/sub"] {
        assert_eq!(origin.hits_for(path), 2, "{path}");
    }
    assert_eq!(origin.hits_for("/a.css"), 0);
    let status = wires.proxy.status().await;
    assert_eq!(status["routes"]["static"]["answers"], "files");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_routes_refuse_every_way_out_of_the_root() {
    let origin = Origin::start().await;
    let root = site("answering-escape");
    let wires = Wires::start(file_routes(&origin, &root), "").await;
    let long: &'static str = Box::leak(format!("/{}", "a".repeat(5000)).into_boxed_str());
    for wire in &wires.all {
        let label = wire.label();
        let get = |path: &'static str| wires.send(wire, Method::GET, "a.test", path, &[], "");
        // Symlinks that lead out of the root: 404, never the file, never
        // the origin (the file route took the request).
        for path in [
            "/out.txt",
            "/abs.txt",
            "/up/answering-escape.outside",
            "/up/",
        ] {
            let r = get(path).await;
            assert_eq!(r.status, 404, "{label} {path}: {}", r.body);
            assert!(!r.body.contains("outside the root"), "{label} {path}");
        }
        // Escaped slashes and backslashes: 400.
        for path in [
            "/sub%2F..%2F..%2Fetc%2Fpasswd",
            "/a%2Fb",
            "/a%5Cb",
            "/..%5C..%5Cetc",
        ] {
            let r = get(path).await;
            assert_eq!(r.status, 400, "{label} {path}: {}", r.body);
        }
        // Dot-segments, plain or encoded, are removed by the edge before
        // routing: what is left is a path inside the root (absent here).
        for path in ["/%2e%2e/%2e%2e/etc/passwd", "/sub/../../etc/passwd"] {
            let r = get(path).await;
            assert!(!r.body.contains("root:"), "{label} {path}");
            assert!(
                r.body.contains("path=/etc/passwd"),
                "{label} {path}: {}",
                r.body
            );
        }
        // NUL: refused at the edge.
        assert_eq!(get("/a%00.css").await.status, 400, "{label}");
        // A path longer than a file name can be: absent, on to the origin.
        let r = get(long).await;
        assert!(
            r.status == 200 || r.status == 414 || r.status == 431,
            "{label}: {}",
            r.status
        );
    }
    let addr = wires.proxy.running().proxy_addrs[0];
    let raw = send_raw(
        addr,
        b"GET /a\\b.css HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw.status, 400, "{}", raw.head);
    assert_eq!(origin.hits_for("/out.txt") + origin.hits_for("/abs.txt"), 0);
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(root.with_extension("outside"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_pages_replace_answers_from_a_route_that_answers_itself() {
    let origin = Origin::start().await;
    let root = scratch("answering-error-pages");
    std::fs::create_dir(root.join("errors")).unwrap();
    std::fs::write(root.join("errors/404.html"), "<p>not here</p>").unwrap();
    std::fs::write(root.join("errors/50x.html"), "<p>back soon</p>").unwrap();
    let dead = crate::free_port();
    let routes = format!(
        "[[routes]]\nname = \"errors\"\npath = '^/errors/'\nroot = {root:?}\ninternal = true\n\n\
         [[routes]]\nname = \"gone\"\npath = '^/gone'\nreturn = {{ status = 404 }}\n\
         error_pages = {{ \"404\" = \"/errors/404.html\" }}\n\n\
         [[routes]]\nname = \"backups\"\npath = '^/backups/'\nupstream = \"origin\"\ninternal = true\n\
         error_pages = {{ \"404\" = \"=200 /errors/404.html\" }}\n\n\
         [[routes]]\nname = \"down\"\npath = '^/down'\nupstream = \"dead\"\n\
         error_pages = {{ \"502 504\" = \"/errors/50x.html\" }}\n\n\
         [[routes]]\nname = \"intercepted\"\npath = '^/intercepted'\nupstream = \"origin\"\nzone = \"ram\"\n\
         ttl = {{ 404 = \"60s\" }}\nintercept_errors = true\n\
         error_pages = {{ \"404\" = \"@sorry\", \"500\" = \"/nowhere.html\" }}\n\n\
         [[routes]]\nname = \"sorry\"\npath = '^/sorry$'\ninternal = true\n\
         return = {{ status = 410, body = \"sorry, not $uri\\n\" }}\n\n\
         [[routes]]\nname = \"app\"\nupstream = \"origin\"\nerror_pages = {{ \"404\" = \"/errors/404.html\" }}\n\n\
         [upstreams.dead]\nservers = [\"127.0.0.1:{dead}\"]\nmax_fails = 0\n",
        root = root.display().to_string()
    );
    let wires = Wires::start(with_routes(&origin, &routes), "").await;
    let status_404: &[(&str, &str)] = &[("x-origin-status", "404")];
    for wire in &wires.all {
        let label = wire.label();
        let send = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
            wires.send(wire, Method::GET, "a.test", path, headers, "")
        };
        // A return's status, with the page's body.
        let gone = send("/gone", &[]).await;
        assert_eq!(gone.status, 404, "{label}");
        assert_eq!(gone.body, "<p>not here</p>", "{label}");
        assert_eq!(gone.header("content-type"), "text/html", "{label}");
        assert_eq!(gone.cache_status(), "calmcache; detail=return", "{label}");
        let head = wires
            .send(wire, Method::HEAD, "a.test", "/gone", &[], "")
            .await;
        assert_eq!(head.status, 404, "{label}");
        assert!(head.bytes.is_empty(), "{label}");
        // Internal's 404 as =200; the internal errors route itself is 404
        // for clients.
        let backup = send("/backups/db.tar", &[]).await;
        assert_eq!(backup.status, 200, "{label}");
        assert_eq!(backup.body, "<p>not here</p>", "{label}");
        assert_eq!(send("/errors/404.html", &[]).await.status, 404, "{label}");
        // calmcache's own 502 (a dead upstream).
        let down = send("/down", &[]).await;
        assert_eq!(down.status, 502, "{label}");
        assert_eq!(down.body, "<p>back soon</p>", "{label}");
        // The origin's 404: replaced only where the route intercepts, and
        // stored as the origin sent it (the second is a hit, replaced too).
        for _ in 0..2 {
            let caught = send("/intercepted/x", status_404).await;
            assert_eq!(caught.status, 404, "{label}");
            // @name: the named route answers the request's own path.
            assert_eq!(caught.body, "sorry, not /intercepted/x\n", "{label}");
            assert_eq!(caught.header("content-type"), "text/plain", "{label}");
        }
        let passed = send("/page", status_404).await;
        assert_eq!(passed.status, 404, "{label}");
        assert!(
            passed.body.contains("path=/page"),
            "{label}: {}",
            passed.body
        );
        // A page that is not there: the answer as it was (one level only).
        let plain = send("/intercepted/y", &[("x-origin-status", "500")]).await;
        assert_eq!(plain.status, 500, "{label}");
        assert!(plain.body.contains("path=/intercepted/y"), "{label}");
    }
    assert_eq!(origin.hits_for("/backups/db.tar"), 0);
    // One fetch per scheme: the origin's 404 was stored, never the page.
    assert_eq!(origin.hits_for("/intercepted/x"), 2);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_an_answering_route_and_its_counters() {
    let dir = scratch("answering-reload");
    let path = dir.join("calmcache.toml");
    let (port, admin) = (crate::free_port(), crate::free_port());
    let config = |status: u16| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [[routes]]\nname = \"ping\"\nreturn = {{ status = {status} }}\n"
        )
    };
    std::fs::write(&path, config(204)).unwrap();
    let running = calmcache::start_from(
        &calmcache::Config::from_file(&path).unwrap(),
        Some(path.clone()),
    )
    .await
    .unwrap();
    let url = format!("http://127.0.0.1:{port}/x");
    for _ in 0..3 {
        assert_eq!(calmcache_testkit::get(&url).await.status, 204);
    }
    std::fs::write(&path, config(200)).unwrap();
    running.reloader().reload_file().await.unwrap();
    assert_eq!(calmcache_testkit::get(&url).await.status, 200);
    let status = calmcache_testkit::get(&format!("http://127.0.0.1:{admin}/status")).await;
    let status: serde_json::Value = serde_json::from_str(&status.body).unwrap();
    assert_eq!(status["routes"]["ping"]["requests"], 4, "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The review of issue 28: a file route without the file prepared the
/// request for itself (its own trusted_proxies: none, so the forwarding
/// fields were stripped) before handing it on, and the next route, which
/// trusts the proxy, saw no `X-Forwarded-Proto`: https requests were keyed
/// and forwarded as http. A route that answers itself now only reads the
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_route_hands_on_the_request_as_it_came() {
    let origin = Origin::start().await;
    let root = scratch("answering-hand-on");
    let proxy = with_routes(
        &origin,
        &format!(
            "[[routes]]\nname = \"static\"\nroot = {:?}\n\n\
             [[routes]]\nname = \"app\"\nupstream = \"origin\"\n\
             trusted_proxies = [\"127.0.0.0/8\", \"::1/128\"]\n",
            root.display().to_string()
        ),
    );
    let wires = Wires::start(proxy, "").await;
    for (n, wire) in wires.all.iter().enumerate() {
        let label = wire.label();
        let path: &'static str = Box::leak(format!("/app/{n}").into_boxed_str());
        let forwarded = [("x-forwarded-proto", "https")];
        let resp = wires
            .send(wire, Method::GET, "a.test", path, &forwarded, "")
            .await;
        assert_eq!(resp.status, 200, "{label}");
        let seen = origin.requests_for(path);
        assert_eq!(seen.len(), 1, "{label}");
        assert_eq!(
            seen[0].header("x-forwarded-proto"),
            Some("https"),
            "{label}"
        );
    }
}

/// `absent = "404"`: NGINX's bare `root` (a location with only root). No
/// file: 404, through the route's error page; a directory without an index
/// file: 403; a directory without its slash: 301 to it with the slash; a
/// traversal still refused; HEAD the head alone; never the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_route_that_answers_404_when_absent_never_falls_through() {
    let origin = Origin::start().await;
    let root = site("answering-absent-404");
    std::fs::create_dir(root.join("errors")).unwrap();
    std::fs::write(root.join("errors/404.html"), "<p>no such page</p>").unwrap();
    let routes = format!(
        "[[routes]]\nname = \"errors\"\npath = '^/errors/'\nroot = {root:?}\nabsent = \"404\"\n\
         internal = true\n\n\
         [[routes]]\nname = \"plain\"\npath = '^/plain/'\nroot = {root:?}\nabsent = \"404\"\n\n\
         [[routes]]\nname = \"static\"\nroot = {root:?}\nabsent = \"404\"\n\
         error_pages = {{ \"404\" = \"/errors/404.html\", \"403\" = \"/errors/403.html\" }}\n\n\
         [[routes]]\nname = \"app\"\nupstream = \"origin\"\n",
        root = root.display().to_string()
    );
    let wires = Wires::start(with_routes(&origin, &routes), "").await;
    for wire in &wires.all {
        let label = wire.label();
        let get = |path: &'static str| wires.send(wire, Method::GET, "a.test", path, &[], "");
        assert_eq!(get("/a.css").await.body, "body{color:red}", "{label}");
        assert_eq!(get("/").await.body, "<p>home</p>", "{label}");
        // No file: 404 with the error page's body.
        let missing = get("/missing.html").await;
        assert_eq!(missing.status, 404, "{label}");
        assert_eq!(missing.body, "<p>no such page</p>", "{label}");
        assert_eq!(missing.cache_status(), "calmcache; detail=file", "{label}");
        let head = wires
            .send(wire, Method::HEAD, "a.test", "/missing.html", &[], "")
            .await;
        assert_eq!(head.status, 404, "{label}");
        assert!(head.bytes.is_empty(), "{label}");
        // A directory without an index file: 403 (its page is not there:
        // NGINX's own 403 stays).
        let sub = get("/sub/").await;
        assert_eq!(sub.status, 403, "{label}: {}", sub.body);
        assert!(sub.body.contains("403 Forbidden"), "{label}");
        // A directory without its slash: 301 to it with the slash.
        let moved = get("/sub?a=1").await;
        assert_eq!(moved.status, 301, "{label}");
        assert_eq!(moved.header("location"), "/sub/?a=1", "{label}");
        // Under a file of that name: absent.
        assert_eq!(get("/a.css/").await.status, 404, "{label}");
        // No error pages on this route: NGINX's own 404 page.
        let plain = get("/plain/nothing").await;
        assert_eq!(plain.status, 404, "{label}");
        assert!(plain.body.contains("404 Not Found"), "{label}");
        // Bad input: out of the root, escaped slashes, dot-segments.
        let out = get("/out.txt").await;
        assert_eq!(out.status, 404, "{label}");
        assert!(!out.body.contains("outside the root"), "{label}");
        assert_eq!(
            get("/sub%2F..%2F..%2Fetc%2Fpasswd").await.status,
            400,
            "{label}"
        );
        let dots = get("/sub/../../etc/passwd").await;
        assert_eq!(dots.status, 404, "{label}");
        assert!(!dots.body.contains("root:"), "{label}");
        // The internal errors route: 404 for clients.
        assert_eq!(get("/errors/404.html").await.status, 404, "{label}");
    }
    assert_eq!(origin.hits(), 0, "the origin is never asked");
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(root.with_extension("outside"));
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    decoder.write_all(bytes).unwrap();
    decoder.finish().unwrap()
}

/// NGINX's `gzip on` in front of files and returns: `compress_passed` on a
/// route that answers itself gzips its answers on the fly for a client that
/// takes gzip (ETag weakened, no Content-Length), never a range, a HEAD or
/// a type it does not list; response header rules and error pages apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answering_routes_gzip_and_take_header_rules_on_every_wire() {
    let origin = Origin::start().await;
    let root = scratch("answering-gzip");
    let page = "<p>".to_owned() + &"hello calmcache ".repeat(200) + "</p>";
    std::fs::create_dir(root.join("s")).unwrap();
    std::fs::write(root.join("s/page.html"), &page).unwrap();
    std::fs::write(root.join("s/pic.png"), vec![7u8; 2000]).unwrap();
    let routes = format!(
        "[[routes]]\nname = \"static\"\npath = '^/s/'\nroot = {root:?}\nabsent = \"404\"\n\
         compress_passed = [\"gzip\"]\ncompress_passed_types = [\"text/html\"]\n\
         response_headers = {{ add = {{ X-Static = \"yes\" }}, always = {{ X-Always = \"$host\" }} }}\n\n\
         [[routes]]\nname = \"teapot\"\npath = '^/teapot$'\n\
         return = {{ status = 200, body = \"{body}\", content_type = \"text/html\" }}\n\
         compress_passed = [\"gzip\"]\n\n\
         [[routes]]\nname = \"app\"\nupstream = \"origin\"\n",
        root = root.display().to_string(),
        body = "tea ".repeat(100),
    );
    let wires = Wires::start(with_routes(&origin, &routes), "").await;
    const AE: (&str, &str) = ("accept-encoding", "gzip");
    for wire in &wires.all {
        let label = wire.label();
        let send = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
            wires.send(wire, Method::GET, "a.test", path, headers, "")
        };
        let zipped = send("/s/page.html", &[AE]).await;
        assert_eq!(zipped.status, 200, "{label}");
        assert_eq!(zipped.header("content-encoding"), "gzip", "{label}");
        assert!(zipped.header("etag").starts_with("W/"), "{label}");
        assert_eq!(gunzip(&zipped.bytes), page.as_bytes(), "{label}");
        assert_eq!(zipped.header("x-static"), "yes", "{label}");
        assert_eq!(zipped.header("x-always"), "a.test", "{label}");
        // Not for a client that does not take it, a range, a HEAD, a type
        // not listed.
        let plain = send("/s/page.html", &[]).await;
        assert_eq!(plain.body, page, "{label}");
        assert!(plain.header("content-encoding").is_empty(), "{label}");
        let part = send("/s/page.html", &[AE, ("range", "bytes=0-2")]).await;
        assert_eq!(part.status, 206, "{label}");
        assert_eq!(part.body, "<p>", "{label}");
        let head = wires
            .send(wire, Method::HEAD, "a.test", "/s/page.html", &[AE], "")
            .await;
        assert!(head.bytes.is_empty(), "{label}");
        assert!(head.header("content-encoding").is_empty(), "{label}");
        let png = send("/s/pic.png", &[AE]).await;
        assert_eq!(png.bytes.len(), 2000, "{label}");
        // NGINX's add_header without always: not on a 404; always: on it.
        let missing = send("/s/missing.html", &[AE]).await;
        assert_eq!(missing.status, 404, "{label}");
        assert!(missing.header("x-static").is_empty(), "{label}");
        assert_eq!(missing.header("x-always"), "a.test", "{label}");
        // A return's body, gzipped.
        let tea = send("/teapot", &[AE]).await;
        assert_eq!(tea.header("content-encoding"), "gzip", "{label}");
        assert_eq!(gunzip(&tea.bytes), "tea ".repeat(100).as_bytes(), "{label}");
    }
    assert_eq!(origin.hits(), 0);
    let _ = std::fs::remove_dir_all(&root);
}
