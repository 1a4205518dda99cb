//! The writing record's codec and seal: a record reads back as written;
//! a bad length, count or generation never decodes; with the fleet secret
//! a record that is unsigned, changed or moved to another key is refused.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::fleet::tests::{config, signed_config};
use calmcache_testkit::redis::Redis;

fn record(pieces: usize) -> Record {
    Record {
        gen: 0x0123_4567_89ab_cdef,
        token: "node-1:7".into(),
        head: b"CALMOBJ\0 a head".to_vec(),
        digests: (0..pieces).map(|i| [i as u8; DIGEST_LEN]).collect(),
    }
}

#[test]
fn a_record_reads_back_as_written() {
    for pieces in [0, 1, 5] {
        let r = record(pieces);
        assert_eq!(Record::decode(&r.encode(), u64::MAX), Ok(r));
    }
}

#[test]
fn a_malformed_record_is_refused() {
    let good = record(3).encode();
    for bad in [
        &good[..good.len() - 1],
        &good[..good.len() - DIGEST_LEN],
        &[good.as_slice(), &[0u8; DIGEST_LEN]].concat(),
        &good[4..],
        &good[..10],
    ] {
        assert_eq!(Record::decode(bad, u64::MAX), Err(PieceError::Malformed));
    }
    // More digests than an object within the limit has pieces.
    let max = 2 * PIECE_SIZE as u64;
    assert_eq!(Record::decode(&good, max), Err(PieceError::Malformed));
    assert!(Record::decode(&record(2).encode(), max).is_ok());
    // No head.
    let headless = Record {
        head: Vec::new(),
        ..record(1)
    };
    assert_eq!(
        Record::decode(&headless.encode(), u64::MAX),
        Err(PieceError::Malformed)
    );
}

#[tokio::test]
async fn a_sealed_record_opens_only_for_its_key_and_secret() {
    let redis = Redis::start();
    let signed = Fleet::new(&signed_config(&redis)).unwrap();
    let plain = Fleet::new(&config(&redis)).unwrap();
    let key = CacheKey::new("http", "h", "/a");
    let r = record(2);
    let sealed = signed.seal_record(&key, 42, &r);
    assert_eq!(
        signed.open_record(&key, sealed.clone()),
        Some((42, r.clone()))
    );
    // Another key, another since_ms, a changed digest, a changed
    // generation in the clear: refused.
    let other = CacheKey::new("http", "h", "/b");
    assert_eq!(signed.open_record(&other, sealed.clone()), None);
    let mut since = sealed.clone();
    since[8] ^= 1;
    assert_eq!(signed.open_record(&key, since), None);
    let mut digest = sealed.clone();
    let last = digest.len() - 1;
    digest[last] ^= 1;
    assert_eq!(signed.open_record(&key, digest), None);
    // Forged: written without the secret.
    let forged = plain.seal_record(&key, 42, &r);
    assert_eq!(signed.open_record(&key, forged.clone()), None);
    assert_eq!(
        signed
            .stats
            .entries_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );
    // An unsigned fleet reads its own; its generation in the clear must
    // be the one inside.
    assert_eq!(plain.open_record(&key, forged.clone()), Some((42, r)));
    let mut gen = forged;
    gen[0] ^= 1;
    assert_eq!(plain.open_record(&key, gen), None);
}
