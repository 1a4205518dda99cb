//! A body read whole within a limit, then stored: the path of a small
//! response of declared length (larger or open-ended ones stream, see
//! stream.rs).
//!
//! Owns: reading into one buffer (or pages) and what happens when the body
//! outgrows the limit or fails. Storing itself is store.rs's.

use std::sync::Arc;

use crate::net::origin_body::OriginBody;
use bytes::{Bytes, BytesMut};
use calmcache_core::page_body::StoredBody as Kept;
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::warn_limited;
use calmcache_core::{CachedObject, Storable};
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Response};
use http_body_util::BodyExt;

use super::store::{store, StoreCtx, Stored, StoredBody};
use super::{fail, finish, FillReply, NotStored};
use crate::http::body::{BoxError, PrefixedBody, ResponseBody, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};
use crate::proxy::outcome::FillOutcome;
use crate::telemetry::inflight::Held;

/// Reads a small body whole (within the zone's `max_object_size`) and
/// stores it; a body that outgrows the limit is relayed (what was read,
/// then the rest), one that fails fails the fill (or serves `usable_stale`).
pub(super) async fn collect_and_store(
    ctx: StoreCtx,
    mut parts: http::response::Parts,
    body: TimeoutBody<OriginBody>,
    storable: Storable,
    held: Held,
    usable_stale: Option<Arc<CachedObject>>,
) -> FillReply {
    let limit = ctx.zone.tier.max_object_size();
    // Room after the body for its stored head, so that the object keeps
    // both in this one buffer (`CachedObject::assemble_packed`).
    let room = calmcache_core::head::StoredHead::encoded_len(&parts.headers);
    let body = match collect_limited(body, limit as usize, held, room).await {
        Collected::Complete(body) => body,
        Collected::TooLarge(prefix, rest) => {
            finish(ctx.permit, FillOutcome::NotStored);
            let body = ResponseBody::stream(PrefixedBody::new(prefix, rest));
            return FillReply::Relay(Response::from_parts(parts, body), NotStored::TooLarge);
        }
        Collected::Failed(e) => {
            let upstream = &ctx.route.upstream;
            ctx.route.activity.upstream_errors.inc();
            let e = ProxyError::upstream(ErrorKind::Broken, &upstream.name, e);
            static BODY_FAILED: WarnLimit = WarnLimit::new();
            warn_limited!(BODY_FAILED, "origin body failed",
                upstream = %upstream.name, key = %ctx.primary, error = %e);
            return fail(ctx.permit, e, usable_stale, None);
        }
    };
    // The stored length is exact; HEAD answers from the cache rely on it.
    // RFC 9110 §8.6: never on 204 or 304.
    if !matches!(ctx.origin_status, 204 | 304) {
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let stored = Stored {
        status: parts.status,
        // Stored at once: the object's head copies the values (once).
        headers: calmcache_core::object::storable_headers(&parts.headers, &storable.strip_fields),
        body,
        encodings: None,
    };
    store(ctx, stored, storable).await
}

/// What reading a body within a limit came to.
pub(super) enum Collected {
    Complete(StoredBody),
    TooLarge(Vec<Bytes>, TimeoutBody<OriginBody>),
    Failed(BoxError),
}

/// Reads the whole body if it fits in `limit` bytes (counted in `held`);
/// otherwise hands back what was read and the rest of the stream so the
/// client still gets everything. The body comes in a buffer with `room`
/// bytes to spare after it.
pub(super) async fn collect_limited(
    mut body: TimeoutBody<OriginBody>,
    limit: usize,
    mut held: Held,
    room: usize,
) -> Collected {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => return Collected::Failed(e),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len();
        held.add(data.len() as u64);
        chunks.push(data);
        if total > limit {
            return Collected::TooLarge(chunks, body);
        }
    }
    Collected::Complete(concat(chunks, total, room))
}

/// Joins the chunks into one buffer of `total` bytes and `room` to spare
/// (room for the head of a body small enough to be packed with it), or, for
/// a large body, into pages of its own ([`calmcache_core::page_body`]).
/// Always a copy: a chunk is a slice of hyper's read buffer, and keeping it
/// would pin that whole buffer in the zone while the zone counts only the
/// slice.
pub(super) fn concat(chunks: Vec<Bytes>, total: usize, room: usize) -> StoredBody {
    if let Some(paged) = calmcache_core::page_body::paged(&chunks, total) {
        return StoredBody::Kept(Kept::Paged(paged));
    }
    let mut buf = BytesMut::with_capacity(total + room);
    for c in chunks {
        buf.extend_from_slice(&c);
    }
    StoredBody::Fresh(buf)
}
