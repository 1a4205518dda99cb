//! `server.proxy_protocol_listeners` and `server.proxy_protocol_from`: which
//! listeners expect a PROXY protocol header (v1 or v2) before anything else
//! on a connection, and which sources may send one.
//!
//! Owns the validated value and the question "may this source speak the
//! PROXY protocol here"; reading the header is `net/proxy_protocol.rs`.
//! Must not: touch a socket.

use std::net::{IpAddr, SocketAddr};

/// Where the PROXY protocol is expected, and from whom.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyProtocolConfig {
    /// Listen addresses, as written in `server.listen` or
    /// `server.tls_listen`, whose connections start with a PROXY header
    /// (for a TLS listener: before the ClientHello). Empty: none (default).
    pub listeners: Vec<SocketAddr>,
    /// Sources (the load balancers) allowed to connect to those listeners;
    /// a connection from anywhere else is closed before a byte is read.
    /// Never empty when `listeners` is not (`check` refuses it: there is no
    /// "anyone" default; write `0.0.0.0/0` and `::/0` to mean it).
    pub from: Vec<ipnet::IpNet>,
}

impl ProxyProtocolConfig {
    /// Some listener expects the header.
    pub fn is_on(&self) -> bool {
        !self.listeners.is_empty()
    }

    /// `ip` (an IPv4-mapped IPv6 address counts as its IPv4 one) is in
    /// `from`.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.from.iter().any(|net| net.contains(&ip))
    }
}
