//! Upstreams: round robin over an upstream's servers, a bounded keepalive pool
//! per server, timeouts, and the slots that bound background refreshes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::body::StreamBody;
use crate::config::UpstreamConfig;
use crate::error::{ErrorKind, ProxyError};

/// One named upstream: its servers and the shared connection pool.
pub struct Upstream {
    /// The config name, for logs and status.
    pub name: String,
    servers: Vec<Authority>,
    next: AtomicUsize,
    client: Client<HttpConnector, StreamBody>,
    /// Longest wait for a response head (counted from sending the request, so a
    /// request body upload counts too), and between two response body frames.
    pub read_timeout: Duration,
    /// Longest wait between two frames of a request body being sent.
    pub send_timeout: Duration,
    refresh_slots: Arc<Semaphore>,
    /// Requests, errors, latency.
    pub stats: crate::metrics::UpstreamStats,
}

impl Upstream {
    /// Builds the pool for `cfg`. Server names were validated as `host:port`.
    pub fn new(cfg: &UpstreamConfig) -> Result<Self, String> {
        let servers = cfg
            .servers
            .iter()
            .map(|s| {
                s.parse::<Authority>()
                    .map_err(|e| format!("upstream {}: server {s:?}: {e}", cfg.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(cfg.connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(cfg.keepalive)
            .pool_idle_timeout(Duration::from_secs(60))
            .set_host(false)
            .build(connector);
        Ok(Upstream {
            name: cfg.name.clone(),
            servers,
            next: AtomicUsize::new(0),
            client,
            read_timeout: cfg.read_timeout,
            send_timeout: cfg.send_timeout,
            refresh_slots: Arc::new(Semaphore::new(cfg.refresh_concurrency)),
            stats: crate::metrics::UpstreamStats::default(),
        })
    }

    fn pick(&self) -> &Authority {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.servers.len();
        &self.servers[i]
    }

    /// Sends `req` (whose URI carries only path and query) to the next server and
    /// waits up to `read_timeout` for the response head. A `101` is an
    /// origin fault here: only [`Upstream::send_upgrade`] asks for one.
    pub async fn send(&self, req: Request<StreamBody>) -> Result<Response<Incoming>, ProxyError> {
        let resp = self.send_upgrade(req).await?;
        if resp.status().is_informational() {
            // hyper skips 100 and 102-199; a 101 would end the exchange as if
            // it were the final answer (and open a tunnel to the client).
            let e = ProxyError::upstream(
                ErrorKind::Broken,
                &self.name,
                format!(
                    "interim {} to a request that asked no upgrade",
                    resp.status()
                ),
            );
            self.stats.errors.inc();
            return Err(e);
        }
        Ok(resp)
    }

    /// [`Upstream::send`] for a WebSocket handshake: a `101` is the answer.
    /// Every request leaves as HTTP/1.1 (an HTTP/2 client's too) with a `Host`.
    pub async fn send_upgrade(
        &self,
        mut req: Request<StreamBody>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let server = self.pick();
        *req.version_mut() = http::Version::HTTP_11;
        if !req.headers().contains_key(http::header::HOST) {
            // The edge gives every client request its Host; this covers
            // requests of our own making.
            if let Ok(host) = http::HeaderValue::from_str(server.as_str()) {
                req.headers_mut().insert(http::header::HOST, host);
            }
        }
        let pq = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(server.clone());
        parts.path_and_query = Some(pq);
        *req.uri_mut() =
            Uri::from_parts(parts).map_err(|e| ProxyError::downstream(ErrorKind::BadRequest, e))?;
        self.stats.requests.inc();
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout(self.read_timeout, self.client.request(req)).await {
            Err(_) => Err(ProxyError::upstream(
                ErrorKind::ReadTimeout,
                server.as_str(),
                format!("no response within read_timeout {:?}", self.read_timeout),
            )),
            Ok(Err(e)) => Err(classify(&e, server.as_str())),
            Ok(Ok(resp)) => Ok(resp),
        };
        let elapsed = started.elapsed();
        self.stats.latency.observe(elapsed);
        if result
            .as_ref()
            .map_or(true, |r| r.status().is_server_error())
        {
            self.stats.errors.inc();
        }
        crate::metrics::note_call(crate::metrics::UpstreamCall {
            addr: server.as_str().parse().ok(),
            elapsed,
        });
        result
    }

    /// The servers, as configured.
    pub fn servers(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.to_string()).collect()
    }

    /// A slot for one background refresh, or `None` when `refresh_concurrency` are running.
    pub fn try_refresh_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.refresh_slots.clone().try_acquire_owned().ok()
    }
}

fn classify(e: &hyper_util::client::legacy::Error, server: &str) -> ProxyError {
    let cause = cause_chain(e);
    if e.is_connect() {
        let timed_out = source_io_kind(e) == Some(std::io::ErrorKind::TimedOut);
        let kind = if timed_out {
            ErrorKind::ConnectTimeout
        } else {
            ErrorKind::ConnectFailed
        };
        return ProxyError::upstream(kind, server, cause);
    }
    ProxyError::upstream(ErrorKind::Broken, server, cause)
}

fn source_io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur = e.source();
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

/// "outer: inner: innermost", for logs.
pub fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(err) = cur {
        out.push_str(": ");
        out.push_str(&err.to_string());
        cur = err.source();
    }
    out
}
