//! The PROXY protocol (HAProxy's, v1 text and v2 binary) on the listeners
//! that expect it (`server.proxy_protocol_listeners`): the header a TCP
//! load balancer writes before anything else on a connection (before the
//! TLS ClientHello on a TLS listener), naming the client it accepted.
//!
//! ```text
//! accept ── source in proxy_protocol_from? ── no: close (untrusted), nothing read
//!        └─ peek: v2 signature -> 16 bytes + length (at most 4 KiB in all)
//!                 "PROXY "     -> up to CRLF (at most 107 bytes)
//!                 else         -> close (missing: HTTP or TLS without a header)
//!        ── read exactly the header (never a byte of what follows) ── parse (ppp)
//!        ── its source becomes the connection's client address
//! ```
//!
//! The header is found with `MSG_PEEK` and then read with one exact read, so
//! the bytes after it stay in the socket for hyper or rustls and the
//! connection keeps its plain `TcpStream` (and zero-copy sends). A header
//! split over several packets is waited for, never past the connection's
//! first `header_read_timeout` (the deadline the TLS handshake and the first
//! request head share). v2 TLVs are skipped; a LOCAL command, v1 `UNKNOWN`,
//! v2 `UNSPEC` and `AF_UNIX` keep the TCP peer as the client, as NGINX does.
//! Each connection's fate is counted ([`ProxyHeader`]).
//!
//! Must not: know what a request is, or run on a listener that does not
//! expect the header (such a listener pays nothing for this module).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, Interest};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::config::proxy_protocol::ProxyProtocolConfig;
use crate::config::ServerConfig;
use crate::net::listener::ListenerId;
use crate::telemetry::metrics::{Metrics, ProxyHeader};

/// The v2 signature (the spec's section 2.2).
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A v2 header's fixed part: signature, version and command, family and
/// protocol, length.
const V2_FIXED: usize = 16;
/// The largest v2 header taken, TLVs included: addresses take at most 216
/// bytes; 4 KiB leaves room for any balancer's TLVs (AWS's VPC endpoint id,
/// HAProxy's SSL ones) and bounds what an untrusted length could ask for.
pub(crate) const V2_MAX: usize = 4096;
/// The v1 prefix.
const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// The longest v1 line, CRLF included (the spec's section 2.1).
pub(crate) const V1_MAX: usize = 107;

/// The listeners that expect the header, and who may send it; `None` in
/// [`crate::run::listen`]'s settings when no listener does.
#[derive(Debug)]
pub(crate) struct Relays {
    listeners: Vec<ListenerId>,
    config: ProxyProtocolConfig,
}

impl Relays {
    /// `server`'s, when some listener expects the header.
    pub(crate) fn of(server: &ServerConfig) -> Option<Arc<Relays>> {
        let config = &server.proxy_protocol;
        config.is_on().then(|| {
            Arc::new(Relays {
                listeners: config
                    .listeners
                    .iter()
                    .map(|a| ListenerId::of(*a))
                    .collect(),
                config: config.clone(),
            })
        })
    }

    /// Connections to `listener` start with a header.
    pub(crate) fn expects(&self, listener: ListenerId) -> bool {
        self.listeners.contains(&listener)
    }

    /// Reads the header of a connection from `peer` by `deadline` and counts
    /// its fate: the client it names (`peer` itself for LOCAL and UNKNOWN),
    /// or `None` when the connection is to be closed.
    pub(crate) async fn receive(
        &self,
        stream: &mut TcpStream,
        peer: SocketAddr,
        deadline: Instant,
        metrics: Option<&Metrics>,
    ) -> Option<SocketAddr> {
        let (result, client) = if self.config.trusts(peer.ip()) {
            match tokio::time::timeout_at(deadline, read(stream)).await {
                Ok(Ok(Source::Client(client))) => (Source::version(client), client.1),
                Ok(Ok(Source::Peer(result))) => (result, peer),
                Ok(Err(result)) => (result, peer),
                Err(_) => (ProxyHeader::Timeout, peer),
            }
        } else {
            (ProxyHeader::Untrusted, peer)
        };
        if let Some(metrics) = metrics {
            metrics.proxy_header(result);
        }
        if !result.serves() {
            tracing::debug!(peer = %peer, result = result.as_str(), "PROXY protocol header refused; connection closed");
            return None;
        }
        Some(client)
    }
}

/// Whom a well-formed header names.
#[derive(Debug, PartialEq, Eq)]
enum Source {
    /// A client address, from a header of this version (1 or 2).
    Client((u8, SocketAddr)),
    /// No usable address: the TCP peer is the client ([`ProxyHeader::Local`]
    /// or [`ProxyHeader::Unknown`]).
    Peer(ProxyHeader),
}

impl Source {
    fn version((version, _): (u8, SocketAddr)) -> ProxyHeader {
        if version == 1 {
            ProxyHeader::V1
        } else {
            ProxyHeader::V2
        }
    }
}

/// How much of the socket's first bytes is the header, as far as seen.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    /// Not enough bytes yet to tell.
    More,
    /// A v1 line of this many bytes, CRLF included.
    V1(usize),
    /// A v2 header of this many bytes.
    V2(usize),
}

/// Tells from the first `seen` bytes how long the header is.
fn framing(seen: &[u8]) -> Result<Framing, ProxyHeader> {
    let n = seen.len();
    if V2_SIGNATURE.starts_with(&seen[..n.min(V2_SIGNATURE.len())]) {
        if n < V2_FIXED {
            return Ok(Framing::More);
        }
        let length = usize::from(u16::from_be_bytes([seen[14], seen[15]]));
        let total = V2_FIXED + length;
        return if total > V2_MAX {
            Err(ProxyHeader::TooLong)
        } else {
            Ok(Framing::V2(total))
        };
    }
    if !V1_PREFIX.starts_with(&seen[..n.min(V1_PREFIX.len())]) {
        return Err(ProxyHeader::Missing);
    }
    match seen.iter().position(|&b| b == b'\n') {
        Some(at) if at > 0 && seen[at - 1] == b'\r' => Ok(Framing::V1(at + 1)),
        Some(_) => Err(ProxyHeader::Malformed),
        None if n >= V1_MAX => Err(ProxyHeader::TooLong),
        None => Ok(Framing::More),
    }
}

/// Reads the header off `stream` (no deadline: the caller's).
async fn read(stream: &mut TcpStream) -> Result<Source, ProxyHeader> {
    let mut first = [0u8; V1_MAX];
    let mut seen = 0;
    let length = loop {
        seen = peek_more(stream, &mut first, seen).await?;
        match framing(&first[..seen])? {
            Framing::More => {}
            Framing::V1(length) | Framing::V2(length) => break length,
        }
    };
    let mut header = vec![0u8; length];
    stream
        .read_exact(&mut header)
        .await
        .map_err(|_| ProxyHeader::Closed)?;
    parse(&header)
}

/// Peeks at the socket's first bytes into `buf` once more than `seen` of
/// them are there; their number.
async fn peek_more(stream: &TcpStream, buf: &mut [u8], seen: usize) -> Result<usize, ProxyHeader> {
    loop {
        let ready = stream
            .ready(Interest::READABLE)
            .await
            .map_err(|_| ProxyHeader::Closed)?;
        // In try_io: a peek that finds nothing new clears the readiness it
        // was given (and only that one), so the next wait is for new bytes,
        // not a spin on the same ones.
        let peeked = stream.try_io(Interest::READABLE, || {
            let (n, _) = rustix::net::recv(stream, &mut *buf, rustix::net::RecvFlags::PEEK)?;
            if n == seen && n < buf.len() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match peeked {
            Ok(0) => return Err(ProxyHeader::Closed),
            Ok(n) => return Ok(n),
            // Nothing new, and nothing more will come: the client left
            // mid-header (its end stays readable, so this is no spin).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && ready.is_read_closed() => {
                return Err(ProxyHeader::Closed)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(ProxyHeader::Closed),
        }
    }
}

/// Parses a whole header (v1 line or v2 block) with `ppp`.
fn parse(header: &[u8]) -> Result<Source, ProxyHeader> {
    if header.starts_with(V2_SIGNATURE) {
        let parsed = ppp::v2::Header::try_from(header).map_err(|_| ProxyHeader::Malformed)?;
        if parsed.command == ppp::v2::Command::Local {
            return Ok(Source::Peer(ProxyHeader::Local));
        }
        return Ok(match parsed.addresses {
            ppp::v2::Addresses::IPv4(a) => Source::Client((
                2,
                SocketAddr::new(IpAddr::V4(a.source_address), a.source_port),
            )),
            ppp::v2::Addresses::IPv6(a) => Source::Client((
                2,
                SocketAddr::new(IpAddr::V6(a.source_address), a.source_port),
            )),
            ppp::v2::Addresses::Unspecified | ppp::v2::Addresses::Unix(_) => {
                Source::Peer(ProxyHeader::Unknown)
            }
        });
    }
    let parsed = ppp::v1::Header::try_from(header).map_err(|_| ProxyHeader::Malformed)?;
    Ok(match parsed.addresses {
        ppp::v1::Addresses::Tcp4(a) => Source::Client((
            1,
            SocketAddr::new(IpAddr::V4(a.source_address), a.source_port),
        )),
        ppp::v1::Addresses::Tcp6(a) => Source::Client((
            1,
            SocketAddr::new(IpAddr::V6(a.source_address), a.source_port),
        )),
        ppp::v1::Addresses::Unknown => Source::Peer(ProxyHeader::Unknown),
    })
}

#[cfg(test)]
#[path = "proxy_protocol_tests.rs"]
mod tests;
