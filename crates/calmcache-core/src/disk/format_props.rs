//! Property tests for the disk object format: any object the encoder takes
//! (response or Vary marker; any key, status, headers, body, encodings,
//! variant, timings) decodes back to itself; every byte flip, truncation or
//! extension of a file is refused with the right error; arbitrary bytes and
//! arbitrary (re-checksummed) headers never panic the decoder.
//!
//! Files are built in memory with the encoder's own framing
//! ([`write_framed`]), so the properties need no file system.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use proptest::prelude::*;
use tokio::time::Instant;

use super::{
    encode_header, parse_header, parse_object, write_framed, FormatError, MAGIC, PREFIX_LEN,
    VERSION,
};
use crate::freshness::{Freshness, LifetimeSource};
use crate::key::CacheKey;
use crate::object::{CachedObject, Encoded, ObjectMeta, VaryIndex};

/// The file `write_object` would write for `object` under `key`.
fn encode(key: &CacheKey, object: &CachedObject, stored_at: SystemTime) -> Vec<u8> {
    let header = encode_header(key, object, stored_at, object.body.len() as u64).unwrap();
    let mut out = Vec::new();
    write_framed(
        &mut out,
        &header,
        u32::try_from(header.len()).unwrap(),
        object,
    )
    .unwrap();
    out
}

/// Where the header starts and ends in a file.
fn header_range(bytes: &[u8]) -> std::ops::Range<usize> {
    let len = u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
    14..14 + len
}

/// What the format keeps of a duration: whole milliseconds, saturating.
fn stored(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0..100_000_000u64, 0..1_000_000u32)
            .prop_map(|(ms, ns)| Duration::from_millis(ms) + Duration::from_nanos(u64::from(ns))),
        any::<u64>().prop_map(Duration::from_millis),
        // Past u64::MAX milliseconds: saturates.
        any::<u64>().prop_map(Duration::from_secs),
    ]
}

fn freshness() -> impl Strategy<Value = Freshness> {
    (
        duration(),
        duration(),
        duration(),
        duration(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![
            Just(LifetimeSource::Origin),
            Just(LifetimeSource::Heuristic),
            Just(LifetimeSource::Route),
        ],
    )
        .prop_map(
            |(
                lifetime,
                initial_age,
                stale_while_revalidate,
                stale_if_error,
                forbidden,
                immutable,
                source,
            )| {
                Freshness {
                    lifetime,
                    initial_age,
                    stale_while_revalidate,
                    stale_if_error,
                    stale_forbidden: forbidden,
                    immutable,
                    source,
                }
            },
        )
}

fn header_name() -> impl Strategy<Value = HeaderName> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,15}".prop_map(|n| HeaderName::from_bytes(n.as_bytes()).unwrap()),
        prop::sample::select(vec![
            "content-type",
            "set-cookie",
            "etag",
            "cache-tag",
            "surrogate-key",
            "cdn-cache-control",
            "calmcache-cache-control",
        ])
        .prop_map(HeaderName::from_static),
    ]
}

/// Any bytes a header value may hold (obs-text and tabs included).
fn header_value() -> impl Strategy<Value = HeaderValue> {
    proptest::collection::vec(any::<u8>(), 0..40).prop_map(|mut v| {
        for b in &mut v {
            if (*b < 0x20 && *b != b'\t') || *b == 0x7f {
                *b = b'x';
            }
        }
        HeaderValue::from_bytes(&v).unwrap()
    })
}

fn body() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from)
}

fn response() -> impl Strategy<Value = CachedObject> {
    (
        (freshness(), duration()),
        100..1000u16,
        proptest::collection::vec((header_name(), header_value()), 0..8),
        body(),
        proptest::collection::vec((prop::sample::select(vec!["br", "gzip"]), body()), 0..3),
        proptest::option::of("\\PC{0,24}"),
    )
        .prop_map(
            |((freshness, fetch_time), status, pairs, body, encodings, variant)| {
                let mut headers = HeaderMap::new();
                for (name, value) in pairs {
                    headers.append(name, value);
                }
                CachedObject::assemble(
                    ObjectMeta {
                        stored_at: Instant::now(),
                        freshness,
                        fetch_time,
                    },
                    StatusCode::from_u16(status).unwrap(),
                    headers,
                    body,
                    encodings
                        .into_iter()
                        .map(|(coding, body)| Encoded { coding, body })
                        .collect(),
                    variant.map(Box::from),
                )
            },
        )
}

fn marker() -> impl Strategy<Value = CachedObject> {
    (
        (freshness(), duration()),
        any::<u64>(),
        proptest::collection::vec(header_name(), 0..5),
    )
        .prop_map(|((freshness, fetch_time), id, names)| {
            CachedObject::marker(
                ObjectMeta {
                    stored_at: Instant::now(),
                    freshness,
                    fetch_time,
                },
                VaryIndex { id, names },
            )
        })
}

fn object() -> impl Strategy<Value = CachedObject> {
    prop_oneof![4 => response(), 1 => marker()]
}

fn key() -> impl Strategy<Value = CacheKey> {
    ("\\PC{0,8}", "\\PC{0,24}", "\\PC{0,40}").prop_map(|(s, h, p)| CacheKey::new(&s, &h, &p))
}

fn stored_at() -> impl Strategy<Value = SystemTime> {
    prop_oneof![
        (0..4_000_000_000_000u64, 0..1_000_000u32).prop_map(|(ms, ns)| {
            UNIX_EPOCH + Duration::from_millis(ms) + Duration::from_nanos(u64::from(ns))
        }),
        any::<u64>().prop_map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
    ]
}

fn pairs(map: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// `got` is `want` as the format keeps it (durations in whole milliseconds).
fn check_same(want: &CachedObject, got: &CachedObject) -> Result<(), TestCaseError> {
    prop_assert_eq!(want.status, got.status);
    prop_assert_eq!(pairs(&want.headers()), pairs(&got.headers()));
    prop_assert_eq!(&want.body, &got.body);
    let codings = |o: &CachedObject| {
        o.encodings()
            .iter()
            .map(|e| (e.coding, e.body.clone()))
            .collect::<Vec<_>>()
    };
    prop_assert_eq!(codings(want), codings(got));
    prop_assert_eq!(&want.variant(), &got.variant());
    prop_assert_eq!(&want.vary_index(), &got.vary_index());
    prop_assert_eq!(want.has_targeted, got.has_targeted);
    prop_assert_eq!(want.weight(), got.weight());
    let f = want.meta.freshness;
    let kept = Freshness {
        lifetime: stored(f.lifetime),
        initial_age: stored(f.initial_age),
        stale_while_revalidate: stored(f.stale_while_revalidate),
        stale_if_error: stored(f.stale_if_error),
        ..f
    };
    prop_assert_eq!(kept, got.meta.freshness);
    prop_assert_eq!(stored(want.meta.fetch_time), got.meta.fetch_time);
    prop_assert!(got.lazy_body().is_none());
    Ok(())
}

proptest! {
    /// Encode then decode is the identity (up to whole milliseconds), with
    /// and without the body check; the stored key and store time come back;
    /// asking for another key is a [`FormatError::KeyMismatch`].
    #[test]
    fn objects_round_trip(
        key in key(),
        other in key(),
        object in object(),
        stored_at in stored_at(),
    ) {
        let bytes = encode(&key, &object, stored_at);
        for verify_body in [true, false] {
            let (got_key, got) =
                parse_object(bytes.clone(), Some(&key.as_ref()), verify_body).unwrap();
            prop_assert_eq!(&got_key, &key);
            check_same(&object, &got)?;
        }
        let header = parse_header(&bytes[header_range(&bytes)]).unwrap();
        let since_epoch = stored_at.duration_since(UNIX_EPOCH).unwrap();
        prop_assert_eq!(header.stored_at, UNIX_EPOCH + stored(since_epoch));
        let mismatch = parse_object(bytes, Some(&other.as_ref()), true);
        if other == key {
            prop_assert!(mismatch.is_ok());
        } else {
            prop_assert!(matches!(mismatch, Err(FormatError::KeyMismatch)), "{:?}", mismatch.err());
        }
    }

    /// Every region is covered by a check: a changed byte anywhere makes the
    /// file unreadable, with the error of its region. Without the body check
    /// (the caller verified the body before), only a change in the payload
    /// or its CRC goes unnoticed.
    #[test]
    fn every_flip_is_refused(
        key in key(),
        object in object(),
        at in any::<prop::sample::Index>(),
        mask in 1..=255u8,
    ) {
        let mut bytes = encode(&key, &object, SystemTime::now());
        let header = header_range(&bytes);
        let payload_at = header.end + 4;
        let at = at.index(bytes.len());
        bytes[at] ^= mask;
        let full = parse_object(bytes.clone(), None, true);
        let err = full.as_ref().err();
        match at {
            0..=7 => prop_assert!(matches!(err, Some(FormatError::BadMagic)), "{:?}", err),
            8..=9 => prop_assert!(matches!(err, Some(FormatError::UnsupportedVersion(_))), "{:?}", err),
            // The header length: the header CRC is then read elsewhere.
            10..=13 => prop_assert!(err.is_some()),
            // The header and its CRC, then the payload and its CRC.
            _ => prop_assert!(matches!(err, Some(FormatError::Checksum)), "{} {:?}", at, err),
        }
        let unverified = parse_object(bytes, None, false);
        prop_assert_eq!(unverified.is_ok(), at >= payload_at, "{} {:?}", at, unverified.err());
    }

    /// A file cut short anywhere is [`FormatError::Truncated`] (with its
    /// actual length) or, before the magic is whole, [`FormatError::BadMagic`];
    /// a file with bytes after its CRC is refused too.
    #[test]
    fn truncations_and_extensions_are_refused(
        key in key(),
        object in object(),
        cut in any::<prop::sample::Index>(),
        extra in proptest::collection::vec(any::<u8>(), 1..16),
    ) {
        let bytes = encode(&key, &object, SystemTime::now());
        let len = cut.index(bytes.len());
        let got = parse_object(bytes[..len].to_vec(), None, true);
        if len < MAGIC.len() {
            prop_assert!(matches!(got, Err(FormatError::BadMagic)), "{} {:?}", len, got.err());
        } else {
            prop_assert!(
                matches!(got, Err(FormatError::Truncated { actual, .. }) if actual == len as u64),
                "{} {:?}", len, got.err()
            );
        }
        let mut longer = bytes;
        longer.extend_from_slice(&extra);
        prop_assert!(parse_object(longer, None, true).is_err());
    }

    /// Arbitrary bytes never panic the decoder; without the magic they are
    /// [`FormatError::BadMagic`]. With a valid prefix they reach the length
    /// and checksum checks.
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        header_len in prop_oneof![0..400u32, any::<u32>()],
    ) {
        let got = parse_object(bytes.clone(), None, true);
        if !bytes.starts_with(&MAGIC) {
            prop_assert!(matches!(got, Err(FormatError::BadMagic)));
        }
        let mut framed = MAGIC.to_vec();
        framed.extend_from_slice(&VERSION.to_le_bytes());
        framed.extend_from_slice(&header_len.to_le_bytes());
        framed.extend_from_slice(&bytes);
        prop_assert_eq!(framed.len() as u64, PREFIX_LEN + bytes.len() as u64);
        let _ = parse_object(framed, None, true);
    }

    /// Arbitrary header bytes, and a real header with a few bytes changed,
    /// inserted or removed, never panic the header parser. Re-framed with
    /// valid checksums, what does decode is a consistent object: encoding
    /// it again decodes to the same thing.
    #[test]
    fn arbitrary_headers_never_panic(
        noise in proptest::collection::vec(any::<u8>(), 0..200),
        key in key(),
        object in object(),
        edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), 0..3u8, any::<u8>()), 1..4),
    ) {
        let _ = parse_header(&noise);
        let bytes = encode(&key, &object, SystemTime::now());
        let range = header_range(&bytes);
        let mut header = bytes[range.clone()].to_vec();
        for (at, kind, byte) in edits {
            let at = at.index(header.len() + 1);
            match kind {
                0 if at < header.len() => header[at] = byte,
                1 => header.insert(at, byte),
                _ if at < header.len() => {
                    header.remove(at);
                }
                _ => header.push(byte),
            }
        }
        let Ok(parsed) = parse_header(&header) else {
            return Ok(());
        };
        let mut file = bytes[..10].to_vec();
        file.extend_from_slice(&u32::try_from(header.len()).unwrap().to_le_bytes());
        file.extend_from_slice(&header);
        file.extend_from_slice(&crc32fast::hash(&header).to_le_bytes());
        file.extend_from_slice(&bytes[range.end + 4..]);
        if let Ok((got_key, got)) = parse_object(file, None, true) {
            let again = encode(&got_key, &got, parsed.stored_at);
            let (key2, got2) = parse_object(again, None, true).unwrap();
            prop_assert_eq!(key2, got_key);
            check_same(&got, &got2)?;
        }
    }
}
