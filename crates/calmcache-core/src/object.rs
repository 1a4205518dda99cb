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

pub use crate::cost::malloc_cost;
use crate::cost::SHARED_COST;
use crate::freshness::Freshness;
pub use crate::head::StoredHead;
use crate::page_body::{PagedBytes, StoredBody};

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
    /// End-to-end response headers as received (hop-by-hop already
    /// removed), in one buffer: [`CachedObject::headers`] reads them as a
    /// map, [`CachedObject::served_headers`] builds a hit's.
    pub head: StoredHead,
    /// The whole body.
    pub body: Bytes,
    /// Headers calmcache keeps but may not forward: RFC 9213 targeted
    /// fields, cache tags ([`TAG_FIELDS`]).
    pub has_targeted: bool,
    /// The body shares the head's buffer ([`CachedObject::packed`]).
    packed: bool,
    /// `body` lies in pages of its own ([`crate::page_body`]): it may be
    /// handed to the kernel by reference.
    paged: bool,
    /// What few objects have (encodings, a variant's values, a marker's
    /// names, a body left in a file), out of line: an object's inline size
    /// is paid by every object a zone holds.
    extras: Option<Box<Extras>>,
}

/// The rarer parts of a [`CachedObject`].
#[derive(Clone, Debug, Default)]
struct Extras {
    /// The body compressed by calmcache, in the route's order of preference.
    encodings: Vec<Encoded>,
    /// For a variant: the normalised request header values it was selected
    /// by (part of its key), so a follower of a fill can tell whether the
    /// response it got is its own variant.
    variant: Option<Box<str>>,
    /// Set on a marker: this entry is not a response but the list of
    /// request headers the URI's responses vary on.
    vary_index: Option<VaryIndex>,
    /// A large object read from a disk zone: `body` is empty and the body is
    /// streamed from this file region instead (bounded memory per request).
    lazy_body: Option<LazyBody>,
}

impl Extras {
    /// `None` when there is nothing to keep.
    fn boxed(self) -> Option<Box<Extras>> {
        let empty = self.encodings.is_empty()
            && self.variant.is_none()
            && self.vary_index.is_none()
            && self.lazy_body.is_none();
        (!empty).then(|| Box::new(self))
    }
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

/// The `Arc<CachedObject>` allocation (two counts and the object).
const OBJECT_COST: usize = malloc_cost(16 + std::mem::size_of::<CachedObject>());

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

/// Bodies shorter than this share their head's buffer in a memory zone
/// ([`CachedObject::packed`]); longer ones keep their own buffer.
pub const PACK_MAX: usize = 16 * 1024;

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

/// The cache tags of a stored head, as [`tags_in`] finds them in a map.
pub fn stored_tags(head: &StoredHead) -> impl Iterator<Item = &str> {
    static CACHE_TAG: HeaderName = HeaderName::from_static("cache-tag");
    static SURROGATE_KEY: HeaderName = HeaderName::from_static("surrogate-key");
    let text = crate::head::visible_str;
    let comma = head
        .get_all(&CACHE_TAG)
        .filter_map(text)
        .flat_map(|v| v.split(','));
    let space = head
        .get_all(&SURROGATE_KEY)
        .filter_map(text)
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
            head: self.head.clone(),
            body: self.body.clone(),
            has_targeted: self.has_targeted,
            packed: self.packed,
            paged: self.paged,
            extras: self.extras.clone(),
        }
    }

    /// True when this object carries `tag` (see [`tags_in`]).
    pub fn has_tag(&self, tag: &str) -> bool {
        stored_tags(&self.head).any(|t| t == tag)
    }

    /// The stored headers as a map (each value shares the head's buffer).
    /// Two allocations: for cold paths; a hit uses [`Self::served_headers`].
    pub fn headers(&self) -> HeaderMap {
        self.head.to_map(0)
    }

    /// The headers a hit starts from: the stored ones, with room for what
    /// serving adds (`Age`, `Cache-Status`, an encoding's fields) so that
    /// setting them does not regrow the map.
    pub fn served_headers(&self) -> HeaderMap {
        self.head.to_map(crate::head::SERVED_ROOM)
    }

    /// The body compressed by calmcache, in the route's order of preference.
    pub fn encodings(&self) -> &[Encoded] {
        self.extras.as_ref().map_or(&[], |x| &x.encodings)
    }

    /// For a variant: the normalised request header values it was selected
    /// by (part of its key), so a follower of a fill can tell whether the
    /// response it got is its own variant.
    pub fn variant(&self) -> Option<&str> {
        self.extras.as_ref().and_then(|x| x.variant.as_deref())
    }

    /// Set on a marker: this entry is not a response but the list of
    /// request headers the URI's responses vary on.
    pub fn vary_index(&self) -> Option<&VaryIndex> {
        self.extras.as_ref().and_then(|x| x.vary_index.as_ref())
    }

    /// A large object read from a disk zone: `body` is empty and the body
    /// is streamed from this file region instead (bounded memory per request).
    pub fn lazy_body(&self) -> Option<&LazyBody> {
        self.extras.as_ref().and_then(|x| x.lazy_body.as_ref())
    }

    /// Leaves the body in a file: see [`Self::lazy_body`].
    pub fn set_lazy_body(&mut self, lazy: LazyBody) {
        self.extras.get_or_insert_with(Box::default).lazy_body = Some(lazy);
    }

    /// The copy a memory zone keeps: a body under [`PACK_MAX`] moved into
    /// the head's buffer (one allocation and one shared count for both,
    /// exactly sized), so what the zone charges is what it holds. `None`
    /// when there is nothing to change (packed already, a body left in a
    /// file, or a larger body, kept in its own exactly-sized buffer).
    pub fn packed(&self) -> Option<CachedObject> {
        if self.packed
            || self.body.is_empty()
            || self.lazy_body().is_some()
            || self.body.len() >= PACK_MAX
        {
            return None;
        }
        let (head, body) = self.head.repacked(&self.body);
        let copy = CachedObject {
            meta: self.meta.clone(),
            status: self.status,
            head,
            body,
            has_targeted: self.has_targeted,
            packed: !self.body.is_empty(),
            // (Under PACK_MAX: never a paged body.)
            paged: false,
            extras: self.extras.clone(),
        };
        Some(copy)
    }

    /// What [`Self::memory_cost`] reports, computed from the parts (a lazy
    /// body's file is added there).
    fn memory_of(&self) -> usize {
        let head_and_body = if self.packed {
            self.head.buffer_cost(self.body.len()) + self.head.names_cost()
        } else if self.paged {
            self.head.memory_cost() + crate::page_body::paged_cost(self.body.len())
        } else {
            self.head.memory_cost() + shared_bytes_cost(self.body.len())
        };
        let extras = self.extras.as_ref().map_or(0, |x| {
            let marker = x.vary_index.as_ref().map_or(0, |index| {
                malloc_cost(index.names.capacity() * std::mem::size_of::<HeaderName>())
                    + index
                        .names
                        .iter()
                        .map(|n| malloc_cost(n.as_str().len()))
                        .sum::<usize>()
            });
            malloc_cost(std::mem::size_of::<Extras>())
                + marker
                + malloc_cost(x.encodings.capacity() * std::mem::size_of::<Encoded>())
                + x.encodings
                    .iter()
                    .map(|e| shared_bytes_cost(e.body.len()))
                    .sum::<usize>()
                + x.variant.as_ref().map_or(0, |v| malloc_cost(v.len()))
        });
        OBJECT_COST + head_and_body + extras
    }

    /// Assembles an object and computes its weight.
    pub fn new(meta: ObjectMeta, status: StatusCode, headers: HeaderMap, body: Bytes) -> Self {
        Self::assemble(meta, status, headers, body, Vec::new(), None)
    }

    /// Assembles a response with its encodings and, for a variant, the
    /// request values it was selected by. The body is kept as given (a
    /// disk read's slice of its file: a hit copies nothing).
    pub fn assemble(
        meta: ObjectMeta,
        status: StatusCode,
        headers: HeaderMap,
        body: impl Into<StoredBody>,
        encodings: Vec<Encoded>,
        variant: Option<Box<str>>,
    ) -> Self {
        let head = StoredHead::new(&headers);
        let (body, paged) = match body.into() {
            StoredBody::Heap(b) => (b, false),
            StoredBody::Paged(p) => (p.bytes().clone(), true),
        };
        let mut object = Self::build(
            meta, status, &headers, head, body, encodings, variant, false,
        );
        object.paged = paged;
        object
    }

    /// [`Self::assemble`] for an object bound for a zone, from a body just
    /// collected: a body under [`PACK_MAX`] shares one buffer with its head,
    /// as a memory zone keeps it ([`Self::packed`]); written into the
    /// body's spare room when it has exactly the head's size
    /// ([`StoredHead::encoded_len`]), else copied once.
    pub fn assemble_packed(
        meta: ObjectMeta,
        status: StatusCode,
        headers: HeaderMap,
        body: bytes::BytesMut,
        encodings: Vec<Encoded>,
        variant: Option<Box<str>>,
    ) -> Self {
        let pack = !body.is_empty() && body.len() < PACK_MAX;
        let (head, body) = if pack {
            StoredHead::after_body(&headers, body)
        } else {
            (StoredHead::new(&headers), body.freeze())
        };
        Self::build(meta, status, &headers, head, body, encodings, variant, pack)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        meta: ObjectMeta,
        status: StatusCode,
        headers: &HeaderMap,
        head: StoredHead,
        body: Bytes,
        encodings: Vec<Encoded>,
        variant: Option<Box<str>>,
        packed: bool,
    ) -> Self {
        let has_targeted = crate::cache_control::TARGETED
            .iter()
            .any(|name| headers.contains_key(*name))
            || TAG_FIELDS.iter().any(|name| headers.contains_key(*name));
        let extras = Extras {
            encodings,
            variant,
            ..Extras::default()
        };
        CachedObject {
            meta,
            status,
            head,
            body,
            has_targeted,
            packed,
            paged: false,
            extras: extras.boxed(),
        }
    }

    /// A Vary marker for a URI whose responses vary on `index.names`.
    pub fn marker(meta: ObjectMeta, index: VaryIndex) -> Self {
        let extras = Extras {
            vary_index: Some(index),
            ..Extras::default()
        };
        CachedObject {
            meta,
            status: StatusCode::OK,
            head: StoredHead::default(),
            body: Bytes::new(),
            has_targeted: false,
            packed: false,
            paged: false,
            extras: extras.boxed(),
        }
    }

    /// The same response with new metadata and headers (a 304 merged into
    /// it, RFC 9111 §4.3.4): body and encodings are shared, not copied.
    pub fn freshened(&self, meta: ObjectMeta, headers: HeaderMap) -> Self {
        Self::assemble(
            meta,
            self.status,
            headers,
            self.stored_body(),
            self.encodings().to_vec(),
            self.variant().map(Box::from),
        )
    }

    /// True when `body` lies in pages of its own ([`crate::page_body`]).
    pub fn is_paged(&self) -> bool {
        self.paged
    }

    /// The body with what it is stored in.
    pub fn stored_body(&self) -> StoredBody {
        if self.paged {
            StoredBody::Paged(PagedBytes::shared(&self.body))
        } else {
            StoredBody::Heap(self.body.clone())
        }
    }

    /// The body's length, whether in memory or left in a file.
    pub fn body_len(&self) -> u64 {
        match self.lazy_body() {
            Some(lazy) => lazy.len,
            None => self.body.len() as u64,
        }
    }

    /// The encoded body for `coding`, if calmcache made one.
    pub fn encoding(&self, coding: &str) -> Option<&Bytes> {
        self.encodings()
            .iter()
            .find(|e| e.coding == coding)
            .map(|e| &e.body)
    }

    /// The object's size for `max_object_size`: header and body bytes plus
    /// a fixed bookkeeping charge ([`weigh`]); the same in every zone kind.
    /// Computed when asked (when stored, not per hit): an object's inline
    /// size is paid by every object a zone holds.
    pub fn weight(&self) -> usize {
        if let Some(index) = self.vary_index() {
            return OBJECT_OVERHEAD
                + index
                    .names
                    .iter()
                    .map(|n| n.as_str().len() + 32)
                    .sum::<usize>();
        }
        let encoded: usize = self.encodings().iter().map(|e| e.body.len()).sum();
        self.head.text_len(32)
            + self.body.len()
            + encoded
            + OBJECT_OVERHEAD
            + self.variant().map_or(0, str::len)
    }

    /// Bytes of RAM this object takes while a memory zone holds it, as
    /// glibc's malloc hands them out ([`malloc_cost`]): the shared object
    /// itself, its head's buffer (and a packed body in it), a body's own
    /// buffer, the rarer parts (encodings, a variant's key text, a marker's
    /// names, a lazy body's path). What a memory zone's `max_size` bounds,
    /// with the key and the zone's index entry (see [`crate::MemoryTier`]).
    pub fn memory_cost(&self) -> usize {
        self.memory_of()
            + self.lazy_body().map_or(0, |lazy| {
                malloc_cost(lazy.path.as_os_str().len()) + malloc_cost(32)
            })
    }
}

/// The head of a response as a zone keeps it: values copied out of hyper's
/// read buffer (a stored value that sliced it would pin the whole buffer,
/// 8 KiB or more, in the zone), without the fields that must not be stored
/// (`private="..."`, `no-cache="..."`, lower-cased in `strip`).
///
/// All values are copied into one buffer and share it (one allocation and
/// one reference count instead of two allocations per value), and the map
/// holds exactly its fields (no spare slots). Serving it is unchanged: a
/// hit clones the map and bumps the buffer's count once per value, as it
/// bumped each value's own count before.
pub fn stored_headers(headers: &HeaderMap, strip: &[String]) -> HeaderMap {
    let kept = |name: &HeaderName| !strip.iter().any(|s| s == name.as_str());
    let total: usize = headers
        .iter()
        .filter(|(n, _)| kept(n))
        .map(|(_, v)| v.len())
        .sum();
    let mut block = bytes::BytesMut::with_capacity(total);
    for (name, value) in headers {
        if kept(name) {
            block.extend_from_slice(value.as_bytes());
        }
    }
    let mut block = block.freeze();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !kept(name) {
            continue;
        }
        let shared = block.split_to(value.len());
        if let Ok(copy) = http::HeaderValue::from_maybe_shared(shared) {
            out.append(name.clone(), copy);
        }
    }
    // A clone's entries are exactly as many as the fields (the map above
    // reserved a quarter more); the values are shared, not copied.
    out.clone()
}

/// The fields of `headers` a zone may store (without `strip`'s, as
/// [`stored_headers`]), values shared, not copied: for a head that is
/// stored at once (an object's [`StoredHead`] copies the values into its
/// own buffer), so the copy is made once.
pub fn storable_headers(headers: &HeaderMap, strip: &[String]) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !strip.iter().any(|s| s == name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// A `HeaderMap` slot: name, value, hash and links to extra values.
const HEADER_SLOT: usize =
    std::mem::size_of::<HeaderName>() + std::mem::size_of::<http::HeaderValue>() + 32;

/// A buffer of `n` bytes behind a `Bytes` that is (or will be) shared.
fn shared_bytes_cost(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        malloc_cost(n) + SHARED_COST
    }
}

/// What `headers` cost in RAM: the map's index and slots, the names that
/// are not standard ones (an allocation each), and the values: one shared
/// buffer when they lie back to back in one (see [`stored_headers`]),
/// else an allocation each.
pub fn headers_cost(headers: &HeaderMap) -> usize {
    if headers.is_empty() && headers.capacity() == 0 {
        return 0;
    }
    let mut contiguous = true;
    let mut next: Option<*const u8> = None;
    let mut value_bytes = 0;
    let mut each = 0;
    let mut names = 0;
    let mut last_name: Option<&HeaderName> = None;
    for (name, value) in headers {
        let bytes = value.as_bytes();
        if next.is_some_and(|p| p != bytes.as_ptr()) {
            contiguous = false;
        }
        next = Some(bytes.as_ptr().wrapping_add(bytes.len()));
        value_bytes += bytes.len();
        each += shared_bytes_cost(bytes.len());
        if last_name != Some(name) && is_custom(name) {
            names += shared_bytes_cost(name.as_str().len());
        }
        last_name = Some(name);
    }
    let values = if contiguous {
        shared_bytes_cost(value_bytes)
    } else {
        each
    };
    // Index: a power of two of 4-byte positions, a quarter more than the
    // usable capacity; slots: exact after `stored_headers`, else up to the
    // usable capacity.
    let index = (headers.capacity() + 1).next_power_of_two() * 4;
    let slots = if contiguous {
        headers.len()
    } else {
        headers.capacity().max(headers.len())
    };
    malloc_cost(index) + malloc_cost(slots * HEADER_SLOT) + names + values
}

/// True for a header name `http` keeps in an allocation of its own, not
/// one of its standard names (whose text is static: parsing one again
/// gives the same pointer). Called when an object is stored, not per hit.
fn is_custom(name: &HeaderName) -> bool {
    HeaderName::from_bytes(name.as_str().as_bytes())
        .map(|again| again.as_str().as_ptr() != name.as_str().as_ptr())
        .unwrap_or(true)
}

/// Header and body bytes plus bookkeeping; what [`CachedObject::weight`] reports.
pub fn weigh(headers: &HeaderMap, body_len: usize) -> usize {
    let headers: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum();
    headers + body_len + OBJECT_OVERHEAD
}
