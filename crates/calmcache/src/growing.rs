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
    /// The declared length (the body is streamed only when it is known).
    pub len: u64,
}

struct State {
    chunks: Vec<Bytes>,
    /// `Some` once the body is complete (`Ok`) or failed (`Err`).
    done: Option<Result<(), String>>,
    readers: Vec<mpsc::UnboundedSender<Item>>,
}

impl std::fmt::Debug for Growing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Growing({} of {} bytes)", self.received(), self.len)
    }
}

impl Growing {
    /// An empty body of `len` bytes to come.
    pub fn new(len: u64) -> Growing {
        Growing {
            state: Mutex::new(State {
                chunks: Vec::new(),
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
        state.chunks.push(chunk.clone());
        state.readers.retain(|r| r.send(Ok(chunk.clone())).is_ok());
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
        ResponseBody::stream(ChannelBody::new(rx, self.len))
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
        let g = Growing::new(6);
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
        let g = Growing::new(6);
        let early = g.reader();
        g.push(Bytes::from_static(b"abc"));
        g.fail("origin reset".into());
        assert!(early.collect().await.is_err());
        assert!(g.reader().collect().await.is_err());
    }

    #[tokio::test]
    async fn a_short_body_is_an_error_not_a_whole_response() {
        let g = Growing::new(10);
        let r = g.reader();
        g.push(Bytes::from_static(b"abc"));
        g.finish();
        assert!(r.collect().await.is_err());
    }
}
