//! Proxy errors: which side failed, and the one place that maps them to a status.

use http::StatusCode;

/// Which side of the proxy an error came from (as in pingora-error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client sent something we cannot serve.
    Downstream,
    /// The origin refused, timed out or broke the exchange.
    Upstream,
    /// Our own fault.
    Internal,
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// TCP connect refused or failed.
    ConnectFailed,
    /// TCP connect did not finish within `connect_timeout`.
    ConnectTimeout,
    /// No response head within `read_timeout`.
    ReadTimeout,
    /// The origin broke the exchange (reset, malformed response, body cut short).
    Broken,
    /// The request cannot be proxied (bad URI, no route).
    BadRequest,
    /// No route matches the request.
    NoRoute,
    /// The request's body broke off or was malformed (bad chunk framing,
    /// shorter than its length): the client's fault, whatever the origin
    /// had seen of it.
    BadBody,
    /// The client's body stopped arriving for the upstream's `send_timeout`.
    BodyTimeout,
    /// The client's body is larger than calmcache reads for its method
    /// (a GET or HEAD body is read whole, up to a bound).
    BodyTooLarge,
    /// A transfer coding other than `chunked` (RFC 9112 §6.1).
    NotImplemented,
    /// An `Expect` other than `100-continue` (RFC 9110 §10.1.1).
    ExpectationFailed,
    /// An HTTP/2 extended CONNECT for a protocol other than `websocket`
    /// (RFC 8441 §4): calmcache tunnels WebSockets only.
    UnknownProtocol,
    /// An HTTP/2 WebSocket (extended CONNECT) on a route without
    /// `websocket = true`: unlike an HTTP/1.1 handshake, a CONNECT has no
    /// meaning to the origin as a plain request, so it is refused.
    TunnelOff,
    /// Every server of the upstream is down (failed requests or health
    /// checks): refused at once, no connection attempted.
    AllServersDown,
    /// The upstream's origin budget (`max_inflight`) had no slot: at once
    /// for a request that may not wait, after `queue_timeout` in the
    /// queue for one that may. No request reached the origin, so it never
    /// counts against a server's health nor as an upstream error.
    OriginBusy {
        /// The `Retry-After` a client is given, in seconds (at least 1).
        retry_after: u32,
    },
}

/// An error with its side, the upstream involved and a cause for the log.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{kind:?} ({side:?}) at {peer}: {cause}")]
pub struct ProxyError {
    /// Which side failed.
    pub side: Side,
    /// What failed.
    pub kind: ErrorKind,
    /// The upstream server (or client) involved.
    pub peer: String,
    /// Human-readable cause chain.
    pub cause: String,
}

impl ProxyError {
    /// An upstream failure at `peer`.
    pub fn upstream(kind: ErrorKind, peer: &str, cause: impl std::fmt::Display) -> Self {
        ProxyError {
            side: Side::Upstream,
            kind,
            peer: peer.to_string(),
            cause: cause.to_string(),
        }
    }

    /// A request we cannot serve.
    pub fn downstream(kind: ErrorKind, cause: impl std::fmt::Display) -> Self {
        ProxyError {
            side: Side::Downstream,
            kind,
            peer: String::new(),
            cause: cause.to_string(),
        }
    }

    /// The status a client gets for this error (linkerd's `respond` pattern).
    pub fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::ConnectTimeout | ErrorKind::ReadTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::ConnectFailed | ErrorKind::Broken | ErrorKind::AllServersDown => {
                StatusCode::BAD_GATEWAY
            }
            ErrorKind::BadRequest | ErrorKind::BadBody => StatusCode::BAD_REQUEST,
            ErrorKind::NoRoute => StatusCode::NOT_FOUND,
            ErrorKind::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::NotImplemented | ErrorKind::UnknownProtocol => StatusCode::NOT_IMPLEMENTED,
            ErrorKind::TunnelOff => StatusCode::FORBIDDEN,
            ErrorKind::ExpectationFailed => StatusCode::EXPECTATION_FAILED,
            ErrorKind::OriginBusy { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// A short body for the client: the status reason, never internal details.
    pub fn body(&self) -> &'static str {
        match self.kind {
            ErrorKind::ConnectTimeout | ErrorKind::ReadTimeout => {
                "504 Gateway Timeout: the origin did not answer in time\n"
            }
            ErrorKind::ConnectFailed => "502 Bad Gateway: the origin refused the connection\n",
            ErrorKind::Broken => "502 Bad Gateway: the origin sent a broken response\n",
            ErrorKind::BadRequest => "400 Bad Request\n",
            ErrorKind::BadBody => "400 Bad Request: the request body was malformed or cut short\n",
            ErrorKind::NoRoute => "404 Not Found: no route matches this request\n",
            ErrorKind::BodyTimeout => "408 Request Timeout: the request body stopped arriving\n",
            ErrorKind::BodyTooLarge => "413 Content Too Large: the request body is too large\n",
            ErrorKind::NotImplemented => "501 Not Implemented: unsupported transfer coding\n",
            ErrorKind::ExpectationFailed => "417 Expectation Failed\n",
            ErrorKind::UnknownProtocol => {
                "501 Not Implemented: calmcache tunnels no :protocol but websocket\n"
            }
            ErrorKind::TunnelOff => "403 Forbidden: this route does not open WebSockets\n",
            ErrorKind::AllServersDown => {
                "502 Bad Gateway: every origin server is down; calmcache retries it later\n"
            }
            ErrorKind::OriginBusy { .. } => {
                "503 Service Unavailable: the origin is busy; retry after the time given\n"
            }
        }
    }

    /// True for an error every request meets while a state lasts (every
    /// server down, the origin budget full): logged once when the state
    /// began (by `health.rs`) or counted (the budget's sheds), not once per
    /// request, and no upstream request or error either: none was sent.
    pub fn repeats(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::AllServersDown | ErrorKind::OriginBusy { .. }
        )
    }

    /// The seconds a client should wait before asking again (`Retry-After`,
    /// RFC 9110 §10.2.3), for an error that says so.
    pub fn retry_after(&self) -> Option<u32> {
        match self.kind {
            ErrorKind::OriginBusy { retry_after } => Some(retry_after),
            _ => None,
        }
    }

    /// True when the client connection should close after this answer: the
    /// request's framing can no longer be trusted (RFC 9112 §6.3, §9.6).
    pub fn closes_connection(&self) -> bool {
        // A handshake refused for what it asks, not for its framing.
        self.side == Side::Downstream
            && !matches!(
                self.kind,
                ErrorKind::NoRoute | ErrorKind::UnknownProtocol | ErrorKind::TunnelOff
            )
    }
}

/// Marks a response calmcache made itself (an error page of its own, not
/// the origin's answer), for a route's `error_pages`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Made;
