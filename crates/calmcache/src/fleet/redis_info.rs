//! Redis' own memory, as its `INFO` tells it: `used_memory`, `maxmemory`,
//! `maxmemory_policy` and `evicted_keys`, read every [`READ_EVERY`] by a
//! task of the link (through [`Link::call`]: the deadline and the breaker
//! apply; an open breaker skips the read and the last one stays, with its
//! age), for `/status` (`fleet.redis`) and `/metrics`. In a cluster every
//! master answers: sizes and evictions are **summed** over the masters, and
//! `used_ratio` is the **fullest** master's (one full shard refuses or
//! evicts even when the others have room).
//!
//! A Redis without `maxmemory`, or with the `noeviction` policy, is logged
//! as a warning once (and shown as `warning`): the first grows until its
//! host runs out of memory, the second refuses writes when full, so leases
//! and stores fail and the fleet goes on without Redis (FLEET.md §2 asks
//! for `maxmemory` and `allkeys-lfu`).
//!
//! Must not: run on the request path; fail on what `INFO` says (a field
//! missing or malformed reads as unknown, `null` in `/status`, never a
//! panic or a zero taken for a value).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::link::Link;
use super::ops_stats::Op;
use super::Fleet;

/// How often each node reads Redis' `INFO` (one call of a few KB).
pub(crate) const READ_EVERY: Duration = Duration::from_secs(5);

/// What one Redis node's `INFO` says; `None`: missing or malformed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NodeInfo {
    used_memory: Option<u64>,
    maxmemory: Option<u64>,
    policy: Option<String>,
    evicted_keys: Option<u64>,
}

/// Redis' memory as last read, for `/status` (`fleet.redis`) and
/// `/metrics`; every field `null` until a read answered.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub(crate) struct RedisMemory {
    /// Bytes Redis holds (`used_memory`; a cluster: summed over masters).
    pub used_memory: Option<u64>,
    /// Its limit (`maxmemory`, summed); 0: none.
    pub maxmemory: Option<u64>,
    /// `used_memory / maxmemory` of the fullest node (none without a
    /// limit).
    pub used_ratio: Option<f64>,
    /// `maxmemory_policy` (a cluster whose masters differ: `mixed`).
    pub maxmemory_policy: Option<String>,
    /// Keys Redis evicted since it started (summed): fleet entries dropped
    /// before their time, if Redis holds only the fleet's.
    pub evicted_keys: Option<u64>,
    /// Redis nodes that answered the last read.
    pub nodes: u32,
    /// Milliseconds since the last read that answered (`null`: none yet).
    pub read_ms_ago: Option<u64>,
    /// Why this Redis will hurt the fleet when full, if it will
    /// (`maxmemory` 0, or the `noeviction` policy).
    pub warning: Option<String>,
}

/// Past this share of its `maxmemory`, Redis is taken as evicting (see
/// [`Readings::evicting`]): at 3/4 the rest is room for the pieces the
/// fleet writes while one stream lasts (a fleet writing 200 MB/s of pieces
/// fills a quarter of 2 GiB in about 2.5 s, a 50 MiB stream's life).
const STREAM_RATIO_MAX: f64 = 0.75;

/// The last reading and when it was taken.
#[derive(Default)]
pub(super) struct Readings {
    last: Mutex<Option<(RedisMemory, Instant)>>,
    /// `evicted_keys` rose between the last two readings: Redis is full
    /// and drops keys (pieces, records, leases) to take new ones.
    evicting: std::sync::atomic::AtomicBool,
}

impl Readings {
    /// The last reading with its age, or all unknown.
    pub(super) fn snapshot(&self) -> RedisMemory {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let Some((memory, at)) = last.as_ref() else {
            return RedisMemory::default();
        };
        RedisMemory {
            read_ms_ago: Some(u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)),
            ..memory.clone()
        }
    }

    /// Keeps `memory`; logs its warning when it is new.
    fn store(&self, memory: RedisMemory) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let before = last.as_ref().and_then(|(m, _)| m.warning.clone());
        if memory.warning.is_some() && memory.warning != before {
            tracing::warn!(
                target: super::LOG,
                warning = memory.warning.as_deref().unwrap_or(""),
                "redis memory settings"
            );
        }
        let evicted_before = last.as_ref().and_then(|(m, _)| m.evicted_keys);
        let rising = matches!(
            (evicted_before, memory.evicted_keys),
            (Some(before), Some(now)) if now > before
        );
        // Near its limit, Redis starts evicting within a stream's life.
        let near_full = memory.used_ratio.is_some_and(|r| r > STREAM_RATIO_MAX);
        let evicting = rising || near_full;
        self.evicting
            .store(evicting, std::sync::atomic::Ordering::Relaxed);
        *last = Some((memory, Instant::now()));
    }

    /// Redis evicted keys between the last two readings (5 s apart), or
    /// its fullest node is past [`STREAM_RATIO_MAX`] of its `maxmemory`: a
    /// body another node writes may lose a piece before it is read, so a
    /// follower waits for the commit instead of streaming it (a piece
    /// missing then is a miss fetched from the origin, not a cut client).
    pub(super) fn evicting(&self) -> bool {
        self.evicting.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Fleet {
    /// Redis' memory and evictions as last read.
    pub(crate) fn redis_memory(&self) -> RedisMemory {
        self.link.memory.snapshot()
    }

    /// Reads `INFO` now (for `check --fleet`) and returns what is known:
    /// all unknown when it did not answer. Kept and logged by nobody: the
    /// check prints its own report.
    pub(crate) async fn read_redis_memory(&self) -> RedisMemory {
        read(&self.link).await.unwrap_or_default()
    }
}

/// The first read, this long after the link is made: not the call that
/// pays for connecting (a TLS handshake can take longer than the
/// deadline; the link connects ahead in the background meanwhile).
const FIRST_READ: Duration = Duration::from_secs(1);

/// Reads `INFO` [`FIRST_READ`] after start, then every [`READ_EVERY`],
/// until the link is dropped.
pub(super) async fn read_loop(link: Weak<Link>) {
    tokio::time::sleep(FIRST_READ).await;
    loop {
        let Some(strong) = link.upgrade() else {
            return;
        };
        read_once(&strong).await;
        drop(strong);
        tokio::time::sleep(READ_EVERY).await;
    }
}

/// What `INFO` answered.
enum Answer {
    /// Its text (a cluster: per master).
    Info(Value),
    /// `NOPERM`: the ACL user may not run it (FLEET's documented ACL,
    /// `+@all -@dangerous`, leaves `INFO` out). Redis answered: not a
    /// failure for the breaker.
    NotPermitted,
}

/// Reads `INFO` and keeps what it says (a warning logged when new).
async fn read_once(link: &Arc<Link>) {
    if let Some(memory) = read(link).await {
        link.memory.store(memory);
    }
}

/// What `INFO` says now; `None`: no answer (or none that could be read).
async fn read(link: &Arc<Link>) -> Option<RedisMemory> {
    let answer = link
        .call(Op::Info, |mut conn| async move {
            match redis::cmd("INFO").query_async::<Value>(&mut conn).await {
                Ok(value) if any_refused(&value) => Ok(Answer::NotPermitted),
                Ok(value) => Ok(Answer::Info(value)),
                Err(e) if is_refused(&e) => Ok(Answer::NotPermitted),
                Err(e) => Err(e),
            }
        })
        .await;
    match answer? {
        Answer::NotPermitted => Some(RedisMemory {
            warning: Some(NOT_PERMITTED.to_owned()),
            ..RedisMemory::default()
        }),
        Answer::Info(value) => {
            let nodes = node_infos(&value);
            if nodes.is_empty() {
                tracing::debug!(target: super::LOG, "redis INFO: no answer read");
                return None;
            }
            Some(combine(&nodes))
        }
    }
}

const NOT_PERMITTED: &str = "the fleet's redis user may not run INFO: redis' memory and \
     evictions are unknown; add +info to its ACL";

fn is_refused(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
}

/// A cluster's answer with a master's `NOPERM` in it.
fn any_refused(value: &Value) -> bool {
    let Value::Map(nodes) = value else {
        return false;
    };
    nodes.iter().any(|(_, v)| {
        matches!(v, Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoPerm))
    })
}

/// Each node's `INFO` text in an answer: one (a single Redis), or one per
/// master (a cluster: a map of address to answer; a node's error is left
/// out).
fn node_infos(value: &Value) -> Vec<NodeInfo> {
    match value {
        Value::Map(nodes) => nodes
            .iter()
            .filter_map(|(_, v)| text_of(v))
            .map(|t| parse(&t))
            .collect(),
        other => text_of(other).map(|t| parse(&t)).into_iter().collect(),
    }
}

fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// The fields we use of one node's `INFO` (`name:value` lines; sections
/// and other fields ignored).
fn parse(text: &str) -> NodeInfo {
    let mut info = NodeInfo::default();
    for line in text.lines() {
        let Some((name, value)) = line.trim_end_matches('\r').split_once(':') else {
            continue;
        };
        let number = || value.trim().parse::<u64>().ok();
        match name {
            "used_memory" => info.used_memory = number(),
            "maxmemory" => info.maxmemory = number(),
            "evicted_keys" => info.evicted_keys = number(),
            "maxmemory_policy" => {
                let policy = value.trim();
                let plausible = !policy.is_empty()
                    && policy.len() <= 32
                    && policy.bytes().all(|b| b.is_ascii_lowercase() || b == b'-');
                info.policy = plausible.then(|| policy.to_owned());
            }
            _ => {}
        }
    }
    info
}

/// Several nodes' readings as one: sums (unknown if any node's is), the
/// fullest node's ratio, one policy or `mixed`.
fn combine(nodes: &[NodeInfo]) -> RedisMemory {
    let sum = |field: fn(&NodeInfo) -> Option<u64>| {
        nodes
            .iter()
            .try_fold(0u64, |total, n| Some(total.saturating_add(field(n)?)))
    };
    let used_ratio = nodes
        .iter()
        .filter_map(|n| match (n.used_memory, n.maxmemory) {
            (Some(used), Some(max)) if max > 0 => Some(used as f64 / max as f64),
            _ => None,
        })
        .reduce(f64::max);
    let mut policies = nodes.iter().map(|n| n.policy.clone());
    let first = policies.next().flatten();
    let maxmemory_policy = if policies.all(|p| p == first) {
        first
    } else {
        Some("mixed".to_owned())
    };
    let maxmemory = sum(|n| n.maxmemory);
    let warning = warning(nodes);
    RedisMemory {
        used_memory: sum(|n| n.used_memory),
        maxmemory,
        used_ratio,
        maxmemory_policy,
        evicted_keys: sum(|n| n.evicted_keys),
        nodes: u32::try_from(nodes.len()).unwrap_or(u32::MAX),
        read_ms_ago: None,
        warning,
    }
}

/// What in these settings will hurt the fleet when Redis fills up.
fn warning(nodes: &[NodeInfo]) -> Option<String> {
    if nodes.iter().any(|n| n.maxmemory == Some(0)) {
        return Some(
            "redis has no maxmemory: it grows until its host runs out of memory; \
             set maxmemory and maxmemory-policy allkeys-lfu"
                .to_owned(),
        );
    }
    if nodes
        .iter()
        .any(|n| n.policy.as_deref() == Some("noeviction"))
    {
        return Some(
            "redis maxmemory-policy is noeviction: once full it refuses leases and \
             stores, and the fleet goes on without it; set allkeys-lfu"
                .to_owned(),
        );
    }
    None
}

#[cfg(test)]
#[path = "redis_info_tests.rs"]
mod tests;
