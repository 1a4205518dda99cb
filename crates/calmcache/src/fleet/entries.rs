//! The shared tier's values: where an object lives in Redis (a URI's
//! entry or one variant's), the acquire script's answer read back
//! (lookup and lease in one call on the key's slot), a value verified
//! before use (disk format, framing, signature), and the commit that stores
//! a fill's object off the request path.
//!
//! Must not: decide whether to wait or fetch (lease.rs), touch the purge
//! stream, or import the request path.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use calmcache_core::disk::format::{encode_object, parse_object};
use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::{CacheKey, CachedObject};
use http::HeaderName;
use redis::Value;
use tokio::time::Instant;

use super::ops_stats::Op;
use super::pieces::{self, Manifest, PieceError, PIECE_SIZE};
use super::LOG;

use super::lease::Lease;
use super::Fleet;

/// Where one object lives in Redis: a URI's (`:m`, `:l`), or one variant
/// of a URI whose responses vary (`:v:S`, `:vl:S`).
#[derive(Clone)]
pub(super) struct Target {
    /// The URI's hash tag.
    pub(super) hash: String,
    /// The URI's key (its purge floor, purge_floor.rs).
    pub(super) uri: CacheKey,
    /// The object's entry.
    pub(super) meta: String,
    /// Its lease.
    pub(super) lease: String,
    /// For a variant: the names it varies on (as Redis keeps them), its
    /// selecting values, and `S`.
    pub(super) variant: Option<(String, String, String)>,
}

impl Target {
    pub(super) fn uri(fleet: &Fleet, key: &CacheKey, hash: &str) -> Target {
        Target {
            hash: hash.to_owned(),
            uri: key.clone(),
            meta: fleet.key(hash, "m"),
            lease: fleet.key(hash, "l"),
            variant: None,
        }
    }

    pub(super) fn variant(
        fleet: &Fleet,
        hash: &str,
        primary: &CacheKey,
        names: &str,
        secondary: &str,
    ) -> Target {
        let s = variant_id(primary, secondary);
        Target {
            hash: hash.to_owned(),
            uri: primary.clone(),
            meta: fleet.key(hash, &format!("v:{s}")),
            lease: fleet.key(hash, &format!("vl:{s}")),
            variant: Some((names.to_owned(), secondary.to_owned(), s)),
        }
    }
}

/// The answer of the acquire script.
pub(super) enum Acquired {
    /// The blob, and when its lease was taken (`since_ms`, signed with it).
    Newer(Vec<u8>, u64),
    Ours {
        fence: u64,
        now_ms: u64,
        token: String,
    },
    Held {
        pttl_ms: i64,
        /// The writing record in Redis (record.rs) and the token holding
        /// the lease: the holder's when the record names it.
        record: Option<(Vec<u8>, String)>,
    },
    /// The URI's responses vary on these names (comma-separated).
    Varies(String),
}

impl Fleet {
    pub(super) async fn acquire(
        &self,
        target: &Target,
        ours_ms: u64,
        try_lease: bool,
    ) -> Option<Acquired> {
        let keys = [
            target.meta.clone(),
            target.lease.clone(),
            self.key(&target.hash, "f"),
            self.key(&target.hash, "w"),
        ];
        let token = self.token();
        let sent = token.clone();
        let lease_ms = u64::try_from(self.cfg.lease.as_millis()).unwrap_or(u64::MAX);
        let purged_before = self.floors.floor(&target.uri);
        let script = &self.acquire;
        let keys = &keys;
        let value: Option<Value> = self
            .link
            .call(Op::Acquire, |mut conn| async move {
                script
                    .key(&keys[0])
                    .key(&keys[1])
                    .key(&keys[2])
                    .key(&keys[3])
                    .arg(ours_ms)
                    .arg(sent.as_str())
                    .arg(lease_ms)
                    .arg(purged_before)
                    .arg(u8::from(try_lease))
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
        let Some(Value::Array(items)) = value else {
            // Unanswered in time, the script may still have run and taken
            // the lease for a fetch that will not happen: let it go once
            // Redis answers (the other nodes need not wait out its TTL).
            if try_lease {
                self.unreleased().push_within(keys[1].clone(), token);
            }
            return None;
        };
        match items.as_slice() {
            [Value::Int(1), Value::BulkString(blob), Value::Int(since)] => {
                Some(Acquired::Newer(blob.clone(), u64::try_from(*since).ok()?))
            }
            [Value::Int(2), Value::Int(fence), Value::Int(now)] => Some(Acquired::Ours {
                fence: u64::try_from(*fence).ok()?,
                now_ms: u64::try_from(*now).ok()?,
                token,
            }),
            [Value::Int(3), Value::Int(pttl), record, holder] => Some(Acquired::Held {
                pttl_ms: *pttl,
                record: match (record, holder) {
                    (Value::BulkString(record), Value::BulkString(holder)) => {
                        Some((record.clone(), String::from_utf8_lossy(holder).into_owned()))
                    }
                    _ => None,
                },
            }),
            [Value::Int(4), Value::BulkString(names)] => {
                Some(Acquired::Varies(String::from_utf8(names.clone()).ok()?))
            }
            _ => None,
        }
    }

    /// A copy read from Redis (an acquire's answer), verified; `None`
    /// (counted) when it is not a whole, intact object stored for `target`
    /// of `key` (for a variant: under its variant key, with the request's
    /// selecting values) by a lease taken at `since_ms`, or, with the fleet
    /// secret, not signed for them or no longer current. An entry that
    /// lists pieces ([`super::pieces`]) has them read and verified first:
    /// one missing or wrong piece makes the whole copy a miss.
    pub(super) async fn take_copy(
        &self,
        key: &CacheKey,
        target: &Target,
        blob: Vec<u8>,
        since_ms: u64,
    ) -> Option<Arc<CachedObject>> {
        let expected = expected_key(key, target);
        let value = self.open_value(key, &expected, blob, since_ms)?;
        if !pieces::is_manifest(&value) {
            let parsed = parse_object(value, Some(&expected.as_ref()), true);
            return self.check_parsed(key, target, parsed, since_ms);
        }
        let (_room, value, head) = self.pieces_of(key, target, &value).await?;
        let parsed = tokio::task::spawn_blocking(move || match head {
            // A body streamed as it arrived: its head, then the body.
            Some(head) => parse_object(head, Some(&expected.as_ref()), true)
                .map(|(key, object)| (key, with_body(object, bytes::Bytes::from(value)))),
            None => parse_object(value, Some(&expected.as_ref()), true),
        })
        .await
        .ok()?;
        self.check_parsed(key, target, parsed, since_ms)
    }

    /// The entry's value: with the fleet secret, only when its signature
    /// verifies for `expected` and `since_ms` (else refused and counted).
    fn open_value(
        &self,
        key: &CacheKey,
        expected: &CacheKey,
        blob: Vec<u8>,
        since_ms: u64,
    ) -> Option<Vec<u8>> {
        let Some(signer) = self.signer() else {
            return Some(blob);
        };
        let value = signer.open_entry(expected, since_ms, blob);
        if value.is_none() {
            self.refused_entry(key);
        }
        value
    }

    /// The value a manifest lists, read and verified, with the room it
    /// takes in the piece budget (held while it is parsed); `None` (counted
    /// as a bad entry) when a piece is missing or wrong, or when the budget
    /// has no room (counted there).
    async fn pieces_of(
        &self,
        key: &CacheKey,
        target: &Target,
        manifest: &[u8],
    ) -> Option<(tokio::sync::SemaphorePermit<'_>, Vec<u8>, Option<Vec<u8>>)> {
        let max = self.cfg.max_object_size.saturating_add(VALUE_ROOM);
        let manifest = match Manifest::decode(manifest, max) {
            Ok(manifest) => manifest,
            Err(e) => {
                if e != PieceError::TooLarge {
                    self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(target: LOG, key = %key, error = ?e, "manifest in redis not used: a miss");
                return None;
            }
        };
        let room = self.piece_room(manifest.len).await?;
        let head = manifest.head.clone();
        match self.read_pieces(target, manifest).await {
            Ok(value) => Some((room, value, head)),
            Err(e) => {
                self.stats.pieces_bad.fetch_add(1, Ordering::Relaxed);
                self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(target: LOG, key = %key, error = ?e, "pieces in redis not whole: a miss");
                None
            }
        }
    }

    /// A parsed value's object when it is what `target` of `key` needs
    /// (see [`Self::take_copy`]); counted as a bad entry otherwise.
    fn check_parsed(
        &self,
        key: &CacheKey,
        target: &Target,
        parsed: Result<(CacheKey, CachedObject), calmcache_core::disk::format::FormatError>,
        since_ms: u64,
    ) -> Option<Arc<CachedObject>> {
        match parsed {
            Ok((_, object))
                if object.vary_index().is_none()
                    && object.variant() == target.variant.as_ref().map(|v| v.1.as_str())
                    && framing_agrees(&object)
                    && (!self.signed() || self.current(&target.uri, &object, since_ms)) =>
            {
                Some(Arc::new(object))
            }
            Ok(_) => {
                self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                self.stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(target: LOG, key = %key, error = %e, "bad entry in redis: a miss");
                None
            }
        }
    }

    /// A signed entry's own (signed) times allow its use: its lease came
    /// after the last purge of it that named no key (its purge floor), and it is fresh
    /// by its own meta. Redis' `since_ms` and `fresh_until_ms` fields are
    /// not signed: an old entry put back with newer ones is refused here.
    pub(super) fn current(&self, uri: &CacheKey, object: &CachedObject, since_ms: u64) -> bool {
        since_ms >= self.floors.floor(uri) && object.meta.is_fresh(Instant::now())
    }

    /// An entry or Vary marker that did not verify: counted, logged (rate
    /// limited: a forger can write many).
    pub(super) fn refused_entry(&self, key: &CacheKey) {
        self.stats.entries_refused.fetch_add(1, Ordering::Relaxed);
        static REFUSED: WarnLimit = WarnLimit::new();
        calmcache_core::warn_limited!(
            REFUSED,
            "a fleet entry in redis has no valid signature (forged, or written by a node \
             with another secret or none): refused, fetched from the origin",
            target: LOG,
            key = %key
        );
    }

    /// The Vary names Redis keeps for the URI `key`: with the fleet secret,
    /// only when their signature verifies (else refused and counted).
    pub(super) fn open_names<'a>(&self, key: &CacheKey, text: &'a str) -> Option<&'a str> {
        let Some(signer) = self.signer() else {
            return Some(text);
        };
        let names = signer.open_names(key, text);
        if names.is_none() {
            self.refused_entry(key);
        }
        names
    }

    /// The Vary names `names` of the URI `primary` as Redis keeps them
    /// (signed with the fleet secret).
    pub(super) fn names_for_redis(&self, primary: &CacheKey, names: &str) -> String {
        match self.signer() {
            Some(signer) => signer.seal_names(primary, names),
            None => names.to_owned(),
        }
    }

    /// After `object` was stored locally by a fill for the URI `primary`
    /// that held `lease` (`names`: the request headers the response varies
    /// on, when it does): stores it in Redis off the request path (larger
    /// ones stay local; the lease is released either way).
    pub(crate) fn commit(
        &self,
        lease: Lease,
        primary: &CacheKey,
        object: Arc<CachedObject>,
        names: Option<&[HeaderName]>,
    ) {
        if !self.fits(&object) {
            self.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return; // Dropping the lease releases it.
        }
        let Some((target, key)) = self.commit_target(&lease, primary, &object, names) else {
            return;
        };
        let fleet = self.arc();
        self.spawn(async move { fleet.store(lease, target, key, object).await });
    }

    /// `object` may go to Redis: not a Vary marker, and within
    /// `fleet.max_object_size` (a body left in a disk zone's file counts
    /// whole: it is read back).
    fn fits(&self, object: &CachedObject) -> bool {
        let in_file = object.lazy_body().map_or(0, |l| l.len);
        object.vary_index().is_none()
            && object.weight() as u64 + in_file <= self.cfg.max_object_size
    }

    /// Where it goes, and the key it is stored under: the URI's entry, or
    /// its variant's (the lease was taken on the URI before it was known to
    /// vary, or on the variant). `None` when the response no longer matches
    /// what the lease was for (the URI stopped or started varying): it
    /// stays local.
    fn commit_target(
        &self,
        lease: &Lease,
        primary: &CacheKey,
        object: &CachedObject,
        names: Option<&[HeaderName]>,
    ) -> Option<(Target, CacheKey)> {
        match (object.variant(), names, &lease.target.variant) {
            (None, None, None) => Some((lease.target.clone(), primary.clone())),
            (Some(secondary), Some(names), None) => {
                let text = self.names_for_redis(primary, &names_text(names));
                let target = Target::variant(self, &lease.target.hash, primary, &text, secondary);
                Some((target, fleet_variant_key(primary, secondary)))
            }
            (Some(secondary), Some(_), Some((_, leased, _))) if secondary == leased.as_str() => {
                Some((lease.target.clone(), fleet_variant_key(primary, secondary)))
            }
            _ => None,
        }
    }

    /// The task [`Self::commit`] spawns: `object` under `target` with the
    /// lease's fence, counted; a value over one piece goes as pieces, then
    /// its manifest ([`super::pieces`]). Returning before the script
    /// answers drops the lease, which releases it.
    async fn store(
        &self,
        mut lease: Lease,
        target: Target,
        key: CacheKey,
        object: Arc<CachedObject>,
    ) {
        let kept = Kept::of(&object);
        let size = object.weight() as u64 + object.lazy_body().map_or(0, |l| l.len);
        let large = size > PIECE_SIZE as u64;
        // Room for the value before it is made (a body in a file is not
        // read yet): a burst of large fills waits here, or stays local.
        let room = match large {
            true => match self.piece_room(size).await {
                Some(room) => Some(room),
                None => return,
            },
            false => None,
        };
        let blocking = large || object.lazy_body().is_some();
        let Some(value) = self.value_of(&key, object, blocking).await else {
            return;
        };
        let value = match value.len() > PIECE_SIZE {
            true => match self.put_pieces(&target, value, kept.keep).await {
                Some(manifest) => manifest.encode(),
                None => return,
            },
            false => value,
        };
        drop(room);
        let blob = match self.signer() {
            Some(signer) => signer.seal_entry(&key, lease.since_ms, &value),
            None => value,
        };
        let stored = self.run_commit(&lease, &target, kept, blob).await;
        self.settle(&mut lease, stored);
    }

    /// After the commit script ran for `lease` (`stored`: its answer):
    /// the lease settled (the script released it, when it answered), and
    /// counted.
    pub(super) fn settle(&self, lease: &mut Lease, stored: Option<i64>) {
        lease.settled(stored.is_some());
        match stored {
            Some(1) => {
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
            }
            Some(refused) => {
                self.stats.commits_refused.fetch_add(1, Ordering::Relaxed);
                if refused < 0 {
                    // A later lease stored first: ours had expired.
                    self.stats.leases_lost.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Redis failed: the lease expires by itself.
            None => {}
        }
    }

    /// `object`'s value in Redis, the disk format (a body in a file is read
    /// back); `blocking`: made on a blocking thread (a file read, or tens
    /// of MiB copied), and the object read back is dropped once its value
    /// is made. `None` (logged) when it cannot be made.
    async fn value_of(
        &self,
        key: &CacheKey,
        object: Arc<CachedObject>,
        blocking: bool,
    ) -> Option<Vec<u8>> {
        let stored_at = SystemTime::now() - object.meta.stored_at.elapsed();
        let encode = {
            let key = key.clone();
            move || -> std::io::Result<Vec<u8>> {
                let object = whole_blocking(object)?;
                encode_object(&key, &object, stored_at).map_err(std::io::Error::other)
            }
        };
        let value = match blocking {
            true => tokio::task::spawn_blocking(encode)
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e))),
            false => encode(),
        };
        value
            .map_err(|e| tracing::debug!(target: LOG, key = %key, error = %e, "not put in redis"))
            .ok()
    }

    /// The commit script run for `blob` (1: stored; 0: refused, a purge
    /// came after the lease; < 0: refused, a later lease stored), kept in
    /// Redis for `kept`; `None` when Redis could not be asked.
    pub(super) async fn run_commit(
        &self,
        lease: &Lease,
        target: &Target,
        kept: Kept,
        blob: Vec<u8>,
    ) -> Option<i64> {
        let Kept {
            fresh: fresh_ms,
            keep,
        } = kept;
        let hash = &target.hash;
        let mut keys = vec![
            target.meta.clone(),
            lease.target.lease.clone(),
            self.key(hash, "p"),
        ];
        let mut vary_args = Vec::new();
        if let Some((names, _, s)) = &target.variant {
            keys.push(self.key(hash, "m"));
            keys.push(self.key(hash, "vs"));
            vary_args.push(names.clone());
            vary_args.push(s.clone());
        }
        let purged_before = self.floors.floor(&target.uri);
        let script = &self.commit;
        let token = lease.token.clone();
        let (fence, since) = (lease.fence, lease.since_ms);
        self.link
            .call(Op::Commit, |mut conn| async move {
                let mut invocation = script.prepare_invoke();
                for key in &keys {
                    invocation.key(key);
                }
                invocation
                    .arg(&token)
                    .arg(fence)
                    .arg(since)
                    .arg(u64::try_from(fresh_ms.as_millis()).unwrap_or(u64::MAX))
                    .arg(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1))
                    .arg(blob)
                    .arg(purged_before);
                for arg in &vary_args {
                    invocation.arg(arg);
                }
                invocation.invoke_async(&mut conn).await
            })
            .await
    }
}

/// `object` (parsed from a head: an empty body) with `body`.
pub(super) fn with_body(
    object: CachedObject,
    body: impl Into<calmcache_core::page_body::StoredBody>,
) -> CachedObject {
    CachedObject::assemble(
        object.meta.clone(),
        object.status,
        object.headers(),
        body,
        Vec::new(),
        object.variant().map(Box::from),
    )
}

/// `object` with its body in memory: read from its disk file if it was
/// left there (verified against the file's checksum). Blocking.
pub(super) fn whole_blocking(object: Arc<CachedObject>) -> std::io::Result<Arc<CachedObject>> {
    let Some(lazy) = object.lazy_body() else {
        return Ok(object);
    };
    let body = lazy.read_all()?;
    Ok(Arc::new(CachedObject::assemble(
        object.meta.clone(),
        object.status,
        object.headers(),
        body,
        object.encodings().to_vec(),
        object.variant().map(Box::from),
    )))
}

/// The object's `Content-Length`, if it has one, is its body's length:
/// hyper writes a stored one as it is, and a wrong one would break the
/// client's connection (a body cut short, or the next answer read as its
/// rest). A disk-format blob's CRCs cannot tell: whoever wrote it chose both.
pub(super) fn framing_agrees(object: &CachedObject) -> bool {
    object
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .map(|v| v.to_str().ok().and_then(|v| v.parse::<u64>().ok()))
        .is_none_or(|len| len == Some(object.body_len()))
}

/// How long a committed object counts as fresh in Redis, and how long its
/// entry is kept: while it is fresh or usable stale, plus a second.
#[derive(Clone, Copy)]
pub(super) struct Kept {
    fresh: Duration,
    pub(super) keep: Duration,
}

impl Kept {
    pub(super) fn of(object: &CachedObject) -> Kept {
        let fresh = object
            .meta
            .freshness
            .lifetime
            .saturating_sub(object.meta.age(Instant::now()));
        let f = &object.meta.freshness;
        let keep = fresh + f.stale_while_revalidate.max(f.stale_if_error) + Duration::from_secs(1);
        Kept { fresh, keep }
    }
}

/// What a value may hold besides the body `fleet.max_object_size` counts
/// (framing, headers): a manifest listing more is refused.
pub(super) const VALUE_ROOM: u64 = 64 * 1024;

/// The key a cache key's entry is stored under: the URI's key, or for a
/// variant the variant's.
fn expected_key(key: &CacheKey, target: &Target) -> CacheKey {
    match &target.variant {
        Some((_, secondary, _)) => fleet_variant_key(key, secondary),
        None => key.clone(),
    }
}

/// The key a variant is stored under in Redis: the URI's key with the
/// selecting values, and no generation (nodes number their own markers).
pub(super) fn fleet_variant_key(primary: &CacheKey, secondary: &str) -> CacheKey {
    primary.as_ref().variant(0, secondary)
}

/// `S` in a variant's keys: the hash of its Redis key.
pub(super) fn variant_id(primary: &CacheKey, secondary: &str) -> String {
    hash_of(&fleet_variant_key(primary, secondary))
}

/// Vary names as Redis keeps them: comma-separated.
pub(super) fn names_text(names: &[HeaderName]) -> String {
    names
        .iter()
        .map(HeaderName::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

/// Names read back from Redis; `None` when any is not a header name.
pub(super) fn parse_names(text: &str) -> Option<Vec<HeaderName>> {
    let names: Option<Vec<HeaderName>> = text
        .split(',')
        .map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .collect();
    names.filter(|n| !n.is_empty())
}

/// The hash tag of `key`'s Redis keys.
pub(super) fn hash_of(key: &CacheKey) -> String {
    format!("{:016x}", calmcache_core::disk::key_hash(&key.as_ref()))
}
