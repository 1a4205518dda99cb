//! Large bodies kept in pages of their own, so they can be sent without a
//! copy and cost the zone what they take.
//!
//! A memory-zone body of at least [`PAGED_MIN`] bytes is copied once, at
//! fill, into an anonymous mapping of its own ([`PagedBytes`]). Those pages
//! are written only while the mapping is being filled, never after it is
//! frozen read-only, and go back to the kernel (`munmap`) when the last
//! `Bytes` pointing into them is dropped: the allocator never hands them out
//! again. That is what makes it safe to give the kernel references to them
//! (`vmsplice` into a pipe, then `splice` to a socket: see
//! `calmcache::net::zero_copy`): bytes still in flight when the object is
//! evicted keep their pages alive, and nothing can write into them.
//!
//! A heap buffer (any other `Bytes`) must never be spliced: once freed, the
//! allocator reuses it for other data while the kernel may still be sending
//! it. [`StoredBody`] carries the difference in the type.
//!
//! The mapping costs whole pages ([`paged_cost`]); the number of live
//! mappings is bounded ([`MAX_PAGED`], under the kernel's default
//! `vm.max_map_count`), beyond which bodies go to the heap as before.
//!
//! Memory: a body on the heap leaves a hole of its size when it is evicted,
//! and the fill's transient buffers and the smaller objects stored since
//! land in such holes, so a zone that evicts 16 KiB bodies from the heap
//! grew to 1.19x its `max_size` (bench/memory, calm-bound); pages go back
//! to the kernel when the body goes, so a zone's bodies in pages cost what
//! they are weighed. Only bodies of [`SPLICED_MIN`] or more are sent by
//! splice: the hit path of a 16-64 KiB body is a copy, as for a heap body.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use bytes::Bytes;

/// Smallest body kept in pages of its own: a multiple of the page, so the
/// smallest paged body wastes no page tail (a 16 KiB body is 4 pages).
pub const PAGED_MIN: usize = 16 * 1024;

/// Smallest paged body a plain HTTP/1.x hit sends by splice
/// (`calmcache::net::zero_copy`); smaller ones are copied as heap bodies
/// are (the splice was measured at 64 KiB and up only).
pub const SPLICED_MIN: usize = 64 * 1024;

/// Most paged bodies alive at once (each is one mapping; Linux allows
/// 65,530 per process by default).
pub const MAX_PAGED: usize = 32 * 1024;

/// The page size assumed for costs.
const PAGE: usize = 4096;

/// Paged bodies alive now.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A body in pages of its own (module doc): never written after it was
/// made, unmapped (not reused) when the last reference goes.
#[derive(Clone, Debug)]
pub struct PagedBytes(Bytes);

impl PagedBytes {
    /// The bytes (shared, not copied).
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// `b` again, known to be paged: only for the body of an object made
    /// from a [`PagedBytes`] (`CachedObject::stored_body`).
    pub(crate) fn shared(b: &Bytes) -> PagedBytes {
        PagedBytes(b.clone())
    }
}

/// The owner of one mapping, counted in [`LIVE`].
struct Pages(memmap2::Mmap);

impl AsRef<[u8]> for Pages {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Relaxed);
    }
}

/// A stored body: on the heap, or in pages of its own.
#[derive(Clone, Debug)]
pub enum StoredBody {
    /// An ordinary shared buffer.
    Heap(Bytes),
    /// A body in pages of its own.
    Paged(PagedBytes),
}

impl StoredBody {
    /// The bytes (shared, not copied).
    pub fn bytes(&self) -> &Bytes {
        match self {
            StoredBody::Heap(b) => b,
            StoredBody::Paged(p) => &p.0,
        }
    }
}

impl From<Bytes> for StoredBody {
    fn from(b: Bytes) -> Self {
        StoredBody::Heap(b)
    }
}

/// The chunks (`total` bytes in all) copied into a new mapping, or `None`
/// when `total` is under [`PAGED_MIN`], the chunks do not add up to it, too
/// many are alive or the kernel refused a mapping (the caller then keeps
/// the body on the heap).
pub fn paged(chunks: &[Bytes], total: usize) -> Option<PagedBytes> {
    if total < PAGED_MIN || chunks.iter().map(Bytes::len).sum::<usize>() != total {
        return None;
    }
    if LIVE.fetch_add(1, Relaxed) >= MAX_PAGED {
        LIVE.fetch_sub(1, Relaxed);
        return None;
    }
    let filled = (|| {
        let mut map = memmap2::MmapMut::map_anon(total)?;
        let mut rest = &mut map[..];
        for c in chunks {
            let (into, after) = rest.split_at_mut(c.len());
            into.copy_from_slice(c);
            rest = after;
        }
        map.make_read_only()
    })();
    match filled {
        Ok(map) => Some(PagedBytes(Bytes::from_owner(Pages(map)))),
        Err(e) => {
            LIVE.fetch_sub(1, Relaxed);
            tracing::debug!(error = %e, "no mapping for a large body; kept on the heap");
            None
        }
    }
}

/// RAM a paged body of `len` bytes takes: whole pages, plus the owner and
/// the shared handle on the heap.
pub const fn paged_cost(len: usize) -> usize {
    len.div_ceil(PAGE) * PAGE + 128
}

/// Paged bodies alive now.
#[cfg(test)]
fn live() -> usize {
    LIVE.load(Relaxed)
}

#[cfg(test)]
#[path = "page_body_tests.rs"]
mod tests;
