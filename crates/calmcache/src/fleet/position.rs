//! The purge stream position kept in each disk zone's directory
//! (`.calmcache-fleet-position`), so a restarted node knows which purges
//! it missed: read at the first poll, saved after each, off the workers.
//!
//! Must not: read the stream or call Redis.

use super::Fleet;
use super::LOG;

impl Fleet {
    pub(super) fn position_files(&self) -> std::sync::MutexGuard<'_, Vec<std::path::PathBuf>> {
        self.position_files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The position the disk zones saved (none to read: missing), read
    /// off the async workers.
    pub(super) async fn saved_position(&self) -> Position {
        let files = self.position_files().clone();
        if files.is_empty() {
            return Position::Missing;
        }
        tokio::task::spawn_blocking(move || read_position(&files))
            .await
            .unwrap_or(Position::Unusable)
    }

    /// Where the purge stream position is kept across restarts: a file in
    /// each disk zone's directory (set at start and on every reload).
    pub(crate) fn keep_position_in(&self, files: Vec<std::path::PathBuf>) {
        *self.position_files() = files;
    }

    /// Saves the purge stream position (after the purges read up to it
    /// were applied) in the disk zones, if it moved; off the async workers.
    pub(crate) async fn save_position(&self) {
        let epoch = self.epoch.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let last = self
            .last_purge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (Some(epoch), Some(last)) = (epoch, last) else {
            return;
        };
        let line = format!("{epoch} {last}\n");
        let files = self.position_files().clone();
        {
            let mut saved = self
                .saved_position
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if files.is_empty() || saved.as_deref() == Some(line.as_str()) {
                return;
            }
            *saved = Some(line.clone());
        }
        let written = tokio::task::spawn_blocking(move || write_position(&files, &line)).await;
        if !matches!(written, Ok(Ok(()))) {
            // Tried again after the next poll.
            *self
                .saved_position
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
            if let Ok(Err(e)) = written {
                tracing::warn!(target: LOG, error = %e, "the purge stream position was not saved");
            }
        }
    }
}

/// The purge stream position file in a disk zone's directory (a name the
/// zone's loader leaves alone).
pub(crate) const POSITION_FILE: &str = ".calmcache-fleet-position";

/// What the disk zones say about the purge stream position.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Position {
    /// No zone has a position file (new zones, or not in a fleet before).
    Missing,
    /// Every zone holds this one: Redis' data epoch and a stream id.
    Found(String, String),
    /// Unreadable, malformed, or not the same in every zone.
    Unusable,
}

/// The position saved in `files` (`epoch id`): every file must hold the
/// same (zones written together), or none is trusted.
pub(super) fn read_position(files: &[std::path::PathBuf]) -> Position {
    let mut found: Option<(String, String)> = None;
    let mut missing = 0;
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing += 1;
                continue;
            }
            Err(e) => {
                tracing::warn!(target: LOG, file = %file.display(), error = %e, "purge stream position not read");
                return Position::Unusable;
            }
        };
        let Some(this) = parse_position(&text) else {
            tracing::warn!(target: LOG, file = %file.display(), "not a purge stream position; ignored");
            return Position::Unusable;
        };
        if found.as_ref().is_some_and(|f| *f != this) {
            return Position::Unusable;
        }
        found = Some(this);
    }
    match found {
        None => Position::Missing,
        Some(_) if missing > 0 => Position::Unusable,
        Some((epoch, id)) => Position::Found(epoch, id),
    }
}

/// `epoch ms-seq` (one line) as its two parts.
pub(super) fn parse_position(text: &str) -> Option<(String, String)> {
    let (epoch, id) = text.trim().split_once(' ')?;
    let valid = !epoch.is_empty()
        && epoch.len() <= 64
        && epoch.bytes().all(|b| b.is_ascii_alphanumeric())
        && id
            .split_once('-')
            .is_some_and(|(ms, seq)| ms.parse::<u64>().is_ok() && seq.parse::<u64>().is_ok());
    valid.then(|| (epoch.to_owned(), id.to_owned()))
}

/// Writes `line` to every file (a new file renamed over the old one),
/// 0600 like every file in a zone directory (core private_fs.rs).
pub(super) fn write_position(files: &[std::path::PathBuf], line: &str) -> std::io::Result<()> {
    for file in files {
        let mut new = file.clone().into_os_string();
        new.push(".new");
        calmcache_core::private_fs::write(std::path::Path::new(&new), line.as_bytes())?;
        std::fs::rename(&new, file)?;
    }
    Ok(())
}
