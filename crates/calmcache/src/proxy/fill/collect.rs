//! Reading a body whole, within a limit.

use bytes::{Bytes, BytesMut};
use calmcache_core::page_body::StoredBody as Kept;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::*;
use crate::http::body::{BoxError, TimeoutBody};
use crate::telemetry::inflight::Held;

pub(super) enum Collected {
    Complete(StoredBody),
    TooLarge(Vec<Bytes>, TimeoutBody<Incoming>),
    Failed(BoxError),
}

/// Reads the whole body if it fits in `limit` bytes (counted in `held`);
/// otherwise hands back what was read and the rest of the stream so the
/// client still gets everything. The body comes in a buffer with `room`
/// bytes to spare after it.
pub(super) async fn collect_limited(
    mut body: TimeoutBody<Incoming>,
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
