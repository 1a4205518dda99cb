//! Upstreams: round robin over an upstream's healthy servers, a bounded
//! keepalive pool per server, timeouts, and the slots that bound background
//! refreshes. Each exchange reports to its server's [`ServerHealth`] (what
//! counts as a failure: [`counts_against_server`]; a failed exchange, as
//! opposed to a failed connect, carries its [`PathKey`] so that
//! [`crate::net::blame`] can blame the URL instead); while every server is
//! down a request fails at once with [`ErrorKind::AllServersDown`], no
//! connection attempted.
//!
//! A WebSocket handshake ([`Upstream::send_upgrade`]) does not go through
//! the pool: a switched connection is never reused, so it connects (TLS
//! too for an `https` server), sends the handshake with hyper's HTTP/1.1
//! client connection driven in place (no task, no pool entry), and on
//! `101` takes the stream back out ([`Switched`]) for the tunnel.
//!
//! Servers reached over TLS (`https://`, `tls = true`) go through the same
//! pool, its connector adding the handshake ([`crate::net::origin_tls`]).
//!
//! The origin budget (`max_inflight`, [`crate::net::budget`]): with one,
//! a request takes a slot before it is sent, preferring the server round
//! robin chose, else any server up with a free slot, else (as its
//! [`Admission`] allows) it waits in the upstream's queue for whichever
//! frees first, or is refused at once ([`ErrorKind::OriginBusy`]); then
//! the fleet-wide slot (`fleet_max_inflight`, [`SharedBudget`]) when the
//! fleet gave one. The slots ride on the answer's body ([`OriginBody`])
//! until it ends. Health checks take none. Without a budget nothing of
//! this runs.
//!
//! Choosing a server (`balance`): plain round robin (one relaxed atomic)
//! while every weight is 1; with weights, NGINX's smooth weighted round
//! robin over the servers that are up (a relaxed add per server,
//! O(servers), no lock), so a heavy server's requests are interleaved with
//! the others', not bunched. `"least_conn"` and `"hash"` ask
//! [`crate::net::balance`]: the fewest requests in flight for the weight
//! (counted by an [`InFlight`] riding on the answer's body), or the
//! consistent hash ring at the request's `hash_key` (a server down, or the
//! one that failed a retried request, passed over for the next along the
//! ring). Health, the retry rules and the origin budget apply alike to all.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Body, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::config::key_template::KeyTemplate;
use crate::config::{Balance, Scheme, UpstreamConfig, UpstreamServer};
use crate::http::body::StreamBody;
use crate::http::error::{ErrorKind, ProxyError};
use crate::net::balance::{self, InFlight, Load, Ring};
use crate::net::blame::PathKey;
use crate::net::budget::{Admission, Budget, Taken};
use crate::net::health::{self, Admit, Attempt, ServerHealth, Verdict};
use crate::net::origin_body::{Held, OriginBody};
use crate::net::origin_tls::{ConnCounts, Connector, OriginStream, OriginTls};
use crate::net::shared_budget::{SharedBudget, SharedTake};
use crate::net::unix_origin::UnixSockets;
use crate::telemetry::upstream_conns::{ConnRequests, ConnUse, Opened, ServerConns};

/// One named upstream: its servers and the shared connection pool.
pub struct Upstream {
    /// The config name, for logs and status.
    pub name: String,
    servers: Vec<Server>,
    next: AtomicUsize,
    /// Some server's weight is not 1: smooth weighted round robin.
    weighted: bool,
    /// `balance`: how a server is chosen.
    selection: Selection,
    client: Client<Connector, StreamBody>,
    /// The TLS client of `https` servers (the pool's connector has a copy).
    tls: Option<Arc<OriginTls>>,
    /// Longest wait for a response head (counted from sending the request, so a
    /// request body upload counts too), and between two response body frames.
    pub read_timeout: Duration,
    /// Longest wait between two frames of a request body being sent.
    pub send_timeout: Duration,
    /// Longest wait for a TCP connect (the pool's connector has its own copy).
    connect_timeout: Duration,
    refresh_slots: Arc<Semaphore>,
    /// The origin budget: `None` unless `max_inflight` or
    /// `fleet_max_inflight` is set (then the request path costs nothing).
    budget: Option<Arc<Budget>>,
    /// `max_inflight` (0: no limit).
    max_inflight: usize,
    /// `fleet_max_inflight` (0: off).
    fleet_limit: u32,
    /// The fleet-wide budget, handed in at Proxy build in fleet mode.
    shared: std::sync::OnceLock<Arc<dyn SharedBudget>>,
    /// Requests, errors, latency; the previous generation's upstream of the
    /// same name hands them on at a reload (counters never go back).
    pub stats: Arc<crate::telemetry::metrics::UpstreamStats>,
}

/// Why an upstream's pool could not be built. The message carries its
/// cause (not also given as `source()`, so a `{:#}` chain prints it once).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The TLS client could not be built (no system roots, a client key
    /// rustls refuses).
    #[error("upstream {upstream}: TLS: {reason}")]
    Tls {
        /// The upstream's name.
        upstream: String,
        /// What could not be used.
        reason: String,
    },
}

/// One configured server and its health.
struct Server {
    /// Its `host:port`, or a unix server's pool name (never resolved):
    /// the authority of the URIs sent to it, which keys its connections.
    authority: Authority,
    /// As `/status`, metrics, logs and errors show it: `host:port` or
    /// `unix:/path`.
    label: Arc<str>,
    /// The `Host` of requests of calmcache's own making (health checks):
    /// its `host:port`, or `localhost` for a unix server, as NGINX sends
    /// for a unix socket it is given directly.
    host: http::HeaderValue,
    /// A unix server's socket (the pool's connector has the same table).
    unix: Option<std::path::PathBuf>,
    /// `https` (TLS) or `http`.
    scheme: Scheme,
    /// Its share of round robin (`weight`).
    weight: i64,
    /// Smooth weighted round robin's running weight (NGINX's
    /// `current_weight`); only used when the upstream is weighted.
    current: AtomicI64,
    health: Arc<ServerHealth>,
    /// Requests in flight here (head to the body's end); counted only
    /// with `balance = "least_conn"`, which reads it.
    active: Arc<AtomicUsize>,
    /// Requests sent here, connections opened and closed (the pool's
    /// connector counts into the same).
    conns: Arc<ServerConns>,
}

/// An upstream's `balance`, built for its servers.
enum Selection {
    /// Round robin (smooth weighted when `weighted`).
    RoundRobin,
    /// Fewest requests in flight for the weight.
    LeastConn,
    /// The ring at the hash of `key` rendered for the request.
    Hash { key: KeyTemplate, ring: Ring },
}

impl Selection {
    fn new(balance: &Balance, servers: &[Server]) -> Selection {
        match balance {
            Balance::RoundRobin => Selection::RoundRobin,
            Balance::LeastConn => Selection::LeastConn,
            Balance::Hash(key) => {
                let weight = |s: &Server| u32::try_from(s.weight).unwrap_or(u32::MAX);
                let ring = Ring::new(servers.iter().map(|s| (s.authority.as_str(), weight(s))));
                Selection::Hash {
                    key: key.clone(),
                    ring,
                }
            }
        }
    }
}

impl Server {
    /// `server` of `cfg`. At a reload, the server `previous` had with the
    /// same address, scheme and health settings keeps its health (a server
    /// down stays down).
    fn new(cfg: &UpstreamConfig, server: &UpstreamServer, previous: Option<&Upstream>) -> Server {
        let settings = health::Settings {
            max_fails: server.health.max_fails,
            fail_timeout: server.health.fail_timeout,
            fail_statuses: cfg.fail_statuses.clone(),
            check: cfg.health_check.clone(),
        };
        let same = previous.and_then(|p| {
            p.servers
                .iter()
                .find(|old| old.authority == server.address && old.scheme == server.scheme)
        });
        // Counters never go back: the same server keeps its figures.
        let conns = same.map_or_else(Arc::default, |old| old.conns.clone());
        let kept = same
            .map(|old| &old.health)
            .filter(|h| *h.settings() == settings);
        let health = match kept {
            Some(h) => h.clone(),
            None => ServerHealth::new(server.label(), settings),
        };
        let host = match server.unix {
            Some(_) => http::HeaderValue::from_static("localhost"),
            None => http::HeaderValue::from_str(server.address.as_str())
                .unwrap_or_else(|_| http::HeaderValue::from_static("localhost")),
        };
        Server {
            authority: server.address.clone(),
            label: server.label().into(),
            host,
            unix: server.unix.clone(),
            scheme: server.scheme,
            weight: i64::from(server.weight.max(1)),
            current: AtomicI64::new(0),
            health,
            active: Arc::default(),
            conns,
        }
    }
}

/// What a request to the upstream may answer with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A final response: a `101` is an origin fault.
    Final,
    /// A WebSocket handshake: a `101` is the answer.
    Upgrade,
}

impl Upstream {
    /// Builds the pool for `cfg`. Server names were validated as `host:port`.
    /// At a reload, a server `previous` had with the same health settings
    /// keeps its health (a server down stays down).
    pub fn new(cfg: &UpstreamConfig, previous: Option<&Upstream>) -> Result<Self, UpstreamError> {
        let servers: Vec<Server> = cfg
            .servers
            .iter()
            .map(|s| Server::new(cfg, s, previous))
            .collect();
        let tls = match &cfg.tls {
            None => None,
            // tls_verify = false is warned about with the config's other
            // warnings (Config::warnings, logged at start and each reload).
            Some(settings) => {
                let tls = OriginTls::new(settings).map_err(|reason| UpstreamError::Tls {
                    upstream: cfg.name.clone(),
                    reason,
                })?;
                Some(Arc::new(tls))
            }
        };
        let counts: ConnCounts = servers
            .iter()
            .map(|s| (s.scheme.uri(), s.authority.clone(), s.conns.clone()))
            .collect();
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(cfg.keepalive)
            // Below the keep-alive of the common origin servers (Node and
            // Apache close an idle connection after 5 s): a connection the
            // origin is about to close is not handed out, so a request with
            // a body (never sent twice) does not meet that close as a 502.
            .pool_idle_timeout(POOL_IDLE)
            .set_host(false)
            .build(Connector::new(
                cfg.connect_timeout,
                tls.clone(),
                UnixSockets::of(&cfg.servers),
                counts,
            ));
        let stats: Arc<crate::telemetry::metrics::UpstreamStats> =
            previous.map_or_else(Arc::default, |p| p.stats.clone());
        let budget = budget(cfg, &servers, &stats);
        Ok(Upstream {
            budget,
            max_inflight: cfg.max_inflight,
            fleet_limit: u32::try_from(cfg.fleet_max_inflight).unwrap_or(u32::MAX),
            shared: std::sync::OnceLock::new(),
            name: cfg.name.clone(),
            weighted: servers.iter().any(|s| s.weight != 1),
            selection: Selection::new(&cfg.balance, &servers),
            servers,
            next: AtomicUsize::new(0),
            client,
            tls,
            read_timeout: cfg.read_timeout,
            send_timeout: cfg.send_timeout,
            connect_timeout: cfg.connect_timeout,
            refresh_slots: Arc::new(Semaphore::new(cfg.refresh_concurrency)),
            stats,
        })
    }

    /// Hands the upstream the fleet-wide budget its `fleet_max_inflight`
    /// slots are asked of (fleet mode; once, at Proxy build).
    pub(crate) fn set_shared_budget(&self, shared: Arc<dyn SharedBudget>) {
        let _ = self.shared.set(shared);
    }

    /// Whether requests take origin slots (`max_inflight` or
    /// `fleet_max_inflight` set).
    pub(crate) fn has_budget(&self) -> bool {
        self.budget.is_some()
    }

    /// Whether the local budget would refuse a request that may not wait
    /// right now (every slot of the servers that are up taken, or others
    /// queued); false without a budget.
    pub(crate) fn is_busy(&self) -> bool {
        self.budget.as_ref().is_some_and(|b| b.is_full())
    }

    /// The longest a request may wait for its origin slots
    /// (`queue_timeout`; zero without a budget).
    pub(crate) fn queue_wait(&self) -> Duration {
        self.budget
            .as_ref()
            .map_or(Duration::ZERO, |b| b.queue_timeout)
    }

    /// `max_inflight` per server (0: no limit).
    pub fn max_inflight(&self) -> usize {
        self.max_inflight
    }

    /// Servers configured (the budget's limit is `max_inflight` times this).
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// `fleet_max_inflight` (0: off).
    pub fn fleet_max_inflight(&self) -> u32 {
        self.fleet_limit
    }

    /// The server `balance` chooses that its health lets through (`point`:
    /// the request's hash, with `balance = "hash"`); the all-down error
    /// when none does (no connection is attempted).
    fn pick(&self, point: Option<u64>) -> Result<(&Server, Attempt), ProxyError> {
        let now = Instant::now();
        self.choose(now, point).ok_or_else(|| {
            self.stats.all_down.inc();
            let e = self.all_down(now);
            // Once per request: warn would flood the log (health.rs warns
            // once when a server goes down).
            tracing::debug!(error = %e, "refused without trying the origin");
            e
        })
    }

    /// The server `balance` chooses among those up (counting the ones
    /// skipped).
    fn choose(&self, now: Instant, point: Option<u64>) -> Option<(&Server, Attempt)> {
        match (&self.selection, point) {
            (Selection::Hash { ring, .. }, Some(point)) => self.on_ring(now, ring, point, None),
            (Selection::LeastConn, _) => self.least_conn(now, None),
            _ => self.in_turn(now),
        }
    }

    /// The server a retry goes to: another than `failed`, up.
    fn choose_next(
        &self,
        now: Instant,
        point: Option<u64>,
        failed: &Server,
    ) -> Option<(&Server, Attempt)> {
        match (&self.selection, point) {
            (Selection::Hash { ring, .. }, Some(point)) => {
                self.on_ring(now, ring, point, Some(failed))
            }
            (Selection::LeastConn, _) => self.least_conn(now, Some(failed)),
            _ => self
                .in_turn(now)
                .filter(|(next, _)| !std::ptr::eq(*next, failed)),
        }
    }

    /// `balance = "hash"`: the first server up along the ring from
    /// `point`, other than `except`.
    fn on_ring(
        &self,
        now: Instant,
        ring: &Ring,
        point: u64,
        except: Option<&Server>,
    ) -> Option<(&Server, Attempt)> {
        for (k, i) in ring.order(point).enumerate() {
            let Some(server) = self.servers.get(i) else {
                continue;
            };
            if except.is_some_and(|e| std::ptr::eq(e, server)) {
                continue;
            }
            if let Some(attempt) = server.health.admit(now) {
                if k > 0 {
                    self.stats.skipped.inc();
                }
                return Some((server, attempt));
            }
        }
        None
    }

    /// `balance = "least_conn"`: a down server's one trial (after its
    /// fail_timeout) first, as with weights; else the server up with the
    /// fewest requests in flight for its weight, ties in turn.
    fn least_conn(&self, now: Instant, except: Option<&Server>) -> Option<(&Server, Attempt)> {
        let excluded = |s: &Server| except.is_some_and(|e| std::ptr::eq(e, s));
        let mut skipped = false;
        for server in self.servers.iter().filter(|s| !excluded(s)) {
            if !server.health.is_up() {
                if let Some(attempt) = server.health.admit(now) {
                    return Some((server, attempt));
                }
                skipped = true;
            }
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let i = balance::least_conn(self.servers.len(), start, |i| {
            let s = self
                .servers
                .get(i)
                .filter(|s| !excluded(s) && s.health.is_up())?;
            Some(Load {
                active: s.active.load(Ordering::Relaxed),
                weight: u32::try_from(s.weight).unwrap_or(u32::MAX),
            })
        })?;
        if skipped {
            self.stats.skipped.inc();
        }
        let server = &self.servers[i];
        server.health.admit(now).map(|attempt| (server, attempt))
    }

    /// The request's point on the ring (`balance = "hash"` only).
    fn point<B>(&self, req: &Request<B>) -> Option<u64> {
        match &self.selection {
            Selection::Hash { key, .. } => Some(balance::request_hash(key, req)),
            _ => None,
        }
    }

    /// The count of one request in flight at `server` (least_conn only).
    fn enter(&self, server: &Server) -> Option<InFlight> {
        matches!(self.selection, Selection::LeastConn).then(|| InFlight::enter(&server.active))
    }

    /// Round robin: the next server that is up (counting the ones skipped).
    fn in_turn(&self, now: Instant) -> Option<(&Server, Attempt)> {
        if self.weighted {
            if let Some(chosen) = self.choose_weighted(now) {
                return Some(chosen);
            }
        }
        let n = self.servers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            let server = &self.servers[start.wrapping_add(k) % n];
            if let Some(attempt) = server.health.admit(now) {
                if k > 0 {
                    self.stats.skipped.inc();
                }
                return Some((server, attempt));
            }
        }
        None
    }

    /// Smooth weighted round robin (NGINX's `ngx_http_upstream_get_peer`):
    /// every server that is up adds its weight to its running weight, the
    /// highest runs, and gives back the sum. Weights 3:1 go a, a, b, a. A
    /// server that is down sits out (its trial, once its `fail_timeout`
    /// passed, goes first); `None` when no server is up.
    fn choose_weighted(&self, now: Instant) -> Option<(&Server, Attempt)> {
        let mut skipped = false;
        for server in &self.servers {
            if !server.health.is_up() {
                // The per-server lock, only while the server is down.
                if let Some(attempt) = server.health.admit(now) {
                    return Some((server, attempt));
                }
                skipped = true;
            }
        }
        let mut total = 0;
        let mut best: Option<(&Server, i64)> = None;
        for server in self.servers.iter().filter(|s| s.health.is_up()) {
            let current =
                server.current.fetch_add(server.weight, Ordering::Relaxed) + server.weight;
            total += server.weight;
            if best.is_none_or(|(_, high)| current > high) {
                best = Some((server, current));
            }
        }
        let (server, _) = best?;
        server.current.fetch_sub(total, Ordering::Relaxed);
        if skipped {
            self.stats.skipped.inc();
        }
        server.health.admit(now).map(|attempt| (server, attempt))
    }

    /// `upstream app: all 2 servers down (a:80: failed 1 time, retry in 4s
    /// (last: ...); b:80: failing health check GET /healthz (503 ...))`.
    fn all_down(&self, now: Instant) -> ProxyError {
        let why: Vec<String> = self
            .servers
            .iter()
            .filter_map(|s| s.health.why_down(now))
            .collect();
        let n = self.servers.len();
        let servers = if n == 1 { "server" } else { "servers" };
        let cause = format!(
            "upstream {}: all {n} {servers} down ({})",
            self.name,
            why.join("; ")
        );
        ProxyError::upstream(ErrorKind::AllServersDown, &self.name, cause)
    }

    /// Sends `req` (whose URI carries only path and query) to the next server and
    /// waits up to `read_timeout` for the response head. A `101` is an
    /// origin fault here: only [`Upstream::send_upgrade`] asks for one.
    /// With an origin budget, `admission` says whether the request may
    /// wait for a slot; the slot is held until the answer's body ends.
    pub(crate) async fn send(
        &self,
        req: Request<StreamBody>,
        admission: Admission,
    ) -> Result<Response<OriginBody>, ProxyError> {
        self.exchange(req, Expect::Final, admission, &mut None)
            .await
    }

    /// [`Upstream::send`] for a WebSocket handshake: a `101` is the answer,
    /// and comes with the switched connection.
    /// Every request leaves as HTTP/1.1 (an HTTP/2 client's too) with a
    /// `Host`, on a connection of its own (module doc).
    /// The handshake holds an origin slot (it waits for one as a request
    /// without a stored copy does) until the server switched: a tunnel is
    /// not a request in flight.
    pub(crate) async fn send_upgrade(
        &self,
        req: Request<StreamBody>,
    ) -> Result<(Response<OriginBody>, Option<Switched>), ProxyError> {
        let mut switched = None;
        let mut resp = self
            .exchange(req, Expect::Upgrade, Admission::Wait, &mut switched)
            .await?;
        if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
            resp.body_mut().release();
        }
        Ok((resp, switched))
    }

    /// One request to the upstream. A bodiless GET or HEAD is sent again:
    /// once more to the same server when its connection closed before the
    /// head while the server was up (most often a pooled connection the
    /// server closed as the request went out: its keep-alive timeout, not
    /// its death; only the second failure counts), and once to the next
    /// server that is up when the failure counted (not a read timeout,
    /// which would double the wait), as NGINX's `proxy_next_upstream`. A
    /// switched handshake's connection goes to `switched`.
    async fn exchange(
        &self,
        req: Request<StreamBody>,
        expect: Expect,
        admission: Admission,
        switched: &mut Option<Switched>,
    ) -> Result<Response<OriginBody>, ProxyError> {
        let point = self.point(&req);
        let Admitted {
            server,
            attempt,
            held,
            waited,
        } = self.admit(admission, point).await?;
        let in_flight = self.enter(server);
        let mut copy = retry_copy(&req, expect);
        let (mut result, mut verdict) = self.once(server, req, expect, switched, waited).await;
        if verdict.counts()
            && attempt.admit() == Admit::Normal
            && is_kind(&result, ErrorKind::Broken)
        {
            if let Some(again) = copy.take() {
                copy = retry_copy(&again, expect).filter(|_| self.servers.len() > 1);
                // The same server: the same slot.
                (result, verdict) = self.once(server, again, expect, switched, waited).await;
            }
        }
        let retry = verdict.counts() && !is_kind(&result, ErrorKind::ReadTimeout);
        attempt.report(verdict);
        let (Some(copy), true) = (copy.filter(|_| self.servers.len() > 1), retry) else {
            return with_body(result, server, held, in_flight);
        };
        let Some((next, attempt)) = self.choose_next(Instant::now(), point, server) else {
            return with_body(result, server, held, in_flight);
        };
        // The next server only with a free slot now: a retry never queues.
        let Some(next_held) = self.retry_slot(next).await else {
            return with_body(result, server, held, in_flight);
        };
        if let Err(e) = &result {
            tracing::debug!(upstream = %self.name, error = %e, next = %next.label, "trying the next server");
        }
        // The first answer is dropped for the retry: its slot with it.
        drop(result);
        drop(held);
        drop(in_flight);
        let held = next_held;
        let in_flight = self.enter(next);
        let (result, verdict) = self.once(next, copy, expect, switched, waited).await;
        attempt.report(verdict);
        with_body(result, next, held, in_flight)
    }

    /// A server to send to, its health attempt and, with an origin budget,
    /// the slots the request holds there (and how long it waited for them).
    async fn admit(
        &self,
        admission: Admission,
        point: Option<u64>,
    ) -> Result<Admitted<'_>, ProxyError> {
        let Some(budget) = &self.budget else {
            let (server, attempt) = self.pick(point)?;
            return Ok(Admitted {
                server,
                attempt,
                held: None,
                waited: Duration::ZERO,
            });
        };
        let started = tokio::time::Instant::now();
        // Validated to at most 365 days; never past what an Instant holds.
        let deadline = started
            .checked_add(budget.queue_timeout)
            .unwrap_or(started + Duration::from_secs(86_400));
        loop {
            let (picked, attempt) = self.pick(point)?;
            let mut attempt = Some(attempt);
            let first = self.index(picked);
            let n = self.servers.len();
            // The server `balance` chose first, then any other that is up:
            // in turn, or, hashed, along the ring from the key's point (as
            // NGINX's consistent hash passes over a server at max_conns), so
            // a busy key spills to the same next server every time.
            let along = match (&self.selection, point) {
                (Selection::Hash { ring, .. }, Some(point)) => Some(ring.order(point)),
                _ => None,
            };
            let in_turn = along.is_none().then(|| (0..n).map(|k| (first + k) % n));
            let order = along
                .into_iter()
                .flatten()
                .chain(in_turn.into_iter().flatten())
                .filter(|&i| i == first || self.servers[i].health.is_up());
            // A server's one trial after its fail_timeout takes a free slot
            // there even while others wait: waiters never get a slot at a
            // server that is down, so queueing it would keep the server
            // down for as long as the queue lasts.
            let trial = attempt
                .as_ref()
                .filter(|a| a.admit() == Admit::Trial)
                .and_then(|_| budget.take_trial(first));
            let taken = match trial {
                Some(slot) => Taken::Slot(slot),
                None => budget.take(order, admission),
            };
            let slot = match taken {
                Taken::Slot(slot) => slot,
                Taken::Full => return Err(self.busy(budget)),
                Taken::Queued(queued) => {
                    // Whichever server frees first: its health is asked then.
                    attempt = None;
                    match queued.wait(deadline).await {
                        Some(slot) => slot,
                        None => return Err(self.shed(budget, admission)),
                    }
                }
            };
            let server = &self.servers[slot.server()];
            let attempt = match attempt.filter(|_| slot.server() == first) {
                Some(attempt) => Some(attempt),
                None => server.health.admit(Instant::now()),
            };
            // The slot's server went down meanwhile: choose again.
            let Some(attempt) = attempt else {
                continue;
            };
            let shared = self.shared_slot(server, admission, deadline).await?;
            return Ok(Admitted {
                server,
                attempt,
                held: Some(Held::new(slot, shared)),
                waited: started.elapsed(),
            });
        }
    }

    /// The slots of a retry at `next`: only a free one now (`None`: no
    /// retry, the first answer stands).
    async fn retry_slot(&self, next: &Server) -> Option<Option<Held>> {
        let Some(budget) = &self.budget else {
            return Some(None);
        };
        let slot = budget.try_at(self.index(next))?;
        let now = tokio::time::Instant::now();
        let shared = self.shared_slot(next, Admission::TryOnly, now).await.ok()?;
        Some(Some(Held::new(slot, shared)))
    }

    /// The fleet-wide slot at `server`, when `fleet_max_inflight` is set
    /// and the fleet gave a budget: a full fleet budget refuses a request
    /// that may not wait, and is asked again every 20-50 ms (jittered)
    /// until `deadline` by one that may; a fleet that does not answer lets
    /// the request go on under the local budget (counted).
    async fn shared_slot(
        &self,
        server: &Server,
        admission: Admission,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Box<dyn Send + Sync>>, ProxyError> {
        let (Some(shared), Some(budget)) = (self.shared.get(), self.budget.as_ref()) else {
            return Ok(None);
        };
        if self.fleet_limit == 0 {
            return Ok(None);
        }
        let name = &*server.label;
        loop {
            match shared.take(&self.name, name, self.fleet_limit).await {
                SharedTake::Granted(slot) => return Ok(Some(slot)),
                SharedTake::Unavailable => {
                    self.stats.budget.shared_unavailable.inc();
                    return Ok(None);
                }
                SharedTake::Full if admission == Admission::TryOnly => {
                    return Err(self.busy(budget))
                }
                SharedTake::Full => {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        return Err(self.shed(budget, admission));
                    }
                    let pause = Duration::from_millis(rand::random_range(20..=50));
                    tokio::time::sleep_until((now + pause).min(deadline)).await;
                }
            }
        }
    }

    /// The index of `server` in `servers`.
    fn index(&self, server: &Server) -> usize {
        self.servers
            .iter()
            .position(|s| std::ptr::eq(s, server))
            .unwrap_or(0)
    }

    /// The origin budget's refusal, told to come back after about one
    /// `queue_timeout`.
    fn busy(&self, budget: &Budget) -> ProxyError {
        let secs = budget.queue_timeout.as_secs_f64().ceil();
        let retry_after = if secs < 1.0 {
            1
        } else {
            secs.min(f64::from(u32::MAX)) as u32
        };
        let cause = format!(
            "upstream {}: origin budget full ({} per server)",
            self.name, self.max_inflight
        );
        ProxyError::upstream(ErrorKind::OriginBusy { retry_after }, &self.name, cause)
    }

    /// A request that waited `queue_timeout` for a slot in vain: a 503
    /// (counted; a refresh in the `Ahead` lane is counted by its fill as
    /// skipped), or the all-down error when no server is up any more.
    fn shed(&self, budget: &Budget, admission: Admission) -> ProxyError {
        if !self.servers.iter().any(|s| s.health.is_up()) {
            if let Err(e) = self.pick(None) {
                return e;
            }
        }
        if admission != Admission::Ahead {
            self.stats.budget.shed_busy.inc();
        }
        self.busy(budget)
    }

    /// `req` to `server`, and what its outcome says of the server's health.
    async fn once(
        &self,
        server: &Server,
        mut req: Request<StreamBody>,
        expect: Expect,
        switched: &mut Option<Switched>,
        waited: Duration,
    ) -> (Result<Response<Incoming>, ProxyError>, Verdict) {
        let health = &server.health;
        let path = PathKey::of(&req);
        let scheme = server.scheme;
        let tls = scheme.is_tls().then_some(self.tls.as_deref()).flatten();
        let target = server;
        let (server, name) = (&target.authority, &*target.label);
        *req.version_mut() = http::Version::HTTP_11;
        if !req.headers().contains_key(http::header::HOST) {
            // The edge gives every client request its Host; this covers
            // requests of our own making.
            req.headers_mut()
                .insert(http::header::HOST, target.host.clone());
        }
        *req.uri_mut() = match origin_uri(scheme, server, req.uri()) {
            Ok(uri) => uri,
            Err(e) => return (Err(e), Verdict::Neutral),
        };
        // With a client body on the way, only a failed connect is surely
        // the server's: a timeout or a broken exchange may be the body's.
        let has_body = !req.body().is_end_stream();
        self.stats.requests.inc();
        target.conns.requests.inc();
        let started = std::time::Instant::now();
        // An answer NGINX would call invalid_header (a malformed head, an
        // interim 101) is not in its default proxy_next_upstream, so it does
        // not count against the server.
        let mut invalid_head = false;
        let sent = async {
            match expect {
                Expect::Final => self
                    .client
                    .request(req)
                    .await
                    .map_err(|e| (classify(&e, name), is_parse_error(&e))),
                Expect::Upgrade => upgrade(target, tls, self.connect_timeout, req, switched).await,
            }
        };
        let mut result = match tokio::time::timeout(self.read_timeout, sent).await {
            Err(_) => Err(ProxyError::upstream(
                ErrorKind::ReadTimeout,
                name,
                format!("no response within read_timeout {:?}", self.read_timeout),
            )),
            Ok(Err((e, parse))) => {
                invalid_head = parse;
                Err(e)
            }
            Ok(Ok(resp)) => Ok(resp),
        };
        if expect == Expect::Final {
            if let Ok(resp) = &result {
                if resp.status().is_informational() {
                    // hyper skips 100 and 102-199; a 101 would end the exchange as if
                    // it were the final answer (and open a tunnel to the client).
                    let why = format!(
                        "interim {} to a request that asked no upgrade",
                        resp.status()
                    );
                    invalid_head = true;
                    result = Err(ProxyError::upstream(ErrorKind::Broken, name, why));
                }
            }
        }
        let verdict = match &result {
            Ok(resp) if health.fails_on(resp.status()) => {
                // Relayed as it came (or stale-if-error), but counted.
                Verdict::FailingStatus(format!("answered {}", resp.status()))
            }
            Ok(_) => Verdict::Answered,
            Err(e) if !invalid_head && counts_against_server(e, has_body) => {
                let why = format!("{:?}: {}", e.kind, e.cause);
                match e.kind {
                    ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout => Verdict::Failed(why),
                    _ => Verdict::UrlFailed { why, path },
                }
            }
            Err(_) => Verdict::Neutral,
        };
        let elapsed = started.elapsed();
        self.stats.latency.observe(elapsed);
        if result
            .as_ref()
            .map_or(true, |r| r.status().is_server_error())
        {
            self.stats.errors.inc();
        }
        let connection = connection_use(&result, expect);
        crate::telemetry::metrics::note_call(|| crate::telemetry::metrics::UpstreamCall {
            // NGINX's $upstream_addr: `unix:/path` for a unix server.
            addr: Some(target.label.clone()),
            elapsed,
            waited,
            connection,
        });
        (result, verdict)
    }

    /// Its `balance` as the config spells it (`Balance::as_str`) and, for
    /// `hash`, the `hash_key` template: for `/status`.
    pub fn balance(&self) -> (&'static str, Option<&str>) {
        match &self.selection {
            Selection::RoundRobin => ("round_robin", None),
            Selection::LeastConn => ("least_conn", None),
            Selection::Hash { key, .. } => ("hash", Some(key.as_str())),
        }
    }

    /// The servers, as configured.
    pub fn servers(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.label.to_string()).collect()
    }

    /// Each server's label and connection figures, in `servers` order,
    /// for `/status`.
    pub(crate) fn server_conns(&self) -> impl Iterator<Item = (&str, &ServerConns)> {
        self.servers.iter().map(|s| (&*s.label, &*s.conns))
    }

    /// Each server's health, for `/status`.
    pub fn server_status(&self) -> Vec<health::ServerStatus> {
        let now = Instant::now();
        self.servers.iter().map(|s| s.health.status(now)).collect()
    }

    /// Starts the active health checks of every server (when configured) on
    /// the current runtime; they end when `stop` turns true.
    pub fn start_checks(self: &Arc<Self>, stop: &watch::Receiver<bool>) {
        for i in 0..self.servers.len() {
            let health = self.servers[i].health.clone();
            let upstream = Arc::downgrade(self);
            tokio::spawn(health::check_loop(health, stop.clone(), move || {
                let upstream = upstream.clone();
                async move {
                    match upstream.upgrade() {
                        Some(u) => u.check(i).await,
                        None => Err("upstream gone".to_owned()),
                    }
                }
            }));
        }
    }

    /// One active check of server `i`: `GET <path>` with `Host` the
    /// server's `host:port` (`localhost` for a unix server); `Ok` for a 2xx or 3xx within the check's timeout.
    async fn check(&self, i: usize) -> Result<String, String> {
        let server = &self.servers[i];
        let Some(check) = server.health.settings().check.as_ref() else {
            return Err("no health check configured".to_owned());
        };
        let pq = PathAndQuery::try_from(check.path.as_str()).map_err(|e| e.to_string())?;
        let uri =
            origin_uri(server.scheme, &server.authority, &Uri::from(pq)).map_err(|e| e.cause)?;
        let req = Request::get(uri)
            .header(http::header::HOST, server.host.clone())
            .header(http::header::USER_AGENT, "calmcache-health-check")
            .body(
                Empty::<Bytes>::new()
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .map_err(|e| e.to_string())?;
        // A check goes through the pool too: counted with the requests that
        // may open a connection, so reuse stays 1 - opened / requests.
        server.conns.requests.inc();
        let resp = match tokio::time::timeout(check.timeout, self.client.request(req)).await {
            Err(_) => return Err(format!("no response within {:?}", check.timeout)),
            Ok(Err(e)) => return Err(cause_chain(&e)),
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        if status.is_success() || status.is_redirection() {
            Ok(status.to_string())
        } else {
            Err(status.to_string())
        }
    }

    /// A slot for one background refresh, or `None` when `refresh_concurrency` are running.
    pub fn try_refresh_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.refresh_slots.clone().try_acquire_owned().ok()
    }
}

/// Where a request goes and what it holds there.
struct Admitted<'a> {
    server: &'a Server,
    attempt: Attempt,
    /// The origin slots (with a budget).
    held: Option<Held>,
    /// Time spent waiting for them.
    waited: Duration,
}

/// The origin budget of `cfg`, when it sets one: `max_inflight` slots per
/// server (unbounded with only `fleet_max_inflight`), handed only to
/// servers that are up.
fn budget(
    cfg: &UpstreamConfig,
    servers: &[Server],
    stats: &Arc<crate::telemetry::metrics::UpstreamStats>,
) -> Option<Arc<Budget>> {
    if cfg.max_inflight == 0 && cfg.fleet_max_inflight == 0 {
        return None;
    }
    let limit = match cfg.max_inflight {
        0 => usize::MAX,
        n => n,
    };
    let health: Vec<Arc<ServerHealth>> = servers.iter().map(|s| s.health.clone()).collect();
    let is_up = Box::new(move |i: usize| health.get(i).is_some_and(|h| h.is_up()));
    Some(Budget::new(
        servers.len(),
        limit,
        cfg.queue_timeout,
        is_up,
        stats.clone(),
    ))
}

/// An exchange's answer with its body carrying the request's slots and
/// its count in flight, a drop before its end counted at `server`.
fn with_body(
    result: Result<Response<Incoming>, ProxyError>,
    server: &Server,
    held: Option<Held>,
    in_flight: Option<InFlight>,
) -> Result<Response<OriginBody>, ProxyError> {
    result.map(|resp| {
        let conns = server.conns.clone();
        resp.map(|body| OriginBody::new(body, held, conns).counted(in_flight))
    })
}

/// The upstream connection of a WebSocket handshake the server switched
/// (`101`), for the tunnel to take.
pub(crate) struct Switched {
    /// The connection (TCP, or TLS over it), past the `101`'s head.
    pub io: OriginStream,
    /// Bytes the server sent right behind its `101` (already read).
    pub read_buf: Bytes,
}

/// Why one exchange failed, and whether the server's head was malformed.
type Failed = (ProxyError, bool);

/// A WebSocket handshake on a connection of its own: connect (and TLS
/// with `tls`), send `req` with hyper's HTTP/1.1 client connection polled
/// here (not spawned), and on `101` take the stream back out of hyper
/// (into `switched`). Any other answer's body still needs the connection
/// driven: it gets a task, as a pooled connection would.
async fn upgrade(
    target: &Server,
    tls: Option<&OriginTls>,
    connect_timeout: Duration,
    mut req: Request<StreamBody>,
    switched: &mut Option<Switched>,
) -> Result<Response<Incoming>, Failed> {
    let broken = |e: hyper::Error| {
        let parse = is_head_parse_error(&e);
        let cause = format!("websocket handshake: {}", cause_chain(&e));
        (
            ProxyError::upstream(ErrorKind::Broken, &target.label, cause),
            parse,
        )
    };
    let io = origin_stream(target, tls, connect_timeout)
        .await
        .map_err(|e| (e, false))?;
    target.conns.opened(Opened::Tunnel);
    // Origin form, as the pooled client sends it.
    let pq = req.uri().path_and_query().cloned();
    *req.uri_mut() = pq.map_or_else(Uri::default, Uri::from);
    let (mut sender, mut conn) = hyper::client::conn::http1::Builder::new()
        .handshake::<_, StreamBody>(TokioIo::new(io))
        .await
        .map_err(broken)?;
    let sending = sender.send_request(req);
    let mut sending = std::pin::pin!(sending);
    // The connection is polled until it is done (after a 101 it stops
    // short of shutting the stream down); its errors reach `sending`.
    let mut done = false;
    let resp = std::future::poll_fn(|cx| {
        if !done {
            match conn.poll_without_shutdown(cx) {
                Poll::Ready(Ok(())) => done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        sending.as_mut().poll(cx)
    })
    .await
    .map_err(broken)?;
    if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        // The body comes over this connection: it runs on its own.
        tokio::spawn(async move {
            if let Err(e) = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)).await {
                tracing::debug!(error = %e, "upstream connection of a refused upgrade");
            }
        });
        return Ok(resp);
    }
    if !done {
        std::future::poll_fn(|cx| conn.poll_without_shutdown(cx))
            .await
            .map_err(broken)?;
    }
    let parts = conn.into_parts();
    *switched = Some(Switched {
        io: parts.io.into_inner(),
        read_buf: parts.read_buf,
    });
    Ok(resp)
}

/// A connection of its own to `target` within `limit`: its unix socket,
/// or TCP (and TLS with `tls`), as the pool's connector makes them.
async fn origin_stream(
    target: &Server,
    tls: Option<&OriginTls>,
    limit: Duration,
) -> Result<OriginStream, ProxyError> {
    let failed = |e: std::io::Error| {
        let kind = connect_kind(Some(e.kind()));
        ProxyError::upstream(kind, &target.label, e)
    };
    if let Some(path) = &target.unix {
        let stream = crate::net::unix_origin::connect(path, limit).await;
        return stream.map(OriginStream::Unix).map_err(failed);
    }
    let server = &target.authority;
    let tcp = connect(server, limit).await?;
    match tls {
        None => Ok(OriginStream::Plain(tcp)),
        Some(tls) => match tls.handshake(tcp, server.host(), limit).await {
            Ok(stream) => Ok(OriginStream::Tls(Box::new(stream))),
            Err(e) => Err(failed(e)),
        },
    }
}

/// A TCP connection to `server` (`TCP_NODELAY`, as the pool's), within
/// `limit`: an address at once, a name through the resolver, its
/// addresses tried in turn with an even share of `limit` each (as
/// hyper-util's connector).
async fn connect(server: &Authority, limit: Duration) -> Result<TcpStream, ProxyError> {
    let failed = |kind, why: String| ProxyError::upstream(kind, server.as_str(), why);
    let addrs: Vec<SocketAddr> = match server.as_str().parse::<SocketAddr>() {
        Ok(addr) => vec![addr],
        Err(_) => {
            let resolving = tokio::net::lookup_host(server.as_str());
            match tokio::time::timeout(limit, resolving).await {
                Ok(Ok(addrs)) => addrs.collect(),
                Ok(Err(e)) => {
                    return Err(failed(ErrorKind::ConnectFailed, format!("dns error: {e}")))
                }
                Err(_) => {
                    return Err(failed(
                        ErrorKind::ConnectTimeout,
                        format!("dns lookup took longer than connect_timeout {limit:?}"),
                    ))
                }
            }
        }
    };
    let share = limit / u32::try_from(addrs.len().max(1)).unwrap_or(u32::MAX);
    let mut last = failed(ErrorKind::ConnectFailed, "no address".to_owned());
    for addr in addrs {
        match tokio::time::timeout(share, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => {
                // As the pool's connector: a failure here is not the server's.
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Ok(Err(e)) => {
                let kind = connect_kind(Some(e.kind()));
                last = failed(kind, format!("tcp connect error: {addr}: {e}"));
            }
            Err(_) => {
                last = failed(
                    ErrorKind::ConnectTimeout,
                    format!("tcp connect to {addr} took longer than connect_timeout {limit:?}"),
                );
            }
        }
    }
    Err(last)
}

/// A copy of a bodiless GET or HEAD (method, URI, headers) to send again.
/// How long an idle upstream connection stays in the pool.
const POOL_IDLE: Duration = Duration::from_secs(4);

fn retry_copy(req: &Request<StreamBody>, expect: Expect) -> Option<Request<StreamBody>> {
    let idempotent = matches!(*req.method(), http::Method::GET | http::Method::HEAD);
    if expect != Expect::Final || !idempotent || !req.body().is_end_stream() {
        return None;
    }
    let mut copy = Request::new(empty_body());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// Whether an answer came over a new connection or a reused one (a
/// handshake's is always new; no answer, no connection to speak of).
/// Counted once per answer, whether or not the access log is on.
fn connection_use(
    result: &Result<Response<Incoming>, ProxyError>,
    expect: Expect,
) -> Option<ConnUse> {
    let resp = result.as_ref().ok()?;
    match expect {
        Expect::Upgrade => Some(ConnUse::New),
        Expect::Final => resp
            .extensions()
            .get::<ConnRequests>()
            .map(ConnRequests::note),
    }
}

fn is_kind(result: &Result<Response<Incoming>, ProxyError>, kind: ErrorKind) -> bool {
    matches!(result, Err(e) if e.kind == kind)
}

fn empty_body() -> StreamBody {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// `http://server/<path and query of uri>` (`https://` for a TLS server:
/// the pool's connector and its key go by the scheme).
fn origin_uri(scheme: Scheme, server: &Authority, uri: &Uri) -> Result<Uri, ProxyError> {
    let pq = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(scheme.uri());
    parts.authority = Some(server.clone());
    parts.path_and_query = Some(pq);
    Uri::from_parts(parts).map_err(|e| ProxyError::downstream(ErrorKind::BadRequest, e))
}

/// NGINX's `proxy_next_upstream error timeout` (its default): a failed
/// connect, no response head within `read_timeout`, or the connection
/// closed or reset before a complete head (the last two reported as
/// [`Verdict::UrlFailed`]: blamed on the URL unless the server looks
/// dead, see [`crate::net::blame`]). A malformed head
/// (`invalid_header`) and a 5xx answer do not count, as in NGINX by
/// default; with a request body only a failed connect counts, so a client
/// cannot mark servers down with a body that stalls or breaks.
fn counts_against_server(e: &ProxyError, has_body: bool) -> bool {
    match e.kind {
        ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout => true,
        ErrorKind::ReadTimeout | ErrorKind::Broken => !has_body,
        _ => false,
    }
}

fn classify(e: &hyper_util::client::legacy::Error, server: &str) -> ProxyError {
    let cause = cause_chain(e);
    if e.is_connect() {
        return ProxyError::upstream(connect_kind(source_io_kind(e)), server, cause);
    }
    ProxyError::upstream(ErrorKind::Broken, server, cause)
}

/// A failed connect (TCP or the TLS handshake on it) by the I/O error
/// behind it: a time-out, or any other failure.
fn connect_kind(io: Option<std::io::ErrorKind>) -> ErrorKind {
    if io == Some(std::io::ErrorKind::TimedOut) {
        ErrorKind::ConnectTimeout
    } else {
        ErrorKind::ConnectFailed
    }
}

/// hyper could not parse the response head (`e` is hyper's own error).
fn is_head_parse_error(e: &hyper::Error) -> bool {
    e.is_parse() || e.is_parse_status() || e.is_parse_too_large()
}

/// hyper could not parse the response head.
fn is_parse_error(e: &hyper_util::client::legacy::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            return is_head_parse_error(h);
        }
        cur = err.source();
    }
    false
}

fn source_io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur = e.source();
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

/// "outer: inner: innermost", for logs.
pub(crate) fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(err) = cur {
        out.push_str(": ");
        out.push_str(&err.to_string());
        cur = err.source();
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The handshake's own connect: by address, by name (each address
    /// in turn), and the errors a dead or unknown server gives.
    #[tokio::test]
    async fn a_handshake_connects_by_address_or_name_and_classifies_failures() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let limit = Duration::from_secs(5);
        for server in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
            let server: Authority = server.parse().unwrap();
            let tcp = connect(&server, limit).await.unwrap();
            assert!(tcp.nodelay().unwrap(), "{server}");
            assert_eq!(tcp.peer_addr().unwrap().port(), port);
        }
        drop(listener);
        let dead: Authority = format!("127.0.0.1:{port}").parse().unwrap();
        let e = connect(&dead, limit).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ConnectFailed, "{e}");
        let unknown: Authority = "no-such-host.invalid:80".parse().unwrap();
        let e = connect(&unknown, limit).await.unwrap_err();
        assert!(
            matches!(e.kind, ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout),
            "{e}"
        );
    }
}

#[cfg(test)]
#[path = "upstream_budget_tests.rs"]
mod budget_tests;
