//! One request over any of the three ways a client reaches calmcache:
//! HTTP/1.1, HTTP/2 with prior knowledge (h2c), and HTTP/2 over TLS (ALPN
//! `h2`), so a test can run the same case over each. [`Wires::start`]
//! builds a proxy listening all three ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use crate::client::Reply;
use crate::proxy::RunningProxy;
use crate::tls::TestCa;
use crate::Proxy;

/// The certificate name the TLS listener of [`Wires`] serves.
pub const TLS_NAME: &str = "calm.test";

/// How a request travels to the proxy.
#[derive(Clone)]
pub enum Wire {
    /// HTTP/1.1 over TCP.
    Http1,
    /// HTTP/2 with prior knowledge over TCP (the listener has `h2c = true`).
    H2c,
    /// HTTP/2 over TLS with ALPN `h2`, trusting the test CA.
    H2Tls(Arc<rustls::ClientConfig>),
}

impl Wire {
    /// A short name for assertion messages.
    pub fn label(&self) -> &'static str {
        match self {
            Wire::Http1 => "HTTP/1.1",
            Wire::H2c => "h2c",
            Wire::H2Tls(_) => "HTTP/2 over TLS",
        }
    }
}

/// A proxy with a plain listener (HTTP/1.1 and h2c) and a TLS one, and the
/// three wires to reach it.
pub struct Wires {
    /// The running proxy.
    pub proxy: RunningProxy,
    /// HTTP/1.1, h2c, HTTP/2 over TLS.
    pub all: Vec<Wire>,
    _ca_dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Wires {
    /// Starts `proxy` with `h2c = true` and a TLS listener for [`TLS_NAME`]
    /// added to its `[server]` keys (`server` holds any others).
    pub async fn start(proxy: Proxy, server: &str) -> Wires {
        Wires::start_with_tls_on(proxy, server, "127.0.0.1:0").await
    }

    /// [`Wires::start`] with the TLS listener on `tls_listen` (e.g.
    /// `"127.0.0.2:0"`, so that it is named apart from the plain one,
    /// `"127.0.0.1:0"`, in a route's `listeners`).
    pub async fn start_with_tls_on(proxy: Proxy, server: &str, tls_listen: &str) -> Wires {
        let dir = std::env::temp_dir().join(format!(
            "calmcache-wires-{}-{:x}",
            std::process::id(),
            rand_suffix()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca = TestCa::new(&dir);
        let leaf = ca.leaf("calm", &[TLS_NAME]);
        let keys = format!(
            "h2c = true\ntls_listen = [\"{tls_listen}\"]\n{server}\n\
             [[server.tls]]\ncert = {:?}\nkey = {:?}\n",
            leaf.cert.display().to_string(),
            leaf.key.display().to_string(),
        );
        let proxy = proxy.server(&keys).start().await;
        let all = vec![Wire::Http1, Wire::H2c, Wire::H2Tls(ca.client(&[b"h2"]))];
        Wires {
            proxy,
            all,
            _ca_dir: TempDir(dir),
        }
    }

    /// Sends a request over `wire` to the right listener, with the
    /// authority `host` (`Host` for HTTP/1.1, `:authority` for HTTP/2).
    pub async fn send(
        &self,
        wire: &Wire,
        method: Method,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let addr = match wire {
            Wire::H2Tls(_) => self.proxy.tls_addr(),
            _ => self.proxy.running().proxy_addrs[0],
        };
        send(wire, addr, method, host, path, headers, body.into()).await
    }

    /// Sends a GET over `wire` and returns as soon as the response head
    /// arrives, with its body still streaming (to read it piece by piece).
    pub async fn open(
        &self,
        wire: &Wire,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> http::Response<hyper::body::Incoming> {
        let addr = match wire {
            Wire::H2Tls(_) => self.proxy.tls_addr(),
            _ => self.proxy.running().proxy_addrs[0],
        };
        let what = format!("{} GET {host}{path}", wire.label());
        let head = open(wire, addr, Method::GET, host, path, headers, Bytes::new());
        tokio::time::timeout(Duration::from_secs(30), head)
            .await
            .unwrap_or_else(|_| panic!("{what}: no response head within 30 s"))
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish()
}

/// One request over `wire` to `addr`; panics on connection errors and
/// after 30 s (tests).
pub async fn send(
    wire: &Wire,
    addr: SocketAddr,
    method: Method,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Reply {
    let what = format!("{} {method} {host}{path}", wire.label());
    let exchange = exchange(wire, addr, method, host, path, headers, body);
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .unwrap_or_else(|_| panic!("{what}: no complete answer within 30 s"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// What [`open`] fails with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One HTTP/2 request on a fresh connection over `io` (TCP or TLS).
async fn send_h2<IO>(
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

async fn exchange(
    wire: &Wire,
    addr: SocketAddr,
    method: Method,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Reply, BoxError> {
    let started = Instant::now();
    let resp = open(wire, addr, method, host, path, headers, body).await?;
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

/// The response head of one request over `wire` to `addr`, its body still
/// to read (a test that reads the body itself sees a cut as an error).
pub async fn open(
    wire: &Wire,
    addr: SocketAddr,
    method: Method,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<http::Response<hyper::body::Incoming>, BoxError> {
    let tcp = TcpStream::connect(addr).await?;
    let mut req = Request::builder().method(method);
    req = match wire {
        Wire::Http1 => req.uri(path).header("host", host),
        Wire::H2c => req
            .uri(format!("http://{host}{path}"))
            .version(Version::HTTP_2),
        Wire::H2Tls(_) => req
            .uri(format!("https://{host}{path}"))
            .version(Version::HTTP_2),
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body))?;
    let resp = match wire {
        Wire::Http1 => {
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
            tokio::spawn(conn);
            sender.send_request(req).await?
        }
        Wire::H2c => send_h2(tcp, req).await?,
        Wire::H2Tls(config) => {
            let connector = tokio_rustls::TlsConnector::from(config.clone());
            let name = ServerName::try_from(TLS_NAME.to_string())?;
            send_h2(connector.connect(name, tcp).await?, req).await?
        }
    };
    Ok(resp)
}
