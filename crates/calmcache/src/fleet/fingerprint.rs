//! The config fingerprint: a digest of what decides the keys a node
//! computes and how it stores, so that nodes of one fleet can tell that a
//! peer would not share with them (another key template, other routes'
//! zones or ttls, another fleet prefix or format), and say which part
//! differs.
//!
//! Three parts, each a digest of canonical `name=value` lines built from
//! the validated config (so the TOML's key order, comments and spelling
//! of defaults do not matter):
//! - `keys`: per route, in order: the `key` template as written,
//!   `body_key`, `cache_post`, `convert_head`, `max_body_key`,
//!   `merge_slashes`, `underscores_in_headers`;
//! - `routes`: per route, in order: its kind (proxy, return, files),
//!   `match`, `path`, `hosts`, its zones' and memory zone's names,
//!   `bypass`, `no_store`, `ttl`, `override_origin`, `heuristic_*`,
//!   `stale_*`, `ignore_headers`;
//! - `fleet`: `prefix`, `max_object_size`, whether entries are signed,
//!   and [`FLEET_FORMAT`] (the Redis layout and value format this build
//!   speaks).
//!
//! Must not: digest a secret or a file's contents (passwords, the fleet
//! secret, TLS keys, the admin token), nor anything a node may set for
//! itself alone (listen addresses, `routes.listeners`, zone sizes and
//! paths, timeouts, upstream servers): two nodes differing there still
//! share.

use std::fmt::Write as _;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::{Config, RouteConfig};

/// The Redis layout and value format this build reads and writes; bump it
/// when a change makes nodes of the old and the new build unable to share
/// (they then show as differing in the `fleet` part).
/// 2: large bodies go as they arrive (pieces of the body, the head in a
/// `CCM2` manifest, a writing record `:w`, and `:w` in the acquire script).
pub(crate) const FLEET_FORMAT: u32 = 2;

/// The hex digits of a part's digest (64 bits: enough to tell configs
/// apart, short enough to read on a dashboard).
const DIGEST_HEX: usize = 16;

/// A part of the fingerprint, named in `/status`, logs and `check --fleet`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FingerprintPart {
    /// Key templates and what else shapes a key.
    Keys,
    /// Route matching, zones, ttls and the storing rules.
    Routes,
    /// The fleet prefix, object limit, signing and format.
    Fleet,
}

impl FingerprintPart {
    /// Every part, in the order they are shown.
    pub(crate) const ALL: [FingerprintPart; 3] = [
        FingerprintPart::Keys,
        FingerprintPart::Routes,
        FingerprintPart::Fleet,
    ];

    /// Its name in `/status`, logs and the heartbeat.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FingerprintPart::Keys => "keys",
            FingerprintPart::Routes => "routes",
            FingerprintPart::Fleet => "fleet",
        }
    }
}

/// A config's fingerprint: the whole one and its parts, hex digests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Fingerprint {
    /// The digest of the three parts together.
    pub(crate) all: String,
    /// `keys`.
    pub(crate) keys: String,
    /// `routes`.
    pub(crate) routes: String,
    /// `fleet`.
    pub(crate) fleet: String,
}

impl Fingerprint {
    /// The fingerprint of `config` (its `[fleet]` part empty without one).
    pub(crate) fn of(config: &Config) -> Fingerprint {
        let mut keys = String::new();
        let mut routes = String::new();
        for (i, route) in config.routes.iter().enumerate() {
            key_lines(&mut keys, i, route);
            route_lines(&mut routes, i, route, config);
        }
        Fingerprint::from_parts(digest(&keys), digest(&routes), digest(&fleet_lines(config)))
    }

    /// The fingerprint of three part digests (as read from a heartbeat).
    pub(crate) fn from_parts(keys: String, routes: String, fleet: String) -> Fingerprint {
        let all = digest(&format!("keys={keys}\nroutes={routes}\nfleet={fleet}\n"));
        Fingerprint {
            all,
            keys,
            routes,
            fleet,
        }
    }

    /// One part's digest.
    pub(crate) fn part(&self, part: FingerprintPart) -> &str {
        match part {
            FingerprintPart::Keys => &self.keys,
            FingerprintPart::Routes => &self.routes,
            FingerprintPart::Fleet => &self.fleet,
        }
    }

    /// The parts in which `other` differs from this one (empty: the same).
    pub(crate) fn differs_in(&self, other: &Fingerprint) -> Vec<FingerprintPart> {
        FingerprintPart::ALL
            .into_iter()
            .filter(|p| self.part(*p) != other.part(*p))
            .collect()
    }
}

/// The `keys` part's lines of route `i`.
fn key_lines(out: &mut String, i: usize, route: &RouteConfig) {
    let r = &route.requests;
    let _ = writeln!(out, "route.{i}.key={}", route.storage.key.as_str());
    let _ = writeln!(out, "route.{i}.body_key={:?}", r.body_key);
    let _ = writeln!(out, "route.{i}.cache_post={}", r.cache_post);
    let _ = writeln!(out, "route.{i}.convert_head={}", r.convert_head);
    let _ = writeln!(out, "route.{i}.max_body_key={}", r.max_body_key);
    let _ = writeln!(out, "route.{i}.merge_slashes={}", r.merge_slashes);
    let _ = writeln!(out, "route.{i}.underscores={}", r.underscores_in_headers);
}

/// The `routes` part's lines of route `i`.
fn route_lines(out: &mut String, i: usize, route: &RouteConfig, config: &Config) {
    let m = &route.matching;
    let s = &route.storage;
    let f = &route.freshness;
    let zone = |z: &usize| config.zones.get(*z).map_or("?", |z| z.name.as_str());
    let zones: Vec<&str> = s.zones.iter().map(zone).collect();
    let regex = |r: &Option<regex::Regex>| r.as_ref().map(|r| r.as_str().to_owned());
    let _ = writeln!(
        out,
        "route.{i}.kind={}",
        route.kind.answers().unwrap_or("proxy")
    );
    let _ = writeln!(out, "route.{i}.match={:?}", regex(&m.matcher));
    let _ = writeln!(out, "route.{i}.path={:?}", regex(&m.path_matcher));
    let _ = writeln!(out, "route.{i}.hosts={:?}", m.hosts);
    let _ = writeln!(out, "route.{i}.zones={zones:?}");
    let _ = writeln!(out, "route.{i}.memory={:?}", s.memory.as_ref().map(zone));
    let _ = writeln!(out, "route.{i}.bypass={:?}", s.bypass);
    let _ = writeln!(out, "route.{i}.no_store={:?}", s.no_store);
    let _ = writeln!(out, "route.{i}.ttl={:?}", f.ttl);
    let _ = writeln!(out, "route.{i}.override_origin={}", f.override_origin);
    let _ = writeln!(out, "route.{i}.heuristic_fraction={}", f.heuristic_fraction);
    let _ = writeln!(out, "route.{i}.heuristic_max={:?}", f.heuristic_max);
    let _ = writeln!(out, "route.{i}.swr={:?}", f.stale_while_revalidate);
    let _ = writeln!(out, "route.{i}.sie={:?}", f.stale_if_error);
    let _ = writeln!(out, "route.{i}.sib={:?}", f.stale_if_busy);
    let _ = writeln!(out, "route.{i}.ignore_headers={:?}", f.ignore_headers);
}

/// The `fleet` part's lines (none but the format without `[fleet]`).
fn fleet_lines(config: &Config) -> String {
    let mut out = format!("format={FLEET_FORMAT}\n");
    if let Some(fleet) = &config.fleet {
        let _ = writeln!(out, "prefix={}", fleet.prefix);
        let _ = writeln!(out, "max_object_size={}", fleet.max_object_size);
        // Whether entries are signed, never what signs them.
        let _ = writeln!(out, "signed={}", fleet.secret.is_some());
    }
    out
}

/// The first [`DIGEST_HEX`] hex digits of SHA-256 of `text`.
fn digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(DIGEST_HEX);
    for byte in hash.iter().take(DIGEST_HEX / 2) {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
