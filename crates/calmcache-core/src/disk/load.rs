//! The disk tier's loader: at start, scans the zone directory and indexes
//! every valid object file while the zone already serves; torn, corrupt and
//! foreign files and temp files of earlier starts are removed, files of the
//! two-level layout of earlier versions moved home.
//!
//! Part of [`DiskTier`]: it uses the index through the tier's own methods
//! and imports nothing from the request path.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::format::{self as disk_format, FormatError};
use super::{key_hash, DiskTier, RESERVED_PREFIX};
use crate::warn_limited;

impl DiskTier {
    /// Scans the zone directory and indexes every valid object file; torn,
    /// corrupt and foreign files and leftover temp files are removed. Runs
    /// on the calling (blocking) thread; see [`DiskTier::spawn_loader`].
    pub fn load(&self) {
        let mut stack = vec![self.config.path.clone()];
        let mut dirs = Vec::new();
        // Temp files of earlier starts removed: (files, bytes).
        let mut leftovers = (0u64, 0u64);
        while let Some(dir) = stack.pop() {
            if dir != self.config.path {
                dirs.push(dir.clone());
            }
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    warn_limited!(self.warn.scan, "cannot scan cache directory",
                        dir = %dir.display(), error = %e);
                    continue;
                }
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    stack.push(path);
                    continue;
                }
                let name = entry.file_name();
                if dir == self.config.path
                    && name
                        .to_str()
                        .is_some_and(|n| n.starts_with(RESERVED_PREFIX))
                {
                    continue;
                }
                if disk_format::is_temp_name(&name) {
                    // This start's are writes in progress; any other is a
                    // crash leftover (no other process uses the directory:
                    // zone_lock.rs).
                    if !disk_format::is_own_temp_name(&name) {
                        let bytes = entry.metadata().map_or(0, |m| m.len());
                        if std::fs::remove_file(&path).is_ok() {
                            leftovers.0 += 1;
                            leftovers.1 += bytes;
                        }
                    }
                    continue;
                }
                self.load_file(&path);
            }
        }
        // Directories left empty (the two-level layout of earlier versions,
        // emptied by the moves above), deepest first; one in use is not empty.
        for dir in dirs.iter().rev() {
            if dir
                .strip_prefix(&self.config.path)
                .map_or(0, |p| p.components().count())
                > 1
            {
                let _ = std::fs::remove_dir(dir);
            }
        }
        if leftovers.0 > 0 {
            self.stats
                .leftover_temp_files
                .fetch_add(leftovers.0, Ordering::Relaxed);
            self.stats
                .leftover_temp_bytes
                .fetch_add(leftovers.1, Ordering::Relaxed);
            tracing::info!(
                zone = %self.config.path.display(),
                files = leftovers.0,
                bytes_freed = leftovers.1,
                "removed temp files left by an earlier start (a crash or kill -9)"
            );
        }
        self.stats.loader_done.store(true, Ordering::Relaxed);
    }

    fn load_file(&self, path: &Path) {
        match disk_format::read_summary(path) {
            Ok(summary) => {
                let hash = key_hash(&summary.key.as_ref());
                let home = self.file_path(hash);
                if home != path && !self.move_home(path, &home) {
                    return;
                }
                // Requests may have stored a newer copy meanwhile; keep it.
                if self.with_shard(hash, |map| map.contains_key(&hash)) {
                    return;
                }
                self.index(hash, summary.file_len, false);
                self.stats.loaded.fetch_add(1, Ordering::Relaxed);
                if crate::key::is_body_key(summary.key.path_and_query()) {
                    self.stats.body_uris_loaded.note_body_key(&summary.key);
                }
                self.loaded_hosts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .note(summary.key.as_ref().host);
            }
            Err(e) => {
                self.note_read_error(&e);
                // Only a file whose content is wrong is removed; an I/O
                // error (EIO, EMFILE, EACCES) says nothing about the file.
                if !matches!(e, FormatError::Io(_)) {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }

    /// A file not where its key belongs: moved there when it carries its own
    /// hash as name (the layout of an earlier version: `<h[0..2]>/<h[2..4]>/<h>`)
    /// and nothing is there yet; removed otherwise (a foreign or renamed
    /// file, or an older copy). True when it was moved.
    fn move_home(&self, path: &Path, home: &Path) -> bool {
        let named_right = path.file_name() == home.file_name();
        let moved = named_right
            && home
                .parent()
                .is_some_and(|dir| crate::private_fs::create_dir_all(dir).is_ok())
            && rustix::fs::renameat_with(
                rustix::fs::CWD,
                path,
                rustix::fs::CWD,
                home,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .is_ok();
        if !moved {
            if !named_right {
                self.stats.broken_files.fetch_add(1, Ordering::Relaxed);
            }
            let _ = std::fs::remove_file(path);
        }
        moved
    }

    /// Starts the loader on a blocking thread; the zone serves meanwhile
    /// (an object not indexed yet is a miss).
    pub fn spawn_loader(self: &Arc<Self>) {
        let tier = self.clone();
        tokio::task::spawn_blocking(move || tier.load());
    }
}
