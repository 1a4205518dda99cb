//! What memory an allocation really takes, for the weight of stored
//! objects, keys and heads (a zone's `max_size` counts these bytes).
//!
//! A leaf: it imports nothing from the crate, so the stored types that weigh
//! themselves (`object.rs`, `head.rs`, `key.rs`) share it without importing
//! each other.

/// Bytes glibc's malloc takes for an allocation of `n` bytes: an 8-byte
/// header, 16-byte alignment, 32 bytes at least; above its mmap threshold
/// (128 KiB unless it has raised it), whole pages.
pub const fn malloc_cost(n: usize) -> usize {
    if n == 0 {
        0
    } else if n >= 128 * 1024 {
        (n + 16).div_ceil(4096) * 4096
    } else if n + 8 <= 32 {
        32
    } else {
        (n + 8).div_ceil(16) * 16
    }
}

/// What a shared `Bytes` adds to its buffer once it has been cloned (a
/// vec-backed `Bytes` is promoted on its first clone: its count and
/// capacity move to a 24-byte allocation).
pub(crate) const SHARED_COST: usize = 32;
