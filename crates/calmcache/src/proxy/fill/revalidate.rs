//! The 304 merge (RFC 9111 §4.3.4): a 304 that validates the stored copy
//! freshens it. Its headers are merged into the copy's, the result is
//! evaluated again, and stored with the copy's body and encodings; or, when
//! the origin now forbids storing, the copy goes and the merged response is
//! relayed.
//!
//! Owns: reading the stored body back and the merge. Does not send (a copy
//! whose body cannot be read back is fetched whole by a new [`fill`]).

use std::sync::Arc;

use calmcache_core::page_body::StoredBody as Kept;
use calmcache_core::{CachedObject, NotStorable};
use http::{HeaderMap, Response};

use super::send::Times;
use super::store::{store, StoreCtx, Stored, StoredBody};
use super::{fill, finish, FillArgs, FillReply, NotStored};
use crate::http::body::ResponseBody;
use crate::http::conditional;
use crate::http::headers::detach_headers;
use crate::proxy::outcome::{FillOutcome, OwnFields};

/// Freshens `old` with the 304's `fresh` headers and stores it (or, when
/// the origin now forbids storing, drops it and relays the merged copy).
pub(super) async fn merge(
    mut ctx: StoreCtx,
    old: Arc<CachedObject>,
    fresh: &HeaderMap,
    times: Times,
    admission: crate::net::budget::Admission,
) -> FillReply {
    let Some(old_body) = read_back(&old).await else {
        // The stored body cannot be read back (disk fault, corrupt): fetch
        // the whole object instead; the request does not fail. The fleet's
        // lease is held until that fetch ends, as before the merge.
        let _lease = ctx.lease.take();
        let args = FillArgs {
            route: ctx.route,
            primary: ctx.primary,
            request: ctx.fetch,
            permit: ctx.permit,
            stale: None,
            // A rare fault's fallback waits for a slot as its fill could (a
            // background refresh still never queues).
            admission,
            stand_in: super::StandIn::Busy,
        };
        return Box::pin(fill(args)).await;
    };
    let merged = conditional::merge_not_modified(&old.headers(), fresh, &[]);
    let status = old.status.as_u16();
    match times.evaluate(&ctx.fetch, status, &merged, &ctx.route) {
        Ok(storable) => {
            // A Set-Cookie on the 304 (an ignored one) is this client's alone.
            ctx.own = OwnFields::of(fresh, &storable.strip_fields);
            let stored = Stored {
                status: old.status,
                headers: detach_headers(&merged, &storable.strip_fields),
                body: old_body,
                encodings: Some(old.encodings().to_vec()),
            };
            store(ctx, stored, storable).await
        }
        Err(why) => forbidden(ctx, &old, merged, old_body, why).await,
    }
}

/// The body of `old`: a large disk object's is still in its file, read to
/// store the freshened copy (`None` when that read fails).
async fn read_back(old: &CachedObject) -> Option<StoredBody> {
    match old.lazy_body() {
        None => Some(StoredBody::Kept(old.stored_body())),
        Some(lazy) => {
            let lazy = lazy.clone();
            tokio::task::spawn_blocking(move || lazy.read_all())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|body| StoredBody::Kept(Kept::Heap(body)))
        }
    }
}

/// The origin now forbids storing the copy it validated: drop it (and its
/// siblings under the URI) and relay the merged response.
async fn forbidden(
    ctx: StoreCtx,
    old: &CachedObject,
    merged: HeaderMap,
    body: StoredBody,
    why: NotStorable,
) -> FillReply {
    if matches!(
        why,
        NotStorable::NoStore
            | NotStorable::Private
            | NotStorable::NoCache
            | NotStorable::VaryStar
            | NotStorable::NoFreshness
    ) {
        ctx.route.remove(&ctx.primary.as_ref()).await;
    }
    finish(ctx.permit, FillOutcome::NotStored);
    let mut resp = Response::new(ResponseBody::full(body.into_bytes()));
    *resp.status_mut() = old.status;
    *resp.headers_mut() = merged;
    FillReply::Relay(resp, NotStored::Response(why))
}
