//! A steerable origin on a free loopback port that counts what reaches it.
//!
//! Each request may steer its response with headers (the proxy forwards them,
//! also on background refreshes):
//! - `x-origin-delay-ms: N`: wait N ms before answering;
//! - `x-origin-status: N`: answer with status N;
//! - `x-origin-cache-control: V`: send `Cache-Control: V`;
//! - `x-origin-set-cookie: V`: send `Set-Cookie: V`;
//! - `x-origin-body-bytes: N`: pad the body to N bytes.
//!
//! The body is `path=<path> n=<count>` so a test can tell versions apart.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

#[derive(Default)]
struct Counts {
    total: AtomicU64,
    by_path: Mutex<HashMap<String, u64>>,
}

/// A running origin; stops (refusing connections and closing open ones) on drop.
pub struct Origin {
    addr: SocketAddr,
    counts: Arc<Counts>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Origin {
    /// Starts an origin on `127.0.0.1:0`.
    pub async fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        Self::serve(listener)
    }

    /// Starts an origin on a given address (to bring one back after [`Origin::stop`]).
    pub async fn start_on(addr: SocketAddr) -> Origin {
        let listener = TcpListener::bind(addr).await.expect("rebind origin");
        Self::serve(listener)
    }

    fn serve(listener: TcpListener) -> Origin {
        let addr = listener.local_addr().expect("origin addr");
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let server = tokio::spawn(async move {
            // Connections live in this set: aborting the server task closes them all.
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let c = c.clone();
                let svc = service_fn(move |req| respond(c.clone(), req));
                conns.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Origin {
            addr,
            counts,
            server: Some(server),
        }
    }

    /// `host:port`, for the proxy's `servers`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests that reached this origin.
    pub fn hits(&self) -> u64 {
        self.counts.total.load(Ordering::SeqCst)
    }

    /// Requests for one path.
    pub fn hits_for(&self, path: &str) -> u64 {
        let by_path = self.counts.by_path.lock().expect("counts lock");
        by_path.get(path).copied().unwrap_or(0)
    }

    /// Stops: new connections are refused and open ones are closed.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop();
    }
}

fn number(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

async fn respond(
    counts: Arc<Counts>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let n = counts.total.fetch_add(1, Ordering::SeqCst) + 1;
    *counts
        .by_path
        .lock()
        .expect("counts lock")
        .entry(path.clone())
        .or_default() += 1;
    let h = req.headers();
    if let Some(ms) = number(h, "x-origin-delay-ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut body = format!("path={path} n={n}");
    if let Some(size) = number(h, "x-origin-body-bytes") {
        while body.len() < size as usize {
            body.push('.');
        }
    }
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    if let Some(status) =
        number(h, "x-origin-status").and_then(|s| StatusCode::from_u16(s as u16).ok())
    {
        *resp.status_mut() = status;
    }
    for (from, to) in [
        ("x-origin-cache-control", "cache-control"),
        ("x-origin-set-cookie", "set-cookie"),
    ] {
        if let Some(v) = h.get(from) {
            resp.headers_mut().insert(to, v.clone());
        }
    }
    Ok(resp)
}
