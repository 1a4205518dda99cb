//! Warm-up: the paper's "external re-computation". Each `warm` path of a route
//! is fetched at start and refreshed ahead of every expiry (SUS's delta before
//! it), whether or not anyone asks, so even the first visitor after a quiet
//! hour gets a hit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderValue, HOST, USER_AGENT};
use http::HeaderMap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fill::{fill, warm_refresh_in, FetchRequest, FillReply};
use crate::lookup::PrimaryKey;
use crate::state::{Proxy, Route};
use http::uri::PathAndQuery;

const MIN_INTERVAL: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Spawns one task per warm path; they end when `stopped` turns true.
pub fn start(proxy: &Arc<Proxy>, listen: SocketAddr, stopped: watch::Receiver<bool>) {
    for route in proxy.routes.iter().filter(|r| r.zone.is_some()) {
        let host = route
            .cfg
            .warm_host
            .clone()
            .unwrap_or_else(|| listen.to_string());
        for path in &route.cfg.warm {
            let task = keep_warm(
                proxy.clone(),
                route.clone(),
                host.clone(),
                path.clone(),
                stopped.clone(),
            );
            tokio::spawn(task);
        }
    }
}

async fn keep_warm(
    proxy: Arc<Proxy>,
    route: Arc<Route>,
    host: String,
    path: String,
    mut stopped: watch::Receiver<bool>,
) {
    let request = match warm_request(&host, &path) {
        Ok(request) => request,
        Err(e) => {
            tracing::error!(route = %route.cfg.name, path = %path, error = %e, "warm path is not a valid path; not warming it");
            return;
        }
    };
    // The key a client request for this path would have (key template, host case).
    let key = PrimaryKey::of(
        &route,
        "http",
        &http::Method::GET,
        &host,
        &path,
        &request.selecting,
    )
    .key_ref()
    .to_owned_key();
    let mut backoff = Duration::from_secs(1);
    loop {
        let wait = match proxy.flights.try_lead(&key) {
            // Someone else is fetching it right now; look again shortly.
            None => Duration::from_millis(100),
            Some(permit) => {
                route.activity.background_refreshes.inc();
                // A Vary marker is not a response: nothing to revalidate.
                let current = match route.zone_for(&key.as_ref()) {
                    Some(zone) => zone.get(&key.as_ref()).await,
                    None => None,
                }
                .filter(|o| o.vary_index.is_none());
                match fill(
                    route.clone(),
                    key.clone(),
                    request.clone(),
                    Some(permit),
                    current,
                )
                .await
                {
                    FillReply::Stored(object, _) => {
                        backoff = Duration::from_secs(1);
                        warm_refresh_in(&object, Instant::now()).max(MIN_INTERVAL)
                    }
                    // A large object being stored as it streams: refresh it
                    // ahead of expiry like a stored one (10% early).
                    FillReply::Streaming(head) => {
                        backoff = Duration::from_secs(1);
                        Duration::try_from_secs_f64(head.ttl * 0.9)
                            .unwrap_or(MIN_INTERVAL)
                            .max(MIN_INTERVAL)
                    }
                    _ => {
                        tracing::warn!(route = %route.cfg.name, path = %path, retry_in = ?backoff, "warm fetch did not store");
                        let wait = backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        wait
                    }
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => return,
        }
    }
}

fn warm_request(host: &str, path: &str) -> Result<FetchRequest, http::uri::InvalidUri> {
    let mut headers = HeaderMap::new();
    if let Ok(host) = HeaderValue::from_str(host) {
        headers.insert(HOST, host);
    }
    headers.insert(USER_AGENT, HeaderValue::from_static("calmcache-warm"));
    Ok(FetchRequest {
        path_and_query: PathAndQuery::try_from(path)?,
        selecting: headers.clone(),
        headers,
        has_authorization: false,
        store: true,
    })
}
