//! `proxy_cache_path` as `[zones.<name>]`, and which zone a location's
//! `proxy_cache` chooses: a zone by name, a `split_clients` variable (hash
//! placement over weighted zones) or a `map` variable (one route per regex
//! entry, in map order, then the default).
//!
//! Owns the zone keys (`path`, `max_size`, `inactive`, `min_free`, `weight`)
//! and the reading of `map` / `split_clients` blocks. It must not build
//! routes.

use std::collections::HashMap;

use super::pathre::{self, RouteRegex};
use super::toml_out::{Section, Value};
use super::tree::Directive;
use super::units;
use super::{note_skipped, Notes};

/// NGINX's `inactive` default: 10 minutes.
const DEFAULT_INACTIVE_MS: u64 = 600_000;

/// The cache zones and the variables that choose them.
#[derive(Default)]
pub(crate) struct Zones {
    /// Zone name, its section, and its `inactive` in ms.
    pub(crate) zones: Vec<(String, Section, u64)>,
    maps: HashMap<String, Directive>,
    splits: HashMap<String, Directive>,
}

/// What a location's `proxy_cache` caches in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Choice {
    /// No caching (`proxy_cache off`, none, or an unknown zone).
    Off,
    /// One zone.
    One(String),
    /// `zones = [...]`: hash placement (from `split_clients`).
    Hash(Vec<String>),
    /// One route per entry: (its `path` or `match` regex, zone), then the
    /// default zone for the rest.
    ByMatch(Vec<(RouteRegex, Choice)>, Box<Choice>),
}

impl Zones {
    /// `proxy_cache_path PATH keys_zone=NAME:SIZE [...]`.
    pub(crate) fn path(&mut self, d: &Directive, notes: &mut Notes) {
        let Some(path) = d.args.first() else {
            notes.push(note_skipped(d, "no path"));
            return;
        };
        let mut section = Section::new(String::new());
        section.note(format!("From `{}` ({}).", d.text(), d.pos));
        section.set("kind", Value::Str("disk".into()));
        section.set("path", Value::Str(path.clone()));
        if !path.starts_with('/') {
            section.note("NGINX takes a relative path from its prefix (-p); calmcache from its working directory: make it absolute.");
        }
        let mut name = None;
        let mut inactive = DEFAULT_INACTIVE_MS;
        let mut max_size = false;
        for param in &d.args[1..] {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            match key {
                "keys_zone" => {
                    let (zone, size) = value.split_once(':').unwrap_or((value, ""));
                    name = Some(zone.to_owned());
                    section.note(format!(
                        "keys_zone size {size}: calmcache keeps its index in ordinary memory, sized by the objects it holds."
                    ));
                }
                "max_size" => match units::size(value) {
                    Some(size) => {
                        max_size = true;
                        section.set("max_size", Value::Str(size));
                    }
                    None => section.note(format!("not carried over: max_size={value}: not an NGINX size")),
                },
                "min_free" => match units::size(value) {
                    Some(size) => {
                        section.set("min_free", Value::Str(size));
                    }
                    None => section.note(format!("not carried over: min_free={value}: not an NGINX size")),
                },
                "inactive" => match units::millis(value) {
                    Some(ms) => {
                        inactive = ms;
                        section.set("inactive", Value::Str(units::duration_text(ms)));
                    }
                    None => section.note(format!("not carried over: inactive={value}: not an NGINX time")),
                },
                "levels" => section.note(format!(
                    "levels={value} ignored: calmcache lays out its files itself."
                )),
                "use_temp_path" => section.note(format!(
                    "use_temp_path={value} ignored: calmcache writes each file in the zone's own directory and renames it."
                )),
                _ => section.note(format!("not carried over: {param}: calmcache has no equivalent")),
            }
        }
        if !max_size {
            section.set("max_size", Value::Str("10GiB".into())).note(
                "NGINX sets no limit without max_size; calmcache needs one: set what the disk can hold.",
            );
        }
        let Some(name) = name else {
            notes.push(note_skipped(d, "no keys_zone=NAME:SIZE"));
            return;
        };
        super::ledger::carried(d);
        section.title = format!("[zones.{}]", super::toml_out::key(&name));
        self.zones.push((name, section, inactive));
    }

    /// Remembers a `map` or `split_clients` block by the variable it sets.
    pub(crate) fn variable(&mut self, d: &Directive) {
        let Some(var) = d.args.get(1) else { return };
        let var = var.trim_start_matches('$').to_owned();
        if d.name == "map" {
            self.maps.insert(var, d.clone());
        } else {
            self.splits.insert(var, d.clone());
        }
    }

    /// The inactive time of `zone` (NGINX's default when unknown).
    pub(crate) fn inactive(&self, zone: &str) -> u64 {
        self.zones
            .iter()
            .find(|(n, _, _)| n == zone)
            .map_or(DEFAULT_INACTIVE_MS, |(_, _, i)| *i)
    }

    fn exists(&self, zone: &str) -> bool {
        self.zones.iter().any(|(n, _, _)| n == zone)
    }

    /// What `proxy_cache ARG` caches in; notes say what could not be kept.
    pub(crate) fn choice(&mut self, d: &Directive, notes: &mut Notes) -> Choice {
        let Some(arg) = d.args.first() else {
            return Choice::Off;
        };
        if arg == "off" {
            return Choice::Off;
        }
        let Some(var) = arg.strip_prefix('$') else {
            return self.zone(arg, d, notes);
        };
        if let Some(split) = self.splits.get(var).cloned() {
            return self.split(&split, d, notes);
        }
        if let Some(map) = self.maps.get(var).cloned() {
            return self.map(&map, d, notes);
        }
        notes.push(note_skipped(
            d,
            &format!("no map or split_clients sets ${var}: not cached"),
        ));
        Choice::Off
    }

    fn zone(&self, name: &str, d: &Directive, notes: &mut Notes) -> Choice {
        if self.exists(name) {
            Choice::One(name.to_owned())
        } else {
            notes.push(note_skipped(
                d,
                &format!("no proxy_cache_path defines the zone {name:?}: not cached"),
            ));
            Choice::Off
        }
    }

    /// `split_clients SOURCE $var { 50% a; * b; }` -> `zones` with weights.
    fn split(&mut self, split: &Directive, d: &Directive, notes: &mut Notes) -> Choice {
        super::ledger::carried_tree(split);
        let mut shares: Vec<(String, f64)> = Vec::new();
        let mut rest: Option<String> = None;
        for entry in split.children() {
            let value = entry.args.first().cloned().unwrap_or_default();
            if entry.name == "*" {
                rest = Some(value);
            } else if let Some(pct) = entry
                .name
                .strip_suffix('%')
                .and_then(|p| p.parse::<f64>().ok())
            {
                shares.push((value, pct));
            } else {
                notes.push(note_skipped(entry, "not a split_clients entry"));
            }
        }
        let used: f64 = shares.iter().map(|(_, p)| p).sum();
        if let Some(zone) = rest {
            shares.push((zone, (100.0 - used).max(0.0)));
        } else if used < 100.0 {
            notes.push(format!(
                "split_clients ({}) leaves {:.1}% of requests without a zone (not cached in NGINX); calmcache spreads every key over the zones listed.",
                split.pos,
                100.0 - used
            ));
        }
        // Tenths of a percent keep 33.3% exact; whole percents stay small.
        let scale = if shares.iter().all(|(_, p)| p.fract() == 0.0) {
            1.0
        } else {
            10.0
        };
        let mut zones = Vec::new();
        for (zone, pct) in shares {
            if zone.is_empty() || !self.exists(&zone) {
                notes.push(format!(
                    "split_clients ({}): {pct}% go to {zone:?}, which is no cache zone: calmcache spreads those keys over the others.",
                    split.pos
                ));
                continue;
            }
            let weight = (pct * scale).round() as i64;
            self.set_weight(&zone, weight.max(1), split, notes);
            zones.push(zone);
        }
        notes.push(format!(
            "From `{}` via `split_clients {}` ({}): NGINX hashes {} (MurmurHash2) into percentages; \
             calmcache places each cache key by a weighted rendezvous hash over the zones, with each \
             zone's weight its percentage. The same share of keys goes to each zone, but not the \
             same keys as in NGINX: an existing NGINX cache's files are not reused anyway.",
            d.text(),
            split.args.first().map_or("", String::as_str),
            split.pos,
            split.args.first().map_or("the source", String::as_str)
        ));
        match zones.len() {
            0 => Choice::Off,
            1 => Choice::One(zones.remove(0)),
            _ => Choice::Hash(zones),
        }
    }

    fn set_weight(&mut self, zone: &str, weight: i64, split: &Directive, notes: &mut Notes) {
        let Some((_, section, _)) = self.zones.iter_mut().find(|(n, _, _)| n == zone) else {
            return;
        };
        match section.get("weight") {
            Some(Value::Int(w)) if *w != weight => notes.push(format!(
                "split_clients ({}) gives zone {zone} another share ({weight}) than before ({w}): calmcache has one weight per zone; the first is kept.",
                split.pos
            )),
            Some(_) => {}
            None => {
                section.set("weight", Value::Int(weight)).note(format!(
                    "Its share in split_clients ({}).",
                    split.pos
                ));
            }
        }
    }

    /// `map $request_uri $var { ~re zone; "exact" zone; default zone; }`.
    fn map(&mut self, map: &Directive, d: &Directive, notes: &mut Notes) -> Choice {
        super::ledger::carried_tree(map);
        let source = map.args.first().map_or("", String::as_str);
        let path_only = source == "$uri" || source == "$document_uri";
        if source != "$request_uri" && !path_only {
            notes.push(format!(
                "`{}` chooses the zone by {source} (map at {}): calmcache routes by path and query only; the map's default zone is used.",
                d.text(),
                map.pos
            ));
        }
        let mut exact = Vec::new();
        let mut regexes = Vec::new();
        let mut default = Choice::Off;
        for entry in map.children() {
            let zone_name = entry.args.first().cloned().unwrap_or_default();
            let zone = if self.exists(&zone_name) {
                Choice::One(zone_name.clone())
            } else {
                Choice::Off
            };
            let key = entry.name.as_str();
            match key {
                "default" => {
                    default = zone;
                    continue;
                }
                "hostnames" | "volatile" => {
                    notes.push(note_skipped(entry, "calmcache has no equivalent"));
                    continue;
                }
                _ => {}
            }
            if source != "$request_uri" && !path_only {
                continue;
            }
            let converted = if let Some(re) = key.strip_prefix("~*") {
                if path_only {
                    pathre::location(re, true)
                } else {
                    pathre::request_uri(re, true)
                }
                .map(|m| (m, true))
            } else if let Some(re) = key.strip_prefix('~') {
                if path_only {
                    pathre::location(re, false)
                } else {
                    pathre::request_uri(re, false)
                }
                .map(|m| (m, true))
            } else {
                let text = key.strip_prefix('\\').unwrap_or(key);
                Ok((
                    if path_only {
                        pathre::exact(text)
                    } else {
                        pathre::request_uri_exact(text)
                    },
                    false,
                ))
            };
            match converted {
                // NGINX checks the exact strings first, then the regexes in order.
                Ok((m, false)) => exact.push((m, zone)),
                Ok((m, true)) => regexes.push((m, zone)),
                Err(why) => notes.push(note_skipped(entry, &why)),
            }
        }
        notes.push(format!(
            "From `{}` via `map {source}` ({}): one route per map entry, exact strings first and \
             then the regexes in map order, as NGINX checks them; the default zone last. calmcache \
             matches the normalised path and query (escapes decoded, slashes merged); NGINX's \
             $request_uri is the raw request target.",
            d.text(),
            map.pos
        ));
        exact.extend(regexes);
        Choice::ByMatch(exact, Box::new(default))
    }
}
