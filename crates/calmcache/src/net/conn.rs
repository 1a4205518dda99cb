//! One client connection: HTTP/1.1 (with upgrades), HTTP/2 (TLS with ALPN
//! `h2`) or either by prior knowledge (h2c), its two clocks, its request
//! count, and its graceful end when the listener stops.
//!
//! hyper has one timer for an idle keepalive connection and a slow request
//! head, so it is off, and [`Clocked`], the connection's IO under hyper,
//! keeps both: `keepalive_timeout` while no request is in progress,
//! `header_read_timeout` from the first byte of a request head (or from
//! accept) until hyper hands the request to the service. It learns when a
//! request starts and when its answer is done from the service wrapper here
//! (a [`Ticket`] carried by the response body), so the clocks cost two
//! atomic counters per request and one timer reset per head.
//!
//! Writes have a third clock, `send_timeout` ([`crate::net::write_clock`], in
//! [`Clocked`] too): a client that takes no bytes that long is cut. On
//! HTTP/2 the same limit resets a stream stuck on a zero window
//! ([`crate::net::stream_clock`]: the executor of its stream tasks, and the
//! response body handed to hyper in pieces), and hyper's keepalive PINGs
//! close a connection whose client no longer answers.
//!
//! On the proxy's listeners [`Clocked`] also writes 103 Early Hints that a
//! request asks for while it waits ([`crate::net::early_hints`]): each
//! request's future runs in its connection's hint scope.
//!
//! A WebSocket handshake on an HTTP/1.1 connection carries the connection's
//! [`TunnelSlot`]; the tunnel handed to it is pumped by this connection's
//! task once hyper has let the connection go ([`crate::net::tunnel`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::http::headers::has_token;
use crate::http::scheme::Scheme;
use crate::net::early_hints::{self, EarlyHints};
use crate::net::listener::ListenerId;
use crate::net::stream_clock::{self, StreamExec};
use crate::net::tunnel::Tunnel;
use crate::net::write_clock::{Stall, WriteClock};
use crate::net::zero_copy::{self, PlainSocket, Splicer};
use crate::telemetry::metrics::ConnectionGuard;

/// Who is on the other end of a client connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// `https` on a TLS listener (or from a trusted proxy that says so).
    pub scheme: Scheme,
    /// The proxy listener the connection came in on: routes limited to
    /// listeners (`routes.listeners`) compare it, a `u16`, per request.
    pub listener: ListenerId,
    /// The local port the connection came in on (`$server_port`).
    pub port: u16,
}

/// A request extension on connections that came through a PROXY protocol
/// header: the load balancer that connected and named the client
/// (net/proxy_protocol.rs). Not in [`Peer`], which every request future
/// carries: only the access log reads it (JSON `realip_remote_addr`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Balancer(pub std::net::IpAddr);

impl Peer {
    /// A plain-HTTP client of no proxy listener (tests).
    #[cfg(test)]
    pub(crate) fn plain(addr: SocketAddr) -> Peer {
        Peer {
            addr,
            scheme: Scheme::Http,
            listener: ListenerId::NONE,
            port: 0,
        }
    }

    /// calmcache itself asking for `scheme` (`"https"` or else http), as a
    /// warm-up fetch does: loopback, no listener.
    pub(crate) fn internal(scheme: &str) -> Peer {
        Peer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            scheme: match scheme {
                "https" => Scheme::Https,
                _ => Scheme::Http,
            },
            listener: ListenerId::NONE,
            port: 0,
        }
    }

    /// `http` or `https`: `$scheme`, `X-Forwarded-Proto`.
    pub(crate) fn scheme(&self) -> &'static str {
        self.scheme.as_str()
    }
}

/// How client connections of a listener are served.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnSettings {
    /// Idle time (no request in progress) before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Time from a head's first byte (or from accept) to the whole head.
    pub header_read_timeout: Duration,
    /// Requests per connection; the last HTTP/1.1 answer says `Connection: close`.
    pub keepalive_requests: u32,
    /// Largest request head (hyper's read buffer), at least 8 KiB.
    pub max_header_size: usize,
    /// HTTP/2 with prior knowledge on plain connections.
    pub h2c: bool,
    /// A write the client leaves waiting this long closes the connection;
    /// an HTTP/2 stream without window this long is reset.
    pub send_timeout: Duration,
    /// HTTP/2: a PING after this long without a frame from the client.
    pub http2_keepalive_interval: Duration,
    /// HTTP/2: a PING not acknowledged within this closes the connection.
    pub http2_keepalive_timeout: Duration,
    /// Requests may send 103 Early Hints (the proxy's listeners).
    pub early_hints: Hints,
}

/// Whether a listener's connections carry an Early Hints injector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hints {
    /// No injector (the admin listener, the bundled origin).
    Off,
    /// Each connection has one ([`crate::net::early_hints`]).
    On,
}

impl Default for ConnSettings {
    /// The admin listener's and the bundled origin's.
    fn default() -> Self {
        ConnSettings {
            keepalive_timeout: Duration::from_secs(75),
            header_read_timeout: Duration::from_secs(10),
            keepalive_requests: u32::MAX,
            max_header_size: 64 * 1024,
            h2c: false,
            send_timeout: Duration::from_secs(60),
            http2_keepalive_interval: Duration::from_secs(20),
            http2_keepalive_timeout: Duration::from_secs(20),
            early_hints: Hints::Off,
        }
    }
}

impl ConnSettings {
    /// The proxy listeners' settings from `[server]` (hints on: the
    /// listener turns them off when no route has `early_hints`).
    pub(crate) fn of(server: &crate::config::ServerConfig) -> ConnSettings {
        ConnSettings {
            keepalive_timeout: server.keepalive_timeout,
            header_read_timeout: server.header_read_timeout,
            keepalive_requests: server.keepalive_requests,
            max_header_size: server.max_header_size.max(8192),
            h2c: server.h2c,
            send_timeout: server.send_timeout,
            http2_keepalive_interval: server.http2_keepalive_interval,
            http2_keepalive_timeout: server.http2_keepalive_timeout,
            early_hints: Hints::On,
        }
    }
}

/// The protocol a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1.x (a plain listener, or TLS without ALPN `h2`).
    Http1,
    /// HTTP/2 (TLS with ALPN `h2`).
    Http2,
    /// Either, told apart by the HTTP/2 preface (h2c prior knowledge).
    Detect,
}

/// Runs a hyper connection future until it ends, or until `drain` asks it
/// to finish gracefully (one body for three connection types that share
/// `graceful_shutdown` by name only).
macro_rules! drive {
    ($conn:expr, $peer:expr, $drain:expr) => {
        async move {
            let (conn, peer, mut drain) = ($conn, $peer, $drain);
            let mut conn = std::pin::pin!(conn);
            let ended = tokio::select! {
                ended = conn.as_mut() => ended,
                _ = drain.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            // `drain` is held until here: the accept loop waits for it.
            drop(drain);
            if let Err(e) = ended {
                // One error type for the three connection types.
                let e: Box<dyn std::error::Error + Send + Sync> = e.into();
                // A send_timeout cut has logged its own line.
                if !crate::net::write_clock::is_send_timeout(&*e) {
                    tracing::debug!(peer = %peer.addr, error = %e, "connection ended with an error");
                }
            }
        }
    };
}

/// A connection just accepted (and through its TLS handshake).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Accepted {
    /// The client.
    pub peer: Peer,
    /// What it speaks.
    pub protocol: Protocol,
    /// When it was accepted: the first head's clock starts here.
    pub at: Instant,
    /// The PROXY protocol sender, when the client came through one: each
    /// request gets it as a [`Balancer`] extension.
    pub balancer: Option<std::net::IpAddr>,
}

/// Serves one accepted connection on its own task until it ends, or until
/// `drain` asks it to finish gracefully (the task holds `drain` until then).
pub(crate) fn spawn<IO, S, F, B>(
    io: IO,
    accepted: Accepted,
    serve: S,
    drain: watch::Receiver<()>,
    guard: Option<ConnectionGuard>,
    settings: ConnSettings,
) where
    IO: AsyncRead + AsyncWrite + PlainSocket + Unpin + Send + 'static,
    S: Fn(Request<Incoming>, Peer) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Response<B>, std::convert::Infallible>> + Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Accepted {
        peer,
        protocol,
        at: accepted,
        balancer,
    } = accepted;
    let phase = Arc::new(Phase::default());
    let tunnels = phase.clone();
    // HTTP/2 has no request head to time on the wire: only the idle clock.
    let heads = (protocol != Protocol::Http2).then_some(settings.header_read_timeout);
    let counted = guard.as_ref().map(|g| g.metrics().clone());
    let streams = StreamExec::new(
        settings.send_timeout,
        peer.addr,
        counted.clone(),
        phase.clone(),
    );
    let writes = WriteClock::new(settings.send_timeout, peer.addr, counted);
    let hints =
        (settings.early_hints == Hints::On).then(|| EarlyHints::new(protocol != Protocol::Http1));
    let io = TokioIo::new(
        Clocked::new(
            io,
            phase.clone(),
            settings.keepalive_timeout,
            heads,
            accepted + settings.header_read_timeout,
            guard,
            writes,
        )
        .gathering(protocol == Protocol::Http2)
        .hinting(hints.clone()),
    );
    let served = AtomicU32::new(0);
    let service = service_fn(move |mut req: Request<Incoming>| {
        if let Some(balancer) = balancer {
            req.extensions_mut().insert(Balancer(balancer));
        }
        // An upgrade request (hyper put its OnUpgrade there) of an HTTP/1.1
        // connection: a tunnel it opens is this connection's task's to pump.
        if protocol == Protocol::Http1 && req.extensions().get::<OnUpgrade>().is_some() {
            req.extensions_mut().insert(TunnelSlot(phase.clone()));
        }
        let ticket = Ticket::begin(&phase);
        let n = served.fetch_add(1, Relaxed) + 1;
        let version = req.version();
        let h1 = version < http::Version::HTTP_2;
        // RFC 9112 §9.3: an HTTP/1.0 connection persists only when the
        // client asked for it and the answer says `keep-alive`.
        let http10_keepalive = version == http::Version::HTTP_10
            && has_token(req.headers(), &http::header::CONNECTION, "keep-alive");
        // Boxed: HTTP/2 moves the request future into a task of its own per
        // stream; one allocation moves a pointer instead. The future itself
        // is kept small (about 2 KiB: handle.rs's `future_size` test), since
        // it is built on the stack and copied into the box.
        let answer = Box::pin(early_hints::scope(
            hints.as_ref(),
            version,
            serve(req, peer),
        ));
        async move {
            let mut resp = answer.await?;
            if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                // A tunnel now: no keepalive or head clock on its bytes.
                ticket.0.inflight.fetch_add(1, Relaxed);
            } else if h1 {
                // HTTP/1.0 has no chunked coding: a body of unknown length
                // ends when the connection closes.
                let sized = resp.body().size_hint().exact().is_some();
                answer_connection(&mut resp, version, http10_keepalive && sized, n, settings);
            }
            let handing = if h1 {
                Handing::Whole
            } else {
                Handing::Pieces(Bytes::new())
            };
            Ok::<_, std::convert::Infallible>(resp.map(|inner| Tracked {
                inner,
                handing,
                _ticket: ticket,
            }))
        }
    });
    match protocol {
        Protocol::Http1 => {
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .timer(TokioTimer::new())
                // The clocks are Clocked's (see the module doc).
                .header_read_timeout(None)
                .max_buf_size(settings.max_header_size)
                .serve_connection(io, service)
                // WebSocket handshakes hand the connection to a tunnel (tunnel.rs).
                .with_upgrades();
            tokio::spawn(async move {
                drive!(conn, peer, drain).await;
                // hyper has let the connection go: a tunnel its last request
                // opened runs on here, in the memory hyper no longer uses.
                if let Some(tunnel) = tunnels.take_tunnel() {
                    tunnel.run_with(own_io::<IO>).await;
                }
            });
        }
        Protocol::Http2 => {
            let conn = hyper::server::conn::http2::Builder::new(streams)
                .timer(TokioTimer::new())
                .keep_alive_interval(settings.http2_keepalive_interval)
                .keep_alive_timeout(settings.http2_keepalive_timeout)
                .max_header_list_size(u32::try_from(settings.max_header_size).unwrap_or(u32::MAX))
                // RFC 8441 §3: SETTINGS_ENABLE_CONNECT_PROTOCOL, so browsers
                // open WebSockets on this connection (tunnel.rs).
                .enable_connect_protocol()
                .serve_connection(io, service);
            tokio::spawn(drive!(conn, peer, drain));
        }
        Protocol::Detect => {
            let mut builder = hyper_util::server::conn::auto::Builder::new(streams);
            builder
                .http1()
                .keep_alive(true)
                .timer(TokioTimer::new())
                .header_read_timeout(None)
                .max_buf_size(settings.max_header_size);
            builder
                .http2()
                .timer(TokioTimer::new())
                .keep_alive_interval(settings.http2_keepalive_interval)
                .keep_alive_timeout(settings.http2_keepalive_timeout)
                .max_header_list_size(u32::try_from(settings.max_header_size).unwrap_or(u32::MAX))
                .enable_connect_protocol();
            tokio::spawn(async move {
                let conn = builder.serve_connection_with_upgrades(io, service);
                drive!(conn, peer, drain).await;
            });
        }
    }
}

/// One consistent `Connection` field on an HTTP/1.x answer: `close` on the
/// last answer of `keepalive_requests` (or one that asks to close, such as a
/// refused request), `keep-alive` to an HTTP/1.0 client that asked for it.
/// The answer's version is the request's, so hyper adds nothing of its own
/// (it would append `keep-alive` to our `close` for an HTTP/1.0 client).
fn answer_connection<B>(
    resp: &mut Response<B>,
    version: http::Version,
    http10_keepalive: bool,
    served: u32,
    settings: ConnSettings,
) {
    *resp.version_mut() = version;
    let closing = served >= settings.keepalive_requests
        || has_token(resp.headers(), &http::header::CONNECTION, "close");
    let value = if closing {
        "close"
    } else if http10_keepalive {
        "keep-alive"
    } else if version == http::Version::HTTP_10 {
        "close"
    } else {
        return;
    };
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static(value),
    );
}

/// The client's side of a tunnel as this connection's own IO, taken back
/// out of hyper's `Upgraded` ([`Tunnel::run_with`]): under its
/// `send_timeout`, without the request clocks.
fn own_io<IO>(
    upgraded: hyper::upgrade::Upgraded,
) -> Result<(Clocked<IO>, Bytes), hyper::upgrade::Upgraded>
where
    IO: AsyncRead + AsyncWrite + PlainSocket + Unpin + Send + 'static,
{
    let parts = upgraded.downcast::<TokioIo<Clocked<IO>>>()?;
    Ok((parts.io.into_inner().into_tunnel(), parts.read_buf))
}

/// Where a WebSocket handshake of an HTTP/1.1 connection leaves its tunnel
/// for the connection's task (a request extension on upgrade requests).
#[derive(Clone)]
pub(crate) struct TunnelSlot(Arc<Phase>);

impl TunnelSlot {
    /// The connection's task pumps `tunnel` once hyper has let the
    /// connection go (after the 101 is out).
    pub(crate) fn hand(&self, tunnel: Tunnel) {
        *self.0.tunnel.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(tunnel));
    }
}

/// What the service tells the connection's clocks.
#[derive(Default)]
struct Phase {
    /// Requests whose answers are not done (a tunnel counts for ever).
    inflight: AtomicU32,
    /// Set when `inflight` falls to 0: the idle clock starts again.
    rearm: AtomicBool,
    /// The connection task, when it read while busy: woken when the last
    /// answer is done so that its idle clock starts (hyper may not read
    /// again on its own before the client sends something).
    waker: std::sync::Mutex<Option<std::task::Waker>>,
    /// Raised while the connection's writes wait on the client: its HTTP/2
    /// streams then leave the cut to the write clock.
    writes: Stall,
    /// A tunnel handed over by the connection's last request ([`TunnelSlot`]).
    tunnel: std::sync::Mutex<Option<Box<Tunnel>>>,
}

impl Phase {
    /// The tunnel handed over, if any.
    fn take_tunnel(&self) -> Option<Box<Tunnel>> {
        self.tunnel.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl AsRef<Stall> for Phase {
    fn as_ref(&self) -> &Stall {
        &self.writes
    }
}

/// One request in progress; dropped with the answer's body (or with the
/// request, if the client left first).
struct Ticket(Arc<Phase>);

impl Ticket {
    fn begin(phase: &Arc<Phase>) -> Ticket {
        phase.inflight.fetch_add(1, Relaxed);
        Ticket(phase.clone())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.inflight.fetch_sub(1, Relaxed) == 1 {
            self.0.rearm.store(true, Relaxed);
            let waker = self
                .0
                .waker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// How a response body's data reaches hyper.
enum Handing {
    /// HTTP/1.x: frames as they come (the connection's write clock times
    /// the client).
    Whole,
    /// HTTP/2: in pieces of at most [`stream_clock::PIECE`], each marked
    /// for the stream's clock; holds the rest of the frame being handed out.
    Pieces(Bytes),
}

pin_project_lite::pin_project! {
    /// A response body that ends its request's [`Ticket`] when hyper is
    /// done with it (and on HTTP/2 feeds the stream's clock).
    pub struct Tracked<B> {
        #[pin]
        inner: B,
        handing: Handing,
        _ticket: Ticket,
    }
}

impl<B: Body<Data = Bytes>> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let Handing::Pieces(rest) = this.handing else {
            return this.inner.poll_frame(cx);
        };
        stream_clock::asked();
        if rest.is_empty() {
            let frame = match std::task::ready!(this.inner.poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                other => return Poll::Ready(other),
            };
            match frame.into_data() {
                Ok(data) => *rest = data,
                Err(other) => return Poll::Ready(Some(Ok(other))),
            }
        }
        // Shares the frame's bytes: no copy.
        let piece = rest.split_to(rest.len().min(stream_clock::PIECE));
        stream_clock::handed();
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        match &self.handing {
            Handing::Pieces(rest) if !rest.is_empty() => false,
            _ => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = match &self.handing {
            Handing::Pieces(rest) => rest.len() as u64,
            Handing::Whole => return inner,
        };
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

/// Where a connection's clock stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Clock {
    /// No request in progress: `keepalive_timeout`.
    Idle,
    /// Part of a head has arrived (or the connection is new): `header_read_timeout`.
    Head,
    /// A request is being served: no clock here.
    Busy,
    /// A WebSocket tunnel owns the IO ([`Clocked::into_tunnel`]): reads go
    /// straight through, writes keep `send_timeout`.
    Tunnel,
}

/// A client connection's IO with its idle and head clocks (module doc).
pub(crate) struct Clocked<IO> {
    io: IO,
    phase: Arc<Phase>,
    clock: Clock,
    sleep: Pin<Box<Sleep>>,
    keepalive: Duration,
    /// `None` for HTTP/2: its bytes between requests are not heads.
    head: Option<Duration>,
    /// The connection's max_connections slot and gauge: held by the IO, so
    /// a WebSocket tunnel (which takes the IO over) keeps it until it closes.
    _slot: Option<ConnectionGuard>,
    /// `send_timeout` on every write (a tunnel's too).
    write: WriteClock,
    /// HTTP/2: the writes of one poll of the connection, sent as one.
    gather: Option<Gather>,
    /// Plain HTTP/1.x: large paged bodies go out by `splice` (made on the
    /// first, boxed: most connections never splice).
    splice: Option<Box<Splicer>>,
    /// The connection's Early Hints injector (proxy listeners).
    hints: Option<Arc<EarlyHints>>,
    /// HTTP/2 frames are followed for the injector (off once it is HTTP/1).
    tracking: bool,
    /// A hint taken from the injector, and how much of it is written.
    hint_out: Option<(Vec<u8>, usize)>,
    /// The waker last handed to the injector: a read that waits takes its
    /// lock only when the task's waker changed (it seldom does).
    parked: Option<std::task::Waker>,
}

/// Largest run of HTTP/2 writes [`Clocked`] gathers before it sends them
/// (a bigger write goes out as it comes).
const GATHER_MAX: usize = 64 * 1024;

/// What [`Clocked`] gathers of an HTTP/2 connection's writes.
///
/// hyper's h2 flushes its IO after every DATA frame of 256 bytes or more
/// (it holds one such frame at a time), so each stream's answer went out as
/// a TLS record and a `writev` of its own: as many syscalls per request as
/// HTTP/1.1, and the client woken for each. Here a flush only marks the
/// gathered bytes as owed and wakes the connection's task; they are sent
/// (one TLS write, one syscall) at the first IO call of its next poll,
/// after the other streams that became ready meanwhile have added theirs.
/// h2 touches its IO on every poll (it reads until `Pending`), and a
/// shutdown sends what is owed first.
#[derive(Default)]
struct Gather {
    /// Bytes accepted from hyper and not yet written.
    buf: Vec<u8>,
    /// How much of `buf` has been written.
    sent: usize,
    /// A flush was asked for: `buf` goes out at the next IO call.
    owed: bool,
}

impl Gather {
    fn pending(&self) -> usize {
        self.buf.len() - self.sent
    }
}

impl<IO> Clocked<IO> {
    fn new(
        io: IO,
        phase: Arc<Phase>,
        keepalive: Duration,
        head: Option<Duration>,
        first_deadline: Instant,
        slot: Option<ConnectionGuard>,
        write: WriteClock,
    ) -> Self {
        let (clock, deadline) = match head {
            Some(_) => (Clock::Head, first_deadline),
            None => (Clock::Idle, Instant::now() + keepalive),
        };
        Clocked {
            io,
            phase,
            clock,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            keepalive,
            head,
            _slot: slot,
            write,
            gather: None,
            splice: None,
            hints: None,
            tracking: false,
            hint_out: None,
            parked: None,
        }
    }

    /// Writes the Early Hints that requests queue on `hints`.
    fn hinting(mut self, hints: Option<Arc<EarlyHints>>) -> Self {
        self.tracking = hints.is_some();
        self.hints = hints;
        self
    }

    /// Gathers the writes of each poll ([`Gather`]): for HTTP/2.
    fn gathering(mut self, on: bool) -> Self {
        self.gather = on.then(Gather::default);
        self
    }

    /// The IO handed over to a WebSocket tunnel (taken back out of hyper's
    /// `Upgraded`): no request will come, so reads skip the request clocks
    /// and the service's bookkeeping; writes stay under `send_timeout`,
    /// and the connection keeps its `max_connections` slot until dropped.
    pub(crate) fn into_tunnel(mut self) -> Self {
        self.clock = Clock::Tunnel;
        // No hint goes into a tunnel (the 101 was the last answer): its
        // writes skip the injector's bookkeeping.
        self.hints = None;
        self.tracking = false;
        self
    }
}

impl<IO: AsyncWrite + Unpin> Clocked<IO> {
    /// A queued Early Hint, written when one may go now
    /// ([`EarlyHints::take`]): into the gather on HTTP/2 over TLS, else
    /// straight to the IO, all of it before any more of hyper's bytes.
    fn poll_hints(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.hint_out.is_none() {
            let Some(pending) = self.hints.as_ref().and_then(|h| h.take()) else {
                return Poll::Ready(Ok(()));
            };
            if let Some(gather) = &mut self.gather {
                gather.buf.extend_from_slice(&pending.bytes);
                if !gather.owed {
                    gather.owed = true;
                    cx.waker().wake_by_ref();
                }
                return Poll::Ready(Ok(()));
            }
            self.hint_out = Some((pending.bytes, 0));
        }
        let Some((bytes, sent)) = &mut self.hint_out else {
            return Poll::Ready(Ok(()));
        };
        while *sent < bytes.len() {
            let written = Pin::new(&mut self.io).poll_write(cx, &bytes[*sent..]);
            let n = std::task::ready!(self.write.watch(cx, written, &self.phase.writes))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
        }
        self.hint_out = None;
        let flushed = Pin::new(&mut self.io).poll_flush(cx);
        self.write.watch(cx, flushed, &self.phase.writes)
    }

    /// Writes out what is gathered (and flushes the IO once it all is).
    /// `Ready(Ok)` at once when nothing is.
    fn send_gathered(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(gather) = &mut self.gather else {
            return Poll::Ready(Ok(()));
        };
        if gather.pending() == 0 && !gather.owed {
            return Poll::Ready(Ok(()));
        }
        while gather.pending() > 0 {
            let written = Pin::new(&mut self.io).poll_write(cx, &gather.buf[gather.sent..]);
            let n = std::task::ready!(self.write.watch(cx, written, &self.phase.writes))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            gather.sent += n;
        }
        // Kept for the next poll's writes unless a large run grew it.
        if gather.buf.capacity() > GATHER_MAX {
            gather.buf = Vec::new();
        } else {
            gather.buf.clear();
        }
        gather.sent = 0;
        gather.owed = false;
        let flushed = Pin::new(&mut self.io).poll_flush(cx);
        self.write.watch(cx, flushed, &self.phase.writes)
    }

    /// Room for `len` more bytes in the gather: what is there goes out
    /// first when it would pass [`GATHER_MAX`]. `Ready(false)`: a write
    /// that large goes out directly.
    fn room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        let pending = self.gather.as_ref().map_or(0, Gather::pending);
        if pending > 0 && pending + len > GATHER_MAX {
            std::task::ready!(self.send_gathered(cx))?;
        }
        Poll::Ready(Ok(len < GATHER_MAX))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Clocked<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // A stalled write's cut comes through reads too: a writer may not
        // poll its write again (module doc of write_clock).
        if let Some(cut) = this.write.check(cx) {
            return Poll::Ready(Err(cut));
        }
        // A tunnel's connection is HTTP/1.1: nothing is ever gathered.
        if this.clock == Clock::Tunnel {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        // A hint queued while hyper waits goes out now (into the gather on
        // HTTP/2 over TLS); like the gather, it does not stop reads.
        if let Poll::Ready(Err(e)) = this.poll_hints(cx) {
            return Poll::Ready(Err(e));
        }
        // What the last poll gathered goes out first; a client that does
        // not take it does not stop reads (the write clock times it).
        if let Poll::Ready(Err(e)) = this.send_gathered(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let read = this.read_clocked(cx, buf);
        if let Some(hints) = &this.hints {
            match read {
                Poll::Ready(Ok(())) if this.tracking => {
                    this.tracking = hints.read(&buf.filled()[before..]);
                }
                Poll::Pending
                    if !this
                        .parked
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker())) =>
                {
                    hints.park(cx.waker());
                    this.parked = Some(cx.waker().clone());
                }
                _ => {}
            }
        }
        read
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Clocked<IO> {
    /// Reads under the idle and head clocks (module doc).
    fn read_clocked(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self;
        if this.phase.inflight.load(Relaxed) > 0 {
            this.clock = Clock::Busy;
            let read = Pin::new(&mut this.io).poll_read(cx, buf);
            if read.is_pending() {
                let mut waker = this.phase.waker.lock().unwrap_or_else(|e| e.into_inner());
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
            }
            return read;
        }
        // Moving the timer per request (here, and earlier at a head's first
        // byte) costs ~2-3% of a request's CPU at 10,000 connections. A lazy
        // timer with no wake at an answer's end removed it in the profile
        // but measured no better end to end, twice (bench/HISTORY.md,
        // i29-lazy-clock): not repeated without a new reason.
        if this.clock == Clock::Busy || this.phase.rearm.swap(false, Relaxed) {
            this.clock = Clock::Idle;
            let deadline = Instant::now() + this.keepalive;
            this.sleep.as_mut().reset(deadline);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if let (Clock::Idle, Some(head)) = (this.clock, this.head) {
                    if buf.filled().len() > before {
                        this.clock = Clock::Head;
                        this.sleep.as_mut().reset(Instant::now() + head);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let what = match this.clock {
                        Clock::Head => "request head not received within header_read_timeout",
                        _ => "idle connection closed after keepalive_timeout",
                    };
                    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)))
                }
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    }
}

impl<IO: PlainSocket> PlainSocket for Clocked<IO> {
    /// A tunnel's plain socket, once nothing hyper handed over waits here
    /// (the tunnel's pump may then splice to it: net/tunnel_splice.rs).
    fn plain_tcp(&self) -> Option<&tokio::net::TcpStream> {
        let clear = self.clock == Clock::Tunnel
            && self.gather.is_none()
            && self.hint_out.is_none()
            && self.splice.as_ref().is_none_or(|s| s.pending() == 0);
        if clear {
            self.io.plain_tcp()
        } else {
            None
        }
    }

    /// A tunnel's splices to the client are under `send_timeout` like
    /// every other write to it (and counted in `send_timeouts` when cut).
    fn clock_splice(
        &mut self,
        cx: &mut Context<'_>,
        spliced: Poll<io::Result<()>>,
    ) -> Poll<io::Result<()>> {
        self.write.watch(cx, spliced, &self.phase.writes)
    }
}

impl<IO: PlainSocket> Clocked<IO> {
    /// Sends what an earlier splice left in the pipe (nothing on TLS).
    fn poll_spliced(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.io.plain_tcp() {
            Some(sock) if self.splice.as_ref().is_some_and(|s| s.pending() > 0) => {
                let Some(splice) = self.splice.as_mut() else {
                    return Poll::Ready(Ok(()));
                };
                let drained = splice.poll_drain(cx, sock);
                self.write.watch(cx, drained, &self.phase.writes)
            }
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl<IO: AsyncWrite + PlainSocket + Unpin> AsyncWrite for Clocked<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.dirty(buf.len());
        std::task::ready!(this.poll_spliced(cx))?;
        std::task::ready!(this.poll_hints(cx))?;
        if this.gather.is_some() && std::task::ready!(this.room(cx, buf.len()))? {
            if let Some(gather) = &mut this.gather {
                gather.buf.extend_from_slice(buf);
                this.taken(&[io::IoSlice::new(buf)], buf.len());
                return Poll::Ready(Ok(buf.len()));
            }
        }
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        let written = this.write.watch(cx, written, &this.phase.writes);
        if let Poll::Ready(Ok(n)) = written {
            this.taken(&[io::IoSlice::new(buf)], n);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.dirty(bufs.iter().map(|b| b.len()).sum());
        std::task::ready!(this.poll_hints(cx))?;
        let written = this.write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            this.taken(bufs, n);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        // Gathered slices are copied: hyper may hand them over as they are.
        self.gather.is_some() || self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_spliced(cx))?;
        std::task::ready!(this.poll_hints(cx))?;
        if let Some(gather) = &mut this.gather {
            if gather.pending() > 0 {
                // Owed until the task's next poll (see `Gather`).
                if !gather.owed {
                    gather.owed = true;
                    cx.waker().wake_by_ref();
                }
                return Poll::Ready(Ok(()));
            }
        }
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        let flushed = this.write.watch(cx, flushed, &this.phase.writes);
        // Everything hyper handed over is out (hyper flushes its IO only
        // once its own buffer is written; the splice pipe and the hint
        // drained above): a hint may go in before the next answer.
        if let (Poll::Ready(Ok(())), Some(hints)) = (&flushed, &this.hints) {
            hints.set_clean(true);
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_spliced(cx))?;
        // A hint begun is finished (the client parses whole messages); one
        // not begun is dropped: no answer follows it any more.
        if this.hint_out.as_ref().is_some_and(|(_, sent)| *sent == 0) {
            this.hint_out = None;
        }
        if this.hint_out.is_some() {
            std::task::ready!(this.poll_hints(cx))?;
        }
        std::task::ready!(this.send_gathered(cx))?;
        let shut = Pin::new(&mut this.io).poll_shutdown(cx);
        this.write.watch(cx, shut, &this.phase.writes)
    }
}

impl<IO: AsyncWrite + PlainSocket + Unpin> Clocked<IO> {
    /// hyper hands over `len` bytes: from now until a flush completes, an
    /// answer is under way (HTTP/1) and no hint may be queued, whatever
    /// this write returns (hyper may read the next pipelined request while
    /// the last answer waits in its own buffer: a write that took nothing
    /// does not make the connection clean).
    #[inline]
    fn dirty(&self, len: usize) {
        if let (true, Some(hints)) = (len > 0, &self.hints) {
            hints.set_clean(false);
        }
    }

    /// hyper's first `n` bytes of `bufs` were taken: HTTP/2 frames are followed.
    fn taken(&mut self, bufs: &[io::IoSlice<'_>], mut n: usize) {
        let Some(hints) = &self.hints else {
            return;
        };
        for b in bufs {
            if n == 0 || !self.tracking {
                break;
            }
            let part = n.min(b.len());
            self.tracking = hints.wrote(&b[..part]);
            n -= part;
        }
    }

    /// hyper's vectored write: gathered, spliced or written.
    fn write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self;
        if this.gather.is_some() {
            let len = bufs.iter().map(|b| b.len()).sum();
            if std::task::ready!(this.room(cx, len))? {
                if let Some(gather) = &mut this.gather {
                    for b in bufs {
                        gather.buf.extend_from_slice(b);
                    }
                    return Poll::Ready(Ok(len));
                }
            }
        } else if this.io.plain_tcp().is_some() {
            std::task::ready!(this.poll_spliced(cx))?;
            let at = match &this.splice {
                Some(splice) => splice.pick(bufs),
                None => zero_copy::pick(bufs),
            };
            if let (Some(at), Some(sock)) = (at, this.io.plain_tcp()) {
                let splice = this.splice.get_or_insert_with(Box::default);
                let sent = match splice.poll_send(cx, sock, bufs, at) {
                    Poll::Ready(None) => None,
                    Poll::Ready(Some(sent)) => {
                        let spliced = splice.take_spliced();
                        if let Some(slot) = &this._slot {
                            slot.metrics().spliced_bytes.add(spliced);
                        }
                        Some(Poll::Ready(sent))
                    }
                    Poll::Pending => Some(Poll::Pending),
                };
                if let Some(sent) = sent {
                    return this.write.watch(cx, sent, &this.phase.writes);
                }
            }
        }
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.write.watch(cx, written, &this.phase.writes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "conn_tests.rs"]
mod tests;
