//! What happened: counters, histograms, gauges and the access log.

pub mod access_log;
pub mod inflight;
pub mod metrics;
pub mod stats;
