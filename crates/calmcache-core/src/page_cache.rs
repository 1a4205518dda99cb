//! Reads a whole small file on the calling (async) thread only when the
//! kernel can answer from memory without waiting, so a disk hit whose pages
//! are cached costs no hop to the blocking pool.
//!
//! `openat2(RESOLVE_CACHED)` fails with `EAGAIN` unless every path component
//! is already in the dentry cache, and `preadv2(RWF_NOWAIT)` fails with
//! `EAGAIN` (or returns a short count) unless the pages are in the page
//! cache: neither syscall ever waits for the device. Anything short of the
//! whole file is "would block" and the caller reads on the blocking pool,
//! which also sees and reports real errors. This is the fast path io_uring
//! takes before punting a read to its worker threads.
//!
//! The file is opened with `O_NOATIME`, so a read never waits on an inode
//! update either; where that is refused (a file owned by another user) the
//! flag is dropped for the rest of the zone's life ([`Support`], one per
//! zone: a file system that refuses something refuses it for its zone only).

use std::io::IoSliceMut;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
use rustix::io::{Errno, ReadWriteFlags};

/// What the kernel and file system of one zone refused, so each is tried
/// once: kept per zone (a zone on a file system without nowait reads does
/// not turn the fast path off for the others).
#[derive(Debug)]
pub struct Support {
    /// False once the kernel said it has no `openat2` / `RESOLVE_CACHED` /
    /// `RWF_NOWAIT` here: every read then goes to the blocking pool.
    nowait: AtomicBool,
    /// False once `O_NOATIME` was refused.
    noatime: AtomicBool,
}

impl Default for Support {
    fn default() -> Self {
        Support {
            nowait: AtomicBool::new(true),
            noatime: AtomicBool::new(true),
        }
    }
}

/// The whole file at `path`, when it is exactly `len` bytes long and every
/// byte of it (and its path) is in memory; `None` otherwise, including on
/// any error (the caller's blocking read reports those).
pub fn read_whole(support: &Support, path: &Path, len: u64) -> Option<Vec<u8>> {
    if !support.nowait.load(Ordering::Relaxed) {
        return None;
    }
    let len = usize::try_from(len).ok()?;
    let fd = open(support, path)?;
    // One byte more than expected: a full buffer means the file is not the
    // one the index knows (the blocking read sorts that out).
    let mut buf = vec![0u8; len.checked_add(1)?];
    match rustix::io::preadv2(
        &fd,
        &mut [IoSliceMut::new(&mut buf)],
        0,
        ReadWriteFlags::NOWAIT,
    ) {
        Ok(n) if n == len => {
            buf.truncate(len);
            Some(buf)
        }
        Ok(_) => None,
        Err(e) => {
            note_unsupported(support, e);
            None
        }
    }
}

fn open(support: &Support, path: &Path) -> Option<rustix::fd::OwnedFd> {
    let base = OFlags::RDONLY | OFlags::CLOEXEC;
    let noatime = support.noatime.load(Ordering::Relaxed);
    let flags = if noatime {
        base | OFlags::NOATIME
    } else {
        base
    };
    match rustix::fs::openat2(CWD, path, flags, Mode::empty(), ResolveFlags::CACHED) {
        Ok(fd) => Some(fd),
        Err(Errno::PERM) if noatime => {
            support.noatime.store(false, Ordering::Relaxed);
            None
        }
        Err(e) => {
            note_unsupported(support, e);
            None
        }
    }
}

fn note_unsupported(support: &Support, e: Errno) {
    // ENOSYS: no openat2 (Linux < 5.6); EINVAL: an unknown resolve flag
    // (< 5.12); EOPNOTSUPP: a file system without nowait buffered reads.
    if matches!(e, Errno::NOSYS | Errno::INVAL | Errno::OPNOTSUPP) {
        support.nowait.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_a_cached_file_of_the_expected_length_only() {
        let dir = std::env::temp_dir().join(format!("calmcache-page-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, b"hello world").unwrap();
        // Just written: its pages are cached. Only kernels without the
        // syscalls (nowait turned false) may answer None.
        let support = Support::default();
        let got = read_whole(&support, &path, 11);
        if support.nowait.load(Ordering::Relaxed) {
            assert_eq!(got.as_deref(), Some(&b"hello world"[..]));
        }
        assert_eq!(
            read_whole(&support, &path, 10),
            None,
            "file longer than indexed"
        );
        assert_eq!(
            read_whole(&support, &path, 12),
            None,
            "file shorter than indexed"
        );
        assert_eq!(read_whole(&support, &dir.join("missing"), 1), None);
        // What one zone's file system refused is not refused for another.
        let refused = Support::default();
        refused.nowait.store(false, Ordering::Relaxed);
        assert_eq!(read_whole(&refused, &path, 11), None);
        if support.nowait.load(Ordering::Relaxed) {
            assert!(read_whole(&support, &path, 11).is_some());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
