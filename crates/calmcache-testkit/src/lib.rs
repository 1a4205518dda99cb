//! Test fixtures for calmcache: a steerable origin that counts its requests,
//! an in-process proxy built from a few lines of TOML, and a small client.
//!
//! # Layout
//! - [`origin`]: [`Origin`], steered per request by `x-origin-*` headers.
//! - [`proxy`]: [`Proxy`], a running calmcache on `127.0.0.1:0` with its admin listener.
//! - [`client`]: [`get`] and [`Reply`], one request with timing.

pub mod client;
pub mod origin;
pub mod proxy;

pub use client::{get, get_with, Reply};
pub use origin::Origin;
pub use proxy::Proxy;
