//! HTTP pieces that know nothing of routes, zones or the running proxy.

pub mod body;
pub mod compress;
pub mod conditional;
pub mod error;
pub mod file_body;
pub mod headers;
pub mod range;
pub mod reply;
pub mod vary;
