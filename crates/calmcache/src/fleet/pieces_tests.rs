//! The manifest's codec and the pieces' verification: a manifest read back
//! is the one written; a bad length, count, digest, index, generation or
//! entry never verifies.

use super::*;

const ENTRY: &str = "cc:{0123456789abcdef}:m";

/// A value of `len` bytes, each byte telling its position.
fn value(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_manifest_reads_back_as_written() {
    let v = value(PIECE_SIZE * 2 + 17);
    let m = Manifest::of(ENTRY, 42, &v);
    assert_eq!(m.count(), 3);
    assert_eq!(m.range(2), PIECE_SIZE * 2..PIECE_SIZE * 2 + 17);
    let bytes = m.encode();
    assert!(is_manifest(&bytes));
    assert_eq!(Manifest::decode(&bytes, u64::MAX), Ok(m.clone()));
    assert_eq!(m.verify(ENTRY, &v), Ok(()));
}

#[test]
fn a_value_in_the_disk_format_is_not_a_manifest() {
    assert!(!is_manifest(b"CALMOBJ\0\x01\x00"));
    assert!(!is_manifest(b"CCM"));
}

#[test]
fn a_malformed_manifest_is_refused() {
    let m = Manifest::of(ENTRY, 1, &value(PIECE_SIZE + 1));
    let good = m.encode();
    // Cut short, one digest missing, one too many, no magic.
    for bad in [
        &good[..10],
        &good[..good.len() - 1],
        &good[..good.len() - DIGEST_LEN],
        &[good.as_slice(), &[0u8; DIGEST_LEN]].concat(),
        &good[4..],
    ] {
        assert_eq!(Manifest::decode(bad, u64::MAX), Err(PieceError::Malformed));
    }
    // A length that the count does not cover.
    let mut longer = good.clone();
    longer[12..20].copy_from_slice(&(PIECE_SIZE as u64 * 5).to_le_bytes());
    assert_eq!(
        Manifest::decode(&longer, u64::MAX),
        Err(PieceError::Malformed)
    );
    // Zero piece size, zero length.
    let mut zero = good.clone();
    zero[20..24].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        Manifest::decode(&zero, u64::MAX),
        Err(PieceError::Malformed)
    );
    let empty = Manifest::of(ENTRY, 1, &[]).encode();
    assert_eq!(
        Manifest::decode(&empty, u64::MAX),
        Err(PieceError::Malformed)
    );
}

#[test]
fn a_manifest_larger_than_this_node_takes_is_refused_before_any_allocation() {
    let m = Manifest::of(ENTRY, 1, &value(PIECE_SIZE + 1));
    let mut huge = m.encode();
    // 1 TiB claimed: refused on its length alone.
    huge[12..20].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert_eq!(Manifest::decode(&huge, 64 << 20), Err(PieceError::TooLarge));
    assert_eq!(
        Manifest::decode(&m.encode(), PIECE_SIZE as u64),
        Err(PieceError::TooLarge)
    );
}

#[test]
fn a_changed_byte_short_value_or_swapped_pieces_fail_verification() {
    let v = value(PIECE_SIZE * 3);
    let m = Manifest::of(ENTRY, 7, &v);
    let mut changed = v.clone();
    changed[PIECE_SIZE + 5] ^= 1;
    assert_eq!(m.verify(ENTRY, &changed), Err(PieceError::Digest));
    assert_eq!(m.verify(ENTRY, &v[..v.len() - 1]), Err(PieceError::Short));
    // Pieces 0 and 1 swapped (same length): the index is in the digest.
    let mut swapped = v[PIECE_SIZE..PIECE_SIZE * 2].to_vec();
    swapped.extend_from_slice(&v[..PIECE_SIZE]);
    swapped.extend_from_slice(&v[PIECE_SIZE * 2..]);
    assert_eq!(m.verify(ENTRY, &swapped), Err(PieceError::Digest));
}

#[test]
fn pieces_of_another_fill_or_another_object_never_verify() {
    let v = value(PIECE_SIZE * 2);
    let m = Manifest::of(ENTRY, 7, &v);
    // The same bytes listed under another generation or entry.
    let other_gen = Manifest {
        gen: 8,
        ..m.clone()
    };
    assert_eq!(other_gen.verify(ENTRY, &v), Err(PieceError::Digest));
    assert_eq!(
        m.verify("cc:{fedcba9876543210}:m", &v),
        Err(PieceError::Digest)
    );
    // Every part of the digest's input counts.
    let d = digest(ENTRY, 7, 0, &v[..PIECE_SIZE]);
    assert_ne!(d, digest(ENTRY, 7, 1, &v[..PIECE_SIZE]));
    assert_ne!(d, digest(ENTRY, 6, 0, &v[..PIECE_SIZE]));
    assert_ne!(d, digest(&ENTRY[1..], 7, 0, &v[..PIECE_SIZE]));
}

#[tokio::test(start_paused = true)]
async fn the_budget_refuses_what_it_could_never_hold_and_gives_back_on_drop() {
    {
        let budget = PieceBudget::new(1 << 20);
        assert!(budget.take((1 << 20) + 1).await.is_none());
        let held = budget.take(1 << 20).await.expect("room for all of it");
        // Full: a second waits its second, then gives up.
        assert!(budget.take(1024).await.is_none());
        drop(held);
        assert!(budget.take(1 << 20).await.is_some());
    }
}
