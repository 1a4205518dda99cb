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
            ErrorKind::ConnectFailed | ErrorKind::Broken => StatusCode::BAD_GATEWAY,
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::NoRoute => StatusCode::NOT_FOUND,
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
            ErrorKind::NoRoute => "404 Not Found: no route matches this request\n",
        }
    }
}
