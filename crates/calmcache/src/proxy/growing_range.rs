//! Byte ranges of a body still arriving (RFC 9110 §14): a `Range` request
//! that reaches a streaming fill (the leader of a miss or a waiter that
//! joins it) gets its 206 from the [`Growing`] body as the bytes arrive,
//! never the whole object, while the fill goes on for the cache.
//!
//! ```text
//! length known (Content-Length)   the plan at once (http/range.rs): 206 with
//!                                  the range's bytes as they come, 416, or
//!                                  the 200 when the Range is ignored
//! length unknown (chunked)        ranges with a last byte: wait until it
//!                                  arrived, then `Content-Range: a-b/*`
//!                                  (or the plan with the length, if the body
//!                                  ended first); a suffix or open range
//!                                  (`-500`, `100-`): wait for the end, then
//!                                  the plan with the length; `0-`: the 200
//! several ranges                  length known: a multipart/byteranges body
//!                                  streamed part by part, each read when its
//!                                  turn comes; length unknown: the 200
//! ```
//!
//! Only decides and builds bodies: preconditions, `Cache-Status` and
//! counters stay in `respond.rs`. Must not store or fetch anything.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::StatusCode;

use crate::http::body::{BoxError, ChannelBody, ChunkSource, ResponseBody};
use crate::http::range::{self, ByteRange, Extent, RangePlan};
use crate::proxy::growing::{FirstReader, Growing, RangeReader};

/// A ranged answer from a growing body.
pub(crate) struct Ranged {
    /// 206 or 416.
    pub status: StatusCode,
    /// The part(s), or nothing for a 416.
    pub body: ResponseBody,
    /// Bytes of the body (for the route's `bytes_from_cache`).
    pub bytes: u64,
}

/// Answers the request's `Range` from `growing`, rewriting `headers` (the
/// 200's, after preconditions). `Ok(None)`: the Range is ignored and the
/// whole 200 is the answer. `Err`: the body failed before the range could
/// be known. `first` is the reader kept for the fill's first request: let
/// go before waiting, so a body that is not kept never waits for it.
pub(crate) async fn answer(
    growing: &Arc<Growing>,
    first: &FirstReader,
    request: &HeaderMap,
    headers: &mut HeaderMap,
) -> Result<Option<Ranged>, String> {
    let (len, complete) = match growing.len {
        Some(len) => (len, Some(len)),
        None => {
            drop(first.take());
            match measure(growing, request, headers).await? {
                Some(known) => known,
                None => return Ok(None),
            }
        }
    };
    let plan = range::plan(request, headers, len);
    let first_byte = match &plan {
        RangePlan::Single(r) => Some(r.start),
        RangePlan::Multi(parts) => parts.iter().map(|r| r.start).min(),
        _ => None,
    };
    if first_byte.is_some_and(|at| !growing.readable_from(at)) {
        // A body not kept (it outgrew max_object_size) dropped the bytes
        // while this range waited for the end: better no answer than a
        // 206 cut short.
        return Err("the body outgrew max_object_size before the range was known".into());
    }
    Ok(match plan {
        RangePlan::Full => None,
        RangePlan::Single(r) => Some(single(growing, r, complete, headers)),
        // A body of unknown length may outgrow max_object_size and stop
        // being kept while its parts stream one after the other: a later
        // part's bytes would be gone after the 206's head went out. The whole
        // 200 instead (RFC 9110 §14.2: a cache MAY ignore Range).
        RangePlan::Multi(_) if growing.len.is_none() => None,
        RangePlan::Multi(parts) => multi(growing, &parts, complete, headers),
        RangePlan::Unsatisfiable => Some(Ranged {
            status: range::unsatisfiable(headers, len),
            body: ResponseBody::empty(),
            bytes: 0,
        }),
    })
}

/// For a body of unknown length: waits for the bytes the ranges need and
/// returns the length to plan with and the complete length, if known.
/// `None`: the whole 200 (no valid Range, If-Range false, `bytes=0-`).
async fn measure(
    growing: &Growing,
    request: &HeaderMap,
    stored: &HeaderMap,
) -> Result<Option<(u64, Option<u64>)>, String> {
    let needed = match range::extent(request, stored) {
        Extent::Full => return Ok(None),
        Extent::Through(n) => n,
        Extent::AtEnd => u64::MAX,
    };
    let now = growing.arrived(needed).await;
    match now.ended {
        // Ended: the length is known, the plan is the plain one (416 if
        // no range is satisfiable, RFC 9110 §15.5.17).
        Some(true) => Ok(Some((now.received, Some(now.received)))),
        Some(false) => Err("origin body failed before the range arrived".into()),
        // Every range ends before `needed`, all of it here: planned against
        // it, nothing is clamped, the complete length is "*" (§14.4).
        None => Ok(Some((needed, None))),
    }
}

/// One part: RFC 9110 §15.3.7.1, Content-Range and the part's length.
fn single(
    growing: &Arc<Growing>,
    r: ByteRange,
    complete: Option<u64>,
    headers: &mut HeaderMap,
) -> Ranged {
    let n = r.end - r.start + 1;
    if let Ok(value) = HeaderValue::try_from(range::content_range_of(r, complete)) {
        headers.insert(header::CONTENT_RANGE, value);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    let reader = growing.range_reader(r.start, n);
    Ranged {
        status: StatusCode::PARTIAL_CONTENT,
        body: ResponseBody::stream(ChannelBody::new(reader, n)),
        bytes: n,
    }
}

/// Several parts: RFC 9110 §15.3.7.2 `multipart/byteranges`, each part's
/// head built now, its bytes read from the body when its turn comes.
fn multi(
    growing: &Arc<Growing>,
    parts: &[ByteRange],
    complete: Option<u64>,
    headers: &mut HeaderMap,
) -> Option<Ranged> {
    let boundary = range::new_boundary();
    let content_type = range::multipart_type(&boundary)?;
    let fields = range::PartFields::of(headers);
    let mut pieces = VecDeque::with_capacity(parts.len() * 2 + 1);
    let mut total = 0u64;
    for (i, &r) in parts.iter().enumerate() {
        let mut head = BytesMut::new();
        if i > 0 {
            // The CRLF that ends the previous part's data.
            head.extend_from_slice(b"\r\n");
        }
        range::part_head(&mut head, &boundary, &fields, r, complete);
        let n = r.end - r.start + 1;
        total += head.len() as u64 + n;
        pieces.push_back(Piece::Fixed(head.freeze()));
        pieces.push_back(Piece::Range(r.start, n));
    }
    let mut tail = BytesMut::from(&b"\r\n"[..]);
    range::multipart_end(&mut tail, &boundary);
    total += tail.len() as u64;
    pieces.push_back(Piece::Fixed(tail.freeze()));
    headers.remove(header::CONTENT_RANGE);
    headers.remove(header::CONTENT_ENCODING);
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
    let source = Parts {
        growing: growing.clone(),
        pieces,
        current: None,
    };
    Some(Ranged {
        status: StatusCode::PARTIAL_CONTENT,
        body: ResponseBody::stream(ChannelBody::new(source, total)),
        bytes: total,
    })
}

/// A piece of a multipart body: fixed text, or a range of the body.
enum Piece {
    Fixed(Bytes),
    Range(u64, u64),
}

/// A `multipart/byteranges` body over a growing one: one range reader at a
/// time, made when its part comes (a reader made early would hold back
/// bytes of a body that is not kept).
struct Parts {
    growing: Arc<Growing>,
    pieces: VecDeque<Piece>,
    current: Option<RangeReader>,
}

impl ChunkSource for Parts {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        loop {
            if let Some(reader) = &mut self.current {
                match std::task::ready!(reader.poll_chunk(cx)) {
                    None => self.current = None,
                    some => return Poll::Ready(some),
                }
                continue;
            }
            match self.pieces.pop_front() {
                None => return Poll::Ready(None),
                Some(Piece::Fixed(text)) => return Poll::Ready(Some(Ok(text))),
                Some(Piece::Range(start, n)) => {
                    self.current = Some(self.growing.range_reader(start, n));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "growing_range_tests.rs"]
mod tests;
