//! HTTP pieces that know nothing of routes, zones, config or the running
//! proxy: header rules (hop-by-hop, forwarding fields, `Age`,
//! `Cache-Status`), response bodies, content codings, `Vary`, preconditions
//! and validators, ranges, the proxy's errors and small canned answers.
//!
//! Owns: everything a response or request header means on its own.
//! Imports: `calmcache-core` only; nothing else of this crate (it is the
//! bottom layer, so every other folder may use it).

pub mod body;
pub mod compress;
pub mod conditional;
pub mod error;
pub mod file_body;
pub mod headers;
pub mod range;
pub mod reply;
pub mod vary;
