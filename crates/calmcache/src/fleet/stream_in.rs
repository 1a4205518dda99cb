//! A follower streaming another node's body while that node still fetches
//! it (read-while-write across the fleet): a node that finds the lease
//! held and a writing record ([`super::record`]) gets a [`Streamed`]
//! instead of waiting for the commit. It answers from the record's head,
//! then hands out each piece as it appears, verified against the record's
//! digests: only bytes whose piece verified are ever handed out.
//!
//! It polls the record (one script call on the object's slot, at a
//! jittered 10-50 ms pause; never a blocking command) and learns, in the
//! same call, whether the writer still holds its lease. Once the lease is
//! gone the entry must be the manifest of the same generation, listing the
//! digests streamed so far: the rest of the pieces are read against it,
//! and [`Streaming::Done`] gives the object (the manifest's head) for the
//! body to be stored locally (never committed again). Anything else is a
//! [`Cut`]: the writer died (its lease lapsed) or let its lease go without
//! that manifest (failed, purged), a piece is missing or wrong, or no piece
//! came for the wait a waiter is given (the writer stalled).
//!
//! Owns: following one writing. Must not: import the request path (the
//! fill feeds the pieces to its readers: proxy/fill/fleet_stream.rs).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use calmcache_core::disk::format::parse_object;
use calmcache_core::page_body::StoredBody;
use calmcache_core::{CacheKey, CachedObject};
use redis::Value;
use tokio::time::Instant;

use super::entries::{framing_agrees, with_body, Target, VALUE_ROOM};
use super::lease::jittered;
use super::ops_stats::Op;
use super::pieces::{digest, Manifest, PIECE_SIZE};
use super::record::Record;
use super::{Fleet, LOG};

/// The first and the longest pause between two looks at the record.
const PAUSE_MIN: Duration = Duration::from_millis(10);
const PAUSE_MAX: Duration = Duration::from_millis(50);

/// Why a stream ended before its body was whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The writer's lease went and the entry is not its manifest: it died,
    /// failed, or its commit was refused (a purge came after its lease).
    NotCommitted,
    /// No new piece for the wait a waiter is given.
    Stalled,
    /// A piece missing, short or not matching its digest, or a record or
    /// manifest that does not agree with what was streamed.
    Bad,
}

impl Cut {
    /// The reason, as readers' errors and logs give it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cut::NotCommitted => "the writing node's lease went without its manifest",
            Cut::Stalled => "no piece from the writing node within the wait",
            Cut::Bad => "a piece or record in redis did not verify",
        }
    }
}

/// The next step of a stream.
pub(crate) enum Streaming {
    /// The next piece of the body, verified.
    Piece(Bytes),
    /// The body is whole and its manifest committed.
    Done,
}

/// A body another node writes to Redis as it arrives, followed.
pub(crate) struct Streamed {
    fleet: Arc<Fleet>,
    key: CacheKey,
    target: Target,
    record: Record,
    /// The object as the record's head gives it (an empty body).
    head: CachedObject,
    /// The manifest, once committed.
    manifest: Option<Manifest>,
    /// Its lease's start, as the committed entry says (Redis' clock, ms).
    since_ms: u64,
    /// The next piece to hand out.
    next: usize,
    /// How long without a new piece before the stream is cut.
    stall: Duration,
    last_progress: Instant,
    pause: Duration,
}

impl Fleet {
    /// A stream of the body another node writes for `target` of `key`,
    /// from the record the acquire script found with the lease's token
    /// `holder` (`None`: it does not verify, is not the holder's (a dead
    /// holder's record before the next holder writes its own), or is not
    /// one this node can stream); `stall`: the wait a waiter is given.
    pub(super) fn stream_of(
        &self,
        key: &CacheKey,
        target: &Target,
        record: Vec<u8>,
        holder: &str,
        stall: Duration,
    ) -> Option<Streamed> {
        if target.variant.is_some() {
            return None;
        }
        let (_, record) = self.open_record(key, record)?;
        if record.token != holder {
            return None;
        }
        let parsed = parse_object(record.head.clone(), Some(&key.as_ref()), true);
        let Ok((_, head)) = parsed else {
            self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if head.vary_index().is_some() || head.variant().is_some() {
            return None;
        }
        Some(Streamed {
            fleet: self.arc(),
            key: key.clone(),
            target: target.clone(),
            record,
            head,
            manifest: None,
            since_ms: 0,
            next: 0,
            stall,
            last_progress: Instant::now(),
            pause: PAUSE_MIN,
        })
    }
}

impl Streamed {
    /// The object as the writer's response head gives it (an empty body):
    /// what the node answers from.
    pub(crate) fn head(&self) -> &CachedObject {
        &self.head
    }

    /// The next verified piece, or the end once the manifest committed;
    /// a [`Cut`] (counted) otherwise.
    pub(crate) async fn next(&mut self) -> Result<Streaming, Cut> {
        let step = self.step().await;
        match &step {
            Ok(Streaming::Piece(_)) => {
                self.fleet
                    .stats
                    .pieces_streamed
                    .fetch_add(1, Ordering::Relaxed);
            }
            Ok(Streaming::Done) => {}
            Err(cut) => {
                self.fleet.stats.streams_cut.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(target: LOG, key = %self.key, why = cut.as_str(), "fleet stream cut");
            }
        }
        step
    }

    async fn step(&mut self) -> Result<Streaming, Cut> {
        loop {
            if let Some(expected) = self.digest_of(self.next) {
                return self.piece(expected).await.map(Streaming::Piece);
            }
            if self.manifest.is_some() {
                return Ok(Streaming::Done);
            }
            if self.last_progress.elapsed() > self.stall {
                return Err(Cut::Stalled);
            }
            tokio::time::sleep(jittered(self.pause)).await;
            self.pause = (self.pause * 2).min(PAUSE_MAX);
            self.look().await?;
        }
    }

    /// The digest of piece `i`, once listed (by the manifest, or else the
    /// record).
    fn digest_of(&self, i: usize) -> Option<[u8; 32]> {
        match &self.manifest {
            Some(m) => m.digests.get(i).copied(),
            None => self.record.digests.get(i).copied(),
        }
    }

    /// Piece `next`, read and verified against `expected`.
    async fn piece(&mut self, expected: [u8; 32]) -> Result<Bytes, Cut> {
        let i = self.next;
        let key = self.fleet.piece_key(&self.target.hash, self.record.gen, i);
        let piece = self.fleet.get_piece(&key).await.ok_or(Cut::Bad)?;
        let (entry, gen) = (self.target.meta.clone(), self.record.gen);
        let piece = Bytes::from(piece);
        let hashed = piece.clone();
        let d = tokio::task::spawn_blocking(move || digest(&entry, gen, i, &hashed))
            .await
            .map_err(|_| Cut::Bad)?;
        if d != expected || piece.len() > PIECE_SIZE || piece.is_empty() {
            self.fleet.stats.pieces_bad.fetch_add(1, Ordering::Relaxed);
            return Err(Cut::Bad);
        }
        self.next += 1;
        self.last_progress = Instant::now();
        self.pause = PAUSE_MIN;
        Ok(piece)
    }

    /// One look at the record and the lease: new digests, or the manifest
    /// once the lease went.
    async fn look(&mut self) -> Result<(), Cut> {
        let keys = [
            self.fleet.key(&self.target.hash, "w"),
            self.target.lease.clone(),
            self.target.meta.clone(),
        ];
        let (keys, token) = (&keys, self.record.token.as_str());
        let script = &*FOLLOW;
        let answer: Option<Value> = self
            .fleet
            .link
            .call(Op::Acquire, |mut conn| async move {
                script
                    .key(&keys[0])
                    .key(&keys[1])
                    .key(&keys[2])
                    .arg(token)
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
        let Some(Value::Array(items)) = answer else {
            // Redis did not answer: the stall bound decides.
            return Ok(());
        };
        match items.as_slice() {
            [record, Value::Int(1)] => self.newer_record(record),
            [_, Value::Int(0), Value::BulkString(blob), since] => {
                let since = match since {
                    Value::BulkString(s) => {
                        std::str::from_utf8(s).ok().and_then(|s| s.parse().ok())
                    }
                    Value::Int(s) => u64::try_from(*s).ok(),
                    _ => None,
                };
                self.committed(blob.clone(), since.ok_or(Cut::NotCommitted)?)
            }
            _ => Err(Cut::NotCommitted),
        }
    }

    /// The record as the writer renewed it: its digests extend the ones
    /// known (a record that changes what was listed is a cut).
    fn newer_record(&mut self, value: &Value) -> Result<(), Cut> {
        let Value::BulkString(bytes) = value else {
            // No record while the lease is the writer's: lapsed between
            // two pieces; the stall bound decides.
            return Ok(());
        };
        let (_, record) = self
            .fleet
            .open_record(&self.key, bytes.clone())
            .ok_or(Cut::Bad)?;
        let known = &self.record.digests;
        if record.gen != self.record.gen
            || record.head != self.record.head
            || record.digests.get(..known.len()) != Some(known.as_slice())
        {
            return Err(Cut::Bad);
        }
        self.record = record;
        Ok(())
    }

    /// The entry the writer's lease left (`since_ms`: its lease's, as the
    /// entry says): it must be the manifest of this generation, listing
    /// the digests streamed so far.
    fn committed(&mut self, blob: Vec<u8>, since_ms: u64) -> Result<(), Cut> {
        let fleet = &self.fleet;
        let value = match fleet.signer() {
            Some(signer) => signer
                .open_entry(&self.key, since_ms, blob)
                .ok_or(Cut::NotCommitted)?,
            None => blob,
        };
        let max = fleet.cfg.max_object_size.saturating_add(VALUE_ROOM);
        let manifest = Manifest::decode(&value, max).map_err(|_| Cut::NotCommitted)?;
        let known = &self.record.digests;
        if manifest.gen != self.record.gen
            || manifest.head.is_none()
            || manifest.digests.get(..known.len()) != Some(known.as_slice())
        {
            return Err(Cut::NotCommitted);
        }
        self.manifest = Some(manifest);
        self.since_ms = since_ms;
        Ok(())
    }

    /// Once [`Streaming::Done`]: the object to store locally, `body` (every
    /// piece handed out, in order) under the manifest's head; `None`
    /// (counted) when they do not agree.
    pub(crate) fn object(&self, body: StoredBody) -> Option<Arc<CachedObject>> {
        let manifest = self.manifest.as_ref()?;
        let head = manifest.head.clone()?;
        let body_len = body.bytes().len() as u64;
        let agrees = |object: &CachedObject| {
            body_len == manifest.len
                && framing_agrees(object)
                && object.vary_index().is_none()
                && object.variant().is_none()
                && (!self.fleet.signed()
                    || self.fleet.current(&self.target.uri, object, self.since_ms))
        };
        let object = parse_object(head, Some(&self.key.as_ref()), true)
            .ok()
            .map(|(_, object)| with_body(object, body))
            .filter(agrees);
        if object.is_none() {
            self.fleet.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
        }
        object.map(Arc::new)
    }
}

static FOLLOW: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(super::scripts::follow);

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
