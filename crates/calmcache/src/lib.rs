//! calmcache: a caching reverse proxy that keeps slow origins calm.
//!
//! # Layout
//! - [`config`]: config file -> raw (serde) -> validated [`config::Config`].

pub mod config;
