//! Zones built from the config: each `[zones.<name>]` becomes a
//! [`Zone`] over a tier (memory or disk, as the config says), or over a
//! tier the embedding application supplied for that name ([`ZoneTiers`]).
//! At a reload a zone whose storage is unchanged is kept, contents and all.
//!
//! This is the one place that knows the kinds of tier: it reads the config's
//! `kind`. Everything after (the request path, purges, `/status`) sees a
//! `Zone` and its [`Tier`] only.

use std::sync::Arc;

use calmcache_core::disk::{DiskConfig, DiskTier};
use calmcache_core::{MemoryTier, Tier, Zone};

use crate::config::{Config, ZoneConfig, ZoneKind};
use crate::proxy::setup::SetupError;

/// Tiers an embedding application supplies for zones of the config, by
/// zone name: such a zone is stored in the given tier instead of the one
/// its `kind` would build (its `[zones.<name>]` table still declares it, so
/// routes can name it; its sizes there are not used). A reload keeps
/// them. Start a proxy with them through [`start_with`](crate::run::server::start_with).
#[derive(Clone, Default)]
pub struct ZoneTiers {
    tiers: Vec<(String, Arc<dyn Tier>)>,
}

impl ZoneTiers {
    /// No tier supplied: every zone is built from its config.
    pub fn new() -> Self {
        ZoneTiers::default()
    }

    /// Stores the zone named `zone` in `tier`.
    pub fn with(mut self, zone: &str, tier: Arc<dyn Tier>) -> Self {
        self.tiers.retain(|(name, _)| name != zone);
        self.tiers.push((zone.to_owned(), tier));
        self
    }

    /// The tier supplied for the zone named `zone`.
    pub fn get(&self, zone: &str) -> Option<&Arc<dyn Tier>> {
        self.tiers
            .iter()
            .find(|(name, _)| name == zone)
            .map(|(_, t)| t)
    }
}

/// Where a generation's zones came from, for the next reload: the config
/// each zone's tier was built from (a zone kept at a reload keeps the one
/// it was built with: new limits of a kept disk zone wait for a restart),
/// and the tiers the application supplied.
#[derive(Clone, Default)]
pub(crate) struct ZoneSources {
    built: Vec<ZoneConfig>,
    supplied: ZoneTiers,
}

impl ZoneSources {
    /// The zones of `config`, in its order: supplied by `supplied`, kept
    /// from `previous` (a reload: its zones and their sources; `notes` says
    /// which could not be kept), or new; and where they came from.
    pub(crate) fn build(
        config: &Config,
        previous: Option<(&[Arc<Zone>], &ZoneSources)>,
        supplied: ZoneTiers,
        notes: &mut Vec<String>,
    ) -> Result<(Vec<Arc<Zone>>, ZoneSources), SetupError> {
        let mut zones = Vec::with_capacity(config.zones.len());
        let mut built = Vec::with_capacity(config.zones.len());
        for z in &config.zones {
            let kept = previous.and_then(|(old, sources)| sources.reuse(old, z, &supplied, notes));
            if let Some((zone, was)) = kept {
                zones.push(zone);
                built.push(was);
                continue;
            }
            let tier = match supplied.get(&z.name) {
                Some(tier) => tier.clone(),
                None => open(z)?,
            };
            zones.push(Arc::new(Zone::new(z.name.clone(), tier)));
            built.push(z.clone());
        }
        Ok((zones, ZoneSources { built, supplied }))
    }

    /// The tiers the application supplied (they carry over to a reload).
    pub(crate) fn supplied(&self) -> &ZoneTiers {
        &self.supplied
    }

    /// The running zone `config` names, and the config it was built from,
    /// when its storage is unchanged: the same supplied tier, a memory zone
    /// of the same sizes, a disk zone at the same path (new limits of a
    /// kept disk zone wait for a restart: its files stay in use).
    fn reuse(
        &self,
        zones: &[Arc<Zone>],
        config: &ZoneConfig,
        supplied: &ZoneTiers,
        notes: &mut Vec<String>,
    ) -> Option<(Arc<Zone>, ZoneConfig)> {
        let at = zones.iter().position(|z| z.name == config.name)?;
        let (old, was) = (zones.get(at)?, self.built.get(at)?);
        let kept = Some((old.clone(), was.clone()));
        if let Some(tier) = supplied.get(&config.name) {
            // The same tier: the same zone.
            return if Arc::ptr_eq(&old.tier, tier) {
                kept
            } else {
                None
            };
        }
        if self.supplied.get(&config.name).is_some() {
            return None;
        }
        match (was.kind, config.kind) {
            (ZoneKind::Memory, ZoneKind::Memory) => {
                let object_limit = |z: &ZoneConfig| z.max_object_size.clamp(1, z.max_size.max(1));
                if was.max_size == config.max_size && object_limit(was) == object_limit(config) {
                    return kept;
                }
                notes.push(format!(
                    "zones.{}: new size, so a new empty memory zone",
                    config.name
                ));
                None
            }
            (ZoneKind::Disk, ZoneKind::Disk) => {
                if config.path != was.path {
                    notes.push(format!(
                        "zones.{}: new path, so a new zone (the old directory is left as it is)",
                        config.name
                    ));
                    return None;
                }
                if was.max_size != config.max_size
                    || was.max_object_size != config.max_object_size
                    || was.inactive != config.inactive
                    || was.min_free != config.min_free
                {
                    notes.push(format!(
                        "zones.{}: kept with its contents; its new limits apply at the next restart",
                        config.name
                    ));
                }
                kept
            }
            _ => {
                notes.push(format!(
                    "zones.{}: new kind, so a new empty zone",
                    config.name
                ));
                None
            }
        }
    }
}

/// The tier `config` describes: RAM, or a directory opened (and checked)
/// now; its background work starts with [`Tier::start`].
fn open(config: &ZoneConfig) -> Result<Arc<dyn Tier>, SetupError> {
    match config.kind {
        ZoneKind::Memory => Ok(Arc::new(MemoryTier::new(
            config.max_size,
            config.max_object_size,
        ))),
        ZoneKind::Disk => {
            let path = config.path.clone().unwrap_or_default();
            let disk = DiskConfig {
                path: path.clone(),
                max_size: config.max_size,
                max_object_size: config.max_object_size,
                inactive: config.inactive,
                min_free: config.min_free,
                admission: config.admission,
            };
            let tier = DiskTier::open(disk).map_err(|error| SetupError::ZoneDir {
                zone: config.name.clone(),
                path,
                error,
            })?;
            Ok(tier)
        }
    }
}
