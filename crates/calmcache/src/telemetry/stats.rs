//! Activity counters per route and per zone, read by `GET /status`.
//!
//! Plain relaxed atomics: counting costs a hit no lock.

use crate::telemetry::counter::Counter;
use calmcache_core::{AnswerClass, Report};
use serde::Serialize;

/// What a route (or a zone) has done since start.
#[derive(Default, Debug)]
pub struct Activity {
    /// Answered fresh from the cache.
    pub hits: Counter,
    /// Not in the cache, or expired: the client waited for the origin.
    pub misses: Counter,
    /// Answered with a stale copy (stale-while-revalidate or stale-if-error).
    pub stale_served: Counter,
    /// Waited for another request's fetch instead of going upstream.
    pub coalesced_waits: Counter,
    /// Early refreshes started (PER in the request's path, SUS in the background);
    /// a draw while the key is already being refreshed does not count.
    pub early_refreshes: Counter,
    /// Refreshes run in the background (SUS, stale-while-revalidate, warm).
    pub background_refreshes: Counter,
    /// Background refreshes skipped because `refresh_concurrency` was full.
    pub refreshes_skipped: Counter,
    /// Fills cancelled because their requester went away (closed, reset)
    /// with nobody else waiting and no `refresh_concurrency` slot free.
    pub fills_cancelled: Counter,
    /// Requests sent to the origin without waiting for a fetch in flight
    /// because their key is marked hit-for-miss.
    pub hit_for_miss: Counter,
    /// Requests sent to the origin.
    pub upstream_requests: Counter,
    /// Origin requests that failed (refused, timeout, broken) or answered 5xx.
    pub upstream_errors: Counter,
    /// Passed through without caching (method, no zone).
    pub bypass: Counter,
    /// Body bytes sent to clients from the cache.
    pub bytes_from_cache: Counter,
    /// Objects stored.
    pub stores: Counter,
    /// Stored URIs removed after an unsafe method (RFC 9111 §4.4).
    pub invalidations: Counter,
    /// Answers revalidated with the origin (a 304; also counted in `misses`).
    pub revalidated: Counter,
}

impl Activity {
    /// Counts one answered request by how it was produced.
    pub fn record(&self, report: &Report) {
        self.count(report.status.class());
        if report.collapsed {
            self.coalesced_waits.inc();
        }
    }

    /// Counts one answer of `class` (a zone's share of a route's answers).
    pub fn count(&self, class: AnswerClass) {
        match class {
            AnswerClass::Hit => self.hits.inc(),
            AnswerClass::Stale => self.stale_served.inc(),
            AnswerClass::Miss => self.misses.inc(),
            // Went to the origin: a miss too, and counted apart (first, so
            // `misses - revalidated` is never read too high).
            AnswerClass::Revalidated => {
                self.revalidated.inc();
                self.misses.inc();
            }
            AnswerClass::Bypass => self.bypass.inc(),
        }
    }

    /// Counts one call to the upstream by its result: an origin request,
    /// and an origin error when it failed. A request refused at once because
    /// every server is down never reached the origin: it is neither (the
    /// upstream's `all_down` counts it).
    pub fn upstream_call<T>(&self, result: &Result<T, crate::http::error::ProxyError>) {
        match result {
            Ok(_) => self.upstream_requests.inc(),
            Err(e) => self.upstream_failed(e),
        }
    }

    /// [`Activity::upstream_call`] for a call that failed with `e`.
    pub fn upstream_failed(&self, e: &crate::http::error::ProxyError) {
        if !e.repeats() {
            self.upstream_requests.inc();
            self.upstream_errors.inc();
        }
    }

    /// Adds the counts of `past` (a route a reload removed, whose answers
    /// stay in its zone's totals: counters never go back).
    pub fn absorb(&self, past: &ActivitySnapshot) {
        let pairs = [
            (&self.hits, past.hits),
            (&self.misses, past.misses),
            (&self.stale_served, past.stale_served),
            (&self.coalesced_waits, past.coalesced_waits),
            (&self.early_refreshes, past.early_refreshes),
            (&self.background_refreshes, past.background_refreshes),
            (&self.refreshes_skipped, past.refreshes_skipped),
            (&self.fills_cancelled, past.fills_cancelled),
            (&self.hit_for_miss, past.hit_for_miss),
            (&self.upstream_requests, past.upstream_requests),
            (&self.upstream_errors, past.upstream_errors),
            (&self.bypass, past.bypass),
            (&self.bytes_from_cache, past.bytes_from_cache),
            (&self.stores, past.stores),
            (&self.invalidations, past.invalidations),
            (&self.revalidated, past.revalidated),
        ];
        for (counter, n) in pairs {
            counter.add(n);
        }
    }

    /// A JSON-ready copy. `requests` is derived: every answer is counted in
    /// exactly one of hits, misses, stale_served and bypass, which spares a
    /// hit one atomic add on a cache line all workers share.
    pub fn snapshot(&self) -> ActivitySnapshot {
        let (hits, misses, stale_served) =
            (self.hits.get(), self.misses.get(), self.stale_served.get());
        let bypass = self.bypass.get();
        ActivitySnapshot {
            requests: hits + misses + stale_served + bypass,
            hits,
            misses,
            stale_served,
            coalesced_waits: self.coalesced_waits.get(),
            early_refreshes: self.early_refreshes.get(),
            background_refreshes: self.background_refreshes.get(),
            refreshes_skipped: self.refreshes_skipped.get(),
            fills_cancelled: self.fills_cancelled.get(),
            hit_for_miss: self.hit_for_miss.get(),
            upstream_requests: self.upstream_requests.get(),
            upstream_errors: self.upstream_errors.get(),
            bypass,
            bytes_from_cache: self.bytes_from_cache.get(),
            stores: self.stores.get(),
            invalidations: self.invalidations.get(),
            revalidated: self.revalidated.get(),
        }
    }
}

/// Counter values at one instant, as served by `/status`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ActivitySnapshot {
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    pub stale_served: u64,
    pub coalesced_waits: u64,
    pub early_refreshes: u64,
    pub background_refreshes: u64,
    pub refreshes_skipped: u64,
    pub fills_cancelled: u64,
    pub hit_for_miss: u64,
    pub upstream_requests: u64,
    pub upstream_errors: u64,
    pub bypass: u64,
    pub bytes_from_cache: u64,
    pub stores: u64,
    pub invalidations: u64,
    pub revalidated: u64,
}

impl std::ops::AddAssign<&ActivitySnapshot> for ActivitySnapshot {
    fn add_assign(&mut self, o: &ActivitySnapshot) {
        self.requests += o.requests;
        self.hits += o.hits;
        self.misses += o.misses;
        self.stale_served += o.stale_served;
        self.invalidations += o.invalidations;
        self.coalesced_waits += o.coalesced_waits;
        self.early_refreshes += o.early_refreshes;
        self.background_refreshes += o.background_refreshes;
        self.refreshes_skipped += o.refreshes_skipped;
        self.fills_cancelled += o.fills_cancelled;
        self.hit_for_miss += o.hit_for_miss;
        self.upstream_requests += o.upstream_requests;
        self.upstream_errors += o.upstream_errors;
        self.bypass += o.bypass;
        self.bytes_from_cache += o.bytes_from_cache;
        self.stores += o.stores;
        self.revalidated += o.revalidated;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_counts_once_in_requests() {
        let all = calmcache_core::CacheStatus::ALL;
        let activity = Activity::default();
        for status in all {
            activity.record(&status.report());
        }
        let snap = activity.snapshot();
        assert_eq!(snap.requests, all.len() as u64);
        assert_eq!(snap.coalesced_waits, 2);
        // By class: a revalidated answer is also a miss.
        let counts = (
            snap.hits,
            snap.stale_served,
            snap.misses,
            snap.revalidated,
            snap.bypass,
        );
        assert_eq!(counts, (3, 3, 8, 1, 1));
    }
}
