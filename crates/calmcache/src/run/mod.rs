//! Running a proxy: `start`, the listeners and worker threads, the
//! generation a request is served by, reloads (SIGHUP, `POST /reload`),
//! preflight checks, the graceful stop and systemd's readiness protocol;
//! `check --fleet` (fleet_check.rs).
//!
//! Owns: the process's shape (threads, sockets, generations). Imports:
//! every folder below it; only [`crate::demo`] and `main.rs` import it.

pub(crate) mod fleet_check;
pub(crate) mod listen;
pub(crate) mod notify;
pub(crate) mod preflight;
pub(crate) mod reload;
pub(crate) mod server;
