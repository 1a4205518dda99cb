//! What calmcache writes into a zone is the service's alone: directories
//! are created 0700 and files 0600, whatever the process umask (a cache
//! holds answers meant for one client: `private` bodies revalidated per
//! user, pages behind a login that a route keyed by cookie). With the usual
//! umask (022) they would otherwise be world-readable outside the systemd
//! unit, whose `UMask=` only covers the packaged service.
//!
//! The umask can only narrow these modes, never widen them. An existing
//! zone directory that others can enter is narrowed to 0700 when the zone
//! opens ([`tighten_dir`]): everything below it (files of earlier versions
//! that followed the umask) is then out of their reach too, without a walk.
//!
//! Owns the modes and the calls that apply them; every directory and file
//! of a disk zone (object files, temp files, the marker, the fleet's
//! position file) is made through here.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every directory calmcache creates for a zone: the owner only.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file calmcache creates in a zone: the owner only.
pub const FILE_MODE: u32 = 0o600;
/// The group and other bits: none of them may be set on a zone's files.
const OTHERS: u32 = 0o077;

/// `mkdir -p` whose new directories are [`DIR_MODE`] (existing ones are
/// left as they are; see [`tighten_dir`] for a zone's own directory).
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

/// Open options whose new file gets [`FILE_MODE`]; the caller adds the
/// access and creation flags.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// Writes `bytes` as the whole of `path` (created, or truncated), which is
/// [`FILE_MODE`] afterwards: a file left by an earlier version with a wider
/// mode is narrowed before anything is written.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    narrow(&file)?;
    file.write_all(bytes)
}

/// Narrows an open file to the owner's bits when others have any.
fn narrow(file: &File) -> io::Result<()> {
    let mode = file.metadata()?.permissions().mode();
    if mode & OTHERS != 0 {
        file.set_permissions(Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

/// Narrows the directory `dir` to [`DIR_MODE`] when its group or others
/// have any bit, and returns the mode it had (`None`: it was private
/// already). A zone directory is calmcache's own (it carries the zone
/// marker, or was empty), so nothing else depends on its wider mode.
pub fn tighten_dir(dir: &Path) -> io::Result<Option<u32>> {
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
    if mode & OTHERS == 0 {
        return Ok(None);
    }
    std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))?;
    Ok(Some(mode))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cc-private-fs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_wide_file_is_narrowed_when_written_again() {
        let dir = scratch("narrow");
        create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"old").unwrap();
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        write(&file, b"new").unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_wide_directory_is_tightened_and_says_what_it_was() {
        let dir = scratch("tighten");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        assert_eq!(tighten_dir(&dir).unwrap(), Some(0o755));
        assert_eq!(mode(&dir), DIR_MODE);
        assert_eq!(tighten_dir(&dir).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
