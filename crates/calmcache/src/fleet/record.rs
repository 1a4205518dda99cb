//! The writing record (`{prefix}{H}:w`): what a fill that writes its body
//! to Redis as it arrives (stream_out.rs) tells the other nodes, so that
//! they stream it before the manifest commits (stream_in.rs): the fill's
//! generation, its lease token (a follower knows the writer is alive while
//! the lease is still that token's), the head of the response (the
//! disk-format value of the object with an empty body) and the digests of
//! the pieces written so far, in order.
//!
//! In Redis: the generation and the lease's `since_ms` in the clear (eight
//! bytes each: the generation lets a compare-and-delete leave a later
//! holder's record alone), then the record, sealed like an entry for the
//! object's key and `since_ms` when the fleet has a secret ([`super::sign`]):
//! the digests are then authenticated, and through them every piece.
//!
//! Owns: the record's form and its seal. Must not: call Redis, or decide
//! when a record is written or followed.

use calmcache_core::CacheKey;

use super::pieces::{PieceError, PIECE_SIZE};
use super::Fleet;

/// What a record starts with, inside its seal.
const RECORD_MAGIC: &[u8; 4] = b"CCW1";
const DIGEST_LEN: usize = 32;

/// One fill's writing record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    /// The fill's generation: part of every piece's key and digest.
    pub(super) gen: u64,
    /// The lease token of the fill writing it.
    pub(super) token: String,
    /// The response's head: the disk-format value of the object with an
    /// empty body.
    pub(super) head: Vec<u8>,
    /// The digests of the pieces written so far, in order.
    pub(super) digests: Vec<[u8; DIGEST_LEN]>,
}

impl Record {
    /// The record's bytes (before its seal).
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            4 + 8 + 2 + self.token.len() + 4 + self.head.len() + 4 + 32 * self.digests.len(),
        );
        out.extend_from_slice(RECORD_MAGIC);
        out.extend_from_slice(&self.gen.to_le_bytes());
        // Invariant: a token is a node name and a counter, far below 64 KiB;
        // a head is headers and a key, far below 4 GiB.
        out.extend_from_slice(&(self.token.len() as u16).to_le_bytes());
        out.extend_from_slice(self.token.as_bytes());
        out.extend_from_slice(&(self.head.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&(self.digests.len() as u32).to_le_bytes());
        for d in &self.digests {
            out.extend_from_slice(d);
        }
        out
    }

    /// A record read back, checked for sense: every length within the
    /// bytes, no trailing bytes, at most as many digests as an object of
    /// `max` bytes has pieces.
    pub(super) fn decode(bytes: &[u8], max: u64) -> Result<Record, PieceError> {
        let mut rest = bytes
            .strip_prefix(RECORD_MAGIC)
            .ok_or(PieceError::Malformed)?;
        let gen = u64::from_le_bytes(take(&mut rest, 8)?.try_into().unwrap_or([0; 8]));
        let token_len = u16::from_le_bytes(take(&mut rest, 2)?.try_into().unwrap_or([0; 2]));
        let token = std::str::from_utf8(take(&mut rest, usize::from(token_len))?)
            .map_err(|_| PieceError::Malformed)?
            .to_owned();
        let head_len = u32::from_le_bytes(take(&mut rest, 4)?.try_into().unwrap_or([0; 4]));
        let head = take(&mut rest, head_len as usize)?.to_vec();
        let count = u32::from_le_bytes(take(&mut rest, 4)?.try_into().unwrap_or([0; 4]));
        let most = max.div_ceil(PIECE_SIZE as u64);
        if u64::from(count) > most || rest.len() != count as usize * DIGEST_LEN || head.is_empty() {
            return Err(PieceError::Malformed);
        }
        let digests = rest
            .chunks_exact(DIGEST_LEN)
            .map(|d| d.try_into().unwrap_or([0; DIGEST_LEN]))
            .collect();
        Ok(Record {
            gen,
            token,
            head,
            digests,
        })
    }
}

/// The first `n` bytes of `rest`, which moves past them.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], PieceError> {
    let (first, after) = rest.split_at_checked(n).ok_or(PieceError::Malformed)?;
    *rest = after;
    Ok(first)
}

impl Fleet {
    /// `record` of the object `key` (its lease taken at `since_ms`) as
    /// Redis keeps it: sealed with the fleet secret, when there is one.
    pub(super) fn seal_record(&self, key: &CacheKey, since_ms: u64, record: &Record) -> Vec<u8> {
        let plain = record.encode();
        let body = match self.signer() {
            Some(signer) => signer.seal_entry(key, since_ms, &plain),
            None => plain,
        };
        let mut out = Vec::with_capacity(16 + body.len());
        out.extend_from_slice(&record.gen.to_le_bytes());
        out.extend_from_slice(&since_ms.to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// A record of the object `key` read from Redis, with its lease's
    /// `since_ms`; `None` when it does not verify (with the fleet secret:
    /// refused and counted), does not parse, or its generation in the
    /// clear is not the one inside.
    pub(super) fn open_record(&self, key: &CacheKey, mut stored: Vec<u8>) -> Option<(u64, Record)> {
        let (clear, _) = stored.split_at_checked(16)?;
        let gen = u64::from_le_bytes(clear[..8].try_into().ok()?);
        let since_ms = u64::from_le_bytes(clear[8..16].try_into().ok()?);
        stored.drain(..16);
        let plain = match self.signer() {
            Some(signer) => match signer.open_entry(key, since_ms, stored) {
                Some(plain) => plain,
                None => {
                    self.refused_entry(key);
                    return None;
                }
            },
            None => stored,
        };
        let max = self.cfg.max_object_size.saturating_add(PIECE_SIZE as u64);
        Record::decode(&plain, max)
            .ok()
            .filter(|r| r.gen == gen)
            .map(|r| (since_ms, r))
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
