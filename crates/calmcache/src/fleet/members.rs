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
//! With the fleet secret (`fleet.secret_file`) each heartbeat is signed
//! (sign.rs) with the time it was signed (Redis' clock as the node last
//! read it). A record that is unsigned, does not verify, sits under
//! another name than its own, or was signed more than [`MEMBER_TTL`] from
//! its last-seen time (a replay) is refused: listed apart, never counted in
//! the majority, counted in `members_refused`. So a writer to Redis alone
//! cannot raise a false drift warning. Without a secret, every well-formed
//! record is a member.
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
use super::sign::Signer;
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
    /// When it was signed (Redis' clock as the node last read it, ms);
    /// with the fleet secret only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signed_at_ms: Option<u64>,
    /// Its signature (sign.rs); with the fleet secret only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sig: Option<String>,
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
            signed_at_ms: None,
            sig: None,
        }
    }

    /// This heartbeat signed by `signer` at `at_ms` (Redis' clock).
    fn signed(&self, signer: &Signer, at_ms: u64) -> Beat {
        let started = self.started_at_ms.to_be_bytes();
        let sig = signer.sign_beat(&self.signed_fields(&started, &at_ms.to_be_bytes()));
        Beat {
            signed_at_ms: Some(at_ms),
            sig: Some(sig),
            ..self.clone()
        }
    }

    /// Its signature verifies under `signer`.
    fn verifies(&self, signer: &Signer) -> bool {
        let (Some(at_ms), Some(sig)) = (self.signed_at_ms, self.sig.as_deref()) else {
            return false;
        };
        let started = self.started_at_ms.to_be_bytes();
        signer.check_beat(&self.signed_fields(&started, &at_ms.to_be_bytes()), sig)
    }

    /// What its signature covers: every field (`started`: its start
    /// time's bytes) and `at`, when it was signed.
    fn signed_fields<'a>(&'a self, started: &'a [u8; 8], at: &'a [u8; 8]) -> [&'a [u8]; 8] {
        [
            self.name.as_bytes(),
            self.id.as_bytes(),
            self.version.as_bytes(),
            self.keys.as_bytes(),
            self.routes.as_bytes(),
            self.fleet.as_bytes(),
            started,
            at,
        ]
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

/// A heartbeat record refused on a signed fleet: shown apart, never a
/// member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct RefusedMember {
    /// The name it claims (printable, short: checked like a member's).
    pub(crate) name: String,
    /// Why it was refused.
    pub(crate) why: Refusal,
    /// How long ago it was last written (Redis' clock), ms.
    pub(crate) last_seen_ms_ago: u64,
}

/// Why a heartbeat record was refused (fleet secret set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Refusal {
    /// No signature: a node without the secret, or someone else.
    Unsigned,
    /// A signature no secret of this node makes, or a real one moved
    /// under another name.
    Forged,
    /// Signed long before (or after) it was last written: a copy.
    Replayed,
}

impl Refusal {
    /// Its name in `/status` and `check --fleet`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::Forged => "forged",
            Refusal::Replayed => "replayed",
        }
    }
}

/// The records of one heartbeat's answer: the members, and what was
/// refused.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// Live members (verified, on a signed fleet).
    pub(crate) members: Vec<Member>,
    /// Records refused (signed fleet only).
    pub(crate) refused: Vec<RefusedMember>,
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
    /// Heartbeat records the last read refused (fleet secret set): not
    /// members, not in the majority.
    pub(crate) refused_members: Vec<RefusedMember>,
    /// Heartbeat records refused since start, each read counted.
    pub(crate) members_refused: u64,
}

impl Default for Membership {
    fn default() -> Self {
        Membership {
            fingerprint: None,
            members: None,
            config_drift: Drift::Unknown,
            config_drift_parts: Vec::new(),
            refused_members: Vec::new(),
            members_refused: 0,
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
    /// Heartbeat records refused since start (`members_refused`).
    refused: std::sync::atomic::AtomicU64,
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
        Membership {
            members_refused: self.refused.load(std::sync::atomic::Ordering::Relaxed),
            ..self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
        }
    }

    /// Takes one heartbeat's answer (`None`: Redis did not answer).
    fn note(&self, own: &Beat, listed: Option<Listed>) {
        let mut name = self.name.lock().unwrap_or_else(|p| p.into_inner());
        if name.as_deref() != Some(own.name.as_str()) {
            *name = Some(own.name.clone());
        }
        drop(name);
        let fingerprint = own.fingerprint();
        let view = match listed {
            Some(Listed { members, refused }) => {
                let count = u64::try_from(refused.len()).unwrap_or(u64::MAX);
                self.refused
                    .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
                Membership {
                    refused_members: refused,
                    ..judge(members, &own.name, &fingerprint)
                }
            }
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
        ..Membership::default()
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

    /// Writes `own`'s heartbeat (none: only reads; signed with the fleet
    /// secret) and lists the live members, and the records refused;
    /// `None` when Redis did not answer.
    pub(crate) async fn beat(&self, own: Option<&Beat>) -> Option<Listed> {
        let [set, info] = self.member_keys();
        let signer = self.signer();
        let (name, json) = match (own, &signer) {
            (Some(beat), Some(signer)) => (
                beat.name.clone(),
                serde_json::to_string(&beat.signed(signer, self.redis_now_ms())).ok()?,
            ),
            (Some(beat), None) => (beat.name.clone(), serde_json::to_string(beat).ok()?),
            (None, _) => (String::new(), String::new()),
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
        Some(admit(read_records(answer), signer.as_deref()))
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

/// One heartbeat record as read from Redis.
pub(crate) struct Record {
    /// The name the member set lists it under.
    listed_as: Vec<u8>,
    /// When it was last written (Redis' clock, ms).
    seen_ms: u64,
    /// Redis' clock when it was read (ms).
    now_ms: u64,
    beat: Beat,
}

/// The script's answer as heartbeat records; what does not read as a
/// heartbeat of ours is left out (Redis' contents are not trusted).
pub(crate) fn read_records(answer: Value) -> Vec<Record> {
    let Value::Array(items) = answer else {
        return Vec::new();
    };
    let mut items = items.into_iter();
    let now_ms = items.next().and_then(|v| as_u64(&v)).unwrap_or(0);
    let mut records = Vec::new();
    while let (Some(name), Some(seen), Some(beat)) = (items.next(), items.next(), items.next()) {
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
        let listed_as = match name {
            Value::BulkString(n) => n,
            _ => Vec::new(),
        };
        records.push(Record {
            listed_as,
            seen_ms: as_u64(&seen).unwrap_or(now_ms),
            now_ms,
            beat,
        });
    }
    records
}

/// The members among `records`: every one without a secret (`signer`
/// none), else those [`check`] finds sound; the rest refused.
pub(crate) fn admit(records: Vec<Record>, signer: Option<&Signer>) -> Listed {
    let mut listed = Listed::default();
    for record in records {
        let last_seen_ms_ago = record.now_ms.saturating_sub(record.seen_ms);
        if let Some(why) = signer.and_then(|s| check(&record, s)) {
            listed.refused.push(RefusedMember {
                name: record.beat.name,
                why,
                last_seen_ms_ago,
            });
            continue;
        }
        let beat = record.beat;
        listed.members.push(Member {
            fingerprint: beat.fingerprint(),
            name: beat.name,
            id: beat.id,
            version: beat.version,
            started_at_ms: beat.started_at_ms,
            last_seen_ms_ago,
            this_node: false,
            differs: Vec::new(),
        });
    }
    listed
}

/// Why `record` is refused on a signed fleet, if it is: no signature, one
/// that does not verify or sits under another name than its own, or one
/// made more than [`MEMBER_TTL`] from when it was last written.
fn check(record: &Record, signer: &Signer) -> Option<Refusal> {
    let beat = &record.beat;
    if beat.sig.is_none() {
        return Some(Refusal::Unsigned);
    }
    if record.listed_as != beat.name.as_bytes() || !beat.verifies(signer) {
        return Some(Refusal::Forged);
    }
    let skew = u64::try_from(MEMBER_TTL.as_millis()).unwrap_or(u64::MAX);
    let signed_at = beat.signed_at_ms.unwrap_or(0);
    (signed_at.abs_diff(record.seen_ms) > skew).then_some(Refusal::Replayed)
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
