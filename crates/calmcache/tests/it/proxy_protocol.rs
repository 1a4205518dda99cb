//! The PROXY protocol on listeners (issue 28, item 9: NGINX's `listen ...
//! proxy_protocol` with `set_real_ip_from` and `real_ip_header
//! proxy_protocol`): a v1 or v2 header from a trusted balancer makes its
//! client the one the origin (X-Forwarded-For, X-Real-IP from
//! `$remote_addr`) and the per-client limits see, over HTTP/1.1, h2c and
//! HTTP/2 over TLS (the header before the ClientHello), on a cached and an
//! uncached route; `trusted_proxies` still applies on top. A source outside
//! `proxy_protocol_from`, a connection without the header, a malformed,
//! overlong or slow one is closed without an answer and counted.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use calmcache_testkit::wire::{Wire, Wires, TLS_NAME};
use calmcache_testkit::{Origin, Proxy, Reply};
use http::{Method, Request, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A v1 header naming `client` (IPv4) as the source.
fn v1(client: &str) -> Vec<u8> {
    format!("PROXY TCP4 {client} 10.0.0.1 40000 443\r\n").into_bytes()
}

/// A v2 PROXY header naming `client` (IPv4) as the source, with a TLV
/// (an AWS-style VPC endpoint id) after the addresses.
fn v2(client: &str) -> Vec<u8> {
    let ip: std::net::Ipv4Addr = client.parse().unwrap();
    let mut block = ip.octets().to_vec();
    block.extend([10, 0, 0, 1]);
    block.extend(40000u16.to_be_bytes());
    block.extend(443u16.to_be_bytes());
    block.extend([0xEA, 0, 9, 1]);
    block.extend(b"vpce-123");
    let mut out = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    out.extend([0x21, 0x11]);
    out.extend(u16::try_from(block.len()).unwrap().to_be_bytes());
    out.extend(block);
    out
}

/// The listener `wire` goes to.
fn addr_of(wires: &Wires, wire: &Wire) -> SocketAddr {
    match wire {
        Wire::H2Tls(_) => wires.proxy.tls_addr(),
        _ => wires.proxy.running().proxy_addrs[0],
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A GET of `path` over `wire` on a connection that starts with `preamble`
/// (the PROXY header), with `headers`.
async fn get_after(
    wires: &Wires,
    wire: &Wire,
    preamble: &[u8],
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let what = format!("{} GET {path}", wire.label());
    let exchange = exchange(addr_of(wires, wire), wire, preamble, path, headers);
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 30 s"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

async fn exchange(
    addr: SocketAddr,
    wire: &Wire,
    preamble: &[u8],
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, BoxError> {
    let started = std::time::Instant::now();
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.write_all(preamble).await?;
    let mut req = match wire {
        Wire::Http1 => Request::get(path).header("host", TLS_NAME),
        Wire::H2c => Request::get(format!("http://{TLS_NAME}{path}")).version(Version::HTTP_2),
        Wire::H2Tls(_) => {
            Request::get(format!("https://{TLS_NAME}{path}")).version(Version::HTTP_2)
        }
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::new()))?;
    let resp = match wire {
        Wire::Http1 => {
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
            tokio::spawn(conn);
            sender.send_request(req).await?
        }
        Wire::H2c => h2(tcp, req).await?,
        Wire::H2Tls(config) => {
            let connector = tokio_rustls::TlsConnector::from(config.clone());
            let name = rustls_pki_types::ServerName::try_from(TLS_NAME.to_string())?;
            h2(connector.connect(name, tcp).await?, req).await?
        }
    };
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await?.to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
        elapsed: started.elapsed(),
    })
}

async fn h2<IO>(
    io: IO,
    req: Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, BoxError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
    tokio::spawn(conn);
    Ok(sender.send_request(req).await?)
}

/// Sends `bytes` on a fresh connection to `addr` and reads until the proxy
/// closes it (at most 20 s): what it answered (nothing, when refused).
async fn closed_after(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let _ = tcp.write_all(bytes).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection was not closed within 20 s");
    answer
}

/// A cached route (`/c/`) and an uncached one, both sending the client as
/// the origin's X-Real-IP, with `extra` keys on each.
fn two_routes(origin: &Origin, extra: &str) -> Proxy {
    let rules =
        format!("request_headers = {{ set = {{ \"X-Real-IP\" = \"$remote_addr\" }} }}\n{extra}");
    Proxy::new(origin).route(&format!(
        "path = \"^/c/\"\nttl = {{ 200 = \"60s\" }}\n{rules}\n\n\
         [[routes]]\nname = \"pass\"\nupstream = \"origin\"\n{rules}\n"
    ))
}

/// Both listeners (plain and TLS, each `127.0.0.1:0`) expect the header
/// from `from`.
fn keys(from: &str) -> String {
    format!("proxy_protocol_listeners = [\"127.0.0.1:0\"]\nproxy_protocol_from = [\"{from}\"]\n")
}

async fn metrics(wires: &Wires) -> String {
    calmcache_testkit::get(&wires.proxy.admin_url("/metrics"))
        .await
        .body
}

fn counted(metrics: &str, result: &str) -> u64 {
    let prefix = format!("calmcache_proxy_protocol_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_headers_client_reaches_the_origin_over_every_wire() {
    let origin = Origin::start().await;
    let wires = Wires::start(two_routes(&origin, ""), &keys("127.0.0.1")).await;
    for (w, wire) in wires.all.iter().enumerate() {
        for (version, header) in [("v1", v1 as fn(&str) -> Vec<u8>), ("v2", v2)] {
            let client = format!("198.51.100.{}", w * 2 + usize::from(version == "v2"));
            for route in ["c", "p"] {
                let path = format!("/{route}/{w}/{version}");
                let label = format!("{} {version} {path}", wire.label());
                for _ in 0..2 {
                    let reply = get_after(&wires, wire, &header(&client), &path, &[]).await;
                    assert_eq!(reply.status, 200, "{label}");
                }
                let seen = origin.requests_for(&path);
                let expected = if route == "c" { 1 } else { 2 };
                assert_eq!(seen.len(), expected, "{label}: the second is a hit on /c/");
                for r in &seen {
                    assert_eq!(r.header("x-real-ip"), Some(client.as_str()), "{label}");
                    assert_eq!(
                        r.header("x-forwarded-for"),
                        Some(client.as_str()),
                        "{label}"
                    );
                }
            }
        }
    }
    let text = metrics(&wires).await;
    assert_eq!(counted(&text, "v1"), 12, "{text}");
    assert_eq!(counted(&text, "v2"), 12, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_proxies_apply_on_top_and_local_keeps_the_balancer() {
    let origin = Origin::start().await;
    // The header names another proxy (192.0.2.1) that the route trusts:
    // its X-Forwarded-For names the client.
    let proxy = two_routes(&origin, "trusted_proxies = [\"192.0.2.1\"]");
    let wires = Wires::start(proxy, &keys("127.0.0.1")).await;
    let xff = [("x-forwarded-for", "203.0.113.9")];
    for (w, wire) in wires.all.iter().enumerate() {
        let path = format!("/p/behind/{w}");
        let reply = get_after(&wires, wire, &v2("192.0.2.1"), &path, &xff).await;
        assert_eq!(reply.status, 200);
        let seen = origin.requests_for(&path);
        assert_eq!(
            seen[0].header("x-real-ip"),
            Some("203.0.113.9"),
            "{}",
            wire.label()
        );
        // Not a trusted proxy: its X-Forwarded-For is its own client's word.
        let path = format!("/p/direct/{w}");
        let reply = get_after(&wires, wire, &v1("198.51.100.77"), &path, &xff).await;
        assert_eq!(reply.status, 200);
        let seen = origin.requests_for(&path);
        assert_eq!(
            seen[0].header("x-real-ip"),
            Some("198.51.100.77"),
            "{}",
            wire.label()
        );
        // A LOCAL header (a health check): the TCP peer is the client.
        let mut local = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        local.extend([0x20, 0x00, 0, 0]);
        let path = format!("/p/local/{w}");
        let reply = get_after(&wires, wire, &local, &path, &[]).await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            origin.requests_for(&path)[0].header("x-real-ip"),
            Some("127.0.0.1")
        );
    }
    assert_eq!(counted(&metrics(&wires).await, "local"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_client_rate_limit_keys_on_the_headers_client() {
    let origin = Origin::start().await;
    let proxy = two_routes(&origin, "limits = [\"lim\"]")
        .tables("[limits.lim]\nrate = \"1r/m\"\nburst = 1\ndelay = \"nodelay\"");
    let wires = Wires::start(proxy, &keys("127.0.0.1")).await;
    for (w, wire) in wires.all.iter().enumerate() {
        for route in ["c", "p"] {
            let flooder = format!("198.51.100.{}", w * 2 + usize::from(route == "p"));
            let before = origin.hits();
            let statuses: Vec<u16> = futures_util::future::join_all((0..4).map(|i| {
                let path = format!("/{route}/flood/{w}/{i}");
                let header = v1(&flooder);
                let wires = &wires;
                async move {
                    get_after(wires, wire, &header, &path, &[])
                        .await
                        .status
                        .as_u16()
                }
            }))
            .await;
            let mut sorted = statuses.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [200, 200, 429, 429], "{} /{route}/", wire.label());
            assert_eq!(
                origin.hits() - before,
                2,
                "a refusal never reaches the origin"
            );
            // Another client behind the same balancer goes on.
            let other = format!("203.0.113.{}", w * 2 + usize::from(route == "p"));
            let path = format!("/{route}/other/{w}");
            let reply = get_after(&wires, wire, &v2(&other), &path, &[]).await;
            assert_eq!(reply.status, 200, "{} another client", wire.label());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_source_is_closed_before_anything_is_read() {
    let origin = Origin::start().await;
    let wires = Wires::start(two_routes(&origin, ""), &keys("10.0.0.0/8")).await;
    let request = [
        v1("198.51.100.1"),
        b"GET /p/x HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
    ]
    .concat();
    for wire in &wires.all {
        let answer = closed_after(addr_of(&wires, wire), &request).await;
        assert!(answer.is_empty(), "{}: {answer:?}", wire.label());
    }
    assert_eq!(origin.hits(), 0);
    assert_eq!(counted(&metrics(&wires).await, "untrusted"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_headers_are_closed_and_counted_and_a_plain_listener_is_unchanged() {
    let origin = Origin::start().await;
    // Only the TLS listener (127.0.0.2) expects the header.
    let server = "header_read_timeout = \"1s\"\nproxy_protocol_listeners = [\"127.0.0.2:0\"]\n\
                  proxy_protocol_from = [\"127.0.0.0/8\"]\n";
    let wires = Wires::start_with_tls_on(two_routes(&origin, ""), server, "127.0.0.2:0").await;
    let tls = wires.proxy.tls_addr();
    let http = b"GET /p/x HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    let overlong = [b"PROXY TCP4 ".to_vec(), vec![b'1'; 120], b"\r\n".to_vec()].concat();
    let mut huge = v2("198.51.100.1");
    huge[14..16].copy_from_slice(&60_000u16.to_be_bytes());
    let cases: [(&str, Vec<u8>); 6] = [
        ("missing", http.clone()),
        (
            "malformed",
            b"PROXY TCP4 198.51.100.300 10.0.0.1 1 2\r\n".to_vec(),
        ),
        ("malformed", b"PROXY TCP9 whatever\r\n".to_vec()),
        ("too_long", overlong),
        ("too_long", huge),
        ("timeout", b"PROXY TCP4 198.51".to_vec()),
    ];
    for (result, bytes) in &cases {
        let answer = closed_after(tls, bytes).await;
        assert!(answer.is_empty(), "{result}: {answer:?}");
    }
    // A TLS client that sends no header: its ClientHello is no header.
    let Wire::H2Tls(config) = &wires.all[2] else {
        panic!("the TLS wire")
    };
    let tcp = TcpStream::connect(tls).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let name = rustls_pki_types::ServerName::try_from(TLS_NAME.to_string()).unwrap();
    let handshake = tokio::time::timeout(Duration::from_secs(20), connector.connect(name, tcp));
    assert!(
        matches!(handshake.await, Ok(Err(_))),
        "no TLS without the header"
    );
    assert_eq!(origin.hits(), 0);
    // The plain listener does not expect the header: plain HTTP works,
    // and a header there is not HTTP.
    for wire in &wires.all[..2] {
        let reply = wires
            .send(wire, Method::GET, TLS_NAME, "/p/plain", &[], "")
            .await;
        assert_eq!(reply.status, 200, "{}", wire.label());
    }
    let plain = wires.proxy.running().proxy_addrs[0];
    let answer = closed_after(plain, &[v1("198.51.100.1"), http].concat()).await;
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 400"),
        "{answer:?}"
    );
    let text = metrics(&wires).await;
    for (result, n) in [
        ("missing", 2),
        ("malformed", 2),
        ("too_long", 2),
        ("timeout", 1),
    ] {
        assert_eq!(counted(&text, result), n, "{result}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_names_the_client_and_json_the_balancer() {
    let origin = Origin::start().await;
    let dir = crate::scratch("proxy-protocol-log");
    let path = dir.join("access.json");
    let proxy = two_routes(&origin, "").access_log(&path, "json");
    let wires = Wires::start(proxy, &keys("127.0.0.1")).await;
    for wire in &wires.all {
        let reply = get_after(&wires, wire, &v2("198.51.100.9"), "/p/logged", &[]).await;
        assert_eq!(reply.status, 200);
    }
    let what = format!("3 lines in {}", path.display());
    let lines = calmcache_testkit::wait_until(Duration::from_secs(10), &what, async || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (lines.len() >= 3 && text.ends_with('\n')).then_some(lines)
    })
    .await;
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["remote_addr"], "198.51.100.9", "{line}");
        assert_eq!(v["realip_remote_addr"], "127.0.0.1", "{line}");
    }
}
