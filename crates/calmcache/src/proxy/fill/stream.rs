//! Read-while-write: a large or open-ended body streams to its readers
//! while it is stored. The head is published at once; the body is read in
//! a task of its own by the pump ([`Pump::run`]), which hands each chunk to
//! every reader (and to the zone's file, for a disk zone) as it arrives;
//! the object is stored when the body is complete.
//!
//! Owns: the pump and what ends it (complete, failed, too long or short,
//! no reader left). Storing a whole body is store.rs's; the readers'
//! window is `proxy/growing.rs`'s.

use std::sync::Arc;

use crate::net::origin_body::OriginBody;
use bytes::Bytes;
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::warn_limited;
use calmcache_core::{CachedObject, Storable};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body_util::BodyExt;

use super::collect::concat;
use super::store::{meta_of, store, will_compress, StoreCtx, Stored};
use super::{finish, FillReply};
use crate::fleet::PieceWriter;
use crate::http::body::TimeoutBody;
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::detach_headers;
use crate::http::vary;
use crate::proxy::growing::{FirstReader, Growing, Keeping, StreamingHead};
use crate::proxy::outcome::FillOutcome;
use crate::telemetry::inflight::Held;

/// Bodies with a declared length above this stream to the requests waiting
/// for them while they are stored; smaller ones are collected first (bodies
/// without a declared length always stream).
pub(crate) const STREAM_MIN: u64 = 256 * 1024;

/// A body going into its zone's file as it arrives.
type FileWrite = Box<dyn calmcache_core::BodyWrite>;

/// What a streaming fill starts from.
pub(super) struct StreamStart {
    pub(super) parts: http::response::Parts,
    pub(super) storable: Storable,
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
    mut ctx: StoreCtx,
    start: StreamStart,
    body: TimeoutBody<OriginBody>,
) -> FillReply {
    let StreamStart {
        parts,
        storable,
        len,
        held,
    } = start;
    let status = parts.status;
    let headers = detach_headers(&parts.headers, &storable.strip_fields);
    let names = vary::names(&headers, !ctx.route.cfg.answers.compress.is_empty());
    let file = begin_file(&ctx, status, &headers, &storable, &names, len);
    // Into a file: a window in memory, readers behind it read the file.
    // Otherwise the body is stored whole (bounded by max_object_size).
    let keeping = if file.is_some() {
        Keeping::File
    } else {
        Keeping::All
    };
    let growing = Arc::new(Growing::new(len, keeping, Some(held)));
    let head = publish(&ctx, status, &headers, &storable, names, &growing);
    // The fleet's lease is kept while the body streams (the other nodes wait
    // for the copy it stores in Redis), unless the body cannot go there:
    // then it is let go at once and they fetch on their own.
    let fleet_limit = super::fleet::max_object_size(&ctx.route);
    ctx.lease = ctx
        .lease
        .take()
        .filter(|_| len.is_none_or(|n| n <= fleet_limit));
    // Past one piece, the body goes to the fleet as it arrives: the
    // other nodes stream it while this one fetches.
    let writer = super::fleet::writer(&mut ctx, status, &headers, &storable, &names_of(&head));
    let limit = ctx.zone.tier.max_object_size();
    let own = std::mem::take(&mut ctx.own);
    let mut pump = Pump {
        ctx,
        growing,
        body,
        file,
        len,
        limit,
        fleet_limit,
        total: 0,
        keep: true,
        writer,
    };
    crate::proxy::background::spawn(async move {
        match pump.run().await {
            Pumped::Complete => pump.store(status, headers, storable).await,
            Pumped::Failed(why) => pump.failed(why),
            Pumped::Abandoned => {}
        }
    });
    FillReply::Streaming(head, own)
}

/// The zone's file write for the body, when it goes into a file as it
/// arrives: a plain response bound for a zone that keeps bodies in files
/// (disk), spooled when its length, and so its header, is known only at the
/// end. A Vary'd or compressed one, or one for another zone, is collected
/// and stored whole.
fn begin_file(
    ctx: &StoreCtx,
    status: StatusCode,
    headers: &HeaderMap,
    storable: &Storable,
    names: &[HeaderName],
    len: Option<u64>,
) -> Option<FileWrite> {
    if !names.is_empty() || will_compress(&ctx.route, headers) {
        return None;
    }
    let head = || empty_body(meta_of(storable, ctx.started), status, headers);
    ctx.zone.tier.begin_body_write(&ctx.primary, &head, len)
}

/// The object of a response head, with an empty body: what a body file or
/// the fleet's manifest is made for.
pub(super) fn empty_body(
    meta: calmcache_core::ObjectMeta,
    status: StatusCode,
    headers: &HeaderMap,
) -> CachedObject {
    CachedObject::assemble(
        meta,
        status,
        headers.clone(),
        Bytes::new(),
        Vec::new(),
        None,
    )
}

/// The Vary names a published head carries (none for a plain response).
fn names_of(head: &StreamingHead) -> Vec<HeaderName> {
    head.vary
        .as_ref()
        .map_or_else(Vec::new, |(names, _)| names.clone())
}

/// Publishes the head to the fill's followers: they answer from it and
/// read the body as it grows.
fn publish(
    ctx: &StoreCtx,
    status: StatusCode,
    headers: &HeaderMap,
    storable: &Storable,
    names: Vec<HeaderName>,
    growing: &Arc<Growing>,
) -> Arc<StreamingHead> {
    let vary = (!names.is_empty()).then(|| {
        let mine = vary::secondary(&names, &ctx.fetch.selecting);
        (names, mine)
    });
    let head = Arc::new(StreamingHead {
        status,
        headers: headers.clone(),
        growing: growing.clone(),
        origin_status: ctx.origin_status,
        ttl: storable.freshness.fresh_for().as_secs_f64(),
        vary,
        first: FirstReader::new(growing.reader()),
    });
    if let Some(permit) = &ctx.permit {
        permit.publish(FillOutcome::Streaming(head.clone()));
    }
    head
}

/// How the pump ended.
enum Pumped {
    /// The whole body arrived (as long as declared, or ended cleanly).
    Complete,
    /// The body failed, or came up short or long.
    Failed(String),
    /// Not kept and nobody reading: the fetch was dropped.
    Abandoned,
}

/// One frame of the origin's body, as the pump sees it.
enum Next {
    Data(Bytes),
    /// A frame without data (trailers).
    Skip,
    End,
    Failed(String),
}

/// Reads the body from the origin into the growing body its readers share
/// (and into the zone's file, for a disk zone), at the pace of the readers
/// when it is not kept.
struct Pump {
    ctx: StoreCtx,
    growing: Arc<Growing>,
    body: TimeoutBody<OriginBody>,
    file: Option<FileWrite>,
    /// The declared length, if any.
    len: Option<u64>,
    /// The zone's `max_object_size`.
    limit: u64,
    /// The fleet's `max_object_size`: past it the lease is let go.
    fleet_limit: u64,
    /// Bytes read so far.
    total: u64,
    /// False once a body without a declared length outgrew the zone, or
    /// its file write failed.
    keep: bool,
    /// The body going to the fleet as it arrives (holds the lease); `None`
    /// when it goes after the end, or not at all.
    writer: Option<PieceWriter>,
}

impl Pump {
    /// Reads the body to its end, or to why it stopped.
    async fn run(&mut self) -> Pumped {
        loop {
            // Only the sole reader of a body not kept can hold the fill.
            self.growing.room().await;
            if self.growing.abandoned() {
                // Not stored and nobody reading: stop asking the origin.
                tracing::debug!(key = %self.ctx.primary, "body not kept and no reader left; fetch dropped");
                self.growing.fail("no reader left".into());
                return Pumped::Abandoned;
            }
            let data = match self.next().await {
                Next::Data(data) => data,
                Next::Skip => continue,
                Next::End => return self.ended(),
                Next::Failed(why) => return Pumped::Failed(why),
            };
            if let Some(why) = self.take(data).await {
                return Pumped::Failed(why);
            }
        }
    }

    async fn next(&mut self) -> Next {
        match self.body.frame().await {
            None => Next::End,
            Some(Err(e)) => Next::Failed(format!("origin body failed: {e}")),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Next::Data(data),
                Err(_) => Next::Skip,
            },
        }
    }

    /// The body ended: complete unless shorter than declared.
    fn ended(&self) -> Pumped {
        match self.len {
            Some(len) if self.total != len => Pumped::Failed(format!(
                "origin body ended at {} of {len} bytes",
                self.total
            )),
            _ => Pumped::Complete,
        }
    }

    /// Hands one chunk to the readers and the file; an error when the body
    /// is longer than declared.
    async fn take(&mut self, data: Bytes) -> Option<String> {
        self.total += data.len() as u64;
        if self.total > self.fleet_limit {
            self.ctx.lease = None;
            self.writer = None;
        }
        if let Some(len) = self.len.filter(|&len| self.total > len) {
            return Some(format!("origin body longer than its Content-Length {len}"));
        }
        if self.keep && self.total > self.limit {
            self.stop_keeping();
            tracing::debug!(key = %self.ctx.primary, "body over max_object_size; not stored");
        }
        self.growing.push(data.clone());
        if let Some(writer) = &mut self.writer {
            if !writer.push(&data).await {
                self.writer = None;
            }
        }
        if let Some(writing) = &mut self.file {
            writing.push(data).await;
            if writing.is_abandoned() {
                // The disk failed (counted and logged there): not stored,
                // and no longer kept for readers far behind.
                self.stop_keeping();
            } else if let Some(written) = writing.written() {
                self.growing.written(written);
            }
        }
        None
    }

    /// Nothing will be stored: the followers hear so now, and the body is
    /// no longer kept for readers far behind.
    fn stop_keeping(&mut self) {
        self.keep = false;
        self.file = None;
        self.writer = None;
        self.growing.stop_keeping();
        finish(self.ctx.permit.take(), FillOutcome::NotStored);
    }

    /// The body failed: every reader ends in error, nothing is stored.
    fn failed(self, why: String) {
        let route = &self.ctx.route;
        route.activity.upstream_errors.inc();
        static STREAM_FAILED: WarnLimit = WarnLimit::new();
        warn_limited!(STREAM_FAILED, "origin body failed; not stored",
            key = %self.ctx.primary, error = %why);
        self.growing.fail(why.clone());
        let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, why);
        finish(self.ctx.permit, FillOutcome::Failed(e));
    }

    /// The body is complete: stored from its file, or whole, when kept.
    async fn store(mut self, status: StatusCode, mut headers: HeaderMap, storable: Storable) {
        self.growing.finish();
        if !self.keep {
            finish(self.ctx.permit, FillOutcome::NotStored);
            return;
        }
        if self.len.is_none() {
            // The stored length is exact (HEAD answers rely on it).
            headers.insert(CONTENT_LENGTH, HeaderValue::from(self.total));
        }
        if let Some(writer) = self.writer.take() {
            // Its manifest commits; a body of one piece or less gives the
            // lease back, to be committed whole with the object below.
            let head = empty_body(meta_of(&storable, self.ctx.started), status, &headers);
            self.ctx.lease = writer.finish(head);
        }
        if let Some(file) = self.file {
            let object = CachedObject::assemble(
                meta_of(&storable, self.ctx.started),
                status,
                headers,
                Bytes::new(),
                Vec::new(),
                None,
            );
            return from_file(self.ctx, file, object).await;
        }
        // Invariant: a body not written to a file was kept whole (else
        // `keep` is false).
        let Some(chunks) = self.growing.kept() else {
            finish(self.ctx.permit, FillOutcome::NotStored);
            return;
        };
        let stored = Stored {
            status,
            headers,
            body: concat(chunks, self.total as usize, 0),
            encodings: None,
        };
        let _ = store(self.ctx, stored, storable).await;
    }
}

/// Finishes the zone's file for `object`: the body stays in its file and
/// hits stream it from there.
async fn from_file(mut ctx: StoreCtx, file: FileWrite, mut object: CachedObject) {
    match file.finish(&object).await {
        Ok(lazy) => {
            object.set_lazy_body(lazy);
            let object = Arc::new(object);
            let key = ctx.primary.clone();
            super::fleet::commit(&ctx.route, ctx.lease.take(), &key, &object, None);
            ctx.stored(&key, &object).await;
        }
        Err(e) => {
            tracing::debug!(key = %ctx.primary, zone = %ctx.zone.name, error = %e, "not stored");
            finish(ctx.permit, FillOutcome::NotStored);
        }
    }
}
