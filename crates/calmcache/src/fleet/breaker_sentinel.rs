//! The breaker's sentinel: a PING to Redis every [`SENTINEL_EVERY`]
//! (100 ms) from a thread of its own, on a connection of its own, whose
//! round trip is what the breaker's latency rule judges
//! ([`Breaker::sentinel`](super::breaker::Breaker::sentinel)).
//!
//! Why a thread: a request-path call's time is Redis' round trip plus
//! however long this node's workers take to run the call's task again
//! (issue 30: on a saturated 2-core machine, calls cost 7-8 ms on average
//! and far more in bursts with Redis idle, and the latency rule cut the
//! node out of the fleet 1-10 times a minute). The sentinel's thread does
//! nothing else and sleeps between PINGs, so the kernel runs it soon after
//! Redis answers however busy the workers are; and its connection carries
//! no one else's bytes, so its PING queues behind none of this node's
//! calls. What it measures is Redis (its own load, its memory, its host)
//! and the way to it. A tick that starts later than the breaker's lag gate
//! (the thread itself was starved) is not reported.
//!
//! Owns: its thread, runtime and connection. Must not: make any call but
//! PING, or judge anything itself (the breaker does). It ends within a
//! tick of its link being dropped.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::Ping;
use super::link::{cluster_client, single_client, Conn, Link, CONNECT_TIMEOUT};
use crate::config::FleetConfig;

/// How often the sentinel PINGs: 10 commands a second per node, and the
/// latency rule's 20 samples in 2 s.
pub(super) const SENTINEL_EVERY: Duration = Duration::from_millis(100);

/// PINGs past the deadline in a row before the sentinel drops its
/// connection for a new one (a hung socket stays hung; a slow Redis is
/// not made slower by a reconnect per tick).
const REBUILD_AFTER: u32 = 10;

/// Starts the sentinel of `link` on a thread of its own; a failure to
/// start is logged and leaves the latency rule without samples (the
/// failure rules still apply).
pub(super) fn start(link: Weak<Link>, cfg: FleetConfig) {
    let spawned = std::thread::Builder::new()
        .name("calmcache-redis-sentinel".to_string())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime {
                Ok(runtime) => runtime.block_on(watch(link, cfg)),
                Err(e) => tracing::warn!(error = %e, "redis sentinel: no runtime"),
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "redis sentinel: no thread; the breaker's latency rule is off");
    }
}

/// PINGs every tick until the link is dropped.
async fn watch(link: Weak<Link>, cfg: FleetConfig) {
    let mut conn: Option<Conn> = None;
    let mut late_in_a_row = 0u32;
    loop {
        let asked = Instant::now();
        tokio::time::sleep(SENTINEL_EVERY).await;
        let lag = asked.elapsed().saturating_sub(SENTINEL_EVERY);
        let Some(gate) = link.upgrade().map(|l| l.breaker().lag_gate()) else {
            return;
        };
        if conn.is_none() {
            conn = connect(&cfg).await;
        }
        let Some(c) = conn.as_mut() else {
            continue;
        };
        let started = Instant::now();
        let ping = redis::cmd("PING");
        let result = match tokio::time::timeout(cfg.timeout, ping.query_async::<()>(c)).await {
            Ok(Ok(())) => Ping::Answered(started.elapsed()),
            Ok(Err(_)) => Ping::Failed,
            Err(_) => Ping::TimedOut,
        };
        late_in_a_row = match result {
            Ping::TimedOut => late_in_a_row + 1,
            Ping::Answered(_) | Ping::Failed => 0,
        };
        if late_in_a_row >= REBUILD_AFTER {
            late_in_a_row = 0;
            conn = None;
        }
        let Some(link) = link.upgrade() else {
            return;
        };
        link.sentinel_pinged(result, lag <= gate);
    }
}

/// A connection of the sentinel's own, made now (so a PING costs one
/// round trip, not a connection's setup too); `None` if it could not be
/// made within [`CONNECT_TIMEOUT`] (the next tick tries again).
async fn connect(cfg: &FleetConfig) -> Option<Conn> {
    let made = async {
        if cfg.cluster {
            let client = cluster_client(cfg)?;
            return client.get_async_connection().await.map(Conn::Cluster);
        }
        let (client, config) = single_client(cfg)?;
        redis::aio::ConnectionManager::new_with_config(client, config)
            .await
            .map(Conn::Single)
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, made).await {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "redis sentinel: not connected");
            None
        }
        Err(_) => None,
    }
}
