//! The checks of the environment a config needs, shared by `calmcache
//! check`, `serve` and reloads so they cannot drift: what `check` passes,
//! `serve` does not refuse for a reason it could have seen.
//!
//! [`load`] = the config file, validated (`config/`: TOML, every key, TLS
//! certificates and keys loaded and matched, listen addresses parsed, the
//! admin token file read), then [`check_environment`]:
//! - each disk zone's directory, or its nearest existing ancestor when it
//!   does not exist yet (`serve` creates it), is a directory in which a
//!   probe file can be created and removed (a read-only file system, a
//!   missing permission, a file in the way all show here), and an existing
//!   non-empty one is a calmcache zone (it has its marker file);
//! - the access log file can be opened for appending, or, when it does not
//!   exist yet, its directory exists and a file can be created in it.
//!
//! Every problem is a [`Problem`] with its TOML path, all reported at once
//! (exit 2). Binding the listen ports is not checked: a port free now may be
//! taken at start, or free at start and taken now, and a check must not
//! take ports from a running proxy. Nor is the lock of a zone directory in
//! use (`check` runs next to the proxy it checks). Those fail `serve` with
//! exit 1.
//!
//! Only probe files are created (and removed at once); `check` creates no
//! directory and no log file.

use std::path::Path;

use calmcache_core::disk::ZONE_MARKER;
use calmcache_core::disk_format;

use crate::config::LogTarget;
use crate::config::{toml_key, Config, ConfigError, Problem, ZoneKind};

/// Reads and validates the config at `path`, then checks its environment;
/// every problem found is in the error.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let config = Config::from_file(path)?;
    let problems = check_environment(&config);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid {
            source_name: path.display().to_string(),
            problems,
        })
    }
}

/// The problems of `config`'s environment (directories and files it uses);
/// empty when there is none.
pub fn check_environment(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    for zone in &config.zones {
        let (ZoneKind::Disk, Some(dir)) = (zone.kind, &zone.path) else {
            continue;
        };
        if let Err(message) = zone_dir(dir) {
            let at = format!("zones.{}.path", toml_key(&zone.name));
            problems.push(Problem::new(at, message));
        }
    }
    if let Some(LogTarget::File(file)) = config.access_log.as_ref().map(|log| &log.target) {
        if let Err(message) = log_file(file) {
            problems.push(Problem::new("access_log.path", message));
        }
    }
    problems
}

/// A zone directory `serve` can use (or create).
fn zone_dir(dir: &Path) -> Result<(), String> {
    let Some(existing) = dir.ancestors().find(|p| p.exists()) else {
        return Err(format!("{}: no part of this path exists", dir.display()));
    };
    if !existing.is_dir() {
        return Err(format!(
            "{} is not a directory, so {} cannot be a cache directory",
            existing.display(),
            dir.display()
        ));
    }
    if existing == dir && !dir.join(ZONE_MARKER).exists() {
        let not_empty = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .next()
            .is_some();
        if not_empty {
            return Err(format!(
                "{} is not empty and is not a calmcache zone (no {ZONE_MARKER} file); \
                 give the zone a directory of its own",
                dir.display()
            ));
        }
    }
    probe(existing).map_err(|e| {
        let what = if existing == dir {
            format!("{} is not writable", dir.display())
        } else {
            format!(
                "{} does not exist and cannot be created: {} is not writable",
                dir.display(),
                existing.display()
            )
        };
        format!("{what}: {e}")
    })
}

/// An access log file `serve` can open for appending.
fn log_file(file: &Path) -> Result<(), String> {
    if file.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(file)
            .map(drop)
            .map_err(|e| format!("cannot open {} for appending: {e}", file.display()));
    }
    let dir = file.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Err(format!(
            "cannot create {}: the directory {} does not exist",
            file.display(),
            dir.display()
        ));
    }
    probe(dir).map_err(|e| {
        format!(
            "cannot create {}: {} is not writable: {e}",
            file.display(),
            dir.display()
        )
    })
}

/// Creates and removes a file in `dir`. Named as a temp file of this start,
/// so a zone's loader (of this process) leaves it alone, and one of another
/// process takes it for a leftover. A full file system is no problem: a zone
/// makes room, the access log counts the lines it cannot write.
fn probe(dir: &Path) -> std::io::Result<()> {
    let name = format!(
        "{}{}-check",
        disk_format::TEMP_PREFIX,
        disk_format::start_token()
    );
    let path = dir.join(name);
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path);
    match created {
        Err(e) if calmcache_core::disk::is_no_space(&e) => return Ok(()),
        other => drop(other?),
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "calmcache-preflight-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn zone_directories() {
        let base = scratch("zones");
        // Missing but creatable: fine, and nothing is created.
        let missing = base.join("a/b");
        assert_eq!(zone_dir(&missing), Ok(()));
        assert!(!base.join("a").exists());
        // A file in the way.
        std::fs::write(base.join("file"), b"x").unwrap();
        let err = zone_dir(&base.join("file/zone")).unwrap_err();
        assert!(err.contains("is not a directory"), "{err}");
        // Someone else's files.
        let foreign = base.join("foreign");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("precious"), b"x").unwrap();
        let err = zone_dir(&foreign).unwrap_err();
        assert!(err.contains("not a calmcache zone"), "{err}");
        assert_eq!(
            std::fs::read_dir(&base).unwrap().count(),
            2,
            "no probe left"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn access_log_files() {
        let base = scratch("log");
        assert_eq!(log_file(&base.join("access.log")), Ok(()));
        assert!(
            !base.join("access.log").exists(),
            "check creates no log file"
        );
        let err = log_file(&base.join("missing/access.log")).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        std::fs::write(base.join("existing.log"), b"line\n").unwrap();
        assert_eq!(log_file(&base.join("existing.log")), Ok(()));
        let _ = std::fs::remove_dir_all(&base);
    }
}
