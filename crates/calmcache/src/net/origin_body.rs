//! An origin response's body carrying the origin slot its request holds
//! ([`crate::net::budget::Slot`], and the fleet-wide slot with it), so the
//! slot is held until the origin's answer is over: the body's end, its
//! error, or its drop (a client gone mid-body), not just its head.
//!
//! It also ends the request's count in flight at its server
//! ([`InFlight`], `balance = "least_conn"`) at the same moment.
//!
//! Owns: that release only. Without an origin budget it holds nothing and
//! passes frames through.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::net::balance::InFlight;
use crate::net::budget::Slot;

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

/// An origin response body, releasing its request's slots when it ends.
pub(crate) struct OriginBody {
    inner: Incoming,
    held: Option<Held>,
    /// The request's count in its server's requests in flight
    /// (`balance = "least_conn"`), ended with the slots.
    in_flight: Option<InFlight>,
}

impl OriginBody {
    /// `inner`, holding `held` until it ends or is dropped.
    pub(crate) fn new(inner: Incoming, held: Option<Held>) -> OriginBody {
        OriginBody {
            inner,
            held,
            in_flight: None,
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
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.held = None;
            self.in_flight = None;
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
