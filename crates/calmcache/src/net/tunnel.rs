//! A WebSocket tunnel's pump: bytes both ways between the client's
//! connection and the upstream's, until either side ends its stream, the
//! tunnel is idle, a write stalls, or the worker stops. It knows nothing of
//! handshakes (proxy/tunnel.rs makes them and hands a [`Tunnel`] over).
//!
//! Where it runs: a tunnel opened on an HTTP/1.1 connection is pumped in
//! that connection's own task (net/conn.rs takes it from the connection's
//! [`crate::net::conn::TunnelSlot`] once hyper has let the connection go):
//! no task is spawned per tunnel, the IO is taken back out of hyper's
//! `Upgraded` as the connection's own type (`Clocked` over TCP or TLS),
//! and the memory of the connection's task, no longer used by hyper, holds
//! the pump. A tunnel of an HTTP/2 stream (RFC 8441) or of an h2c-detecting
//! listener gets a task of its own ([`Tunnel::run`]) and is pumped as
//! hyper's `Upgraded`.
//!
//! The pump is built for many quiet tunnels: reads land in a scratch buffer
//! on the stack and are written on at once, so a tunnel holds no buffer
//! while its peers keep up (only bytes a write left waiting are kept, in a
//! buffer of their own); the idle and write limits share one timer that a
//! message never touches (activity is one clock read per wake, the timer
//! is moved only when it fires or when a write starts to wait). The stop
//! flag is looked at (one atomic load) on each wake and its future polled
//! only when it changed: its waker stays registered from the first poll.
//!
//! Large messages on plain TCP go by `splice` (net/tunnel_splice.rs): a
//! read that fills the scratch marks a burst, and the rest of it, and of
//! later bursts, moves socket -> pipe -> socket, never copied into the
//! proxy, until a splice brings less than the scratch holds ([`Move`]).
//! Measured (bench/HISTORY.md `i29b-ws-splice`): 64 KiB messages cost
//! 0.64-0.71x the CPU of copying, p99 no worse; 64-byte messages cost
//! 1.15x the CPU when spliced, so small ones stay copied. TLS and hyper's
//! `Upgraded` (HTTP/2, h2c-detect) always copy.
//!
//! Must not: buffer what its peers take at once, touch the timer wheel per
//! message, or outlive the worker's stop ([`crate::net::shutdown::Tunnels`]).

use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use crate::net::tunnel_splice::{Splice, Step};
use crate::net::upstream::Switched;
use crate::net::zero_copy::PlainSocket;
use crate::telemetry::metrics::TunnelGuard;

/// A tunnel the upstream has switched, not yet pumped: what the handshake
/// (proxy/tunnel.rs) hands to the connection's task or to a task of its own.
pub(crate) struct Tunnel {
    /// The client's side, once hyper has let its connection go.
    client: OnUpgrade,
    /// The upstream's connection, past its `101`.
    upstream: Switched,
    limits: Limits,
    /// The worker's stop flag ([`crate::net::shutdown::Tunnels::enter`]).
    stop: watch::Receiver<bool>,
    /// Held while the tunnel is open, dropped when it ends.
    _open: Open,
    /// The upstream's name, for the log.
    name: String,
}

/// What an open tunnel holds: its place in the websockets gauge, and
/// whatever else the handshake's request held (its connection places).
pub(crate) struct Open {
    _gauge: TunnelGuard,
    /// `None` when the request held nothing (no allocation then).
    _held: Option<Box<dyn Send>>,
}

impl Open {
    pub(crate) fn new(gauge: TunnelGuard, held: Option<Box<dyn Send>>) -> Open {
        Open {
            _gauge: gauge,
            _held: held,
        }
    }
}

impl Tunnel {
    pub(crate) fn new(
        client: OnUpgrade,
        upstream: Switched,
        limits: Limits,
        stop: watch::Receiver<bool>,
        (open, name): (Open, String),
    ) -> Tunnel {
        Tunnel {
            client,
            upstream,
            limits,
            stop,
            _open: open,
            name,
        }
    }

    /// Pumps the tunnel as hyper's `Upgraded` (a task of its own: HTTP/2
    /// streams, h2c-detecting listeners).
    pub(crate) async fn run(self) {
        self.run_with(Err::<(TokioIo<Upgraded>, Bytes), Upgraded>)
            .await;
    }

    /// Awaits the client's side (at once when hyper has already let it go),
    /// takes it back with `own` (the connection's own IO and the bytes hyper
    /// read past the handshake; `Err` gives the `Upgraded` back, pumped as
    /// it is), then pumps until the end.
    pub(crate) async fn run_with<C, F>(self, own: F)
    where
        C: AsyncRead + AsyncWrite + PlainSocket + Unpin,
        F: FnOnce(Upgraded) -> Result<(C, Bytes), Upgraded>,
    {
        let Tunnel {
            client,
            upstream,
            limits,
            mut stop,
            _open,
            name,
        } = self;
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
        let upstream = (upstream.io, upstream.read_buf);
        let pumped = match own(client) {
            Ok(own) => pump(own, upstream, limits, stop).await,
            Err(other) => pump((TokioIo::new(other), Bytes::new()), upstream, limits, stop).await,
        };
        match pumped {
            Ok(end) => tracing::debug!(upstream = %name, end = ?end, "websocket tunnel ended"),
            Err(e) => tracing::debug!(upstream = %name, error = %e, "websocket tunnel broke"),
        }
    }
}

/// A tunnel's time limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// No byte in either direction for this long closes the tunnel.
    pub idle: Duration,
    /// One write that takes longer than this closes the tunnel.
    pub write: Duration,
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
    A: AsyncRead + AsyncWrite + PlainSocket + Unpin,
    B: AsyncRead + AsyncWrite + PlainSocket + Unpin,
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
    /// How reads move now ([`Move`]).
    mode: Move,
    /// The pipe bytes pass through while `mode` is [`Move::Splice`].
    splice: Splice,
}

/// How a direction moves what it reads (a choice measured, see
/// bench/HISTORY.md `i29b-ws-splice`): small messages are copied through
/// the stack scratch, which costs fewer cycles than a pipe; a burst larger
/// than the scratch (a read that filled it) goes on by `splice` when both
/// sides are plain TCP, until a splice brings less than a scratch's worth.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Move {
    Copy,
    Splice,
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
            mode: Move::Copy,
            splice: Splice::default(),
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
        R: AsyncRead + PlainSocket + Unpin,
        W: AsyncWrite + PlainSocket + Unpin,
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
            if self.mode == Move::Splice {
                std::task::ready!(self.poll_splice(cx, &*from, &mut *to, moved))?;
                continue;
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
            if data.len() == SCRATCH && from.plain_tcp().is_some() && to.plain_tcp().is_some() {
                // A burst: what follows it goes by the pipe.
                self.mode = Move::Splice;
            }
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

    /// One splice step of a burst ([`Move::Splice`]); back to copying
    /// once the burst is over (a splice brought less than the scratch
    /// holds) or a side is no longer plain TCP.
    ///
    /// The splice writes to `to`'s socket under `to`'s own write clock too
    /// ([`PlainSocket::clock_splice`]): a client's `send_timeout` holds for
    /// a spliced burst as for a copied one. (It did not: a client that
    /// stopped reading in the middle of a burst was cut only by the
    /// upstream's `send_timeout`, 60 s, and never counted. Whether a burst
    /// was spliced depended on how the upstream's bytes arrived, which is
    /// why slow_readers' WebSocket test failed after loopback transfers had
    /// left TCP metrics for 127.0.0.1.)
    fn poll_splice<R: PlainSocket, W: PlainSocket>(
        &mut self,
        cx: &mut Context<'_>,
        from: &R,
        to: &mut W,
        moved: &mut bool,
    ) -> Poll<std::io::Result<()>> {
        let (Some(rs), Some(ws)) = (from.plain_tcp(), to.plain_tcp()) else {
            self.mode = Move::Copy;
            return Poll::Ready(Ok(()));
        };
        let mut writing = false;
        let step = self.splice.poll_step(cx, rs, ws, &mut writing);
        if self.splice.took() {
            // Progress: the writer's clock starts again at its next wait.
            std::task::ready!(to.clock_splice(cx, Poll::Ready(Ok(()))))?;
        }
        if writing && step.is_pending() {
            if let Poll::Ready(Err(cut)) = to.clock_splice(cx, Poll::Pending) {
                return Poll::Ready(Err(cut));
            }
        }
        let step = if writing { self.waited(step) } else { step };
        match std::task::ready!(step)? {
            Step::Moved(n) => {
                *moved = true;
                if n < SCRATCH {
                    self.mode = Move::Copy;
                }
            }
            Step::Eof => self.eof = true,
        }
        Poll::Ready(Ok(()))
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

/// hyper's `Upgraded` (HTTP/2 streams, h2c-detecting listeners): copied.
impl PlainSocket for TokioIo<Upgraded> {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "tunnel_tests.rs"]
mod tests;
