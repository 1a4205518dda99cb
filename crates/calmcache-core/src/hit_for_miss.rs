//! Hit-for-miss: keys whose last answer could never be stored (`private`,
//! `no-store`, `Set-Cookie`, too large...), remembered for a while so that
//! their requests go to the origin side by side instead of queueing behind
//! one another's fetch, one round trip at a time (Varnish's hit-for-miss
//! objects). A storable answer ends the mark at once: the key is coalesced
//! and cached again from its next miss.
//!
//! Only an answer about the resource marks its key: an error the request
//! caused (a header the origin refused, a method it does not allow, a
//! client sending too fast) says nothing about the URL's other requests,
//! and one anonymous request must not turn coalescing off for everyone
//! ([`speaks_for_the_resource`]).
//!
//! Bounded: at most [`MARKS_MAX`] keys, the least recently noted going
//! first; losing a mark only costs a queue behind one lock.

use std::time::Duration;

use quick_cache::sync::Cache;
use tokio::time::Instant;

use crate::key::CacheKey;

/// Keys remembered at most, per route.
pub const MARKS_MAX: usize = 65_536;

/// Statuses that answer the request rather than describe the resource
/// (RFC 9110 §15.5 and §15.6; RFC 6585 for 429 and 431): another request
/// for the same URL may well get a storable answer.
pub const REQUEST_CAUSED: [u16; 13] = [
    400, // Bad Request: a field or body the origin refused (§15.5.1)
    405, // Method Not Allowed: the request's method (§15.5.6)
    406, // Not Acceptable: the request's Accept fields (§15.5.7)
    408, // Request Timeout: the client was slow (§15.5.9)
    411, // Length Required: the request's framing (§15.5.12)
    413, // Content Too Large: the request's body (§15.5.14)
    414, // URI Too Long: this spelling of the target (§15.5.15)
    415, // Unsupported Media Type: the request's content (§15.5.16)
    417, // Expectation Failed: the request's Expect (§15.5.18)
    421, // Misdirected Request: the connection it came on (§15.5.20)
    429, // Too Many Requests: the client's rate (RFC 6585 §4)
    431, // Request Header Fields Too Large: the request's fields (RFC 6585 §5)
    501, // Not Implemented: the request's method or coding (§15.6.2)
];

/// True when an answer with `status` that could not be stored says that
/// the resource's answers cannot be stored, so the key may be marked:
/// neither an error the request caused ([`REQUEST_CAUSED`]) nor a server
/// error (its answer is handed to the waiters instead).
pub fn speaks_for_the_resource(status: u16) -> bool {
    status < 500 && !REQUEST_CAUSED.contains(&status)
}

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

    #[test]
    fn only_answers_about_the_resource_may_mark() {
        // (status, may mark)
        let table = [
            (200, true), // private / no-store / too large: the resource's
            (203, true),
            (206, true),
            (301, true),
            (302, true),
            (304, true),
            (401, true), // the resource wants credentials
            (403, true),
            (404, true),
            (410, true),
            (400, false), // a header the origin refused (issue 25)
            (405, false),
            (406, false),
            (408, false),
            (411, false),
            (413, false),
            (414, false),
            (415, false),
            (417, false),
            (421, false),
            (429, false),
            (431, false),
            (500, false), // shared with the waiters instead
            (501, false),
            (502, false),
            (503, false),
            (504, false),
        ];
        for (status, marks) in table {
            assert_eq!(speaks_for_the_resource(status), marks, "{status}");
        }
        for status in REQUEST_CAUSED {
            assert!(!speaks_for_the_resource(status), "{status}");
        }
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
