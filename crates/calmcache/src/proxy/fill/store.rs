//! Storing a response: the one place a response becomes a cached object.
//! The Vary marker and the variant key (http/vary.rs), compressed
//! encodings made once (http/compress.rs), the insert into the zone, and
//! the bookkeeping after it (path-purge hosts, memory front, hit-for-miss,
//! the followers).
//!
//! Owns: [`StoreCtx`], built once per fill, and the stored body's forms.
//! Does not read from the origin (collect.rs, stream.rs) or decide whether
//! a response may be stored (mod.rs, RFC 9111 §3).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use calmcache_core::page_body::StoredBody as Kept;
use calmcache_core::{
    CacheKey, CachedObject, Encoded, FetchPermit, ObjectMeta, Storable, VaryIndex,
};
use http::header::VARY;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use tokio::time::Instant;

use super::{finish, FetchRequest, FillReply, NotStored};
use crate::fleet::Lease;
use crate::http::body::ResponseBody;
use crate::http::vary;
use crate::proxy::outcome::{FillOutcome, OwnFields};
use crate::proxy::state::Route;
use calmcache_core::Zone;

/// True when storing a response with `headers` adds compressed encodings
/// (a body of at least `compress::MIN_SIZE` is assumed).
pub(super) fn will_compress(route: &Route, headers: &HeaderMap) -> bool {
    !route.cfg.answers.compress.is_empty() && crate::http::compress::compressible(headers)
}

/// The metadata of an object stored now, fetched since `started`.
pub(super) fn meta_of(storable: &Storable, started: Instant) -> ObjectMeta {
    ObjectMeta {
        stored_at: Instant::now(),
        freshness: storable.freshness,
        fetch_time: started.elapsed(),
    }
}

/// A response ready to store.
pub(super) struct Stored {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: StoredBody,
    /// Encodings to reuse (a freshened copy); `None` makes them anew.
    pub(super) encodings: Option<Vec<Encoded>>,
}

/// The body of a response to store.
pub(super) enum StoredBody {
    /// Just collected, in a buffer of its own (perhaps with room for the
    /// head after it).
    Fresh(BytesMut),
    /// Kept as it will be stored: shared with a stored object (a freshened
    /// copy), or a large body in pages of its own
    /// ([`calmcache_core::page_body`]).
    Kept(Kept),
}

impl StoredBody {
    /// The body as a shared buffer (the room after a fresh one is given up).
    pub(super) fn shared(&mut self) -> Bytes {
        if let StoredBody::Fresh(fresh) = self {
            *self = StoredBody::Kept(Kept::Heap(std::mem::take(fresh).freeze()));
        }
        match self {
            StoredBody::Kept(kept) => kept.bytes().clone(),
            StoredBody::Fresh(_) => Bytes::new(),
        }
    }

    /// The body by value, as a shared buffer.
    pub(super) fn into_bytes(mut self) -> Bytes {
        self.shared()
    }

    pub(super) fn len(&self) -> usize {
        match self {
            StoredBody::Fresh(body) => body.len(),
            StoredBody::Kept(kept) => kept.bytes().len(),
        }
    }
}

/// Where a response is stored and who hears of it: what [`store`] needs
/// besides the response itself. Built once per fill, when the origin's
/// answer is in and its zone picked; a streaming fill moves it into the
/// task that reads the body.
pub(super) struct StoreCtx {
    pub(super) route: Arc<Route>,
    /// The zone the fill stores into (the route's pick for this key).
    pub(super) zone: Arc<Zone>,
    /// The URI's key: the object's own, or its Vary marker's.
    pub(super) primary: CacheKey,
    /// The request fetched: its selecting headers name the variant, its
    /// `Host` is remembered for path purges.
    pub(super) fetch: FetchRequest,
    /// The fetch's followers, told what became of it.
    pub(super) permit: Option<FetchPermit<FillOutcome>>,
    /// What the origin answered: 304 on a revalidation, else the status stored.
    pub(super) origin_status: u16,
    /// When the fetch began (the object's `fetch_time`).
    pub(super) started: Instant,
    /// The fleet's lease on this fetch: the object goes to Redis too.
    pub(super) lease: Option<Lease>,
    /// The fields the stored copy may not hold that this fetch's own
    /// client gets (an ignored `Set-Cookie`).
    pub(super) own: OwnFields,
}

impl StoreCtx {
    /// Bookkeeping once `object` is in the zone under `key` (see
    /// [`after_store`]).
    pub(super) async fn stored(self, key: &CacheKey, object: &Arc<CachedObject>) {
        let host = request_host(&self.fetch);
        after_store(
            &self.route,
            &self.primary,
            key,
            object,
            self.permit,
            self.origin_status,
            host,
        )
        .await;
    }
}

/// Stores a response under its key (the primary key, or its variant key
/// under a Vary marker), compressing it first when the route asks.
pub(super) async fn store(mut ctx: StoreCtx, mut stored: Stored, storable: Storable) -> FillReply {
    let route = &ctx.route;
    let (zone, primary) = (&ctx.zone, &ctx.primary);
    let compresses = !route.cfg.answers.compress.is_empty();
    let encodings = match stored.encodings.take() {
        Some(encodings) => encodings,
        None => encode(route, &stored.headers, &mut stored.body).await,
    };
    if !encodings.is_empty() {
        add_vary_accept_encoding(&mut stored.headers);
    }
    let meta = meta_of(&storable, ctx.started);
    let names = vary::names(&stored.headers, compresses);
    let (key, variant) = if names.is_empty() {
        (primary.clone(), None)
    } else {
        let id = marker_for(zone, primary, names.clone(), &meta).await;
        let secondary = vary::secondary(&names, &ctx.fetch.selecting);
        let key = vary::variant_key(&primary.as_ref(), id, &secondary);
        (key, Some(secondary.into_boxed_str()))
    };
    let object = Arc::new(match stored.body {
        // One buffer for the head and a small body, as a zone keeps them.
        StoredBody::Fresh(body) => CachedObject::assemble_packed(
            meta,
            stored.status,
            stored.headers,
            body,
            encodings,
            variant,
        ),
        StoredBody::Kept(body) => CachedObject::assemble(
            meta,
            stored.status,
            stored.headers,
            body,
            encodings,
            variant,
        ),
    });
    // Off the request path; a variant under the URI's variants there.
    let varies = (!names.is_empty()).then_some(&names[..]);
    if let Err(e) = zone.tier.insert(key.clone(), object.clone()).await {
        tracing::debug!(key = %key, zone = %zone.name, error = %e, "not stored");
        return not_stored(ctx, &object, e, varies);
    }
    super::fleet::commit(route, ctx.lease.take(), primary, &object, varies);
    let origin_status = ctx.origin_status;
    let own = std::mem::take(&mut ctx.own);
    ctx.stored(&key, &object).await;
    FillReply::Stored {
        object,
        origin_status,
        shared: false,
        own,
    }
}

/// The zone refused `object`: headers and bookkeeping pushed it over the
/// zone's limit, the disk failed, or a full disk zone's admission keeps
/// out a first miss. It is relayed to its client. One the zone did not
/// admit still goes to the fleet under the fill's lease: admission guards
/// this node's disk, not Redis, and without the copy the next node to miss
/// would fetch it from the origin again (bench/fleet-many: hundreds of
/// such fetches per node once zones were full).
fn not_stored(
    mut ctx: StoreCtx,
    object: &Arc<CachedObject>,
    e: calmcache_core::CacheError,
    varies: Option<&[HeaderName]>,
) -> FillReply {
    let why = match e {
        calmcache_core::CacheError::TooLarge { .. } => NotStored::TooLarge,
        calmcache_core::CacheError::Io(_) => NotStored::StoreFailed,
        calmcache_core::CacheError::NotAdmitted => NotStored::NotAdmitted,
    };
    if matches!(why, NotStored::NotAdmitted) {
        super::fleet::commit(&ctx.route, ctx.lease.take(), &ctx.primary, object, varies);
    }
    finish(ctx.permit.take(), FillOutcome::NotStored);
    let mut resp = Response::new(ResponseBody::full(object.body.clone()));
    *resp.status_mut() = object.status;
    *resp.headers_mut() = object.headers();
    std::mem::take(&mut ctx.own).add_to(resp.headers_mut());
    FillReply::Relay(resp, why)
}

/// The `Host` the fetch was made for (as the key template's `$host` read it).
pub(super) fn request_host(fetch: &FetchRequest) -> &str {
    fetch
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
}

/// Bookkeeping once `object` is in its zone under `key`: the host for path
/// purges, the memory front, the counter, and the fetch's followers.
pub(super) async fn after_store(
    route: &Route,
    primary: &CacheKey,
    key: &CacheKey,
    object: &Arc<CachedObject>,
    permit: Option<FetchPermit<FillOutcome>>,
    origin_status: u16,
    host: &str,
) {
    route.note_host(primary, host);
    route.hit_for_miss.clear(primary);
    if key != primary {
        route.hit_for_miss.clear(key);
    }
    route.stored(key, object).await;
    route.activity.stores.inc();
    let stored = FillOutcome::Stored {
        object: object.clone(),
        origin_status,
    };
    finish(permit, stored);
}

/// The generation id of the Vary marker under `primary` for `names`,
/// replacing a marker for other names (or a plain response) with a new one.
pub(super) async fn marker_for(
    zone: &Zone,
    primary: &CacheKey,
    names: Vec<HeaderName>,
    meta: &ObjectMeta,
) -> u64 {
    if let Some(index) = zone
        .tier
        .get(&primary.as_ref())
        .await
        .and_then(|o| o.vary_index().cloned())
        .filter(|index| index.names == names)
    {
        return index.id;
    }
    let id = rand::random::<u64>();
    let marker = CachedObject::marker(meta.clone(), VaryIndex { id, names });
    if let Err(e) = zone.tier.insert(primary.clone(), Arc::new(marker)).await {
        tracing::debug!(key = %primary, error = %e, "vary marker not stored");
    }
    id
}

/// Compresses a compressible body once per configured coding, on a blocking
/// thread (never on the async workers).
pub(super) async fn encode(
    route: &Route,
    headers: &HeaderMap,
    body: &mut StoredBody,
) -> Vec<Encoded> {
    let codings = route.cfg.answers.compress.clone();
    if codings.is_empty()
        || body.len() < crate::http::compress::MIN_SIZE
        || !crate::http::compress::compressible(headers)
    {
        return Vec::new();
    }
    let body = body.shared();
    let encoded =
        tokio::task::spawn_blocking(move || crate::http::compress::encode_all(&codings, &body))
            .await;
    match encoded {
        Ok(list) => list
            .into_iter()
            .map(|(coding, body)| Encoded {
                coding: coding.as_str(),
                body,
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "compression task failed; storing uncompressed only");
            Vec::new()
        }
    }
}

/// Adds `Accept-Encoding` to `Vary` unless it is there.
pub(super) fn add_vary_accept_encoding(headers: &mut HeaderMap) {
    let present = headers
        .get_all(VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|n| n.trim().eq_ignore_ascii_case("accept-encoding"));
    if !present {
        headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}
