//! The network layer: client connections (HTTP/1.1, HTTP/2, h2c) and their
//! write clocks, TLS termination, upstream keepalive pools with their
//! servers' health, and the tunnel registry a worker closes when it stops.
//!
//! Owns: sockets and protocols, not what a request means for the cache.
//! Imports: [`crate::http`], [`crate::config`], [`crate::telemetry`]; never
//! the request path ([`crate::proxy`]), ops or run.

pub mod conn;
pub mod health;
pub mod shutdown;
pub mod stream_clock;
pub mod tls;
pub mod upstream;
pub mod write_clock;
