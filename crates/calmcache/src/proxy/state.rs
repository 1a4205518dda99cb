//! The running proxy's shared state, built once from a validated config:
//! routes bound to their upstream and zone, the single-flight table, counters.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use calmcache_core::{
    CacheKey, CachedObject, Flights, HitForMiss, KeyRef, MemoryFront, RefreshPolicy, StoreRules,
    Zone,
};

use crate::config::answering::RouteKind;
use crate::config::{ClientCacheControl, Config, RouteConfig, RouteMatch};
use crate::net::listener::ListenerId;
use crate::net::upstream::Upstream;
use crate::proxy::outcome::FillOutcome;
use crate::proxy::setup::SetupError;
use crate::proxy::zones::{ZoneSources, ZoneTiers};
use crate::telemetry::stats::Activity;

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
    /// A zone in front of the route's zones (`memory = "ram"`): their
    /// objects hit twice are promoted into it.
    pub front: Option<MemoryFront>,
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
    /// Counters (kept by name across reloads: proxy/carry.rs).
    pub activity: Arc<Activity>,
    /// The `max_inflight_body` gauge every fill counts its buffers in.
    pub inflight: Arc<crate::telemetry::inflight::Inflight>,
    /// The fleet's shared tier and leases (`[fleet]`), for this route's
    /// fills: only through the seam (never on a local hit).
    pub(crate) fleet: Option<Arc<dyn crate::fleet::SharedTier>>,
    /// Early Hints links of the last answer stored per URL (proxy/hints.rs).
    pub(crate) hints: crate::proxy::hint_memory::HintMemory,
    /// The route's `limits`, by the gate that applies them (proxy/limit.rs).
    pub(crate) limits: crate::net::limit::RouteLimits,
}

impl Route {
    /// The storing rules for a response with `status`.
    pub fn store_rules(&self, status: u16) -> StoreRules {
        let freshness = &self.cfg.freshness;
        StoreRules {
            ttl: freshness.ttl.get(status),
            override_origin: freshness.override_origin,
            stale_while_revalidate: freshness.stale_while_revalidate,
            stale_if_error: freshness.stale_if_error,
            heuristic_fraction: freshness.heuristic_fraction,
            heuristic_max: freshness.heuristic_max,
            ignored: freshness.ignore_headers,
        }
    }

    /// Removes the RFC 9213 targeted fields and the cache tags from a
    /// response to a client, unless the route forwards them.
    /// The rule itself lives in [`crate::http::headers::strip_targeted`];
    /// the route supplies its settings.
    pub fn strip_targeted(&self, headers: &mut http::HeaderMap) {
        let shown = crate::http::headers::Shown {
            targeted_cache_control: self.cfg.answers.forward_targeted_cache_control,
            cache_tags: self.cfg.answers.expose_cache_tags,
        };
        crate::http::headers::strip_targeted(headers, shown);
    }

    /// True when `method` on this route is a read keyed by its body
    /// (body_key.rs): QUERY with a zone, POST with a zone and `cache_post`.
    pub fn keyed_by_body(&self, method: &http::Method) -> bool {
        match *method {
            http::Method::GET | http::Method::HEAD => false,
            http::Method::POST => self.zone.is_some() && self.cfg.requests.cache_post,
            _ => self.zone.is_some() && *method == *crate::http::QUERY,
        }
    }

    /// Whether clients' request directives are obeyed.
    pub fn honors_client_cache_control(&self) -> bool {
        self.cfg.requests.client_cache_control == ClientCacheControl::Honor
    }

    /// The zone that holds `key`: the route's only zone, or among several the
    /// one a weighted rendezvous hash picks (adding a zone moves only its
    /// share of keys). Zones out on a fault are skipped until they recover,
    /// so their keys go to the others.
    pub fn zone_for(&self, key: &KeyRef<'_>) -> Option<&Arc<Zone>> {
        calmcache_core::zone::place(&self.zones, key)
    }

    /// The object under `key` in `zone`, through the memory front if the
    /// route has one: a front hit answers from RAM; a hit in `zone` of a key
    /// hit once before is promoted into the front.
    pub async fn get(&self, zone: &Zone, key: &KeyRef<'_>) -> Option<Arc<CachedObject>> {
        match &self.front {
            Some(front) => front.get(zone, key).await,
            None => zone.tier.get(key).await,
        }
    }

    /// After `object` was stored under `key`: a copy in the memory front is
    /// replaced (or dropped, for a body left in its file), so the front never
    /// serves an older version.
    pub async fn stored(&self, key: &CacheKey, object: &Arc<CachedObject>) {
        if let Some(front) = &self.front {
            front.stored(key, object).await;
        }
    }

    /// Removes `key` from every zone of the route (the one it is placed in
    /// may change while a zone is out of the ring) and from the memory front.
    pub async fn remove(&self, key: &KeyRef<'_>) -> bool {
        let mut removed = match &self.front {
            Some(front) => front.remove(key).await,
            None => false,
        };
        for (zone, _) in &self.zones {
            removed |= zone.tier.remove(key).await;
        }
        removed
    }

    /// The zones a purge of this route's keys reaches: its zones and its
    /// memory front.
    pub fn all_zones(&self) -> impl Iterator<Item = &Arc<Zone>> {
        let front = self.front.as_ref().map(MemoryFront::zone);
        self.zones.iter().map(|(zone, _)| zone).chain(front)
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
        self.cfg.refresh.lock_timeout
    }
}

/// A route that answers without the origin (`return`, `root`;
/// proxy/answering/): its config and counters. No upstream, no zone.
pub struct AnsweringRoute {
    /// The validated config of this route (its kind is not `Proxy`).
    pub cfg: RouteConfig,
    /// Counters (kept by name across reloads: proxy/carry.rs).
    pub activity: Arc<Activity>,
}

/// One entry of the route table: a proxied route or one that answers
/// itself. Admission (handle.rs) hands each to its own path, so the
/// proxied path's code never sees a route without an upstream.
pub(crate) enum Entry {
    /// Proxied to its upstream, cached in its zone if it has one.
    Proxied(Arc<Route>),
    /// Answered by proxy/answering/.
    Answering(Arc<AnsweringRoute>),
}

impl Entry {
    /// The route's validated config.
    pub(crate) fn cfg(&self) -> &RouteConfig {
        match self {
            Entry::Proxied(route) => &route.cfg,
            Entry::Answering(route) => &route.cfg,
        }
    }

    /// The route's counters.
    pub(crate) fn activity(&self) -> &Arc<Activity> {
        match self {
            Entry::Proxied(route) => &route.activity,
            Entry::Answering(route) => &route.activity,
        }
    }
}

/// Hosts remembered per route for purges by path; past it, a path purge
/// scans the route's zones for the path on any host.
pub(crate) const KNOWN_HOSTS_MAX: usize = 10_000;

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

    /// Remembers the hosts a zone found at start; past the bound (or when
    /// the zone could not keep them all), notes the overflow.
    pub fn note_found(&mut self, found: &calmcache_core::HostsFound) {
        for host in &found.hosts {
            self.note(host);
        }
        self.overflowed |= found.overflowed;
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

/// Everything a request handler needs.
pub struct Proxy {
    /// The proxied routes, in config order (purges, warm-up, `/status`).
    pub routes: Vec<Arc<Route>>,
    /// The routes that answer themselves (`return`, `root`), in config order.
    pub answering: Vec<Arc<AnsweringRoute>>,
    /// Every route in config order, as requests are matched: the first
    /// that takes a request wins (a file route whose file is absent hands
    /// it to the next).
    pub(crate) table: Vec<Entry>,
    /// Zones in config order.
    pub zones: Vec<Arc<Zone>>,
    /// Per zone (same order): the answers of routes that place keys over
    /// several `zones`, counted by class in the zone each key went to
    /// (a route with one zone is counted whole in its zone by `/status`).
    /// Kept by zone name across reloads (proxy/carry.rs).
    pub zone_activity: Vec<Arc<Activity>>,
    /// Where the zones came from, for the next reload.
    zone_sources: ZoneSources,
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
    /// `[fleet]`: the shared tier, leases and purge bus on Redis (kept
    /// across reloads while its settings are the same).
    pub(crate) fleet: Option<Arc<crate::fleet::Fleet>>,
    /// `[limits.*]` in config order (a limit of the same name and settings
    /// as the previous generation's keeps its clients; its counts are kept
    /// by name whatever changed).
    pub(crate) limits: Vec<Arc<crate::net::limit::Limit>>,
}

impl Proxy {
    /// What a reload changes in state it shares with the running generation
    /// `previous`, done at the switch (run/reload.rs), when nothing can
    /// refuse the reload any more: the fleet link both share takes the new
    /// config's secret, and what routes gone (or now counted in another
    /// zone) counted is folded into their old zone's counters (carry.rs).
    /// Done in [`Proxy::new`], a reload refused afterwards (a port taken)
    /// left the running generation signing with a secret nobody accepted and
    /// its zones counting a route twice.
    pub fn take_over(&self, previous: &Proxy, config: &Config) {
        if let (Some(fleet), Some(old)) = (&self.fleet, &previous.fleet) {
            if Arc::ptr_eq(fleet, old) {
                fleet.rekey(config.fleet.as_ref().and_then(|f| f.secret.as_ref()));
            }
        }
        super::carry::fold_retired(previous, &self.routes, &self.zones, &self.zone_activity);
    }

    /// Starts the zones' background work (a disk zone's loader and
    /// manager) on the current runtime (after a reload, of the zones
    /// `previous` did not have).
    pub fn start_background(&self, previous: Option<&Proxy>) {
        let kept = |zone: &Arc<Zone>| {
            previous.is_some_and(|p| p.zones.iter().any(|old| Arc::ptr_eq(old, zone)))
        };
        let started: Vec<Arc<Zone>> = self.zones.iter().filter(|z| !kept(z)).cloned().collect();
        for zone in &started {
            zone.tier.start();
        }
        // Objects found at start were stored for hosts no request has named
        // yet: once the loaders are done, their routes know those hosts too
        // (a purge by path rebuilds keys from the hosts it knows).
        let routes = self.routes.clone();
        tokio::spawn(async move {
            let loading = |z: &Arc<Zone>| z.tier.load_state().is_loading();
            while started.iter().any(loading) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            for zone in &started {
                let found = zone.tier.hosts_found();
                if found.hosts.is_empty() && !found.overflowed {
                    continue;
                }
                for route in routes
                    .iter()
                    .filter(|r| r.all_zones().any(|z| Arc::ptr_eq(z, zone)))
                {
                    route.known_hosts().note_found(&found);
                }
            }
        });
    }

    /// Binds routes to upstreams and zones. At a reload, `previous` is the
    /// running generation: its metrics, fetches in flight, access log and
    /// supplied tiers carry over, and the counters of routes, zones and
    /// upstreams of the same name (carry.rs), zones of the same name and storage keep
    /// their contents (`notes` says what did not), routes of the same name
    /// keep the hosts they stored (for purges by path). It changes nothing
    /// the running generation uses: [`Proxy::take_over`] does, at the switch.
    pub fn new(
        config: &Config,
        previous: Option<&Proxy>,
        notes: &mut Vec<String>,
    ) -> Result<Arc<Self>, SetupError> {
        let supplied = previous.map(|p| p.zone_sources.supplied().clone());
        Proxy::build(config, previous, supplied.unwrap_or_default(), notes)
    }

    /// The first generation, with zones stored in the tiers `supplied`
    /// ([`ZoneTiers`]) where it names them.
    pub fn with_tiers(config: &Config, supplied: ZoneTiers) -> Result<Arc<Self>, SetupError> {
        Proxy::build(config, None, supplied, &mut Vec::new())
    }

    fn build(
        config: &Config,
        previous: Option<&Proxy>,
        supplied: ZoneTiers,
        notes: &mut Vec<String>,
    ) -> Result<Arc<Self>, SetupError> {
        let upstreams = build_upstreams(config, previous)?;
        let previous_zones = previous.map(|p| (&p.zones[..], &p.zone_sources));
        let (zones, zone_sources) = ZoneSources::build(config, previous_zones, supplied, notes)?;
        let metrics = previous.map_or_else(
            || {
                Arc::new(crate::telemetry::metrics::Metrics::with_max_connections(
                    config.server.max_connections,
                ))
            },
            |p| p.metrics.clone(),
        );
        metrics.inflight.set_limit(config.server.max_inflight_body);
        let fleet = build_fleet(config, previous)?;
        share_budget(&fleet, &upstreams);
        let limits = build_limits(config, previous);
        let parts = RouteParts {
            limits: &limits,
            config,
            previous,
            upstreams: &upstreams,
            zones: &zones,
            inflight: &metrics.inflight,
            fleet: &fleet,
        };
        let table: Vec<Entry> = config.routes.iter().map(|r| parts.entry(r)).collect();
        let (routes, answering) = split_table(&table);
        let zone_activity = super::carry::zone_activity(&zones, previous);
        let access_log = std::sync::OnceLock::new();
        if let Some(log) = previous.and_then(|p| p.access_log.get()) {
            let _ = access_log.set(log.clone());
        }
        Ok(Arc::new(Proxy {
            routes,
            answering,
            table,
            zone_activity,
            zones,
            zone_sources,
            flights: previous.map_or_else(|| Arc::new(Flights::new()), |p| p.flights.clone()),
            upstreams,
            metrics,
            // The access log is opened once, at start.
            note_served: previous.map_or(config.access_log.is_some(), |p| p.note_served),
            ready: std::sync::atomic::AtomicBool::new(previous.is_some()),
            admin: config.admin.clone(),
            access_log,
            fleet,
            limits,
        }))
    }
}

/// The fleet-wide origin budget (`fleet_max_inflight`): the fleet's leases
/// on Redis, handed to every upstream (one without the key never asks).
fn share_budget(fleet: &Option<Arc<crate::fleet::Fleet>>, upstreams: &[Arc<Upstream>]) {
    let Some(fleet) = fleet else {
        return;
    };
    let shared =
        Arc::new(fleet.origin_budget()) as Arc<dyn crate::net::shared_budget::SharedBudget>;
    for upstream in upstreams {
        upstream.set_shared_budget(shared.clone());
    }
}

/// The `[limits.NAME]` tables, each keeping its previous generation's
/// clients where one of the same name and settings ran.
fn build_limits(config: &Config, previous: Option<&Proxy>) -> Vec<Arc<crate::net::limit::Limit>> {
    let old = |name: &str| previous.and_then(|p| p.limits.iter().find(|o| o.cfg.name == name));
    config
        .limits
        .iter()
        .map(|l| crate::net::limit::Limit::new(l, old(&l.name)))
        .collect()
}

/// The table's proxied routes and its answering routes, each in order.
fn split_table(table: &[Entry]) -> (Vec<Arc<Route>>, Vec<Arc<AnsweringRoute>>) {
    let mut routes = Vec::new();
    let mut answering = Vec::new();
    for entry in table {
        match entry {
            Entry::Proxied(route) => routes.push(route.clone()),
            Entry::Answering(route) => answering.push(route.clone()),
        }
    }
    (routes, answering)
}

/// The upstreams of `config`, each keeping its previous generation's pool
/// and health where one of the same name ran.
fn build_upstreams(
    config: &Config,
    previous: Option<&Proxy>,
) -> Result<Vec<Arc<Upstream>>, SetupError> {
    let upstreams = config.upstreams.iter().map(|u| {
        let old = previous.and_then(|p| p.upstreams.iter().find(|o| o.name == u.name));
        Upstream::new(u, old.map(|o| &**o)).map(Arc::new)
    });
    Ok(upstreams.collect::<Result<Vec<_>, _>>()?)
}

/// Fleet mode's link, kept across a reload that changes only the secret,
/// and told where the disk zones keep the purge stream position.
fn build_fleet(
    config: &Config,
    previous: Option<&Proxy>,
) -> Result<Option<Arc<crate::fleet::Fleet>>, SetupError> {
    let fleet = match (&config.fleet, previous.and_then(|p| p.fleet.as_ref())) {
        (None, _) => None,
        // A reload that only rotates the secret keeps the link and the
        // purge stream position; the new secret is taken at the switch
        // (Proxy::take_over), once nothing can refuse the reload.
        (Some(cfg), Some(old)) if old.config().same_but_secret(cfg) => Some(old.clone()),
        (Some(cfg), _) => Some(crate::fleet::Fleet::new(cfg).map_err(SetupError::Fleet)?),
    };
    if let Some(fleet) = &fleet {
        fleet.keep_position_in(
            config
                .zones
                .iter()
                .filter_map(|z| z.path.as_ref())
                .map(|dir| dir.join(crate::fleet::POSITION_FILE))
                .collect(),
        );
    }
    Ok(fleet)
}

/// What every route of a generation is built from.
struct RouteParts<'a> {
    config: &'a Config,
    previous: Option<&'a Proxy>,
    upstreams: &'a [Arc<Upstream>],
    zones: &'a [Arc<Zone>],
    inflight: &'a Arc<crate::telemetry::inflight::Inflight>,
    fleet: &'a Option<Arc<crate::fleet::Fleet>>,
    limits: &'a [Arc<crate::net::limit::Limit>],
}

impl RouteParts<'_> {
    /// One entry of the route table: a proxied route, or one that answers
    /// itself (keeping its counters by name too).
    fn entry(&self, r: &RouteConfig) -> Entry {
        match r.kind {
            RouteKind::Proxy { upstream } => Entry::Proxied(self.route(r, upstream)),
            RouteKind::Return(_) | RouteKind::Files(_) => {
                Entry::Answering(Arc::new(AnsweringRoute {
                    cfg: r.clone(),
                    activity: super::carry::route_activity(self.previous, &r.name),
                }))
            }
        }
    }

    /// One proxied route, keeping the hosts and counters of the previous
    /// generation's route of the same name.
    fn route(&self, r: &RouteConfig, upstream: usize) -> Arc<Route> {
        let zones = self.zones;
        let old = self
            .previous
            .and_then(|p| p.routes.iter().find(|old| old.cfg.name == r.name));
        Arc::new(Route {
            cfg: r.clone(),
            upstream: self.upstreams[upstream].clone(),
            zone: r.storage.zone.map(|z| zones[z].clone()),
            zones: r
                .storage
                .zones
                .iter()
                .map(|&z| (zones[z].clone(), self.config.zones[z].weight))
                .collect(),
            front: r.storage.memory.map(|z| MemoryFront::new(zones[z].clone())),
            hosts: Mutex::new(old.map(|old| old.known_hosts().clone()).unwrap_or_default()),
            policy: RefreshPolicy {
                mode: r.refresh.mode,
                beta: r.refresh.per_beta,
                sus_stale: r.refresh.sus_stale,
            },
            hit_for_miss: HitForMiss::new(r.refresh.hit_for_miss),
            key_is_default: r.storage.key.is_default(),
            activity: super::carry::route_activity(self.previous, &r.name),
            inflight: self.inflight.clone(),
            fleet: self
                .fleet
                .clone()
                .map(|f| f as Arc<dyn crate::fleet::SharedTier>),
            hints: Default::default(),
            limits: crate::net::limit::RouteLimits::new(r, self.limits),
        })
    }
}

/// One worker thread's view of the proxy: the shared state plus its own
/// copies of the route regexes. A `Regex` shared by threads takes a mutex-guarded
/// scratch pool on every match from all but its first thread; a clone per
/// worker keeps route matching lock-free on the hit path.
pub(crate) struct Worker {
    /// The shared state.
    pub proxy: Arc<Proxy>,
    /// Each route's `match` and `path` regexes and its `listeners` (as the
    /// ids connections carry, net/listener.rs; empty: every listener), in
    /// route order.
    matchers: Vec<Matcher>,
    /// Some route has `hosts`: only then is the request's host looked up
    /// to route it.
    pub by_host: bool,
    /// This thread's WebSocket tunnels, closed when the worker stops.
    pub tunnels: Arc<crate::net::shutdown::Tunnels>,
}

impl Worker {
    /// Clones the route regexes for one thread.
    pub(crate) fn new(proxy: Arc<Proxy>, tunnels: Arc<crate::net::shutdown::Tunnels>) -> Self {
        let matchers = proxy.table.iter().map(|e| Matcher::of(e.cfg())).collect();
        let by_host = proxy
            .table
            .iter()
            .any(|e| !e.cfg().matching.hosts.is_empty());
        Worker {
            proxy,
            matchers,
            by_host,
            tunnels,
        }
    }

    /// The first route from the table's entry `from` on that takes
    /// requests on `listener`, whose `hosts` take `host` (the admitted Host
    /// value; empty without one) and whose `match` and `path` take
    /// `path_and_query`, with its place in the table (a file route hands a
    /// request on from the next place).
    pub(crate) fn route_for(
        &self,
        listener: ListenerId,
        host: &str,
        path_and_query: &str,
        from: usize,
    ) -> Option<(usize, &Entry)> {
        self.proxy
            .table
            .iter()
            .zip(&self.matchers)
            .enumerate()
            .skip(from)
            .find(|(_, (entry, m))| {
                (m.listeners.is_empty() || m.listeners.contains(&listener))
                    && crate::config::hosts::any_matches(&entry.cfg().matching.hosts, host)
                    && RouteMatch::new(m.target.as_ref(), m.path.as_ref()).is_match(path_and_query)
            })
            .map(|(at, (entry, _))| (at, entry))
    }
}

/// What a worker matches one route by.
struct Matcher {
    /// `match`, on path?query.
    target: Option<regex::Regex>,
    /// `path`, on the path alone.
    path: Option<regex::Regex>,
    /// `listeners` as ids; empty: every listener.
    listeners: Box<[ListenerId]>,
}

impl Matcher {
    fn of(cfg: &RouteConfig) -> Matcher {
        let matching = &cfg.matching;
        Matcher {
            target: matching.matcher.clone(),
            path: matching.path_matcher.clone(),
            listeners: matching
                .listeners
                .iter()
                .map(|&a| ListenerId::of(a))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
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
