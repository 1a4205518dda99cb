//! `calmcache check --fleet`: a config's fingerprint compared with the
//! running fleet's. Connects to the fleet's Redis as a node of this config
//! would (the same URLs, user, password, TLS files), lists the live
//! members from their heartbeats (fleet/members.rs) and says which differ
//! from this config, and in which part. It also reads Redis' `INFO` once
//! and warns when Redis will hurt the fleet once full (the node's own
//! warning, fleet/redis_info.rs: no `maxmemory`, `noeviction`) or is small
//! against the fleet's large objects ([`memory_warnings`]). Warnings never
//! change the exit code: a rollout script gates on the fingerprint.
//!
//! Owns: the comparison, the memory judgement and the report. Must not:
//! write to Redis (it only lists and reads: no heartbeat, no lease), or
//! wait for an unreachable Redis longer than [`REACH_FOR`].

use std::fmt::Write as _;
use std::time::Duration;

use crate::config::format_size;
use crate::config::{Config, FleetConfig};
use crate::fleet::fingerprint::{Fingerprint, FingerprintPart};
use crate::fleet::members::{Listed, RefusedMember};
use crate::fleet::{Fleet, RedisMemory};

/// How long the check tries to reach Redis (a first connection, TLS
/// included, and a few failed calls' breaker pause).
const REACH_FOR: Duration = Duration::from_secs(4);

/// Between two tries.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Why the fleet could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum FleetCheckError {
    /// The config has no `[fleet]` table.
    #[error("the config has no [fleet] table: nothing to compare")]
    NoFleet,
    /// The Redis URLs or settings could not make a client.
    #[error("cannot set up the fleet's Redis client: {0}")]
    Client(String),
    /// Redis did not answer within the check's time.
    #[error("cannot reach the fleet's Redis ({nodes}) within {within:?}: {error}")]
    Unreachable {
        /// The URLs tried (passwords hidden).
        nodes: String,
        /// How long it tried.
        within: Duration,
        /// The last error.
        error: String,
    },
}

/// What `check --fleet` found.
#[derive(Debug)]
pub struct FleetReport {
    text: String,
    differing: usize,
    warnings: Vec<String>,
}

impl FleetReport {
    /// The report, one line per member.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Live members whose fingerprint differs from this config's.
    pub fn differing(&self) -> usize {
        self.differing
    }

    /// What in Redis' memory settings will hurt this fleet (the exit code
    /// does not depend on them).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Compares `config` with the live members of its fleet.
pub async fn check_fleet(config: &Config) -> Result<FleetReport, FleetCheckError> {
    let cfg = config.fleet.as_ref().ok_or(FleetCheckError::NoFleet)?;
    let fleet = Fleet::new(cfg).map_err(|e| FleetCheckError::Client(e.to_string()))?;
    let started = tokio::time::Instant::now();
    let listed = loop {
        if let Some(listed) = fleet.beat(None).await {
            break listed;
        }
        if started.elapsed() >= REACH_FOR {
            let nodes: Vec<String> = cfg
                .nodes
                .iter()
                .map(|n| crate::config::redact_url(n))
                .collect();
            return Err(FleetCheckError::Unreachable {
                nodes: nodes.join(", "),
                within: REACH_FOR,
                error: fleet.last_error().unwrap_or_else(|| "no answer".to_owned()),
            });
        }
        tokio::time::sleep(RETRY_EVERY).await;
    };
    let memory = fleet.read_redis_memory().await;
    let mut report = report(&Fingerprint::of(config), &listed);
    report.text.push_str(&memory_line(&memory));
    report.warnings = memory_warnings(&memory, cfg, listed.members.len().max(1));
    Ok(report)
}

/// The heartbeat records refused (fleet secret set): not compared.
fn refused_lines(refused: &[RefusedMember]) -> String {
    let mut text = String::new();
    if refused.is_empty() {
        return text;
    }
    let _ = writeln!(
        text,
        "refused heartbeat records (not members: their signature does not verify with this config's secret): {}",
        refused.len()
    );
    for r in refused {
        let _ = writeln!(
            text,
            "  {}  {}  seen {} ms ago",
            r.name,
            r.why.as_str(),
            r.last_seen_ms_ago
        );
    }
    text
}

/// An object over this share of Redis' `maxmemory` (1/8) is warned about:
/// a few of them fill Redis.
const OBJECT_SHARE: u64 = 8;

/// Large values in flight over this share of `maxmemory` (1/2) are warned
/// about: Redis evicts pieces of objects still being written or read.
const IN_FLIGHT_SHARE: u64 = 2;

/// One line on Redis' memory for the report.
fn memory_line(memory: &RedisMemory) -> String {
    let (Some(used), Some(max)) = (memory.used_memory, memory.maxmemory) else {
        return "redis memory: unknown (INFO did not answer)\n".to_owned();
    };
    let limit = match (max, memory.used_ratio) {
        (0, _) => "no maxmemory".to_owned(),
        (max, Some(ratio)) => format!(
            "maxmemory {} ({:.0}% used)",
            format_size(max),
            ratio * 100.0
        ),
        (max, None) => format!("maxmemory {}", format_size(max)),
    };
    format!(
        "redis memory: used {:.1} MiB, {limit}, policy {}, {} keys evicted since it started\n",
        used as f64 / (1024.0 * 1024.0),
        memory.maxmemory_policy.as_deref().unwrap_or("unknown"),
        memory
            .evicted_keys
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
    )
}

/// What in `memory` will hurt a fleet of `nodes` nodes with `cfg`: the
/// node's own warning (no `maxmemory`, `noeviction`, `INFO` refused; one
/// wording, fleet/redis_info.rs), then sizes against `maxmemory`.
pub(crate) fn memory_warnings(
    memory: &RedisMemory,
    cfg: &FleetConfig,
    nodes: usize,
) -> Vec<String> {
    let mut warnings: Vec<String> = memory.warning.iter().cloned().collect();
    let Some(max) = memory.maxmemory.filter(|m| *m > 0) else {
        if memory.maxmemory.is_none() && warnings.is_empty() {
            warnings.push("redis' INFO did not answer: its memory was not checked".to_owned());
        }
        return warnings;
    };
    if cfg.max_object_size.saturating_mul(OBJECT_SHARE) > max {
        warnings.push(format!(
            "fleet.max_object_size ({}) is over 1/{OBJECT_SHARE} of redis' maxmemory ({}): \
             a few objects that large fill it (the fleet's other entries evicted, or with \
             noeviction new ones refused); raise maxmemory or lower max_object_size",
            format_size(cfg.max_object_size),
            format_size(max)
        ));
    }
    let nodes = u64::try_from(nodes).unwrap_or(u64::MAX);
    let in_flight = cfg.max_pieces_in_flight.saturating_mul(nodes);
    if in_flight.saturating_mul(IN_FLIGHT_SHARE) > max {
        warnings.push(format!(
            "fleet.max_pieces_in_flight ({}) x {nodes} node(s) = {} of large objects in flight \
             at once, over 1/{IN_FLIGHT_SHARE} of redis' maxmemory ({}): redis evicts (or \
             refuses) pieces of objects still being written or read, and they are fetched \
             again; raise maxmemory or lower max_pieces_in_flight",
            format_size(cfg.max_pieces_in_flight),
            format_size(in_flight),
            format_size(max)
        ));
    }
    warnings
}

/// The report of `own` against the members `listed` (and the records
/// refused, on a signed fleet).
fn report(own: &Fingerprint, listed: &Listed) -> FleetReport {
    let members = &listed.members;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "this config: fingerprint {} (keys {}, routes {}, fleet {})",
        own.all, own.keys, own.routes, own.fleet
    );
    if members.is_empty() {
        text.push_str("no live members in the fleet (no node has sent a heartbeat lately)\n");
    } else {
        let _ = writeln!(text, "live members: {}", members.len());
    }
    let mut differing = 0;
    for m in members {
        let parts = own.differs_in(&m.fingerprint);
        let verdict = if parts.is_empty() {
            "same".to_owned()
        } else {
            differing += 1;
            let names: Vec<&str> = parts.iter().map(|p| FingerprintPart::as_str(*p)).collect();
            format!("differs in {}", names.join(", "))
        };
        let _ = writeln!(
            text,
            "  {}  version {}  fingerprint {}  seen {} ms ago  {verdict}",
            m.name, m.version, m.fingerprint.all, m.last_seen_ms_ago
        );
    }
    text.push_str(&refused_lines(&listed.refused));
    if differing > 0 {
        let _ = writeln!(
            text,
            "{differing} member(s) run another config: they compute other keys or store differently, and do not share with a node of this config"
        );
    }
    FleetReport {
        text,
        differing,
        warnings: Vec::new(),
    }
}

#[cfg(test)]
#[path = "fleet_check_tests.rs"]
mod tests;
