//! Whom a failed exchange blames: its URL or its server.
//!
//! A failed connect (refused, `connect_timeout`, a TLS handshake that
//! failed) is the server's: no URL was asked yet. A failed *exchange* (no
//! response head within `read_timeout`, the connection closed before the
//! head) may be one URL's doing: one slow page, one handler that crashes
//! its worker. NGINX counts it against the server (`proxy_next_upstream
//! error timeout`), and with `max_fails = 1` one client that finds such a
//! URL takes the whole origin out for `fail_timeout`. Here it blames the
//! URL (its flight's waiters get the error, nobody else) unless the server
//! looks dead rather than one URL broken:
//!
//! - [`SUSPECT_PATHS`] distinct paths (host and path, the query left out,
//!   so one page asked with many queries is one) failed within
//!   `fail_timeout`, and
//! - the server answered no request (any response head) within
//!   `fail_timeout` before the last of them.
//!
//! Then, and only then, the failure counts as one of `max_fails`. A server
//! that answers other URLs is alive, whatever one URL does.
//!
//! This module owns that judgement and its small memory (a few path
//! hashes per server); it must not touch the server's up/down state
//! (`health.rs` does, from the [`Blame`] it gets).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Distinct failing paths, without an answer in between, that make an
/// exchange failure the server's.
pub(crate) const SUSPECT_PATHS: usize = 3;

/// One request's target as blame counts it: a hash of its `Host` and path
/// (not the query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathKey(u64);

impl PathKey {
    /// The key of `host` and `path`.
    pub(crate) fn new(host: &[u8], path: &str) -> PathKey {
        // Keys only need to tell paths apart within one process: a hasher
        // with per-process random keys, so nobody can aim for collisions
        // (a collision could only make a dead server look alive longer).
        static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
        let mut h = KEYS.get_or_init(Default::default).build_hasher();
        host.hash(&mut h);
        path.hash(&mut h);
        PathKey(h.finish())
    }

    /// The key of a request: its `Host` and its URI's path.
    pub(crate) fn of<B>(req: &http::Request<B>) -> PathKey {
        let host = req
            .headers()
            .get(http::header::HOST)
            .map_or(&b""[..], |h| h.as_bytes());
        PathKey::new(host, req.uri().path())
    }
}

/// The verdict on one failed exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blame {
    /// One URL's doing: the server is not charged.
    Url,
    /// The server looks dead: one failure against it.
    Server,
}

/// One server's recent failed exchanges and its last answer.
#[derive(Debug)]
pub(crate) struct UrlBlame {
    /// When this server last sent a response head, as milliseconds since
    /// `epoch` plus one (0: never). Written on answers without a lock.
    last_answer: AtomicU64,
    epoch: Instant,
}

/// The failing paths of one server within `fail_timeout` (under the
/// server's health lock), at most [`SUSPECT_PATHS`].
#[derive(Debug, Default)]
pub(crate) struct FailedPaths(Vec<(PathKey, Instant)>);

impl UrlBlame {
    /// A server that has answered nothing yet.
    pub(crate) fn new() -> UrlBlame {
        UrlBlame {
            last_answer: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Notes a response head from the server at `now`.
    pub(crate) fn answered(&self, now: Instant) {
        let stamp = self.stamp(now);
        // Most answers find a recent stamp: skip the store (and the cache
        // line's trip between cores) unless it moves by 100 ms or more.
        let old = self.last_answer.load(Ordering::Relaxed);
        if old == 0 || stamp >= old.saturating_add(100) {
            self.last_answer.fetch_max(stamp, Ordering::Relaxed);
        }
    }

    fn stamp(&self, now: Instant) -> u64 {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1
    }

    /// Whether the server answered anything within `window` before `now`.
    fn answered_within(&self, now: Instant, window: Duration) -> bool {
        let last = self.last_answer.load(Ordering::Relaxed);
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        last != 0 && self.stamp(now).saturating_sub(last) < window_ms
    }

    /// Judges a failed exchange on `path` at `now`, remembering the path in
    /// `paths` (the server's, under its lock).
    pub(crate) fn judge(
        &self,
        paths: &mut FailedPaths,
        path: PathKey,
        now: Instant,
        window: Duration,
    ) -> Blame {
        paths.note(path, now, window);
        if self.answered_within(now, window) || paths.0.len() < SUSPECT_PATHS {
            return Blame::Url;
        }
        // Counted once: the next one needs SUSPECT_PATHS paths again.
        paths.0.clear();
        Blame::Server
    }
}

impl FailedPaths {
    /// Forgets paths older than `window` and notes `path` at `now`.
    fn note(&mut self, path: PathKey, now: Instant, window: Duration) {
        self.0
            .retain(|(p, at)| *p != path && now.saturating_duration_since(*at) < window);
        if self.0.len() == SUSPECT_PATHS {
            self.0.remove(0);
        }
        self.0.push((path, now));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "blame_tests.rs"]
mod tests;
