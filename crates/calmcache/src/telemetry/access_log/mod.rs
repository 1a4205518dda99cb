//! The access log: one line per answered request, `combined` or `json`, to a
//! file (reopened on request, for logrotate) or to stdout.
//!
//! Owns the response body wrapper that writes a request's line when its
//! body ends or is dropped (here), the line formats (`format.rs`) and the
//! writer thread (`writer.rs`); the `[access_log]` config types are
//! [`crate::config::access_log`].
//!
//! ```text
//! worker: Pending (request line, headers, peer, start) ── handler ──> Response
//!         LoggedBody counts data bytes; at the end (or drop): format the line
//!         ── try_send (bounded queue; full: drop and count) ──> writer thread
//! writer: BufWriter over the file (append) or stdout, flushed at most 200 ms
//!         after a line arrives; reopen() swaps the file for a new one at the path.
//! ```
//!
//! Writing never blocks a worker and never panics: I/O errors are logged once
//! per run of failures and the lines they hit are counted as dropped.
//! Without an `[access_log]` table none of this is on the request path.

use crate::config::access_log::{AccessLogConfig, LogFormat};
use crate::telemetry::metrics::{Served, UpstreamCall};
use crate::telemetry::upstream_conns::ConnUse;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use calmcache_core::AnswerClass;
use http::{HeaderValue, Method, Request, Response, Uri, Version};
use http_body::{Body, Frame, SizeHint};

/// Lines queued for the writer thread before new ones are dropped.
const QUEUE_LINES: usize = 65_536;
/// A written line reaches the file at most this long after it was queued.
const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// The writer's buffer.
const BUFFER_BYTES: usize = 64 * 1024;

/// A running access log: a handle on its writer thread. Cheap to clone; the
/// thread flushes and ends when the last handle is dropped.
#[derive(Clone)]
pub struct AccessLog(Arc<Inner>);

struct Inner {
    tx: SyncSender<Msg>,
    format: LogFormat,
    shared: Arc<Shared>,
}

/// State the writer thread shares with the handles.
#[derive(Default)]
struct Shared {
    dropped: AtomicU64,
    reopen: AtomicBool,
}

enum Msg {
    Line(String),
    /// Look at the `reopen` flag.
    Wake,
    /// Flush, then answer.
    Flush(mpsc::Sender<()>),
}

impl AccessLog {
    /// Opens the target now (so a bad path fails the start, not the first
    /// request) and starts the writer thread.
    pub fn open(config: &AccessLogConfig) -> std::io::Result<AccessLog> {
        let sink = Sink::open(&config.target)?;
        let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
        let shared = Arc::new(Shared::default());
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("calmcache-access-log".into())
            .spawn(move || write_lines(rx, sink, &thread_shared))?;
        Ok(AccessLog(Arc::new(Inner {
            tx,
            format: config.format,
            shared,
        })))
    }

    /// Asks the writer to reopen the file at its path (after logrotate moved
    /// it away). Lines already queued may go to either file. No effect on stdout.
    pub fn reopen(&self) {
        self.0.shared.reopen.store(true, Ordering::Release);
        // A full queue means the writer is busy and sees the flag soon.
        let _ = self.0.tx.try_send(Msg::Wake);
    }

    /// Lines lost since start: the queue was full, or the write failed.
    pub fn dropped(&self) -> u64 {
        self.0.shared.dropped.load(Ordering::Relaxed)
    }

    /// Writes out every line queued so far; false if that took longer than
    /// `limit`. Blocks: call it from a blocking thread (shutdown).
    pub fn flush(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let (ack, done) = mpsc::channel();
        let mut msg = Msg::Flush(ack);
        loop {
            match self.0.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    msg = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        done.recv_timeout(left).is_ok()
    }

    /// Notes what the line needs from a request, before it is handled.
    /// A request from `peer` (through `balancer`, the PROXY protocol
    /// sender, when there was one) begins.
    pub(crate) fn begin<B>(
        &self,
        req: &Request<B>,
        peer: SocketAddr,
        balancer: Option<std::net::IpAddr>,
    ) -> Pending {
        let headers = req.headers();
        Pending {
            log: self.clone(),
            start: Instant::now(),
            peer,
            balancer,
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            host: headers.get(http::header::HOST).cloned(),
            referer: headers.get(http::header::REFERER).cloned(),
            user_agent: headers.get(http::header::USER_AGENT).cloned(),
        }
    }

    fn send(&self, line: String) {
        if self.0.tx.try_send(Msg::Line(line)).is_err() {
            self.0.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A request whose line is not written yet.
pub(crate) struct Pending {
    log: AccessLog,
    start: Instant,
    peer: SocketAddr,
    balancer: Option<std::net::IpAddr>,
    method: Method,
    uri: Uri,
    version: Version,
    host: Option<HeaderValue>,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
}

/// What the response told about itself.
struct Outcome {
    status: u16,
    cache_status: &'static str,
    upstream_addr: Option<Arc<str>>,
    upstream_time: Option<Duration>,
    /// Time waited for an origin slot (`max_inflight`), when any.
    origin_wait: Option<Duration>,
    /// Whether the upstream answer's connection was new or reused.
    upstream_connection: Option<ConnUse>,
}

impl Pending {
    fn write(self, outcome: &Outcome, bytes_sent: u64) {
        let uri = uri_text(&self.uri);
        let entry = Entry {
            time: SystemTime::now(),
            remote_addr: self.peer.ip(),
            realip_remote_addr: self.balancer,
            method: self.method.as_str(),
            uri: &uri,
            protocol: protocol(self.version),
            status: outcome.status,
            bytes_sent,
            referer: self.referer.as_ref().map(HeaderValue::as_bytes),
            user_agent: self.user_agent.as_ref().map(HeaderValue::as_bytes),
            host: self.host.as_ref().map(HeaderValue::as_bytes),
            cache_status: outcome.cache_status,
            upstream_addr: outcome.upstream_addr.as_deref(),
            upstream_time: outcome.upstream_time,
            origin_wait: outcome.origin_wait,
            upstream_connection: outcome.upstream_connection.map(ConnUse::as_str),
            request_time: self.start.elapsed(),
        };
        let mut line = String::with_capacity(256);
        format_line(self.log.0.format, &entry, &mut line);
        self.log.send(line);
    }
}

/// Runs `handler` for a request noted in `pending` and wraps its body so the
/// line is written when the body ends. A client gone before the response
/// head still gets a line: status 499, as NGINX writes it.
pub(crate) async fn serve<F, B>(
    pending: Pending,
    handler: F,
) -> Result<Response<LoggedBody<B>>, Infallible>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    let mut guard = Unanswered(Some(pending));
    let resp = match handler.await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    let (cache_status, call) = served_of(&resp);
    let outcome = Outcome {
        status: resp.status().as_u16(),
        cache_status,
        upstream_time: call.as_ref().map(|c| c.elapsed),
        origin_wait: call.as_ref().map(|c| c.waited).filter(|w| !w.is_zero()),
        upstream_connection: call.as_ref().and_then(|c| c.connection),
        upstream_addr: call.and_then(|c| c.addr),
    };
    let pending = guard.0.take();
    Ok(resp.map(|inner| LoggedBody {
        inner,
        bytes: 0,
        line: pending.map(|p| (p, outcome)),
    }))
}

/// Writes the 499 line if the handler is dropped before it answers.
struct Unanswered(Option<Pending>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(pending) = self.0.take() {
            let outcome = Outcome {
                status: 499,
                cache_status: "-",
                upstream_addr: None,
                upstream_time: None,
                origin_wait: None,
                upstream_connection: None,
            };
            pending.write(&outcome, 0);
        }
    }
}

/// The cache status, upstream address and upstream time of a response: the
/// one place that reads them, from the [`Served`] extension the proxy
/// attaches when the log is on (class and upstream call; an answer no route
/// counts, refused or unrouted, has its class too). Without a class: `-`.
fn served_of<B>(resp: &Response<B>) -> (&'static str, Option<UpstreamCall>) {
    match resp.extensions().get::<Served>() {
        Some(served) => (served.class.map_or("-", label_of), served.upstream.clone()),
        None => ("-", None),
    }
}

/// The log's word for an answer's class: its label in capitals.
fn label_of(class: AnswerClass) -> &'static str {
    match class {
        AnswerClass::Hit => "HIT",
        AnswerClass::Miss => "MISS",
        AnswerClass::Stale => "STALE",
        AnswerClass::Revalidated => "REVALIDATED",
        AnswerClass::Bypass => "BYPASS",
    }
}

/// A response body that counts its data bytes and writes the request's
/// line when it ends, or when it is dropped (cut off, or never polled, as
/// for HEAD): exactly once.
pub(crate) struct LoggedBody<B> {
    inner: B,
    bytes: u64,
    line: Option<(Pending, Outcome)>,
}

impl<B> LoggedBody<B> {
    fn finish(&mut self) {
        if let Some((pending, outcome)) = self.line.take() {
            pending.write(&outcome, self.bytes);
        }
    }
}

impl<B: Body + Unpin> Body for LoggedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes += bytes::Buf::remaining(data) as u64;
                }
            }
            Poll::Ready(None) => this.finish(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for LoggedBody<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

mod format;
mod writer;

use format::{format_line, protocol, uri_text, Entry};
use writer::{write_lines, Sink};

#[cfg(test)]
mod tests;
