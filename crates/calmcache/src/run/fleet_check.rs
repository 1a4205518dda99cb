//! `calmcache check --fleet`: a config's fingerprint compared with the
//! running fleet's. Connects to the fleet's Redis as a node of this config
//! would (the same URLs, user, password, TLS files), lists the live
//! members from their heartbeats (fleet/members.rs) and says which differ
//! from this config, and in which part.
//!
//! Owns: the comparison and its report. Must not: write to Redis (it only
//! lists: no heartbeat, no lease), or wait for an unreachable Redis longer
//! than [`REACH_FOR`].

use std::fmt::Write as _;
use std::time::Duration;

use crate::config::Config;
use crate::fleet::fingerprint::{Fingerprint, FingerprintPart};
use crate::fleet::members::Member;
use crate::fleet::Fleet;

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
}

/// Compares `config` with the live members of its fleet.
pub async fn check_fleet(config: &Config) -> Result<FleetReport, FleetCheckError> {
    let cfg = config.fleet.as_ref().ok_or(FleetCheckError::NoFleet)?;
    let fleet = Fleet::new(cfg).map_err(|e| FleetCheckError::Client(e.to_string()))?;
    let started = tokio::time::Instant::now();
    let members = loop {
        if let Some(members) = fleet.beat(None).await {
            break members;
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
    Ok(report(&Fingerprint::of(config), &members))
}

/// The report of `own` against `members`.
fn report(own: &Fingerprint, members: &[Member]) -> FleetReport {
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
    if differing > 0 {
        let _ = writeln!(
            text,
            "{differing} member(s) run another config: they compute other keys or store differently, and do not share with a node of this config"
        );
    }
    FleetReport { text, differing }
}
