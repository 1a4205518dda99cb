//! `[zones.<name>]` -> [`ZoneConfig`]: kind, sizes, a disk zone's path and
//! eviction keys; no two disk zones in one directory. Like the rest of
//! validation it reports and carries on.

use std::time::Duration;

use calmcache_core::disk::Admission;

use super::Checker;
use crate::config::defaults;
use crate::config::error::{toml_key, Problem};
use crate::config::raw::RawZone;
use crate::config::units;
use crate::config::{suggest, ZoneConfig, ZoneKind};

impl Checker {
    pub(super) fn zone(&mut self, name: String, raw: RawZone) -> ZoneConfig {
        let path = format!("zones.{}", toml_key(&name));
        let at = |key: &str| format!("{path}.{key}");
        let kind = self.zone_kind(&at("kind"), raw.kind.as_deref());
        let max_size = match &raw.max_size {
            None => {
                self.missing(&at("max_size"), r#"max_size = "256MiB""#);
                None
            }
            Some(text) => self.positive_size(&at("max_size"), text),
        };
        let max_object_size = match &raw.max_object_size {
            None => max_size.map(defaults::zone::max_object_size),
            Some(text) => self.positive_size(&at("max_object_size"), text),
        };
        if let (Some(max), Some(object)) = (max_size, max_object_size) {
            if object > max {
                let message = format!(
                    "{} is larger than max_size ({})",
                    units::format_size(object),
                    units::format_size(max)
                );
                let problem = Problem::new(at("max_object_size"), message);
                self.report(problem.hint("an object must fit in its zone"));
            }
        }
        let disk = kind == ZoneKind::Disk;
        let path_buf = self.zone_path(&at, raw.path.as_deref(), kind);
        if !disk && raw.inactive.is_some() {
            self.only_disk(&at("inactive"));
        }
        if !disk && raw.min_free.is_some() {
            self.only_disk(&at("min_free"));
        }
        let inactive = self.duration(
            &at("inactive"),
            raw.inactive.as_ref(),
            defaults::zone::INACTIVE,
        );
        if disk && inactive < Duration::from_secs(1) {
            let problem = Problem::new(at("inactive"), "must be at least 1s");
            self.report(problem.hint("the manager looks at last use to the second"));
        }
        let min_free = match &raw.min_free {
            Some(text) if disk => self
                .positive_size(&at("min_free"), text)
                .unwrap_or(defaults::zone::MIN_FREE),
            _ => defaults::zone::MIN_FREE,
        };
        if !disk && raw.admission.is_some() {
            self.only_disk(&at("admission"));
        }
        let admission = self.admission(&at("admission"), raw.admission.as_deref());
        let weight = self.count(&at("weight"), raw.weight, defaults::zone::WEIGHT, 1);
        ZoneConfig {
            name,
            kind,
            max_size: max_size.unwrap_or(0),
            max_object_size: max_object_size.unwrap_or(0),
            path: path_buf,
            inactive,
            min_free,
            admission,
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
        }
    }

    /// Two disk zones in one directory would evict and load each other's files.
    pub(super) fn shared_disk_paths(&mut self, zones: &[ZoneConfig]) {
        for (i, zone) in zones.iter().enumerate() {
            let Some(path) = &zone.path else { continue };
            let Some(other) = zones[..i].iter().find(|z| {
                z.path
                    .as_ref()
                    .is_some_and(|p| p.starts_with(path) || path.starts_with(p))
            }) else {
                continue;
            };
            let message = if other.path.as_ref() == Some(path) {
                format!(
                    "{} is also the path of zone {:?}",
                    path.display(),
                    other.name
                )
            } else {
                format!(
                    "{} and the path of zone {:?} are inside one another",
                    path.display(),
                    other.name
                )
            };
            let problem = Problem::new(format!("zones.{}.path", toml_key(&zone.name)), message);
            self.report(problem.hint("each disk zone needs a directory of its own"));
        }
    }

    /// A disk zone's `admission`: "frequent" (the default) or "all".
    fn admission(&mut self, path: &str, raw: Option<&str>) -> Admission {
        const ALL: [Admission; 2] = [Admission::Frequent, Admission::All];
        let Some(text) = raw else {
            return defaults::zone::ADMISSION;
        };
        if let Some(admission) = ALL.iter().find(|a| a.as_str() == text) {
            return *admission;
        }
        let names: Vec<&str> = ALL.iter().map(|a| a.as_str()).collect();
        let problem = Problem::new(path, format!("unknown admission {text:?}"));
        self.report(problem.hint(suggest::names_hint("allowed", text, &names)));
        defaults::zone::ADMISSION
    }

    fn only_disk(&mut self, path: &str) {
        let problem = Problem::new(path, "only disk zones take this key");
        self.report(problem.hint(r#"set kind = "disk", or remove the key"#));
    }

    fn zone_kind(&mut self, path: &str, raw: Option<&str>) -> ZoneKind {
        let kinds: Vec<&str> = ZoneKind::ALL.iter().map(|kind| kind.as_str()).collect();
        let Some(text) = raw else {
            self.missing(path, r#"kind = "memory""#);
            return ZoneKind::Memory;
        };
        if let Some(kind) = ZoneKind::ALL.iter().find(|kind| kind.as_str() == text) {
            return *kind;
        }
        let problem = Problem::new(path, format!("unknown zone kind {text:?}"));
        self.report(problem.hint(suggest::names_hint("allowed kinds", text, &kinds)));
        ZoneKind::Memory
    }

    /// A disk zone's `path`: absolute, not empty; other kinds take none.
    fn zone_path(
        &mut self,
        at: &dyn Fn(&str) -> String,
        raw: Option<&str>,
        kind: ZoneKind,
    ) -> Option<std::path::PathBuf> {
        let disk = kind == ZoneKind::Disk;
        match (raw, disk) {
            (Some(p), true) if p.trim().is_empty() => {
                self.report(Problem::new(at("path"), "must not be empty"));
                None
            }
            (Some(p), true) if !std::path::Path::new(p).is_absolute() => {
                let problem = Problem::new(at("path"), format!("{p:?} is not an absolute path"));
                self.report(
                    problem
                        .hint("a relative path would depend on the directory calmcache starts in"),
                );
                None
            }
            (Some(p), true) => Some(std::path::PathBuf::from(p)),
            (None, true) => {
                self.missing(&at("path"), r#"path = "/var/cache/calmcache/ssd""#);
                None
            }
            (Some(_), false) => {
                self.only_disk(&at("path"));
                None
            }
            (None, false) => None,
        }
    }
}
