//! Every call a fill makes to the fleet's shared tier: asking it before the
//! origin (a copy another node stored, or this fetch's lease), keeping a
//! copy it hands over, and committing what the fill stored.
//!
//! Owns: when a fill may share (storing allowed, anonymous, a zone to keep
//! it in) and what it tells the fleet. The fleet's own protocol (leases,
//! Redis) is `crate::fleet`'s.

use std::sync::Arc;

use calmcache_core::{CacheKey, CachedObject, FetchPermit, Storable};
use http::{HeaderMap, HeaderName, StatusCode};

use super::store::{after_store, marker_for, meta_of, request_host, will_compress, StoreCtx};
use super::stream::empty_body;
use super::{alive_for, FetchRequest, FillReply, BOUND_SLACK};
use crate::fleet::{Before, Lease, PieceWriter};
use crate::http::vary;
use crate::proxy::outcome::{FillOutcome, OwnFields};
use crate::proxy::state::Route;

/// Asks the fleet before the origin (`None` outside fleet mode, or when
/// this fill may not share: storing forbidden, credentials, no zone, a
/// request keyed by its body).
pub(super) async fn before(
    route: &Route,
    primary: &CacheKey,
    fetch: &FetchRequest,
    permit: &Option<FetchPermit<FillOutcome>>,
    stale: Option<&CachedObject>,
) -> Option<Before> {
    let fleet = route
        .fleet
        .as_ref()
        .filter(|_| fetch.store && !fetch.has_authorization)
        // Body-keyed entries stay in this node's zones (body_key.rs).
        .filter(|_| fetch.body.is_none())
        .filter(|_| route.zone_for(&primary.as_ref()).is_some())?;
    let wait = fleet_wait(route);
    // This node's followers wait as long as their leader waits for the
    // fleet: they would otherwise give up at their lock_timeout while the
    // lease they (through it) follow is still live, and fetch one each.
    alive_for(permit, wait + BOUND_SLACK);
    Some(
        fleet
            .before_fetch(primary, stale, wait, &fetch.selecting)
            .await,
    )
}

/// The longest a fill waits for another node's fetch (it follows the
/// node's lease while that is renewed, see `crate::fleet`): what a local
/// follower waits for a leader still waiting for its response head (the
/// upstream's queue wait and read_timeout, send.rs), or the route's
/// `lock_timeout` when longer. The holder's fetch is bounded by the same
/// timeouts (its lease goes when its fetch fails), so a live lease past
/// this is a fetch no longer worth waiting for.
fn fleet_wait(route: &Route) -> std::time::Duration {
    let head = route.upstream.queue_wait() + route.upstream.read_timeout;
    route.lock_timeout().max(head)
}

/// Hands what the fill stored to the fleet under its `lease`, off the
/// request path (a variant under the URI's variants, varying on `names`).
pub(super) fn commit(
    route: &Route,
    lease: Option<Lease>,
    primary: &CacheKey,
    object: &Arc<CachedObject>,
    names: Option<&[HeaderName]>,
) {
    if let (Some(lease), Some(fleet)) = (lease, &route.fleet) {
        fleet.commit(lease, primary, object.clone(), names);
    }
}

/// The writer of this fill's body to the fleet as it arrives, when it
/// holds the lease and the object goes to Redis as it arrives: a plain
/// response (not Vary'd, not compressed), stored under the URI's key. The
/// lease moves into it (`None`: it stays in `ctx`, committed at the end).
pub(super) fn writer(
    ctx: &mut StoreCtx,
    status: StatusCode,
    headers: &HeaderMap,
    storable: &Storable,
    names: &[HeaderName],
) -> Option<PieceWriter> {
    if !names.is_empty() || will_compress(&ctx.route, headers) {
        return None;
    }
    let head = empty_body(meta_of(storable, ctx.started), status, headers);
    PieceWriter::start(&mut ctx.lease, &ctx.primary, &head)
}

/// The largest body the fleet's shared tier takes (0 outside fleet mode):
/// a streaming fill lets its lease go past it.
pub(super) fn max_object_size(route: &Route) -> u64 {
    route.fleet.as_ref().map_or(0, |f| f.max_object_size())
}

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
        own: OwnFields::default(),
    }
}
