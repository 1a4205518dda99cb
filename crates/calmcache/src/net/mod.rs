//! The network layer: client connections (HTTP/1.1, HTTP/2, h2c) and their
//! write clocks, zero-copy sends of large cached bodies, TLS termination, upstream keepalive pools with their
//! servers' health, their TLS client and unix-socket origins, the WebSocket tunnel's pump (and its splice for large messages on plain TCP), and the tunnel registry a worker closes when it stops.
//!
//! Owns: sockets and protocols, not what a request means for the cache.
//! Imports: [`crate::http`], [`crate::config`], [`crate::telemetry`]; never
//! the request path ([`crate::proxy`]), ops or run.

pub(crate) mod balance;
pub(crate) mod blame;
pub(crate) mod budget;
pub(crate) mod conn;
pub(crate) mod early_hints;
pub(crate) mod health;
pub(crate) mod limit;
pub(crate) mod listener;
pub(crate) mod origin_body;
pub(crate) mod origin_tls;
pub(crate) mod proxy_protocol;
pub(crate) mod shared_budget;
pub(crate) mod shutdown;
pub(crate) mod stream_clock;
pub(crate) mod tls;
pub(crate) mod tunnel;
pub(crate) mod tunnel_splice;
pub(crate) mod unix_origin;
pub(crate) mod upstream;
pub(crate) mod write_clock;
pub(crate) mod zero_copy;
