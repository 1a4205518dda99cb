//! The on-disk format of one cached object: one file per object, written to
//! a temporary name and renamed into place, read back whole for a hit or
//! header-only for the loader that scans a zone at start-up.
//!
//! Everything here is synchronous, blocking `std::fs` I/O: callers run it on
//! a blocking thread pool.
//!
//! # Layout
//!
//! All integers are little-endian; a *string* is its length followed by its
//! bytes, the width of the length given with each field.
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | magic `b"CALMOBJ\0"` |
//! | 2 | version, `u16` = 1 |
//! | 4 | header length *H*, `u32` |
//! | *H* | header (below) |
//! | 4 | CRC-32 of the *H* header bytes, `u32` |
//! | *B* | body |
//! | *E₁*…*Eₙ* | each encoding's bytes, in the header's order |
//! | 4 | CRC-32 of body and encodings together (*B* + *E₁*…*Eₙ* bytes), `u32` |
//!
//! The header, in order:
//!
//! - scheme, host, path_and_query: `u32` length + UTF-8 bytes each;
//! - status: `u16`;
//! - stored_at: `u64` milliseconds since the UNIX epoch (wall clock);
//! - fetch_time: `u64` milliseconds;
//! - lifetime, initial_age, stale_while_revalidate, stale_if_error: `u64`
//!   milliseconds each;
//! - flags: `u8`; bit 0 stale_forbidden, bit 1 immutable, bit 2 Vary marker,
//!   bit 3 has a variant, bit 4 the lifetime came from the route's `ttl`,
//!   bit 5 from heuristics (neither: from the origin; both: corrupt;
//!   [`LifetimeSource`]); the other bits must be zero;
//! - headers: `u32` count, then each name (`u16` length + bytes) and value
//!   (`u32` length + bytes), in [`HeaderMap::iter`] order, so the values of a
//!   multi-valued header keep their order;
//! - only with the marker flag: vary id `u64`, `u16` count, then each request
//!   header name (`u16` length + bytes);
//! - only with the variant flag: `u32` length + UTF-8 bytes;
//! - encodings: `u16` count, then each coding token (`u8` length + bytes,
//!   `br` or `gzip`) and its encoded length (`u64`);
//! - body length: `u64`.
//!
//! The file is exactly `8 + 2 + 4 + H + 4 + B + ΣEᵢ + 4` bytes long; any
//! other length is an error. Durations keep whole milliseconds (rounded
//! down); a duration beyond `u64::MAX` ms saturates.
//!
//! # Overhead
//!
//! Per object, on top of the key text, header names and values, variant
//! text, body and encodings: 22 bytes of framing (magic, version, header
//! length, two CRCs) and 77 bytes of fixed header fields (three key string
//! lengths 12, status 2, six timings 48, flags 1, header count 4, encoding
//! count 2, body length 8): **99 bytes**. Each header field line adds 6
//! bytes, each encoding 9 plus its token, a variant 4, a marker 10 plus 2
//! per name.
//!
//! # Integrity
//!
//! The header is checksummed and every length in it is bounded by the bytes
//! that are actually there: a corrupt file can make no allocation larger than
//! the file, and no byte sequence panics. [`read_summary`] checks the header
//! checksum and the total file length but never reads the body, so a loader
//! can scan thousands of files cheaply; [`read_object`] reads the whole file
//! anyway to serve it, so it also verifies the body checksum, which catches a
//! torn or zero-filled body after a crash (files are not fsynced: a cache may
//! lose objects on power loss, but must never serve a damaged one).
//!
//! One change is made in place: a soft purge rewrites the lifetime,
//! stale-while-revalidate and immutable fields and the header checksum of
//! a stored file ([`mark_soft_purged`]) in one write, so the mark survives
//! a restart; lengths and the format version stay as they were.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::freshness::{Freshness, LifetimeSource};
use crate::key::{CacheKey, KeyRef};
use crate::object::{CachedObject, Encoded, ObjectMeta, VaryIndex};

/// The first eight bytes of every object file.
pub const MAGIC: [u8; 8] = *b"CALMOBJ\0";
/// The format version this module writes and reads.
pub const VERSION: u16 = 1;
/// Prefix of the name of a file being written; [`is_temp_name`] recognises it.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Magic, version and header length.
pub(crate) const PREFIX_LEN: u64 = 8 + 2 + 4;
/// Header CRC plus body CRC.
const CRC_LEN: u64 = 4 + 4;

const FLAG_STALE_FORBIDDEN: u8 = 1 << 0;
const FLAG_IMMUTABLE: u8 = 1 << 1;
const FLAG_MARKER: u8 = 1 << 2;
const FLAG_VARIANT: u8 = 1 << 3;
const FLAG_SOURCE_ROUTE: u8 = 1 << 4;
const FLAG_SOURCE_HEURISTIC: u8 = 1 << 5;
const KNOWN_FLAGS: u8 = FLAG_STALE_FORBIDDEN
    | FLAG_IMMUTABLE
    | FLAG_MARKER
    | FLAG_VARIANT
    | FLAG_SOURCE_ROUTE
    | FLAG_SOURCE_HEURISTIC;

/// The content codings an [`Encoded`] may carry, as `&'static str` tokens.
const CODINGS: [&str; 2] = ["br", "gzip"];

/// Why a file cannot be used. Every variant means: do not serve it; the
/// caller removes it.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Reading, writing or renaming failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// Not an object file: the first eight bytes are not [`MAGIC`].
    #[error("not a calmcache object file (bad magic)")]
    BadMagic,
    /// An object file of a format version this build does not read.
    #[error("unsupported object file version {0}")]
    UnsupportedVersion(u16),
    /// The file is shorter than its header says (a torn write).
    #[error("object file truncated: expected {expected} bytes, found {actual}")]
    Truncated {
        /// Bytes the file should have (at least).
        expected: u64,
        /// Bytes it has.
        actual: u64,
    },
    /// The header or body checksum does not match.
    #[error("object file checksum mismatch")]
    Checksum,
    /// The header is well-checksummed but makes no sense (or, when writing,
    /// the object cannot be represented): the reason.
    #[error("corrupt object file: {0}")]
    Corrupt(&'static str),
    /// The file holds another key than the one asked for.
    #[error("object file holds another key")]
    KeyMismatch,
}

/// What the loader needs from a file without reading its body: the key,
/// sizes, timing.
#[derive(Clone, Debug)]
pub struct FileSummary {
    /// The key the object was stored under.
    pub key: CacheKey,
    /// The file's length in bytes (what it costs the disk zone).
    pub file_len: u64,
    /// Wall-clock time it was stored.
    pub stored_at: SystemTime,
    /// Its freshness lifetime (`freshness.lifetime`).
    pub meta_lifetime: Duration,
    /// Its freshness as stored.
    pub freshness: Freshness,
    /// How long the origin took to produce it.
    pub fetch_time: Duration,
    /// A Vary marker rather than a response.
    pub is_marker: bool,
    /// Response status code.
    pub status: u16,
    /// Its cache tags (`Cache-Tag`, `Surrogate-Key`), for purges by tag.
    pub tags: Vec<String>,
}

/// Serialises `object` stored under `key` into a temporary file in `dir`,
/// then renames it atomically to `path`, which must lie in `dir` or a
/// subdirectory of it (missing parent directories of `path` are created).
///
/// `stored_at` is the object's wall-clock store time ([`ObjectMeta`] only has
/// a monotonic instant; the caller passes `SystemTime::now()` minus the
/// object's residence). Returns the file's length. On failure no temporary
/// file is left behind (best effort), and an existing file at `path` is
/// untouched. An object the format cannot hold (an unknown content coding,
/// a field too long for its length prefix) fails with
/// [`FormatError::Corrupt`] before anything is written.
pub fn write_object(
    dir: &Path,
    path: &Path,
    key: &CacheKey,
    object: &CachedObject,
    stored_at: SystemTime,
) -> Result<u64, FormatError> {
    if !path.starts_with(dir) || path.file_name().is_none() || path == dir {
        return Err(FormatError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            "object path must be a file inside the zone directory",
        )));
    }
    let header = encode_header(key, object, stored_at, object.body.len() as u64)?;
    let header_len = u32::try_from(header.len()).map_err(|_| FormatError::Corrupt("header"))?;
    let payload_len = payload_len(object)?;
    let total = PREFIX_LEN
        .checked_add(u64::from(header_len))
        .and_then(|n| n.checked_add(CRC_LEN))
        .and_then(|n| n.checked_add(payload_len))
        .ok_or(FormatError::Corrupt("object too large"))?;

    let (tmp, file) = create_temp(dir)?;
    let written =
        write_file(file, &header, header_len, object).and_then(|()| rename_into(&tmp, path));
    match written {
        Ok(()) => Ok(total),
        Err(e) => {
            // Best effort: the loader deletes leftovers by name anyway.
            let _ = fs::remove_file(&tmp);
            Err(FormatError::Io(e))
        }
    }
}

/// The bytes [`write_object`] would write for `object` under `key`, in
/// memory: the same framing, lengths and checksums, for a store that keeps
/// objects as values (the shared tier of fleet mode). [`parse_object`]
/// reads them back, verified.
pub fn encode_object(
    key: &CacheKey,
    object: &CachedObject,
    stored_at: SystemTime,
) -> Result<Vec<u8>, FormatError> {
    let header = encode_header(key, object, stored_at, object.body.len() as u64)?;
    let header_len = u32::try_from(header.len()).map_err(|_| FormatError::Corrupt("header"))?;
    let total = PREFIX_LEN
        .checked_add(u64::from(header_len))
        .and_then(|n| n.checked_add(CRC_LEN))
        .and_then(|n| n.checked_add(payload_len(object).ok()?))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(FormatError::Corrupt("object too large"))?;
    let mut out = Vec::with_capacity(total);
    write_framed(&mut out, &header, header_len, object)?;
    Ok(out)
}

/// Reads and verifies the whole file at `path`: magic, version, header
/// checksum, total length, body checksum and, when `expect` is given, that
/// the stored key equals it.
///
/// The object's `stored_at` is mapped back onto tokio's monotonic clock as
/// `Instant::now() - (SystemTime::now() - stored_at)`, saturating: a store
/// time in the future counts as now. Body and encodings share one buffer
/// (the file's bytes), so nothing is copied after the read.
pub fn read_object(
    path: &Path,
    expect: Option<&KeyRef<'_>>,
) -> Result<(CacheKey, CachedObject), FormatError> {
    parse_object(fs::read(path)?, expect, true)
}

/// Verifies and decodes `data`, a whole object file already in memory, as
/// [`read_object`] does; the body checksum only when `verify_body` (the
/// caller may know this file's body was verified before).
pub fn parse_object(
    data: Vec<u8>,
    expect: Option<&KeyRef<'_>>,
    verify_body: bool,
) -> Result<(CacheKey, CachedObject), FormatError> {
    let file_len = data.len() as u64;
    let header_len = check_prefix(&data, file_len)?;
    // check_prefix guarantees the header and its CRC are within `data`.
    let start = PREFIX_LEN as usize;
    let header_bytes = data
        .get(start..start + header_len)
        .ok_or(FormatError::Corrupt("header bounds"))?;
    let crc_at = start + header_len;
    check_header_crc(header_bytes, data.get(crc_at..crc_at + 4))?;
    let header = parse_header(header_bytes)?;
    let payload_at = (crc_at + 4) as u64;
    check_total(payload_at, &header, file_len)?;
    check_key(&header, expect)?;

    let data = Bytes::from(data);
    // check_total: payload_at + payload + 4 == data.len(), all in usize range.
    let payload_end = data.len() - 4;
    let payload = data.slice(payload_at as usize..payload_end);
    let mut stored_crc = [0u8; 4];
    stored_crc.copy_from_slice(&data[payload_end..]);
    if verify_body && crc32fast::hash(&payload) != u32::from_le_bytes(stored_crc) {
        return Err(FormatError::Checksum);
    }

    let meta = header.meta();
    let object = match header.marker {
        Some(index) => CachedObject::marker(meta, index),
        None => {
            let body_len = header.body_len as usize;
            let body = payload.slice(..body_len);
            let mut at = body_len;
            let mut encodings = Vec::with_capacity(header.encodings.len());
            for (coding, len) in &header.encodings {
                let len = *len as usize;
                encodings.push(Encoded {
                    coding,
                    body: payload.slice(at..at + len),
                });
                at += len;
            }
            CachedObject::assemble(
                meta,
                header.status,
                header.headers,
                body,
                encodings,
                header.variant,
            )
        }
    };
    Ok((header.key, object))
}

/// Like [`read_object`], but a body over `inline_limit` bytes (without
/// encodings) is left in the file: the object comes back with an empty
/// `body` and a [`LazyBody`](crate::object::LazyBody) to stream it from, so
/// a hit on a large object costs bounded memory. Such a body's checksum is
/// verified by whoever reads it to the end.
pub fn open_object(
    path: &Path,
    expect: Option<&KeyRef<'_>>,
    inline_limit: u64,
) -> Result<(CacheKey, CachedObject), FormatError> {
    let mut file = File::open(path)?;
    let file_len = file.metadata()?.len();
    if file_len <= inline_limit {
        // Small: the whole file in one read through the same descriptor.
        let mut data = Vec::with_capacity(file_len as usize);
        file.read_to_end(&mut data)?;
        return parse_object(data, expect, true);
    }
    let (header, file_len) = read_header(&mut file)?;
    if header.marker.is_some() || !header.encodings.is_empty() || header.body_len <= inline_limit {
        file.seek(io::SeekFrom::Start(0))?;
        let mut data = Vec::with_capacity(file_len as usize);
        file.read_to_end(&mut data)?;
        return parse_object(data, expect, true);
    }
    check_key(&header, expect)?;
    let payload_at = file_len - header.body_len - 4;
    let mut crc = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut crc, file_len - 4)?;
    let meta = header.meta();
    let mut object = CachedObject::assemble(
        meta,
        header.status,
        header.headers,
        Bytes::new(),
        Vec::new(),
        header.variant,
    );
    object.set_lazy_body(crate::object::LazyBody {
        file: std::sync::Arc::new(file),
        offset: payload_at,
        len: header.body_len,
        crc: u32::from_le_bytes(crc),
        path: path.to_path_buf(),
    });
    Ok((header.key, object))
}

/// Reads only the header of the file at `path` (and checks the file's
/// length against it, without reading the body): for the loader scanning
/// thousands of files. The body checksum is not verified here;
/// [`read_object`] does that when the object is served.
pub fn read_summary(path: &Path) -> Result<FileSummary, FormatError> {
    let (header, file_len) = read_header(&mut File::open(path)?)?;
    Ok(FileSummary {
        key: header.key,
        file_len,
        stored_at: header.stored_at,
        meta_lifetime: header.freshness.lifetime,
        freshness: header.freshness,
        fetch_time: header.fetch_time,
        is_marker: header.marker.is_some(),
        status: header.status.as_u16(),
        tags: crate::object::tags_in(&header.headers)
            .map(str::to_owned)
            .collect(),
    })
}

/// Reads the prefix and header of an open file, checks the header CRC and
/// that the file is exactly as long as the header says, without reading the
/// payload. Returns the header and the file's length.
fn read_header(file: &mut File) -> Result<(Header, u64), FormatError> {
    let file_len = file.metadata()?.len();
    let mut prefix = Vec::with_capacity(PREFIX_LEN as usize);
    (&mut *file).take(PREFIX_LEN).read_to_end(&mut prefix)?;
    let header_len = check_prefix(&prefix, file_len)?;
    // check_prefix bounded header_len + 4 by the file's length.
    let mut rest = Vec::with_capacity(header_len + 4);
    (&mut *file)
        .take(header_len as u64 + 4)
        .read_to_end(&mut rest)?;
    if rest.len() != header_len + 4 {
        // The file shrank under us.
        return Err(FormatError::Truncated {
            expected: PREFIX_LEN + header_len as u64 + 4,
            actual: PREFIX_LEN + rest.len() as u64,
        });
    }
    let (header_bytes, crc) = rest.split_at(header_len);
    check_header_crc(header_bytes, Some(crc))?;
    let header = parse_header(header_bytes)?;
    check_total(PREFIX_LEN + header_len as u64 + 4, &header, file_len)?;
    Ok((header, file_len))
}

/// Writes a soft purge at `purged_at` into the header of the object file
/// at `path`, in place: its lifetime ends at its age then, and it may be
/// served stale for [`SOFT_PURGE_STALE`](crate::object::SOFT_PURGE_STALE)
/// ([`crate::object::soft_purged`]), so the mark outlives a restart. Only
/// fixed-width fields and the header checksum change, in one write; the
/// file keeps its length and format version. Returns `Ok(false)`, writing
/// nothing, when the file holds another key than `expect` (if given) or was stored
/// after `purged_at` (a newer copy the purge must not touch). Blocking.
///
/// A reader racing the write may see a torn header: its checksum fails and
/// the file is dropped as broken, a miss, never a wrong answer.
pub fn mark_soft_purged(
    path: &Path,
    expect: Option<&KeyRef<'_>>,
    purged_at: SystemTime,
) -> Result<bool, FormatError> {
    let mut file = OpenOptions::new().read(true).write(true).open(path)?;
    let file_len = file.metadata()?.len();
    let mut prefix = Vec::with_capacity(PREFIX_LEN as usize);
    (&mut file).take(PREFIX_LEN).read_to_end(&mut prefix)?;
    let header_len = check_prefix(&prefix, file_len)?;
    let mut rest = vec![0u8; header_len + 4];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut rest, PREFIX_LEN)?;
    let (header_bytes, crc) = rest.split_at_mut(header_len);
    check_header_crc(header_bytes, Some(crc))?;
    let header = parse_header(header_bytes)?;
    check_total(PREFIX_LEN + header_len as u64 + 4, &header, file_len)?;
    if check_key(&header, expect).is_err() {
        return Ok(false);
    }
    let Ok(resident) = purged_at.duration_since(header.stored_at) else {
        return Ok(false);
    };
    let age = header.freshness.initial_age.saturating_add(resident);
    let f = crate::object::soft_purged(&header.freshness, age);
    let k = header.key.as_ref();
    // scheme, host, path (u32 length + bytes each), status, stored_at,
    // fetch_time: then lifetime, initial_age, swr, sie, flags.
    let at = 12 + k.scheme.len() + k.host.len() + k.path_and_query.len() + 2 + 8 + 8;
    let fields = header_bytes
        .get_mut(at..at + 33)
        .ok_or(FormatError::Corrupt("header bounds"))?;
    for (i, d) in [
        f.lifetime,
        f.initial_age,
        f.stale_while_revalidate,
        f.stale_if_error,
    ]
    .into_iter()
    .enumerate()
    {
        fields[i * 8..i * 8 + 8].copy_from_slice(&millis(d).to_le_bytes());
    }
    if !f.immutable {
        fields[32] &= !FLAG_IMMUTABLE;
    }
    let sum = crc32fast::hash(header_bytes);
    crc.copy_from_slice(&sum.to_le_bytes());
    std::os::unix::fs::FileExt::write_all_at(&file, &rest, PREFIX_LEN)?;
    Ok(true)
}

/// Fails with [`FormatError::KeyMismatch`] unless the file holds `expect`.
fn check_key(header: &Header, expect: Option<&KeyRef<'_>>) -> Result<(), FormatError> {
    let Some(expect) = expect else {
        return Ok(());
    };
    let k = header.key.as_ref();
    if k.scheme != expect.scheme
        || k.host != expect.host
        || k.path_and_query != expect.path_and_query
    {
        return Err(FormatError::KeyMismatch);
    }
    Ok(())
}

/// True for a temporary file name (it starts with [`TEMP_PREFIX`]): a write
/// in progress, or one an interrupted process left.
pub fn is_temp_name(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(TEMP_PREFIX.as_bytes())
}

/// True for a temporary file this process start created: its name carries
/// [`start_token`]. Any other temporary file in a zone is a leftover (a
/// crash, `kill -9`, an earlier version naming them after its PID).
pub fn is_own_temp_name(name: &OsStr) -> bool {
    let own = own_temp_prefix();
    name.as_encoded_bytes().starts_with(own.as_bytes())
}

/// A random token drawn once per process start. Temp files are named after
/// it, not after the PID: in a container the PID is 1 on every start, so a
/// crash's files would look like this start's writes in progress forever.
pub fn start_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| format!("{:016x}", rand::random::<u64>()))
}

/// `.tmp-<token>-`: the start of every temp file name of this start.
fn own_temp_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| format!("{TEMP_PREFIX}{}-", start_token()))
}

// ---------------------------------------------------------------- writing

/// Creates a new, uniquely named temporary file in `dir`:
/// `.tmp-<start token>-<n>`.
///
/// The file is open for reading and writing (a reader can share it:
/// [`File::try_clone`]). `dir` is created only when it is missing, so the
/// common case costs one `openat`, not a `mkdir` and a `stat` besides.
pub(crate) fn create_temp(dir: &Path) -> io::Result<(PathBuf, File)> {
    match create_temp_once(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            crate::private_fs::create_dir_all(dir)?;
            create_temp_once(dir)
        }
        other => other,
    }
}

/// Renames `tmp` to `path`, creating `path`'s directory only when the
/// rename finds it missing (re-created after a fault, or a subdirectory).
pub(crate) fn rename_into(tmp: &Path, path: &Path) -> io::Result<()> {
    match fs::rename(tmp, path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && tmp.exists() => {
            if let Some(parent) = path.parent() {
                crate::private_fs::create_dir_all(parent)?;
            }
            fs::rename(tmp, path)
        }
        other => other,
    }
}

fn create_temp_once(dir: &Path) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = own_temp_prefix();
    let mut last = None;
    // The token is random per start, so a clash needs a leftover of a start
    // that drew the same 64 bits; a few tries step over any such leftovers.
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{prefix}{n}"));
        // 0600: a zone's files are the service's alone (private_fs.rs).
        match crate::private_fs::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

fn write_file(file: File, header: &[u8], header_len: u32, object: &CachedObject) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(64 * 1024, file);
    write_framed(&mut out, header, header_len, object)?;
    out.flush()
}

/// The whole file around an encoded `header` (of `header_len` bytes) to
/// `out`: magic, version, length, header, its CRC, payload, payload CRC.
fn write_framed(
    out: &mut impl Write,
    header: &[u8],
    header_len: u32,
    object: &CachedObject,
) -> io::Result<()> {
    out.write_all(&MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&header_len.to_le_bytes())?;
    out.write_all(header)?;
    out.write_all(&crc32fast::hash(header).to_le_bytes())?;
    let mut crc = crc32fast::Hasher::new();
    for part in payload_parts(object) {
        crc.update(part);
        out.write_all(part)?;
    }
    out.write_all(&crc.finalize().to_le_bytes())
}

/// Body then encodings, in file order; a marker has none.
fn payload_parts(object: &CachedObject) -> impl Iterator<Item = &[u8]> {
    let is_response = object.vary_index().is_none();
    std::iter::once(&object.body[..])
        .chain(object.encodings().iter().map(|e| &e.body[..]))
        .filter(move |_| is_response)
}

fn payload_len(object: &CachedObject) -> Result<u64, FormatError> {
    payload_parts(object).try_fold(0u64, |sum, part| {
        sum.checked_add(part.len() as u64)
            .ok_or(FormatError::Corrupt("object too large"))
    })
}

/// The header of `object` under `key`, its body `body_len` bytes long (the
/// object's own body, or one written to the file as it arrived). Its length
/// does not depend on `stored_at`, the timings or `body_len`.
pub(crate) fn encode_header(
    key: &CacheKey,
    object: &CachedObject,
    stored_at: SystemTime,
    body_len: u64,
) -> Result<Vec<u8>, FormatError> {
    let mut h = Vec::with_capacity(256);
    let k = key.as_ref();
    for part in [k.scheme, k.host, k.path_and_query] {
        put_u32_bytes(&mut h, part.as_bytes(), "key too long")?;
    }
    let marker = object.vary_index();
    h.extend_from_slice(&object.status.as_u16().to_le_bytes());
    let since_epoch = stored_at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let f = &object.meta.freshness;
    for d in [
        since_epoch,
        object.meta.fetch_time,
        f.lifetime,
        f.initial_age,
        f.stale_while_revalidate,
        f.stale_if_error,
    ] {
        h.extend_from_slice(&millis(d).to_le_bytes());
    }
    let variant = match marker {
        Some(_) => None,
        None => object.variant(),
    };
    let mut flags = 0u8;
    if f.stale_forbidden {
        flags |= FLAG_STALE_FORBIDDEN;
    }
    if f.immutable {
        flags |= FLAG_IMMUTABLE;
    }
    flags |= match f.source {
        LifetimeSource::Origin => 0,
        LifetimeSource::Route => FLAG_SOURCE_ROUTE,
        LifetimeSource::Heuristic => FLAG_SOURCE_HEURISTIC,
    };
    if marker.is_some() {
        flags |= FLAG_MARKER;
    }
    if variant.is_some() {
        flags |= FLAG_VARIANT;
    }
    h.push(flags);

    if marker.is_some() {
        // A marker is not a response: nothing of one is stored.
        h.extend_from_slice(&0u32.to_le_bytes());
    } else {
        let count = u32::try_from(object.head.len())
            .map_err(|_| FormatError::Corrupt("too many headers"))?;
        h.extend_from_slice(&count.to_le_bytes());
        for (name, value) in object.head.iter() {
            put_u16_bytes(&mut h, name.as_str().as_bytes(), "header name too long")?;
            put_u32_bytes(&mut h, value, "header value too long")?;
        }
    }
    if let Some(index) = marker {
        h.extend_from_slice(&index.id.to_le_bytes());
        let count = u16::try_from(index.names.len())
            .map_err(|_| FormatError::Corrupt("too many vary names"))?;
        h.extend_from_slice(&count.to_le_bytes());
        for name in &index.names {
            put_u16_bytes(&mut h, name.as_str().as_bytes(), "vary name too long")?;
        }
    }
    if let Some(variant) = variant {
        put_u32_bytes(&mut h, variant.as_bytes(), "variant too long")?;
    }
    let encodings: &[Encoded] = match marker {
        Some(_) => &[],
        None => object.encodings(),
    };
    let count =
        u16::try_from(encodings.len()).map_err(|_| FormatError::Corrupt("too many encodings"))?;
    h.extend_from_slice(&count.to_le_bytes());
    for e in encodings {
        if known_coding(e.coding.as_bytes()).is_none() {
            return Err(FormatError::Corrupt("unknown content coding"));
        }
        // Known tokens are a few bytes long.
        h.push(e.coding.len() as u8);
        h.extend_from_slice(e.coding.as_bytes());
        h.extend_from_slice(&(e.body.len() as u64).to_le_bytes());
    }
    let body_len = match marker {
        Some(_) => 0,
        None => body_len,
    };
    h.extend_from_slice(&body_len.to_le_bytes());
    Ok(h)
}

fn put_u16_bytes(h: &mut Vec<u8>, bytes: &[u8], what: &'static str) -> Result<(), FormatError> {
    let len = u16::try_from(bytes.len()).map_err(|_| FormatError::Corrupt(what))?;
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(bytes);
    Ok(())
}

fn put_u32_bytes(h: &mut Vec<u8>, bytes: &[u8], what: &'static str) -> Result<(), FormatError> {
    let len = u32::try_from(bytes.len()).map_err(|_| FormatError::Corrupt(what))?;
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(bytes);
    Ok(())
}

/// Whole milliseconds, saturating at `u64::MAX`.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn known_coding(token: &[u8]) -> Option<&'static str> {
    CODINGS.iter().copied().find(|c| c.as_bytes() == token)
}

// ---------------------------------------------------------------- reading

/// A parsed, validated header.
struct Header {
    key: CacheKey,
    status: StatusCode,
    stored_at: SystemTime,
    fetch_time: Duration,
    freshness: Freshness,
    headers: HeaderMap,
    marker: Option<VaryIndex>,
    variant: Option<Box<str>>,
    encodings: Vec<(&'static str, u64)>,
    body_len: u64,
}

impl Header {
    /// The object's metadata, its store time mapped onto the monotonic clock.
    fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            stored_at: monotonic_from_wall(self.stored_at),
            freshness: self.freshness,
            fetch_time: self.fetch_time,
        }
    }
}

/// Checks magic and version in `prefix` (the file's first bytes, at most
/// [`PREFIX_LEN`] of them needed) and that the header and its CRC fit in a
/// file of `file_len` bytes; returns the header length.
fn check_prefix(prefix: &[u8], file_len: u64) -> Result<usize, FormatError> {
    if prefix.get(..8) != Some(&MAGIC[..]) {
        return Err(FormatError::BadMagic);
    }
    let mut r = Reader::new(prefix.get(8..).unwrap_or_default());
    let (Ok(version), Ok(header_len)) = (r.u16(), r.u32()) else {
        return Err(FormatError::Truncated {
            expected: PREFIX_LEN,
            actual: file_len,
        });
    };
    if version != VERSION {
        return Err(FormatError::UnsupportedVersion(version));
    }
    let needed = PREFIX_LEN + u64::from(header_len) + 4;
    if file_len < needed {
        return Err(FormatError::Truncated {
            expected: needed,
            actual: file_len,
        });
    }
    usize::try_from(header_len).map_err(|_| FormatError::Corrupt("header length"))
}

fn check_header_crc(header: &[u8], crc: Option<&[u8]>) -> Result<(), FormatError> {
    let stored = crc
        .and_then(|c| <[u8; 4]>::try_from(c).ok())
        .map(u32::from_le_bytes)
        .ok_or(FormatError::Corrupt("header checksum bounds"))?;
    if crc32fast::hash(header) == stored {
        Ok(())
    } else {
        Err(FormatError::Checksum)
    }
}

/// Checks that the file is exactly as long as its header says: the payload
/// starts at `payload_at`, then comes the body CRC.
fn check_total(payload_at: u64, header: &Header, file_len: u64) -> Result<(), FormatError> {
    let expected = header
        .encodings
        .iter()
        .try_fold(header.body_len, |sum, (_, len)| sum.checked_add(*len))
        .and_then(|payload| payload.checked_add(payload_at))
        .and_then(|n| n.checked_add(4))
        .ok_or(FormatError::Corrupt("lengths overflow"))?;
    if file_len < expected {
        Err(FormatError::Truncated {
            expected,
            actual: file_len,
        })
    } else if file_len > expected {
        Err(FormatError::Corrupt(
            "trailing bytes after the body checksum",
        ))
    } else {
        Ok(())
    }
}

fn parse_header(bytes: &[u8]) -> Result<Header, FormatError> {
    let mut r = Reader::new(bytes);
    let scheme = r.str_u32()?;
    let host = r.str_u32()?;
    let path_and_query = r.str_u32()?;
    let key = CacheKey::new(scheme, host, path_and_query);
    let status =
        StatusCode::from_u16(r.u16()?).map_err(|_| FormatError::Corrupt("invalid status"))?;
    let stored_at = UNIX_EPOCH
        .checked_add(Duration::from_millis(r.u64()?))
        .ok_or(FormatError::Corrupt("stored_at out of range"))?;
    let fetch_time = Duration::from_millis(r.u64()?);
    let lifetime = Duration::from_millis(r.u64()?);
    let initial_age = Duration::from_millis(r.u64()?);
    let stale_while_revalidate = Duration::from_millis(r.u64()?);
    let stale_if_error = Duration::from_millis(r.u64()?);
    let flags = r.u8()?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(FormatError::Corrupt("unknown flags"));
    }
    let source = match (
        flags & FLAG_SOURCE_ROUTE != 0,
        flags & FLAG_SOURCE_HEURISTIC != 0,
    ) {
        (false, false) => LifetimeSource::Origin,
        (true, false) => LifetimeSource::Route,
        (false, true) => LifetimeSource::Heuristic,
        (true, true) => return Err(FormatError::Corrupt("two lifetime sources")),
    };
    let freshness = Freshness {
        lifetime,
        initial_age,
        stale_while_revalidate,
        stale_if_error,
        stale_forbidden: flags & FLAG_STALE_FORBIDDEN != 0,
        immutable: flags & FLAG_IMMUTABLE != 0,
        source,
    };
    let is_marker = flags & FLAG_MARKER != 0;

    let count = r.u32()?;
    let mut headers = HeaderMap::new();
    for _ in 0..count {
        let name = HeaderName::from_bytes(r.bytes_u16()?)
            .map_err(|_| FormatError::Corrupt("invalid header name"))?;
        let value = HeaderValue::from_bytes(r.bytes_u32()?)
            .map_err(|_| FormatError::Corrupt("invalid header value"))?;
        headers
            .try_append(name, value)
            .map_err(|_| FormatError::Corrupt("too many headers"))?;
    }

    let marker = if is_marker {
        let id = r.u64()?;
        let count = r.u16()?;
        let mut names = Vec::new();
        for _ in 0..count {
            names.push(
                HeaderName::from_bytes(r.bytes_u16()?)
                    .map_err(|_| FormatError::Corrupt("invalid vary name"))?,
            );
        }
        Some(VaryIndex { id, names })
    } else {
        None
    };
    let variant = if flags & FLAG_VARIANT != 0 {
        Some(Box::from(r.str_u32()?))
    } else {
        None
    };

    let count = r.u16()?;
    let mut encodings = Vec::new();
    for _ in 0..count {
        let len = usize::from(r.u8()?);
        let coding =
            known_coding(r.take(len)?).ok_or(FormatError::Corrupt("unknown content coding"))?;
        encodings.push((coding, r.u64()?));
    }
    let body_len = r.u64()?;
    if !r.is_empty() {
        return Err(FormatError::Corrupt("trailing bytes in header"));
    }
    if is_marker
        && (variant.is_some() || !headers.is_empty() || !encodings.is_empty() || body_len != 0)
    {
        return Err(FormatError::Corrupt("marker with response data"));
    }
    Ok(Header {
        key,
        status,
        stored_at,
        fetch_time,
        freshness,
        headers,
        marker,
        variant,
        encodings,
        body_len,
    })
}

/// A cursor over the header bytes; every read is bounded by what is left.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if n > self.rest.len() {
            return Err(FormatError::Corrupt("header field runs past the header"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn bytes_u16(&mut self) -> Result<&'a [u8], FormatError> {
        let len = usize::from(self.u16()?);
        self.take(len)
    }

    fn bytes_u32(&mut self) -> Result<&'a [u8], FormatError> {
        let len = usize::try_from(self.u32()?).unwrap_or(usize::MAX);
        self.take(len)
    }

    fn str_u32(&mut self) -> Result<&'a str, FormatError> {
        std::str::from_utf8(self.bytes_u32()?).map_err(|_| FormatError::Corrupt("invalid UTF-8"))
    }
}

/// `Instant::now() - (SystemTime::now() - stored_at)`, saturating: a future
/// `stored_at` is now, and an age further back than the monotonic clock can
/// express is the earliest instant it can.
fn monotonic_from_wall(stored_at: SystemTime) -> Instant {
    let now = Instant::now();
    let age = SystemTime::now()
        .duration_since(stored_at)
        .unwrap_or_default();
    if let Some(at) = now.checked_sub(age) {
        return at;
    }
    // Rare (an age beyond the clock's range): find the largest age that can
    // be subtracted, so the object looks as old as possible, never younger.
    let (mut ok, mut too_far) = (Duration::ZERO, age);
    while too_far.saturating_sub(ok) > Duration::from_millis(1) {
        let mid = ok + (too_far - ok) / 2;
        if now.checked_sub(mid).is_some() {
            ok = mid;
        } else {
            too_far = mid;
        }
    }
    now.checked_sub(ok).unwrap_or(now)
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "format_props.rs"]
mod props;
