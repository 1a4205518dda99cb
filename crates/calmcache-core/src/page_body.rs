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
mod tests {
    use super::*;
    use crate::object::CachedObject;
    use http::{HeaderMap, StatusCode};

    /// What a fill keeps: paged when it can be, else one heap buffer.
    fn collect(chunks: &[Bytes], total: usize) -> StoredBody {
        match paged(chunks, total) {
            Some(p) => StoredBody::Paged(p),
            None => StoredBody::Heap(chunks.concat().into()),
        }
    }

    fn chunks(total: usize) -> Vec<Bytes> {
        let all: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        all.chunks(10_000).map(Bytes::copy_from_slice).collect()
    }

    #[test]
    fn large_bodies_are_paged_small_ones_are_not_and_bytes_are_kept() {
        for total in [0, 1, PAGED_MIN - 1, PAGED_MIN, PAGED_MIN + 1, 1_000_003] {
            let parts = chunks(total);
            let body = collect(&parts, total);
            assert_eq!(
                matches!(body, StoredBody::Paged(_)),
                total >= PAGED_MIN,
                "{total}"
            );
            let joined: Vec<u8> = parts.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(body.bytes()[..], joined[..], "{total}");
        }
        // A wrong total is never paged (the chunks decide the length).
        let parts = chunks(PAGED_MIN + 10);
        let body = collect(&parts, PAGED_MIN + 11);
        assert!(matches!(body, StoredBody::Heap(_)));
        assert_eq!(body.bytes().len(), PAGED_MIN + 10);
    }

    #[test]
    fn a_mapping_lives_while_any_slice_does() {
        let before = live();
        let body = collect(&chunks(200_000), 200_000);
        assert!(live() > before);
        let slice = body.bytes().slice(100..200);
        drop(body);
        assert_eq!(slice[0], 100);
        drop(slice);
    }

    #[test]
    fn a_paged_object_costs_whole_pages_and_stays_paged_when_freshened() {
        let meta = crate::test_tier::object_with("", HeaderMap::new())
            .meta
            .clone();
        let body = collect(&chunks(100_001), 100_001);
        let object = CachedObject::assemble(
            meta.clone(),
            StatusCode::OK,
            HeaderMap::new(),
            body,
            Vec::new(),
            None,
        );
        assert!(object.is_paged());
        let heap = CachedObject::new(
            meta.clone(),
            StatusCode::OK,
            HeaderMap::new(),
            object.body.clone(),
        );
        assert!(!heap.is_paged(), "a Bytes alone is never taken for paged");
        assert_eq!(paged_cost(100_001), 25 * 4096 + 128);
        assert!(object.memory_cost() >= paged_cost(100_001));
        let fresh = object.freshened(meta, HeaderMap::new());
        assert!(fresh.is_paged());
        assert!(fresh.stored_body().bytes().as_ptr() == object.body.as_ptr());
    }
}
