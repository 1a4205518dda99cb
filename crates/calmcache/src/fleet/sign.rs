//! Signatures of what the fleet shares through Redis, with the fleet secret
//! (`fleet.secret_file`): HMAC-SHA-256 (RFC 2104) over the bytes and what
//! they are for, compared in constant time (`hmac`'s `verify_slice`).
//!
//! - A shared entry: over its cache key (the URI's, or the variant's), the
//!   time its lease was taken (Redis' clock, the entry's `since_ms`) and the
//!   disk-format blob; stored as [`ENTRY_MAGIC`], the tag, the blob. A blob
//!   moved to another key, or put back with a newer `since_ms` to outlive a
//!   purge, does not verify.
//! - A URI's Vary names (the marker its variants hang off): over the URI's
//!   key and the names; stored as `names tag`.
//! - A purge message: over the sending node's id, the time it was signed
//!   (Redis' clock as the node last read it) and the purge; the stream entry
//!   carries `at` and `sig` beside `node` and `purge`. A message whose `at`
//!   is more than [`PURGE_SKEW`] from the time Redis gave its stream entry
//!   is refused as a replay: a message copied into a new entry later.
//! - A heartbeat (fleet/members.rs): over its fields, in the order the
//!   caller gives them (name, id, version, fingerprint parts, start time,
//!   the time it was signed); stored as the heartbeat's `sig`.
//!
//! The first secret signs; either verifies (a rotation). Each MAC's input
//! starts with the kind of thing signed and the fleet's `prefix` (its
//! namespace in Redis), and length-prefixes every part, so no tag made for
//! one thing verifies another, nor one fleet's (staging's) in another fleet
//! (production's) that shares its secret.
//!
//! Owns: the signed forms and their checks. Knows nothing of Redis calls.

use std::time::Duration;

use calmcache_core::CacheKey;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::FleetSecret;

type HmacSha256 = Hmac<Sha256>;

/// What a signed entry starts with (then the tag, then the blob).
pub(crate) const ENTRY_MAGIC: &[u8; 4] = b"CCS1";
/// An HMAC-SHA-256 tag's length.
const TAG_LEN: usize = 32;
/// The most a purge's signed time and its stream entry's time (both Redis'
/// clock) may differ: the sender reads Redis' clock at every 200 ms poll,
/// so a real message is within a poll and a round trip of it; the bound
/// leaves room for a node that could not poll for a while.
pub(crate) const PURGE_SKEW: Duration = Duration::from_secs(60);

/// The kinds of things signed: the first part of every MAC's input.
const ENTRY: &[u8] = b"calmcache fleet entry v1";
const NAMES: &[u8] = b"calmcache fleet vary names v1";
const PURGE: &[u8] = b"calmcache fleet purge v1";
const BEAT: &[u8] = b"calmcache fleet heartbeat v1";

/// What a purge message's check found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PurgeCheck {
    /// Signed with a fleet secret, at about the time it entered the stream.
    Valid,
    /// No signature, a malformed one, or one no secret of this node makes.
    Refused,
    /// Signed, but long before (or after) it entered the stream: a copy.
    Replayed,
}

/// This node's fleet secrets: the first signs, every one verifies.
pub(crate) struct Signer {
    secrets: Vec<Vec<u8>>,
    /// The fleet's `prefix`: part of every MAC's input.
    scope: Vec<u8>,
}

impl Signer {
    /// The signer of `secret` (its current secret first) for the fleet
    /// whose keys start with `prefix`.
    pub(crate) fn new(secret: &FleetSecret, prefix: &str) -> Signer {
        let mut secrets = vec![secret.current.clone()];
        secrets.extend(secret.also_accepted.clone());
        Signer {
            secrets,
            scope: prefix.as_bytes().to_vec(),
        }
    }

    /// `blob` (an entry in the disk file format) for `key`, its lease taken
    /// at `since_ms`, with its tag in front.
    pub(crate) fn seal_entry(&self, key: &CacheKey, since_ms: u64, blob: &[u8]) -> Vec<u8> {
        let key = key.to_string();
        let since = since_ms.to_be_bytes();
        let tag = self.tag(ENTRY, &[key.as_bytes(), &since, blob]);
        let mut sealed = Vec::with_capacity(ENTRY_MAGIC.len() + TAG_LEN + blob.len());
        sealed.extend_from_slice(ENTRY_MAGIC);
        sealed.extend_from_slice(&tag);
        sealed.extend_from_slice(blob);
        sealed
    }

    /// The blob inside `sealed` when its tag verifies for `key` and
    /// `since_ms`; `None` for anything else (unsigned, another key or time,
    /// a changed byte, another fleet's secret).
    pub(crate) fn open_entry(
        &self,
        key: &CacheKey,
        since_ms: u64,
        mut sealed: Vec<u8>,
    ) -> Option<Vec<u8>> {
        let rest = sealed.strip_prefix(ENTRY_MAGIC)?;
        let (tag, blob) = rest.split_at_checked(TAG_LEN)?;
        let key = key.to_string();
        let since = since_ms.to_be_bytes();
        if !self.verifies(ENTRY, &[key.as_bytes(), &since, blob], tag) {
            return None;
        }
        sealed.drain(..ENTRY_MAGIC.len() + TAG_LEN);
        Some(sealed)
    }

    /// The Vary names of the URI `uri` as Redis keeps them: `names tag`.
    pub(crate) fn seal_names(&self, uri: &CacheKey, names: &str) -> String {
        let uri = uri.to_string();
        let tag = self.tag(NAMES, &[uri.as_bytes(), names.as_bytes()]);
        format!("{names} {}", hex(&tag))
    }

    /// The names in `sealed` when its tag verifies for `uri`.
    pub(crate) fn open_names<'a>(&self, uri: &CacheKey, sealed: &'a str) -> Option<&'a str> {
        let (names, tag) = sealed.rsplit_once(' ')?;
        let tag = unhex(tag)?;
        let uri = uri.to_string();
        self.verifies(NAMES, &[uri.as_bytes(), names.as_bytes()], &tag)
            .then_some(names)
    }

    /// The `sig` of a purge message `purge` from `node`, signed at `at_ms`.
    pub(crate) fn sign_purge(&self, node: &str, at_ms: u64, purge: &str) -> String {
        let at = at_ms.to_be_bytes();
        hex(&self.tag(PURGE, &[node.as_bytes(), &at, purge.as_bytes()]))
    }

    /// Whether the purge message `purge` from `node`, with the fields `at`
    /// and `sig` as read, that Redis added to the stream at `entered_ms`,
    /// may be applied.
    pub(crate) fn check_purge(
        &self,
        node: &str,
        purge: &str,
        at: Option<&str>,
        sig: Option<&str>,
        entered_ms: u64,
    ) -> PurgeCheck {
        let (Some(at_ms), Some(tag)) =
            (at.and_then(|a| a.parse::<u64>().ok()), sig.and_then(unhex))
        else {
            return PurgeCheck::Refused;
        };
        let at = at_ms.to_be_bytes();
        if !self.verifies(PURGE, &[node.as_bytes(), &at, purge.as_bytes()], &tag) {
            return PurgeCheck::Refused;
        }
        let skew = u64::try_from(PURGE_SKEW.as_millis()).unwrap_or(u64::MAX);
        if at_ms.abs_diff(entered_ms) > skew {
            return PurgeCheck::Replayed;
        }
        PurgeCheck::Valid
    }

    /// The `sig` of a heartbeat whose fields are `fields`.
    pub(crate) fn sign_beat(&self, fields: &[&[u8]]) -> String {
        hex(&self.tag(BEAT, fields))
    }

    /// `sig` is a heartbeat's signature of `fields` under one of the
    /// secrets.
    pub(crate) fn check_beat(&self, fields: &[&[u8]], sig: &str) -> bool {
        unhex(sig).is_some_and(|tag| self.verifies(BEAT, fields, &tag))
    }

    /// The tag of `parts` under the current secret.
    fn tag(&self, kind: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
        mac(&self.secrets[0], kind, &self.scope, parts)
            .finalize()
            .into_bytes()
            .into()
    }

    /// `tag` is that of `parts` under one of the secrets (constant-time
    /// comparison).
    fn verifies(&self, kind: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        self.secrets.iter().any(|secret| {
            mac(secret, kind, &self.scope, parts)
                .verify_slice(tag)
                .is_ok()
        })
    }
}

/// The MAC of `kind`, `scope` and `parts`, each length-prefixed (no two
/// inputs share a byte string).
fn mac(secret: &[u8], kind: &[u8], scope: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes a key of any length (RFC 2104 §2): this cannot fail.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in [kind, scope].into_iter().chain(parts.iter().copied()) {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != TAG_LEN * 2 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
#[path = "sign_tests.rs"]
mod tests;
