//! A fill's calls to the fleet's shared tier.

use std::sync::Arc;

use calmcache_core::{CacheKey, CachedObject, FetchPermit};
use http::HeaderName;

use super::*;
use crate::http::vary;
use crate::proxy::outcome::FillOutcome;
use crate::proxy::state::Route;

/// A fresh copy another node of the fleet stored: kept in the local zone
/// (a failed store still serves it; a variant under this node's marker for
/// the `names` it varies on) and handed to the fetch's followers, with no
/// origin request.
pub(super) async fn take_shared(
    route: &Route,
    primary: &CacheKey,
    fetch: &FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    object: Arc<CachedObject>,
    names: Option<Vec<HeaderName>>,
) -> FillReply {
    let origin_status = object.status.as_u16();
    let mut key = primary.clone();
    if let Some(zone) = route.zone_for(&primary.as_ref()) {
        if let (Some(names), Some(secondary)) = (names, object.variant()) {
            let id = marker_for(zone, primary, names, &object.meta).await;
            key = vary::variant_key(&primary.as_ref(), id, secondary);
        }
        if let Err(e) = zone.tier.insert(key.clone(), object.clone()).await {
            tracing::debug!(key = %key, zone = %zone.name, error = %e, "shared copy not stored locally");
        }
    }
    let host = request_host(fetch);
    after_store(route, primary, &key, &object, permit, origin_status, host).await;
    FillReply::Stored {
        object,
        origin_status,
        shared: true,
    }
}
