//! Fleet membership: each node's heartbeat in Redis (its name, version,
//! config fingerprint, start time), the live members every node reads
//! back, and config drift: a node whose fingerprint differs from the
//! majority's computes other keys or stores differently, and stops
//! sharing with its peers without an error.
//!
//! Redis layout (one cluster slot, the hash tag `{members}`): the sorted
//! set `{prefix}{members}` scores each node's name by its last heartbeat
//! (Redis' clock), the hash `{prefix}{members}:info` holds each node's
//! heartbeat as JSON. One script call per heartbeat stores this node's,
//! trims members silent for [`MEMBER_TTL`] and lists the live ones; a clean
//! stop removes the node's at once.
//!
//! Owns: the heartbeat task (off the request path; its calls go through
//! the link: deadline, breaker), the membership view `/status` and the
//! dashboard show, the drift warning. Must not: hold a lock across a
//! Redis call, or log a drift more than once per change (and once per
//! [`WARN_EVERY`] at most).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::fingerprint::{Fingerprint, FingerprintPart};
use super::ops_stats::Op;
use super::{Fleet, LOG};

/// How often a node writes its heartbeat and reads the members back.
pub(crate) const BEAT_EVERY: Duration = Duration::from_secs(2);

/// A member silent this long (three heartbeats) is gone.
pub(crate) const MEMBER_TTL: Duration = Duration::from_secs(6);

/// Live members listed at most (a fleet is tens of nodes; a Redis written
/// by someone else must not make a node read thousands).
const MAX_MEMBERS: usize = 256;

/// A heartbeat larger than this is not read (not one of ours).
const MAX_BEAT: usize = 4096;

/// The longest text field of a heartbeat read back.
const MAX_FIELD: usize = 256;

/// A drift warning is logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What a node publishes about itself.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Beat {
    /// Its name: the host name and its first listen address.
    pub(crate) name: String,
    /// Its id in lease tokens and purge messages (one per start).
    pub(crate) id: String,
    /// The calmcache version it runs.
    pub(crate) version: String,
    /// Its config fingerprint's parts (the whole is derived from them).
    pub(crate) keys: String,
    /// The `routes` part.
    pub(crate) routes: String,
    /// The `fleet` part.
    pub(crate) fleet: String,
    /// When it started (Unix time, ms).
    pub(crate) started_at_ms: u64,
}

impl Beat {
    /// This node's heartbeat: `name`, and the fingerprint of its config.
    pub(crate) fn new(name: String, id: String, fingerprint: &Fingerprint) -> Beat {
        Beat {
            name,
            id,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            keys: fingerprint.keys.clone(),
            routes: fingerprint.routes.clone(),
            fleet: fingerprint.fleet.clone(),
            started_at_ms: started_at_ms(),
        }
    }

    /// Every text field short and printable: a name read from Redis goes
    /// into log lines and the dashboard, and must not forge either.
    fn is_plain(&self) -> bool {
        let fields = [
            &self.name,
            &self.id,
            &self.version,
            &self.keys,
            &self.routes,
            &self.fleet,
        ];
        fields
            .iter()
            .all(|f| f.len() <= MAX_FIELD && !f.chars().any(char::is_control))
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::from_parts(self.keys.clone(), self.routes.clone(), self.fleet.clone())
    }
}

/// A live member, as `/status`, the dashboard and `check --fleet` show it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Member {
    /// Its name (host name and first listen address).
    pub(crate) name: String,
    /// Its id in lease tokens and purge messages.
    pub(crate) id: String,
    /// The calmcache version it runs.
    pub(crate) version: String,
    /// Its config fingerprint and parts.
    pub(crate) fingerprint: Fingerprint,
    /// When it started (Unix time, ms).
    pub(crate) started_at_ms: u64,
    /// How long ago its last heartbeat was (Redis' clock), ms.
    pub(crate) last_seen_ms_ago: u64,
    /// It is the node answering.
    pub(crate) this_node: bool,
    /// The parts in which it differs from the majority's fingerprint (or,
    /// with no majority, from this node's); empty: the same.
    pub(crate) differs: Vec<FingerprintPart>,
}

/// Whether the live members agree on their config fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Drift {
    /// Redis did not answer the last heartbeat: members unknown.
    Unknown,
    /// Every live member has this node's fingerprint.
    None,
    /// This node differs from the majority.
    ThisNode,
    /// This node has the majority's; some other member differs.
    Others,
    /// No fingerprint is held by more than half of the members.
    Split,
}

impl Drift {
    /// 1 when this node cannot be sure it shares (`/metrics`).
    pub(crate) fn this_node_drifts(self) -> bool {
        matches!(self, Drift::ThisNode | Drift::Split)
    }
}

/// The membership as last read, for `/status`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Membership {
    /// This node's config fingerprint (`None` before its first heartbeat).
    pub(crate) fingerprint: Option<Fingerprint>,
    /// The live members, this node included; `None`: unknown (Redis did
    /// not answer), never an empty list for it.
    pub(crate) members: Option<Vec<Member>>,
    /// Whether they agree.
    pub(crate) config_drift: Drift,
    /// The parts in which this node differs from the majority.
    pub(crate) config_drift_parts: Vec<FingerprintPart>,
}

impl Default for Membership {
    fn default() -> Self {
        Membership {
            fingerprint: None,
            members: None,
            config_drift: Drift::Unknown,
            config_drift_parts: Vec::new(),
        }
    }
}

/// The membership view and what was last logged of it.
#[derive(Default)]
pub(crate) struct Members {
    view: Mutex<Membership>,
    logged: Mutex<Logged>,
    /// This node's name once it has beaten: what a stop removes.
    name: Mutex<Option<String>>,
}

/// The drift last logged, and when.
#[derive(Default)]
struct Logged {
    said: Option<String>,
    at: Option<Instant>,
}

impl Members {
    /// The view as last read.
    pub(crate) fn snapshot(&self) -> Membership {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes one heartbeat's answer (`None`: Redis did not answer).
    fn note(&self, own: &Beat, listed: Option<Vec<Member>>) {
        let mut name = self.name.lock().unwrap_or_else(|p| p.into_inner());
        if name.as_deref() != Some(own.name.as_str()) {
            *name = Some(own.name.clone());
        }
        drop(name);
        let fingerprint = own.fingerprint();
        let view = match listed {
            Some(members) => judge(members, &own.name, &fingerprint),
            None => Membership {
                fingerprint: Some(fingerprint),
                ..Membership::default()
            },
        };
        let _ = self.log_drift(&view, &own.name);
        *self.view.lock().unwrap_or_else(|p| p.into_inner()) = view;
    }

    /// Warns when this node's drift changed (at most once per
    /// [`WARN_EVERY`]); says so when it is over. True when it logged.
    fn log_drift(&self, view: &Membership, me: &str) -> bool {
        if view.config_drift == Drift::Unknown {
            return false;
        }
        let said = drift_text(view, me);
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.said == said {
            return false;
        }
        if logged.at.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return false;
        }
        match &said {
            Some(text) => tracing::warn!(target: LOG, "{text}"),
            None => {
                tracing::info!(target: LOG, "config fingerprint now matches the fleet's majority")
            }
        }
        logged.said = said;
        logged.at = Some(Instant::now());
        true
    }
}

/// The drift warning for this node's view; `None` when it shares.
fn drift_text(view: &Membership, me: &str) -> Option<String> {
    if !view.config_drift.this_node_drifts() {
        return None;
    }
    let own = view.fingerprint.as_ref()?;
    let members = view.members.as_deref().unwrap_or_default();
    let others: Vec<&str> = members
        .iter()
        .filter(|m| m.name != me && m.fingerprint != *own)
        .map(|m| m.name.as_str())
        .collect();
    let parts: Vec<&str> = view.config_drift_parts.iter().map(|p| p.as_str()).collect();
    Some(match view.config_drift {
        Drift::Split => format!(
            "config fingerprints of the fleet differ and none has a majority; nodes differing from this one: {}; nodes with another config compute other keys and do not share",
            others.join(", ")
        ),
        _ => format!(
            "this node's config differs from the fleet's majority in {} (nodes {}): it computes other keys or stores differently, and does not share with them",
            parts.join(", "),
            others.join(", ")
        ),
    })
}

/// The membership of `members` seen from node `me` with `own`: each
/// member's difference from the majority's fingerprint, and the drift.
pub(crate) fn judge(mut members: Vec<Member>, me: &str, own: &Fingerprint) -> Membership {
    let majority = majority(&members).cloned();
    let reference = majority.as_ref().unwrap_or(own);
    for m in &mut members {
        m.this_node = m.name == me;
        m.differs = reference.differs_in(&m.fingerprint);
    }
    let config_drift_parts = reference.differs_in(own);
    let config_drift = match &majority {
        None => Drift::Split,
        Some(_) if !config_drift_parts.is_empty() => Drift::ThisNode,
        Some(_) if members.iter().any(|m| !m.differs.is_empty()) => Drift::Others,
        Some(_) => Drift::None,
    };
    Membership {
        fingerprint: Some(own.clone()),
        members: Some(members),
        config_drift,
        config_drift_parts,
    }
}

/// The fingerprint more than half of `members` hold, if one does.
fn majority(members: &[Member]) -> Option<&Fingerprint> {
    members
        .iter()
        .map(|m| &m.fingerprint)
        .find(|f| 2 * members.iter().filter(|m| &m.fingerprint == *f).count() > members.len())
}

impl Fleet {
    /// `{prefix}{members}` and `{prefix}{members}:info`.
    fn member_keys(&self) -> [String; 2] {
        let set = format!("{}{{members}}", self.cfg.prefix);
        let info = format!("{set}:info");
        [set, info]
    }

    /// Writes `own`'s heartbeat (none: only reads) and lists the live
    /// members; `None` when Redis did not answer.
    pub(crate) async fn beat(&self, own: Option<&Beat>) -> Option<Vec<Member>> {
        let [set, info] = self.member_keys();
        let (name, json) = match own {
            Some(beat) => (beat.name.clone(), serde_json::to_string(beat).ok()?),
            None => (String::new(), String::new()),
        };
        let script = &self.members_script;
        let ttl = u64::try_from(MEMBER_TTL.as_millis()).unwrap_or(u64::MAX);
        let answer: Value = self
            .link
            .call(Op::Members, |mut conn| async move {
                script
                    .key(&set)
                    .key(&info)
                    .arg(&name)
                    .arg(&json)
                    .arg(ttl)
                    .arg(MAX_MEMBERS)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Some(read_members(answer))
    }

    /// A stopping node's heartbeat removed, awaited (the membership task
    /// removes it too when it sees the stop, but nothing waits for that
    /// task): peers list it gone at once.
    pub(crate) async fn leave_membership(&self) {
        let name = self
            .members
            .name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(name) = name {
            self.leave(&name).await;
        }
    }

    /// Removes `name`'s heartbeat (a clean stop: peers see it gone at once).
    async fn leave(&self, name: &str) {
        let [set, info] = self.member_keys();
        let script = &self.leave_script;
        let _: Option<i64> = self
            .link
            .call(Op::Members, |mut conn| async move {
                script
                    .key(&set)
                    .key(&info)
                    .arg(name)
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
    }

    /// The membership as last read, for `/status`.
    pub(crate) fn membership(&self) -> Membership {
        self.members.snapshot()
    }
}

/// The script's answer as members; what does not read as a heartbeat of
/// ours is left out (Redis' contents are not trusted).
fn read_members(answer: Value) -> Vec<Member> {
    let Value::Array(items) = answer else {
        return Vec::new();
    };
    let mut items = items.into_iter();
    let now = items.next().and_then(|v| as_u64(&v)).unwrap_or(0);
    let mut members = Vec::new();
    while let (Some(_name), Some(seen), Some(beat)) = (items.next(), items.next(), items.next()) {
        let Value::BulkString(bytes) = beat else {
            continue;
        };
        if bytes.len() > MAX_BEAT {
            continue;
        }
        let Ok(beat) = serde_json::from_slice::<Beat>(&bytes) else {
            continue;
        };
        if !beat.is_plain() {
            continue;
        }
        let seen = as_u64(&seen).unwrap_or(now);
        members.push(Member {
            fingerprint: beat.fingerprint(),
            name: beat.name,
            id: beat.id,
            version: beat.version,
            started_at_ms: beat.started_at_ms,
            last_seen_ms_ago: now.saturating_sub(seen),
            this_node: false,
            differs: Vec::new(),
        });
    }
    members
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// Keeps this node's heartbeat in Redis every [`BEAT_EVERY`] and its view
/// of the members fresh, until a reload starts the next generation's
/// (`reload`: the name stays, the fingerprint may change) or the node
/// stops (`stopped`: its heartbeat is removed, so peers see it go at once).
pub(crate) async fn keep_membership(
    fleet: Arc<Fleet>,
    own: Beat,
    mut reload: watch::Receiver<bool>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let listed = fleet.beat(Some(&own)).await;
        fleet.members.note(&own, listed);
        // The watch's guard is dropped in its arm, before any await.
        let stopping = tokio::select! {
            _ = tokio::time::sleep(BEAT_EVERY) => continue,
            _ = reload.wait_for(|s| *s) => false,
            _ = stopped.wait_for(|s| *s) => true,
        };
        if stopping {
            fleet.leave(&own.name).await;
        }
        return;
    }
}

/// This node's name: the host name and its first listen address (stable
/// across restarts, unique per host).
pub(crate) fn node_name(listen: Option<std::net::SocketAddr>) -> String {
    match listen {
        Some(addr) => format!("{}/{addr}", super::hostname()),
        None => super::hostname(),
    }
}

/// When this process's first heartbeat was made, as Unix time in ms (the
/// node's start, near enough; a reload keeps it).
fn started_at_ms() -> u64 {
    static STARTED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *STARTED.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    })
}

#[cfg(test)]
#[path = "members_tests.rs"]
mod tests;
