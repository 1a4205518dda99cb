//! What happened: per-route counters, latency histograms and gauges, the
//! `max_inflight_body` budget gauge, the access log's writer, and whether
//! the process log is coloured.
//!
//! Owns: every number `/status` and `/metrics` report, and the request
//! lines. Imports: [`crate::http`] and [`crate::config`] only; never the
//! network layer, the request path, ops or run (they record into it).

pub(crate) mod access_log;
pub(crate) mod counter;
pub(crate) mod inflight;
pub(crate) mod log_colour;
pub(crate) mod metrics;
pub(crate) mod stats;
