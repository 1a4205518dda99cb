//! Purges: what to purge (a URL on every host or on one, a rendered key, a
//! path prefix, a cache tag, everything), hard (removed) or soft (expired
//! now: served stale while one refresh runs), on every zone, memory and
//! disk alike. Asked by `POST /purge` on the admin listener or the `PURGE`
//! method on the proxy listener.
//!
//! A URL or key purge touches only its keys: a path on every host is
//! tried on each host its routes remember, unless a route met more hosts
//! than it remembers (junk `Host` values), when the route's zones are
//! scanned for the path on any host and the answer says `"scanned": true`.
//! A key is what `Cache-Status: key=` shows: a rendered template, or a
//! default key `scheme://host/path?query`. Prefix, tag and `all` purges
//! scan each zone through its tier ([`Tier::purge_matching`]): a memory
//! zone one shard at a time under that shard's lock, a disk zone by
//! reading the headers of its files; on a blocking thread, so traffic is
//! never paused for the whole scan.
//!
//! [`Tier::purge_matching`]: calmcache_core::Tier::purge_matching

use std::sync::Arc;

use calmcache_core::{CacheKey, KeyRef, PurgeMode, Tags, Zone};
use http::Method;
use serde::Deserialize;

use crate::fleet::follow::Local;
use crate::fleet::{SharedRule, SharedTier};
use crate::http::error::ProxyError;
use crate::proxy::lookup::PrimaryKey;
use crate::proxy::state::Proxy;

/// What a purge selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Selector {
    /// One path and query, on `host` or (without) on every host seen.
    Url {
        /// Lower-cased host, from an absolute URL.
        host: Option<String>,
        /// Path and query.
        path_and_query: String,
    },
    /// One key as a `key` template rendered it (`Cache-Status: key=`).
    Key(String),
    /// Every key whose path starts with `path` (on `host` only, if given).
    Prefix {
        /// Lower-cased host, from an absolute URL.
        host: Option<String>,
        /// The path prefix (or the start of a rendered key).
        path: String,
    },
    /// Every object tagged `tag` (`Cache-Tag` / `Surrogate-Key`).
    Tag(String),
    /// Everything.
    All,
}

/// One purge order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Purge {
    /// What.
    pub selector: Selector,
    /// Remove, or mark stale (`"soft": true`).
    pub mode: PurgeMode,
}

/// Why a `POST /purge` body was refused: the `{"error": ...}` of its 400.
/// Each message carries its cause (not also given as `source()`).
#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    /// Not JSON, or a field that is not a selector (`{"purge": "/"}`), or
    /// a value of the wrong type.
    #[error("bad JSON: {0}")]
    Json(serde_json::Error),
    /// `"key": ""`.
    #[error("\"key\" is empty")]
    EmptyKey,
    /// A `"tag"` that is empty or holds a comma or a space.
    #[error("{0:?} is not one tag")]
    NotOneTag(String),
    /// `"all": false` (only `true` selects everything).
    #[error("\"all\" must be true when given")]
    AllFalse,
    /// No selector, or more than one.
    #[error("give exactly one of \"url\", \"key\", \"prefix\", \"tag\", \"all\": true")]
    NotOneSelector,
    /// A `"url"` or `"prefix"` that is neither a path nor an http(s) URL.
    #[error("{0:?} is neither a path (/...) nor an http(s) URL")]
    NotAUrl(String),
    /// An absolute URL without a host (`http:///x`).
    #[error("{0:?} has no host")]
    NoHost(String),
    /// A host or path the edge refuses in a request, so nothing is stored
    /// under it.
    #[error("{text:?}: {}", refused.cause)]
    BadUrl {
        /// The URL or path as given.
        text: String,
        /// Why the edge refuses it.
        refused: ProxyError,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    url: Option<String>,
    key: Option<String>,
    prefix: Option<String>,
    tag: Option<String>,
    all: Option<bool>,
    #[serde(default)]
    soft: bool,
}

impl Purge {
    /// The `POST /purge` body that orders this purge (what the fleet's
    /// purge stream carries to the other nodes).
    pub(crate) fn to_json(&self) -> String {
        let url = |host: &Option<String>, path: &str| match host {
            Some(host) => format!("http://{host}{path}"),
            None => path.to_owned(),
        };
        let mut body = match &self.selector {
            Selector::Url {
                host,
                path_and_query,
            } => serde_json::json!({ "url": url(host, path_and_query) }),
            Selector::Key(key) => serde_json::json!({ "key": key }),
            Selector::Prefix { host, path } => serde_json::json!({ "prefix": url(host, path) }),
            Selector::Tag(tag) => serde_json::json!({ "tag": tag }),
            Selector::All => serde_json::json!({ "all": true }),
        };
        if self.mode == PurgeMode::Soft {
            body["soft"] = true.into();
        }
        body.to_string()
    }

    /// Parses a `POST /purge` body: exactly one of `url`, `key`, `prefix`,
    /// `tag`, `all: true`, and optionally `soft`.
    pub(crate) fn from_json(bytes: &[u8]) -> Result<Purge, PurgeError> {
        let body: Body = serde_json::from_slice(bytes).map_err(PurgeError::Json)?;
        let mut chosen = Vec::new();
        if let Some(url) = body.url {
            let (host, path_and_query) = split_url(&url)?;
            chosen.push(Selector::Url {
                host,
                path_and_query,
            });
        }
        if let Some(key) = body.key {
            if key.is_empty() {
                return Err(PurgeError::EmptyKey);
            }
            chosen.push(Selector::Key(key));
        }
        if let Some(prefix) = body.prefix {
            let (host, path) = split_url(&prefix)?;
            chosen.push(Selector::Prefix { host, path });
        }
        if let Some(tag) = body.tag {
            let tag = tag.trim();
            if tag.is_empty() || tag.contains([',', ' ']) {
                return Err(PurgeError::NotOneTag(tag.to_owned()));
            }
            chosen.push(Selector::Tag(tag.to_owned()));
        }
        match body.all {
            Some(true) => chosen.push(Selector::All),
            Some(false) => return Err(PurgeError::AllFalse),
            None => {}
        }
        if chosen.len() != 1 {
            return Err(PurgeError::NotOneSelector);
        }
        Ok(Purge {
            selector: chosen.remove(0),
            mode: mode_of(body.soft),
        })
    }
}

/// The mode a request asks for with `"soft": true` or `Calmcache-Purge: soft`.
fn mode_of(soft: bool) -> PurgeMode {
    if soft {
        PurgeMode::Soft
    } else {
        PurgeMode::Hard
    }
}

/// `/path?q` -> (None, "/path?q"); `http://Host:8080/p` -> (Some("host:8080"), "/p").
/// Host and path are normalised as the edge normalises requests (edge.rs),
/// so `/%61pi/./x` purges what `/api/x` stored.
fn split_url(text: &str) -> Result<(Option<String>, String), PurgeError> {
    if text.starts_with('/') {
        return Ok((None, normalised_target(text)?));
    }
    let (scheme, rest) = text
        .strip_prefix("http://")
        .map(|rest| ("http", rest))
        .or_else(|| text.strip_prefix("https://").map(|rest| ("https", rest)))
        .ok_or_else(|| PurgeError::NotAUrl(text.to_owned()))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if host.is_empty() {
        return Err(PurgeError::NoHost(text.to_owned()));
    }
    let host = crate::proxy::edge::normalise_host(host, scheme).map_err(|e| bad_url(text, e))?;
    let path = if path.is_empty() { "/" } else { path };
    Ok((Some(host.into_owned()), normalised_target(path)?))
}

fn normalised_target(text: &str) -> Result<String, PurgeError> {
    crate::proxy::edge::normalise_target(text).map_err(|e| bad_url(text, e))
}

fn bad_url(text: &str, refused: ProxyError) -> PurgeError {
    PurgeError::BadUrl {
        text: text.to_owned(),
        refused,
    }
}

/// What a purge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Objects removed or marked stale (a Vary'd URL counts its marker).
    pub purged: u64,
    /// A path purge scanned whole zones: a route met more hosts than it
    /// remembers ([`KNOWN_HOSTS_MAX`](crate::proxy::state::KNOWN_HOSTS_MAX)).
    pub scanned: bool,
    /// Fleet mode: purges of this node still waiting for Redis (it was out
    /// of reach); the other nodes get them once it is back.
    pub fleet_pending: usize,
}

/// Runs `purge` on every zone.
pub(crate) async fn run(proxy: &Arc<Proxy>, purge: Purge) -> Outcome {
    run_with(proxy, purge, None).await
}

/// Runs `purge` here and, in fleet mode, on the shared tier and every other
/// node: the keys it names are purged in Redis, a purge that names none
/// (prefix, tag, everything, a path on hosts not all remembered) makes
/// the objects in Redis it takes (every one, but for a prefix) stored
/// before it unusable, and the purge goes on the stream the other nodes
/// apply.
pub(crate) async fn run_everywhere(proxy: &Arc<Proxy>, purge: Purge) -> Outcome {
    let Some(fleet) = proxy.fleet.clone().map(|f| f as Arc<dyn SharedTier>) else {
        return run(proxy, purge).await;
    };
    let json = purge.to_json();
    let rule = shared_rule(proxy, &purge.selector);
    let mut outcome = run_with(proxy, purge, Some(&fleet)).await;
    let epoch = match rule {
        SharedRule::Keys => None,
        rule => fleet.purge_before_now(rule).await,
    };
    outcome.fleet_pending = fleet.publish_purge(json, epoch).await;
    outcome
}

/// What `selector` is for the shared tier's purge floors: keys Redis
/// purges one by one, a prefix rule, or every key.
fn shared_rule(proxy: &Proxy, selector: &Selector) -> SharedRule {
    match selector {
        Selector::Key(_) | Selector::Url { host: Some(_), .. } => SharedRule::Keys,
        // A path on every host: Redis holds it under hosts this node may
        // not know (a node remembers the hosts it stored), so its copies on
        // any host, and whatever else starts with it, are set aside. A
        // rendered key does not start with the path: every key then.
        Selector::Url {
            host: None,
            path_and_query,
        } if proxy.routes.iter().all(|r| r.key_is_default) => SharedRule::Prefix {
            host: None,
            path: path_and_query.clone(),
        },
        Selector::Url { host: None, .. } => SharedRule::Everything,
        Selector::Prefix { host, path } => SharedRule::Prefix {
            host: host.clone(),
            path: path.clone(),
        },
        Selector::Tag(_) | Selector::All => SharedRule::Everything,
    }
}

async fn run_with(
    proxy: &Arc<Proxy>,
    purge: Purge,
    fleet: Option<&Arc<dyn SharedTier>>,
) -> Outcome {
    let mode = purge.mode;
    let outcome = match purge.selector {
        Selector::Url {
            host,
            path_and_query,
        } => purge_url(proxy, host.as_deref(), &path_and_query, mode, fleet).await,
        Selector::Key(key) => Outcome {
            purged: purge_key_text(proxy, &key, mode, fleet).await,
            scanned: false,
            fleet_pending: 0,
        },
        selector => {
            if selector == Selector::All && mode == PurgeMode::Hard {
                // Everything goes: the hosts remembered start over (before
                // the purge, so a store racing it is remembered again).
                for route in &proxy.routes {
                    route.known_hosts().reset();
                }
            }
            let zones: Vec<Arc<Zone>> = proxy.zones.to_vec();
            Outcome {
                purged: scan_zones(zones, selector, mode).await,
                scanned: false,
                fleet_pending: 0,
            }
        }
    };
    proxy.metrics.purge_requests.inc();
    proxy.metrics.purged_objects.add(outcome.purged);
    tracing::info!(
        purged = outcome.purged,
        scanned = outcome.scanned,
        soft = mode == PurgeMode::Soft,
        "purge"
    );
    outcome
}

/// Purges what `selector` matches in each of `zones`, on a blocking thread
/// (a scan may hold it a while; a tier that must wait, e.g. on a network,
/// is driven there too).
async fn scan_zones(zones: Vec<Arc<Zone>>, selector: Selector, mode: PurgeMode) -> u64 {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let scan = |zone: &Arc<Zone>| runtime.block_on(scan(zone, &selector, mode));
        zones.iter().map(scan).sum()
    })
    .await
    .unwrap_or(0)
}

/// A `key` purge: the text as a `key` template rendered it, or as
/// `Cache-Status` shows a default key (`scheme://host/path?query`), which
/// is stored as its three parts.
async fn purge_key_text(
    proxy: &Arc<Proxy>,
    text: &str,
    mode: PurgeMode,
    fleet: Option<&Arc<dyn SharedTier>>,
) -> u64 {
    let mut keys = vec![KeyRef::new("", "", text).to_owned_key()];
    if let Some(parts) = default_key_parts(text) {
        keys.push(parts.to_owned_key());
    }
    // A body-keyed entry, as shown: `<key> <METHOD> sha256:<digest>`.
    if let Some((base, method, digest)) = body_key_parts(text) {
        keys.push(KeyRef::new("", "", base).with_body(method, digest));
        if let Some(parts) = default_key_parts(base) {
            keys.push(parts.with_body(method, digest));
        }
    }
    let zones: Vec<&Arc<Zone>> = proxy.zones.iter().collect();
    let mut purged = 0;
    let mut variants = Vec::new();
    for key in &keys {
        purged += purge_primary(&zones, &key.as_ref(), mode, &mut variants, fleet).await;
    }
    purged + purge_variants(variants, mode).await
}

/// `http://host/p?q` -> the parts a default key is stored as; `None` for
/// text no default key renders as.
/// The key, method and digest of a body-keyed entry's key as
/// `Cache-Status` shows it (`http://h/graphql POST sha256:<64 hex>`).
fn body_key_parts(text: &str) -> Option<(&str, &str, &str)> {
    let (front, digest) = text.rsplit_once(" sha256:")?;
    let (base, method) = front.rsplit_once(' ')?;
    let hex = digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let token = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    (hex && token).then_some((base, method, digest))
}

fn default_key_parts(text: &str) -> Option<KeyRef<'_>> {
    let (scheme, rest) = text.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let at = rest.find('/')?;
    let (host, path_and_query) = rest.split_at(at);
    (!host.is_empty()).then(|| KeyRef::new(scheme, host, path_and_query))
}

/// Header of a `PURGE` request asking for a soft purge: `Calmcache-Purge: soft`.
pub(crate) const SOFT_HEADER: &str = "calmcache-purge";

/// Answers the `PURGE` method on the proxy listener: purges the request's
/// URL on its host, for clients in `admin.purge_allow` only, and with
/// `admin.purge_token` only with `Authorization: Bearer <admin.token>`.
pub(crate) async fn purge_method(
    proxy: &Arc<Proxy>,
    req: &http::Request<hyper::body::Incoming>,
    client: std::net::SocketAddr,
) -> http::Response<crate::http::body::ResponseBody> {
    let admin = proxy.admin.as_ref();
    let allowed = admin.is_some_and(|a| a.purge_allow.iter().any(|n| n.contains(client.ip())));
    if !allowed {
        let why = format!(
            "PURGE is not allowed from {} (admin.purge_allow)",
            client.ip()
        );
        return crate::http::reply::json_error(http::StatusCode::FORBIDDEN, &why);
    }
    if let Some(admin) = admin.filter(|a| a.purge_token) {
        // The config refuses purge_token without a token; none configured
        // here would refuse every PURGE, never admit one.
        let token = admin.token.as_deref();
        if !token.is_some_and(|t| crate::http::reply::bearer_matches(req.headers(), t)) {
            return crate::http::reply::unauthorized(token.is_some());
        }
    }
    let host = crate::http::headers::host_of(req).to_ascii_lowercase();
    let pq = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let soft = req
        .headers()
        .get(SOFT_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"soft"));
    let order = Purge {
        selector: Selector::Url {
            host: Some(host),
            path_and_query: pq.to_owned(),
        },
        mode: mode_of(soft),
    };
    purged_response(run_everywhere(proxy, order).await)
}

/// `{"purged": N}`, with `"scanned": true` when a path purge scanned zones.
pub(crate) fn purged_response(outcome: Outcome) -> http::Response<crate::http::body::ResponseBody> {
    let mut json = serde_json::json!({ "purged": outcome.purged });
    if outcome.scanned {
        // A path purge that could not trust the hosts remembered.
        json["scanned"] = true.into();
    }
    if outcome.fleet_pending > 0 {
        // Applied here; the fleet gets it when Redis is back.
        json["fleet_pending"] = outcome.fleet_pending.into();
    }
    let json = json.to_string() + "\n";
    crate::http::reply::with_type(
        http::Response::new(crate::http::body::ResponseBody::full(json)),
        "application/json",
    )
}

/// A path on one host, or on every host its routes have stored objects
/// for: the hosts remembered, or a scan of the zones of a route that met
/// more hosts than it remembers.
async fn purge_url(
    proxy: &Arc<Proxy>,
    host: Option<&str>,
    pq: &str,
    mode: PurgeMode,
    fleet: Option<&Arc<dyn SharedTier>>,
) -> Outcome {
    let mut purged = 0;
    let mut variants = Vec::new();
    let mut to_scan: Vec<Arc<Zone>> = Vec::new();
    for route in proxy.routes.iter().filter(|r| r.cfg.matches(pq)) {
        let zones: Vec<&Arc<Zone>> = route.all_zones().collect();
        let hosts: Vec<String> = match host {
            Some(h) => vec![h.to_owned()],
            None => {
                let known = route.known_hosts();
                // A scan finds default keys (scheme, host, path) on any
                // host; a rendered key can only be rebuilt from a host.
                if known.overflowed() && route.key_is_default {
                    for zone in zones {
                        if !to_scan.iter().any(|z| Arc::ptr_eq(z, zone)) {
                            to_scan.push(zone.clone());
                        }
                    }
                    continue;
                }
                known.hosts().map(str::to_owned).collect()
            }
        };
        // Stored over plain HTTP or over TLS: both keys go (one, when the
        // key template has no `$scheme`).
        let headers = http::HeaderMap::new();
        for host in &hosts {
            let key_for = |scheme| {
                PrimaryKey::of(route, scheme, &Method::GET, host, pq, &headers)
                    .key_ref()
                    .to_owned_key()
            };
            let (http, https) = (key_for("http"), key_for("https"));
            purged += purge_primary(&zones, &http.as_ref(), mode, &mut variants, fleet).await;
            if https != http {
                purged += purge_primary(&zones, &https.as_ref(), mode, &mut variants, fleet).await;
            }
        }
    }
    purged += purge_variants(variants, mode).await;
    let scanned = !to_scan.is_empty();
    if scanned {
        let selector = Selector::Url {
            host: None,
            path_and_query: pq.to_owned(),
        };
        purged += scan_zones(to_scan, selector, mode).await;
    }
    Outcome {
        purged,
        scanned,
        fleet_pending: 0,
    }
}

/// Purges the primary `key` in each of `zones`; a soft purge of a Vary'd
/// URL notes its marker in `variants`, whose variants are marked after
/// (a hard purge removes the marker: its variants are unreachable). In a
/// zone that may hold body-keyed entries of the URI (body_key.rs), under
/// the URI's variant keys with no marker, the key is noted for either mode.
async fn purge_primary(
    zones: &[&Arc<Zone>],
    key: &KeyRef<'_>,
    mode: PurgeMode,
    variants: &mut Vec<(CacheKey, Arc<Zone>)>,
    fleet: Option<&Arc<dyn SharedTier>>,
) -> u64 {
    if let Some(fleet) = fleet {
        fleet.purge_key(&key.to_owned_key(), mode).await;
    }
    let mut purged = 0;
    for zone in zones {
        if may_hold_body_keys(zone, key) || (mode == PurgeMode::Soft && is_marker(zone, key).await)
        {
            variants.push((key.to_owned_key(), (*zone).clone()));
        }
        if zone.tier.purge_key(key, mode).await {
            purged += 1;
        }
    }
    purged
}

/// Purges (`mode`) the variant keys of the URIs in `variants`: Vary
/// variants and body-keyed entries alike.
async fn purge_variants(variants: Vec<(CacheKey, Arc<Zone>)>, mode: PurgeMode) -> u64 {
    let mut purged = 0;
    for (key, zone) in variants {
        let k = key.as_ref();
        let selector = Selector::Prefix {
            host: Some(k.host.to_owned()),
            path: calmcache_core::key::variants_prefix(k.path_and_query),
        };
        purged += scan_zones(vec![zone], selector, mode).await;
    }
    purged
}

/// True when `zone` may hold body-keyed entries of the URI keyed `uri`: a
/// fill of one reached it (fill/mod.rs notes the URI before storing), or
/// its tier took some back at start (a disk zone's loader, from an earlier
/// run). Only then is the zone scanned for the URL's body variants: a purge
/// of another URL stays a lookup of its keys, whatever clients stored.
fn may_hold_body_keys(zone: &Zone, uri: &KeyRef<'_>) -> bool {
    zone.body_uris.may_have(uri) || zone.tier.body_uri_found(uri)
}

async fn is_marker(zone: &Zone, key: &KeyRef<'_>) -> bool {
    zone.tier
        .get(key)
        .await
        .is_some_and(|o| o.vary_index().is_some())
}

/// Purges what `selector` (prefix, tag or all) matches in `zone`. May
/// block: see [`scan_zones`].
async fn scan(zone: &Zone, selector: &Selector, mode: PurgeMode) -> u64 {
    if *selector == Selector::All {
        return zone.tier.purge_all(mode).await;
    }
    let filter = |key: &CacheKey, tags: Tags<'_>| matches(selector, key, || tags.iter());
    zone.tier.purge_matching(mode, &filter).await
}

/// True when `selector` takes the object under `key`; its tags are looked
/// at by a tag purge only (a memory scan runs this under a shard lock).
fn matches<'a, T: Iterator<Item = &'a str>>(
    selector: &Selector,
    key: &CacheKey,
    tags: impl FnOnce() -> T,
) -> bool {
    let k = key.as_ref();
    match selector {
        Selector::Prefix { host, path } => {
            host.as_deref().is_none_or(|h| h == k.host)
                && k.path_and_query.starts_with(path.as_str())
        }
        Selector::Tag(tag) => tags().any(|t| t == tag),
        Selector::All => true,
        // A path on any host (a scan when the hosts are not all known): the
        // response, or a variant of it; default keys only.
        Selector::Url {
            host: None,
            path_and_query,
        } => {
            !k.scheme.is_empty()
                && calmcache_core::key::is_uri_or_variant(k.path_and_query, path_and_query)
        }
        Selector::Url { .. } | Selector::Key(_) => false,
    }
}

/// Applies the purges other nodes of the fleet send, to this generation's
/// local tiers, until `stop` says true: the fleet's follow loop
/// ([`crate::fleet::follow`]) with this proxy's zones as its [`Local`].
pub(crate) async fn follow_fleet(proxy: Arc<Proxy>, stop: tokio::sync::watch::Receiver<bool>) {
    let Some(fleet) = proxy.fleet.clone() else {
        return;
    };
    crate::fleet::follow::follow(fleet, Here(proxy), stop).await;
}

/// This generation's zones, as the fleet's purge follower sees them.
struct Here(Arc<Proxy>);

impl Local for Here {
    fn loading(&self) -> bool {
        self.0
            .zones
            .iter()
            .any(|z| z.tier.load_state().is_loading())
    }

    fn held(&self) -> bool {
        self.0.zones.iter().any(|z| z.tier.load_state().found() > 0)
    }

    async fn apply(&self, json: &str) -> Result<SharedRule, String> {
        let purge = Purge::from_json(json.as_bytes()).map_err(|e| e.to_string())?;
        let rule = shared_rule(&self.0, &purge.selector);
        run(&self.0, purge).await;
        Ok(rule)
    }

    async fn distrust_all(&self) {
        let all = Purge {
            selector: Selector::All,
            mode: PurgeMode::Soft,
        };
        run(&self.0, all).await;
    }
}

#[cfg(test)]
#[path = "purge_tests.rs"]
mod tests;
