//! `send_timeout` on a client connection's writes: a write (or flush, or
//! shutdown) that the client leaves waiting that long, without taking a
//! byte, fails with `TimedOut`, and hyper closes the connection.
//!
//! As NGINX's `send_timeout`, the clock runs between two successive writes
//! that make progress, not over the whole answer: a client reading slowly
//! but steadily is never cut. [`WriteClock`] sits in the connection's IO
//! (`conn::Clocked`), under hyper, so it covers HTTP/1.1 and HTTP/2, plain
//! and TLS, and a WebSocket tunnel's writes to its client; HTTP/2 streams
//! stuck on a zero window while the connection moves are
//! [`crate::net::stream_clock`]'s.
//!
//! Writes that make progress cost a branch: the clock reads the time and
//! resets its timer (one per connection, allocated at the first stall) only
//! when a write that made progress is followed by one that waits. A writer
//! need not poll again for the cut to come: the connection's reads check the
//! clock too (h2 does not retry a waiting flush on every wake), so
//! [`WriteClock::check`] is also called from `poll_read`.
//!
//! [`Stall`] tells the connection's HTTP/2 stream clocks that the connection
//! itself is stalled: its streams then wait for this clock's cut rather
//! than being reset one by one.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::telemetry::metrics::Metrics;

/// The clock on one connection's writes to its client.
pub(crate) struct WriteClock {
    /// `server.send_timeout`.
    limit: Duration,
    /// When the write now waiting first found the client not reading;
    /// `None` while writes make progress.
    since: Option<Instant>,
    /// Allocated at the first stall, set again at the start of each stall.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The client, for the one log line of a cut.
    peer: SocketAddr,
    /// Counts the cut (`send_timeouts`); `None` on uncounted listeners.
    counted: Option<Arc<Metrics>>,
    /// Set by the cut: a later write that waits (a TLS close_notify) fails
    /// at once instead of holding the connection another limit.
    spent: bool,
}

/// Hard bound on the timer: `Instant + Duration` overflows past ~292 years.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl WriteClock {
    /// A clock cutting writes that wait `limit` for `peer`.
    pub(crate) fn new(limit: Duration, peer: SocketAddr, counted: Option<Arc<Metrics>>) -> Self {
        WriteClock {
            limit: limit.min(FOREVER),
            since: None,
            sleep: None,
            peer,
            counted,
            spent: false,
        }
    }

    /// Passes on the result of a write, flush or shutdown of the client's
    /// IO, failing it with `TimedOut` when it has been `Pending` (without a
    /// write making progress in between) for the limit. `stall` is raised
    /// while writes wait.
    #[inline]
    pub(crate) fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<io::Result<T>>,
        stall: &Stall,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Pending => self.stalled(cx, stall),
            ready => {
                if self.since.take().is_some() {
                    stall.0.store(false, Relaxed);
                }
                ready
            }
        }
    }

    /// A write is waiting on the client: starts the clock if this is a new
    /// stall, then checks it.
    fn stalled<T>(&mut self, cx: &mut Context<'_>, stall: &Stall) -> Poll<io::Result<T>> {
        if self.spent {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, SendTimedOut)));
        }
        if self.since.is_none() {
            let now = Instant::now();
            self.since = Some(now);
            stall.0.store(true, Relaxed);
            let deadline = now + self.limit;
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        match self.check(cx) {
            Some(cut) => Poll::Ready(Err(cut)),
            None => Poll::Pending,
        }
    }

    /// While a write waits: the cut once the limit has passed, else `None`
    /// (the task is woken when it passes). Costs a branch otherwise.
    #[inline]
    pub(crate) fn check(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.since?;
        let sleep = self.sleep.as_mut()?;
        if sleep.as_mut().poll(cx).is_pending() {
            return None;
        }
        Some(self.cut())
    }

    /// Counts and logs the cut; the error hyper ends the connection with.
    fn cut(&mut self) -> io::Error {
        self.since = None;
        self.spent = true;
        if let Some(metrics) = self.counted.take() {
            metrics.send_timeouts.inc();
        }
        tracing::debug!(
            peer = %self.peer,
            send_timeout = ?self.limit,
            "client took no bytes for send_timeout: connection closed"
        );
        io::Error::new(io::ErrorKind::TimedOut, SendTimedOut)
    }
}

/// Raised while a connection's writes wait on its client (shared with its
/// HTTP/2 stream clocks).
#[derive(Debug, Default)]
pub(crate) struct Stall(AtomicBool);

impl Stall {
    /// True while a write of the connection waits on the client.
    pub(crate) fn is_stalled(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// The error of a write cut by `send_timeout` (the connection's end logs
/// nothing more for it: the cut has its own line).
#[derive(Debug)]
pub(crate) struct SendTimedOut;

impl std::fmt::Display for SendTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client took no bytes for send_timeout")
    }
}

impl std::error::Error for SendTimedOut {}

/// True when `error` (or one of its sources) is a [`SendTimedOut`] cut.
pub(crate) fn is_send_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<SendTimedOut>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.is::<SendTimedOut>()) {
                return true;
            }
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn clock(limit: Duration) -> WriteClock {
        WriteClock::new(limit, "127.0.0.1:1".parse().unwrap(), None)
    }

    fn poll_stall(clock: &mut WriteClock) -> Poll<io::Result<usize>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        clock.watch(&mut cx, Poll::Pending, &Stall::default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_is_cut_after_the_limit_and_progress_resets_it() {
        let mut clock = clock(Duration::from_secs(2));
        assert!(poll_stall(&mut clock).is_pending());
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(poll_stall(&mut clock).is_pending());
        // Progress: the next stall starts a new clock.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let stall = Stall::default();
        assert!(clock
            .watch(&mut cx, Poll::Ready(Ok(10usize)), &stall)
            .is_ready());
        assert!(!stall.is_stalled());
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(poll_stall(&mut clock).is_pending());
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(poll_stall(&mut clock).is_pending(), "1.5 s into this stall");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(
            clock.check(&mut cx).is_none(),
            "no cut yet from the read side"
        );
        tokio::time::advance(Duration::from_millis(600)).await;
        match poll_stall(&mut clock) {
            Poll::Ready(Err(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::TimedOut);
                assert!(is_send_timeout(&e));
            }
            other => panic!("expected a cut, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_read_side_delivers_the_cut_when_the_writer_waits_on() {
        let mut clock = clock(Duration::from_secs(1));
        let stall = Stall::default();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let waited: Poll<io::Result<usize>> = clock.watch(&mut cx, Poll::Pending, &stall);
        assert!(waited.is_pending() && stall.is_stalled());
        assert!(clock.check(&mut cx).is_none());
        tokio::time::advance(Duration::from_millis(1001)).await;
        let cut = clock.check(&mut cx).expect("cut");
        assert!(is_send_timeout(&cut));
        assert!(clock.check(&mut cx).is_none(), "one cut");
        // A write that waits after the cut fails at once.
        let after: Poll<io::Result<usize>> = clock.watch(&mut cx, Poll::Pending, &stall);
        assert!(matches!(after, Poll::Ready(Err(ref e)) if is_send_timeout(e)));
    }

    #[test]
    fn other_errors_are_not_send_timeouts() {
        let e = io::Error::new(io::ErrorKind::TimedOut, "keepalive");
        assert!(!is_send_timeout(&e));
    }
}
