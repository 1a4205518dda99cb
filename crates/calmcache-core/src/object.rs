//! A stored response: its metadata (freshness, timing), its shared body and
//! encodings, and the Vary bookkeeping (RFC 9111 §4.1).
//!
//! Under a URI's primary key sits either a response (no `Vary`) or a
//! [`VaryIndex`] marker naming the request headers its variants differ by;
//! each variant then lives under the primary key extended with those
//! headers' normalised values.

use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::freshness::Freshness;

/// Everything the cache needs to decide about an object, without its body.
#[derive(Clone, Debug)]
pub struct ObjectMeta {
    /// When it was stored (monotonic; `tokio` time so tests can pause the clock).
    pub stored_at: Instant,
    /// Freshness computed when it was stored.
    pub freshness: Freshness,
    /// How long the origin took to produce it: the delta of XFetch/SUS.
    pub fetch_time: Duration,
}

impl ObjectMeta {
    /// How long it has been in the cache at `now`.
    pub fn resident(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stored_at)
    }

    /// RFC 9111 §4.2.3: current_age = corrected_initial_age + resident_time.
    pub fn age(&self, now: Instant) -> Duration {
        self.freshness
            .initial_age
            .saturating_add(self.resident(now))
    }

    /// The instant it stops being fresh.
    pub fn expires_at(&self) -> Instant {
        later(self.stored_at, self.freshness.fresh_for())
    }

    /// Seconds of freshness left at `now` (lifetime minus current age);
    /// negative once stale, by how stale it is.
    pub fn ttl_left(&self, now: Instant) -> f64 {
        self.freshness.lifetime.as_secs_f64() - self.age(now).as_secs_f64()
    }

    /// SUS's delta (seed 002): the fetch time, but at least 10% of the lifetime.
    pub fn sus_delta(&self) -> Duration {
        self.fetch_time.max(self.freshness.lifetime / 10)
    }

    /// Expired less than one SUS delta ago: a refresh started in the window
    /// may still be landing, so SUS keeps answering from this copy.
    pub fn within_refresh_landing(&self, now: Instant) -> bool {
        self.within(now, self.sus_delta())
    }

    /// Fresh, or expired less than `window` ago.
    pub fn within(&self, now: Instant, window: Duration) -> bool {
        now < later(self.expires_at(), window)
    }

    /// Still inside its freshness lifetime.
    pub fn is_fresh(&self, now: Instant) -> bool {
        now < self.expires_at()
    }

    /// Stale, but inside the stale-while-revalidate window.
    pub fn within_stale_while_revalidate(&self, now: Instant) -> bool {
        now < later(self.expires_at(), self.freshness.stale_while_revalidate)
    }

    /// Stale, but inside the stale-if-error window.
    pub fn within_stale_if_error(&self, now: Instant) -> bool {
        now < later(self.expires_at(), self.freshness.stale_if_error)
    }
}

/// `at + d`, saturating at about 30 years: windows come from the origin
/// (capped at 2^31 s) and the config, and must never overflow an `Instant`.
fn later(at: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    at.checked_add(d.min(FAR)).unwrap_or(at)
}

/// A complete stored response. Shared as `Arc<CachedObject>`; the body is
/// reference-counted so serving it never copies it.
#[derive(Debug)]
pub struct CachedObject {
    /// Freshness and timing.
    pub meta: ObjectMeta,
    /// Response status.
    pub status: StatusCode,
    /// End-to-end response headers as received (hop-by-hop already removed).
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
    /// The body compressed by calmcache, in the route's order of preference.
    pub encodings: Vec<Encoded>,
    /// For a variant: the normalised request header values it was selected
    /// by (part of its key), so a follower of a fill can tell whether the
    /// response it got is its own variant.
    pub variant: Option<Box<str>>,
    /// Set on a marker: this entry is not a response but the list of
    /// request headers the URI's responses vary on.
    pub vary_index: Option<VaryIndex>,
    /// Headers calmcache keeps but may not forward: RFC 9213 targeted
    /// fields, cache tags ([`TAG_FIELDS`]).
    pub has_targeted: bool,
    /// A large object read from a disk zone: `body` is empty and the body is
    /// streamed from this file region instead (bounded memory per request).
    pub lazy_body: Option<LazyBody>,
    /// Bytes this object costs a zone, computed once (eviction asks often).
    weight: usize,
}

/// The body of a large disk object, left in its file: read in chunks with
/// positioned reads (several requests can share the open file).
#[derive(Clone, Debug)]
pub struct LazyBody {
    /// The object's file, open for reading (it stays readable if the file is
    /// replaced or removed meanwhile).
    pub file: std::sync::Arc<std::fs::File>,
    /// Offset of the body in the file.
    pub offset: u64,
    /// Body length.
    pub len: u64,
    /// CRC32 the body must have (checked when the whole body is read).
    pub crc: u32,
    /// The file's path, to remove it when its body turns out corrupt.
    pub path: std::path::PathBuf,
}

impl LazyBody {
    /// Reads `len` bytes at `at` (relative to the body). Blocking.
    pub fn read_at(&self, at: u64, len: usize) -> std::io::Result<Bytes> {
        let mut buf = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&*self.file, &mut buf, self.offset + at)?;
        Ok(Bytes::from(buf))
    }

    /// Reads and verifies the whole body. Blocking.
    pub fn read_all(&self) -> std::io::Result<Bytes> {
        let len = usize::try_from(self.len)
            .map_err(|_| std::io::Error::other("body too large for memory"))?;
        let body = self.read_at(0, len)?;
        if crc32fast::hash(&body) != self.crc {
            let _ = std::fs::remove_file(&self.path);
            return Err(std::io::Error::other("cache file body checksum mismatch"));
        }
        Ok(body)
    }
}

/// One compressed form of a body.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// The `Content-Encoding` token, e.g. `br`.
    pub coding: &'static str,
    /// The encoded bytes.
    pub body: Bytes,
}

/// What a Vary marker records: a generation id (variants of an older
/// marker become unreachable when it is replaced or invalidated) and the
/// request header names, lower-cased and sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VaryIndex {
    /// Generation, part of every variant key under this marker.
    pub id: u64,
    /// Request header names the variants differ by.
    pub names: Vec<HeaderName>,
}

/// Fixed per-object bookkeeping cost charged to a zone on top of header and body bytes.
pub const OBJECT_OVERHEAD: usize = 256;

/// How long a soft-purged object may still be served stale while one
/// refresh runs (unless the origin forbade serving it stale).
pub const SOFT_PURGE_STALE: Duration = Duration::from_secs(60);

/// The freshness of an object soft-purged when it was `age` old: expired
/// then, servable stale for [`SOFT_PURGE_STALE`] (or its own longer
/// `stale-while-revalidate`), never immutable. The one rule for memory
/// copies and for the mark a disk zone writes into the file.
pub fn soft_purged(f: &Freshness, age: Duration) -> Freshness {
    let mut f = *f;
    f.lifetime = f.lifetime.min(age);
    f.stale_while_revalidate = f.stale_while_revalidate.max(SOFT_PURGE_STALE);
    f.immutable = false;
    f
}

/// The response fields that carry cache tags.
pub const TAG_FIELDS: [&str; 2] = ["cache-tag", "surrogate-key"];

/// The cache tags in `headers`: `Cache-Tag` (comma-separated) and
/// `Surrogate-Key` (space-separated), each tag trimmed, empty ones skipped.
pub fn tags_in(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    // Static names: a purge scan calls this once per object.
    static CACHE_TAG: HeaderName = HeaderName::from_static("cache-tag");
    static SURROGATE_KEY: HeaderName = HeaderName::from_static("surrogate-key");
    let comma = headers
        .get_all(&CACHE_TAG)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    let space = headers
        .get_all(&SURROGATE_KEY)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(' '));
    comma.chain(space).map(str::trim).filter(|t| !t.is_empty())
}

impl CachedObject {
    /// A copy of this object expired at `at` (a soft purge): it may be
    /// served stale for [`SOFT_PURGE_STALE`] after `at` while one refresh
    /// runs, unless the origin forbade stale serving. Bodies are shared.
    pub fn soft_purged(&self, at: Instant) -> CachedObject {
        let mut meta = self.meta.clone();
        meta.freshness = soft_purged(&self.meta.freshness, self.meta.age(at));
        CachedObject {
            meta,
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.clone(),
            encodings: self.encodings.clone(),
            variant: self.variant.clone(),
            vary_index: self.vary_index.clone(),
            has_targeted: self.has_targeted,
            lazy_body: self.lazy_body.clone(),
            weight: self.weight,
        }
    }

    /// True when this object carries `tag` (see [`tags_in`]).
    pub fn has_tag(&self, tag: &str) -> bool {
        tags_in(&self.headers).any(|t| t == tag)
    }

    /// Assembles an object and computes its weight.
    pub fn new(meta: ObjectMeta, status: StatusCode, headers: HeaderMap, body: Bytes) -> Self {
        Self::assemble(meta, status, headers, body, Vec::new(), None)
    }

    /// Assembles a response with its encodings and, for a variant, the
    /// request values it was selected by.
    pub fn assemble(
        meta: ObjectMeta,
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        encodings: Vec<Encoded>,
        variant: Option<Box<str>>,
    ) -> Self {
        let encoded: usize = encodings.iter().map(|e| e.body.len()).sum();
        let weight =
            weigh(&headers, body.len() + encoded) + variant.as_ref().map_or(0, |v| v.len());
        let has_targeted = crate::cache_control::TARGETED
            .iter()
            .any(|name| headers.contains_key(*name))
            || TAG_FIELDS.iter().any(|name| headers.contains_key(*name));
        CachedObject {
            meta,
            status,
            headers,
            body,
            encodings,
            variant,
            vary_index: None,
            has_targeted,
            lazy_body: None,
            weight,
        }
    }

    /// A Vary marker for a URI whose responses vary on `index.names`.
    pub fn marker(meta: ObjectMeta, index: VaryIndex) -> Self {
        let weight = OBJECT_OVERHEAD
            + index
                .names
                .iter()
                .map(|n| n.as_str().len() + 32)
                .sum::<usize>();
        CachedObject {
            meta,
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            encodings: Vec::new(),
            variant: None,
            vary_index: Some(index),
            has_targeted: false,
            lazy_body: None,
            weight,
        }
    }

    /// The same response with new metadata and headers (a 304 merged into
    /// it, RFC 9111 §4.3.4): body and encodings are shared, not copied.
    pub fn freshened(&self, meta: ObjectMeta, headers: HeaderMap) -> Self {
        Self::assemble(
            meta,
            self.status,
            headers,
            self.body.clone(),
            self.encodings.clone(),
            self.variant.clone(),
        )
    }

    /// The body's length, whether in memory or left in a file.
    pub fn body_len(&self) -> u64 {
        match &self.lazy_body {
            Some(lazy) => lazy.len,
            None => self.body.len() as u64,
        }
    }

    /// The encoded body for `coding`, if calmcache made one.
    pub fn encoding(&self, coding: &str) -> Option<&Bytes> {
        self.encodings
            .iter()
            .find(|e| e.coding == coding)
            .map(|e| &e.body)
    }

    /// Bytes this object costs a memory zone: headers, body and bookkeeping.
    pub fn weight(&self) -> usize {
        self.weight
    }
}

/// Header and body bytes plus bookkeeping; what [`CachedObject::weight`] reports.
pub fn weigh(headers: &HeaderMap, body_len: usize) -> usize {
    let headers: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum();
    headers + body_len + OBJECT_OVERHEAD
}
