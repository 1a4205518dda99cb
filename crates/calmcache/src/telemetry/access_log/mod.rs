//! The access log: one line per answered request, `combined` or `json`, to a
//! file (reopened on request, for logrotate) or to stdout.
//!
//! Owns the line formats, the writer thread (the `[access_log]` config types
//! are [`crate::config::access_log`])
//! and the response body wrapper that writes a request's line when its body
//! ends or is dropped.
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

use crate::config::access_log::{AccessLogConfig, LogFormat, LogTarget};
use crate::telemetry::metrics::Served;
use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use calmcache_core::AnswerClass;
use http::{HeaderValue, Method, Request, Response, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use serde::Serialize;

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
    pub(crate) fn begin<B>(&self, req: &Request<B>, peer: SocketAddr) -> Pending {
        let headers = req.headers();
        Pending {
            log: self.clone(),
            start: Instant::now(),
            peer,
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
    upstream_addr: Option<SocketAddr>,
    upstream_time: Option<Duration>,
}

impl Pending {
    fn write(self, outcome: &Outcome, bytes_sent: u64) {
        let uri = uri_text(&self.uri);
        let entry = Entry {
            time: SystemTime::now(),
            remote_addr: self.peer.ip(),
            method: self.method.as_str(),
            uri: &uri,
            protocol: protocol(self.version),
            status: outcome.status,
            bytes_sent,
            referer: self.referer.as_ref().map(HeaderValue::as_bytes),
            user_agent: self.user_agent.as_ref().map(HeaderValue::as_bytes),
            host: self.host.as_ref().map(HeaderValue::as_bytes),
            cache_status: outcome.cache_status,
            upstream_addr: outcome.upstream_addr,
            upstream_time: outcome.upstream_time,
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
    let (cache_status, upstream_addr, upstream_time) = served_of(&resp);
    let outcome = Outcome {
        status: resp.status().as_u16(),
        cache_status,
        upstream_addr,
        upstream_time,
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
            };
            pending.write(&outcome, 0);
        }
    }
}

/// The cache status, upstream address and upstream time of a response: the
/// one place that reads them, from the [`Served`] extension the proxy
/// attaches when the log is on (class and upstream call; an answer no route
/// counts, refused or unrouted, has its class too). Without a class: `-`.
fn served_of<B>(resp: &Response<B>) -> (&'static str, Option<SocketAddr>, Option<Duration>) {
    match resp.extensions().get::<Served>() {
        Some(served) => {
            let status = served.class.map_or("-", label_of);
            let call = served.upstream;
            (status, call.and_then(|c| c.addr), call.map(|c| c.elapsed))
        }
        None => ("-", None, None),
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
pub struct LoggedBody<B> {
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

/// Everything a line says.
struct Entry<'a> {
    time: SystemTime,
    remote_addr: IpAddr,
    method: &'a str,
    uri: &'a str,
    protocol: &'a str,
    status: u16,
    bytes_sent: u64,
    referer: Option<&'a [u8]>,
    user_agent: Option<&'a [u8]>,
    host: Option<&'a [u8]>,
    cache_status: &'a str,
    upstream_addr: Option<SocketAddr>,
    upstream_time: Option<Duration>,
    request_time: Duration,
}

/// A JSON line; the keys are a public interface.
#[derive(Serialize)]
struct JsonLine<'a> {
    time: &'a str,
    remote_addr: IpAddr,
    method: &'a str,
    uri: &'a str,
    protocol: &'a str,
    status: u16,
    bytes_sent: u64,
    referer: Option<Cow<'a, str>>,
    user_agent: Option<Cow<'a, str>>,
    cache_status: &'a str,
    upstream_addr: Option<SocketAddr>,
    upstream_time: Option<f64>,
    request_time: f64,
    host: Option<Cow<'a, str>>,
}

/// Appends `e` as one line (with its `\n`) to `out`.
fn format_line<'a>(format: LogFormat, e: &Entry<'a>, out: &mut String) {
    let civil = Civil::of(e.time);
    match format {
        LogFormat::Combined => {
            // $remote_addr - $remote_user [$time_local] "$request" $status
            // $body_bytes_sent "$http_referer" "$http_user_agent"
            let _ = write!(out, "{} - - [", e.remote_addr);
            civil.write_local(out);
            out.push_str("] \"");
            escape(e.method.as_bytes(), out);
            out.push(' ');
            escape(e.uri.as_bytes(), out);
            let _ = write!(out, " {}\" {} {} \"", e.protocol, e.status, e.bytes_sent);
            escape_or_dash(e.referer, out);
            out.push_str("\" \"");
            escape_or_dash(e.user_agent, out);
            out.push_str("\" \"");
            escape(e.cache_status.as_bytes(), out);
            out.push_str("\" ");
            match e.upstream_addr {
                Some(addr) => {
                    let _ = write!(out, "{addr}");
                }
                None => out.push('-'),
            }
            out.push(' ');
            match e.upstream_time {
                Some(t) => seconds(t, out),
                None => out.push('-'),
            }
            out.push(' ');
            seconds(e.request_time, out);
        }
        LogFormat::Json => {
            let mut time = String::with_capacity(24);
            civil.write_rfc3339(&mut time);
            let text = |v: Option<&'a [u8]>| v.map(String::from_utf8_lossy);
            let line = JsonLine {
                time: &time,
                remote_addr: e.remote_addr,
                method: e.method,
                uri: e.uri,
                protocol: e.protocol,
                status: e.status,
                bytes_sent: e.bytes_sent,
                referer: text(e.referer),
                user_agent: text(e.user_agent),
                cache_status: e.cache_status,
                upstream_addr: e.upstream_addr,
                upstream_time: e.upstream_time.map(millis_f64),
                request_time: millis_f64(e.request_time),
                host: text(e.host),
            };
            match serde_json::to_string(&line) {
                Ok(json) => out.push_str(&json),
                // Unreachable for these types; a line is still written.
                Err(_) => out.push_str("{}"),
            }
        }
    }
    out.push('\n');
}

/// Seconds with millisecond resolution, as a JSON number.
fn millis_f64(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}

/// `1.234`: seconds with milliseconds, as NGINX prints `$request_time`.
fn seconds(d: Duration, out: &mut String) {
    let _ = write!(out, "{}.{:03}", d.as_secs(), d.subsec_millis());
}

fn escape_or_dash(value: Option<&[u8]>, out: &mut String) {
    match value {
        Some(v) => escape(v, out),
        None => out.push('-'),
    }
}

/// NGINX's log escaping: `"`, `\`, control characters and every byte from
/// 0x7F up become `\xHH`, so a line stays one line of printable ASCII.
fn escape(bytes: &[u8], out: &mut String) {
    for &b in bytes {
        if !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\' {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
}

/// The request target as the client sent it (origin form, or the whole
/// absolute URI).
fn uri_text(uri: &Uri) -> Cow<'_, str> {
    match (uri.scheme(), uri.authority(), uri.path_and_query()) {
        (None, None, Some(pq)) => Cow::Borrowed(pq.as_str()),
        _ => Cow::Owned(uri.to_string()),
    }
}

fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

/// A UTC calendar time (times before 1970 print as 1970).
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    millis: u32,
}

impl Civil {
    fn of(time: SystemTime) -> Civil {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let in_day = secs % 86_400;
        Civil {
            year,
            month: u32::try_from(month).unwrap_or(1),
            day: u32::try_from(day).unwrap_or(1),
            hour: in_day / 3_600,
            minute: in_day % 3_600 / 60,
            second: in_day % 60,
            millis: since.subsec_millis(),
        }
    }

    /// `2024-05-01T12:34:56.789Z`
    fn write_rfc3339(&self, out: &mut String) {
        let _ = write!(
            out,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millis
        );
    }

    /// `01/May/2024:12:34:56 +0000` (NGINX's `$time_local`, in UTC).
    fn write_local(&self, out: &mut String) {
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let month = MONTHS
            .get(self.month.saturating_sub(1) as usize)
            .unwrap_or(&"Jan");
        let _ = write!(
            out,
            "{:02}/{month}/{:04}:{:02}:{:02}:{:02} +0000",
            self.day, self.year, self.hour, self.minute, self.second
        );
    }
}

/// Where the writer thread writes.
struct Sink {
    path: Option<PathBuf>,
    out: std::io::BufWriter<Box<dyn std::io::Write + Send>>,
    /// A write or flush failed and no success came since: warn once per run.
    failing: bool,
}

impl Sink {
    fn open(target: &LogTarget) -> std::io::Result<Sink> {
        let (path, out): (_, Box<dyn std::io::Write + Send>) = match target {
            LogTarget::Stdout => (None, Box::new(std::io::stdout())),
            LogTarget::File(path) => (Some(path.clone()), Box::new(open_append(path)?)),
        };
        Ok(Sink {
            path,
            out: std::io::BufWriter::with_capacity(BUFFER_BYTES, out),
            failing: false,
        })
    }

    fn write(&mut self, line: &str, shared: &Shared) {
        let result = self.out.write_all(line.as_bytes());
        if result.is_err() {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.outcome(result);
    }

    fn flush(&mut self) {
        let result = self.out.flush();
        self.outcome(result);
    }

    fn outcome(&mut self, result: std::io::Result<()>) {
        match result {
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!(path = ?self.path, "access log: writing again");
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                self.failing = true;
                // A disk that fails every other write would flap: limited too.
                static FAILED: calmcache_core::warn_limit::WarnLimit =
                    calmcache_core::warn_limit::WarnLimit::new();
                calmcache_core::warn_limited!(
                    FAILED,
                    "access log: write failed; lines are dropped until it works again",
                    path = ?self.path,
                    error = %e
                );
            }
            Err(_) => {}
        }
    }

    /// A new file at the path; the old one stays on a failure.
    fn reopen(&mut self) {
        let Some(path) = self.path.clone() else {
            return;
        };
        match open_append(&path) {
            Ok(file) => {
                self.flush();
                let old = std::mem::replace(
                    &mut self.out,
                    std::io::BufWriter::with_capacity(BUFFER_BYTES, Box::new(file)),
                );
                // Flushed above; what a failed flush held is lost, and counted then.
                let _ = old.into_parts();
                self.failing = false;
                tracing::info!(path = %path.display(), "access log reopened");
            }
            Err(e) => {
                tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "access log: cannot reopen; still writing to the old file"
                );
            }
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
}

/// The writer thread: lines in queue order, flushed at most `FLUSH_EVERY`
/// after the first unflushed one; ends (flushed) when every handle is gone.
fn write_lines(rx: Receiver<Msg>, mut sink: Sink, shared: &Shared) {
    let mut dirty_since: Option<Instant> = None;
    loop {
        if shared.reopen.swap(false, Ordering::AcqRel) {
            sink.reopen();
        }
        let msg = match dirty_since {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(since) => {
                rx.recv_timeout((since + FLUSH_EVERY).saturating_duration_since(Instant::now()))
            }
        };
        match msg {
            Ok(Msg::Line(line)) => {
                sink.write(&line, shared);
                dirty_since.get_or_insert_with(Instant::now);
            }
            Ok(Msg::Wake) => {}
            Ok(Msg::Flush(ack)) => {
                sink.flush();
                dirty_since = None;
                let _ = ack.send(());
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                sink.flush();
                return;
            }
        }
        if dirty_since.is_some_and(|since| since.elapsed() >= FLUSH_EVERY) {
            sink.flush();
            dirty_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use calmcache_core::CacheStatus;

    fn entry() -> Entry<'static> {
        Entry {
            // 2023-11-14T22:13:20.042Z
            time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_042),
            remote_addr: IpAddr::from([192, 0, 2, 7]),
            method: "GET",
            uri: "/a?b=1",
            protocol: "HTTP/1.1",
            status: 200,
            bytes_sent: 1234,
            referer: None,
            user_agent: Some(b"curl/8.5.0".as_slice()),
            host: Some(b"example.com".as_slice()),
            cache_status: "HIT",
            upstream_addr: None,
            upstream_time: None,
            request_time: Duration::from_micros(1_500),
        }
    }

    fn line(format: LogFormat, e: &Entry<'_>) -> String {
        let mut out = String::new();
        format_line(format, e, &mut out);
        assert!(
            out.ends_with('\n') && out.matches('\n').count() == 1,
            "{out:?}"
        );
        out.pop();
        out
    }

    #[test]
    fn combined_is_nginx_combined_plus_cache_fields() {
        assert_eq!(
            line(LogFormat::Combined, &entry()),
            r#"192.0.2.7 - - [14/Nov/2023:22:13:20 +0000] "GET /a?b=1 HTTP/1.1" 200 1234 "-" "curl/8.5.0" "HIT" - - 0.001"#
        );
        let upstream = Entry {
            cache_status: "MISS",
            referer: Some(b"https://example.com/".as_slice()),
            upstream_addr: Some("127.0.0.1:8081".parse().unwrap()),
            upstream_time: Some(Duration::from_millis(180)),
            request_time: Duration::from_millis(2_181),
            ..entry()
        };
        assert_eq!(
            line(LogFormat::Combined, &upstream),
            r#"192.0.2.7 - - [14/Nov/2023:22:13:20 +0000] "GET /a?b=1 HTTP/1.1" 200 1234 "https://example.com/" "curl/8.5.0" "MISS" 127.0.0.1:8081 0.180 2.181"#
        );
    }

    #[test]
    fn combined_escapes_quotes_backslashes_controls_and_high_bytes() {
        let e = Entry {
            uri: "/q?x=\"1\"",
            user_agent: Some(b"a\"b\\c\td\ne\x7f\xc3\xa9".as_slice()),
            referer: Some(b"".as_slice()),
            ..entry()
        };
        let text = line(LogFormat::Combined, &e);
        assert!(text.contains(r#""GET /q?x=\x221\x22 HTTP/1.1""#), "{text}");
        assert!(
            text.contains(r#" "" "a\x22b\x5Cc\x09d\x0Ae\x7F\xC3\xA9" "#),
            "{text}"
        );
    }

    #[test]
    fn json_has_every_key_and_escapes_through_serde() {
        let e = Entry {
            user_agent: Some(b"a\"b\n\xff".as_slice()),
            upstream_addr: Some("[::1]:8081".parse().unwrap()),
            upstream_time: Some(Duration::from_millis(5)),
            ..entry()
        };
        let text = line(LogFormat::Json, &e);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["time"], "2023-11-14T22:13:20.042Z");
        assert_eq!(v["remote_addr"], "192.0.2.7");
        assert_eq!(v["method"], "GET");
        assert_eq!(v["uri"], "/a?b=1");
        assert_eq!(v["protocol"], "HTTP/1.1");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes_sent"], 1234);
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(v["user_agent"], "a\"b\n\u{fffd}");
        assert_eq!(v["cache_status"], "HIT");
        assert_eq!(v["upstream_addr"], "[::1]:8081");
        assert_eq!(v["upstream_time"], 0.005);
        assert_eq!(v["request_time"], 0.001);
        assert_eq!(v["host"], "example.com");
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 14, "{keys:?}");
        let bare = line(LogFormat::Json, &entry());
        let v: serde_json::Value = serde_json::from_str(&bare).unwrap();
        assert_eq!(v["upstream_addr"], serde_json::Value::Null);
        assert_eq!(v["upstream_time"], serde_json::Value::Null);
    }

    #[test]
    fn times_match_httpdate_for_many_instants() {
        let mut t: u64 = 0;
        while t < 5_000_000_000 {
            let at = UNIX_EPOCH + Duration::from_secs(t);
            let civil = Civil::of(at);
            let mut local = String::new();
            civil.write_local(&mut local);
            // "Tue, 14 Nov 2023 22:13:20 GMT" -> "14/Nov/2023:22:13:20 +0000"
            let http = httpdate::fmt_http_date(at);
            let parts: Vec<&str> = http.split(' ').collect();
            let want = format!("{}/{}/{}:{} +0000", parts[1], parts[2], parts[3], parts[4]);
            assert_eq!(local, want, "at {t}");
            t += 7_919_993; // about three months, never on a boundary twice
        }
        let mut text = String::new();
        Civil::of(UNIX_EPOCH + Duration::from_millis(951_782_400_999)).write_rfc3339(&mut text);
        assert_eq!(text, "2000-02-29T00:00:00.999Z");
        let mut text = String::new();
        Civil::of(UNIX_EPOCH - Duration::from_secs(5)).write_rfc3339(&mut text);
        assert_eq!(text, "1970-01-01T00:00:00.000Z");
    }

    fn logged(served: Option<Served>) -> &'static str {
        // Even with our member in the header, the class comes from Served.
        let mut resp = Response::new(());
        resp.headers_mut().insert(
            "cache-status",
            HeaderValue::from_static("calmcache; hit; ttl=3"),
        );
        if let Some(served) = served {
            resp.extensions_mut().insert(served);
        }
        served_of(&resp).0
    }

    #[test]
    fn cache_status_is_the_class_of_the_answer() {
        let words = [
            (CacheStatus::Hit, "HIT"),
            (CacheStatus::HitRefreshEarly, "HIT"),
            (CacheStatus::StaleWhileRevalidate, "STALE"),
            (CacheStatus::StaleRefreshInFlight, "STALE"),
            (CacheStatus::StaleIfError, "STALE"),
            (CacheStatus::MissStored, "MISS"),
            (CacheStatus::MissNotStored, "MISS"),
            (CacheStatus::MissCollapsed, "MISS"),
            (CacheStatus::ExpiredStored, "MISS"),
            (CacheStatus::ExpiredCollapsed, "MISS"),
            (CacheStatus::Revalidated, "REVALIDATED"),
            (CacheStatus::RequestForced, "MISS"),
            (CacheStatus::RefreshedEarly, "MISS"),
            (CacheStatus::Bypass, "BYPASS"),
        ];
        assert_eq!(words.len(), CacheStatus::ALL.len());
        for (status, word) in words {
            let served = Served {
                class: Some(status.class()),
                upstream: None,
            };
            assert_eq!(logged(Some(served)), word, "{status:?}");
            assert_eq!(word, status.class().as_str().to_ascii_uppercase());
        }
        // No class noted, or no Served at all: `-`.
        let none = Served {
            class: None,
            upstream: None,
        };
        assert_eq!(logged(Some(none)), "-");
        assert_eq!(logged(None), "-");
    }

    #[test]
    fn the_writer_appends_flushes_and_reopens() {
        let dir = std::env::temp_dir().join(format!(
            "calmcache-access-log-unit-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        std::fs::write(&path, "old\n").unwrap();
        let config = AccessLogConfig {
            target: LogTarget::File(path.clone()),
            format: LogFormat::Combined,
        };
        let log = AccessLog::open(&config).unwrap();
        log.send("one\n".into());
        assert!(log.flush(Duration::from_secs(5)));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\none\n");
        let rotated = dir.join("access.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.reopen();
        log.send("two\n".into());
        assert!(log.flush(Duration::from_secs(5)));
        assert_eq!(std::fs::read_to_string(&rotated).unwrap(), "old\none\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        // Without an explicit flush, a line shows up within FLUSH_EVERY.
        log.send("three\n".into());
        let sent = Instant::now();
        while std::fs::read_to_string(&path).unwrap() != "two\nthree\n" {
            assert!(sent.elapsed() < Duration::from_secs(5), "never flushed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(log.dropped(), 0);
        drop(log);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unopenable_path_fails_at_open() {
        let config = AccessLogConfig {
            target: LogTarget::File("/nonexistent-calmcache-dir/access.log".into()),
            format: LogFormat::Json,
        };
        assert!(AccessLog::open(&config).is_err());
    }
}
