//! Each route's memory of the Early Hints links of the last answer stored
//! per URL (proxy/hints.rs fills and reads it), bounded. Each entry keeps
//! the origin (`scheme://host`) of the page it was stored for and is given
//! only to a request for that same origin: the key hash alone is not
//! enough (unseeded, so collisions can be crafted, and a route whose `key`
//! omits `$host` shares keys across hosts).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::HeaderValue;

/// URLs a route remembers links for; past it one is forgotten per new one.
const REMEMBERED: usize = 4096;
/// Links in one hint at most (a page's critical few, not its every asset).
pub(crate) const MAX_LINKS: usize = 16;

/// A route's links of the last stored answer per URL (by primary key
/// hash), so that a miss after expiry or eviction still has them.
#[derive(Default)]
pub(crate) struct HintMemory {
    links: Mutex<HashMap<u64, Remembered>>,
}

/// One URL's links and the origin of the page they were stored for.
struct Remembered {
    origin: Box<str>,
    links: Arc<[HeaderValue]>,
}

impl HintMemory {
    /// The links remembered for the key of hash `key`, when they were
    /// stored for a page of `origin` (`scheme://host`).
    pub(crate) fn get(&self, key: u64, origin: &str) -> Option<Arc<[HeaderValue]>> {
        let map = self.lock();
        let known = map.get(&key)?;
        (*known.origin == *origin).then(|| known.links.clone())
    }

    /// Remembers `links` for `key`, given by a page of `origin` (none:
    /// forgets it).
    pub(crate) fn put(&self, key: u64, origin: &str, links: Vec<HeaderValue>) {
        let mut map = self.lock();
        if links.is_empty() {
            map.remove(&key);
            return;
        }
        if map.len() >= REMEMBERED && !map.contains_key(&key) {
            // Any one: a forgotten URL only loses its hint until its next store.
            if let Some(old) = map.keys().next().copied() {
                map.remove(&old);
            }
        }
        let origin = origin.into();
        map.insert(
            key,
            Remembered {
                origin,
                links: links.into(),
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Remembered>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_is_bounded_and_forgets_an_empty_answer() {
        let memory = HintMemory::default();
        let link = HeaderValue::from_static("</a.css>; rel=preload");
        for key in 0..(REMEMBERED as u64 + 10) {
            memory.put(key, "https://a.example", vec![link.clone()]);
        }
        assert_eq!(memory.lock().len(), REMEMBERED);
        let last = REMEMBERED as u64 + 9;
        assert!(memory.get(last, "https://a.example").is_some());
        memory.put(last, "https://a.example", Vec::new());
        assert!(memory.get(last, "https://a.example").is_none());
    }

    #[test]
    fn links_go_only_to_the_origin_they_were_stored_for() {
        let memory = HintMemory::default();
        let link = HeaderValue::from_static("</a.js>; rel=preload");
        memory.put(7, "https://a.example", vec![link]);
        assert!(memory.get(7, "https://a.example").is_some());
        assert!(memory.get(7, "https://b.example").is_none());
        assert!(memory.get(7, "http://a.example").is_none());
    }
}
