//! One process per zone directory: an exclusive `flock` on the zone's
//! marker file, held while any tier of this process uses the directory.
//!
//! Two processes on one directory (a mistake: two services, or an old
//! process still draining) would each take the other's files for
//! leftovers: the loader removes temp files that are not from this start.
//! The second process is refused instead, with a message naming the
//! directory. Tiers of one process share the lock (a reload that opens the
//! zone again while the old generation drains), since they share the
//! per-start token that names their temp files.
//!
//! The kernel drops the lock when the process ends, `kill -9` included, so
//! a crash never leaves a zone locked.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

/// The held lock of one zone directory; released when the last tier of
/// this process that uses the directory is dropped.
#[derive(Debug)]
pub struct ZoneLock {
    /// The directory's (device, inode): the same directory under any path.
    id: (u64, u64),
    /// Closing it releases the `flock`.
    _file: File,
}

/// Locks held by this process.
static HELD: Mutex<Vec<Weak<ZoneLock>>> = Mutex::new(Vec::new());

impl ZoneLock {
    /// Locks the zone directory `dir` through its marker file `marker`
    /// (which must exist). Fails with [`io::ErrorKind::WouldBlock`] when
    /// another process holds it.
    pub fn acquire(dir: &Path, marker: &Path) -> io::Result<Arc<ZoneLock>> {
        let meta = std::fs::metadata(dir)?;
        let id = (meta.dev(), meta.ino());
        // Plain data: a panic elsewhere leaves the list usable.
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|w| w.strong_count() > 0);
        if let Some(lock) = held.iter().filter_map(Weak::upgrade).find(|l| l.id == id) {
            return Ok(lock);
        }
        let file = File::open(marker)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is in use by another calmcache process (it holds the lock on {}); \
                         two processes on one zone directory would remove each other's files: \
                         give each its own directory",
                        dir.display(),
                        marker.display()
                    ),
                ));
            }
            // NFS without lock support, for one: the zone still works, unguarded.
            Err(e) => tracing::warn!(
                dir = %dir.display(),
                error = %e,
                "cannot lock the zone directory; make sure no other calmcache process uses it"
            ),
        }
        let lock = Arc::new(ZoneLock { id, _file: file });
        held.push(Arc::downgrade(&lock));
        Ok(lock)
    }
}
