//! The storage tier trait every zone kind implements, and its error.

use std::sync::Arc;

use crate::key::{CacheKey, KeyRef};
use crate::object::CachedObject;

/// Why a tier could not take an object. A failing tier never fails a request:
/// the caller logs, counts and treats it as a miss.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The object exceeds the zone's per-object limit.
    #[error("object of {size} bytes exceeds the zone's max_object_size of {limit} bytes")]
    TooLarge {
        /// Weight of the refused object.
        size: u64,
        /// The zone's limit.
        limit: u64,
    },
    /// The storage failed (a disk zone's I/O error, full or read-only file system).
    #[error("storage failed: {0}")]
    Io(String),
}

/// A place objects are kept: looked up by borrowed key, bounded in bytes.
pub trait Tier: Send + Sync {
    /// The object under `key`, fresh or not; the caller decides what to do with it.
    fn get(&self, key: &KeyRef<'_>) -> Option<Arc<CachedObject>>;
    /// Stores or replaces the object under `key`.
    fn insert(&self, key: CacheKey, object: Arc<CachedObject>) -> Result<(), CacheError>;
    /// Drops the object under `key`; true when there was one.
    fn remove(&self, key: &KeyRef<'_>) -> bool;
    /// Bytes in use.
    fn size_bytes(&self) -> u64;
    /// Objects held.
    fn objects(&self) -> u64;
    /// Configured bound in bytes.
    fn max_size(&self) -> u64;
    /// Largest object the tier takes; larger ones stream through uncached.
    fn max_object_size(&self) -> u64;
}
