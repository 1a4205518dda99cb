//! A fill answered from another node's body while that node still fetches
//! it (read-while-write across the fleet, `crate::fleet`'s stream_in.rs):
//! the head is published to this fill's followers at once, as a streaming
//! fill's is (stream.rs), and the verified pieces feed the same growing
//! body its readers share. The object is stored in the local zone only
//! once the manifest committed and agrees with every piece streamed; it is
//! never committed to the fleet again. A cut ends every reader in error
//! (a cut connection, never a short body presented as whole), stores
//! nothing, and the fill's followers fetch on their own.
//!
//! Owns: feeding the pieces to the readers and the local store. Must not:
//! read Redis itself, or decide whether to stream (the fleet does).

use std::sync::Arc;

use bytes::Bytes;
use calmcache_core::page_body::StoredBody as Kept;
use calmcache_core::{CacheKey, CachedObject, FetchPermit};
use http::header::CONTENT_LENGTH;

use super::collect::concat;
use super::store::StoredBody;
use super::{finish, FetchRequest, FillReply};
use crate::fleet::{Streamed, Streaming};
use crate::proxy::growing::{FirstReader, Growing, Keeping, StreamingHead};
use crate::proxy::outcome::{FillOutcome, OwnFields};
use crate::proxy::state::Route;

/// Answers from `streamed`'s head, and streams its pieces to every reader
/// in a task of its own; stored locally once committed.
pub(super) fn stream_from_fleet(
    route: Arc<Route>,
    primary: CacheKey,
    fetch: FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    streamed: Box<Streamed>,
) -> FillReply {
    let head_object = streamed.head();
    let len = head_object
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let growing = Arc::new(Growing::new(len, Keeping::All, route.inflight.admit()));
    let head = Arc::new(StreamingHead {
        status: head_object.status,
        headers: head_object.headers(),
        growing: growing.clone(),
        origin_status: head_object.status.as_u16(),
        ttl: head_object.meta.freshness.fresh_for().as_secs_f64(),
        vary: None,
        first: FirstReader::new(growing.reader()),
    });
    if let Some(permit) = &permit {
        permit.publish(FillOutcome::Streaming(head.clone()));
    }
    let feed = Feed {
        route,
        primary,
        fetch,
        permit,
        growing,
        len,
    };
    crate::proxy::background::spawn(feed.run(streamed));
    FillReply::Streaming(head, OwnFields::default())
}

/// What the feeding task holds.
struct Feed {
    route: Arc<Route>,
    primary: CacheKey,
    fetch: FetchRequest,
    permit: Option<FetchPermit<FillOutcome>>,
    growing: Arc<Growing>,
    /// The declared length, if any.
    len: Option<u64>,
}

impl Feed {
    /// Every piece to the readers, then the store; or the cut.
    async fn run(self, mut streamed: Box<Streamed>) {
        let mut total = 0u64;
        loop {
            match streamed.next().await {
                Ok(Streaming::Piece(piece)) => {
                    total += piece.len() as u64;
                    if self.len.is_some_and(|len| total > len) {
                        return self.cut("longer than its Content-Length");
                    }
                    self.growing.push(piece);
                }
                Ok(Streaming::Done) => break,
                Err(cut) => return self.cut(cut.as_str()),
            }
        }
        let Some(object) = self.object(&streamed, total).await else {
            return self.cut("the manifest does not agree with the pieces streamed");
        };
        self.growing.finish();
        self.store(object).await;
    }

    /// The object the committed manifest and the streamed body make.
    async fn object(&self, streamed: &Streamed, total: u64) -> Option<Arc<CachedObject>> {
        if self.len.is_some_and(|len| len != total) {
            return None;
        }
        let chunks = self.growing.kept()?;
        // Tens of MiB copied: off the async workers.
        let body = tokio::task::spawn_blocking(move || whole(chunks, total))
            .await
            .ok()??;
        streamed.object(body)
    }

    /// Stored in the local zone (a failed store still served the readers),
    /// the followers told; never committed to the fleet again.
    async fn store(mut self, object: Arc<CachedObject>) {
        let permit = self.permit.take();
        super::fleet::take_shared(
            &self.route,
            &self.primary,
            &self.fetch,
            permit,
            object,
            None,
        )
        .await;
    }

    /// Every reader ends in error; nothing is stored, and the followers
    /// that come later fetch on their own.
    fn cut(mut self, why: &str) {
        tracing::debug!(key = %self.primary, why, "stream from the fleet cut");
        self.growing
            .fail(format!("stream from the fleet cut: {why}"));
        finish(self.permit.take(), FillOutcome::NotStored);
    }
}

/// The body's chunks as one stored body (in pages of its own when large).
fn whole(chunks: Vec<Bytes>, total: u64) -> Option<Kept> {
    let total = usize::try_from(total).ok()?;
    Some(match concat(chunks, total, 0) {
        StoredBody::Kept(kept) => kept,
        StoredBody::Fresh(fresh) => Kept::Heap(fresh.freeze()),
    })
}
