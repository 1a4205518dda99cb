//! [`BodyUris`]: which URIs of a zone may have entries keyed by a request
//! body (QUERY, a cached POST; [`KeyRef::with_body`]). Such entries live
//! under their URI's variant keys with no marker at the URI's own key, so
//! a purge by URL finds them with a prefix scan of the zone; this record
//! keeps that scan to the URIs that may have some. Any client can store a
//! QUERY answer, so a zone-wide "has body keys" flag would let one request
//! turn every later purge by URL into a zone scan.
//!
//! A bitmap of 2^20 bits (128 KiB, allocated at the first note) indexed by
//! a hash of the URI's key: noting is one atomic OR, asking one load, no
//! lock and no allocation. Never a false "no" (a noted URI stays noted, so
//! a purge always reaches its body variants); a false "yes" (another URI
//! on the same bit) costs one scan, what every purge by URL cost before.
//! Bits are never cleared: a URI once body-keyed is swept by each purge.
//!
//! Must not know of tiers or purges: it records and answers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::key::{key_hash, mix64, uri_path, CacheKey, KeyRef};

/// Words of the bitmap: 2^14 x 64 = 2^20 bits.
const WORDS: usize = 1 << 14;

/// Keeps this map's bits independent of the disk tier's use of key hashes.
const SALT: u64 = 0x6b0d_7572_6973_0001;

/// The URIs of a zone that may have body-keyed entries (module doc).
#[derive(Debug, Default)]
pub struct BodyUris {
    bits: OnceLock<Box<[AtomicU64]>>,
}

impl BodyUris {
    /// An empty record (allocates nothing).
    pub const fn new() -> BodyUris {
        BodyUris {
            bits: OnceLock::new(),
        }
    }

    /// Notes the URI that `key`, a body key or a Vary variant of one, hangs
    /// off. Call before the entry is stored.
    pub fn note_body_key(&self, key: &CacheKey) {
        let k = key.as_ref();
        let uri = KeyRef::new(k.scheme, k.host, uri_path(k.path_and_query));
        let (word, bit) = place(&uri);
        let bits = self
            .bits
            .get_or_init(|| (0..WORDS).map(|_| AtomicU64::new(0)).collect());
        if let Some(w) = bits.get(word) {
            w.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// False when no body key of the URI keyed `uri` was noted here.
    pub fn may_have(&self, uri: &KeyRef<'_>) -> bool {
        let Some(bits) = self.bits.get() else {
            return false;
        };
        let (word, bit) = place(uri);
        bits.get(word)
            .is_some_and(|w| w.load(Ordering::Relaxed) & bit != 0)
    }
}

/// The word and the bit of `uri`.
fn place(uri: &KeyRef<'_>) -> (usize, u64) {
    let h = mix64(key_hash(uri) ^ SALT);
    ((h >> 6) as usize % WORDS, 1 << (h & 63))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noted_uri_is_found_from_its_body_keys_and_others_mostly_not() {
        let uris = BodyUris::new();
        let graphql = KeyRef::new("https", "api.example", "/graphql?v=1");
        assert!(!uris.may_have(&graphql));
        uris.note_body_key(&graphql.with_body("QUERY", "ab12"));
        assert!(uris.may_have(&graphql));
        // A Vary variant of a body key names the same URI.
        let posted = KeyRef::new("https", "api.example", "/search");
        let body = posted.with_body("POST", "cd34");
        uris.note_body_key(&body.as_ref().variant(7, "accept:x\n"));
        assert!(uris.may_have(&posted));
        // Another host, scheme or URI: another bit (but for rare collisions).
        let others = (0..1000).map(|i| format!("/other/{i}"));
        let found = others
            .filter(|p| uris.may_have(&KeyRef::new("https", "api.example", p)))
            .count();
        assert!(found <= 2, "{found}");
        assert!(!uris.may_have(&KeyRef::new("http", "api.example", "/graphql?v=1")));
        assert!(!uris.may_have(&KeyRef::new("https", "other.example", "/graphql?v=1")));
    }
}
