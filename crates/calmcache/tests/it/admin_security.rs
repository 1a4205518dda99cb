//! The admin listener and purges against web pages (issue 11 item 5),
//! through real sockets: the `Host` check (DNS rebinding), cross-site
//! `Origin` / `Sec-Fetch-Site` on the state-changing endpoints, the token on
//! loopback, `admin.purge_token` for the `PURGE` method, health probes
//! without a token or a known `Host`, and `calmcache reload` sending the
//! token of the config it reads.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{get, request, request_with_body, Origin, Proxy, Reply};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{free_port, scratch, Child};

const TOKEN: &str = "admin-security-token-for-tests";

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// One HTTP/1.0 exchange written by hand (so it may lack a `Host`); the
/// whole answer as text.
async fn raw(addr: SocketAddr, head: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// `POST /reload` on `proxy`'s admin listener with `headers`. A proxy
/// started in-process has no config file to read again, so a request that
/// passes every access check is answered 422 by the reload itself.
async fn post_reload(proxy: &RunningProxy, headers: &[(&str, &str)]) -> Reply {
    request(Method::POST, &proxy.admin_url("/reload"), headers).await
}

async fn post_purge(proxy: &RunningProxy, headers: &[(&str, &str)]) -> Reply {
    request_with_body(
        Method::POST,
        &proxy.admin_url("/purge"),
        headers,
        r#"{"all": true}"#.to_owned(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_hosts_are_refused_and_configured_names_accepted() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .admin("listen = \"127.0.0.1:0\"\nnames = [\"Admin.Example\"]")
        .start()
        .await;
    let port = proxy.admin_addr().port();
    // A page on evil.example whose name now resolves to 127.0.0.1.
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "127.0.0.1.evil.example",
    ] {
        let r = request(Method::GET, &proxy.admin_url("/status"), &[("host", host)]).await;
        assert_eq!(r.status, 421, "{host}: {}", r.body);
        assert!(r.body.contains("Host header"), "{}", r.body);
        assert!(!r.body.contains("\"totals\""), "{}", r.body);
        let r = post_reload(&proxy, &[("host", host)]).await;
        assert_eq!(r.status, 421, "POST /reload, {host}: {}", r.body);
        let r = get_host(&proxy, "/metrics", host).await;
        assert_eq!(r.status, 421, "/metrics, {host}");
        let r = get_host(&proxy, "/", host).await;
        assert_eq!(r.status, 421, "the page, {host}");
    }
    // Its own names: IP literals (any port), localhost, admin.names.
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("localhost:{port}"),
        format!("admin.example:{port}"),
        "ADMIN.example".to_owned(),
        "[::1]:9090".to_owned(),
    ] {
        assert_eq!(
            get_host(&proxy, "/status", &host).await.status,
            200,
            "{host}"
        );
        assert_eq!(
            post_reload(&proxy, &[("host", &host)]).await.status,
            422,
            "{host}"
        );
    }
    // No Host at all: 400 (HTTP/1.0 may omit it).
    let answer = raw(proxy.admin_addr(), "GET /status HTTP/1.0\r\n\r\n").await;
    assert!(
        answer.starts_with("HTTP/1.0 400") || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    assert!(answer.contains("no Host header"), "{answer}");
    // An absolute-form target naming another host is refused too.
    let answer = raw(
        proxy.admin_addr(),
        &format!("GET http://evil.example/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    proxy.stop().await;
}

async fn get_host(proxy: &RunningProxy, path: &str, host: &str) -> Reply {
    request(Method::GET, &proxy.admin_url(path), &[("host", host)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_posts_are_refused_and_the_token_is_needed_on_loopback() {
    let origin = Origin::start().await;
    // No token configured: POST /reload is open on loopback to clients that
    // are not a page of another site.
    let open = Proxy::new(&origin).start().await;
    let own = format!("http://{}", open.admin_addr());
    for (headers, what) in [
        (vec![("origin", "http://evil.example")], "Origin"),
        (vec![("origin", "null")], "Origin"),
        (vec![("origin", "http://127.0.0.1:1")], "Origin"),
        (vec![("sec-fetch-site", "cross-site")], "Sec-Fetch-Site"),
        (vec![("sec-fetch-site", "same-site")], "Sec-Fetch-Site"),
        (
            vec![("origin", own.as_str()), ("sec-fetch-site", "cross-site")],
            "Sec-Fetch-Site",
        ),
    ] {
        let r = post_reload(&open, &headers).await;
        assert_eq!(r.status, 403, "{headers:?}: {}", r.body);
        assert!(r.body.contains(what), "{headers:?}: {}", r.body);
        let r = post_purge(&open, &headers).await;
        assert_eq!(r.status, 403, "POST /purge {headers:?}: {}", r.body);
    }
    // The dashboard's own origin, curl (neither header), a typed URL (none).
    for headers in [
        vec![],
        vec![("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
        vec![("sec-fetch-site", "none")],
    ] {
        let r = post_reload(&open, &headers).await;
        assert_eq!(r.status, 422, "{headers:?}: {}", r.body);
    }
    // POST /purge without a configured token stays refused.
    assert_eq!(post_purge(&open, &[]).await.status, 401);
    open.stop().await;

    // A token configured: needed on loopback for both, and a cross-site
    // request is refused even with it.
    let guarded = Proxy::new(&origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .start()
        .await;
    let auth = bearer();
    for headers in [vec![], vec![("authorization", "Bearer wrong")]] {
        let r = post_reload(&guarded, &headers).await;
        assert_eq!(r.status, 401, "{headers:?}: {}", r.body);
        assert!(r.header("www-authenticate").starts_with("Bearer"));
        assert_eq!(post_purge(&guarded, &headers).await.status, 401);
    }
    assert_eq!(
        post_reload(&guarded, &[("authorization", &auth)])
            .await
            .status,
        422
    );
    assert_eq!(
        post_purge(&guarded, &[("authorization", &auth)])
            .await
            .status,
        200
    );
    for (name, value) in [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let headers = [("authorization", auth.as_str()), (name, value)];
        assert_eq!(post_reload(&guarded, &headers).await.status, 403, "{name}");
        assert_eq!(post_purge(&guarded, &headers).await.status, 403, "{name}");
    }
    // Reads on loopback stay open.
    assert_eq!(get(&guarded.admin_url("/status")).await.status, 200);
    guarded.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_token_makes_the_purge_method_need_the_bearer_token() {
    let origin = Origin::start().await;
    let purge = Method::from_bytes(b"PURGE").unwrap();
    let route = "ttl = { 200 = \"60s\" }\nrefresh = \"lock\"";
    // Off (the default): purge_allow alone decides, even with a token.
    let off = Proxy::new(&origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .route(route)
        .start()
        .await;
    get(&off.url("/p")).await;
    let r = request(purge.clone(), &off.url("/p"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.trim(), r#"{"purged":1}"#);
    off.stop().await;

    // On: the bearer token as well.
    let on = Proxy::new(&origin)
        .admin(&format!(
            "listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\npurge_token = true"
        ))
        .route(route)
        .start()
        .await;
    get(&on.url("/q")).await;
    for headers in [vec![], vec![("authorization", "Bearer wrong")]] {
        let r = request(purge.clone(), &on.url("/q"), &headers).await;
        assert_eq!(r.status, 401, "{headers:?}: {}", r.body);
        assert!(r.header("www-authenticate").starts_with("Bearer"));
    }
    assert!(
        get(&on.url("/q")).await.cache_status_params().has("hit"),
        "still stored"
    );
    let auth = bearer();
    let r = request(purge.clone(), &on.url("/q"), &[("authorization", &auth)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.trim(), r#"{"purged":1}"#);
    on.stop().await;

    // purge_allow still applies with the token.
    let elsewhere = Proxy::new(&origin)
        .admin(&format!(
            "listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\npurge_token = true\n\
             purge_allow = [\"10.0.0.0/8\"]"
        ))
        .start()
        .await;
    let r = request(purge, &elsewhere.url("/q"), &[("authorization", &auth)]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    elsewhere.stop().await;
}

#[test]
fn purge_token_without_a_token_and_bad_names_are_config_errors() {
    let base = "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.o]\nservers = [\"127.0.0.1:9\"]\n\
                [[routes]]\nupstream = \"o\"\n[admin]\nlisten = \"127.0.0.1:9090\"\n";
    let err = calmcache::Config::from_toml(&format!("{base}purge_token = true\n"), "c.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("admin.purge_token"), "{err}");
    let err = calmcache::Config::from_toml(
        &format!("{base}names = [\"http://admin.example:9090\"]\n"),
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("admin.names"), "{err}");
    let config = calmcache::Config::from_toml(
        &format!("{base}names = [\"Admin.Example.\"]\ntoken = \"{TOKEN}\"\npurge_token = true\n"),
        "c.toml",
    )
    .unwrap();
    let admin = config.admin.unwrap();
    assert_eq!(admin.names, vec!["admin.example".to_owned()]);
    assert!(admin.purge_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_need_no_token_and_no_known_host_on_a_non_loopback_listener() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .admin(&format!("listen = \"0.0.0.0:0\"\ntoken = \"{TOKEN}\""))
        .start()
        .await;
    for host in [None, Some("10.1.2.3:9090"), Some("lb-probe.internal")] {
        let headers: Vec<(&str, &str)> = host.iter().map(|h| ("host", *h)).collect();
        let r = request(Method::GET, &proxy.admin_url("/healthz"), &headers).await;
        assert_eq!(
            (r.status.as_u16(), r.body.as_str()),
            (200, "ok\n"),
            "{host:?}"
        );
        let r = request(Method::GET, &proxy.admin_url("/readyz"), &headers).await;
        assert_eq!(
            (r.status.as_u16(), r.body.as_str()),
            (200, "ready\n"),
            "{host:?}"
        );
    }
    // HAProxy's default check is HTTP/1.0 without a Host.
    let answer = raw(proxy.admin_addr(), "GET /readyz HTTP/1.0\r\n\r\n").await;
    assert!(
        answer.contains(" 200 ") && answer.ends_with("ready\n"),
        "{answer}"
    );
    // Everything else keeps needing the token there.
    for path in ["/status", "/metrics"] {
        assert_eq!(get(&proxy.admin_url(path)).await.status, 401, "{path}");
    }
    assert_eq!(post_reload(&proxy, &[]).await.status, 401);
    let auth = bearer();
    assert_eq!(
        post_reload(&proxy, &[("authorization", &auth)])
            .await
            .status,
        422
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calmcache_reload_sends_the_token_of_the_config_it_reads() {
    let origin = Origin::start().await;
    let dir = scratch("admin-sec-reload");
    let path = dir.join("calmcache.toml");
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let (port, admin) = (free_port(), free_port());
    let config = |admin_keys: &str, route: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\nthreads = 1\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n{admin_keys}\n\
             [upstreams.origin]\nservers = [\"{}\"]\n{route}\
             [[routes]]\nname = \"all\"\nupstream = \"origin\"\n",
            origin.addr()
        )
    };
    let with_file = format!("token_file = {:?}", token_file.display().to_string());
    std::fs::write(&path, config(&with_file, "")).unwrap();
    let bin = env!("CARGO_BIN_EXE_calmcache");
    let _child = Child(
        Command::new(bin)
            .args(["serve", "--config", path.to_str().unwrap()])
            .env_remove("CALMCACHE_ADMIN_TOKEN")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    crate::wait_listening(admin).await;
    let reload_url = format!("http://127.0.0.1:{admin}/reload");
    // Loopback, but a token is configured: a bare POST is refused.
    assert_eq!(request(Method::POST, &reload_url, &[]).await.status, 401);
    // `calmcache reload` reads token_file from the config and sends it.
    let route = "[[routes]]\nname = \"new\"\nmatch = \"^/new\"\nupstream = \"origin\"\n";
    std::fs::write(&path, config(&with_file, route)).unwrap();
    let out = Command::new(bin)
        .args(["reload", "--config", path.to_str().unwrap()])
        .env_remove("CALMCACHE_ADMIN_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"reloaded\":true"), "{stdout}");
    // Without a token in the file, the CLI takes CALMCACHE_ADMIN_TOKEN.
    std::fs::write(&path, config("", "")).unwrap();
    let out = Command::new(bin)
        .args(["reload", "--config", path.to_str().unwrap()])
        .env_remove("CALMCACHE_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "no token: refused by the proxy");
    assert!(String::from_utf8_lossy(&out.stdout).contains("bearer token"));
    let out = Command::new(bin)
        .args(["reload", "--config", path.to_str().unwrap()])
        .env("CALMCACHE_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"reloaded\":true"), "{stdout}");
    // The running config has no token now (the server's environment has
    // none): loopback reload is open again to clients that are not pages.
    assert_eq!(request(Method::POST, &reload_url, &[]).await.status, 200);
    drop(_child);
    let _ = std::fs::remove_dir_all(&dir);
}
