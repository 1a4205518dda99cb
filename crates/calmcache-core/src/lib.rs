//! calmcache-core: the cache engine behind calmcache, free of any HTTP server
//! types so it can be embedded in any application.
//!
//! # Layout
//! - [`key`]: cache keys (owned and borrowed, hashing alike), variant keys, and
//!   the stable key hash; [`cost`]: what an allocation takes in memory.
//! - [`cache_control`]: `Cache-Control` directive parsing (RFC 9111 §5.2).
//! - [`freshness`]: storability, freshness lifetime and age (RFC 9111 §3, §4.2; RFC 5861).
//! - [`object`]: stored objects and their metadata; [`head`]: a stored head in one buffer.
//! - [`disk`]: the disk tier: index, loader, manager, blocking-pool I/O;
//!   [`disk::format`]: the file of one stored object; [`disk::writer`]: an
//!   object file written as its body arrives.
//! - [`page_body`]: large memory-zone bodies in pages of their own (sent without a copy).
//! - [`page_cache`]: whole-file reads the kernel answers from memory without waiting.
//! - [`tier`]: the async storage trait every tier implements ([`Tier`],
//!   [`TierFuture`], [`PurgeMode`]), and what it speaks in without naming a
//!   kind ([`BodyWrite`], [`TierDetail`], [`LoadState`]); [`memory`]: the RAM tier.
//! - [`zone`]: a named tier ([`Zone`]) and key placement over a route's
//!   zones (weighted rendezvous over the healthy ones).
//! - [`front`]: the memory front (doorkeeper, promotion, replace on store).
//! - [`flight`]: single-flight coalescing with leader/follower and abandonment.
//! - [`policy`]: refresh decisions (none, lock, PER/XFetch, SUS, stale windows).
//! - [`status`]: the `Cache-Status` vocabulary and the class of an answer.
//! - [`warn_limit`]: repeated warnings logged once per interval, with a count.
//! - [`zone_lock`]: one process per disk zone directory (an `flock`).
//! - [`private_fs`]: a zone's directories 0700 and files 0600, whatever the umask.

#![warn(missing_docs, unreachable_pub)]

pub mod body_uris;
pub mod cache_control;
pub mod cost;
pub mod disk;
pub mod flight;
pub mod freshness;
pub mod front;
pub mod head;
pub mod hit_for_miss;
pub mod ignored;
pub mod key;
pub mod memory;
pub mod object;
pub mod page_body;
pub mod page_cache;
pub mod policy;
pub mod private_fs;
pub mod sketch;
pub mod status;
pub mod tier;
pub mod warn_limit;
pub mod zone;
pub mod zone_lock;

#[cfg(test)]
mod test_tier;

pub use body_uris::BodyUris;
pub use cache_control::{CacheControl, RequestCacheControl};
pub use flight::{FetchPermit, Flights, Interest, Lookup, WaitError, Waiter};
pub use freshness::{Exchange, Freshness, LifetimeSource, NotStorable, Storable, StoreRules};
pub use front::MemoryFront;
pub use hit_for_miss::HitForMiss;
pub use ignored::{IgnorableField, IgnoredFields};
pub use key::{CacheKey, KeyRef};
pub use memory::MemoryTier;
pub use object::{CachedObject, Encoded, LazyBody, ObjectMeta, VaryIndex};
pub use policy::{decide, Decision, RefreshMode, RefreshPolicy};
pub use status::{AnswerClass, CacheStatus, Fwd, Report};
pub use tier::{
    BodyWrite, CacheError, Figure, HostsFound, LoadState, PurgeFilter, PurgeMode, Tags, Tier,
    TierDetail, TierFuture, Written,
};
pub use zone::Zone;
