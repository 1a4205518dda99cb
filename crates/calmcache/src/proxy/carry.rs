//! Counters a reload carries over, so `/status` and `/metrics` never go
//! back (Prometheus reads a counter that drops as a restart, and every
//! `rate()` panel shows a cliff): a route keeps its counters by name, a
//! zone its share of the answers by name, an upstream its requests, errors
//! and latency by name (`net/upstream.rs`, `Upstream::new`).
//!
//! A zone's answers are its single-zone routes' counters plus what routes
//! over several zones placed in it (`ops/status.rs`). A route that a reload
//! removes, or moves to another zone, leaves what it counted in its old
//! zone's own counters ([`fold_retired`]), so that zone's totals stay where
//! they were; the moved route brings its past to its new zone, whose totals
//! jump up by it (up, never down).

use std::sync::Arc;

use calmcache_core::Zone;

use crate::proxy::state::{Proxy, Route};
use crate::telemetry::stats::Activity;

/// The counters of the route named `name`: the previous generation's when
/// it had a route of that name, else new ones.
pub(crate) fn route_activity(previous: Option<&Proxy>, name: &str) -> Arc<Activity> {
    previous
        .and_then(|p| p.table.iter().find(|r| r.cfg().name == name))
        .map_or_else(Arc::default, |r| r.activity().clone())
}

/// Per zone of the new generation (same order): the counters of the
/// previous generation's zone of the same name, else new ones.
pub(crate) fn zone_activity(zones: &[Arc<Zone>], previous: Option<&Proxy>) -> Vec<Arc<Activity>> {
    zones
        .iter()
        .map(|zone| {
            previous
                .and_then(|p| {
                    let i = p.zones.iter().position(|z| z.name == zone.name)?;
                    p.zone_activity.get(i).cloned()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The zone `/status` counts a route's answers in: its zone when it has one
/// alone (a route over several zones counts by placement instead).
fn counted_in(route: &Route) -> Option<&str> {
    let single = route.zones.len() <= 1;
    route
        .zone
        .as_ref()
        .filter(|_| single)
        .map(|z| z.name.as_str())
}

/// Moves what every route of `previous` that is gone from `routes`, or
/// counted in another zone now, has counted into its old zone's own
/// counters in `zone_activity` (indexed like `zones`), when that zone is
/// still there.
pub(crate) fn fold_retired(
    previous: &Proxy,
    routes: &[Arc<Route>],
    zones: &[Arc<Zone>],
    zone_activity: &[Arc<Activity>],
) {
    for old in &previous.routes {
        let Some(zone) = counted_in(old) else {
            continue;
        };
        let now = routes.iter().find(|r| r.cfg.name == old.cfg.name);
        if now.is_some_and(|r| counted_in(r) == Some(zone)) {
            continue;
        }
        if let Some(i) = zones.iter().position(|z| z.name == zone) {
            zone_activity[i].absorb(&old.activity.snapshot());
        }
    }
}
