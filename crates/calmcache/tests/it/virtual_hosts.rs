//! Routes by host name (`hosts`, as NGINX's `server_name`): each request
//! goes to the first route whose hosts take its Host (or HTTP/2
//! `:authority`) and whose `match` takes its path, over HTTP/1.1, h2c and
//! HTTP/2 over TLS, cached and uncached; a name spelled otherwise (case,
//! trailing dot, port) picks the same route and the same stored copy;
//! requests without a host reach only routes without `hosts`.

use std::time::Duration;

use calmcache_testkit::wire::Wires;
use calmcache_testkit::{Origin, Proxy};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Origin `a` behind `hosts = ["a.test"]` (cached), `b` behind
/// `["*.b.test"]` (no zone: passed through), `c` behind a route without
/// hosts (cached): every other name.
fn three_sites(a: &Origin, b: &Origin, c: &Origin) -> Proxy {
    Proxy::new(a).route(&format!(
        "hosts = [\"a.test\"]\nttl = {{ 200 = \"60s\" }}\n\n\
         [upstreams.b]\nservers = [\"{}\"]\n\
         [upstreams.c]\nservers = [\"{}\"]\n\n\
         [[routes]]\nname = \"b\"\nupstream = \"b\"\nhosts = [\"*.b.test\"]\n\n\
         [[routes]]\nname = \"c\"\nupstream = \"c\"\nzone = \"ram\"\nttl = {{ 200 = \"60s\" }}\n",
        b.addr(),
        c.addr()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_host_reaches_its_route_on_every_wire() {
    let (a, b, c) = (
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
    );
    let wires = Wires::start(three_sites(&a, &b, &c), "").await;
    for wire in &wires.all {
        let label = wire.label();
        let path = format!("/page/{}", label.replace(' ', "-"));
        let get = |host: &'static str| {
            let path = path.clone();
            let wires = &wires;
            async move { wires.send(wire, Method::GET, host, &path, &[], "").await }
        };
        // a.test: cached; other spellings of the name share its copy.
        let first = get("a.test").await;
        assert_eq!(first.status, 200, "{label}");
        assert!(first.body.contains(&format!("path={path}")), "{label}");
        for spelling in ["a.test", "A.Test", "a.test."] {
            let again = get(spelling).await;
            assert!(
                again.is_hit(),
                "{label} {spelling}: {}",
                again.cache_status()
            );
            assert_eq!(again.body, first.body, "{label} {spelling}");
        }
        assert_eq!(a.hits_for(&path), 1, "{label}");
        // Names under b.test, at any depth: passed through to b each time.
        for host in ["www.b.test", "x.y.b.test", "WWW.B.TEST"] {
            let r = get(host).await;
            assert_eq!(r.status, 200, "{label} {host}");
            assert!(!r.is_hit(), "{label} {host}: {}", r.cache_status());
        }
        assert_eq!(b.hits_for(&path), 3, "{label}");
        // b.test itself (`*.` is names under it only) and any other name:
        // the route without hosts, cached apart from a.test's copy.
        for host in ["b.test", "other.test", "a.test.other"] {
            let r = get(host).await;
            assert_eq!(r.status, 200, "{label} {host}");
        }
        let r = get("other.test").await;
        assert!(r.is_hit(), "{label}: {}", r.cache_status());
        assert_eq!(c.hits_for(&path), 3, "{label}: one fetch per host");
        assert_eq!(a.hits_for(&path), 1, "{label}: never a.test's");
        // Unsafe methods follow the host too.
        let post = wires
            .send(wire, Method::POST, "a.test", &path, &[], "x")
            .await;
        assert_eq!(post.status, 200, "{label}");
        assert_eq!(a.hits_for(&path), 2, "{label}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_does_not_change_the_route_and_no_host_takes_the_route_without_hosts() {
    let (a, b, c) = (
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
    );
    let proxy = three_sites(&a, &b, &c).start().await;
    let addr = proxy.host();
    let raw = |request: String| {
        let addr = addr.clone();
        async move {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.write_all(request.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answer))
                .await
                .unwrap()
                .unwrap();
            String::from_utf8_lossy(&answer).into_owned()
        }
    };
    let with_port =
        raw("GET /p HTTP/1.1\r\nHost: a.test:8080\r\nConnection: close\r\n\r\n".into()).await;
    assert!(with_port.starts_with("HTTP/1.1 200"), "{with_port}");
    assert_eq!(a.hits_for("/p"), 1, "a.test:8080 is a.test's route");
    // HTTP/1.0 without Host (a load balancer's health check).
    let no_host = raw("GET /p HTTP/1.0\r\n\r\n".into()).await;
    assert!(no_host.starts_with("HTTP/1.0 200"), "{no_host}");
    assert_eq!(c.hits_for("/p"), 1, "no host: the route without hosts");
    assert_eq!(a.hits_for("/p") + b.hits_for("/p"), 1);
    // A bad Host is refused before any route is looked at.
    let bad = raw("GET /p HTTP/1.1\r\nHost: a.test/evil\r\nConnection: close\r\n\r\n".into()).await;
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_route_for_the_host_the_answer_is_an_error_not_another_site() {
    let a = Origin::start().await;
    let proxy = Proxy::new(&a)
        .route("hosts = [\"a.test\", \".a.example\"]")
        .start()
        .await;
    let url = proxy.url("/p");
    let other = calmcache_testkit::request(Method::GET, &url, &[("host", "b.test")]).await;
    assert_eq!(other.status, 404, "{}", other.body);
    for host in ["a.example", "www.a.example", "a.test"] {
        let r = calmcache_testkit::request(Method::GET, &url, &[("host", host)]).await;
        assert_eq!(r.status, 200, "{host}");
    }
    assert_eq!(a.hits_for("/p"), 3, "b.test never reached a.test's origin");
    let status = proxy.status().await;
    assert_eq!(
        status["routes"]["test"]["hosts"],
        serde_json::json!(["a.test", ".a.example"])
    );
}
