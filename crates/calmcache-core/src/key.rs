//! Cache keys: scheme, host and path with query, hashed once.
//!
//! A [`CacheKey`] owns its text; a [`KeyRef`] borrows the parts of a live request
//! so a cache hit can look an object up without building (allocating) the key.
//! Both hash and compare identically, which [`quick_cache::Equivalent`] relies on.
//!
//! The key of one variant of a URI whose responses carry `Vary` (RFC 9111
//! §4.1) is the URI's key with `\0v`, the Vary marker's generation in hex,
//! `\0` and the secondary key appended to its path: [`KeyRef::variant`]
//! builds it, [`variants_prefix`] and [`is_uri_or_variant`] find the
//! variants of a URI (purges). A request target cannot hold a NUL, so no
//! URI's key collides with a variant's.
//!
//! The key of a request keyed by its body (QUERY, or POST on a route that
//! caches it) is the URI's key with `\0v`, the method, `:` and the body's
//! digest appended: [`KeyRef::with_body`]. It lives under the URI as its
//! variants do (purges by URL find it the same way); a method is upper-case
//! and a Vary generation lower-case hex, so the two never meet. A Vary'd
//! answer to it hangs its own variants off that key.

use std::fmt::Write;
use std::hash::{Hash, Hasher};

/// What follows a URI's path and query in the key of each of its variants.
const VARIANT_MARK: &str = "\0v";

/// The identity of a cached object: `scheme://host` + path and query.
#[derive(Clone, PartialEq, Eq)]
pub struct CacheKey {
    text: Box<str>,
    /// Byte offset where the host starts (after `://`).
    host_at: u32,
    /// Byte offset where the path starts.
    path_at: u32,
}

/// A borrowed view of a key, built from request parts without allocating.
#[derive(Clone, Copy, Debug)]
pub struct KeyRef<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The `Host` the client asked for (lower-cased by the caller if needed).
    pub host: &'a str,
    /// Path and query exactly as requested.
    pub path_and_query: &'a str,
}

impl<'a> KeyRef<'a> {
    /// Borrows the three parts of a key.
    pub fn new(scheme: &'a str, host: &'a str, path_and_query: &'a str) -> Self {
        KeyRef {
            scheme,
            host,
            path_and_query,
        }
    }

    /// Builds the owned key; done only when an object is stored or a fetch starts.
    pub fn to_owned_key(&self) -> CacheKey {
        CacheKey::new(self.scheme, self.host, self.path_and_query)
    }

    /// The key of the variant selected by `secondary` (the normalised
    /// values of the Vary'd request headers) among this URI's stored
    /// responses, under a Vary marker of generation `generation`.
    pub fn variant(&self, generation: u64, secondary: &str) -> CacheKey {
        let hex_digits = (64 - (generation | 1).leading_zeros()).div_ceil(4) as usize;
        // Exactly the length, so the one allocation is kept as the key's text.
        let len = self.scheme.len()
            + 3
            + self.host.len()
            + self.path_and_query.len()
            + VARIANT_MARK.len()
            + hex_digits
            + 1
            + secondary.len();
        let mut text = String::with_capacity(len);
        text.push_str(self.scheme);
        text.push_str("://");
        text.push_str(self.host);
        text.push_str(self.path_and_query);
        text.push_str(VARIANT_MARK);
        let _ = write!(text, "{generation:x}\0");
        text.push_str(secondary);
        debug_assert_eq!(text.len(), len);
        let host_at = (self.scheme.len() + 3) as u32;
        CacheKey {
            text: text.into_boxed_str(),
            host_at,
            path_at: host_at + self.host.len() as u32,
        }
    }
}

impl KeyRef<'_> {
    /// The key of a `method` request to this URI whose body's digest (hex)
    /// is `digest`: apart from the URI's own key, from its Vary variants
    /// and from every other method's or body's.
    pub fn with_body(&self, method: &str, digest: &str) -> CacheKey {
        let mut path = String::with_capacity(
            self.path_and_query.len() + VARIANT_MARK.len() + method.len() + 1 + digest.len(),
        );
        path.push_str(self.path_and_query);
        path.push_str(VARIANT_MARK);
        path.push_str(method);
        path.push(':');
        path.push_str(digest);
        CacheKey::new(self.scheme, self.host, &path)
    }
}

/// The path every variant key of the URI `path_and_query` starts with (and
/// no other key of the same host does): a prefix scan for it finds them all.
pub fn variants_prefix(path_and_query: &str) -> String {
    let mut prefix = String::with_capacity(path_and_query.len() + VARIANT_MARK.len());
    prefix.push_str(path_and_query);
    prefix.push_str(VARIANT_MARK);
    prefix
}

/// True when `key_path` (a key's path and query) is a body key's
/// ([`KeyRef::with_body`]) or a Vary variant's of one: `\0v` then an
/// upper-case method (a Vary generation is lower-case hex).
pub fn is_body_key(key_path: &str) -> bool {
    key_path.match_indices(VARIANT_MARK).any(|(at, _)| {
        key_path
            .as_bytes()
            .get(at + 2)
            .is_some_and(u8::is_ascii_uppercase)
    })
}

/// The URI a key's path and query (`key_path`) belongs to: itself, or for
/// a variant key (Vary, body) the part before its first variant mark.
pub fn uri_path(key_path: &str) -> &str {
    key_path
        .find(VARIANT_MARK)
        .map_or(key_path, |at| key_path.get(..at).unwrap_or(key_path))
}

/// True when `key_path` (a key's path and query) is the URI `path_and_query`
/// itself or the path of one of its variants.
pub fn is_uri_or_variant(key_path: &str, path_and_query: &str) -> bool {
    key_path
        .strip_prefix(path_and_query)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(VARIANT_MARK))
}

impl CacheKey {
    /// Builds a key from its parts.
    pub fn new(scheme: &str, host: &str, path_and_query: &str) -> Self {
        let text = format!("{scheme}://{host}{path_and_query}");
        let host_at = (scheme.len() + 3) as u32;
        let path_at = host_at + host.len() as u32;
        CacheKey {
            text: text.into_boxed_str(),
            host_at,
            path_at,
        }
    }

    /// The key as one string, e.g. `http://example.com/feed/?page=2`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The borrowed form of this key.
    pub fn as_ref(&self) -> KeyRef<'_> {
        KeyRef {
            scheme: &self.text[..self.host_at as usize - 3],
            host: &self.text[self.host_at as usize..self.path_at as usize],
            path_and_query: &self.text[self.path_at as usize..],
        }
    }

    /// Path and query part, used for warm-up and logs.
    pub fn path_and_query(&self) -> &str {
        &self.text[self.path_at as usize..]
    }

    /// Bytes this key occupies in memory, for zone accounting.
    pub fn weight(&self) -> usize {
        self.text.len() + std::mem::size_of::<Self>()
    }

    /// The allocation of its text as glibc's malloc hands it out (the key
    /// itself lives inline where it is kept).
    pub fn memory_cost(&self) -> usize {
        crate::cost::malloc_cost(self.text.len())
    }
}

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

fn hash_parts<H: Hasher>(parts: KeyRef<'_>, state: &mut H) {
    parts.scheme.hash(state);
    parts.host.hash(state);
    parts.path_and_query.hash(state);
}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_parts(self.as_ref(), state);
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_parts(*self, state);
    }
}

impl quick_cache::Equivalent<CacheKey> for KeyRef<'_> {
    fn equivalent(&self, key: &CacheKey) -> bool {
        let k = key.as_ref();
        k.path_and_query == self.path_and_query && k.host == self.host && k.scheme == self.scheme
    }
}

/// A stable 64-bit hash of a key's text (`scheme://host/path?query`): FNV-1a
/// with a final avalanche, the same across runs and builds so file names
/// found at start map to the same entries.
pub fn key_hash(key: &KeyRef<'_>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [key.scheme, "://", key.host, key.path_and_query] {
        for &b in part.as_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    // Spread FNV's weak low bits over the shard index.
    mix64(h)
}

/// The splitmix64 finaliser: every input bit affects every output bit.
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<T: Hash>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn borrowed_and_owned_keys_hash_and_compare_alike() {
        let r = KeyRef::new("http", "example.com", "/a?b=1");
        let k = r.to_owned_key();
        assert_eq!(k.as_str(), "http://example.com/a?b=1");
        assert_eq!(hash_of(&r), hash_of(&k));
        assert!(quick_cache::Equivalent::equivalent(&r, &k));
        assert_eq!(k.path_and_query(), "/a?b=1");
    }

    #[test]
    fn variant_keys_stay_apart_from_uris_and_are_found_by_their_uri() {
        let uri = KeyRef::new("http", "h", "/a?b=1");
        let v = uri.variant(0x1f, "accept-language:en\n");
        assert_eq!(v.as_str(), "http://h/a?b=1\0v1f\0accept-language:en\n");
        assert_eq!((v.as_ref().scheme, v.as_ref().host), ("http", "h"));
        assert_ne!(v, uri.to_owned_key());
        assert_ne!(v, uri.variant(0x20, "accept-language:en\n"));
        assert_ne!(v, uri.variant(0x1f, "accept-language:fr\n"));
        // A generation and a secondary key do not run together.
        assert_ne!(uri.variant(1, "0x"), uri.variant(0x10, "x"));
        for generation in [0, 1, 0xf, 0x10, 0xff_ffff, u64::MAX] {
            let v = uri.variant(generation, "s");
            assert_eq!(
                v.path_and_query(),
                format!("/a?b=1\0v{generation:x}\0s"),
                "{generation}"
            );
            assert_eq!(v.as_ref().host, "h");
        }
        assert_eq!(variants_prefix("/a?b=1"), "/a?b=1\0v");
        assert!(v.path_and_query().starts_with(&variants_prefix("/a?b=1")));
        assert!(is_uri_or_variant(v.path_and_query(), "/a?b=1"));
        assert!(is_uri_or_variant("/a?b=1", "/a?b=1"));
        // Another URI the path is a prefix of, or its variants: not ours.
        assert!(!is_uri_or_variant("/a?b=12", "/a?b=1"));
        let longer = KeyRef::new("http", "h", "/a?b=12").variant(1, "");
        assert!(!is_uri_or_variant(longer.path_and_query(), "/a?b=1"));
        assert!(!longer
            .path_and_query()
            .starts_with(&variants_prefix("/a?b=1")));
        assert!(!is_uri_or_variant("/a", "/a?b=1"));
    }

    #[test]
    fn body_keys_live_under_their_uri_apart_from_everything_else() {
        let uri = KeyRef::new("http", "h", "/graphql");
        let post = uri.with_body("POST", "ab12");
        assert_eq!(post.as_str(), "http://h/graphql\0vPOST:ab12");
        assert_ne!(post, uri.with_body("QUERY", "ab12"));
        assert_ne!(post, uri.with_body("POST", "ab13"));
        assert_ne!(post, uri.to_owned_key());
        assert!(is_uri_or_variant(post.path_and_query(), "/graphql"));
        assert!(post
            .path_and_query()
            .starts_with(&variants_prefix("/graphql")));
        // Never a Vary variant's key, whatever its generation.
        assert!((0..=u64::from(u16::MAX)).all(|g| uri.variant(g, "") != post));
        assert!(is_body_key(post.path_and_query()));
        assert!(!is_body_key(uri.variant(0xab, "x").path_and_query()));
        assert!(!is_body_key("/graphql"));
        // A Vary'd answer to a body-keyed request: under the body's key.
        let v = post.as_ref().variant(3, "accept:x\n");
        assert!(is_body_key(v.path_and_query()));
        assert!(v.path_and_query().starts_with(post.path_and_query()));
        assert!(is_uri_or_variant(v.path_and_query(), "/graphql"));
    }

    #[test]
    fn parts_do_not_run_together() {
        // "ab" + "c" and "a" + "bc" must be different keys.
        let a = CacheKey::new("http", "ab", "/c");
        let b = CacheKey::new("http", "a", "b/c");
        assert_ne!(a, b);
        assert!(!quick_cache::Equivalent::equivalent(&b.as_ref(), &a));
    }
}
