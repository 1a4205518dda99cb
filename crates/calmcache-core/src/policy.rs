//! Refresh policies: what to do with a cached object at a given instant.
//!
//! [`decide`] is a pure function of `(policy, meta, now, rng)`; the proxy acts on
//! its [`Decision`]. XFetch (Vattani, Chierichetti, Lowenstein, VLDB 2015):
//! refresh early when `now - delta * beta * ln(rand()) >= expiry`, i.e. when
//! `delta * beta * -ln(rand()) >= time left`. SUS (seed 002) uses
//! `delta = max(fetch time, 10% of the lifetime)` and refreshes in the background;
//! past expiry it still serves the copy for `max(sus_stale, delta)` while the
//! refresh runs, so that no client waits for the origin on a popular object.
//! Both draw only in the last `delta * beta` of life (see [`draws_early_refresh`]).

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::object::ObjectMeta;

/// How a route refreshes objects that are about to expire or have expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshMode {
    /// Every request for a missing or expired object goes to the origin until one is stored.
    None,
    /// One fetch per key at a time; others wait for it.
    Lock,
    /// XFetch: probabilistic early refresh in the request's own path.
    Per,
    /// PER with delta = max(fetch time, 10% of TTL), refreshed in the background.
    Sus,
}

impl RefreshMode {
    /// The config spelling of this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshMode::None => "none",
            RefreshMode::Lock => "lock",
            RefreshMode::Per => "per",
            RefreshMode::Sus => "sus",
        }
    }

    /// Misses and expiries go through single-flight (all but `none`).
    pub fn coalesces(self) -> bool {
        self != RefreshMode::None
    }
}

/// A route's refresh settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefreshPolicy {
    /// Which algorithm.
    pub mode: RefreshMode,
    /// XFetch's beta: above 1 favours earlier refreshes.
    pub beta: f64,
    /// SUS only: how long past expiry a copy is still served while it is
    /// refreshed in the background, raised to one SUS delta; zero turns the
    /// window off (then only `stale-while-revalidate` lets a stale copy out).
    pub sus_stale: Duration,
}

impl RefreshPolicy {
    /// How long past expiry SUS serves the copy described by `meta` while
    /// refreshing it: `max(sus_stale, delta)`, or nothing when the window is
    /// off, the mode is not SUS, or stale use was not granted: RFC 9111
    /// §4.2.4 lets a cache serve stale only with the origin's permission, so
    /// the window applies where the route's `ttl` gave the lifetime or the
    /// origin allowed stale use ([`Freshness::stale_use_granted`]).
    ///
    /// [`Freshness::stale_use_granted`]: crate::Freshness::stale_use_granted
    pub fn sus_stale_window(&self, meta: &ObjectMeta) -> Option<Duration> {
        (self.mode == RefreshMode::Sus
            && !self.sus_stale.is_zero()
            && meta.freshness.stale_use_granted())
        .then(|| self.sus_stale.max(meta.sus_delta()))
    }

    /// How long past expiry a SUS follower takes the copy described by
    /// `meta` while the refresh that replaces it is in flight, instead of
    /// waiting for it: the stale window, or one delta when the window is off;
    /// nothing when the mode is not SUS or stale use was not granted.
    pub fn landing_window(&self, meta: &ObjectMeta) -> Option<Duration> {
        (self.mode == RefreshMode::Sus && meta.freshness.stale_use_granted())
            .then(|| self.sus_stale.max(meta.sus_delta()))
    }
}

/// What to do with a cached object now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Fresh: serve it.
    Fresh,
    /// Fresh, but this request drew an early refresh (PER): fetch in its own path.
    RefreshInPath,
    /// Fresh, and an early refresh is due (SUS): serve it and refresh in the background.
    RefreshInBackground,
    /// Stale inside stale-while-revalidate: serve it and refresh in the background.
    StaleWhileRevalidate,
    /// Stale past what may be served: fetch. The copy only backs stale-if-error.
    Expired,
}

/// Decides what to do with the object described by `meta` at `now`.
pub fn decide<R: Rng + ?Sized>(
    policy: &RefreshPolicy,
    meta: &ObjectMeta,
    now: Instant,
    rng: &mut R,
) -> Decision {
    if !meta.is_fresh(now) {
        // SUS keeps at least one delta of stale window by default: a draw
        // that came too late (or a quiet moment just before expiry) costs
        // a background refresh, never a client's wait (seed 002's open
        // problem at sub-second TTLs).
        let sus_stale = policy
            .sus_stale_window(meta)
            .is_some_and(|window| meta.within(now, window));
        return if sus_stale || meta.within_stale_while_revalidate(now) {
            Decision::StaleWhileRevalidate
        } else {
            Decision::Expired
        };
    }
    let delta = match policy.mode {
        RefreshMode::None | RefreshMode::Lock => return Decision::Fresh,
        RefreshMode::Per => meta.fetch_time,
        RefreshMode::Sus => meta.sus_delta(),
    };
    let left = meta.expires_at().saturating_duration_since(now);
    if !draws_early_refresh(delta, policy.beta, left, rng) {
        return Decision::Fresh;
    }
    match policy.mode {
        RefreshMode::Sus => Decision::RefreshInBackground,
        _ => Decision::RefreshInPath,
    }
}

/// XFetch's test: `delta * beta * -ln(u) >= left`, u uniform in (0, 1], drawn
/// only in the last `delta * beta` of the object's life.
///
/// Unbounded, XFetch refreshes about `delta * beta * ln(rate * delta)` before
/// expiry: at 30,000 req/s and a 180 ms fetch, 1.5 s early, i.e. right after
/// every store of a 1 s object, so the origin would never rest. Inside the
/// window the draw is the paper's; at high rates the refresh starts one delta
/// before expiry and lands as the old copy expires: one fetch per lifetime.
pub fn draws_early_refresh<R: Rng + ?Sized>(
    delta: Duration,
    beta: f64,
    left: Duration,
    rng: &mut R,
) -> bool {
    let window = delta.as_secs_f64() * beta;
    let left = left.as_secs_f64();
    if window <= 0.0 || left > window {
        return false;
    }
    let u: f64 = 1.0 - rng.random::<f64>();
    window * -u.ln() >= left
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
