//! The storage trait every zone's tier implements (memory, disk, and any
//! other, e.g. Redis), the future its operations return, and its error.
//!
//! The proxy talks to a zone only through [`Tier`]: it never asks which
//! kind of tier it holds, and this module names no kind (it imports no
//! tier). What only some tiers can do is a method with a default:
//! [`Tier::begin_body_write`] (a large body streamed into storage as it arrives,
//! through a kind-neutral [`BodyWrite`]), [`Tier::start`] and
//! [`Tier::load_state`] (background work such as a disk loader, and whether
//! it is done), [`Tier::detail`] (named figures `/status` and `/metrics`
//! show as they are), [`Tier::touch`] and [`Tier::version`] (for the memory
//! front, `front.rs`).
//!
//! Operations are async so that a tier behind a network can implement them,
//! but the trait must stay dyn-compatible (zones hold an `Arc<dyn Tier>`),
//! so each returns a [`TierFuture`]: a value ready at once (a memory tier's
//! hit: no allocation, no await) or a boxed future (a disk read on the
//! blocking pool, a network round trip).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;

use crate::key::{CacheKey, KeyRef};
use crate::object::{CachedObject, LazyBody};

/// Why a tier could not take an object. A failing tier never fails a request:
/// the caller logs, counts and treats it as a miss.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The object exceeds the zone's per-object limit.
    #[error("object of {size} bytes exceeds the zone's max_object_size of {limit} bytes")]
    TooLarge {
        /// Weight of the refused object.
        size: u64,
        /// The zone's limit.
        limit: u64,
    },
    /// The storage failed (a disk zone's I/O error, full or read-only file system).
    #[error("storage failed: {0}")]
    Io(String),
    /// A full zone's admission refused a new key on its first miss
    /// (`admission = "frequent"`): served, not stored; its next miss is.
    #[error("not admitted: the zone is full and the key was not asked for before")]
    NotAdmitted,
}

/// How a purge treats what it selects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PurgeMode {
    /// Removed: the next request is a miss.
    #[default]
    Hard,
    /// Kept but expired now (`CachedObject::soft_purged`): served stale
    /// while one refresh runs.
    Soft,
}

/// What a tier's operation returns: a value ready at once, or a future.
///
/// The ready case costs no allocation, which keeps a memory tier's hit as
/// cheap as a direct call; a tier that must wait (blocking pool, network)
/// boxes its future.
pub enum TierFuture<'a, T> {
    /// Already answered.
    Ready(std::future::Ready<T>),
    /// Answered when the future completes.
    Pending(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> TierFuture<'a, T> {
    /// A future that is answered at once with `value`.
    pub fn ready(value: T) -> Self {
        TierFuture::Ready(std::future::ready(value))
    }

    /// A future that is answered when `future` completes (one allocation).
    pub fn boxed(future: impl Future<Output = T> + Send + 'a) -> Self {
        TierFuture::Pending(Box::pin(future))
    }

    /// The value, when it was answered at once; `None` for a future that
    /// must be awaited.
    pub fn into_ready(self) -> Option<T> {
        match self {
            TierFuture::Ready(ready) => Some(ready.into_inner()),
            TierFuture::Pending(_) => None,
        }
    }
}

impl<T> Future for TierFuture<'_, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // Both variants are `Unpin` (`Ready` always, a pinned box by
        // construction), so the enum is too.
        match self.get_mut() {
            TierFuture::Ready(ready) => Pin::new(ready).poll(cx),
            TierFuture::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

/// The cache tags of a stored object (`Cache-Tag`, `Surrogate-Key`), as a
/// tier has them: the object's headers (in memory), or the list a disk
/// file's header carries. Read only by a tag purge.
#[derive(Clone, Copy, Debug)]
pub enum Tags<'a> {
    /// In a response's headers.
    Headers(&'a HeaderMap),
    /// In a stored response's head.
    Stored(&'a crate::head::StoredHead),
    /// Already split out.
    List(&'a [String]),
}

impl<'a> Tags<'a> {
    /// Every tag, trimmed, empty ones skipped (`object::tags_in`).
    pub fn iter(self) -> impl Iterator<Item = &'a str> {
        let (headers, stored, list) = match self {
            Tags::Headers(headers) => (Some(crate::object::tags_in(headers)), None, None),
            Tags::Stored(head) => (None, Some(crate::object::stored_tags(head)), None),
            Tags::List(list) => (None, None, Some(list.iter().map(String::as_str))),
        };
        headers
            .into_iter()
            .flatten()
            .chain(stored.into_iter().flatten())
            .chain(list.into_iter().flatten())
    }
}

/// Which objects a scanning purge takes: called with each object's key and
/// its tags (looked at only when the purge is by tag).
pub type PurgeFilter<'f> = dyn Fn(&CacheKey, Tags<'_>) -> bool + Send + Sync + 'f;

/// One figure a tier reports in its [`TierDetail`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Figure {
    /// A count or a size.
    Count(u64),
    /// A count or a size that may be unknown (shown as `null`).
    Maybe(Option<u64>),
    /// A yes or no (a gauge of 1 or 0 in `/metrics`).
    Flag(bool),
    /// A text, such as a directory.
    Text(String),
}

impl Figure {
    /// The figure as a metric sample; `None` for a text or an unknown.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Figure::Count(n) | Figure::Maybe(Some(n)) => Some(*n as f64),
            Figure::Flag(flag) => Some(f64::from(u8::from(*flag))),
            Figure::Maybe(None) | Figure::Text(_) => None,
        }
    }
}

impl From<u64> for Figure {
    fn from(n: u64) -> Figure {
        Figure::Count(n)
    }
}

impl From<Option<u64>> for Figure {
    fn from(n: Option<u64>) -> Figure {
        Figure::Maybe(n)
    }
}

impl From<bool> for Figure {
    fn from(flag: bool) -> Figure {
        Figure::Flag(flag)
    }
}

impl From<String> for Figure {
    fn from(text: String) -> Figure {
        Figure::Text(text)
    }
}

/// What a tier reports beyond its size and objects, for `/status` and
/// `/metrics`: named figures in the order they are shown, under the name
/// of the block `/status` shows them in. Each kind of tier fills its own;
/// the proxy shows what is there as it is and never branches on it.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TierDetail {
    /// The name of the block the figures are shown in (`"memory"`,
    /// `"disk"`); empty for a tier with nothing to show.
    pub block: &'static str,
    /// The figures, by name, in order.
    pub figures: Vec<(&'static str, Figure)>,
}

impl TierDetail {
    /// An empty block named `block`.
    pub fn new(block: &'static str) -> Self {
        TierDetail {
            block,
            figures: Vec::new(),
        }
    }

    /// The block with `figure` added under `name`.
    pub fn with(mut self, name: &'static str, figure: impl Into<Figure>) -> Self {
        self.figures.push((name, figure.into()));
        self
    }

    /// The figure named `name`, if the tier reports one.
    pub fn get(&self, name: &str) -> Option<&Figure> {
        self.figures
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f)
    }

    /// The count named `name`, if the tier reports one.
    pub fn count(&self, name: &str) -> Option<u64> {
        match self.get(name)? {
            Figure::Count(n) => Some(*n),
            _ => None,
        }
    }
}

/// Where a tier is in taking back what it held before this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadState {
    /// Still reading it (a disk zone's loader): objects of before may be
    /// missing from lookups, purges and [`Tier::hosts_found`].
    Loading,
    /// Done: `found` objects of before were taken back (0 for a tier that
    /// starts empty).
    Loaded {
        /// Objects of before.
        found: u64,
    },
}

impl LoadState {
    /// True while the tier is still loading.
    pub fn is_loading(self) -> bool {
        self == LoadState::Loading
    }

    /// Objects of before taken back; 0 while loading.
    pub fn found(self) -> u64 {
        match self {
            LoadState::Loading => 0,
            LoadState::Loaded { found } => found,
        }
    }
}

/// The part of a body a [`BodyWrite`] has put in storage so far, readable
/// with positioned reads while the rest still arrives.
#[derive(Clone, Debug)]
pub struct Written {
    /// The file, open for reading.
    pub file: Arc<std::fs::File>,
    /// Offset of the body in the file.
    pub body_at: u64,
    /// Body bytes written (readable with positioned reads now).
    pub len: u64,
}

/// A large body going into a tier's storage as it arrives
/// ([`Tier::begin_body_write`]). Fed with [`push`](BodyWrite::push), ended with
/// [`finish`](BodyWrite::finish); dropping it instead discards what was
/// written.
pub trait BodyWrite: Send {
    /// Adds a chunk of the body: ready at once, unless a batch goes to
    /// storage. Errors are kept for `finish`.
    fn push(&mut self, chunk: Bytes) -> TierFuture<'_, ()>;

    /// What of the body is readable from storage so far (`None` before the
    /// first batch is written, or once the write was given up).
    fn written(&self) -> Option<Written>;

    /// True once the write failed or the body outgrew the tier: `finish`
    /// will refuse it.
    fn is_abandoned(&self) -> bool;

    /// The whole body has arrived: stores `object` (its metadata, status,
    /// headers and variant; the body is what was pushed, not `object`'s)
    /// and hands back the stored body, to serve the object from.
    fn finish<'a>(
        self: Box<Self>,
        object: &'a CachedObject,
    ) -> TierFuture<'a, Result<LazyBody, CacheError>>;
}

/// The hosts in the keys of the objects a tier found at start (a disk
/// zone's files from before), up to [`HostsFound::MAX`]: a purge by path
/// rebuilds keys from hosts, and must reach those objects too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostsFound {
    /// The hosts.
    pub hosts: std::collections::BTreeSet<Box<str>>,
    /// More hosts than [`HostsFound::MAX`] were found: the set is not all.
    pub overflowed: bool,
}

impl HostsFound {
    /// Hosts kept at most.
    pub const MAX: usize = 10_000;

    /// Remembers `host`, or notes that it did not fit.
    pub fn note(&mut self, host: &str) {
        if self.hosts.contains(host) {
            return;
        }
        if self.hosts.len() < Self::MAX {
            self.hosts.insert(host.into());
        } else {
            self.overflowed = true;
        }
    }
}

/// A place objects are kept: looked up by borrowed key, bounded in bytes.
///
/// Every zone has one behind an `Arc<dyn Tier>`; the request path, purges,
/// the memory front and `/status` use only these methods. A tier never
/// fails a request: errors are counted and logged by the tier, and the
/// caller sees a miss or a [`CacheError`] to log.
pub trait Tier: Send + Sync {
    /// The kind of storage, as `/status` and metric labels name it
    /// (`"memory"`, `"disk"`).
    fn kind(&self) -> &'static str;

    /// The object under `key`, fresh or not; the caller decides what to do
    /// with it. A missing, broken or unreadable object is `None`.
    fn get<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, Option<Arc<CachedObject>>>;

    /// Stores or replaces the object under `key`.
    fn insert(
        &self,
        key: CacheKey,
        object: Arc<CachedObject>,
    ) -> TierFuture<'_, Result<(), CacheError>>;

    /// Drops the object under `key`; true when there was one.
    fn remove<'a>(&'a self, key: &'a KeyRef<'_>) -> TierFuture<'a, bool>;

    /// Purges `key` ([`PurgeMode::Soft`]: keeps it, expired now); true when
    /// it was there.
    fn purge_key<'a>(&'a self, key: &'a KeyRef<'_>, mode: PurgeMode) -> TierFuture<'a, bool>;

    /// Purges every object `filter` takes; how many.
    ///
    /// A scan: it may block the calling thread for a while (a memory tier
    /// locks one shard at a time, a disk tier reads its files' headers), so
    /// callers drive it on a blocking thread (`spawn_blocking` and
    /// `Handle::block_on`), where a network tier's future runs as well.
    fn purge_matching<'a>(
        &'a self,
        mode: PurgeMode,
        filter: &'a PurgeFilter<'_>,
    ) -> TierFuture<'a, u64>;

    /// Purges everything; how many objects there were. Like
    /// [`purge_matching`](Tier::purge_matching), may block.
    fn purge_all(&self, mode: PurgeMode) -> TierFuture<'_, u64>;

    /// Bytes in use.
    fn size_bytes(&self) -> u64;

    /// Objects held.
    fn objects(&self) -> u64;

    /// Configured bound in bytes.
    fn max_size(&self) -> u64;

    /// Largest object the tier takes; larger ones stream through uncached.
    fn max_object_size(&self) -> u64;

    /// False while the tier is out after a fault: routes placing keys over
    /// several zones leave it out until it recovers.
    fn healthy(&self) -> bool {
        true
    }

    /// Marks `key` used now, when a copy of it was served from elsewhere (a
    /// memory front), so the tier's eviction does not take the hottest
    /// objects for the coldest. Called on a hit: must not block or wait.
    fn touch(&self, _key: &KeyRef<'_>) {}

    /// An opaque stamp of the copy under `key` that changes when it is
    /// replaced or removed; `None` when the tier knows it holds none. The
    /// memory front promotes a copy only if the stamp is the same before
    /// and after reading it. Called on a front miss: must not block or wait.
    /// The default, `Some(0)` for every key, suits a tier that cannot tell
    /// copies apart: its promotions are never held back.
    fn version(&self, _key: &KeyRef<'_>) -> Option<u64> {
        Some(0)
    }

    /// Starts the tier's background work on the current runtime (a disk
    /// tier's loader and manager). Called once the tier serves; calling it
    /// again does nothing.
    fn start(&self) {}

    /// The hosts of the objects this tier found when it started (objects
    /// stored before this process: their hosts were never seen in a
    /// request). Complete once its loader is done; empty for a tier that
    /// starts empty.
    fn hosts_found(&self) -> HostsFound {
        HostsFound::default()
    }

    /// True when the tier took back, from before this process, an object
    /// stored under a body key ([`crate::key::is_body_key`]) of the URI
    /// keyed `uri` (or, rarely, of another URI: a [`crate::BodyUris`]
    /// answer): a purge of that URL then looks for its body variants.
    /// False for a tier that starts empty.
    fn body_uri_found(&self, _uri: &KeyRef<'_>) -> bool {
        false
    }

    /// Where the tier is in taking back what it held before this process
    /// (a disk zone's loader); a tier that starts empty is loaded at once.
    fn load_state(&self) -> LoadState {
        LoadState::Loaded { found: 0 }
    }

    /// The tier's own figures for `/status` and `/metrics`.
    fn detail(&self) -> TierDetail {
        TierDetail::default()
    }

    /// Starts writing an object under `key` into storage as its body
    /// arrives, for a tier that keeps large bodies out of memory: readers
    /// far behind read the body back from storage ([`BodyWrite::written`]),
    /// and the object is stored when [`BodyWrite::finish`] succeeds. `head`
    /// builds the object without its body (called only by a tier that
    /// streams, so others cost nothing); `body_len` is the declared length,
    /// if any. `None`, the default, or when the write cannot start: the
    /// caller keeps the body and stores it whole with [`insert`](Tier::insert).
    fn begin_body_write(
        &self,
        _key: &CacheKey,
        _head: &dyn Fn() -> CachedObject,
        _body_len: Option<u64>,
    ) -> Option<Box<dyn BodyWrite>> {
        None
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_found_are_bounded_and_say_so() {
        let mut found = HostsFound::default();
        for i in 0..=HostsFound::MAX {
            found.note(&format!("h{i}.test"));
            found.note("h0.test");
        }
        assert_eq!(found.hosts.len(), HostsFound::MAX);
        assert!(found.overflowed);
    }

    #[test]
    fn tags_read_from_headers_and_from_a_list_alike() {
        let mut headers = HeaderMap::new();
        headers.insert("cache-tag", http::HeaderValue::from_static("a, b"));
        headers.insert("surrogate-key", http::HeaderValue::from_static("c d"));
        let from_headers: Vec<&str> = Tags::Headers(&headers).iter().collect();
        assert_eq!(from_headers, ["a", "b", "c", "d"]);
        let list = ["a".to_owned(), "x".to_owned()];
        let from_list: Vec<&str> = Tags::List(&list).iter().collect();
        assert_eq!(from_list, ["a", "x"]);
    }

    #[test]
    fn a_detail_keeps_its_figures_in_order_and_finds_them_by_name() {
        let detail = TierDetail::new("disk")
            .with("path", "/x".to_owned())
            .with("evictions", 3)
            .with("fs_capacity_bytes", None)
            .with("loader_done", true);
        let names: Vec<&str> = detail.figures.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["path", "evictions", "fs_capacity_bytes", "loader_done"]
        );
        assert_eq!(detail.count("evictions"), Some(3));
        assert_eq!(detail.count("path"), None);
        assert_eq!(detail.get("missing"), None);
        let samples: Vec<Option<f64>> = detail.figures.iter().map(|(_, f)| f.as_f64()).collect();
        assert_eq!(samples, [None, Some(3.0), None, Some(1.0)]);
        assert!(TierDetail::default().block.is_empty());
    }

    #[test]
    fn a_tier_that_starts_empty_is_loaded_at_once() {
        assert!(LoadState::Loading.is_loading());
        assert_eq!(LoadState::Loading.found(), 0);
        let loaded = LoadState::Loaded { found: 7 };
        assert!(!loaded.is_loading());
        assert_eq!(loaded.found(), 7);
    }

    #[tokio::test]
    async fn ready_and_boxed_futures_answer_alike() {
        assert_eq!(TierFuture::ready(7).await, 7);
        assert_eq!(TierFuture::boxed(async { 7 }).await, 7);
        assert_eq!(TierFuture::ready(7).into_ready(), Some(7));
        assert!(TierFuture::boxed(async { 7 }).into_ready().is_none());
    }
}
