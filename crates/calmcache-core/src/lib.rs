//! calmcache-core: the cache engine behind calmcache, free of any HTTP server types.
//!
//! # Layout
//! - [`policy`]: the refresh policies (none, lock, PER/XFetch, SUS) as pure decisions.

pub mod policy;

pub use policy::RefreshMode;
