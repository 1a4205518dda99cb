//! The running proxy's shared state, built once from a validated config:
//! routes bound to their upstream and zone, the single-flight table, counters.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use calmcache_core::disk::{DiskConfig, DiskTier};
use calmcache_core::{
    CacheError, CacheKey, CachedObject, Flights, HitForMiss, KeyRef, MemoryTier, RefreshPolicy,
    StoreRules, Tier,
};

use crate::config::{ClientCacheControl, Config, RouteConfig, ZoneKind};
use crate::net::upstream::{Upstream, UpstreamError};
use crate::proxy::outcome::FillOutcome;
use crate::telemetry::stats::Activity;

/// Weighted rendezvous (highest random weight) score of a key for a zone:
/// `weight / -ln(u)` with `u` uniform in (0, 1) from the key and the zone.
pub fn rendezvous_score(key_hash: u64, zone_seed: u64, weight: u32) -> f64 {
    let x = calmcache_core::disk::mix64(key_hash ^ zone_seed);
    // 53 random bits, never 0 or 1.
    let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight) / -u.ln()
}

/// A cache zone and its storage.
pub struct Zone {
    /// The config name.
    pub name: String,
    /// Stable per-zone seed for hash placement (from the name).
    pub seed: u64,
    /// Where objects live.
    pub store: Store,
}

/// The storage behind a zone.
pub enum Store {
    /// RAM: lookups are synchronous and share the object.
    Memory(MemoryTier),
    /// Files: the index is in memory, reads and writes run on blocking threads.
    Disk(Arc<DiskTier>),
}

impl Zone {
    /// The object under `key`, fresh or not. A memory zone answers at once;
    /// a disk zone reads the file on a blocking thread.
    pub async fn get(&self, key: &KeyRef<'_>) -> Option<Arc<CachedObject>> {
        match &self.store {
            Store::Memory(tier) => tier.get(key),
            Store::Disk(tier) => tier.get(key).await,
        }
    }

    /// Stores or replaces the object under `key`.
    pub async fn insert(&self, key: CacheKey, object: Arc<CachedObject>) -> Result<(), CacheError> {
        match &self.store {
            Store::Memory(tier) => tier.insert(key, object),
            Store::Disk(tier) => tier.insert(key, object).await,
        }
    }

    /// Purges `key` (soft: marks it expired); true when it was there.
    pub fn purge_key(&self, key: &KeyRef<'_>, soft: bool) -> bool {
        match &self.store {
            Store::Memory(tier) => tier.purge_key(key, soft),
            Store::Disk(tier) => tier.purge_key(key, soft),
        }
    }

    /// Drops the object under `key`; true when there was one.
    pub fn remove(&self, key: &KeyRef<'_>) -> bool {
        match &self.store {
            Store::Memory(tier) => tier.remove(key),
            Store::Disk(tier) => tier.remove(key),
        }
    }

    /// Bytes in use.
    pub fn size_bytes(&self) -> u64 {
        match &self.store {
            Store::Memory(tier) => tier.size_bytes(),
            Store::Disk(tier) => tier.size_bytes(),
        }
    }

    /// Objects held.
    pub fn objects(&self) -> u64 {
        match &self.store {
            Store::Memory(tier) => tier.objects(),
            Store::Disk(tier) => tier.objects(),
        }
    }

    /// Configured bound in bytes.
    pub fn max_size(&self) -> u64 {
        match &self.store {
            Store::Memory(tier) => tier.max_size(),
            Store::Disk(tier) => tier.config().max_size,
        }
    }

    /// Largest object stored.
    pub fn max_object_size(&self) -> u64 {
        match &self.store {
            Store::Memory(tier) => tier.max_object_size(),
            Store::Disk(tier) => tier.config().max_object_size,
        }
    }

    /// False while a disk zone is out after an I/O error.
    pub fn healthy(&self) -> bool {
        match &self.store {
            Store::Memory(_) => true,
            Store::Disk(tier) => tier.healthy(),
        }
    }

    /// The disk tier, for a disk zone.
    pub fn disk(&self) -> Option<&Arc<DiskTier>> {
        match &self.store {
            Store::Disk(tier) => Some(tier),
            Store::Memory(_) => None,
        }
    }
}

/// A route bound to its upstream and zone.
pub struct Route {
    /// The validated config of this route.
    pub cfg: RouteConfig,
    /// Where misses go.
    pub upstream: Arc<Upstream>,
    /// Where objects are kept (the first of `zones`); `None` proxies
    /// without caching.
    pub zone: Option<Arc<Zone>>,
    /// Every zone of the route, with its weight; keys are placed by
    /// [`Route::zone_for`].
    pub zones: Vec<(Arc<Zone>, u32)>,
    /// A memory zone in front of the disk zones (`memory = "ram"`).
    pub memory: Option<Arc<Zone>>,
    /// Keys hit once on disk recently: a second hit promotes to `memory`.
    seen_once: Mutex<HashSet<u64>>,
    /// Hosts this route has stored objects for, so a purge of a path can
    /// reach it on every host (bounded by `KNOWN_HOSTS_MAX`; past it, path
    /// purges scan the route's zones).
    pub hosts: Mutex<KnownHosts>,
    /// Refresh algorithm and beta.
    pub policy: RefreshPolicy,
    /// Keys whose answers could not be stored, fetched without coalescing.
    pub hit_for_miss: HitForMiss,
    /// `key` is the default template: keys are built without rendering.
    pub key_is_default: bool,
    /// Counters.
    pub activity: Activity,
    /// The `max_inflight_body` gauge every fill counts its buffers in.
    pub inflight: Arc<crate::telemetry::inflight::Inflight>,
}

impl Route {
    /// The storing rules for a response with `status`.
    pub fn store_rules(&self, status: u16) -> StoreRules {
        StoreRules {
            ttl: self.cfg.ttl.get(status),
            override_origin: self.cfg.override_origin,
            stale_while_revalidate: self.cfg.stale_while_revalidate,
            stale_if_error: self.cfg.stale_if_error,
            heuristic_fraction: self.cfg.heuristic_fraction,
            heuristic_max: self.cfg.heuristic_max,
        }
    }

    /// Removes the RFC 9213 targeted fields and the cache tags from a
    /// response to a client, unless the route forwards them.
    pub fn strip_targeted(&self, headers: &mut http::HeaderMap) {
        if !self.cfg.forward_targeted_cache_control {
            for name in calmcache_core::cache_control::TARGETED {
                headers.remove(name);
            }
        }
        if !self.cfg.expose_cache_tags {
            for name in calmcache_core::object::TAG_FIELDS {
                headers.remove(name);
            }
        }
    }

    /// Whether clients' request directives are obeyed.
    pub fn honors_client_cache_control(&self) -> bool {
        self.cfg.client_cache_control == ClientCacheControl::Honor
    }

    /// The zone that holds `key`: the route's only zone, or among several the
    /// one a weighted rendezvous hash picks (adding a zone moves only its
    /// share of keys). Zones out on a disk fault are skipped until they
    /// recover, so their keys go to the others.
    pub fn zone_for(&self, key: &KeyRef<'_>) -> Option<&Arc<Zone>> {
        if self.zones.len() <= 1 {
            return self.zone.as_ref();
        }
        let hash = calmcache_core::disk::key_hash(key);
        let best = |healthy_only: bool| {
            self.zones
                .iter()
                .filter(|(zone, _)| !healthy_only || zone.healthy())
                .map(|(zone, weight)| (rendezvous_score(hash, zone.seed, *weight), zone))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, zone)| zone)
        };
        best(true).or_else(|| best(false))
    }

    /// The object under `key` in `zone`, through the memory front if the
    /// route has one: a front hit answers from RAM; a disk hit of a key hit
    /// once before is promoted into the front.
    pub async fn get(&self, zone: &Zone, key: &KeyRef<'_>) -> Option<Arc<CachedObject>> {
        let Some(front) = &self.memory else {
            return zone.get(key).await;
        };
        if let Some(object) = front.get(key).await {
            // Keep the disk copy's last use current: the manager must not
            // take the hottest objects for the coldest.
            if let Some(disk) = zone.disk() {
                disk.touch(key);
            }
            return Some(object);
        }
        let version = zone.disk().and_then(|d| d.version(key));
        let object = zone.get(key).await?;
        // Whole responses only: large objects stream from their file, and
        // Vary markers stay on disk (they change as variants are stored).
        let promotable = object.lazy_body.is_none() && object.vary_index.is_none();
        if promotable && self.second_hit(calmcache_core::disk::key_hash(key)) {
            // Not if a newer copy was stored, or the key removed, while this
            // one was read.
            let current = zone.disk().and_then(|d| d.version(key));
            if current.is_some() && current == version {
                if let Err(e) = front.insert(key.to_owned_key(), object.clone()).await {
                    tracing::debug!(zone = %front.name, error = %e, "not promoted");
                }
            }
        }
        Some(object)
    }

    /// True on the second sighting of `hash` (a bounded doorkeeper: one-hit
    /// wonders never enter the front, as in TinyLFU).
    fn second_hit(&self, hash: u64) -> bool {
        let mut seen = match self.seen_once.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        if seen.remove(&hash) {
            return true;
        }
        if seen.len() >= DOORKEEPER_MAX {
            seen.clear();
        }
        seen.insert(hash);
        false
    }

    /// After `object` was stored under `key`: a copy in the memory front is
    /// replaced (or dropped, for a body left in its file), so the front never
    /// serves an older version.
    pub async fn stored(&self, key: &CacheKey, object: &Arc<CachedObject>) {
        if let Some(front) = &self.memory {
            if front.get(&key.as_ref()).await.is_some() {
                if object.lazy_body.is_some() {
                    // Its body is in its file (a streamed disk fill): the
                    // front holds bodies, so the old copy just goes.
                    front.remove(&key.as_ref());
                } else {
                    let _ = front.insert(key.clone(), object.clone()).await;
                }
            }
        }
    }

    /// Removes `key` from every zone of the route (the one it is placed in
    /// may change while a zone is out of the ring) and from the memory front.
    pub fn remove(&self, key: &KeyRef<'_>) -> bool {
        let mut removed = self.memory.as_ref().is_some_and(|f| f.remove(key));
        for (zone, _) in &self.zones {
            removed |= zone.remove(key);
        }
        removed
    }

    /// Remembers the host of a key just stored (for purges by path): the
    /// key's own with the default template; a rendered key has none, so the
    /// `Host` of the request it was fetched for (a path purge renders the
    /// template again with each host remembered).
    pub fn note_host(&self, primary: &CacheKey, request_host: &str) {
        let host = if self.key_is_default {
            primary.as_ref().host
        } else {
            request_host
        };
        self.known_hosts().note(host);
    }

    /// The hosts this route stored objects for (a poisoned lock still holds
    /// a usable set: plain data).
    pub fn known_hosts(&self) -> std::sync::MutexGuard<'_, KnownHosts> {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a follower waits for a fetch in flight.
    pub fn lock_timeout(&self) -> Duration {
        self.cfg.lock_timeout
    }
}

/// Hosts remembered per route for purges by path; past it, a path purge
/// scans the route's zones for the path on any host.
pub const KNOWN_HOSTS_MAX: usize = 10_000;

/// The hosts a route stored objects for, up to [`KNOWN_HOSTS_MAX`], and
/// whether a host was ever left out: then the set is not the whole story
/// (junk `Host` values can fill it) and a path purge must scan instead.
#[derive(Clone, Debug, Default)]
pub struct KnownHosts {
    set: HashSet<Box<str>>,
    overflowed: bool,
}

impl KnownHosts {
    /// Remembers `host`, or notes that it did not fit.
    pub fn note(&mut self, host: &str) {
        if self.set.contains(host) {
            return;
        }
        if self.set.len() < KNOWN_HOSTS_MAX {
            self.set.insert(host.into());
        } else {
            self.overflowed = true;
        }
    }

    /// True when some host was not remembered since the last [`reset`](Self::reset).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The hosts remembered.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.set.iter().map(|h| &**h)
    }

    /// Forgets every host (everything stored was purged).
    pub fn reset(&mut self) {
        *self = KnownHosts::default();
    }
}

/// Keys remembered by a route's doorkeeper before it starts over.
const DOORKEEPER_MAX: usize = 65_536;

/// How often a disk zone's manager looks at its size and inactivity.
const DISK_MANAGER_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Everything a request handler needs.
pub struct Proxy {
    /// Routes in config order; the first match wins.
    pub routes: Vec<Arc<Route>>,
    /// Zones in config order.
    pub zones: Vec<Arc<Zone>>,
    /// Fetches in flight, shared by misses, refreshes and warm-up (and by
    /// the generations of a reload).
    pub flights: Arc<Flights<FillOutcome>>,
    /// Upstreams in config order.
    pub upstreams: Vec<Arc<Upstream>>,
    /// Gauges and latency histograms.
    pub metrics: Arc<crate::telemetry::metrics::Metrics>,
    /// Attach a `metrics::Served` to each response (the access log is on).
    pub note_served: bool,
    /// True once the listeners are up and the disk loaders started.
    pub ready: std::sync::atomic::AtomicBool,
    /// The `[admin]` settings (token, purge networks), if any.
    pub admin: Option<crate::config::AdminConfig>,
    /// The access log, once opened (for its counters in `/status`).
    pub access_log: std::sync::OnceLock<crate::telemetry::access_log::AccessLog>,
}

/// Why a config could not become a proxy generation: at start (exit 1) or
/// at a reload (refused; the running generation stays). Each message
/// carries its cause (not also given as `source()`, so a `{:#}` chain
/// prints it once).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// An upstream's pool could not be built.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A disk zone's directory cannot hold a cache: not creatable, someone
    /// else's files, or locked by another calmcache process.
    #[error("zones.{zone}: cannot use {} as a cache directory: {error}", path.display())]
    ZoneDir {
        /// The zone's name.
        zone: String,
        /// Its directory.
        path: std::path::PathBuf,
        /// What opening it said.
        error: std::io::Error,
    },
}

impl Proxy {
    /// Starts the disk zones' loaders and managers on the current runtime
    /// (after a reload, of the zones `previous` did not have).
    pub fn start_background(&self, previous: Option<&Proxy>) {
        let kept = |zone: &Arc<Zone>| {
            previous.is_some_and(|p| p.zones.iter().any(|old| Arc::ptr_eq(old, zone)))
        };
        for zone in self.zones.iter().filter(|z| !kept(z)) {
            if let Some(disk) = zone.disk() {
                disk.spawn_loader();
                disk.spawn_manager(DISK_MANAGER_EVERY);
            }
        }
    }

    /// Binds routes to upstreams and zones. At a reload, `previous` is the
    /// running generation: its metrics, fetches in flight and access log
    /// carry over, zones of the same name and storage keep their contents
    /// (`notes` says what did not), routes of the same name keep the hosts
    /// they stored (for purges by path).
    pub fn new(
        config: &Config,
        previous: Option<&Proxy>,
        notes: &mut Vec<String>,
    ) -> Result<Arc<Self>, SetupError> {
        let upstreams = config
            .upstreams
            .iter()
            .map(|u| {
                let old = previous.and_then(|p| p.upstreams.iter().find(|o| o.name == u.name));
                Upstream::new(u, old.map(|o| &**o)).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let zones = config
            .zones
            .iter()
            .map(|z| {
                if let Some(kept) = previous.and_then(|p| reuse_zone(p, z, notes)) {
                    return Ok(kept);
                }
                let store = match z.kind {
                    ZoneKind::Memory => {
                        Store::Memory(MemoryTier::new(z.max_size, z.max_object_size))
                    }
                    ZoneKind::Disk => {
                        let path = z.path.clone().unwrap_or_default();
                        let disk = DiskConfig {
                            path: path.clone(),
                            max_size: z.max_size,
                            max_object_size: z.max_object_size,
                            inactive: z.inactive,
                            min_free: z.min_free,
                        };
                        let tier = DiskTier::open(disk).map_err(|error| SetupError::ZoneDir {
                            zone: z.name.clone(),
                            path,
                            error,
                        })?;
                        Store::Disk(tier)
                    }
                };
                let seed = calmcache_core::disk::key_hash(&KeyRef::new("zone", &z.name, ""));
                Ok(Arc::new(Zone {
                    name: z.name.clone(),
                    seed,
                    store,
                }))
            })
            .collect::<Result<Vec<Arc<Zone>>, SetupError>>()?;
        let metrics = previous.map_or_else(
            || {
                Arc::new(crate::telemetry::metrics::Metrics::with_max_connections(
                    config.server.max_connections,
                ))
            },
            |p| p.metrics.clone(),
        );
        metrics.inflight.set_limit(config.server.max_inflight_body);
        let routes = config
            .routes
            .iter()
            .map(|r| {
                Arc::new(Route {
                    cfg: r.clone(),
                    upstream: upstreams[r.upstream].clone(),
                    zone: r.zone.map(|z| zones[z].clone()),
                    zones: r
                        .zones
                        .iter()
                        .map(|&z| (zones[z].clone(), config.zones[z].weight))
                        .collect(),
                    memory: r.memory.map(|z| zones[z].clone()),
                    seen_once: Mutex::new(HashSet::new()),
                    hosts: Mutex::new(
                        previous
                            .and_then(|p| p.routes.iter().find(|old| old.cfg.name == r.name))
                            .map(|old| old.known_hosts().clone())
                            .unwrap_or_default(),
                    ),
                    policy: RefreshPolicy {
                        mode: r.refresh,
                        beta: r.per_beta,
                        sus_stale: r.sus_stale,
                    },
                    hit_for_miss: HitForMiss::new(r.hit_for_miss),
                    key_is_default: r.key.is_default(),
                    activity: Activity::default(),
                    inflight: metrics.inflight.clone(),
                })
            })
            .collect();
        let access_log = std::sync::OnceLock::new();
        if let Some(log) = previous.and_then(|p| p.access_log.get()) {
            let _ = access_log.set(log.clone());
        }
        Ok(Arc::new(Proxy {
            routes,
            zones,
            flights: previous.map_or_else(|| Arc::new(Flights::new()), |p| p.flights.clone()),
            upstreams,
            metrics,
            // The access log is opened once, at start.
            note_served: previous.map_or(config.access_log.is_some(), |p| p.note_served),
            ready: std::sync::atomic::AtomicBool::new(previous.is_some()),
            admin: config.admin.clone(),
            access_log,
        }))
    }
}

/// The running zone `config` names, when its storage is unchanged: a memory
/// zone of the same sizes, a disk zone at the same path (new limits of a
/// kept disk zone wait for a restart: its files stay in use).
fn reuse_zone(
    previous: &Proxy,
    config: &crate::config::ZoneConfig,
    notes: &mut Vec<String>,
) -> Option<Arc<Zone>> {
    let old = previous.zones.iter().find(|z| z.name == config.name)?;
    match (&old.store, config.kind) {
        (Store::Memory(tier), ZoneKind::Memory) => {
            if tier.max_size() == config.max_size
                && tier.max_object_size() == config.max_object_size.clamp(1, config.max_size.max(1))
            {
                return Some(old.clone());
            }
            notes.push(format!(
                "zones.{}: new size, so a new empty memory zone",
                config.name
            ));
            None
        }
        (Store::Disk(tier), ZoneKind::Disk) => {
            let was = tier.config();
            if config.path.as_deref() != Some(was.path.as_path()) {
                notes.push(format!(
                    "zones.{}: new path, so a new zone (the old directory is left as it is)",
                    config.name
                ));
                return None;
            }
            if was.max_size != config.max_size
                || was.max_object_size != config.max_object_size
                || was.inactive != config.inactive
                || was.min_free != config.min_free
            {
                notes.push(format!(
                    "zones.{}: kept with its contents; its new limits apply at the next restart",
                    config.name
                ));
            }
            Some(old.clone())
        }
        _ => {
            notes.push(format!(
                "zones.{}: new kind, so a new empty zone",
                config.name
            ));
            None
        }
    }
}

/// One worker thread's view of the proxy: the shared state plus its own
/// copies of the route regexes. A `Regex` shared by threads takes a mutex-guarded
/// scratch pool on every match from all but its first thread; a clone per
/// worker keeps route matching lock-free on the hit path.
pub struct Worker {
    /// The shared state.
    pub proxy: Arc<Proxy>,
    matchers: Vec<Option<regex::Regex>>,
    /// This thread's WebSocket tunnels, closed when the worker stops.
    pub tunnels: Arc<crate::net::shutdown::Tunnels>,
}

impl Worker {
    /// Clones the route regexes for one thread.
    pub fn new(proxy: Arc<Proxy>, tunnels: Arc<crate::net::shutdown::Tunnels>) -> Self {
        let matchers = proxy.routes.iter().map(|r| r.cfg.matcher.clone()).collect();
        Worker {
            proxy,
            matchers,
            tunnels,
        }
    }

    /// The first route matching `path_and_query`.
    pub fn route_for(&self, path_and_query: &str) -> Option<&Arc<Route>> {
        let mut matchers = self.matchers.iter();
        self.proxy.routes.iter().find(|_| match matchers.next() {
            Some(Some(regex)) => regex.is_match(path_and_query),
            _ => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::rendezvous_score;
    use calmcache_core::disk::key_hash;
    use calmcache_core::KeyRef;

    fn seed(name: &str) -> u64 {
        key_hash(&KeyRef::new("zone", name, ""))
    }

    fn place(key: u64, zones: &[(u64, u32)]) -> u64 {
        zones
            .iter()
            .map(|&(s, w)| (rendezvous_score(key, s, w), s))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, s)| s)
            .unwrap_or(0)
    }

    const KEYS: u64 = 100_000;

    fn keys() -> impl Iterator<Item = u64> {
        (0..KEYS).map(|i| key_hash(&KeyRef::new("http", "h", &format!("/k/{i}"))))
    }

    #[test]
    fn keys_spread_evenly_and_by_weight() {
        let zones: Vec<(u64, u32)> = ["d1", "d2", "d3", "d4"]
            .iter()
            .map(|n| (seed(n), 1))
            .collect();
        let mut counts = std::collections::HashMap::new();
        for k in keys() {
            *counts.entry(place(k, &zones)).or_insert(0u64) += 1;
        }
        for (_, n) in counts {
            let share = n as f64 / KEYS as f64;
            assert!((share - 0.25).abs() < 0.01, "share {share}");
        }
        // weight 3 against 1: three quarters of the keys.
        let weighted = [(seed("big"), 3), (seed("small"), 1)];
        let big = keys()
            .filter(|&k| place(k, &weighted) == seed("big"))
            .count();
        let share = big as f64 / KEYS as f64;
        assert!((share - 0.75).abs() < 0.01, "share {share}");
    }

    #[test]
    fn adding_a_zone_moves_only_its_share() {
        let three: Vec<(u64, u32)> = ["d1", "d2", "d3"].iter().map(|n| (seed(n), 1)).collect();
        let mut four = three.clone();
        four.push((seed("d4"), 1));
        let moved = keys()
            .filter(|&k| place(k, &three) != place(k, &four))
            .count();
        let share = moved as f64 / KEYS as f64;
        // Ideal 1/4; every moved key went to the new zone.
        assert!((share - 0.25).abs() < 0.01, "moved {share}");
        assert!(keys()
            .filter(|&k| place(k, &three) != place(k, &four))
            .all(|k| place(k, &four) == seed("d4")));
    }

    #[test]
    fn known_hosts_note_an_overflow_until_reset() {
        use super::{KnownHosts, KNOWN_HOSTS_MAX};
        let mut hosts = KnownHosts::default();
        for i in 0..KNOWN_HOSTS_MAX {
            hosts.note(&format!("h{i}"));
        }
        hosts.note("h0");
        assert!(!hosts.overflowed(), "a host already known is no overflow");
        assert_eq!(hosts.hosts().count(), KNOWN_HOSTS_MAX);
        hosts.note("one-too-many");
        assert!(hosts.overflowed());
        assert_eq!(hosts.hosts().count(), KNOWN_HOSTS_MAX, "bounded");
        hosts.reset();
        assert!(!hosts.overflowed());
        assert_eq!(hosts.hosts().count(), 0);
    }
}
