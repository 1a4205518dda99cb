//! How old a copy in Redis may be and still be used, per key: the purge
//! floor. A purge that names keys reaches them in Redis (their `:p`); one
//! that names none cannot (no SCAN), so every object Redis holds from
//! before it must be ignored. Until issue 30 that was one floor for every
//! key (the `{prefix}purged_before` epoch): a prefix purge of `/s3/` made
//! the whole shared tier unusable, and the fleet fetched every object
//! again (in bench/fleet-many, 70% of the duplicate fetches).
//!
//! Now a prefix purge is a rule with its time, and only keys under its
//! prefix get its floor; so is a URL purge on every host (a node knows only
//! the hosts it stored: its path on any host is the rule, unless a route
//! renders keys from a template); tag purges and `all` stay floors for
//! every key. What a node knows:
//!
//! - its own purges, at once, at the epoch the purge script set;
//! - other nodes' purges, as it applies them from the stream: each entry
//!   says the epoch its sender set (`epoch` field); the local apply says
//!   whether it was a prefix (its rule), a tag or `all` (every key), or
//!   named keys (no floor; an epoch with one is taken as every key);
//! - the epoch key, read each poll. An epoch no applied purge accounts for
//!   (a purge whose stream entry is not read yet, an older node that sends
//!   no `epoch` field, a catch-up after Redis was out) is a floor for every
//!   key, as before, until one does;
//! - the epoch once the node knows where it reads the stream from (at
//!   start, after a gap): the purges before are never read, so that epoch
//!   stays a floor for every key (the baseline).
//!
//! So a node uses a copy from before a prefix purge of another prefix, and
//! never one from before a purge it has not yet accounted for: the window
//! a prefix rule has is the stream's lag, the window a local copy already
//! had.
//!
//! Owns: the rules and the floor of a key. Must not: talk to Redis, or
//! parse the purge API's JSON (the proxy says what a purge was).

use std::collections::VecDeque;
use std::sync::Mutex;

use calmcache_core::CacheKey;

/// Prefix rules kept. Past it the oldest becomes a fleet-wide floor (safe:
/// it only ignores more copies).
pub(super) const RULES_MAX: usize = 4_096;

/// What a purge from the fleet was, for the shared tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SharedRule {
    /// It named keys (URLs on known hosts, a rendered key): Redis' own
    /// per-key purge time covers it.
    Keys,
    /// Every key whose path starts with `path`, on `host` only if given.
    Prefix {
        /// Lower-cased host.
        host: Option<String>,
        /// The path prefix.
        path: String,
    },
    /// Anything else (a tag, everything): every key.
    Everything,
}

struct PrefixRule {
    host: Option<String>,
    path: String,
    at_ms: u64,
}

struct Floors {
    /// The newest epoch read from Redis.
    epoch: u64,
    /// The newest epoch a purge this node accounted for set.
    explained: u64,
    /// The floor for every key: tag and `all` purges.
    everything: u64,
    /// Prefix rules, oldest first.
    prefixes: VecDeque<PrefixRule>,
    /// The epoch is yet to be read once the stream position is known (at
    /// start, after a gap): what the purges before it took is not known.
    baseline_pending: bool,
}

impl Default for Floors {
    fn default() -> Floors {
        Floors {
            epoch: 0,
            explained: 0,
            everything: 0,
            prefixes: VecDeque::new(),
            baseline_pending: true,
        }
    }
}

/// The purge floors this node knows of.
#[derive(Default)]
pub(super) struct PurgeFloors {
    inner: Mutex<Floors>,
}

impl PurgeFloors {
    fn lock(&self) -> std::sync::MutexGuard<'_, Floors> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The epoch key read from Redis.
    pub(super) fn saw_epoch(&self, epoch: u64) {
        let mut f = self.lock();
        f.epoch = f.epoch.max(epoch);
    }

    /// Whether the epoch is to be read as a floor for every key.
    pub(super) fn needs_baseline(&self) -> bool {
        self.lock().baseline_pending
    }

    /// The epoch read once the stream position is known: the purges before
    /// it are not read, so it is a floor for every key.
    pub(super) fn set_baseline(&self, epoch: u64) {
        let mut f = self.lock();
        f.epoch = f.epoch.max(epoch);
        f.everything = f.everything.max(epoch);
        f.baseline_pending = false;
    }

    /// Purges may have been missed (Redis lost its data, the stream was
    /// trimmed past this node): every epoch seen is a floor for every key,
    /// and the next one read too.
    pub(super) fn lost_track(&self) {
        let mut f = self.lock();
        f.everything = f.everything.max(f.epoch);
        f.baseline_pending = true;
    }

    /// A purge accounted for: `rule`, and the epoch its sender set (`None`:
    /// it set none, or sent none: an older node), at `at_ms` (the epoch, or
    /// when it entered the stream).
    pub(super) fn note(&self, rule: SharedRule, epoch: Option<u64>, at_ms: u64) {
        let mut f = self.lock();
        match (rule, epoch) {
            // Named keys and no epoch: nothing for the shared tier's floors.
            (SharedRule::Keys, None) => {}
            (SharedRule::Prefix { host, path }, _) => {
                if f.prefixes.len() >= RULES_MAX {
                    if let Some(oldest) = f.prefixes.pop_front() {
                        f.everything = f.everything.max(oldest.at_ms);
                    }
                }
                f.prefixes.push_back(PrefixRule { host, path, at_ms });
            }
            // A tag, everything, or named keys that came with an epoch
            // (not sent by this version): every key.
            (SharedRule::Everything | SharedRule::Keys, _) => {
                f.everything = f.everything.max(at_ms);
            }
        }
        if let Some(e) = epoch {
            f.explained = f.explained.max(e);
        }
    }

    /// The oldest a copy of `key` in Redis may be (its lease's start, Redis'
    /// clock, ms) and still be used.
    pub(super) fn floor(&self, key: &CacheKey) -> u64 {
        let f = self.lock();
        let unexplained = if f.epoch > f.explained { f.epoch } else { 0 };
        let k = key.as_ref();
        f.prefixes
            .iter()
            .filter(|r| r.host.as_deref().is_none_or(|h| h == k.host))
            .filter(|r| k.path_and_query.starts_with(r.path.as_str()))
            .map(|r| r.at_ms)
            .fold(unexplained.max(f.everything), u64::max)
    }
}

#[cfg(test)]
#[path = "purge_floor_tests.rs"]
mod tests;
