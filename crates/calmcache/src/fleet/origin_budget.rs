//! The fleet-wide origin budget on Redis: an upstream server's
//! `fleet_max_inflight` slots, shared by every node, as leases in one
//! sorted set per server ([`SharedBudget`] for [`OriginBudget`], which
//! [`Fleet::origin_budget`] hands out).
//!
//! A slot is a lease: its id (this node's id and a counter) in the set
//! `{prefix}{origin:UPSTREAM/SERVER}:slots`, scored by its expiry on Redis'
//! clock. The take script drops the expired leases and adds this one if
//! fewer than the limit remain, in one round trip on one key (one cluster
//! slot). A slot held longer than a third of its lifetime is renewed by a
//! task (a long body keeps its slot); dropping the [`Granted`] guard
//! releases it off the request path (a spawned `ZREM`; if Redis is out
//! the lease expires). A node that dies leaves its slots to expire: they
//! come back within the lease's lifetime.
//!
//! Failing open: every call goes through the fleet link (deadline,
//! breaker); no answer, an error or an answer of the wrong shape is
//! [`SharedTake::Unavailable`], counted, and the request goes on under the
//! node's own budget.
//!
//! Must not: know requests, upstream pools or queues (net/ asks, decides
//! to wait or shed), or touch object keys.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{Script, Value};

use super::ops_stats::Op;
use super::{scripts, Fleet, LOG};
use crate::net::shared_budget::{SharedBudget, SharedTake};

/// The shortest lifetime of an origin slot's lease: `fleet.lease` when
/// longer. Most requests end before a third of it (no renewal: two calls,
/// take and release); a dead node's slots come back within it; Redis may
/// miss two renewals in a row before a held slot is lost.
pub(crate) const ORIGIN_LEASE_MIN: Duration = Duration::from_secs(10);

/// The fleet-wide origin budget of this node (cheap to clone).
#[derive(Clone)]
pub(crate) struct OriginBudget {
    inner: Arc<Inner>,
}

struct Inner {
    fleet: Arc<Fleet>,
    /// How long a slot's lease lives without renewal.
    lifetime: Duration,
    take: Script,
    renew: Script,
}

/// A fleet-wide origin slot held by this node: renewed while held,
/// released when dropped.
struct Granted {
    inner: Arc<Inner>,
    key: String,
    lease: String,
    renewal: tokio::task::JoinHandle<()>,
}

/// The take script's answer.
enum Answer {
    Granted,
    Full,
    /// Something else than a sorted set was at the key: deleted.
    Repaired,
}

impl Fleet {
    /// The fleet-wide origin budget, on this fleet's link.
    pub(crate) fn origin_budget(&self) -> OriginBudget {
        OriginBudget::new(self.arc(), self.cfg.lease.max(ORIGIN_LEASE_MIN))
    }

    /// The sorted set of `server`'s origin slots (of upstream `upstream`):
    /// its own hash tag, so the servers spread over a cluster.
    fn origin_key(&self, upstream: &str, server: &str) -> String {
        self.key(&format!("origin:{upstream}/{server}"), "slots")
    }
}

impl OriginBudget {
    /// A budget whose leases live `lifetime` between renewals.
    pub(super) fn new(fleet: Arc<Fleet>, lifetime: Duration) -> OriginBudget {
        OriginBudget {
            inner: Arc::new(Inner {
                fleet,
                lifetime,
                take: scripts::origin_take(),
                renew: scripts::origin_renew(),
            }),
        }
    }

    /// Asks Redis for one of `limit` slots at `key` under `lease`.
    async fn ask(&self, key: &str, lease: &str, limit: u32) -> SharedTake {
        let inner = &self.inner;
        let fleet = &inner.fleet;
        let script = &inner.take;
        let lifetime_ms = millis(inner.lifetime);
        // Whether the call went out (not skipped by the open breaker).
        let mut sent = false;
        // A request that goes away while the script is on its way (a
        // client gone mid-wait) may leave a slot taken: given back.
        let mut asking = Asking {
            inner: Some(inner.clone()),
            key,
            lease,
        };
        let value: Option<Value> = fleet
            .link
            .call(Op::OriginTake, |mut conn| {
                sent = true;
                async move {
                    script
                        .key(key)
                        .arg(lease)
                        .arg(limit)
                        .arg(lifetime_ms)
                        .invoke_async(&mut conn)
                        .await
                }
            })
            .await;
        asking.inner = None;
        let stats = &fleet.stats;
        match value.as_ref().and_then(answer) {
            Some(Answer::Granted) => {
                stats.origin_granted.fetch_add(1, Ordering::Relaxed);
                stats.origin_held.fetch_add(1, Ordering::Relaxed);
                SharedTake::Granted(Box::new(self.granted(key, lease)))
            }
            Some(Answer::Full) => {
                stats.origin_full.fetch_add(1, Ordering::Relaxed);
                SharedTake::Full
            }
            Some(Answer::Repaired) => {
                stats.bad_entries.fetch_add(1, Ordering::Relaxed);
                stats.origin_failed_open.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: LOG, key, "not a set of origin slots in redis: deleted");
                SharedTake::Unavailable
            }
            None => {
                stats.origin_failed_open.fetch_add(1, Ordering::Relaxed);
                if value.is_none() && sent {
                    // Unanswered in time, the script may still have run and
                    // taken the slot: give it back (sent after the take on
                    // the same connection, so it follows it), or it expires.
                    release(inner.clone(), key.to_owned(), lease.to_owned());
                } else {
                    tracing::debug!(target: LOG, key, ?value, "origin_take: an unexpected answer");
                }
                SharedTake::Unavailable
            }
        }
    }

    /// The guard of a slot just granted: renewed from now on.
    fn granted(&self, key: &str, lease: &str) -> Granted {
        Granted {
            inner: self.inner.clone(),
            key: key.to_owned(),
            lease: lease.to_owned(),
            renewal: renew_while_held(&self.inner, key, lease),
        }
    }
}

impl SharedBudget for OriginBudget {
    fn take<'a>(
        &'a self,
        upstream: &'a str,
        server: &'a str,
        limit: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = SharedTake> + Send + 'a>> {
        Box::pin(async move {
            if limit == 0 {
                // No fleet-wide limit: nothing to ask (config never sends
                // it; the local budget alone holds).
                return SharedTake::Unavailable;
            }
            let fleet = &self.inner.fleet;
            let key = fleet.origin_key(upstream, server);
            let lease = fleet.token();
            self.ask(&key, &lease, limit).await
        })
    }
}

impl Drop for Granted {
    fn drop(&mut self) {
        self.renewal.abort();
        let stats = &self.inner.fleet.stats;
        stats.origin_held.fetch_sub(1, Ordering::Relaxed);
        let key = std::mem::take(&mut self.key);
        let lease = std::mem::take(&mut self.lease);
        release(self.inner.clone(), key, lease);
    }
}

/// Removes `lease` from `key` in a task of its own: the dropping thread
/// never waits for Redis. Out of a runtime, or Redis out: it expires.
/// A take on its way to Redis: dropped before its answer (the request's
/// future cancelled), the slot it may have taken is given back.
struct Asking<'a> {
    /// Set until the answer came.
    inner: Option<Arc<Inner>>,
    key: &'a str,
    lease: &'a str,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            release(inner, self.key.to_owned(), self.lease.to_owned());
        }
    }
}

fn release(inner: Arc<Inner>, key: String, lease: String) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(async move {
        let (key, lease) = (&key, &lease);
        let _: Option<i64> = inner
            .fleet
            .link
            .call(Op::OriginRelease, |mut conn| async move {
                redis::cmd("ZREM")
                    .arg(key)
                    .arg(lease)
                    .query_async(&mut conn)
                    .await
            })
            .await;
    });
}

/// A task that extends the slot's lease every third of its lifetime until
/// aborted (the guard dropped): a long body keeps its slot, a dead node's
/// slot still expires. It stops when the lease is gone (counted as lost).
fn renew_while_held(inner: &Arc<Inner>, key: &str, lease: &str) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(inner);
    let (key, lease) = (key.to_owned(), lease.to_owned());
    let every = inner.lifetime / 3;
    let lifetime_ms = millis(inner.lifetime);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let script = &inner.renew;
            let (key, lease) = (&key, &lease);
            let kept: Option<i64> = inner
                .fleet
                .link
                .call(Op::OriginRenew, |mut conn| async move {
                    script
                        .key(key)
                        .arg(lease)
                        .arg(lifetime_ms)
                        .invoke_async(&mut conn)
                        .await
                })
                .await;
            if kept == Some(0) {
                inner
                    .fleet
                    .stats
                    .origin_lost
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    })
}

/// The take script's answer, if it has the shape it should.
fn answer(value: &Value) -> Option<Answer> {
    let Value::Array(items) = value else {
        return None;
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(_)] => Some(Answer::Granted),
        [Value::Int(0), Value::Int(_)] => Some(Answer::Full),
        [Value::Int(-1)] => Some(Answer::Repaired),
        _ => None,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "origin_budget_tests.rs"]
mod tests;
