//! The outbox: purges this node made while Redis was out of reach, sent in
//! order once it answers again (and, when a purge could not reach the
//! shared tier, the shared tier purged whole first); the stream `XADD`.
//!
//! Must not: read the stream (purge_bus.rs) or apply a purge locally.

use std::sync::atomic::Ordering;

use super::ops_stats::Op;
use super::purge_floor::SharedRule;

use super::Fleet;

/// Entries the purge stream keeps (about; trimmed as it grows).
pub(super) const PURGE_STREAM_LEN: usize = 10_000;

/// Purges kept while Redis is out; past it, one soft purge of everything.
pub(super) const OUTBOX_MAX: usize = 1_000;

/// Purges this node could not hand to Redis yet.
#[derive(Default)]
pub(super) struct Outbox {
    /// Purges to send, in order, with the purge epoch each set.
    pub(super) pending: Vec<(String, Option<u64>)>,
    /// A purge could not reach the shared tier: purge it whole on return.
    pub(super) redis_missed: bool,
    /// A poll failed: on return, check the stream was not trimmed past us.
    pub(super) missed_polls: bool,
}

impl Fleet {
    /// Sends `purge` (the admin API's JSON form) to the other nodes, with
    /// the purge `epoch` it set ([`Self::purge_before_now`]); when Redis
    /// cannot take it now, it waits in the outbox (sent by
    /// [`Self::catch_up`] once Redis answers again). Returns the purges
    /// waiting.
    pub(crate) async fn publish_purge(&self, purge: String, epoch: Option<u64>) -> usize {
        if self.outbox().pending.is_empty() && self.xadd(&purge, epoch).await {
            self.stats.purges_sent.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let mut outbox = self.outbox();
        if outbox.pending.len() < OUTBOX_MAX {
            outbox.pending.push((purge, epoch));
        } else {
            // Too many to replay one by one: the other nodes will mark
            // everything they hold stale instead.
            outbox.pending.clear();
            outbox
                .pending
                .push((r#"{"all":true,"soft":true}"#.to_string(), None));
        }
        outbox.pending.len()
    }

    /// Adds `purge` to the stream: `node` and `purge`, `epoch` when it set
    /// one (the other nodes' purge floors: it accounts for that epoch), and
    /// with the fleet secret `at` (Redis' clock as last read, ms) and
    /// `sig`, signed now (not when the purge was made: one from the outbox
    /// is sent later). `epoch` is not signed: an entry cannot be changed in
    /// the stream, and a node takes no epoch later than the entry itself.
    pub(super) async fn xadd(&self, purge: &str, epoch: Option<u64>) -> bool {
        let key = self.stream_key();
        let node = self.node.clone();
        let signature = self.signer().map(|signer| {
            let at = self.redis_now_ms();
            (at, signer.sign_purge(&node, at, purge))
        });
        let sent: Option<String> = self
            .link
            .call(Op::Publish, |mut conn| async move {
                let mut cmd = redis::cmd("XADD");
                cmd.arg(&key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(PURGE_STREAM_LEN)
                    .arg("*")
                    .arg("node")
                    .arg(&node)
                    .arg("purge")
                    .arg(purge);
                if let Some(epoch) = epoch {
                    cmd.arg("epoch").arg(epoch);
                }
                if let Some((at, sig)) = &signature {
                    cmd.arg("at").arg(at).arg("sig").arg(sig);
                }
                cmd.query_async(&mut conn).await
            })
            .await;
        sent.is_some()
    }

    pub(super) fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Purges waiting to be sent (Redis was out when they were made).
    pub(crate) fn purges_pending(&self) -> usize {
        self.outbox().pending.len()
    }

    /// Once Redis answers again after purges could not reach it: the
    /// shared tier's older objects are dropped (the keys purged meanwhile
    /// are not known one by one) and the waiting purges are sent, in order.
    pub(super) async fn catch_up(&self) {
        let (missed, pending) = {
            let outbox = self.outbox();
            (outbox.redis_missed, outbox.pending.clone())
        };
        if missed {
            self.outbox().redis_missed = false;
            self.purge_before_now(SharedRule::Everything).await;
        }
        for (sent, (purge, epoch)) in pending.iter().enumerate() {
            if !self.xadd(purge, *epoch).await {
                self.outbox().pending.drain(..sent);
                return;
            }
            self.stats.purges_sent.fetch_add(1, Ordering::Relaxed);
        }
        self.outbox().pending.drain(..pending.len());
    }
}
