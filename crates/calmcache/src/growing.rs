//! A response body still arriving from the origin, shared by every request
//! that waits for it: each reader gets what has arrived so far, then each
//! chunk as it comes, so followers of a large miss start receiving at once
//! instead of after the whole object is stored (read-while-write).

use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::body::{ChannelBody, ResponseBody};

type Item = Result<Bytes, String>;

/// The head of a response whose body is still arriving, for every request
/// that answers from it before the object is stored.
#[derive(Debug)]
pub struct StreamingHead {
    /// Status to send.
    pub status: http::StatusCode,
    /// Headers as they will be stored (hop-by-hop and private fields gone).
    pub headers: http::HeaderMap,
    /// The body.
    pub growing: std::sync::Arc<Growing>,
    /// The origin's status (for `Cache-Status: fwd-status`).
    pub origin_status: u16,
    /// Seconds of freshness the stored object will have.
    pub ttl: f64,
    /// The Vary names and the leader's selection, so a follower can tell
    /// whether this is its variant.
    pub vary: Option<(Vec<http::HeaderName>, String)>,
}

/// A body being filled by one fetch and read by many.
pub struct Growing {
    state: Mutex<State>,
    /// The declared length; `None` for a body without one (chunked), which
    /// readers get chunked and which ends when the origin's body ends cleanly.
    pub len: Option<u64>,
}

struct State {
    chunks: Vec<Bytes>,
    /// False once the body outgrew what may be held for late readers:
    /// chunks go to the readers already there only.
    keep: bool,
    /// `Some` once the body is complete (`Ok`) or failed (`Err`).
    done: Option<Result<(), String>>,
    readers: Vec<mpsc::UnboundedSender<Item>>,
}

impl std::fmt::Debug for Growing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Growing({} of {:?} bytes)", self.received(), self.len)
    }
}

impl Growing {
    /// An empty body of `len` bytes to come (`None`: unknown).
    pub fn new(len: Option<u64>) -> Growing {
        Growing {
            state: Mutex::new(State {
                chunks: Vec::new(),
                keep: true,
                done: None,
                readers: Vec::new(),
            }),
            len,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a chunk and hands it to every reader (shared, not copied).
    pub fn push(&self, chunk: Bytes) {
        let mut state = self.lock();
        if state.keep {
            state.chunks.push(chunk.clone());
        }
        state.readers.retain(|r| r.send(Ok(chunk.clone())).is_ok());
    }

    /// Stops holding the body for readers still to come (it will not be
    /// stored and is too large to keep): the readers already there get the
    /// rest, a later [`reader`](Growing::reader) gets an error.
    pub fn stop_keeping(&self) {
        let mut state = self.lock();
        state.keep = false;
        state.chunks = Vec::new();
    }

    /// The body is complete: readers end after their last chunk.
    pub fn finish(&self) {
        let mut state = self.lock();
        state.done = Some(Ok(()));
        state.readers.clear();
    }

    /// The fetch failed: every reader ends with an error (its client sees a
    /// cut connection, never a short body presented as whole).
    pub fn fail(&self, why: String) {
        let mut state = self.lock();
        for reader in state.readers.drain(..) {
            let _ = reader.send(Err(why.clone()));
        }
        state.done = Some(Err(why));
    }

    /// A body for one more client: what arrived so far, then the rest.
    pub fn reader(&self) -> ResponseBody {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.lock();
        if !state.keep {
            let _ = tx.send(Err("body no longer held for late readers".into()));
            drop(state);
            return ResponseBody::stream(ChannelBody::open_ended(rx));
        }
        for chunk in &state.chunks {
            let _ = tx.send(Ok(chunk.clone()));
        }
        match &state.done {
            Some(Ok(())) => {}
            Some(Err(why)) => {
                let _ = tx.send(Err(why.clone()));
            }
            None => state.readers.push(tx),
        }
        drop(state);
        match self.len {
            Some(len) => ResponseBody::stream(ChannelBody::new(rx, len)),
            None => ResponseBody::stream(ChannelBody::open_ended(rx)),
        }
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.lock().chunks.iter().map(|c| c.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn late_and_early_readers_get_the_whole_body() {
        let g = Growing::new(Some(6));
        let early = g.reader();
        g.push(Bytes::from_static(b"abc"));
        let late = g.reader();
        g.push(Bytes::from_static(b"def"));
        g.finish();
        let after = g.reader();
        for body in [early, late, after] {
            let bytes = body.collect().await.unwrap().to_bytes();
            assert_eq!(&bytes[..], b"abcdef");
        }
    }

    #[tokio::test]
    async fn a_failed_fetch_ends_every_reader_with_an_error() {
        let g = Growing::new(Some(6));
        let early = g.reader();
        g.push(Bytes::from_static(b"abc"));
        g.fail("origin reset".into());
        assert!(early.collect().await.is_err());
        assert!(g.reader().collect().await.is_err());
    }

    #[tokio::test]
    async fn a_short_body_is_an_error_not_a_whole_response() {
        let g = Growing::new(Some(10));
        let r = g.reader();
        g.push(Bytes::from_static(b"abc"));
        g.finish();
        assert!(r.collect().await.is_err());
    }

    #[tokio::test]
    async fn a_body_without_length_ends_when_finished() {
        let g = Growing::new(None);
        let early = g.reader();
        g.push(Bytes::from_static(b"abc"));
        g.push(Bytes::from_static(b"def"));
        let late = g.reader();
        g.finish();
        for body in [early, late] {
            assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"abcdef");
        }
    }

    #[tokio::test]
    async fn readers_after_stop_keeping_get_an_error_earlier_ones_the_rest() {
        let g = Growing::new(None);
        let early = g.reader();
        g.push(Bytes::from_static(b"abc"));
        g.stop_keeping();
        let late = g.reader();
        g.push(Bytes::from_static(b"def"));
        g.finish();
        assert_eq!(&early.collect().await.unwrap().to_bytes()[..], b"abcdef");
        assert!(late.collect().await.is_err());
    }
}
