//! Each route's memory of the Early Hints links of the last answer stored
//! per URL (proxy/hints.rs fills and reads it), bounded.

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
    links: Mutex<HashMap<u64, Arc<[HeaderValue]>>>,
}

impl HintMemory {
    /// The links remembered for the key of hash `key`.
    pub(crate) fn get(&self, key: u64) -> Option<Arc<[HeaderValue]>> {
        self.lock().get(&key).cloned()
    }

    /// Remembers `links` for `key` (none: forgets it).
    pub(crate) fn put(&self, key: u64, links: Vec<HeaderValue>) {
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
        map.insert(key, links.into());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<[HeaderValue]>>> {
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
            memory.put(key, vec![link.clone()]);
        }
        assert_eq!(memory.lock().len(), REMEMBERED);
        let last = REMEMBERED as u64 + 9;
        assert!(memory.get(last).is_some());
        memory.put(last, Vec::new());
        assert!(memory.get(last).is_none());
    }
}
