//! The network layer: client connections, TLS, write clocks, upstream pools and health.

pub mod conn;
pub mod health;
pub mod shutdown;
pub mod stream_clock;
pub mod tls;
pub mod upstream;
pub mod write_clock;
