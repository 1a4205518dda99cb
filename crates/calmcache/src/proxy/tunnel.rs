//! WebSocket tunnels: an `Upgrade: websocket` request handed to the upstream
//! with its handshake headers and, after `101 Switching Protocols`, bytes
//! copied both ways until either side closes.
//!
//! ```text
//! proxy::answer ─ Connection: upgrade + Upgrade: websocket, route.websocket ─> open
//!   Upstream::send_upgrade (exactly Connection: upgrade + Upgrade: websocket,
//!   the end-to-end Sec-WebSocket-* fields, X-Forwarded-*)
//!   ├─ error ──── 502/504 as for any request
//!   ├─ not 101 ── relayed as it came (status, headers, body)
//!   ├─ 101 that is not this handshake's (Upgrade other than websocket, no
//!   │   Connection: upgrade, Sec-WebSocket-Accept not the client key's) ── 502
//!   └─ 101 ────── the 101 with the upstream's headers to the client; a task
//!                 awaits both upgrades (hyper::upgrade::on, client and upstream
//!                 side) and pumps: one copy per direction, one idle clock
//!                 reset by either (the upstream's read_timeout, as NGINX's
//!                 proxy_read_timeout), each write bounded by send_timeout
//! ```
//!
//! The client side's writes also run under the connection's `[server]
//! send_timeout` (`conn::Clocked` is under the upgraded IO): a client that
//! stops reading is cut by whichever limit comes first.
//!
//! A tunnel never looks up, stores or joins a flight: nothing of it is
//! cached. As in NGINX, an end of stream from either side ends the tunnel:
//! what was read before it is written on, the other side gets a FIN, and
//! both connections close (a WebSocket peer closes TCP only after the close
//! handshake, so the handshake runs end to end first).
//! Tunnels are counted in `Metrics::websockets_*` while open, and each
//! worker's [`Tunnels`] closes its own when the worker stops (after its
//! connections have drained), so a tunnel never holds up a shutdown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use calmcache_core::CacheStatus;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use crate::http::body::{ResponseBody, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::{add_forwarded, has_token, set_cache_status, strip_hop_by_hop};
use crate::proxy::respond::error_response;
use crate::proxy::state::{Route, Worker};
use crate::telemetry::metrics::TunnelGuard;

/// Bytes read at once in each direction (two buffers per tunnel).
/// One page, as NGINX's `proxy_buffer_size`: at 9,500 tunnels the buffers
/// are most of a tunnel's memory, and WebSocket messages are small.
const BUFFER: usize = 4 * 1024;

/// True for a WebSocket handshake: `Connection` has the `upgrade` token and
/// `Upgrade` names `websocket` (both case-insensitive, in token lists).
pub(crate) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    has_token(headers, &header::CONNECTION, "upgrade")
        && has_token(headers, &header::UPGRADE, "websocket")
}

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

/// Sends the handshake to the upstream and answers the client: the 101
/// (the tunnel then runs in a task of its own) or whatever else came.
pub(crate) async fn open(
    worker: &Worker,
    route: &Route,
    mut req: Request<Incoming>,
    client: crate::net::conn::Peer,
) -> Response<ResponseBody> {
    let report = CacheStatus::Bypass.report();
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        let e = ProxyError::downstream(ErrorKind::BadRequest, "no Sec-WebSocket-Key");
        route.activity.record(&report);
        return error_response(&e, &report);
    };
    let upstream = &route.upstream;
    let client_side = hyper::upgrade::on(&mut req);
    let (mut parts, body) = req.into_parts();
    set_upgrade(&mut parts.headers);
    add_forwarded(&mut parts.headers, client.addr.ip(), client.scheme());
    let body = TimeoutBody::new(body, upstream.send_timeout)
        .map_err(Into::into)
        .boxed();
    let sent = upstream
        .send_upgrade(Request::from_parts(parts, body))
        .await;
    route.activity.upstream_call(&sent);
    let mut resp = match sent {
        Ok(resp) => resp,
        Err(e) => {
            if !e.repeats() {
                // Per request: a dead upstream must not flood the log.
                static FAILED: calmcache_core::warn_limit::WarnLimit =
                    calmcache_core::warn_limit::WarnLimit::new();
                calmcache_core::warn_limited!(FAILED, "websocket handshake failed",
                    upstream = %upstream.name, error = %e);
            }
            route.activity.record(&report);
            return error_response(&e, &report);
        }
    };
    let report = report.fwd_status(resp.status().as_u16());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        route.activity.record(&report);
        // Refused (or not understood): passed back as the upstream sent it.
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        route.strip_targeted(&mut parts.headers);
        set_cache_status(&mut parts.headers, &report, None);
        let body = ResponseBody::stream(TimeoutBody::new(body, upstream.read_timeout));
        return Response::from_parts(parts, body);
    }
    if let Some(why) = bad_switch(resp.headers(), &key) {
        route.activity.upstream_errors.inc();
        static REFUSED: calmcache_core::warn_limit::WarnLimit =
            calmcache_core::warn_limit::WarnLimit::new();
        calmcache_core::warn_limited!(REFUSED, "websocket handshake refused",
            upstream = %upstream.name, why);
        let report = CacheStatus::Bypass.report();
        route.activity.record(&report);
        // Dropping `resp` closes the upstream connection: it was switched.
        let e = ProxyError::upstream(ErrorKind::Broken, &upstream.name, why);
        return error_response(&e, &report);
    }
    route.activity.record(&report);
    let upstream_side = hyper::upgrade::on(&mut resp);
    let (mut parts, _empty) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    set_upgrade(&mut parts.headers);
    let limits = Limits {
        idle: upstream.read_timeout,
        write: upstream.send_timeout,
    };
    let guard = worker.proxy.metrics.tunnel();
    let stop = worker.tunnels.enter();
    let name = upstream.name.clone();
    tokio::spawn(run(client_side, upstream_side, limits, stop, guard, name));
    Response::from_parts(parts, ResponseBody::empty())
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

/// Awaits both upgraded connections, then pumps bytes until the end.
async fn run(
    client: OnUpgrade,
    upstream: OnUpgrade,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    _open: TunnelGuard,
    name: String,
) {
    let both = async { tokio::try_join!(client, upstream) };
    let upgraded = tokio::select! {
        r = timeout(limits.idle, both) => r,
        _ = stop.wait_for(|s| *s) => return,
    };
    let (client, upstream) = match upgraded {
        Ok(Ok(both)) => both,
        Ok(Err(e)) => {
            tracing::debug!(upstream = %name, error = %e, "websocket upgrade failed");
            return;
        }
        Err(_) => {
            tracing::debug!(upstream = %name, "websocket upgrade did not complete");
            return;
        }
    };
    let pumped = pump(
        TokioIo::new(client),
        TokioIo::new(upstream),
        limits,
        &mut stop,
    )
    .await;
    match pumped {
        Ok(end) => tracing::debug!(upstream = %name, end = ?end, "websocket tunnel ended"),
        Err(e) => tracing::debug!(upstream = %name, error = %e, "websocket tunnel broke"),
    }
}

/// Copies `a` to `b` and `b` to `a` until either side ends its stream, the
/// tunnel is idle for `limits.idle`, a write stalls for `limits.write`, an
/// error occurs, or the worker stops. Both connections close when it returns.
async fn pump<A, B>(
    a: A,
    b: B,
    limits: Limits,
    stop: &mut watch::Receiver<bool>,
) -> std::io::Result<End>
where
    A: AsyncRead + AsyncWrite,
    B: AsyncRead + AsyncWrite,
{
    let clock = Activity::new();
    let (a_read, a_write) = tokio::io::split(a);
    let (b_read, b_write) = tokio::io::split(b);
    tokio::select! {
        r = copy(a_read, b_write, &clock, limits.write) => r.map(|()| End::Closed),
        r = copy(b_read, a_write, &clock, limits.write) => r.map(|()| End::Closed),
        () = clock.idle_for(limits.idle) => Ok(End::Idle),
        _ = stop.wait_for(|s| *s) => Ok(End::Stopped),
    }
}

/// When a tunnel last moved a byte, shared by its two directions.
struct Activity {
    start: Instant,
    /// Nanoseconds from `start` to the last activity.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(nanos, Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let last = Duration::from_nanos(self.last.load(Ordering::Relaxed));
            let deadline = self.start + last + limit;
            if Instant::now() >= deadline {
                return;
            }
            sleep_until(deadline).await;
        }
    }
}

/// One direction: reads what comes and writes it on, each write bounded by
/// `write_limit`; an end of stream is passed on as a shutdown of the writer.
async fn copy<R, W>(
    mut from: R,
    mut to: W,
    clock: &Activity,
    write_limit: Duration,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let stalled = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("a write took longer than send_timeout {write_limit:?}"),
        )
    };
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return timeout(write_limit, to.shutdown())
                .await
                .map_err(|_| stalled())?;
        }
        clock.touch();
        let mut sent = 0;
        while sent < n {
            let w = bounded(to.write(&buf[sent..n]), write_limit)
                .await
                .ok_or_else(stalled)??;
            if w == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            sent += w;
            clock.touch();
        }
        bounded(to.flush(), write_limit)
            .await
            .ok_or_else(stalled)??;
    }
}

/// `fut`, or `None` when it takes longer than `limit`. A future ready at
/// its first poll (a write the socket takes at once: nearly all of them)
/// never arms a timer.
async fn bounded<F: std::future::Future>(fut: F, limit: Duration) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await;
    match first {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => timeout(limit, fut).await.ok(),
    }
}

#[cfg(test)]
#[path = "tunnel_tests.rs"]
mod tests;
