//! The operator's side: the admin listener, /status, /metrics, the dashboard.

pub mod admin;
pub mod prometheus;
pub mod status;
