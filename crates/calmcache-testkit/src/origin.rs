//! A steerable origin on a free loopback port that counts and records what
//! reaches it.
//!
//! Each request may steer its response with headers (the proxy forwards them,
//! also on background refreshes and revalidations):
//! - `x-origin-delay-ms: N`: wait N ms before answering;
//! - `x-origin-close: 1`: close the connection without an answer (after
//!   any delay), as a worker that crashes on this URL does;
//! - `x-origin-status: N`: answer with status N;
//! - `x-origin-cache-control: V`: send `Cache-Control: V`;
//! - `x-origin-set-cookie: V`: send `Set-Cookie: V`;
//! - `x-origin-header: Name: value`: add the field line `Name: value` to the
//!   response, verbatim (repeatable: each line adds one field line). Use it for
//!   `ETag`, `Last-Modified`, `Vary`, `Expires`, `Date`, `Age`,
//!   `Content-Type`, `Location`, `Content-Location`, `CDN-Cache-Control`,
//!   `Calmcache-Cache-Control`, `Cache-Status`... A `Date` given this way
//!   replaces the automatic one;
//! - `x-origin-body: text`: the body is exactly `text`;
//! - `x-origin-echo: 1`: the body is the request as received (method,
//!   version, target, body length, then every field line), as an origin
//!   that reflects its request into the page would;
//! - `x-origin-echo-body: 1`: the body is `<method> n=<count> body=<request
//!   body>`, so a test can tell which body (and which fetch) an answer is for;
//! - `x-origin-body-bytes: N`: pad the body to N bytes (with `.`);
//! - `x-origin-ignore-conditionals: 1`: never answer 304 (see below);
//! - `x-origin-trickle-ms: N`: send the body (with its Content-Length) in 8
//!   pieces N ms apart ([`Origin::bodies_trickled`] counts those finished);
//! - `x-origin-abort-after-bytes: N`: with trickling, fail the body instead of
//!   sending past N bytes (a connection dropped mid-body, without the last
//!   chunk of a chunked body);
//! - `x-origin-chunked: 1`: with trickling or streaming, no Content-Length:
//!   the body is sent chunked;
//! - `x-origin-pieces: N`: with trickling, N pieces instead of 8;
//! - `x-origin-stream-bytes: N`: a generated body of N bytes ([`stream_byte`]
//!   gives byte *i*), sent in 64 KiB pieces as fast as it is read (never
//!   held whole, so it can be hundreds of MB), with its Content-Length;
//! - `x-origin-stream-pause-ms: N`: with streaming, pause N ms after each
//!   64 KiB piece.
//!
//! The same names may be given as query parameters, percent-encoded
//! (`/w?x-origin-cache-control=no-cache&x-origin-header=ETag:%20%22v1%22`),
//! for requests whose headers a test cannot set (warm fetches).
//!
//! Without `x-origin-body` the body is `path=<path> n=<count>`, `count` being
//! the number of requests this origin has received so far, so a test can tell
//! versions apart.
//!
//! Any method is answered the same way; a `HEAD` gets the headers (with the
//! `Content-Length` of the body a GET would get) and no body. A request body is
//! read whole and recorded ([`RecordedRequest::body`]).
//!
//! Conditional requests are evaluated as a real server does (RFC 9110
//! §13.1.2, §13.1.3, §13.2.2), for GET and HEAD when the response would be a
//! 200: if it carries an `ETag` and the request's `If-None-Match` matches it
//! (weak comparison; `*` matches any), or there is no `If-None-Match` and
//! `If-Modified-Since` is at or after its `Last-Modified`, the answer is a 304
//! with the response's headers and no body. It is counted like any other.
//!
//! [`Origin::in_progress`] counts the requests being answered now (from
//! arrival to the end of their body) and [`Origin::peak_in_progress`] the
//! most at once, for tests of an origin concurrency budget.
//!
//! [`Origin::start_unix`] serves the same on a unix socket (issue 28:
//! `servers = ["unix:/path"]`). Every origin counts the connections it
//! accepted ([`Origin::connections`]) so a test can see them pooled.
//!
//! Every request is recorded: [`Origin::requests_for`] returns method, path
//! and query, and headers, so a test can assert what the proxy sent (a
//! validator, no `Range`, a GET for a HEAD...).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::date::parse_http_date;

/// One request as the origin received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// Request method.
    pub method: Method,
    /// Path and query, e.g. `/a?x=1`.
    pub path_and_query: String,
    /// Request headers as received.
    pub headers: HeaderMap,
    /// The request body as received (empty until it is all in, or when it
    /// failed).
    pub body: Bytes,
}

impl RecordedRequest {
    /// The path without the query.
    pub fn path(&self) -> &str {
        self.path_and_query
            .split_once('?')
            .map_or(self.path_and_query.as_str(), |(p, _)| p)
    }

    /// A header as text (the first field line), or `None` when absent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// True when the request carried `name`.
    pub fn has_header(&self, name: &str) -> bool {
        self.headers.contains_key(name)
    }
}

#[derive(Default)]
struct Counts {
    total: AtomicU64,
    /// TLS origins: handshakes completed, those that agreed on ALPN
    /// `http/1.1`, and those that failed.
    tls_connections: AtomicU64,
    tls_alpn_http11: AtomicU64,
    tls_failures: AtomicU64,
    /// Connections accepted (TCP, TLS before its handshake, unix).
    connections: AtomicU64,
    trickled: AtomicU64,
    streamed: AtomicU64,
    /// Requests being answered now, and the most there were at once.
    in_progress: AtomicU64,
    peak_in_progress: AtomicU64,
    by_path: Mutex<HashMap<String, u64>>,
    requests: Mutex<Vec<RecordedRequest>>,
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

    /// Starts an origin on `127.0.0.1:0` that speaks HTTP/1.1 over TLS
    /// only, with `config` (e.g. [`crate::tls::TestCa::server_config`]);
    /// [`Origin::tls_connections`] counts its handshakes.
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        Self::serve_with(listener, Some(tokio_rustls::TlsAcceptor::from(config)))
    }

    fn serve(listener: TcpListener) -> Origin {
        Self::serve_with(listener, None)
    }

    fn serve_with(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) -> Origin {
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
                c.connections.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    let svc = {
                        let c = c.clone();
                        service_fn(move |req| respond(c.clone(), req))
                    };
                    let http1 = hyper::server::conn::http1::Builder::new();
                    let Some(tls) = tls else {
                        let _ = http1.serve_connection(TokioIo::new(stream), svc).await;
                        return;
                    };
                    let stream = match tls.accept(stream).await {
                        Ok(stream) => stream,
                        Err(_) => {
                            c.tls_failures.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    };
                    c.tls_connections.fetch_add(1, Ordering::SeqCst);
                    if stream.get_ref().1.alpn_protocol() == Some(b"http/1.1") {
                        c.tls_alpn_http11.fetch_add(1, Ordering::SeqCst);
                    }
                    let _ = http1.serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Origin {
            addr,
            counts,
            server: Some(server),
        }
    }

    /// Starts an origin listening on a unix socket at `path` (which must
    /// not exist), speaking HTTP/1.1 as [`Origin::start`]'s does; its
    /// [`Origin::addr`] is `0.0.0.0:0`, meaning nothing. Stopping it
    /// closes the listener but leaves the socket file (a test removes it).
    pub async fn start_unix(path: &std::path::Path) -> Origin {
        let listener = tokio::net::UnixListener::bind(path).expect("bind unix origin");
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let server = tokio::spawn(async move {
            // Connections live in this set: aborting the server task closes them all.
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                c.connections.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| respond(c.clone(), req));
                    let http1 = hyper::server::conn::http1::Builder::new();
                    let _ = http1.serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Origin {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            counts,
            server: Some(server),
        }
    }

    /// Connections accepted so far, over TCP, TLS or a unix socket (the
    /// proxy's pool reuses them; each new one counts).
    pub fn connections(&self) -> u64 {
        self.counts.connections.load(Ordering::SeqCst)
    }

    /// `host:port`, for the proxy's `servers`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Bytes of generated bodies (`x-origin-stream-bytes`) handed to the
    /// connection so far, over all requests.
    pub fn bytes_streamed(&self) -> u64 {
        self.counts.streamed.load(Ordering::SeqCst)
    }

    /// Trickled bodies (`x-origin-trickle-ms`) sent to their end so far.
    pub fn bodies_trickled(&self) -> u64 {
        self.counts.trickled.load(Ordering::SeqCst)
    }

    /// TLS origins: handshakes completed so far (connections the proxy opened).
    pub fn tls_connections(&self) -> u64 {
        self.counts.tls_connections.load(Ordering::SeqCst)
    }

    /// TLS origins: handshakes that agreed on ALPN `http/1.1`.
    pub fn tls_alpn_http11(&self) -> u64 {
        self.counts.tls_alpn_http11.load(Ordering::SeqCst)
    }

    /// TLS origins: handshakes that failed (the client refused the
    /// certificate, or had none to show when one was required).
    pub fn tls_failures(&self) -> u64 {
        self.counts.tls_failures.load(Ordering::SeqCst)
    }

    /// Requests being answered now: from their arrival until their
    /// response body ended or was dropped.
    pub fn in_progress(&self) -> u64 {
        self.counts.in_progress.load(Ordering::SeqCst)
    }

    /// The most requests [`Origin::in_progress`] at once so far.
    pub fn peak_in_progress(&self) -> u64 {
        self.counts.peak_in_progress.load(Ordering::SeqCst)
    }

    /// Requests that reached this origin.
    pub fn hits(&self) -> u64 {
        self.counts.total.load(Ordering::SeqCst)
    }

    /// Requests for one path (the query is not part of it).
    pub fn hits_for(&self, path: &str) -> u64 {
        let by_path = self.counts.by_path.lock().expect("counts lock");
        by_path.get(path).copied().unwrap_or(0)
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.counts.requests.lock().expect("requests lock").clone()
    }

    /// The requests for one path (the query is not part of it), oldest first.
    pub fn requests_for(&self, path: &str) -> Vec<RecordedRequest> {
        let requests = self.counts.requests.lock().expect("requests lock");
        requests
            .iter()
            .filter(|r| r.path() == path)
            .cloned()
            .collect()
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
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The origin's response body: whole, or trickled in pieces.
type OriginBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

fn whole(bytes: impl Into<Bytes>) -> OriginBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// `x-origin-echo`: the request as received, one line each for the
/// method, version, target and body length, then every field line in order.
fn echo(parts: &http::request::Parts, body: Result<usize, hyper::Error>) -> String {
    let mut out = format!(
        "{} {:?} {}\nbody-bytes: {}\n",
        parts.method,
        parts.version,
        parts.uri,
        body.map_or_else(|e| format!("error {e}"), |n| n.to_string())
    );
    for (name, value) in &parts.headers {
        out.push_str(&format!(
            "{name}: {}\n",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    out
}

/// Byte `i` of a generated body (`x-origin-stream-bytes`): a checker can
/// verify any part of it without holding the whole.
pub fn stream_byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// Piece size of a generated body.
const STREAM_PIECE: u64 = 64 * 1024;

/// A generated body of `len` bytes, in pieces `pause` apart.
fn generated(counts: Arc<Counts>, len: u64, pause: Duration) -> OriginBody {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BodyError>>(1);
    tokio::spawn(async move {
        let mut at = 0u64;
        while at < len {
            let end = (at + STREAM_PIECE).min(len);
            let piece: Vec<u8> = (at..end).map(stream_byte).collect();
            if tx.send(Ok(Frame::data(Bytes::from(piece)))).await.is_err() {
                return;
            }
            counts.streamed.fetch_add(end - at, Ordering::SeqCst);
            at = end;
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    });
    ChanBody(rx).boxed()
}

/// A body sent in `pieces` pieces `pause` apart (`x-origin-trickle-ms`), ending
/// in an error instead after `abort_after` bytes (`x-origin-abort-after-bytes`).
fn trickle(
    counts: Arc<Counts>,
    body: Bytes,
    pause: Duration,
    abort_after: Option<u64>,
    pieces: usize,
) -> OriginBody {
    let (tx, rx) = tokio::sync::mpsc::channel::<
        Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>,
    >(1);
    tokio::spawn(async move {
        let piece = body.len().div_ceil(pieces.max(1)).max(1);
        let mut at = 0;
        while at < body.len() {
            let end = (at + piece).min(body.len());
            if abort_after.is_some_and(|limit| end as u64 > limit) {
                let _ = tx
                    .send(Err(
                        "origin aborts the body (x-origin-abort-after-bytes)".into()
                    ))
                    .await;
                return;
            }
            if tx.send(Ok(Frame::data(body.slice(at..end)))).await.is_err() {
                return;
            }
            at = end;
            if at < body.len() {
                tokio::time::sleep(pause).await;
            }
        }
        counts.trickled.fetch_add(1, Ordering::SeqCst);
    });
    ChanBody(rx).boxed()
}

type BodyError = Box<dyn std::error::Error + Send + Sync>;

struct ChanBody(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BodyError>>);

impl http_body::Body for ChanBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.0.poll_recv(cx)
    }
}

/// The request's headers plus the `x-origin-*` query parameters as headers.
fn with_query_steering(parts: &http::request::Parts) -> HeaderMap {
    let mut h = parts.headers.clone();
    let query = parts.uri.query().unwrap_or("");
    for pair in query.split('&') {
        let Some((name, value)) = pair.split_once('=') else {
            continue;
        };
        if !name.starts_with("x-origin-") {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&percent_decode(value)),
        ) {
            h.append(name, value);
        }
    }
    h
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// A request in progress, from its arrival until its response body ended
/// or was dropped (the client went away mid-delay or mid-body too).
struct InProgress(Arc<Counts>);

impl InProgress {
    fn enter(counts: Arc<Counts>) -> InProgress {
        let now = counts.in_progress.fetch_add(1, Ordering::SeqCst) + 1;
        counts.peak_in_progress.fetch_max(now, Ordering::SeqCst);
        InProgress(counts)
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::SeqCst);
    }
}

/// [`answer`], counted in progress until its body is over.
async fn respond(
    counts: Arc<Counts>,
    req: Request<Incoming>,
) -> Result<Response<OriginBody>, std::io::Error> {
    let guard = InProgress::enter(counts.clone());
    let resp = answer(counts, req).await?;
    Ok(resp.map(|inner| {
        Counted {
            inner,
            _guard: guard,
        }
        .boxed()
    }))
}

/// A response body counted in progress until it ends or is dropped; its
/// size hint and end are the inner body's (a `map_frame` would hide them,
/// and hyper would then send a known length chunked).
struct Counted {
    inner: OriginBody,
    _guard: InProgress,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

async fn answer(
    counts: Arc<Counts>,
    req: Request<Incoming>,
) -> Result<Response<OriginBody>, std::io::Error> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    // Recorded before it is counted: a test that saw a count can read the
    // request behind it (requests_for after hits_for).
    let at = {
        let mut requests = counts.requests.lock().expect("requests lock");
        requests.push(RecordedRequest {
            method: parts.method.clone(),
            path_and_query: parts
                .uri
                .path_and_query()
                .map_or_else(|| path.clone(), |pq| pq.as_str().to_string()),
            headers: parts.headers.clone(),
            body: Bytes::new(),
        });
        requests.len() - 1
    };
    let n = counts.total.fetch_add(1, Ordering::SeqCst) + 1;
    *counts
        .by_path
        .lock()
        .expect("counts lock")
        .entry(path.clone())
        .or_default() += 1;
    // Read a request body whole (echoed, recorded, or dropped), so the
    // connection stays usable; recorded once it is in.
    let received = body.collect().await.map(|b| b.to_bytes());
    if let Ok(got) = &received {
        let mut requests = counts.requests.lock().expect("requests lock");
        if let Some(recorded) = requests.get_mut(at) {
            recorded.body = got.clone();
        }
    }
    let steering = with_query_steering(&parts);
    let h = &steering;
    if let Some(ms) = number(h, "x-origin-delay-ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if number(h, "x-origin-close") == Some(1) {
        // hyper closes the connection without an answer.
        return Err(std::io::Error::other("x-origin-close"));
    }
    let mut body = match (h.get("x-origin-body"), h.contains_key("x-origin-echo")) {
        (Some(text), _) => String::from_utf8_lossy(text.as_bytes()).into_owned(),
        (None, true) => echo(&parts, received.map(|b| b.len())),
        (None, false) if h.contains_key("x-origin-echo-body") => {
            let got = received.as_deref().unwrap_or_default();
            format!(
                "{} n={n} body={}",
                parts.method,
                String::from_utf8_lossy(got)
            )
        }
        (None, false) => format!("path={path} n={n}"),
    };
    if let Some(size) = number(h, "x-origin-body-bytes") {
        while body.len() < size as usize {
            body.push('.');
        }
    }
    let status = number(h, "x-origin-status")
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut headers = HeaderMap::new();
    for (from, to) in [
        ("x-origin-cache-control", "cache-control"),
        ("x-origin-set-cookie", "set-cookie"),
    ] {
        if let Some(v) = h.get(from) {
            headers.insert(to, v.clone());
        }
    }
    for line in h.get_all("x-origin-header") {
        let Some((name, value)) = std::str::from_utf8(line.as_bytes())
            .ok()
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) {
            headers.append(name, value);
        }
    }
    let conditional = matches!(parts.method, Method::GET | Method::HEAD)
        && status == StatusCode::OK
        && !matches!(h.get("x-origin-ignore-conditionals"), Some(v) if v == "1");
    if conditional && not_modified(h, &headers) {
        let mut resp = Response::new(whole(Bytes::new()));
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        headers.remove(CONTENT_LENGTH);
        *resp.headers_mut() = headers;
        return Ok(resp);
    }
    if parts.method == Method::HEAD {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        body.clear();
    }
    if let Some(len) = number(h, "x-origin-stream-bytes") {
        let chunked = number(h, "x-origin-chunked") == Some(1);
        if !chunked || parts.method == Method::HEAD {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        }
        let pause = Duration::from_millis(number(h, "x-origin-stream-pause-ms").unwrap_or(0));
        let body = match parts.method {
            Method::HEAD => whole(Bytes::new()),
            _ => generated(counts.clone(), len, pause),
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        return Ok(resp);
    }
    let body = Bytes::from(body);
    let body = match number(h, "x-origin-trickle-ms") {
        Some(ms) if !body.is_empty() => {
            if number(h, "x-origin-chunked") != Some(1) {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
            }
            let abort = number(h, "x-origin-abort-after-bytes");
            let pieces = number(h, "x-origin-pieces").map_or(8, |n| n as usize);
            trickle(
                counts.clone(),
                body,
                Duration::from_millis(ms),
                abort,
                pieces,
            )
        }
        _ => whole(body),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    Ok(resp)
}

/// RFC 9110 §13.1.2 and §13.1.3, in the precedence of §13.2.2.
fn not_modified(request: &HeaderMap, response: &HeaderMap) -> bool {
    let inm: Vec<&str> = request
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    if !inm.is_empty() {
        let Some(etag) = response.get(ETAG).and_then(|v| v.to_str().ok()) else {
            return inm.contains(&"*");
        };
        let weak = |t: &str| t.trim().trim_start_matches("W/").to_string();
        return inm.iter().any(|t| *t == "*" || weak(t) == weak(etag));
    }
    let date = |map: &HeaderMap, name| {
        map.get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .and_then(|v| parse_http_date(v.trim()))
    };
    match (
        date(request, IF_MODIFIED_SINCE),
        date(response, LAST_MODIFIED),
    ) {
        (Some(since), Some(modified)) => since >= modified,
        _ => false,
    }
}

#[cfg(test)]
#[path = "origin_tests.rs"]
mod tests;
