//! Zones and placement: a [`Zone`] is a named tier (any [`Tier`]), and a
//! route spreading keys over several zones places each key by weighted
//! rendezvous hashing over the healthy ones ([`place`]).
//!
//! Placement knows nothing of the kind of tier: a zone is in the ring while
//! [`Tier::healthy`] says so (a disk zone leaves it for a while after an
//! I/O error) and its keys go to the others meanwhile.

use std::sync::Arc;

use crate::body_uris::BodyUris;
use crate::disk::{key_hash, mix64};
use crate::key::KeyRef;
use crate::tier::Tier;

/// A named cache and the storage behind it.
pub struct Zone {
    /// The config name (`[zones.<name>]`), in metric labels and `/status`.
    pub name: String,
    /// Stable per-zone seed for hash placement (from the name), so a key
    /// keeps its zone across restarts and reloads.
    pub seed: u64,
    /// Where objects live.
    pub tier: Arc<dyn Tier>,
    /// The URIs with answers to requests keyed by their body (QUERY, a
    /// cached POST) stored here, noted before each is stored: a purge of
    /// such a URL also sweeps its variant keys, where they live; a purge of
    /// another URL stays a lookup of its keys.
    pub body_uris: BodyUris,
}

impl Zone {
    /// The zone `name` over `tier`.
    pub fn new(name: impl Into<String>, tier: Arc<dyn Tier>) -> Zone {
        let name = name.into();
        let seed = zone_seed(&name);
        Zone {
            name,
            seed,
            tier,
            body_uris: BodyUris::new(),
        }
    }
}

/// The placement seed of the zone named `name`.
pub fn zone_seed(name: &str) -> u64 {
    key_hash(&KeyRef::new("zone", name, ""))
}

/// Weighted rendezvous (highest random weight) score of a key for a zone:
/// `weight / -ln(u)` with `u` uniform in (0, 1) from the key and the zone.
pub fn rendezvous_score(key_hash: u64, zone_seed: u64, weight: u32) -> f64 {
    let x = mix64(key_hash ^ zone_seed);
    // 53 random bits, never 0 or 1.
    let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight) / -u.ln()
}

/// The zone among `zones` (each with its weight) that holds `key`: the only
/// one, or among several the one a weighted rendezvous hash picks (adding a
/// zone moves only its share of keys). Unhealthy zones are skipped until
/// they recover, so their keys go to the others; when none is healthy, the
/// pick among all of them.
pub fn place<'z>(zones: &'z [(Arc<Zone>, u32)], key: &KeyRef<'_>) -> Option<&'z Arc<Zone>> {
    if zones.len() <= 1 {
        return zones.first().map(|(zone, _)| zone);
    }
    let hash = key_hash(key);
    let best = |healthy_only: bool| {
        zones
            .iter()
            .filter(|(zone, _)| !healthy_only || zone.tier.healthy())
            .map(|(zone, weight)| (rendezvous_score(hash, zone.seed, *weight), zone))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, zone)| zone)
    };
    best(true).or_else(|| best(false))
}

#[cfg(test)]
#[path = "zone_tests.rs"]
mod tests;
