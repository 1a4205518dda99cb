//! The connection to Redis (one instance, or a cluster), and every call
//! through it: each call has the fleet's deadline and goes through a
//! circuit breaker; a call the breaker refuses, that fails or that misses
//! its deadline is `None`, and the caller goes on without Redis. After a
//! breaker trips its connection is rebuilt (a hung socket stays hung).
//!
//! Two channels (FLEET.md §6), each a connection with its own breaker:
//! **control** (leases, entries, purges, heartbeats, `INFO`) and **bulk**
//! (the 256 KiB pieces of large objects, [`Lane::Bulk`]), so a piece never
//! sits ahead of a lease on the wire, and a bulk channel that fails keeps
//! large objects local while small ones are still shared. While the
//! control breaker is open no bulk call is made either (Redis is out). The
//! bulk breaker has the failure rules only; `/status`' breaker is the
//! control one, and the bulk one shows as `skipped` pieces.
//!
//! The control breaker's latency rule is fed by a sentinel
//! (breaker_sentinel.rs): a PING every 100 ms from a thread and a
//! connection of its own, so what it judges is Redis' round trip, not this
//! node's busy workers.
//!
//! While a breaker is open, a probe task PINGs its channel every
//! [`PING_EVERY`] past its pause ([`Link::probe_loop`]), off the request
//! path, so a Redis that comes back is found within a quarter second
//! rather than at the end of a pause that doubled while it was down; the
//! breaker then lets one real call through as its probe.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};

use crate::config::FleetConfig;
use crate::fleet::breaker::{Breaker, BreakerState, Pass, Ping, PingPass, PING_EVERY};
use crate::fleet::ops_stats::{Lane, Op, OpStats, Outcome};

/// How long connecting may take (a call still waits at most the deadline).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection handle: cheap to clone, shared by every task.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One Redis (reconnects by itself).
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Counters of the calls made, for `/status` and `/metrics`.
#[derive(Default)]
pub(crate) struct CallStats {
    /// Calls answered in time.
    pub(crate) ok: AtomicU64,
    /// Calls that failed (an error, a closed connection).
    pub(crate) errors: AtomicU64,
    /// Calls past the deadline.
    pub(crate) timeouts: AtomicU64,
    /// Calls not made: the breaker was open.
    pub(crate) skipped: AtomicU64,
    /// Sum of the answered calls' latency, in microseconds.
    pub(crate) micros: AtomicU64,
    /// Connections (re)built.
    pub(crate) reconnects: AtomicU64,
}

/// One connection to Redis (a cluster's: one per master) and the breaker
/// in front of it.
struct Channel {
    conn: Mutex<Option<Conn>>,
    /// Rebuilds so far: a connection made in the background replaces the
    /// one in `conn` only if no rebuild came after.
    rebuilds: AtomicU64,
    connecting: Arc<AtomicBool>,
    /// Open after failures: no call goes to Redis on this channel.
    breaker: Breaker,
}

impl Channel {
    fn new(timeout: Duration, lane: Lane) -> Channel {
        Channel {
            conn: Mutex::new(None),
            rebuilds: AtomicU64::new(0),
            connecting: Arc::new(AtomicBool::new(false)),
            breaker: Breaker::for_lane(timeout, lane),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Conn>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Redis, as this node reaches it: two channels (FLEET.md §6), control
/// (leases, entries, purges, heartbeats) and bulk (the pieces of large
/// objects), so a 256 KiB piece never sits ahead of a lease on the wire.
pub(crate) struct Link {
    cfg: FleetConfig,
    /// Indexed by [`Lane`].
    channels: [Channel; 2],
    /// Calls made and how they went.
    pub(crate) stats: CallStats,
    /// The same, per operation.
    pub(crate) ops: OpStats,
    /// The last failed call's operation and error.
    last_error: Mutex<Option<String>>,
    /// Redis' memory as its `INFO` last said (redis_info.rs).
    pub(super) memory: super::redis_info::Readings,
}

impl Link {
    /// The link for `cfg`: a single instance connects on first use, a
    /// cluster in the background; nothing here waits for Redis.
    pub(crate) fn new(cfg: &FleetConfig) -> RedisResult<Arc<Link>> {
        let link = Arc::new(Link {
            cfg: cfg.clone(),
            channels: Lane::ALL.map(|lane| Channel::new(cfg.timeout, lane)),
            stats: CallStats::default(),
            ops: OpStats::default(),
            last_error: Mutex::new(None),
            memory: Default::default(),
        });
        // Detached: they end with the link.
        drop(link.breaker().watch_lag());
        drop(tokio::spawn(Link::probe_loop(Arc::downgrade(&link))));
        super::breaker_sentinel::start(Arc::downgrade(&link), cfg.clone());
        drop(tokio::spawn(super::redis_info::read_loop(Arc::downgrade(
            &link,
        ))));
        for lane in Lane::ALL {
            link.rebuild(lane)?;
        }
        Ok(link)
    }

    fn channel(&self, lane: Lane) -> &Channel {
        &self.channels[lane.index()]
    }

    /// The breaker of `lane`'s channel.
    #[cfg(test)]
    pub(super) fn breaker_of(&self, lane: Lane) -> &Breaker {
        &self.channel(lane).breaker
    }

    /// The control channel's breaker: the one `/status` shows, that the
    /// sentinel feeds; while it is open the bulk channel is not used
    /// either.
    pub(crate) fn breaker(&self) -> &Breaker {
        &self.channel(Lane::Control).breaker
    }

    /// The open breaker's PINGs: every [`PING_EVERY`], when the breaker
    /// asks for one ([`Breaker::wants_ping`]: open, past its pause), until
    /// the link is dropped. One atomic load per tick while closed.
    async fn probe_loop(link: std::sync::Weak<Link>) {
        // A PING that timed out rebuilds the connection (a hung socket
        // stays hung), at most once per this.
        const REBUILD_EVERY: Duration = Duration::from_secs(1);
        let mut rebuilt: [Option<tokio::time::Instant>; 2] = [None; 2];
        loop {
            tokio::time::sleep(PING_EVERY).await;
            let Some(link) = link.upgrade() else {
                return;
            };
            for lane in Lane::ALL {
                let Some(ping) = link.channel(lane).breaker.wants_ping() else {
                    continue;
                };
                let hung = link.ping(lane, ping).await;
                let last = &mut rebuilt[lane.index()];
                if hung && last.is_none_or(|at| at.elapsed() >= REBUILD_EVERY) {
                    *last = Some(tokio::time::Instant::now());
                    let _ = link.rebuild(lane);
                }
            }
        }
    }

    /// One PING within the deadline, told to the breaker and counted as a
    /// `probe` call; true when it timed out.
    async fn ping(&self, lane: Lane, ping: PingPass) -> bool {
        let breaker = &self.channel(lane).breaker;
        let Some(mut conn) = self.channel(lane).slot().clone() else {
            self.count(Op::Probe, Outcome::Failed);
            breaker.pinged(ping, Ping::Failed);
            return false;
        };
        let started = tokio::time::Instant::now();
        let cmd = redis::cmd("PING");
        let answer = tokio::time::timeout(self.cfg.timeout, cmd.query_async::<()>(&mut conn)).await;
        match answer {
            Ok(Ok(())) => {
                let took = started.elapsed();
                let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
                self.count(Op::Probe, Outcome::Answered(micros));
                breaker.pinged(ping, Ping::Answered(took));
                false
            }
            Ok(Err(e)) => {
                self.count(Op::Probe, Outcome::Failed);
                self.note_error(Op::Probe, &e.to_string());
                breaker.pinged(ping, Ping::Failed);
                false
            }
            Err(_) => {
                self.count(Op::Probe, Outcome::TimedOut);
                breaker.pinged(ping, Ping::TimedOut);
                true
            }
        }
    }

    /// The sentinel's PING (breaker_sentinel.rs), counted under the
    /// `sentinel` operation (not in the link's totals); told to the breaker when `on_time` (the sentinel's tick
    /// started within the lag gate).
    pub(super) fn sentinel_pinged(&self, result: Ping, on_time: bool) {
        let outcome = match result {
            Ping::Answered(took) => {
                Outcome::Answered(u64::try_from(took.as_micros()).unwrap_or(u64::MAX))
            }
            Ping::TimedOut => Outcome::TimedOut,
            Ping::Failed => Outcome::Failed,
        };
        // Under its operation only: the link's totals (`calls_ok`, the
        // mean) stay the node's own calls, as before the sentinel.
        self.ops.record(Op::Sentinel, outcome);
        if on_time {
            self.breaker().sentinel(result);
        }
    }

    /// A new connection (the old one, perhaps hung, is dropped): at once
    /// for a single instance (it connects on first use), in a background
    /// task for a cluster.
    fn rebuild(self: &Arc<Self>, lane: Lane) -> RedisResult<()> {
        self.stats.reconnects.fetch_add(1, Ordering::Relaxed);
        let channel = self.channel(lane);
        if !self.cfg.cluster {
            let (client, config) = single_client(&self.cfg)?;
            let manager = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
            let rebuild = channel.rebuilds.fetch_add(1, Ordering::AcqRel) + 1;
            *channel.slot() = Some(Conn::Single(manager));
            self.connect_ahead(lane, rebuild, client, config);
            return Ok(());
        }
        let client = cluster_client(&self.cfg)?;
        if channel.connecting.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let link = Arc::downgrade(self);
        let connecting = channel.connecting.clone();
        tokio::spawn(async move {
            let result = client.get_async_connection().await;
            connecting.store(false, Ordering::Release);
            let Some(link) = link.upgrade() else {
                return;
            };
            match result {
                Ok(conn) => *link.channel(lane).slot() = Some(Conn::Cluster(conn)),
                Err(e) => tracing::debug!(error = %e, "redis cluster: not connected yet"),
            }
        });
        Ok(())
    }

    /// Connects another manager now, in the background, and puts it in the
    /// slot once it answers, unless a rebuild came after `rebuild`: the
    /// probe after a trip then pays one round trip, not the connection's
    /// setup too (which misses the deadline where one round trip fits it).
    /// If it fails, the lazy one in the slot tries afresh when called (a
    /// failed manager would answer its next call with the cached error).
    fn connect_ahead(
        self: &Arc<Self>,
        lane: Lane,
        rebuild: u64,
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) {
        let link = Arc::downgrade(self);
        tokio::spawn(async move {
            let Ok(mut ahead) = ConnectionManager::new_lazy_with_config(client, config) else {
                return;
            };
            let ping = redis::cmd("PING");
            let up =
                tokio::time::timeout(CONNECT_TIMEOUT, ping.query_async::<()>(&mut ahead)).await;
            let Some(link) = link.upgrade().filter(|_| matches!(up, Ok(Ok(())))) else {
                return;
            };
            let channel = link.channel(lane);
            let mut slot = channel.slot();
            if channel.rebuilds.load(Ordering::Acquire) == rebuild {
                *slot = Some(Conn::Single(ahead));
            }
        });
    }

    /// Runs `call` (one `op`) on its lane's connection within the
    /// deadline, through that lane's breaker; `None` when it could not be
    /// made or did not answer in time. A bulk call is not made while the
    /// control breaker is open either (Redis is out: a piece without its
    /// manifest's commit is waste).
    pub(crate) async fn call<T, F, Fut>(self: &Arc<Self>, op: Op, call: F) -> Option<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let lane = op.lane();
        let channel = self.channel(lane);
        if channel.connecting.load(Ordering::Acquire) && channel.slot().is_none() {
            // A cluster's first connection is on its way: no call, and
            // nothing against the breaker, or a node started under traffic
            // would open it at once and go on alone.
            self.count(op, Outcome::Skipped);
            return None;
        }
        if lane == Lane::Bulk && !self.breaker().is_closed() {
            self.count(op, Outcome::Skipped);
            return None;
        }
        let Some(pass) = channel.breaker.pass() else {
            self.count(op, Outcome::Skipped);
            return None;
        };
        let pass = Outstanding {
            breaker: &channel.breaker,
            pass: Some(pass),
        };
        let conn = channel.slot().clone();
        let Some(conn) = conn else {
            // A cluster whose connection failed: a failure like any other.
            self.note_error(op, "no connection to the cluster");
            if pass.failure() {
                self.opened_after(op);
                let _ = self.rebuild(lane);
            }
            self.count(op, Outcome::Failed);
            return None;
        };
        let started = tokio::time::Instant::now();
        let answer = tokio::time::timeout(self.cfg.timeout, call(conn)).await;
        self.settle(op, pass, started, answer)
    }

    /// How a call that was made went: counted, told to its breaker (whose
    /// opening rebuilds the connection), its value if it answered in time.
    fn settle<T>(
        self: &Arc<Self>,
        op: Op,
        pass: Outstanding<'_>,
        started: tokio::time::Instant,
        answer: Result<RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        let error = match answer {
            Ok(Ok(value)) => {
                let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.count(op, Outcome::Answered(micros));
                pass.success();
                return Some(value);
            }
            Ok(Err(e)) => {
                self.count(op, Outcome::Failed);
                tracing::debug!(error = %e, op = op.as_str(), "redis call failed");
                e.to_string()
            }
            Err(_) => {
                self.count(op, Outcome::TimedOut);
                let deadline = self.cfg.timeout;
                format!("no answer within fleet.timeout ({deadline:?})")
            }
        };
        self.note_error(op, &error);
        if pass.failure() {
            self.opened_after(op);
            let _ = self.rebuild(op.lane());
        }
        None
    }

    /// Keeps the last failed call's error (for `/status` and the warning
    /// when the breaker opens: a TLS or password problem shows there, not
    /// only at debug level).
    fn note_error(&self, op: Op, error: &str) {
        let mut text = format!("{}: {error}", op.as_str());
        if text.len() > 300 {
            let mut end = 300;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(text);
    }

    /// The breaker just opened on a failed call: say why, once.
    fn opened_after(&self, op: Op) {
        let error = self.last_error();
        tracing::warn!(
            op = op.as_str(),
            error = error.as_deref().unwrap_or("?"),
            "redis call failed; the breaker opened"
        );
    }

    /// The last failed call: its operation and error.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One call counted in the totals and under its operation.
    fn count(&self, op: Op, outcome: Outcome) {
        let s = &self.stats;
        match outcome {
            Outcome::Answered(micros) => {
                s.micros.fetch_add(micros, Ordering::Relaxed);
                s.ok.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Failed => {
                s.errors.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::TimedOut => {
                s.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Skipped => {
                s.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.ops.record(op, outcome);
    }

    /// Where the breaker stands.
    pub(crate) fn state(&self) -> BreakerState {
        self.breaker().current()
    }
}

/// The client of a single Redis and its manager's settings: user,
/// password and TLS from `cfg`; a connection's setup bounded, calls not
/// (each caller has its own deadline).
pub(super) fn single_client(
    cfg: &FleetConfig,
) -> RedisResult<(redis::Client, ConnectionManagerConfig)> {
    let mut info = cfg.nodes[0].as_str().into_connection_info()?;
    let mut settings = info.redis_settings().clone();
    if let Some(user) = &cfg.user {
        settings = settings.set_username(user);
    }
    if let Some(password) = &cfg.password {
        settings = settings.set_password(password);
    }
    info = info.set_redis_settings(settings);
    let client = match tls_certificates(cfg) {
        Some(certs) => redis::Client::build_with_tls(info, certs)?,
        None => redis::Client::open(info)?,
    };
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None)
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    Ok((client, config))
}

/// The client of a Redis Cluster: user, password and TLS from `cfg`.
pub(super) fn cluster_client(cfg: &FleetConfig) -> RedisResult<redis::cluster::ClusterClient> {
    let mut builder = redis::cluster::ClusterClient::builder(cfg.nodes.clone())
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(cfg.timeout.max(Duration::from_millis(500)))
        .retries(1);
    if let Some(user) = &cfg.user {
        builder = builder.username(user);
    }
    if let Some(password) = &cfg.password {
        builder = builder.password(password);
    }
    if let Some(certs) = tls_certificates(cfg) {
        builder = builder.certs(certs);
    }
    builder.build()
}

/// `fleet.tls_ca` and the client certificate, for a `rediss://` client;
/// `None` without them (the system's roots, no client certificate). With a
/// CA file, only its certificates are trusted (redis-rs then leaves the
/// system's roots out).
fn tls_certificates(cfg: &FleetConfig) -> Option<redis::TlsCertificates> {
    if cfg.tls_ca.is_none() && cfg.tls_client.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: cfg
            .tls_client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.pem.clone(),
                client_key: key.pem.clone(),
            }),
        root_cert: cfg.tls_ca.as_ref().map(|ca| ca.pem.clone()),
    })
}

/// A call the breaker let through, until its outcome is reported. Dropped
/// before (its caller gave up on it: a fill cancelled when its client went
/// away), it is abandoned: a probe lost that way would leave the breaker
/// half-open for good, with no call ever going to Redis again.
struct Outstanding<'a> {
    breaker: &'a Breaker,
    pass: Option<Pass>,
}

impl Outstanding<'_> {
    fn success(mut self) {
        if let Some(pass) = self.pass.take() {
            self.breaker.success(pass);
        }
    }

    /// True when this opened the breaker (see [`Breaker::failure`]).
    fn failure(mut self) -> bool {
        self.pass.take().is_some_and(|p| self.breaker.failure(p))
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        if let Some(pass) = self.pass.take() {
            self.breaker.abandon(pass);
        }
    }
}
