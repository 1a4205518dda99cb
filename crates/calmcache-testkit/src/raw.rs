//! Byte-level HTTP for hostile-input tests: an origin that records the exact
//! bytes of every request it gets and judges their framing strictly
//! ([`RawRecorder`]), HTTP/1 requests written byte for byte ([`send_raw`],
//! [`RawConn`]), and a hand-made HTTP/2 client ([`h2::H2Conn`]) that sends
//! whatever frames and header fields a test asks for, malformed ones included.
//!
//! The recorder's parser is its own (not hyper's), so a request hyper would
//! accept but a stricter or laxer server would read differently still shows
//! up as a violation in [`RawRecorder::assert_well_formed`].

pub mod h2;
pub mod hpack;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long the recorder waits for more bytes of a request it has begun
/// before it drops the connection.
const ORIGIN_READ_LIMIT: Duration = Duration::from_secs(10);

/// How long the recorder keeps an idle connection (longer than any test,
/// so that the proxy's pool never races a close).
const ORIGIN_IDLE_LIMIT: Duration = Duration::from_secs(120);

/// How long a raw client waits for any one read before it gives up.
pub const CLIENT_READ_LIMIT: Duration = Duration::from_secs(5);

/// Largest request head the recorder reads.
const MAX_HEAD: usize = 256 * 1024;

/// How a request's body was delimited on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No Content-Length and no Transfer-Encoding: no body.
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`, with the chunk sizes seen.
    Chunked(Vec<u64>),
}

/// One request as the recorder got it.
#[derive(Clone, Debug)]
pub struct RawRequest {
    /// The head, byte for byte, up to and including the empty line.
    pub head: Vec<u8>,
    /// The request line's method.
    pub method: String,
    /// The request line's target.
    pub target: String,
    /// The request line's version.
    pub version: String,
    /// Header fields in order: name as sent, value without the one space
    /// after the colon (anything else is kept, so bad whitespace shows).
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// How the body was delimited.
    pub framing: Framing,
    /// What was wrong with it (empty for a well-formed request).
    pub violations: Vec<String>,
    /// False when the connection ended (or stalled) before the body did.
    pub complete: bool,
    /// True when the framing cannot be trusted (both or several lengths,
    /// an unknown coding, a bad length): the recorder closes the
    /// connection after it instead of answering.
    pub ambiguous: bool,
}

impl RawRequest {
    /// Every value of a header (case-insensitive name), as lossy text.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect()
    }

    /// The first value of a header, if any.
    pub fn header(&self, name: &str) -> Option<String> {
        self.header_all(name).into_iter().next()
    }

    /// The head as lossy text (for messages).
    pub fn head_text(&self) -> String {
        String::from_utf8_lossy(&self.head).into_owned()
    }
}

#[derive(Default)]
struct Log {
    requests: Vec<RawRequest>,
    incomplete: Vec<RawRequest>,
    /// Byte streams the recorder could not read as a request at all.
    garbage: Vec<String>,
}

/// A TCP origin on `127.0.0.1:0` recording the exact bytes of every request.
///
/// It answers `200` with a small body (`got N bytes, request K`) and
/// `Cache-Control: max-age=60`, or `no-store` for a path containing
/// `/nocache`; a path containing `/slow` waits 300 ms first. Every request is
/// answered, malformed ones too (their violations are recorded), except one
/// whose body cannot be delimited for sure ([`RawRequest::ambiguous`], a
/// broken chunked body): it is recorded and its connection closed without
/// an answer. Connections are kept alive otherwise.
pub struct RawRecorder {
    addr: SocketAddr,
    log: Arc<Mutex<Log>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for RawRecorder {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RawRecorder {
    /// Starts it on the current runtime.
    pub async fn start() -> RawRecorder {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind recorder");
        let addr = listener.local_addr().expect("recorder addr");
        let log = Arc::new(Mutex::new(Log::default()));
        let shared = log.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        RawRecorder { addr, log, accept }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every complete request so far, in arrival order.
    pub fn requests(&self) -> Vec<RawRequest> {
        self.log().requests.clone()
    }

    /// Requests whose head arrived but whose body did not end (the proxy
    /// aborted them): not violations by themselves.
    pub fn incomplete(&self) -> Vec<RawRequest> {
        self.log().incomplete.clone()
    }

    /// How many complete requests arrived.
    pub fn count(&self) -> usize {
        self.log().requests.len()
    }

    /// How many requests arrived at all: complete, aborted, or unreadable.
    pub fn seen(&self) -> usize {
        let log = self.log();
        log.requests.len() + log.incomplete.len() + log.garbage.len()
    }

    /// Complete requests for a path (the target up to `?`).
    pub fn requests_for(&self, path: &str) -> Vec<RawRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.target.split('?').next() == Some(path))
            .collect()
    }

    /// Every violation recorded so far, each with the head it was found in.
    pub fn violations(&self) -> Vec<String> {
        let log = self.log();
        let mut out = Vec::new();
        for r in log.requests.iter().chain(&log.incomplete) {
            for v in &r.violations {
                out.push(format!("{v}\n    in: {:?}", r.head_text()));
            }
        }
        out.extend(log.garbage.iter().cloned());
        out
    }

    /// Panics listing every request that was not well-formed HTTP/1.1 (see
    /// the module doc of the checks in [`check_head`]).
    pub fn assert_well_formed(&self) {
        let violations = self.violations();
        if !violations.is_empty() {
            let mut msg = format!(
                "the origin received {} malformed request(s):\n",
                violations.len()
            );
            for v in violations {
                let _ = writeln!(msg, "  - {v}");
            }
            panic!("{msg}");
        }
    }
}

/// One read into `buf` within `limit`: `closed`, `read error` or `timed out` otherwise.
async fn fill<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    limit: Duration,
) -> Result<(), &'static str> {
    let mut chunk = [0u8; 16 * 1024];
    match tokio::time::timeout(limit, stream.read(&mut chunk)).await {
        Err(_) => Err("timed out"),
        Ok(Err(_)) => Err("read error"),
        Ok(Ok(0)) => Err("closed"),
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// Finds the end of a head: the index just past its empty line, and whether
/// it ended with a bare `\n\n` (a violation the parser reports too).
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn serve(mut stream: TcpStream, log: Arc<Mutex<Log>>) {
    let mut buf = Vec::new();
    let mut n = 0usize;
    loop {
        // The head.
        let end = loop {
            if let Some(end) = head_end(&buf) {
                break end;
            }
            if buf.len() > MAX_HEAD {
                let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                log.garbage.push(format!("a head over {MAX_HEAD} bytes"));
                return;
            }
            let limit = if buf.is_empty() {
                ORIGIN_IDLE_LIMIT
            } else {
                ORIGIN_READ_LIMIT
            };
            if fill(&mut stream, &mut buf, limit).await.is_err() {
                if !buf.is_empty() {
                    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                    log.garbage.push(format!(
                        "a head cut short: {:?}",
                        String::from_utf8_lossy(&buf)
                    ));
                }
                return;
            }
        };
        let head: Vec<u8> = buf.drain(..end).collect();
        let mut req = check_head(&head);
        // The body.
        let body = read_body(&mut stream, &mut buf, &mut req).await;
        // Other violations are answered (the test sees them in
        // assert_well_formed); a body whose end is unknown is not.
        let keep = body.is_ok() && !req.ambiguous;
        let (path_slow, no_store) = (
            req.target.contains("/slow"),
            req.target.contains("/nocache"),
        );
        let got = req.body.len();
        {
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            match body {
                Ok(()) => log.requests.push(req),
                Err(BodyEnd::Incomplete) => {
                    req.complete = false;
                    log.incomplete.push(req);
                }
                Err(BodyEnd::Malformed) => log.requests.push(req),
            }
        }
        if !keep {
            return;
        }
        n += 1;
        if path_slow {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let text = format!("got {got} bytes, request {n}\n");
        let cc = if no_store { "no-store" } else { "max-age=60" };
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: {cc}\r\n\
             Content-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if stream.write_all(resp.as_bytes()).await.is_err() {
            return;
        }
    }
}

enum BodyEnd {
    /// The connection ended or stalled inside the body.
    Incomplete,
    /// The chunked framing was broken (recorded as a violation).
    Malformed,
}

async fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    req: &mut RawRequest,
) -> Result<(), BodyEnd> {
    match req.framing.clone() {
        Framing::None => Ok(()),
        Framing::Length(len) => {
            let len = usize::try_from(len).map_err(|_| BodyEnd::Malformed)?;
            while buf.len() < len {
                if fill(stream, buf, ORIGIN_READ_LIMIT).await.is_err() {
                    req.body = std::mem::take(buf);
                    return Err(BodyEnd::Incomplete);
                }
            }
            req.body = buf.drain(..len).collect();
            Ok(())
        }
        Framing::Chunked(_) => {
            let mut sizes = Vec::new();
            let out = read_chunked(stream, buf, req, &mut sizes).await;
            req.framing = Framing::Chunked(sizes);
            out
        }
    }
}

/// Reads one CRLF-terminated line (without the CRLF); a bare LF is a violation.
async fn read_line(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    req: &mut RawRequest,
) -> Result<Vec<u8>, BodyEnd> {
    loop {
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = buf.drain(..=i).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            } else {
                req.violations
                    .push("chunked framing: a bare LF line ending".into());
                return Err(BodyEnd::Malformed);
            }
            return Ok(line);
        }
        if buf.len() > 4096 {
            req.violations
                .push("chunked framing: a line over 4 KiB".into());
            return Err(BodyEnd::Malformed);
        }
        if fill(stream, buf, ORIGIN_READ_LIMIT).await.is_err() {
            return Err(BodyEnd::Incomplete);
        }
    }
}

async fn read_chunked(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    req: &mut RawRequest,
    sizes: &mut Vec<u64>,
) -> Result<(), BodyEnd> {
    // Bounded: a chunk is at least one byte of size line.
    for _ in 0..1_000_000 {
        let line = read_line(stream, buf, req).await?;
        let (size, ext) = match line.iter().position(|&b| b == b';') {
            Some(i) => (&line[..i], Some(&line[i..])),
            None => (&line[..], None),
        };
        if let Some(ext) = ext {
            req.violations.push(format!(
                "chunk extension forwarded: {:?}",
                String::from_utf8_lossy(ext)
            ));
        }
        if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
            req.violations.push(format!(
                "chunked framing: bad chunk size {:?}",
                String::from_utf8_lossy(size)
            ));
            return Err(BodyEnd::Malformed);
        }
        let text = std::str::from_utf8(size).map_err(|_| BodyEnd::Malformed)?;
        let n = u64::from_str_radix(text, 16).map_err(|_| BodyEnd::Malformed)?;
        sizes.push(n);
        if n == 0 {
            // Trailers, then the empty line.
            for _ in 0..100 {
                let trailer = read_line(stream, buf, req).await?;
                if trailer.is_empty() {
                    return Ok(());
                }
            }
            req.violations
                .push("chunked framing: over 100 trailer lines".into());
            return Err(BodyEnd::Malformed);
        }
        let n = usize::try_from(n).map_err(|_| BodyEnd::Malformed)?;
        while buf.len() < n + 2 {
            if fill(stream, buf, ORIGIN_READ_LIMIT).await.is_err() {
                return Err(BodyEnd::Incomplete);
            }
        }
        req.body.extend(buf.drain(..n));
        if buf.drain(..2).as_slice() != b"\r\n" {
            req.violations
                .push("chunked framing: a chunk not followed by CRLF".into());
            return Err(BodyEnd::Malformed);
        }
    }
    req.violations
        .push("chunked framing: over a million chunks".into());
    Err(BodyEnd::Malformed)
}

/// RFC 9110 §5.6.2 `tchar`.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses and judges a request head (including its empty line) strictly.
/// Violations: a bare LF; a request line other than `METHOD SP
/// origin-form SP HTTP/1.1`; obs-fold; a header name with `_` or a byte
/// outside tchar; a value with CR, LF, NUL, another control byte or
/// leading/trailing whitespace; no Host or several; Content-Length twice,
/// not plain digits, or with a leading zero; Transfer-Encoding other than
/// exactly one `chunked`; both Content-Length and Transfer-Encoding.
pub fn check_head(head: &[u8]) -> RawRequest {
    let mut v: Vec<String> = Vec::new();
    // Lines: split on LF, note every LF not preceded by CR.
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' {
            let line = if i > start && head[i - 1] == b'\r' {
                &head[start..i - 1]
            } else {
                if !v.iter().any(|x| x.starts_with("bare LF")) {
                    v.push("bare LF line ending".into());
                }
                &head[start..i]
            };
            lines.push(line);
            start = i + 1;
        }
    }
    // The last line is the empty one.
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let request_line = lines.first().copied().unwrap_or_default();
    let parts: Vec<&[u8]> = request_line.split(|&b| b == b' ').collect();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (method, target, version) = match parts.as_slice() {
        [m, t, ver] => (text(m), text(t), text(ver)),
        _ => {
            v.push(format!(
                "request line is not METHOD SP target SP version: {:?}",
                text(request_line)
            ));
            (String::new(), String::new(), String::new())
        }
    };
    if !method.is_empty() && !method.bytes().all(is_tchar) {
        v.push(format!("method is not a token: {method:?}"));
    }
    if !version.is_empty() && version != "HTTP/1.1" {
        v.push(format!("version is not HTTP/1.1: {version:?}"));
    }
    if !target.is_empty() {
        let origin_form =
            target.starts_with('/') && target.bytes().all(|b| b > 0x20 && b < 0x7f && b != b'#');
        if !origin_form {
            v.push(format!("target is not origin-form: {target:?}"));
        }
        if target
            .split(['?'])
            .next()
            .is_some_and(|p| p.split('/').any(|s| s == ".." || s == "."))
        {
            v.push(format!("target has dot segments: {target:?}"));
        }
    }
    let mut headers = Vec::new();
    for line in lines.iter().skip(1) {
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            v.push(format!("obs-fold: {:?}", text(line)));
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            v.push(format!("header line without a colon: {:?}", text(line)));
            continue;
        };
        let name = &line[..colon];
        let mut value = &line[colon + 1..];
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) || name.contains(&b'_') {
            v.push(format!("bad header name: {:?}", text(name)));
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            v.push(format!(
                "control byte in the value of {}: {value:?}",
                text(name)
            ));
        }
        if value.first().is_some_and(|&b| b == b' ' || b == b'\t')
            || value.last().is_some_and(|&b| b == b' ' || b == b'\t')
        {
            v.push(format!(
                "whitespace around the value of {}: {:?}",
                text(name),
                text(value)
            ));
        }
        headers.push((text(name), value.to_vec()));
    }
    let all = |n: &str| -> Vec<String> {
        headers
            .iter()
            .filter(|(h, _)| h.eq_ignore_ascii_case(n))
            .map(|(_, val)| text(val))
            .collect()
    };
    let hosts = all("host");
    if hosts.len() != 1 {
        v.push(format!("{} Host fields: {hosts:?}", hosts.len()));
    }
    let lengths = all("content-length");
    let codings = all("transfer-encoding");
    if lengths.len() > 1 {
        v.push(format!(
            "{} Content-Length fields: {lengths:?}",
            lengths.len()
        ));
    }
    if !lengths.is_empty() && !codings.is_empty() {
        v.push(format!(
            "both Content-Length {lengths:?} and Transfer-Encoding {codings:?}"
        ));
    }
    let mut ambiguous = lengths.len() > 1 || (!lengths.is_empty() && !codings.is_empty());
    let mut framing = Framing::None;
    if let Some(cl) = lengths.first() {
        let plain = !cl.is_empty()
            && cl.len() <= 18
            && cl.bytes().all(|b| b.is_ascii_digit())
            && (cl == "0" || !cl.starts_with('0'));
        match cl.parse::<u64>() {
            Ok(n) if plain => framing = Framing::Length(n),
            _ => {
                ambiguous = true;
                v.push(format!("Content-Length is not plain digits: {cl:?}"));
            }
        }
    }
    if !codings.is_empty() {
        if codings.len() != 1 || !codings[0].eq_ignore_ascii_case("chunked") {
            ambiguous = true;
            v.push(format!(
                "Transfer-Encoding other than one chunked: {codings:?}"
            ));
        }
        if codings
            .iter()
            .any(|c| c.to_ascii_lowercase().ends_with("chunked"))
        {
            framing = Framing::Chunked(Vec::new());
        }
    }
    RawRequest {
        head: head.to_vec(),
        method,
        target,
        version,
        headers,
        body: Vec::new(),
        framing,
        violations: v,
        complete: true,
        ambiguous,
    }
}

/// One HTTP/1 response as a raw client read it.
#[derive(Clone, Debug, Default)]
pub struct RawResponse {
    /// The final status (0 when the server closed without answering).
    pub status: u16,
    /// Interim (1xx) statuses that came first.
    pub interim: Vec<u16>,
    /// The status line's version, e.g. `HTTP/1.1`.
    pub version: String,
    /// Header fields in order (names as sent).
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
    /// The head as text (for messages).
    pub head: String,
    /// True when the server closed the connection after this response (as
    /// far as the client saw).
    pub closed: bool,
}

impl RawResponse {
    /// Every value of a header (case-insensitive name).
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first value of a header, or "".
    pub fn header(&self, name: &str) -> &str {
        self.header_all(name).first().copied().unwrap_or("")
    }

    /// `status`, or a description of how it ended, for messages.
    pub fn describe(&self) -> String {
        if self.status == 0 {
            "closed without an answer".into()
        } else {
            let mut s = self.status.to_string();
            if !self.interim.is_empty() {
                s = format!("{:?} then {s}", self.interim);
            }
            if self.closed {
                s.push_str(" (closed)");
            }
            s
        }
    }
}

/// Anything a raw client can talk through (TCP or TLS).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A raw HTTP/1 connection: write any bytes, read responses one at a time.
pub struct RawConn {
    stream: Box<dyn Io>,
    buf: Vec<u8>,
    eof: bool,
}

impl RawConn {
    /// Connects over TCP.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<RawConn> {
        let stream = tokio::time::timeout(CLIENT_READ_LIMIT, TcpStream::connect(addr))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect"))??;
        Ok(RawConn::over(Box::new(stream)))
    }

    /// Talks over an established stream (e.g. TLS).
    pub fn over(stream: Box<dyn Io>) -> RawConn {
        RawConn {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Writes `bytes` as they are.
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    async fn more(&mut self) -> Result<bool, String> {
        if self.eof {
            return Ok(false);
        }
        match fill(&mut self.stream, &mut self.buf, CLIENT_READ_LIMIT).await {
            Ok(()) => Ok(true),
            Err("closed") | Err("read error") => {
                self.eof = true;
                Ok(false)
            }
            Err(e) => Err(format!(
                "no answer within {CLIENT_READ_LIMIT:?} ({e}); got {:?}",
                String::from_utf8_lossy(&self.buf)
            )),
        }
    }

    /// Reads one response (after any 1xx); `status` 0 when the connection
    /// closed before a head. Errs when the server stalls for
    /// [`CLIENT_READ_LIMIT`] (a hang fails the test instead of blocking it).
    /// `head_only` is for answers to HEAD.
    pub async fn read_response(&mut self, head_only: bool) -> Result<RawResponse, String> {
        let mut resp = RawResponse::default();
        for _ in 0..10 {
            let end = loop {
                if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                if self.buf.len() > MAX_HEAD {
                    return Err("a response head over 256 KiB".into());
                }
                if !self.more().await? {
                    resp.closed = true;
                    if !self.buf.is_empty() {
                        return Err(format!(
                            "closed inside a response head: {:?}",
                            String::from_utf8_lossy(&self.buf)
                        ));
                    }
                    return Ok(resp);
                }
            };
            let head: Vec<u8> = self.buf.drain(..end).collect();
            let text = String::from_utf8_lossy(&head).into_owned();
            let mut lines = text.split("\r\n");
            let status_line = lines.next().unwrap_or_default();
            let mut parts = status_line.splitn(3, ' ');
            resp.version = parts.next().unwrap_or_default().to_string();
            let status: u16 = parts
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad status line {status_line:?}"))?;
            resp.headers = lines
                .filter(|l| !l.is_empty())
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.to_string(), v.trim().to_string()))
                .collect();
            resp.head = text;
            if (100..200).contains(&status) && status != 101 {
                resp.interim.push(status);
                continue;
            }
            resp.status = status;
            break;
        }
        if resp.status == 0 {
            return Err("more than 10 interim responses".into());
        }
        let chunked = resp
            .header_all("transfer-encoding")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("chunked"));
        let no_body = head_only || resp.status == 204 || resp.status == 304;
        if no_body {
        } else if chunked {
            resp.body = self.read_chunked_body().await?;
        } else if let Some(len) = resp
            .header("content-length")
            .parse::<usize>()
            .ok()
            .filter(|_| !resp.header("content-length").is_empty())
        {
            while self.buf.len() < len {
                if !self.more().await? {
                    return Err(format!("closed inside a {len}-byte body"));
                }
            }
            resp.body = self.buf.drain(..len).collect();
        } else {
            // Delimited by the close.
            for _ in 0..100_000 {
                if !self.more().await? {
                    break;
                }
            }
            resp.body = std::mem::take(&mut self.buf);
        }
        let says_close = resp
            .header_all("connection")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("close"));
        resp.closed = self.eof
            || (says_close && self.buf.is_empty() && self.closes_within(CLIENT_READ_LIMIT).await);
        Ok(resp)
    }

    async fn read_chunked_body(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        for _ in 0..1_000_000 {
            let line = loop {
                if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                    break String::from_utf8_lossy(&line[..i]).into_owned();
                }
                if !self.more().await? {
                    return Err("closed inside a chunked body".into());
                }
            };
            let size = line.split(';').next().unwrap_or_default().trim();
            let n = usize::from_str_radix(size, 16)
                .map_err(|_| format!("bad chunk size line {line:?}"))?;
            if n == 0 {
                // Trailers up to the empty line.
                loop {
                    if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        self.buf.drain(..i + 2);
                        if i == 0 {
                            return Ok(body);
                        }
                        continue;
                    }
                    if !self.more().await? {
                        return Err("closed inside trailers".into());
                    }
                }
            }
            while self.buf.len() < n + 2 {
                if !self.more().await? {
                    return Err("closed inside a chunk".into());
                }
            }
            body.extend(self.buf.drain(..n));
            self.buf.drain(..2);
        }
        Err("over a million chunks".into())
    }

    /// Waits up to `limit` for the first bytes from the server and returns
    /// what has arrived (kept for [`RawConn::read_response`]).
    pub async fn peek_within(&mut self, limit: Duration) -> Vec<u8> {
        if self.buf.is_empty() && !self.eof {
            if let Err("closed") | Err("read error") =
                fill(&mut self.stream, &mut self.buf, limit).await
            {
                self.eof = true;
            }
        }
        self.buf.clone()
    }

    /// True when the server closes the connection within `limit` (bytes
    /// that arrive meanwhile are kept for the next response).
    pub async fn closes_within(&mut self, limit: Duration) -> bool {
        if self.eof {
            return true;
        }
        let deadline = tokio::time::Instant::now() + limit;
        for _ in 0..1000 {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            match fill(&mut self.stream, &mut self.buf, left).await {
                Ok(()) => continue,
                Err("timed out") => return false,
                Err(_) => {
                    self.eof = true;
                    return true;
                }
            }
        }
        false
    }
}

/// Connects to `addr`, writes `bytes`, and reads one response (see
/// [`RawConn::read_response`]); `Err` describes a connect failure or a stall.
pub async fn try_send_raw(addr: SocketAddr, bytes: &[u8]) -> Result<RawResponse, String> {
    let mut conn = RawConn::connect(addr).await.map_err(|e| e.to_string())?;
    // A server may answer and close before reading everything: a failed
    // write is not the end, the answer may still be there.
    let _ = conn.send(bytes).await;
    let head_only = bytes.starts_with(b"HEAD ");
    let mut resp = conn.read_response(head_only).await?;
    if !resp.closed && resp.status != 0 {
        resp.closed = conn.closes_within(Duration::from_millis(20)).await;
    }
    Ok(resp)
}

/// [`try_send_raw`], panicking when there is no answer in time.
pub async fn send_raw(addr: SocketAddr, bytes: &[u8]) -> RawResponse {
    try_send_raw(addr, bytes)
        .await
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(bytes)))
}

/// Sends `requests` one after another on one connection, reading each answer
/// before the next request; stops early when the server closes.
pub async fn send_raw_keepalive(
    addr: SocketAddr,
    requests: &[&[u8]],
) -> Result<Vec<RawResponse>, String> {
    let mut conn = RawConn::connect(addr).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for req in requests {
        if conn.eof {
            break;
        }
        let _ = conn.send(req).await;
        let resp = conn.read_response(req.starts_with(b"HEAD ")).await?;
        let closed = resp.closed;
        out.push(resp);
        if closed {
            break;
        }
    }
    if let Some(last) = out.last_mut() {
        if !last.closed && last.status != 0 {
            last.closed = conn.closes_within(Duration::from_millis(200)).await;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_clean_head_has_no_violations() {
        let r = check_head(b"POST /a?b=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n");
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.framing, Framing::Length(3));
        assert_eq!(r.header("host").as_deref(), Some("x"));
    }

    #[test]
    fn each_smuggling_shape_is_a_violation() {
        let bad: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX_Y: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Y: 1 \r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Y: a\0b\r\n\r\n",
            b"GET / HTTP/1.1\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Y: a\r\n b\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: x\r\n\r\n",
            b"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 010\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
        ];
        for head in bad {
            let r = check_head(head);
            assert!(
                !r.violations.is_empty(),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
