//! Activity counters per route and per zone, read by `GET /status`.
//!
//! Plain relaxed atomics: counting costs a hit no lock.

use crate::telemetry::counter::Counter;
use calmcache_core::{AnswerClass, Report};
use serde::Serialize;

/// Declares the route counters once: the live [`Activity`], its values
/// [`ActivitySnapshot`] (what `/status` serves, and `/metrics` renders one
/// family per name of [`ActivitySnapshot::NAMES`]), and the walks over them
/// (snapshot, absorb, sum). A new counter is one line in the list below.
macro_rules! route_counters {
    ($( $(#[doc = $doc:literal])+ $name:ident, )+) => {
        /// What a route (or a zone) has done since start.
        #[derive(Default, Debug)]
        pub struct Activity {
            $( $(#[doc = $doc])+ pub $name: Counter, )+
        }

        /// Counter values at one instant, as served by `/status`.
        #[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
        pub struct ActivitySnapshot {
            /// Answers: hits, misses, stale_served and bypass summed.
            pub requests: u64,
            $( $(#[doc = $doc])+ pub $name: u64, )+
        }

        impl ActivitySnapshot {
            /// Every counter's name, in `/status` order.
            pub const NAMES: &'static [&'static str] = &["requests", $(stringify!($name)),+];

            /// Every counter's value, in [`ActivitySnapshot::NAMES`] order.
            pub fn values(&self) -> Vec<u64> {
                vec![self.requests, $(self.$name),+]
            }

            /// Reads `activity`'s counters; `requests` is left to the caller.
            fn read(activity: &Activity) -> ActivitySnapshot {
                ActivitySnapshot {
                    requests: 0,
                    $( $name: activity.$name.get(), )+
                }
            }
        }

        impl Activity {
            /// Adds the counts of `past` (a route a reload removed, whose
            /// answers stay in its zone's totals: counters never go back).
            pub fn absorb(&self, past: &ActivitySnapshot) {
                $( self.$name.add(past.$name); )+
            }
        }

        impl std::ops::AddAssign<&ActivitySnapshot> for ActivitySnapshot {
            fn add_assign(&mut self, o: &ActivitySnapshot) {
                self.requests += o.requests;
                $( self.$name += o.$name; )+
            }
        }
    };
}

route_counters! {
    /// Answered fresh from the cache.
    hits,
    /// Not in the cache, or expired: the client waited for the origin.
    misses,
    /// Answered with a stale copy (stale-while-revalidate or stale-if-error).
    stale_served,
    /// Waited for another request's fetch instead of going upstream.
    coalesced_waits,
    /// Early refreshes started (PER in the request's path, SUS in the background);
    /// a draw while the key is already being refreshed does not count.
    early_refreshes,
    /// Refreshes run in the background (SUS, stale-while-revalidate, warm).
    background_refreshes,
    /// Background refreshes skipped because `refresh_concurrency` was full.
    refreshes_skipped,
    /// Fills cancelled because their requester went away (closed, reset)
    /// with nobody else waiting and no `refresh_concurrency` slot free.
    fills_cancelled,
    /// Requests sent to the origin without waiting for a fetch in flight
    /// because their key is marked hit-for-miss.
    hit_for_miss,
    /// Requests sent to the origin.
    upstream_requests,
    /// Origin requests that failed (refused, timeout, broken) or answered 5xx.
    upstream_errors,
    /// Passed through without caching (method, no zone).
    bypass,
    /// Body bytes sent to clients from the cache.
    bytes_from_cache,
    /// Objects stored.
    stores,
    /// Stored URIs removed after an unsafe method (RFC 9111 §4.4).
    invalidations,
    /// Answers revalidated with the origin (a 304; also counted in `misses`).
    revalidated,
    /// 103 Early Hints sent to navigations waiting for the origin.
    early_hints,
    /// QUERY or cached POST requests passed uncached because of their body:
    /// over `max_body_key`, or not JSON with `body_key = "json"` (also
    /// counted in `bypass`).
    body_key_passed,
    /// Header rule values dropped because a variable brought a byte no
    /// field value may hold (`request_headers`, `response_headers`).
    header_values_dropped,
    /// Requests refused by one of the route's `limits` (never sent to the
    /// origin; the limit counts them too, by name).
    limited,
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

    /// A JSON-ready copy. `requests` is derived: every answer is counted in
    /// exactly one of hits, misses, stale_served and bypass, which spares a
    /// hit one atomic add on a cache line all workers share.
    pub fn snapshot(&self) -> ActivitySnapshot {
        let mut snap = ActivitySnapshot::read(self);
        snap.requests = snap.hits + snap.misses + snap.stale_served + snap.bypass;
        snap
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
