//! Why a config could not become a proxy generation (its upstreams and
//! zones built).

use crate::net::upstream::UpstreamError;

/// Why a config could not become a proxy generation: at start (exit 1) or
/// at a reload (refused; the running generation stays). Each message
/// carries its cause (not also given as `source()`, so a `{:#}` chain
/// prints it once).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// An upstream's pool could not be built.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The `[fleet]` Redis settings cannot make a client (a URL redis-rs
    /// refuses).
    #[error("fleet.redis: {0}")]
    Fleet(redis::RedisError),
    /// A disk zone's directory cannot hold a cache: not creatable, someone
    /// else's files, or locked by another calmcache process.
    #[error("zones.{zone}: cannot use {} as a cache directory: {error}", path.display())]
    ZoneDir {
        /// The zone's name.
        zone: String,
        /// Its directory.
        path: std::path::PathBuf,
        /// What opening it said.
        error: std::io::Error,
    },
}
