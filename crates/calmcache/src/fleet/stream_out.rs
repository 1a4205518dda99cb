//! A leader's body written to Redis as it arrives, so that the other
//! nodes stream it before it is complete (stream_in.rs). The fill hands
//! each chunk to a [`PieceWriter`]; past one piece size, every
//! [`PIECE_SIZE`] bytes become a piece (the body's bytes only: the disk
//! format's header needs the body's length, which a chunked origin tells
//! only at its end), and after each piece the writing record
//! ([`super::record`]) lists the digests written so far. When the body is
//! complete the manifest (`CCM2`: the digests and the object's head) is
//! committed by the commit script as any entry (fence and purge rules);
//! then the record goes.
//!
//! A fill that ends otherwise (origin error, too large, not kept, stopped)
//! drops its writer: the record and the pieces it wrote are deleted (one
//! piece still on the wire may land after and lapse with its TTL), and the
//! lease is released, so a follower sees the lease go without a manifest
//! and cuts its clients.
//!
//! Pieces go to Redis from a task of the writer's own, at most
//! [`PIECES_AT_ONCE`] at once, each under the `fleet.timeout` deadline.
//! A piece queued holds its room in `fleet.max_pieces_in_flight` until it
//! is written: the fill never waits for Redis unless that budget is full
//! (then at most a second, past which the writing is abandoned). A piece
//! that fails ends the writing (abandoned as above); the fill goes on, and
//! stays local.
//!
//! Owns: the writer and its commit. Must not: import the request path, or
//! decide whether a fill may share (proxy/fill/fleet.rs does).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use calmcache_core::disk::format::encode_object;
use calmcache_core::{CacheKey, CachedObject};
use futures_util::stream::{self, StreamExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::entries::{Kept, Target};
use super::ops_stats::Op;
use super::pieces::{digest, Manifest, PIECES_AT_ONCE, PIECE_SIZE, PIECE_TTL_MARGIN};
use super::record::Record;
use super::{Fleet, Lease, LOG};

/// How long a body may take to arrive and still be committed: its pieces
/// live this much longer than the object's keep (plus the margin), so the
/// manifest never outlives its first piece.
const STREAM_SPAN: Duration = Duration::from_secs(600);

type PieceDigest = [u8; 32];

/// A piece queued for the writer's task, and its room in the budget.
type Queued = (Bytes, OwnedSemaphorePermit);

/// One fill's body going to Redis as it arrives.
pub(crate) struct PieceWriter {
    writing: Arc<Writing>,
    lease: Option<Lease>,
    /// To the task that writes the pieces, each with its room in the
    /// budget; `None` once finished.
    sender: Option<mpsc::UnboundedSender<Queued>>,
    /// The task: the digests of every piece written, or `None` when one
    /// failed. `None` once finished (nothing left to abandon).
    task: Option<JoinHandle<Option<Vec<PieceDigest>>>>,
    /// The bytes of the next piece.
    buf: BytesMut,
    /// Pieces handed to the task.
    sent: usize,
    /// Body bytes so far.
    total: u64,
}

/// What the writer's task and its commit share.
struct Writing {
    fleet: Arc<Fleet>,
    /// The object's key (what the record and the manifest are sealed for).
    key: CacheKey,
    target: Target,
    gen: u64,
    token: String,
    since_ms: u64,
    /// The record's head: the object with an empty body, disk format.
    head: Vec<u8>,
    /// Each piece's TTL.
    piece_ttl_ms: u64,
    started: Instant,
}

impl PieceWriter {
    /// A writer for the body of `head` (the object as known from the
    /// response head, with an empty body), stored under `key` with the
    /// lease it takes from `lease`; `None`, the lease left there, when its
    /// body cannot be written as it arrives (a variant's lease, or a head
    /// the format cannot hold).
    pub(crate) fn start(
        lease: &mut Option<Lease>,
        key: &CacheKey,
        head: &CachedObject,
    ) -> Option<Self> {
        if lease.as_ref()?.target.variant.is_some() {
            return None;
        }
        let head_value = encode_object(key, head, SystemTime::now()).ok()?;
        let lease = lease.take()?;
        let keep = Kept::of(head).keep + PIECE_TTL_MARGIN + STREAM_SPAN;
        let writing = Arc::new(Writing {
            fleet: lease.fleet.clone(),
            key: key.clone(),
            target: lease.target.clone(),
            gen: rand::random::<u64>(),
            token: lease.token.clone(),
            since_ms: lease.since_ms,
            head: head_value,
            piece_ttl_ms: u64::try_from(keep.as_millis()).unwrap_or(u64::MAX),
            started: Instant::now(),
        });
        let (sender, pieces) = mpsc::unbounded_channel();
        let task = tokio::spawn(writing.clone().write(pieces));
        Some(PieceWriter {
            writing,
            lease: Some(lease),
            sender: Some(sender),
            task: Some(task),
            buf: BytesMut::new(),
            sent: 0,
            total: 0,
        })
    }

    /// Takes one chunk of the body; `false` when the writing failed (the
    /// writer is then to be dropped: abandoned).
    pub(crate) async fn push(&mut self, data: &[u8]) -> bool {
        self.total += data.len() as u64;
        self.buf.extend_from_slice(data);
        // A piece goes once the body is past it: a body of one piece or
        // less is committed whole, as before.
        while self.buf.len() > PIECE_SIZE {
            let piece = self.buf.split_to(PIECE_SIZE).freeze();
            if !self.send(piece).await {
                return false;
            }
        }
        true
    }

    async fn send(&mut self, piece: Bytes) -> bool {
        let fleet = &self.writing.fleet;
        let Some(room) = fleet.piece_room_owned(piece.len() as u64).await else {
            return false;
        };
        let Some(sender) = &self.sender else {
            return false;
        };
        self.sent += 1;
        sender.send((piece, room)).is_ok()
    }

    /// The body is complete and `head` (the object as stored, with an
    /// empty body) is what its manifest carries: the last piece is written
    /// and the manifest committed, off the fill (a tracked task). Returns
    /// the lease when no piece was written (a body of one piece or less):
    /// the fill commits it whole, as any small object.
    pub(crate) fn finish(mut self, head: CachedObject) -> Option<Lease> {
        if self.sent == 0 {
            self.sender = None;
            if let Some(task) = self.task.take() {
                task.abort();
            }
            return self.lease.take();
        }
        let last = self.buf.split().freeze();
        let (sender, task, lease) = (self.sender.take()?, self.task.take()?, self.lease.take()?);
        let writing = self.writing.clone();
        let total = self.total;
        self.writing.fleet.clone().spawn(async move {
            if !last.is_empty() {
                let room = writing.fleet.piece_room_owned(last.len() as u64).await;
                if let Some(room) = room {
                    let _ = sender.send((last, room));
                }
            }
            drop(sender);
            let digests = task.await.ok().flatten();
            writing.commit(lease, digests, head, total).await;
        });
        None
    }
}

impl Drop for PieceWriter {
    /// Not finished: the writing is abandoned (record and pieces deleted,
    /// the lease released as it drops).
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        task.abort();
        self.sender = None;
        let writing = self.writing.clone();
        let sent = self.sent;
        if tokio::runtime::Handle::try_current().is_ok() {
            writing
                .fleet
                .clone()
                .spawn(async move { writing.forget(sent).await });
        }
    }
}

impl Writing {
    /// The writer's task: each piece digested (off the async workers) and
    /// put, a few at once, then the record listing every piece written so
    /// far; the digests, or `None` once a piece or a record failed.
    async fn write(
        self: Arc<Self>,
        pieces: mpsc::UnboundedReceiver<Queued>,
    ) -> Option<Vec<PieceDigest>> {
        let pieces = stream::unfold(
            pieces,
            |mut rx| async move { rx.recv().await.map(|p| (p, rx)) },
        );
        let me = &self;
        let written = pieces
            .enumerate()
            .map(|(i, (piece, room))| async move {
                // The room goes once the piece is written.
                let written = me.put(i, piece).await;
                drop(room);
                written
            })
            .buffered(PIECES_AT_ONCE);
        let mut written = std::pin::pin!(written);
        let mut digests = Vec::new();
        while let Some(d) = written.next().await {
            digests.push(d?);
            self.put_record(&digests).await?;
        }
        Some(digests)
    }

    async fn put(&self, i: usize, piece: Bytes) -> Option<PieceDigest> {
        let entry = self.target.meta.clone();
        let (gen, hashed) = (self.gen, piece.clone());
        let d = tokio::task::spawn_blocking(move || digest(&entry, gen, i, &hashed))
            .await
            .ok()?;
        let key = self.fleet.piece_key(&self.target.hash, self.gen, i);
        self.fleet
            .put_piece(&key, &piece, self.piece_ttl_ms)
            .await?;
        Some(d)
    }

    /// The record listing `digests`, living three leases (its writer's
    /// lease is what tells a follower the writer is alive).
    async fn put_record(&self, digests: &[PieceDigest]) -> Option<()> {
        let record = Record {
            gen: self.gen,
            token: self.token.clone(),
            head: self.head.clone(),
            digests: digests.to_vec(),
        };
        let value = self.fleet.seal_record(&self.key, self.since_ms, &record);
        let key = self.fleet.key(&self.target.hash, "w");
        let ttl_ms = u64::try_from((self.fleet.cfg.lease * 3).as_millis()).unwrap_or(u64::MAX);
        self.fleet
            .link
            .call(Op::PutPiece, |mut conn| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value)
                    .arg("PX")
                    .arg(ttl_ms)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }

    /// The manifest of `digests` (a body of `total` bytes, `head` its
    /// object) committed under `lease`; the writing forgotten when it
    /// cannot be (a piece failed, too slow, refused: purged meanwhile, a
    /// later lease), else only its record.
    async fn commit(
        &self,
        mut lease: Lease,
        digests: Option<Vec<PieceDigest>>,
        head: CachedObject,
        total: u64,
    ) {
        let count = total.div_ceil(PIECE_SIZE as u64) as usize;
        let whole = digests.filter(|d| d.len() == count);
        let in_time = self.started.elapsed() < STREAM_SPAN;
        let stored_at = SystemTime::now() - head.meta.stored_at.elapsed();
        let head_value = encode_object(&self.key, &head, stored_at).ok();
        let (Some(digests), true, Some(head_value)) = (whole, in_time, head_value) else {
            tracing::debug!(target: LOG, key = %self.key, "body written as it arrived not committed");
            return self.forget(count).await; // Dropping the lease releases it.
        };
        let manifest = Manifest {
            gen: self.gen,
            len: total,
            // Invariant: PIECE_SIZE is 256 KiB, within u32.
            piece_size: PIECE_SIZE as u32,
            digests,
            head: Some(head_value),
        };
        let blob = match self.fleet.signer() {
            Some(signer) => signer.seal_entry(&self.key, lease.since_ms, &manifest.encode()),
            None => manifest.encode(),
        };
        let stored = self
            .fleet
            .run_commit(&lease, &self.target, Kept::of(&head), blob)
            .await;
        self.fleet.settle(&mut lease, stored);
        match stored {
            Some(1) => {
                let fleet = &self.fleet;
                fleet
                    .stats
                    .pieces_written
                    .fetch_add(count as u64, Ordering::Relaxed);
                self.forget_record().await;
            }
            _ => self.forget(count).await,
        }
    }

    /// The record and the first `count` pieces deleted (best effort: what
    /// Redis does not answer for lapses with its TTL).
    async fn forget(&self, count: usize) {
        self.forget_record().await;
        let fleet = &self.fleet;
        let keys: Vec<String> = (0..count)
            .map(|i| fleet.piece_key(&self.target.hash, self.gen, i))
            .collect();
        stream::iter(keys.iter())
            .for_each_concurrent(PIECES_AT_ONCE, |key| async move {
                fleet
                    .link
                    .call(Op::PutPiece, |mut conn| async move {
                        redis::cmd("DEL")
                            .arg(key)
                            .query_async::<()>(&mut conn)
                            .await
                    })
                    .await;
            })
            .await;
        fleet
            .stats
            .pieces_forgotten
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    /// The record deleted, if it is still this writing's.
    async fn forget_record(&self) {
        let key = self.fleet.key(&self.target.hash, "w");
        let gen = self.gen.to_le_bytes();
        let script = &*FORGET_RECORD;
        let (key, gen) = (&key, &gen[..]);
        self.fleet
            .link
            .call(Op::PutPiece, |mut conn| async move {
                script
                    .key(key)
                    .arg(gen)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await;
    }
}

static FORGET_RECORD: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(super::scripts::forget_record);
