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
//!   exist yet, its directory exists and a file can be created in it;
//! - an upstream over TLS that verifies against the system's roots (no
//!   `tls_ca_file`) finds some (Debian's ca-certificates).
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

use std::path::{Path, PathBuf};

use calmcache_core::disk::format as disk_format;
use calmcache_core::disk::ZONE_MARKER;

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
pub(crate) fn check_environment(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    for zone in &config.zones {
        let (ZoneKind::Disk, Some(dir)) = (zone.kind, &zone.path) else {
            continue;
        };
        if let Err(e) = zone_dir(dir) {
            let at = format!("zones.{}.path", toml_key(&zone.name));
            problems.push(Problem::new(at, e.to_string()));
        }
    }
    if let Some(LogTarget::File(file)) = config.access_log.as_ref().map(|log| &log.target) {
        if let Err(e) = log_file(file) {
            problems.push(Problem::new("access_log.path", e.to_string()));
        }
    }
    problems.extend(system_roots(config));
    problems
}

/// Upstreams over TLS that would verify against the system's roots when
/// there are none (read once for all of them).
fn system_roots(config: &Config) -> Vec<Problem> {
    let wanting = config.upstreams.iter().filter(|u| {
        u.tls
            .as_ref()
            .is_some_and(|tls| tls.verify && tls.ca.is_none())
    });
    let mut roots = None;
    let mut problems = Vec::new();
    for upstream in wanting {
        let found = roots.get_or_insert_with(crate::net::origin_tls::system_roots);
        if let Err(why) = found {
            let at = format!("upstreams.{}.tls_ca_file", toml_key(&upstream.name));
            let hint = "install the ca-certificates package, or set tls_ca_file to the CA that signed the origin's certificate";
            problems.push(Problem::new(at, why.clone()).hint(hint));
        }
    }
    problems
}

/// Why a disk zone's directory is unusable (`zones.<name>.path`). Each
/// message carries its cause (not also given as `source()`).
#[derive(Debug, thiserror::Error)]
enum ZoneDirError {
    #[error("{}: no part of this path exists", dir.display())]
    NothingExists { dir: PathBuf },
    /// A file where the directory or one of its parents should be.
    #[error(
        "{} is not a directory, so {} cannot be a cache directory",
        existing.display(),
        dir.display()
    )]
    NotADirectory { existing: PathBuf, dir: PathBuf },
    #[error("cannot read {}: {error}", dir.display())]
    Unreadable { dir: PathBuf, error: std::io::Error },
    /// Someone else's files: the zone's loader would remove them.
    #[error(
        "{} is not empty and is not a calmcache zone (no {} file); \
         give the zone a directory of its own",
        dir.display(),
        ZONE_MARKER
    )]
    NotAZone { dir: PathBuf },
    #[error("{} is not writable: {error}", dir.display())]
    NotWritable { dir: PathBuf, error: std::io::Error },
    /// Missing, and its nearest existing ancestor is not writable.
    #[error(
        "{} does not exist and cannot be created: {} is not writable: {error}",
        dir.display(),
        existing.display()
    )]
    NotCreatable {
        dir: PathBuf,
        existing: PathBuf,
        error: std::io::Error,
    },
}

/// Why the access log file cannot be used (`access_log.path`). Each
/// message carries its cause (not also given as `source()`).
#[derive(Debug, thiserror::Error)]
enum LogFileError {
    #[error("cannot open {} for appending: {error}", file.display())]
    NotAppendable {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "cannot create {}: the directory {} does not exist",
        file.display(),
        dir.display()
    )]
    NoDirectory { file: PathBuf, dir: PathBuf },
    #[error(
        "cannot create {}: {} is not writable: {error}",
        file.display(),
        dir.display()
    )]
    NotWritable {
        file: PathBuf,
        dir: PathBuf,
        error: std::io::Error,
    },
}

/// A zone directory `serve` can use (or create).
fn zone_dir(dir: &Path) -> Result<(), ZoneDirError> {
    let Some(existing) = dir.ancestors().find(|p| p.exists()) else {
        return Err(ZoneDirError::NothingExists { dir: dir.into() });
    };
    if !existing.is_dir() {
        return Err(ZoneDirError::NotADirectory {
            existing: existing.into(),
            dir: dir.into(),
        });
    }
    if existing == dir && !dir.join(ZONE_MARKER).exists() {
        let not_empty = std::fs::read_dir(dir)
            .map_err(|error| ZoneDirError::Unreadable {
                dir: dir.into(),
                error,
            })?
            .next()
            .is_some();
        if not_empty {
            return Err(ZoneDirError::NotAZone { dir: dir.into() });
        }
    }
    probe(existing).map_err(|error| {
        if existing == dir {
            ZoneDirError::NotWritable {
                dir: dir.into(),
                error,
            }
        } else {
            ZoneDirError::NotCreatable {
                dir: dir.into(),
                existing: existing.into(),
                error,
            }
        }
    })
}

/// An access log file `serve` can open for appending.
fn log_file(file: &Path) -> Result<(), LogFileError> {
    if file.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(file)
            .map(drop)
            .map_err(|error| LogFileError::NotAppendable {
                file: file.into(),
                error,
            });
    }
    let dir = file.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Err(LogFileError::NoDirectory {
            file: file.into(),
            dir: dir.into(),
        });
    }
    probe(dir).map_err(|error| LogFileError::NotWritable {
        file: file.into(),
        dir: dir.into(),
        error,
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
    // 0600 like every file of a zone, for the moment it exists.
    let created = calmcache_core::private_fs::options()
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
        assert!(zone_dir(&missing).is_ok());
        assert!(!base.join("a").exists());
        // A file in the way.
        std::fs::write(base.join("file"), b"x").unwrap();
        let err = zone_dir(&base.join("file/zone")).unwrap_err().to_string();
        assert!(err.contains("is not a directory"), "{err}");
        // Someone else's files.
        let foreign = base.join("foreign");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("precious"), b"x").unwrap();
        let err = zone_dir(&foreign).unwrap_err().to_string();
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
        assert!(log_file(&base.join("access.log")).is_ok());
        assert!(
            !base.join("access.log").exists(),
            "check creates no log file"
        );
        let err = log_file(&base.join("missing/access.log"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
        std::fs::write(base.join("existing.log"), b"line\n").unwrap();
        assert!(log_file(&base.join("existing.log")).is_ok());
        let _ = std::fs::remove_dir_all(&base);
    }
}
