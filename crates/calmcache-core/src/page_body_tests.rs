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
