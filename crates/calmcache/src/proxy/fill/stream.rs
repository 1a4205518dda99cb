//! Read-while-write: a large or open-ended body streams to its readers while it is stored.

use std::sync::Arc;

use bytes::Bytes;
use calmcache_core::{CacheKey, CachedObject, FetchPermit, Storable};
use http::header::CONTENT_LENGTH;
use http::HeaderValue;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use super::*;
use crate::fleet::Lease;
use crate::http::body::TimeoutBody;
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::detach_headers;
use crate::http::vary;
use crate::proxy::growing::{Growing, Keeping, StreamingHead};
use crate::proxy::outcome::FillOutcome;
use crate::proxy::state::Route;
use crate::telemetry::inflight::Held;
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::warn_limited;

/// Bodies with a declared length above this stream to the requests waiting
/// for them while they are stored; smaller ones are collected first (bodies
/// without a declared length always stream).
pub(crate) const STREAM_MIN: u64 = 256 * 1024;

/// What a streaming fill starts from.
pub(super) struct StreamStart {
    pub(super) parts: http::response::Parts,
    pub(super) storable: Storable,
    pub(super) started: Instant,
    pub(super) origin_status: u16,
    /// The declared length; `None` for a chunked (or close-delimited) body.
    pub(super) len: Option<u64>,
    /// The fill's share of `max_inflight_body`.
    pub(super) held: Held,
}

/// Read-while-write: publishes the head to followers (and to requests that
/// join until the object is stored), then reads the body in its own task,
/// handing each chunk to every reader as it arrives, and stores the object
/// when the body is complete: exactly as long as declared, or, without a
/// declared length, ended cleanly (the last chunk of a chunked body) and
/// within the zone's `max_object_size` (past it, the body still reaches
/// every reader, nothing is stored, and later requests fetch for
/// themselves). A body that fails or comes up short is never stored and
/// ends every reader in error.
pub(super) fn stream_fill(
    route: Arc<Route>,
    primary: CacheKey,
    fetch: FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    start: StreamStart,
    mut body: TimeoutBody<Incoming>,
    lease: Option<Lease>,
) -> FillReply {
    let StreamStart {
        parts,
        storable,
        started,
        origin_status,
        len,
        held,
    } = start;
    let mut headers = detach_headers(&parts.headers, &storable.strip_fields);
    let names = vary::names(&headers, !route.cfg.compress.is_empty());
    let zone = route.zone_for(&primary.as_ref()).cloned();
    // A plain response bound for a zone that keeps bodies in files (disk)
    // goes into its file as it arrives (spooled when its length, and so its
    // header, is known only at the end); a Vary'd or compressed one, or one
    // for another zone, is collected and stored whole.
    let head = || {
        CachedObject::assemble(
            meta_of(&storable, started),
            parts.status,
            headers.clone(),
            Bytes::new(),
            Vec::new(),
            None,
        )
    };
    let mut file = zone
        .as_ref()
        .filter(|_| names.is_empty() && !will_compress(&route, &headers))
        .and_then(|z| z.tier.begin_file_write(&primary, &head, len));
    // Into a file: a window in memory, readers behind it read the file.
    // Otherwise the body is stored whole (bounded by max_object_size).
    let keeping = if file.is_some() {
        Keeping::File
    } else {
        Keeping::All
    };
    let growing = Arc::new(Growing::new(len, keeping, Some(held)));
    let vary = (!names.is_empty()).then(|| {
        let mine = vary::secondary(&names, &fetch.selecting);
        (names, mine)
    });
    let head = Arc::new(StreamingHead {
        status: parts.status,
        headers: headers.clone(),
        growing: growing.clone(),
        origin_status,
        ttl: storable.freshness.fresh_for().as_secs_f64(),
        vary,
        first: crate::proxy::growing::FirstReader::new(growing.reader()),
    });
    if let Some(permit) = &permit {
        permit.publish(FillOutcome::Streaming(head.clone()));
    }
    let status = parts.status;
    // The fleet's lease is kept while the body streams (the other nodes wait
    // for the copy it stores in Redis), unless the body cannot go there:
    // then it is let go at once and they fetch on their own.
    let fleet_limit = route
        .fleet
        .as_ref()
        .map_or(0, |f| f.config().max_object_size);
    let mut lease = lease.filter(|_| len.is_none_or(|n| n <= fleet_limit));
    crate::proxy::background::spawn(async move {
        let mut permit = permit;
        let limit = zone.as_ref().map_or(0, |z| z.tier.max_object_size());
        let mut total = 0u64;
        // False once a body without a declared length outgrew the zone, or
        // its file write failed.
        let mut keep = true;
        let failure = loop {
            // Only the sole reader of a body not kept can hold the fill.
            growing.room().await;
            if growing.abandoned() {
                // Not stored and nobody reading: stop asking the origin.
                tracing::debug!(key = %primary, "body not kept and no reader left; fetch dropped");
                growing.fail("no reader left".into());
                return;
            }
            let next = match body.frame().await {
                None => None,
                Some(Err(e)) => Some(Err(e)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => Some(Ok(data)),
                    Err(_) => continue,
                },
            };
            let data = match next {
                None => match len {
                    Some(len) if total != len => {
                        break Some(format!("origin body ended at {total} of {len} bytes"))
                    }
                    _ => break None,
                },
                Some(Err(e)) => break Some(format!("origin body failed: {e}")),
                Some(Ok(data)) => data,
            };
            total += data.len() as u64;
            if total > fleet_limit {
                lease = None;
            }
            if let Some(len) = len.filter(|&len| total > len) {
                break Some(format!("origin body longer than its Content-Length {len}"));
            }
            if keep && total > limit {
                keep = false;
                file = None;
                growing.stop_keeping();
                finish(permit.take(), FillOutcome::NotStored);
                tracing::debug!(key = %primary, "body over max_object_size; not stored");
            }
            growing.push(data.clone());
            if let Some(writing) = &mut file {
                writing.push(data).await;
                if writing.is_abandoned() {
                    // The disk failed (counted and logged there): not stored,
                    // and no longer kept for readers far behind.
                    keep = false;
                    file = None;
                    growing.stop_keeping();
                    finish(permit.take(), FillOutcome::NotStored);
                } else if let Some(written) = writing.written() {
                    growing.written(written);
                }
            }
        };
        if let Some(why) = failure {
            route.activity.upstream_errors.inc();
            static STREAM_FAILED: WarnLimit = WarnLimit::new();
            warn_limited!(STREAM_FAILED, "origin body failed; not stored",
                key = %primary, error = %why);
            growing.fail(why.clone());
            let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, why);
            finish(permit, FillOutcome::Failed(e));
            return;
        }
        growing.finish();
        let Some(zone) = zone.filter(|_| keep) else {
            finish(permit, FillOutcome::NotStored);
            return;
        };
        if len.is_none() {
            // The stored length is exact (HEAD answers rely on it).
            headers.insert(CONTENT_LENGTH, HeaderValue::from(total));
        }
        if let Some(file) = file {
            let mut object = CachedObject::assemble(
                meta_of(&storable, started),
                status,
                headers,
                Bytes::new(),
                Vec::new(),
                None,
            );
            match file.finish(&object).await {
                Ok(lazy) => {
                    // The body stays in its file; hits stream it from there.
                    object.set_lazy_body(lazy);
                    let object = Arc::new(object);
                    if let (Some(lease), Some(fleet)) = (lease, &route.fleet) {
                        fleet.commit(lease, &primary, object.clone(), None);
                    }
                    let host = request_host(&fetch);
                    after_store(
                        &route,
                        &primary,
                        &primary,
                        &object,
                        permit,
                        origin_status,
                        host,
                    )
                    .await;
                }
                Err(e) => {
                    tracing::debug!(key = %primary, zone = %zone.name, error = %e, "not stored");
                    finish(permit, FillOutcome::NotStored);
                }
            }
            return;
        }
        // Invariant: a body not written to a file was kept whole (else
        // `keep` is false).
        let Some(chunks) = growing.kept() else {
            finish(permit, FillOutcome::NotStored);
            return;
        };
        let stored = Stored {
            status,
            headers,
            body: concat(chunks, total as usize, 0),
            encodings: None,
        };
        let to = StoreCtx {
            route: &route,
            zone: &zone,
            primary: &primary,
            fetch: &fetch,
            permit,
            origin_status,
            started,
            lease,
        };
        let _ = store(to, stored, storable).await;
    });
    FillReply::Streaming(head)
}
