//! Hit-for-miss: keys whose last answer could never be stored (`private`,
//! `no-store`, `Set-Cookie`, too large...), remembered for a while so that
//! their requests go to the origin side by side instead of queueing behind
//! one another's fetch, one round trip at a time (Varnish's hit-for-miss
//! objects). A storable answer ends the mark at once: the key is coalesced
//! and cached again from its next miss.
//!
//! Bounded: at most [`MARKS_MAX`] keys, the least recently noted going
//! first; losing a mark only costs a queue behind one lock.

use std::time::Duration;

use quick_cache::sync::Cache;
use tokio::time::Instant;

use crate::key::CacheKey;

/// Keys remembered at most, per route.
pub const MARKS_MAX: usize = 65_536;

/// The marks of one route.
pub struct HitForMiss {
    window: Duration,
    marks: Option<Cache<CacheKey, Instant>>,
}

impl HitForMiss {
    /// Marks that last `window`; a zero window never marks.
    pub fn new(window: Duration) -> Self {
        HitForMiss {
            window,
            marks: (!window.is_zero()).then(|| Cache::new(MARKS_MAX)),
        }
    }

    /// Remembers that `key`'s answer could not be stored.
    pub fn note(&self, key: &CacheKey) {
        if let Some(marks) = &self.marks {
            marks.insert(key.clone(), Instant::now() + self.window);
        }
    }

    /// True while `key` is marked: its request should fetch on its own.
    pub fn active(&self, key: &CacheKey) -> bool {
        let Some(marks) = &self.marks else {
            return false;
        };
        match marks.get(key) {
            Some(until) if until > Instant::now() => true,
            Some(_) => {
                marks.remove(key);
                false
            }
            None => false,
        }
    }

    /// Forgets `key` (its answer was stored).
    pub fn clear(&self, key: &CacheKey) {
        if let Some(marks) = &self.marks {
            if !marks.is_empty() {
                marks.remove(key);
            }
        }
    }

    /// Keys marked now (for status; expired marks still count until seen).
    pub fn len(&self) -> usize {
        self.marks.as_ref().map_or(0, |m| m.len())
    }

    /// True when no key is marked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: &str) -> CacheKey {
        CacheKey::new("http", "h", p)
    }

    #[tokio::test(start_paused = true)]
    async fn marks_last_their_window_and_clear_on_store() {
        let hfm = HitForMiss::new(Duration::from_secs(10));
        assert!(!hfm.active(&key("/a")));
        hfm.note(&key("/a"));
        assert!(hfm.active(&key("/a")));
        assert!(!hfm.active(&key("/b")));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(hfm.active(&key("/a")));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!hfm.active(&key("/a")), "expired");
        assert!(hfm.is_empty(), "an expired mark is dropped when seen");
        hfm.note(&key("/a"));
        hfm.clear(&key("/a"));
        assert!(!hfm.active(&key("/a")));
    }

    #[tokio::test]
    async fn a_zero_window_never_marks() {
        let hfm = HitForMiss::new(Duration::ZERO);
        hfm.note(&key("/a"));
        assert!(!hfm.active(&key("/a")));
        assert_eq!(hfm.len(), 0);
    }

    #[tokio::test]
    async fn marks_are_bounded() {
        let hfm = HitForMiss::new(Duration::from_secs(60));
        for i in 0..MARKS_MAX + 1000 {
            hfm.note(&key(&format!("/{i}")));
        }
        assert!(hfm.len() <= MARKS_MAX, "{}", hfm.len());
    }
}
