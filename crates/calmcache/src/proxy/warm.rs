//! Warm-up: the paper's "external re-computation". Each `warm` path of a route
//! is fetched at start and refreshed ahead of every expiry (SUS's delta before
//! it), whether or not anyone asks, so even the first visitor after a quiet
//! hour gets a hit.
//!
//! A path is warmed once per scheme the listeners serve (`http` for
//! `listen`; `https` for `tls_listen`, and for `listen` too on a route with
//! `trusted_proxies`, whose `X-Forwarded-Proto` may say https), each fetch
//! carrying the `X-Forwarded-Proto` a client request over that scheme
//! would carry, so TLS clients hit a copy the origin made for them; when
//! the route's key has no `$scheme`, both schemes share one key and one
//! fetch. An answer
//! with no freshness lifetime (`no-cache`, `max-age=0`) is fetched again
//! after 1 s, then 2, 4... up to [`STALE_BACKOFF_MAX`], logged once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use calmcache_core::{CacheKey, CachedObject};
use http::header::{HeaderName, HeaderValue, HOST, USER_AGENT};
use http::HeaderMap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::proxy::fill::{fill, FetchRequest, FillArgs, FillReply};
use crate::proxy::lookup::PrimaryKey;
use crate::proxy::state::{Proxy, Route};
use http::uri::PathAndQuery;

const MIN_INTERVAL: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait between fetches of a warm path whose answers arrive
/// stale (no freshness lifetime): they cannot be kept fresh, only retried.
pub(crate) const STALE_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The proxy's listeners a warm path is warmed for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Listeners {
    /// The first plain listener (`listen`): warm `http` keys.
    pub plain: Option<SocketAddr>,
    /// The first TLS listener (`tls_listen`): warm `https` keys.
    pub tls: Option<SocketAddr>,
}

/// Spawns one task per warm path and scheme; they end when `stopped` turns true.
pub(crate) fn start(proxy: &Arc<Proxy>, listeners: Listeners, stopped: watch::Receiver<bool>) {
    let Some(first) = listeners.plain.or(listeners.tls) else {
        return;
    };
    for route in proxy.routes.iter().filter(|r| r.zone.is_some()) {
        // Behind a TLS terminator among its trusted_proxies, a plain
        // listener serves https requests too (edge::prepare).
        let behind_tls =
            listeners.plain.is_some() && !route.cfg.requests.trusted_proxies.is_empty();
        let schemes: Vec<&'static str> = [
            listeners.plain.map(|_| "http"),
            (listeners.tls.is_some() || behind_tls).then_some("https"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let host = route
            .cfg
            .warm
            .host
            .clone()
            .unwrap_or_else(|| first.to_string());
        for path in &route.cfg.warm.paths {
            let warm = match Warm::for_schemes(route, &host, path, &schemes) {
                Ok(warm) => warm,
                Err(e) => {
                    tracing::error!(route = %route.cfg.name, path = %path, error = %e, "warm path is not a valid path; not warming it");
                    continue;
                }
            };
            for one in warm {
                let task = keep_warm(proxy.clone(), route.clone(), one, stopped.clone());
                tokio::spawn(task);
            }
        }
    }
}

/// One warm path under one key: what to fetch and where it is stored.
struct Warm {
    path: String,
    scheme: &'static str,
    request: FetchRequest,
    key: CacheKey,
}

impl Warm {
    /// The path's fetch for each of `schemes`, one per distinct key (a key
    /// template without `$scheme` stores both schemes under one key).
    fn for_schemes(
        route: &Route,
        host: &str,
        path: &str,
        schemes: &[&'static str],
    ) -> Result<Vec<Warm>, http::uri::InvalidUri> {
        let mut out: Vec<Warm> = Vec::new();
        for &scheme in schemes {
            let mut request = warm_request(host, path, scheme)?;
            // As a client's request would be sent: the route's header rules,
            // with calmcache itself (loopback, no listener) as the client.
            let uri = http::Uri::from(request.path_and_query.clone());
            let me = crate::net::conn::Peer::internal(scheme);
            crate::proxy::header_rules::to_upstream(
                route,
                &http::Method::GET,
                &uri,
                &mut request.headers,
                me,
            );
            request.has_authorization = request.headers.contains_key(http::header::AUTHORIZATION);
            // The key a client request for this path would have (key
            // template, host case, scheme).
            let key = PrimaryKey::of(
                route,
                scheme,
                &http::Method::GET,
                host,
                path,
                &request.selecting,
            )
            .key_ref()
            .to_owned_key();
            if out.iter().all(|w| w.key != key) {
                out.push(Warm {
                    path: path.to_owned(),
                    scheme,
                    request,
                    key,
                });
            }
        }
        Ok(out)
    }
}

/// Waits that double from 1 s up to a cap, and start over on success.
struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Backoff {
        Backoff {
            next: Duration::from_secs(1),
            max,
        }
    }

    /// True while no wait has been taken since the last reset.
    fn at_start(&self) -> bool {
        self.next == Duration::from_secs(1)
    }

    fn take(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    fn reset(&mut self) {
        self.next = Duration::from_secs(1);
    }
}

async fn keep_warm(
    proxy: Arc<Proxy>,
    route: Arc<Route>,
    warm: Warm,
    mut stopped: watch::Receiver<bool>,
) {
    let Warm {
        path,
        scheme,
        request,
        key,
    } = warm;
    let mut failed = Backoff::new(MAX_BACKOFF);
    let mut stale = Backoff::new(STALE_BACKOFF_MAX);
    loop {
        let wait = match proxy.flights.try_lead(&key) {
            // Someone else is fetching it right now; look again shortly.
            None => Duration::from_millis(100),
            Some(permit) => {
                route.activity.background_refreshes.inc();
                // A Vary marker is not a response: nothing to revalidate.
                let current = match route.zone_for(&key.as_ref()) {
                    Some(zone) => zone.tier.get(&key.as_ref()).await,
                    None => None,
                }
                .filter(|o| o.vary_index().is_none());
                let args = FillArgs::new(route.clone(), key.clone(), request.clone());
                let reply = fill(args.background().leading(permit).replacing(current)).await;
                if crate::proxy::fetch::note_skipped(&route, &reply) {
                    // The origin budget is full: not a failure, try soon.
                    Duration::from_secs(1)
                } else {
                    wait_after(&route, &path, scheme, reply, &mut failed, &mut stale)
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// How long until the next warm fetch after `reply`.
fn wait_after(
    route: &Route,
    path: &str,
    scheme: &str,
    reply: FillReply,
    failed: &mut Backoff,
    stale: &mut Backoff,
) -> Duration {
    // How long the answer stays fresh from now, if it was stored.
    let fresh_for = match &reply {
        FillReply::Stored { object, .. } => Some(fresh_for(object)),
        // A large object being stored as it streams.
        FillReply::Streaming(head, _) => {
            Some(Duration::try_from_secs_f64(head.ttl).unwrap_or_default())
        }
        _ => None,
    };
    match (fresh_for, reply) {
        (Some(fresh), _) if fresh.is_zero() => {
            failed.reset();
            if stale.at_start() {
                tracing::warn!(route = %route.cfg.name, path = %path, scheme,
                    "warm answer has no freshness lifetime (no-cache, max-age=0): \
                     fetched again with backoff up to {}s, not kept fresh",
                    STALE_BACKOFF_MAX.as_secs());
            }
            stale.take()
        }
        (Some(_), FillReply::Stored { object, .. }) => {
            failed.reset();
            stale.reset();
            warm_refresh_in(&object, Instant::now()).max(MIN_INTERVAL)
        }
        // Refresh a streamed object ahead of expiry like a
        // stored one (10% early).
        (Some(fresh), _) => {
            failed.reset();
            stale.reset();
            fresh.mul_f64(0.9).max(MIN_INTERVAL)
        }
        (None, _) => {
            let wait = failed.take();
            tracing::warn!(route = %route.cfg.name, path = %path, scheme, retry_in = ?wait, "warm fetch did not store");
            wait
        }
    }
}

/// Freshness left on `object` now; zero when it arrived stale.
fn fresh_for(object: &CachedObject) -> Duration {
    object
        .meta
        .expires_at()
        .saturating_duration_since(Instant::now())
}

static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// The request a client would send for `path` on `host` over `scheme`.
fn warm_request(
    host: &str,
    path: &str,
    scheme: &'static str,
) -> Result<FetchRequest, http::uri::InvalidUri> {
    let mut selecting = HeaderMap::new();
    if let Ok(host) = HeaderValue::from_str(host) {
        selecting.insert(HOST, host);
    }
    selecting.insert(USER_AGENT, HeaderValue::from_static("calmcache-warm"));
    // As a client request's X-Forwarded-Proto (headers::add_forwarded):
    // the origin may answer a TLS client differently (redirects, links).
    let mut headers = selecting.clone();
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(scheme));
    Ok(FetchRequest {
        path_and_query: PathAndQuery::try_from(path)?,
        selecting,
        headers,
        has_authorization: false,
        store: true,
        body: None,
    })
}

/// How long to wait before refreshing a warmed object: SUS's delta before expiry.
pub(crate) fn warm_refresh_in(object: &CachedObject, now: Instant) -> Duration {
    let meta = &object.meta;
    let lead = meta.sus_delta();
    meta.expires_at()
        .saturating_duration_since(now)
        .saturating_sub(lead)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_answers_back_off_from_one_second_to_the_cap() {
        let mut b = Backoff::new(STALE_BACKOFF_MAX);
        assert!(b.at_start());
        let waits: Vec<u64> = (0..8).map(|_| b.take().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert!(!b.at_start());
        b.reset();
        assert!(b.at_start());
        assert_eq!(b.take(), Duration::from_secs(1));
    }
}
