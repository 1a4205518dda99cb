//! Paged bodies offered to the connection that writes them (see
//! `crate::net::zero_copy`): a body whose bytes lie in pages of their own
//! ([`calmcache_core::page_body`]) and is at least [`SPLICED_MIN`] long is
//! offered as it is handed to hyper, and
//! the connection's IO splices a slice to the socket only if it lies inside
//! a body offered on the same thread. An offer holds a reference to the
//! body, so the pages checked are the pages sent.

use std::cell::RefCell;

use bytes::Bytes;
use calmcache_core::page_body::SPLICED_MIN;
use calmcache_core::CachedObject;

/// Smallest slice worth a splice: smaller bodies are not offered, smaller
/// slices of an offered one are copied (below it the copy is cheaper).
pub(crate) const SPLICE_MIN: usize = 16 * 1024;

/// Bodies offered on this thread, newest last.
const OFFERS: usize = 4;

thread_local! {
    static OFFERED: RefCell<Offered> = const { RefCell::new(Offered { bodies: [const { None }; OFFERS], next: 0 }) };
}

/// The last bodies offered on this thread.
struct Offered {
    bodies: [Option<Bytes>; OFFERS],
    next: usize,
}

/// Bytes known to lie in a paged body (made only by [`PagedSlice::of`]).
#[derive(Debug)]
pub struct PagedSlice(Bytes);

impl PagedSlice {
    /// `slice`, if it lies inside `object`'s body and that body is paged
    /// and at least [`SPLICED_MIN`] long (a smaller paged body is sent as a
    /// heap body is). (While `object` lives its pages hold that address
    /// range, so no other buffer can.)
    pub(crate) fn of(object: &CachedObject, slice: &Bytes) -> Option<PagedSlice> {
        if !object.is_paged() || object.body.len() < SPLICED_MIN || slice.is_empty() {
            return None;
        }
        let at = object.body.as_ptr() as usize;
        let start = slice.as_ptr() as usize;
        let inside = at <= start && start + slice.len() <= at + object.body.len();
        inside.then(|| PagedSlice(slice.clone()))
    }

    /// The bytes, for hyper.
    pub(crate) fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Its length.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Offers a paged body's bytes (see the module doc) to the connection
/// writing them on this thread.
pub(crate) fn offer(paged: &PagedSlice) {
    if paged.0.len() < SPLICE_MIN {
        return;
    }
    OFFERED.with(|o| {
        let mut o = o.borrow_mut();
        let at = o.next;
        o.bodies[at] = Some(paged.0.clone());
        o.next = (at + 1) % OFFERS;
    });
}

/// True when `slice` lies wholly inside a body offered on this thread.
pub(crate) fn offered(slice: &[u8]) -> bool {
    let start = slice.as_ptr() as usize;
    let end = start + slice.len();
    OFFERED.with(|o| {
        o.borrow().bodies.iter().flatten().any(|b| {
            let at = b.as_ptr() as usize;
            at <= start && end <= at + b.len()
        })
    })
}
