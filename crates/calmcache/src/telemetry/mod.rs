//! What happened: per-route counters, latency histograms and gauges, the
//! `max_inflight_body` budget gauge, the upstream connections opened and
//! closed (upstream_conns.rs), the access log's writer, whether
//! the process log is coloured, and the Redis client's log lines
//! (rate-limited into it: client_log.rs).
//!
//! Owns: every number `/status` and `/metrics` report, and the request
//! lines. Imports: [`crate::http`] and [`crate::config`] only; never the
//! network layer, the request path, ops or run (they record into it).

pub(crate) mod access_log;
pub(crate) mod client_log;
pub(crate) mod counter;
pub(crate) mod inflight;
pub(crate) mod log_colour;
pub(crate) mod metrics;
pub(crate) mod stats;
pub(crate) mod upstream_conns;
