//! Large objects in Redis as pieces: an entry's value (the disk file format
//! of the object, as a small entry keeps it whole) over [`PIECE_SIZE`] is
//! cut into pieces, each its own Redis key, and the entry keeps a
//! [`Manifest`] instead: the fill's generation, the value's length and one
//! SHA-256 digest per piece. The pieces are written first, the manifest is
//! committed last by the commit script (its fence and purge rules), so a
//! node that finds a manifest finds every piece it lists, unless Redis lost
//! one (evicted, flushed, restarted): then the copy is a miss.
//!
//! - A piece's key has its own hash tag, `{prefix}{H.G.i}:b` (H: the
//!   URI's hash, G: the fill's generation, i: the index), so a Redis
//!   Cluster spreads one object over its slots instead of piling it on the
//!   URI's. A new random generation per fill: pieces are never overwritten,
//!   and two fills never mix.
//! - A piece's digest is over what the piece is for (the entry's key in
//!   Redis, the generation, the index) and its bytes: a piece of another
//!   fill, another object or another position never verifies. With the
//!   fleet secret the manifest is signed like any entry, so the digests,
//!   and through them every piece, are authenticated.
//! - Each piece lives in Redis a margin longer than its manifest
//!   ([`PIECE_TTL_MARGIN`]): the manifest never outlives a piece.
//! - A node holds at most `fleet.max_pieces_in_flight` bytes of large
//!   values at once, writing or reading ([`PieceBudget`]), and sends at
//!   most [`PIECES_AT_ONCE`] piece calls at once, each with the
//!   `fleet.timeout` deadline: a burst of large fills queues here rather
//!   than in front of the small calls on the connection.
//!
//! Owns: the manifest's form, the piece keys and digests, the piece calls.
//! Must not: decide whether an object goes to Redis (entries.rs), or
//! import the request path.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};

use super::entries::Target;
use super::ops_stats::Op;
use super::Fleet;

/// The size of one piece. A 256 KiB `SET` or `GET` holds Redis' one thread
/// for well under a millisecond and crosses loopback in about as long, so a
/// lease or acquire queued behind a piece waits little (a 10 MB value took
/// Redis 41 ms: FLEET.md §9); a 64 MiB object is 256 pieces.
pub(super) const PIECE_SIZE: usize = 256 * 1024;
/// Piece calls one node sends at once (per object): enough to keep a round
/// trip in flight while the last answer is copied, few enough that a
/// control call waits behind at most a megabyte.
pub(super) const PIECES_AT_ONCE: usize = 4;
/// How much longer a piece lives in Redis than the entry that lists it
/// (pieces are written before the commit, whose TTL starts later); a fill
/// whose pieces took longer than this to write is not committed.
pub(super) const PIECE_TTL_MARGIN: Duration = Duration::from_secs(30);
/// How long a fill or a read waits for room in the budget before it gives
/// up (the object stays local; the reader fetches from the origin).
const BUDGET_WAIT: Duration = Duration::from_secs(1);
/// What a manifest of a value's pieces starts with (a whole value starts
/// with the disk format's `CALMOBJ\0`).
pub(super) const MANIFEST_MAGIC: &[u8; 4] = b"CCM1";
/// What a manifest of a body's pieces starts with: written as the body
/// arrived (stream_out.rs), the head (the disk-format value of the object
/// with an empty body) kept in the manifest, after the digests.
pub(super) const STREAMED_MAGIC: &[u8; 4] = b"CCM2";
/// Magic, generation, value length, piece size, piece count.
const MANIFEST_HEAD: usize = 4 + 8 + 8 + 4 + 4;
const DIGEST_LEN: usize = 32;
/// What a piece digest's input starts with.
const PIECE_KIND: &[u8] = b"calmcache fleet piece v1";

/// Why a manifest or a piece was refused.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PieceError {
    /// Not a manifest: no magic, a length or count that does not add up.
    Malformed,
    /// The value it lists is larger than this node takes.
    TooLarge,
    /// A piece was not in Redis (expired, evicted) or Redis did not answer.
    Missing,
    /// A piece of the wrong length.
    Short,
    /// A piece whose bytes do not match its digest.
    Digest,
}

/// One fill's pieces, as its entry lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Manifest {
    /// The fill's generation: part of every piece's key and digest.
    pub(super) gen: u64,
    /// The whole value's length.
    pub(super) len: u64,
    /// Bytes per piece (the last may be shorter).
    pub(super) piece_size: u32,
    /// One digest per piece, in order.
    pub(super) digests: Vec<[u8; DIGEST_LEN]>,
    /// `None`: the pieces are the whole value (`CCM1`). Some: the pieces
    /// are the body, and this the disk-format value of the object with an
    /// empty body (`CCM2`, a body written to Redis as it arrived).
    pub(super) head: Option<Vec<u8>>,
}

impl Manifest {
    /// The manifest of `value` cut into [`PIECE_SIZE`] pieces for the
    /// entry `entry` and generation `gen`. CPU work: off the async workers.
    pub(super) fn of(entry: &str, gen: u64, value: &[u8]) -> Manifest {
        let digests = value
            .chunks(PIECE_SIZE)
            .enumerate()
            .map(|(i, piece)| digest(entry, gen, i, piece))
            .collect();
        Manifest {
            gen,
            len: value.len() as u64,
            // Invariant: PIECE_SIZE is 256 KiB, within u32.
            piece_size: PIECE_SIZE as u32,
            digests,
            head: None,
        }
    }

    /// The bytes the entry keeps.
    pub(super) fn encode(&self) -> Vec<u8> {
        let head_len = self.head.as_ref().map_or(0, |h| 4 + h.len());
        let mut out =
            Vec::with_capacity(MANIFEST_HEAD + self.digests.len() * DIGEST_LEN + head_len);
        out.extend_from_slice(match self.head {
            Some(_) => STREAMED_MAGIC,
            None => MANIFEST_MAGIC,
        });
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.piece_size.to_le_bytes());
        out.extend_from_slice(&(self.digests.len() as u32).to_le_bytes());
        for d in &self.digests {
            out.extend_from_slice(d);
        }
        if let Some(head) = &self.head {
            // Invariant: a head is headers and a key, far below 4 GiB.
            out.extend_from_slice(&(head.len() as u32).to_le_bytes());
            out.extend_from_slice(head);
        }
        out
    }

    /// A manifest read back, checked for sense: its piece count is its
    /// length cut into its piece size, and it lists no value over `max`.
    pub(super) fn decode(bytes: &[u8], max: u64) -> Result<Manifest, PieceError> {
        let (rest, streamed) = match bytes.strip_prefix(MANIFEST_MAGIC) {
            Some(rest) => (rest, false),
            None => (
                bytes
                    .strip_prefix(STREAMED_MAGIC)
                    .ok_or(PieceError::Malformed)?,
                true,
            ),
        };
        let (head, digests) = rest
            .split_at_checked(MANIFEST_HEAD - MANIFEST_MAGIC.len())
            .ok_or(PieceError::Malformed)?;
        let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap_or([0; 4]));
        let (gen, len, piece_size, count) = (u64_at(0), u64_at(8), u32_at(16), u32_at(20));
        if len > max {
            return Err(PieceError::TooLarge);
        }
        let expected = len.div_ceil(u64::from(piece_size.max(1)));
        let (digests, object_head) = digests
            .split_at_checked(count as usize * DIGEST_LEN)
            .ok_or(PieceError::Malformed)?;
        let object_head = match streamed {
            true => Some(head_of(object_head)?),
            false if object_head.is_empty() => None,
            false => return Err(PieceError::Malformed),
        };
        if piece_size == 0 || len == 0 || u64::from(count) != expected {
            return Err(PieceError::Malformed);
        }
        let digests = digests
            .chunks_exact(DIGEST_LEN)
            .map(|d| d.try_into().unwrap_or([0; DIGEST_LEN]))
            .collect();
        Ok(Manifest {
            gen,
            len,
            piece_size,
            digests,
            head: object_head,
        })
    }

    /// How many pieces.
    pub(super) fn count(&self) -> usize {
        self.digests.len()
    }

    /// Where piece `i` lies in the value.
    pub(super) fn range(&self, i: usize) -> Range<usize> {
        let size = self.piece_size as usize;
        // Invariant: decode checked count × size covers len (a usize once
        // the budget let it be allocated).
        let len = usize::try_from(self.len).unwrap_or(usize::MAX);
        (i * size).min(len)..((i + 1) * size).min(len)
    }

    /// Every piece of `value` (the pieces read, in order) matches its
    /// digest for the entry `entry`. CPU work: off the async workers.
    pub(super) fn verify(&self, entry: &str, value: &[u8]) -> Result<(), PieceError> {
        if value.len() as u64 != self.len {
            return Err(PieceError::Short);
        }
        for (i, expected) in self.digests.iter().enumerate() {
            let piece = value.get(self.range(i)).ok_or(PieceError::Short)?;
            if digest(entry, self.gen, i, piece) != *expected {
                return Err(PieceError::Digest);
            }
        }
        Ok(())
    }
}

/// A value's entry holds a manifest, not the value.
pub(super) fn is_manifest(value: &[u8]) -> bool {
    value.starts_with(MANIFEST_MAGIC) || value.starts_with(STREAMED_MAGIC)
}

/// The object head a `CCM2` manifest ends with: its length, then exactly
/// that many bytes.
fn head_of(bytes: &[u8]) -> Result<Vec<u8>, PieceError> {
    let (len, head) = bytes.split_at_checked(4).ok_or(PieceError::Malformed)?;
    let len = u32::from_le_bytes(len.try_into().unwrap_or([0; 4]));
    match head.len() == len as usize && len > 0 {
        true => Ok(head.to_vec()),
        false => Err(PieceError::Malformed),
    }
}

/// SHA-256 over what piece `i` of generation `gen` of the entry `entry` is
/// for and its bytes, each part length-prefixed.
pub(super) fn digest(entry: &str, gen: u64, i: usize, piece: &[u8]) -> [u8; DIGEST_LEN] {
    let mut h = Sha256::new();
    for part in [PIECE_KIND, entry.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update(gen.to_le_bytes());
    h.update((i as u64).to_le_bytes());
    h.update((piece.len() as u64).to_le_bytes());
    h.update(piece);
    h.finalize().into()
}

/// The bytes of large values one node holds at once, writing or reading
/// (`fleet.max_pieces_in_flight`), counted in KiB.
pub(super) struct PieceBudget {
    kib: Arc<Semaphore>,
    total_kib: u32,
}

impl PieceBudget {
    pub(super) fn new(bytes: u64) -> PieceBudget {
        let total_kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX >> 3);
        PieceBudget {
            kib: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    /// Room for `bytes`, waiting at most [`BUDGET_WAIT`]; `None` when it
    /// does not come (or the value is larger than the whole budget).
    async fn take(&self, bytes: u64) -> Option<SemaphorePermit<'_>> {
        let kib = u32::try_from(bytes.div_ceil(1024)).ok()?;
        if kib > self.total_kib {
            return None;
        }
        tokio::time::timeout(BUDGET_WAIT, self.kib.acquire_many(kib))
            .await
            .ok()?
            .ok()
    }

    /// As [`Self::take`], for room held past a borrow of the fleet (a
    /// piece queued for the writer's task, stream_out.rs).
    async fn take_owned(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(bytes.div_ceil(1024)).ok()?;
        if kib > self.total_kib {
            return None;
        }
        tokio::time::timeout(BUDGET_WAIT, self.kib.clone().acquire_many_owned(kib))
            .await
            .ok()?
            .ok()
    }
}

impl Fleet {
    /// The Redis key of piece `i` of generation `gen` of an object under
    /// the URI hash `hash`: its own hash tag (spread over a cluster).
    pub(super) fn piece_key(&self, hash: &str, gen: u64, i: usize) -> String {
        format!("{}{{{hash}.{gen:016x}.{i}}}:b", self.cfg.prefix)
    }

    /// Room in the piece budget for `bytes`, or `None` (counted).
    pub(super) async fn piece_room(&self, bytes: u64) -> Option<SemaphorePermit<'_>> {
        let room = self.pieces.take(bytes).await;
        if room.is_none() {
            self.stats
                .pieces_over_budget
                .fetch_add(1, Ordering::Relaxed);
        }
        room
    }

    /// Room in the piece budget for `bytes`, held past a borrow of the
    /// fleet, or `None` (counted).
    pub(super) async fn piece_room_owned(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let room = self.pieces.take_owned(bytes).await;
        if room.is_none() {
            self.stats
                .pieces_over_budget
                .fetch_add(1, Ordering::Relaxed);
        }
        room
    }

    /// Writes `value` (an entry's value for `target`) to Redis as pieces,
    /// each living `keep` plus the margin; the manifest to commit, or
    /// `None` when a piece could not be written (the fill stays local).
    pub(super) async fn put_pieces(
        &self,
        target: &Target,
        value: Vec<u8>,
        keep: Duration,
    ) -> Option<Manifest> {
        let gen = rand::random::<u64>();
        let entry = target.meta.clone();
        let value = Arc::new(value);
        let hashed = value.clone();
        let manifest = tokio::task::spawn_blocking(move || Manifest::of(&entry, gen, &hashed))
            .await
            .ok()?;
        let ttl_ms = u64::try_from((keep + PIECE_TTL_MARGIN).as_millis()).unwrap_or(u64::MAX);
        let started = tokio::time::Instant::now();
        let manifest_ref = &manifest;
        let value_ref = &value;
        stream::iter(0..manifest.count())
            .map(Ok::<usize, ()>)
            .try_for_each_concurrent(PIECES_AT_ONCE, |i| async move {
                let key = self.piece_key(&target.hash, gen, i);
                let piece = &value_ref[manifest_ref.range(i)];
                self.put_piece(&key, piece, ttl_ms).await.ok_or(())
            })
            .await
            .ok()?;
        if started.elapsed() > PIECE_TTL_MARGIN {
            return None;
        }
        self.stats
            .pieces_written
            .fetch_add(manifest.count() as u64, Ordering::Relaxed);
        Some(manifest)
    }

    pub(super) async fn put_piece(&self, key: &str, piece: &[u8], ttl_ms: u64) -> Option<()> {
        self.link
            .call(Op::PutPiece, |mut conn| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(piece)
                    .arg("PX")
                    .arg(ttl_ms)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }

    /// The value `manifest` lists for `target`, its pieces read (a few at
    /// once, each with the call deadline) and verified; a piece missing,
    /// short or not matching its digest makes the whole copy a miss
    /// (counted): no part of it is ever used.
    pub(super) async fn read_pieces(
        &self,
        target: &Target,
        manifest: Manifest,
    ) -> Result<Vec<u8>, PieceError> {
        let len = usize::try_from(manifest.len).map_err(|_| PieceError::TooLarge)?;
        let mut value = Vec::with_capacity(len);
        let manifest_ref = &manifest;
        let mut pieces = stream::iter(0..manifest.count())
            .map(|i| async move {
                let key = self.piece_key(&target.hash, manifest_ref.gen, i);
                (i, self.get_piece(&key).await)
            })
            .buffered(PIECES_AT_ONCE);
        while let Some((i, piece)) = pieces.next().await {
            let piece = piece.ok_or(PieceError::Missing)?;
            if piece.len() != manifest.range(i).len() {
                return Err(PieceError::Short);
            }
            value.extend_from_slice(&piece);
        }
        drop(pieces);
        let entry = target.meta.clone();
        let count = manifest.count() as u64;
        let value =
            tokio::task::spawn_blocking(move || manifest.verify(&entry, &value).map(|()| value))
                .await
                .map_err(|_| PieceError::Missing)??;
        self.stats.pieces_read.fetch_add(count, Ordering::Relaxed);
        Ok(value)
    }

    pub(super) async fn get_piece(&self, key: &str) -> Option<Vec<u8>> {
        self.link
            .call(Op::GetPiece, |mut conn| async move {
                redis::cmd("GET")
                    .arg(key)
                    .query_async::<Option<Vec<u8>>>(&mut conn)
                    .await
            })
            .await
            .flatten()
    }
}

#[cfg(test)]
#[path = "pieces_tests.rs"]
mod tests;
