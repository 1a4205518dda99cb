//! Running a proxy: listeners, workers, limits, reloads and graceful stop.

pub mod listen;
pub mod preflight;
pub mod reload;
pub mod server;
