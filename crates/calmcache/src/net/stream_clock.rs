//! `send_timeout` on HTTP/2 streams: a stream whose next piece of body has
//! waited that long for flow-control window (the client keeps the
//! connection alive, reads other streams, but never opens this one's
//! window) is reset with `RST_STREAM(CANCEL)`; the connection and its other
//! streams go on.
//!
//! hyper gives no handle on a stream once its response is sent, and does not
//! poll the body while the stream has no window, so the clock lives in the
//! executor hyper spawns each stream's task with ([`StreamExec`]): the task
//! is wrapped in a [`Watched`] future, and dropping it drops the stream's
//! handles, which makes h2 reset the stream and free what it had queued.
//! The body (`conn::Tracked`) tells the clock what the task waits for
//! through a thread-local mark set during the task's poll (no allocation,
//! no lock): [`handed`] when it gave hyper a piece (hyper then waits for
//! window before it asks again), [`asked`] when hyper asked for more (the
//! stream waits for its own source, the origin or the disk, whose own
//! timeouts bound it). A task that ends a poll with a piece handed and
//! none asked waits on the client.
//!
//! Bodies reach hyper in pieces of at most [`PIECE`] bytes (`Bytes` slices,
//! no copy), so that hyper asks again after each piece has found window and
//! a stalled stream is seen while most of its body is still unsent. What
//! hyper has already handed to h2 when the body ends (at most the window
//! the client opened and one piece) has no task left to watch: it stays
//! queued until the client reads it or the connection closes
//! (`keepalive_timeout` once no request is in progress, the keepalive PINGs
//! when the client stops reading altogether).

use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::net::write_clock::Stall;
use crate::telemetry::metrics::Metrics;

/// Largest piece of body handed to hyper at once on HTTP/2: one DATA frame
/// of the default `SETTINGS_MAX_FRAME_SIZE`.
pub(crate) const PIECE: usize = 16 * 1024;

/// What the body of the stream being polled on this thread did last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Nothing during this poll.
    Quiet,
    /// hyper asked the body for its next frame.
    Asked,
    /// The body handed hyper a piece of data.
    Handed,
}

thread_local! {
    static MARK: Cell<Mark> = const { Cell::new(Mark::Quiet) };
}

/// The body was asked for its next frame.
#[inline]
pub(crate) fn asked() {
    MARK.set(Mark::Asked);
}

/// The body handed hyper a piece of data.
#[inline]
pub(crate) fn handed() {
    MARK.set(Mark::Handed);
}

/// The executor of a connection's HTTP/2 stream tasks: each runs on the
/// worker's runtime under a [`Watched`] clock.
#[derive(Clone)]
pub(crate) struct StreamExec {
    /// `server.send_timeout`.
    limit: Duration,
    /// The client, for the log line of a reset.
    peer: SocketAddr,
    /// Counts resets (`send_timeouts`); `None` on uncounted listeners.
    counted: Option<Arc<Metrics>>,
    /// The connection's write stall: while its writes wait on the client,
    /// its streams wait for the connection's cut instead of being reset.
    connection: Arc<dyn AsRef<Stall> + Send + Sync>,
}

impl StreamExec {
    /// Streams of `peer`'s connection, reset when stuck for `limit` while
    /// the `connection` itself is not stalled.
    pub(crate) fn new(
        limit: Duration,
        peer: SocketAddr,
        counted: Option<Arc<Metrics>>,
        connection: Arc<dyn AsRef<Stall> + Send + Sync>,
    ) -> Self {
        StreamExec {
            limit,
            peer,
            counted,
            connection,
        }
    }
}

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, task: F) {
        tokio::spawn(Watched {
            task,
            exec: self.clone(),
            since: None,
            sleep: None,
        });
    }
}

pin_project_lite::pin_project! {
    /// One HTTP/2 stream's task and the clock on its waits for window.
    pub(crate) struct Watched<F> {
        #[pin]
        task: F,
        exec: StreamExec,
        // When the body last handed a piece that is still waiting.
        since: Option<Instant>,
        // Allocated when a stream first waits for window.
        sleep: Option<Pin<Box<Sleep>>>,
    }
}

impl<F: Future<Output = ()>> Future for Watched<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        // Saved and restored: a stream task never runs inside another, but
        // the mark must not leak out of this poll either way.
        let outer = MARK.replace(Mark::Quiet);
        let polled = this.task.poll(cx);
        let mark = MARK.replace(outer);
        if polled.is_ready() {
            return Poll::Ready(());
        }
        match mark {
            // A new piece waits: progress since the last one.
            Mark::Handed => *this.since = Some(Instant::now()),
            Mark::Asked => *this.since = None,
            Mark::Quiet => {}
        }
        let Some(since) = *this.since else {
            return Poll::Pending;
        };
        let mut deadline = since + this.exec.limit;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        // Re-armed only when it fires for an earlier wait (at most once per
        // limit), not at every piece: this future is the task, so every
        // wake polls it.
        loop {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            if now >= deadline && !(*this.exec.connection).as_ref().is_stalled() {
                break;
            }
            if now >= deadline {
                // The whole connection waits on the client: its own clock
                // cuts it; look again a limit later.
                *this.since = Some(now);
                deadline = now + this.exec.limit;
            }
            sleep.as_mut().reset(deadline);
        }
        // Dropping the task drops the stream's handles: h2 sends
        // RST_STREAM(CANCEL) and drops what it had queued for it.
        if let Some(metrics) = &this.exec.counted {
            metrics.send_timeouts.inc();
        }
        tracing::debug!(
            peer = %this.exec.peer,
            send_timeout = ?this.exec.limit,
            "HTTP/2 stream got no window for send_timeout: stream reset"
        );
        Poll::Ready(())
    }
}
