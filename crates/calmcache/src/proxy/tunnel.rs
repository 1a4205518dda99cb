//! WebSocket tunnels: an `Upgrade: websocket` request handed to the upstream
//! with its handshake headers and, after `101 Switching Protocols`, bytes
//! copied both ways until either side closes.
//!
//! ```text
//! proxy::answer ─ Connection: upgrade + Upgrade: websocket, route.websocket ─> open
//!   Upstream::send_upgrade (exactly Connection: upgrade + Upgrade: websocket,
//!   the end-to-end Sec-WebSocket-* fields, X-Forwarded-*; a connection of
//!   its own, never the pool's)
//!   ├─ error ──── 502/504 as for any request
//!   ├─ not 101 ── relayed as it came (status, headers, body)
//!   ├─ 101 that is not this handshake's (Upgrade other than websocket, no
//!   │   Connection: upgrade, Sec-WebSocket-Accept not the client key's) ── 502
//!   └─ 101 ────── the 101 with the upstream's headers to the client; a task
//!                 awaits the client's upgrade (hyper::upgrade::on), takes
//!                 its connection back out of hyper (downcast), and with the
//!                 upstream's TCP stream (upstream::Switched) pumps both
//!                 directions in one future: idle = no byte
//!                 either way for the upstream's read_timeout (as NGINX's
//!                 proxy_read_timeout), each write bounded by send_timeout
//! ```
//!
//! The pump is built for many quiet tunnels: reads land in a scratch buffer
//! on the stack and are written on at once, so a tunnel holds no buffer
//! while its peers keep up (only bytes a write left waiting are kept, in a
//! buffer of their own); the idle and write limits share one timer that a
//! message never touches (activity is one clock read per wake, the timer
//! is moved only when it fires or when a write starts to wait); and the
//! connections are driven directly (`conn::Clocked` over the client's TCP
//! or TLS stream, the upstream's TCP stream), not through hyper's boxed
//! `Upgraded`, its adapters and a lock per half. An IO hyper will not give
//! back (an h2c-detecting listener's) is pumped as `Upgraded`. The stop
//! flag is looked at (one atomic load) on each wake and its future polled
//! only when it changed: its waker stays registered from the first poll.
//!
//! The client side's writes also run under the connection's `[server]
//! send_timeout` (the pump writes through `conn::Clocked`): a client that
//! stops reading is cut by whichever limit comes first.
//!
//! Over HTTP/2 (RFC 8441, extended CONNECT; the listeners' SETTINGS enable
//! it, net/conn.rs) the handshake is a `CONNECT` with `:protocol =
//! websocket` ([`Handshake::Connect`], found by the edge): the upstream gets
//! the HTTP/1.1 handshake ([`Asked::of`]: a `GET`, a key of calmcache's,
//! the client's `Sec-WebSocket-Version`/`-Protocol`/`-Extensions`), and the
//! client a `200` on its stream for the upstream's 101 (RFC 8441 §5: no
//! `Sec-WebSocket-Accept`). The stream is hyper's `Upgraded` (its own
//! flow control per stream: a stalled tunnel holds only its window), pumped
//! as any other. An upstream that does not switch is relayed as on
//! HTTP/1.1, except a 2xx, which would open the stream: 502.
//!
//! A tunnel never looks up, stores or joins a flight: nothing of it is
//! cached. As in NGINX, an end of stream from either side ends the tunnel:
//! what was read before it is written on, the other side gets a FIN, and
//! both connections close (a WebSocket peer closes TCP only after the close
//! handshake, so the handshake runs end to end first).
//! Tunnels are counted in `Metrics::websockets_*` while open, and each
//! worker's [`Tunnels`] closes its own when the worker stops (after its
//! connections have drained), so a tunnel never holds up a shutdown.

use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;

use calmcache_core::CacheStatus;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use crate::http::body::{ResponseBody, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::{add_forwarded, has_token, set_cache_status, strip_hop_by_hop};
use crate::net::conn::{Clocked, PlainIo, TlsIo};
use crate::net::upstream::Switched;
use crate::proxy::answer::Answer;
use crate::proxy::edge::Handshake;
use crate::proxy::respond::error_response;
use crate::proxy::state::{Route, Worker};
use crate::telemetry::metrics::TunnelGuard;

/// The GUID of RFC 6455 §1.3, hashed with the client's key into the accept value.
const WEBSOCKET_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The `Sec-WebSocket-Accept` a server must answer `key` with (RFC 6455 §4.2.2).
pub fn accept_for(key: &[u8]) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    let mut sha = sha1::Sha1::new();
    sha.update(key);
    sha.update(WEBSOCKET_GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Marks a message as a WebSocket handshake: exactly `Upgrade: websocket`
/// and `Connection: upgrade`, whatever else the client's lists held (the
/// edge has already removed every hop-by-hop field).
fn set_upgrade(headers: &mut HeaderMap) {
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// Why an upstream's 101 is not a WebSocket handshake we may tunnel, or
/// `None` when it is: it must upgrade to `websocket` and prove it read
/// this client's key (RFC 6455 §4.1, the client's checks).
fn bad_switch(headers: &HeaderMap, key: &HeaderValue) -> Option<&'static str> {
    if !has_token(headers, &header::UPGRADE, "websocket") {
        return Some("a 101 without Upgrade: websocket");
    }
    if !has_token(headers, &header::CONNECTION, "upgrade") {
        return Some("a 101 without Connection: upgrade");
    }
    let accept = headers.get_all(header::SEC_WEBSOCKET_ACCEPT);
    let mut values = accept.iter();
    match (values.next(), values.next()) {
        (Some(got), None) if got.as_bytes() == accept_for(key.as_bytes()).as_bytes() => None,
        _ => Some("a 101 with a wrong Sec-WebSocket-Accept"),
    }
}

/// The client's side of a handshake: what it asked in, and the key the
/// upstream's `Sec-WebSocket-Accept` must answer.
struct Asked {
    handshake: Handshake,
    key: HeaderValue,
}

impl Asked {
    /// Rewrites `parts` into the HTTP/1.1 handshake the upstream gets, or
    /// says why the client's handshake is refused (400).
    ///
    /// RFC 8441 §5: an HTTP/2 `CONNECT` with `:protocol = websocket` becomes
    /// a `GET` with `Upgrade: websocket`; it carries no `Sec-WebSocket-Key`
    /// (the `:protocol` replaced it), so calmcache makes one, and checks the
    /// upstream's Accept against it. `Sec-WebSocket-Version`, `-Protocol`
    /// and `-Extensions` go end to end, as on HTTP/1.1 (RFC 6455 §4.1 makes
    /// the version required).
    fn of(parts: &mut http::request::Parts, handshake: Handshake) -> Result<Asked, &'static str> {
        if handshake != Handshake::Connect {
            let key = parts.headers.get(header::SEC_WEBSOCKET_KEY).cloned();
            let key = key.ok_or("no Sec-WebSocket-Key")?;
            return Ok(Asked { handshake, key });
        }
        if !parts.headers.contains_key(header::SEC_WEBSOCKET_VERSION) {
            return Err("no Sec-WebSocket-Version");
        }
        parts.method = Method::GET;
        parts.extensions.remove::<hyper::ext::Protocol>();
        crate::proxy::edge::ensure_host(&mut parts.headers, &parts.uri);
        let key = new_key();
        parts.headers.insert(header::SEC_WEBSOCKET_KEY, key.clone());
        Ok(Asked { handshake, key })
    }
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (RFC 6455 §4.1).
fn new_key() -> HeaderValue {
    use base64::Engine as _;
    let nonce: [u8; 16] = rand::random();
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    // Invariant: base64 is visible ASCII.
    HeaderValue::from_str(&key).unwrap_or(HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="))
}

/// Sends the handshake to the upstream and answers the client: the 101 (or,
/// to an HTTP/2 client, the 200 that opens its stream; the tunnel then runs
/// in a task of its own) or whatever else came.
pub(crate) async fn open<'r>(
    worker: &Worker,
    route: &'r Route,
    mut req: Request<Incoming>,
    (client, handshake): (crate::net::conn::Peer, Handshake),
    held: crate::proxy::limit::Held,
) -> Answer<'r> {
    let report = CacheStatus::Bypass.report();
    let upstream = &route.upstream;
    let client_side = hyper::upgrade::on(&mut req);
    let (mut parts, body) = req.into_parts();
    let asked = match Asked::of(&mut parts, handshake) {
        Ok(asked) => asked,
        Err(why) => {
            let e = ProxyError::downstream(ErrorKind::BadRequest, why);
            return Answer::answered(route, &report, error_response(&e, &report));
        }
    };
    set_upgrade(&mut parts.headers);
    add_forwarded(&mut parts.headers, client.addr.ip(), client.scheme());
    let (method, uri) = (&parts.method, &parts.uri);
    crate::proxy::header_rules::to_upstream(route, method, uri, &mut parts.headers, client);
    let body = TimeoutBody::new(body, upstream.send_timeout)
        .map_err(Into::into)
        .boxed();
    let sent = upstream
        .send_upgrade(Request::from_parts(parts, body))
        .await;
    route.activity.upstream_call(&sent);
    let (resp, switched) = match sent {
        Ok(sent) => sent,
        Err(e) => {
            if !e.repeats() {
                // Per request: a dead upstream must not flood the log.
                static FAILED: calmcache_core::warn_limit::WarnLimit =
                    calmcache_core::warn_limit::WarnLimit::new();
                calmcache_core::warn_limited!(FAILED, "websocket handshake failed",
                    upstream = %upstream.name, error = %e);
            }
            return crate::proxy::respond::failed(route, &e, report);
        }
    };
    let report = report.fwd_status(resp.status().as_u16());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return not_switched(route, &asked, resp, report);
    }
    if let Some(why) = bad_switch(resp.headers(), &asked.key) {
        // Dropping `resp` closes the upstream connection: it was switched.
        return broken(route, why);
    }
    let Some(upstream_side) = switched else {
        // send_upgrade gives every 101 its connection: not reached.
        return broken(route, "a 101 without its connection");
    };
    let (mut parts, _empty) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    switched_head(&mut parts, asked.handshake);
    let limits = Limits {
        idle: upstream.read_timeout,
        write: upstream.send_timeout,
    };
    let guard = worker.proxy.metrics.tunnel();
    let stop = worker.tunnels.enter();
    let name = upstream.name.clone();
    // The tunnel's connections places (limits) are left when it ends.
    let open = (guard, held);
    tokio::spawn(run(client_side, upstream_side, limits, stop, open, name));
    Answer::answered(
        route,
        &report,
        Response::from_parts(parts, ResponseBody::empty()),
    )
}

/// The head the client gets for the upstream's 101 (its hop-by-hop fields
/// gone). HTTP/1.1: the 101 with exactly `Upgrade: websocket`,
/// `Connection: upgrade`. HTTP/2 (RFC 8441 §5): a 200 opens the stream,
/// and `Sec-WebSocket-Accept` is not used (the key was calmcache's).
fn switched_head(parts: &mut http::response::Parts, handshake: Handshake) {
    if handshake == Handshake::Connect {
        parts.status = StatusCode::OK;
        parts.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
    } else {
        set_upgrade(&mut parts.headers);
    }
}

/// An upstream that did not switch: its answer passed back as it came
/// (status, headers, body), except that an HTTP/2 client never gets a 2xx
/// for it: RFC 9113 §8.5, a 2xx to a CONNECT opens the stream as a tunnel,
/// and this upstream has not opened one (502).
fn not_switched<'r>(
    route: &'r Route,
    asked: &Asked,
    resp: Response<crate::net::origin_body::OriginBody>,
    report: calmcache_core::Report,
) -> Answer<'r> {
    if asked.handshake == Handshake::Connect && resp.status().is_success() {
        return broken(route, "a 2xx instead of 101 to a websocket handshake");
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    route.strip_targeted(&mut parts.headers);
    set_cache_status(&mut parts.headers, &report, None);
    let read_timeout = route.upstream.read_timeout;
    let body = ResponseBody::stream(TimeoutBody::new(body, read_timeout));
    Answer::answered(route, &report, Response::from_parts(parts, body))
}

/// A 502 for an upstream answer that is not a handshake we may tunnel.
fn broken<'r>(route: &'r Route, why: &'static str) -> Answer<'r> {
    route.activity.upstream_errors.inc();
    static REFUSED: calmcache_core::warn_limit::WarnLimit =
        calmcache_core::warn_limit::WarnLimit::new();
    calmcache_core::warn_limited!(REFUSED, "websocket handshake refused",
        upstream = %route.upstream.name, why);
    let report = CacheStatus::Bypass.report();
    let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, why);
    Answer::answered(route, &report, error_response(&e, &report))
}

/// A tunnel's time limits.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// No byte in either direction for this long closes the tunnel.
    idle: Duration,
    /// One write that takes longer than this closes the tunnel.
    write: Duration,
}

/// Why a tunnel ended.
#[derive(Debug)]
enum End {
    /// One side ended its stream.
    Closed,
    /// Silent in both directions for the idle limit.
    Idle,
    /// The worker is stopping.
    Stopped,
}

/// Awaits the client's upgraded connection, then pumps bytes until the end.
async fn run(
    client: OnUpgrade,
    upstream: Switched,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    _open: (TunnelGuard, crate::proxy::limit::Held),
    name: String,
) {
    let upgraded = tokio::select! {
        r = timeout(limits.idle, client) => r,
        _ = stop.wait_for(|s| *s) => return,
    };
    let client = match upgraded {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => {
            tracing::debug!(upstream = %name, error = %e, "websocket upgrade failed");
            return;
        }
        Err(_) => {
            tracing::debug!(upstream = %name, "websocket upgrade did not complete");
            return;
        }
    };
    let (client, client_early) = ClientIo::of(client);
    let pumped = pump(
        (client, client_early),
        (upstream.io, upstream.read_buf),
        limits,
        stop,
    )
    .await;
    match pumped {
        Ok(end) => tracing::debug!(upstream = %name, end = ?end, "websocket tunnel ended"),
        Err(e) => tracing::debug!(upstream = %name, error = %e, "websocket tunnel broke"),
    }
}

/// The client's side of a tunnel, taken back out of hyper's `Upgraded`
/// when it is one of ours: the pump then reads and writes the connection
/// itself (its `send_timeout` clock included) instead of going through
/// hyper's boxed IO, its adapters and a lock per half.
// One per tunnel, inside the tunnel's own task: the plain connection kept
// inline (the common case) saves an allocation per tunnel.
#[allow(clippy::large_enum_variant)]
enum ClientIo {
    Plain(Clocked<TcpStream>),
    Tls(Box<Clocked<tokio_rustls::server::TlsStream<TcpStream>>>),
    /// Any other IO (an h2c-detecting listener wraps its own): as hyper gives it.
    Upgraded(TokioIo<Upgraded>),
}

impl ClientIo {
    /// The IO and the bytes the client sent past its handshake (read by
    /// hyper, not yet tunnelled).
    fn of(upgraded: Upgraded) -> (Self, Bytes) {
        let upgraded = match upgraded.downcast::<PlainIo>() {
            Ok(parts) => {
                let io = ClientIo::Plain(parts.io.into_inner().into_tunnel());
                return (io, parts.read_buf);
            }
            Err(upgraded) => upgraded,
        };
        match upgraded.downcast::<TlsIo>() {
            Ok(parts) => {
                let io = ClientIo::Tls(Box::new(parts.io.into_inner().into_tunnel()));
                (io, parts.read_buf)
            }
            Err(upgraded) => (ClientIo::Upgraded(TokioIo::new(upgraded)), Bytes::new()),
        }
    }
}

/// `AsyncRead` + `AsyncWrite` for an enum of IOs, by delegation.
macro_rules! delegate_io {
    ($ty:ident { $($variant:ident),+ }) => {
        impl AsyncRead for $ty {
            #[inline]
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(io) => Pin::new(io).poll_read(cx, buf),)+
                }
            }
        }

        impl AsyncWrite for $ty {
            #[inline]
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $($ty::$variant(io) => Pin::new(io).poll_write(cx, buf),)+
                }
            }

            #[inline]
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(io) => Pin::new(io).poll_flush(cx),)+
                }
            }

            fn poll_shutdown(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(io) => Pin::new(io).poll_shutdown(cx),)+
                }
            }
        }
    };
}

delegate_io!(ClientIo {
    Plain,
    Tls,
    Upgraded
});

/// Copies `a` to `b` and `b` to `a` until either side ends its stream, the
/// tunnel is idle for `limits.idle`, a write stalls for `limits.write`, an
/// error occurs, or the worker stops. Both connections close when it returns.
/// Each side comes with the bytes it sent before the tunnel began, which
/// go to the other side first.
///
/// One future for both directions and both clocks: each wake polls the
/// two directions, and what moved is noted by one clock read. The idle
/// limit and the write limit share one timer, which is only moved when it
/// fires (to the last activity + idle, if that is later) or when a write
/// starts to wait on a deadline nearer than the one it holds: a message
/// never touches the timer wheel.
async fn pump<A, B>(
    (mut a, a_early): (A, Bytes),
    (mut b, b_early): (B, Bytes),
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<End>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut a_to_b = Half::new(a_early);
    let mut b_to_a = Half::new(b_early);
    let mut last = Instant::now();
    let clock = sleep_until(last + limits.idle);
    let mut clock = std::pin::pin!(clock);
    // `stopped` holds `stop`; `peek` tells, by one atomic load, whether the
    // flag moved since (its waker, the task's, is registered once).
    let peek = stop.clone();
    let stopped = stop.wait_for(|s| *s);
    let mut stopped = std::pin::pin!(stopped);
    let mut waker: Option<std::task::Waker> = None;
    std::future::poll_fn(|cx| {
        let new_waker = !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if new_waker || peek.has_changed().unwrap_or(true) {
            if stopped.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(End::Stopped));
            }
            if new_waker {
                waker = Some(cx.waker().clone());
            }
        }
        let mut moved = false;
        // Reads land here and go straight on: a tunnel holds no buffer
        // while its peers take what it sends (nearly always).
        let mut scratch = [MaybeUninit::<u8>::uninit(); SCRATCH];
        let ab = a_to_b.poll(cx, &mut a, &mut b, &mut scratch, &mut moved);
        let ba = b_to_a.poll(cx, &mut b, &mut a, &mut scratch, &mut moved);
        match (ab, ba) {
            (Poll::Ready(Ok(())), _) | (_, Poll::Ready(Ok(()))) => {
                return Poll::Ready(Ok(End::Closed))
            }
            (Poll::Ready(Err(e)), _) | (_, Poll::Ready(Err(e))) => return Poll::Ready(Err(e)),
            (Poll::Pending, Poll::Pending) => {}
        }
        if moved {
            last = Instant::now();
        }
        // A write that began to wait: the timer must fire by its limit.
        let stall = match (a_to_b.stalled, b_to_a.stalled) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        if let Some(since) = stall {
            if since + limits.write < clock.deadline() {
                clock.as_mut().reset(since + limits.write);
            }
        }
        while clock.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if stall.is_some_and(|since| now >= since + limits.write) {
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("a write took longer than send_timeout {:?}", limits.write),
                )));
            }
            if now >= last + limits.idle {
                return Poll::Ready(Ok(End::Idle));
            }
            let next = stall.map_or(last + limits.idle, |since| {
                (since + limits.write).min(last + limits.idle)
            });
            clock.as_mut().reset(next);
        }
        Poll::Pending
    })
    .await
}

/// Bytes read at once: on the stack of the poll, so a size that moves
/// bulk transfers in few calls costs no memory per tunnel.
const SCRATCH: usize = 16 * 1024;

/// Unwritten bytes kept past a wait are dropped with their buffer when they
/// have gone out, unless the buffer is this small.
const SPILL_KEPT: usize = 4 * 1024;

/// One direction of a tunnel: reads from one side, writes to the other.
struct Half {
    /// Read but not yet taken by the other side (a write that waited).
    spill: Vec<u8>,
    /// How much of `spill` has been written.
    sent: usize,
    /// A write went out since the last flush.
    flush: bool,
    /// The reading side ended its stream: passed on as a shutdown.
    eof: bool,
    /// When the write (flush, shutdown) now waiting first found the other
    /// side taking nothing; `None` while writes make progress.
    stalled: Option<Instant>,
}

impl Half {
    fn new(early: Bytes) -> Self {
        Half {
            flush: !early.is_empty(),
            // A copy: `early` is a view of hyper's whole read buffer.
            spill: early.to_vec(),
            sent: 0,
            eof: false,
            stalled: None,
        }
    }

    /// Moves what can be moved now. `Ready(Ok)` once the end of stream has
    /// been passed on; `Pending` when waiting on either side.
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut R,
        to: &mut W,
        scratch: &mut [MaybeUninit<u8>],
        moved: &mut bool,
    ) -> Poll<std::io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            // What an earlier write left goes out first.
            while self.sent < self.spill.len() {
                let w = self.wrote(Pin::new(&mut *to).poll_write(cx, &self.spill[self.sent..]));
                self.sent += std::task::ready!(w)?;
                *moved = true;
            }
            if !self.spill.is_empty() {
                if self.spill.capacity() > SPILL_KEPT {
                    self.spill = Vec::new();
                } else {
                    self.spill.clear();
                }
                self.sent = 0;
            }
            if self.flush {
                let flushed = Pin::new(&mut *to).poll_flush(cx);
                std::task::ready!(self.waited(flushed))?;
                self.flush = false;
            }
            if self.eof {
                let shut = Pin::new(&mut *to).poll_shutdown(cx);
                return self.waited(shut);
            }
            let mut buf = ReadBuf::uninit(scratch);
            std::task::ready!(Pin::new(&mut *from).poll_read(cx, &mut buf))?;
            let data = buf.filled();
            if data.is_empty() {
                self.eof = true;
                continue;
            }
            *moved = true;
            self.flush = true;
            let mut sent = 0;
            while sent < data.len() {
                match self.wrote(Pin::new(&mut *to).poll_write(cx, &data[sent..])) {
                    Poll::Ready(n) => sent += n?,
                    Poll::Pending => {
                        self.spill.extend_from_slice(&data[sent..]);
                        return Poll::Pending;
                    }
                }
            }
        }
    }

    /// A write's outcome: an error for a write of nothing, the stall clock
    /// started when it waits, stopped when it made progress.
    fn wrote(&mut self, w: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        match self.waited(w) {
            Poll::Ready(Ok(0)) => Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
            other => other,
        }
    }

    /// Starts the stall clock when `op` waits, stops it when it is done.
    fn waited<T>(&mut self, op: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match op {
            Poll::Pending => {
                self.stalled.get_or_insert_with(Instant::now);
                Poll::Pending
            }
            done => {
                self.stalled = None;
                done
            }
        }
    }
}

#[cfg(test)]
#[path = "tunnel_tests.rs"]
mod tests;
