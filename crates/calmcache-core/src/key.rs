//! Cache keys: scheme, host and path with query, hashed once.
//!
//! A [`CacheKey`] owns its text; a [`KeyRef`] borrows the parts of a live request
//! so a cache hit can look an object up without building (allocating) the key.
//! Both hash and compare identically, which [`quick_cache::Equivalent`] relies on.

use std::hash::{Hash, Hasher};

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
    fn parts_do_not_run_together() {
        // "ab" + "c" and "a" + "bc" must be different keys.
        let a = CacheKey::new("http", "ab", "/c");
        let b = CacheKey::new("http", "a", "b/c");
        assert_ne!(a, b);
        assert!(!quick_cache::Equivalent::equivalent(&b.as_ref(), &a));
    }
}
