//! An origin response's body carrying the origin slot its request holds
//! ([`crate::net::budget::Slot`], and the fleet-wide slot with it), so the
//! slot is held until the origin's answer is over: the body's end, its
//! error, or its drop (a client gone mid-body), not just its head.
//!
//! It also ends the request's count in flight at its server
//! ([`InFlight`], `balance = "least_conn"`) at the same moment.
//!
//! A body dropped before its end (a client gone mid-body, a 5xx answer
//! replaced by a stale copy, a refused upgrade's page) would cost its pooled
//! connection: hyper closes a connection whose answer was not read to the
//! end. When what is left is small ([`DRAIN_MAX`]) it is read to its end
//! and thrown away in a task of its own, within [`DRAIN_WAIT`], so the
//! connection goes back to the pool (issue 29: reuse): reading 64 KiB more
//! on a connection already open costs less than the TCP (and TLS)
//! handshake of a new one. A larger or slower rest closes the connection
//! as before. Each dropped answer's outcome is counted at its server
//! ([`Dropped`]: `/status` `dropped_answers`, /metrics
//! `calmcache_upstream_server_dropped_answers_total`).
//!
//! Owns: that release and that drain only. Without an origin budget it
//! holds nothing and passes frames through.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::net::balance::InFlight;
use crate::net::budget::Slot;
use crate::telemetry::upstream_conns::{Dropped, ServerConns};

/// The slots one request to the origin holds, released by their drop.
pub(crate) struct Held {
    /// This node's slot at the server.
    _slot: Slot,
    /// The fleet-wide slot, when the fleet granted one.
    _shared: Option<Box<dyn Send + Sync>>,
}

impl Held {
    /// `slot`, with the fleet's `shared` one when granted.
    pub(crate) fn new(slot: Slot, shared: Option<Box<dyn Send + Sync>>) -> Held {
        Held {
            _slot: slot,
            _shared: shared,
        }
    }
}

/// The most body bytes read and thrown away to keep a connection whose
/// answer was dropped before its end.
pub(crate) const DRAIN_MAX: u64 = 64 * 1024;

/// The longest a dropped answer's rest is waited for before its
/// connection is closed instead.
pub(crate) const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// An origin response body, releasing its request's slots when it ends.
pub(crate) struct OriginBody {
    /// `None` only once dropped (taken by the drain).
    inner: Option<Incoming>,
    held: Option<Held>,
    /// The request's count in its server's requests in flight
    /// (`balance = "least_conn"`), ended with the slots.
    in_flight: Option<InFlight>,
    /// The server's counters, where a drop before the end is counted.
    conns: Arc<ServerConns>,
}

impl OriginBody {
    /// `inner`, holding `held` until it ends or is dropped; a drop before
    /// its end counted in `conns`.
    pub(crate) fn new(inner: Incoming, held: Option<Held>, conns: Arc<ServerConns>) -> OriginBody {
        OriginBody {
            inner: Some(inner),
            held,
            in_flight: None,
            conns,
        }
    }

    /// This body, counted in flight at its server until it ends.
    pub(crate) fn counted(mut self, in_flight: Option<InFlight>) -> OriginBody {
        self.in_flight = in_flight;
        self
    }

    /// Releases the slots now (a WebSocket handshake switched: the tunnel
    /// that follows is not an origin request in flight).
    pub(crate) fn release(&mut self) {
        self.held = None;
        self.in_flight = None;
    }
}

impl std::fmt::Debug for OriginBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginBody")
            .field("inner", &self.inner)
            .field("holds_slots", &self.held.is_some())
            .finish()
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.held = None;
            self.in_flight = None;
        }
        if matches!(polled, Poll::Ready(Some(Err(_)))) {
            // Its connection is lost already: nothing left to drain.
            self.inner = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for OriginBody {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if inner.is_end_stream() {
            return;
        }
        if inner.size_hint().lower() > DRAIN_MAX {
            self.conns.dropped(Dropped::TooLarge);
            return;
        }
        // Outside a runtime (the process ending) the connection just closes.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let conns = self.conns.clone();
            runtime.spawn(async move { conns.dropped(drain(inner).await) });
        }
    }
}

/// Reads `body` to its end and throws it away, so hyper hands its
/// connection back to the pool; gives up (the connection closes) past
/// [`DRAIN_MAX`] bytes, [`DRAIN_WAIT`], or an error. Says which.
async fn drain(mut body: Incoming) -> Dropped {
    use http_body_util::BodyExt;
    let reading = async move {
        let mut left = DRAIN_MAX;
        loop {
            let n = match body.frame().await {
                None => return Dropped::Drained,
                Some(Err(_)) => return Dropped::Failed,
                Some(Ok(frame)) => frame.data_ref().map_or(0, |d| d.len() as u64),
            };
            left = match left.checked_sub(n) {
                Some(left) => left,
                None => return Dropped::TooLarge,
            };
        }
    };
    tokio::time::timeout(DRAIN_WAIT, reading)
        .await
        .unwrap_or(Dropped::TooSlow)
}
