//! The purge bus: purges sent to the shared tier (one key, or everything
//! before now: the purge epoch) and the stream of other nodes' purges,
//! polled: where to begin, gaps (a wiped Redis, a trimmed stream), signed
//! messages admitted or refused, and the lag of those applied.
//!
//! Must not: apply a purge to the local zones (the caller does, with the
//! JSON it is handed), or import the request path.

use std::sync::atomic::Ordering;

use calmcache_core::warn_limit::WarnLimit;
use calmcache_core::{CacheKey, PurgeMode};
use redis::Value;
use tokio::time::Instant;

use super::ops_stats::Op;
use super::LOG;

use super::entries::hash_of;
use super::position::Position;
use super::purge_floor::SharedRule;
use super::sign::PurgeCheck;
use super::Fleet;

/// Purges read from the stream per poll.
pub(super) const PURGES_PER_POLL: usize = 100;

/// What a poll of the purge stream found.
#[derive(Default)]
pub(crate) struct Polled {
    /// Other nodes' purges, in order.
    pub(crate) purges: Vec<FleetPurge>,
    /// Some purges may have been missed: mark every local object stale.
    pub(crate) gap: bool,
}

/// A purge another node sent.
pub(crate) struct FleetPurge {
    /// The admin API's JSON form.
    pub(crate) json: String,
    /// How long it had been in the stream when read (Redis' clock), ms.
    lag_ms: u64,
    /// When it was read.
    read_at: Instant,
    /// When it entered the stream (Redis' clock), ms.
    sent_ms: u64,
    /// The purge epoch its sender set, if it set one (and says so: an
    /// older node does not); never later than `sent_ms` (it was set first).
    epoch: Option<u64>,
}

impl Fleet {
    /// Purges `key` in Redis (hard: removed and fenced against fills that
    /// began before; soft: marked stale). When Redis cannot be reached, the
    /// shared tier is purged whole once it is back (see [`Self::catch_up`]).
    pub(crate) async fn purge_key(&self, key: &CacheKey, mode: PurgeMode) {
        let hash = hash_of(key);
        let keys = [
            self.key(&hash, "m"),
            self.key(&hash, "p"),
            self.key(&hash, "vs"),
        ];
        let variants = self.key(&hash, "v:");
        let script = &self.purge_key;
        let hard = u8::from(mode == PurgeMode::Hard);
        let done = self
            .link
            .call(Op::Purge, |mut conn| async move {
                script
                    .key(&keys[0])
                    .key(&keys[1])
                    .key(&keys[2])
                    .arg(hard)
                    .arg(&variants)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await;
        if done.is_none() {
            self.outbox().redis_missed = true;
        }
    }

    /// A purge that names no single key in Redis (a prefix, a tag,
    /// everything, a path on hosts not all remembered): the copies in Redis
    /// it takes, stored before now, are ignored from now on (`rule` says
    /// which: purge_floor.rs). Sets the epoch key (Redis' clock; nodes of
    /// an older version use it for every key) and returns it, for the
    /// stream entry that tells the other nodes; `None` when Redis could not
    /// be asked (the shared tier is purged whole once it is back).
    pub(crate) async fn purge_before_now(&self, rule: SharedRule) -> Option<u64> {
        let key = self.epoch_key();
        let script = &self.purge_before;
        let now: Option<u64> = self
            .link
            .call(Op::Purge, |mut conn| async move {
                script.key(key).invoke_async(&mut conn).await
            })
            .await;
        match now {
            Some(now) => self.floors.note(rule, Some(now), now),
            None => self.outbox().redis_missed = true,
        }
        now
    }

    /// The purges other nodes sent since the last call (their JSON), and
    /// whether this node may have missed some: Redis lost its data (a new
    /// `{prefix}epoch`), or the stream was trimmed past the last entry read
    /// while Redis could not be reached. The purge epoch is brought up to
    /// date, and purges made while Redis was out are sent. The first call
    /// finds where to begin: where the disk zones' saved position says, or
    /// the stream's end (then, if the disk zones `held` objects, these are
    /// marked stale: what was purged meanwhile is not known).
    pub(crate) async fn poll_purges(&self, held: bool) -> Polled {
        let mut polled = Polled::default();
        let Some((epoch, redis_now_ms)) = self.redis_epoch().await else {
            self.outbox().missed_polls = true;
            return polled;
        };
        *self.redis_clock.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((redis_now_ms, Instant::now()));
        self.release_late().await;
        polled.gap = self.epoch_changed(&epoch);
        self.catch_up().await;
        self.poll_epoch().await;
        let key = self.stream_key();
        let last = self
            .last_purge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match last {
            None => polled.gap |= self.begin_reading(&key, &epoch, held).await,
            Some(last) => {
                polled.gap |= self.missed_while_away(&key, &last).await;
                match self.read_after(&key, &last).await {
                    Some(entries) => polled.purges = self.admit_all(entries, redis_now_ms),
                    None => {
                        self.outbox().missed_polls = true;
                        return polled;
                    }
                }
            }
        }
        if polled.gap {
            self.stats.purge_gaps.fetch_add(1, Ordering::Relaxed);
            self.floors.lost_track();
        }
        self.purge_floor_baseline().await;
        polled
    }

    /// Notes Redis' data generation: a new one (Redis started empty since
    /// the last poll) means purges may have been missed, and its stream,
    /// new too, is read whole.
    fn epoch_changed(&self, epoch: &str) -> bool {
        let mut seen = self.epoch.lock().unwrap_or_else(|p| p.into_inner());
        let changed = seen.as_deref().is_some_and(|s| s != epoch);
        if changed {
            tracing::warn!(target: LOG, "redis lost its data: every local object is marked stale");
            *self.last_purge.lock().unwrap_or_else(|p| p.into_inner()) = Some("0-0".to_string());
        }
        *seen = Some(epoch.to_owned());
        changed
    }

    /// The first poll: where to begin reading the stream, and whether
    /// purges may have been missed. Disk zones hold objects from before
    /// this start: go on from the position saved with them, or, when there
    /// is none to trust, mark them stale. Otherwise start at the end: what
    /// came before is in Redis' state already.
    async fn begin_reading(&self, key: &str, epoch: &str, held: bool) -> bool {
        let (saved, gap) = match self.saved_position().await {
            Position::Found(was, id) if was == epoch => (Some(id), false),
            Position::Missing if !held => (None, false),
            _ => {
                tracing::info!(target: LOG, "no purge stream position saved with the disk zones for this redis: the objects they hold are marked stale");
                (None, true)
            }
        };
        let start = match saved {
            Some(id) => {
                // Away a while: entries past it may have been trimmed.
                self.outbox().missed_polls = true;
                Some(id)
            }
            None => self.stream_end(key).await,
        };
        if let Some(id) = start {
            *self.last_purge.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
        }
        gap
    }

    /// After polls failed: whether the stream was trimmed past `last`
    /// meanwhile (purges missed).
    async fn missed_while_away(&self, key: &str, last: &str) -> bool {
        let missed_polls = std::mem::take(&mut self.outbox().missed_polls);
        if !missed_polls {
            return false;
        }
        let Some(first) = self.stream_start(key).await else {
            return false;
        };
        let trimmed = stream_id_before(last, &first) && last != "0-0";
        if trimmed {
            tracing::warn!(target: LOG, "purges were missed while redis was out of reach: every local object is marked stale");
        }
        trimmed
    }

    /// The stream's entries after `last` (at most [`PURGES_PER_POLL`]);
    /// `None` when Redis could not be asked.
    async fn read_after(&self, key: &str, last: &str) -> Option<Vec<StreamEntry>> {
        let read: Value = self
            .link
            .call(Op::Poll, |mut conn| async move {
                redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(PURGES_PER_POLL)
                    .arg("STREAMS")
                    .arg(key)
                    .arg(last)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Some(xread_entries(read))
    }

    /// The purges of stream entries read now that other nodes sent and may
    /// be applied; the last entry read is noted as where to go on.
    fn admit_all(&self, entries: Vec<StreamEntry>, redis_now_ms: u64) -> Vec<FleetPurge> {
        let read_at = Instant::now();
        let mut purges = Vec::new();
        for (id, fields) in entries {
            let sent_ms = stream_id_ms(&id);
            *self.last_purge.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
            let node = field(&fields, "node");
            if node.as_deref() == Some(self.node.as_str()) {
                continue;
            }
            if let Some(json) = self.admitted(&fields, sent_ms) {
                let epoch = field(&fields, "epoch")
                    .and_then(|e| e.parse::<u64>().ok())
                    .filter(|e| *e <= sent_ms);
                purges.push(FleetPurge {
                    json,
                    lag_ms: redis_now_ms.saturating_sub(sent_ms),
                    read_at,
                    sent_ms,
                    epoch,
                });
            }
        }
        purges
    }

    /// The purge of a stream entry that Redis added at `entered_ms`, when
    /// it may be applied: with the fleet secret, only signed by a fleet
    /// secret at about that time (else refused and counted).
    pub(super) fn admitted(&self, fields: &[(String, String)], entered_ms: u64) -> Option<String> {
        let purge = field(fields, "purge")?;
        let Some(signer) = self.signer() else {
            return Some(purge);
        };
        let node = field(fields, "node").unwrap_or_default();
        let at = field(fields, "at");
        let sig = field(fields, "sig");
        let check = signer.check_purge(&node, &purge, at.as_deref(), sig.as_deref(), entered_ms);
        let (counter, why) = match check {
            PurgeCheck::Valid => return Some(purge),
            PurgeCheck::Refused => (&self.stats.purges_refused, "no valid signature"),
            PurgeCheck::Replayed => (
                &self.stats.purges_replayed,
                "signed long before it entered the stream (a replay)",
            ),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        static REFUSED: WarnLimit = WarnLimit::new();
        calmcache_core::warn_limited!(
            REFUSED,
            "a purge message in the fleet's stream was refused, not applied",
            target: LOG,
            why,
            node = %node
        );
        None
    }

    /// Redis' data generation (a random id set once, `SET NX`: another one
    /// means Redis started empty since we last looked) and its clock (ms).
    pub(super) async fn redis_epoch(&self) -> Option<(String, u64)> {
        let key = format!("{}epoch", self.cfg.prefix);
        let mine = format!("{:016x}", rand::random::<u64>());
        let script = &self.epoch_script;
        self.link
            .call(Op::Poll, |mut conn| async move {
                script.key(key).arg(mine).invoke_async(&mut conn).await
            })
            .await
    }

    /// The id of the stream's last entry (`0-0` when empty).
    pub(super) async fn stream_end(&self, key: &str) -> Option<String> {
        self.stream_edge(key, "XREVRANGE", "+", "-").await
    }

    /// The id of the stream's first entry (`0-0` when empty).
    pub(super) async fn stream_start(&self, key: &str) -> Option<String> {
        self.stream_edge(key, "XRANGE", "-", "+").await
    }

    pub(super) async fn stream_edge(
        &self,
        key: &str,
        cmd: &str,
        from: &str,
        to: &str,
    ) -> Option<String> {
        let edge: Value = self
            .link
            .call(Op::Poll, |mut conn| async move {
                redis::cmd(cmd)
                    .arg(key)
                    .arg(from)
                    .arg(to)
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Some(
            stream_entries(edge)
                .first()
                .map_or_else(|| "0-0".to_string(), |(id, _)| id.clone()),
        )
    }

    pub(super) async fn poll_epoch(&self) {
        if let Some(epoch) = self.read_purge_epoch().await {
            self.floors.saw_epoch(epoch);
        }
    }

    /// The purge epoch key (`0`: never set), `None` when Redis did not
    /// answer.
    async fn read_purge_epoch(&self) -> Option<u64> {
        let key = self.epoch_key();
        let epoch: Option<Option<u64>> = self
            .link
            .call(Op::Poll, |mut conn| async move {
                redis::cmd("GET").arg(&key).query_async(&mut conn).await
            })
            .await;
        epoch.map(Option::unwrap_or_default)
    }

    /// Once this node knows where it reads the stream from (first, and
    /// after a gap): the purges before are not read, and what they took is
    /// not known, so the epoch now is a floor for every key (purge_floor.rs).
    async fn purge_floor_baseline(&self) {
        let reading = self
            .last_purge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if !reading || !self.floors.needs_baseline() {
            return;
        }
        if let Some(epoch) = self.read_purge_epoch().await {
            self.floors.set_baseline(epoch);
        }
    }

    /// A purge from another node was applied here; `rule`: what it was
    /// for the shared tier (its purge floors).
    pub(crate) fn purge_applied(&self, purge: &FleetPurge, rule: SharedRule) {
        let at_ms = purge.epoch.unwrap_or(purge.sent_ms);
        self.floors.note(rule, purge.epoch, at_ms);
        let lag =
            purge.lag_ms + u64::try_from(purge.read_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        let s = &self.stats;
        s.purges_applied.fetch_add(1, Ordering::Relaxed);
        s.purge_lag_ms_sum.fetch_add(lag, Ordering::Relaxed);
        s.purge_lag_ms_max.fetch_max(lag, Ordering::Relaxed);
    }
}

/// The milliseconds part of a stream id (`ms-seq`): when Redis added it.
pub(super) fn stream_id_ms(id: &str) -> u64 {
    id.split_once('-')
        .map_or(id, |(ms, _)| ms)
        .parse()
        .unwrap_or(0)
}

/// `a` comes before `b` (stream ids `ms-seq`).
pub(super) fn stream_id_before(a: &str, b: &str) -> bool {
    let parse = |id: &str| -> (u64, u64) {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
    };
    parse(a) < parse(b)
}

/// One stream entry: its id and its fields.
type StreamEntry = (String, Vec<(String, String)>);

/// XREAD's answer: `[[stream, [entries]]]` (RESP2) or a map (RESP3).
fn xread_entries(read: Value) -> Vec<StreamEntry> {
    match read {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                _ => None,
            })
            .flat_map(stream_entries)
            .collect(),
        Value::Map(streams) => streams
            .into_iter()
            .flat_map(|(_, entries)| stream_entries(entries))
            .collect(),
        _ => Vec::new(),
    }
}

/// `[[id, [field, value, ...]], ...]` as (id, fields).
pub(super) fn stream_entries(value: Value) -> Vec<StreamEntry> {
    let Value::Array(entries) = value else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|entry| {
            let Value::Array(mut parts) = entry else {
                return None;
            };
            if parts.len() != 2 {
                return None;
            }
            let fields = parts.pop()?;
            let id = text(parts.pop()?)?;
            let Value::Array(flat) = fields else {
                return None;
            };
            let mut pairs = Vec::new();
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((text(k)?, text(v)?));
            }
            Some((id, pairs))
        })
        .collect()
}

pub(super) fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

pub(super) fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}
