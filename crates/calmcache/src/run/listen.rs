//! Listening: sockets bound per worker thread (`SO_REUSEPORT`), the accept
//! loops that hand connections to `conn`, the worker threads and the
//! generation ([`Live`], [`WorkerSlot`]) a request is served by. Each worker
//! thread serves its own socket of every listen address and takes new
//! listeners from a command channel (reload re-binds changed addresses
//! there). A stopping worker drains its connections, then gives its
//! WebSocket tunnels until the shutdown deadline.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use calmcache_core::warn_limit::WarnLimit;
use hyper::body::Incoming;
use hyper::Request;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::config::Config;
use crate::net::conn::{self, Accepted, ConnSettings, Peer, Protocol};
use crate::net::listener::ListenerId;
use crate::net::proxy_protocol::Relays;
use crate::net::shutdown::Tunnels;
use crate::ops::admin::Reload;
use crate::proxy::setup::SetupError;
use crate::proxy::state::{Proxy, Worker};
use crate::telemetry::access_log::{self, AccessLog};
use crate::telemetry::metrics::Metrics;
use crate::{ops::admin, proxy::handle};

/// Why the proxy could not start (`calmcache serve` exits 1 with it).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The config could not become a proxy (an upstream, a zone directory).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The access log file could not be opened for appending.
    #[error("access_log.path: cannot open {} for appending: {error}", path.display())]
    AccessLogFile {
        /// `access_log.path`.
        path: std::path::PathBuf,
        /// What opening it said.
        error: std::io::Error,
    },
    /// The access log's writer (to stdout) could not start.
    #[error("access_log: cannot start its writer: {0}")]
    AccessLogWriter(std::io::Error),
    /// A worker thread could not be spawned.
    #[error("cannot start worker thread: {0}")]
    WorkerThread(std::io::Error),
}

/// A listen address (proxy, admin or bundled origin) that could not be
/// bound, at start or at a reload.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}{hint}")]
pub struct BindError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// The OS error. Also the `source()`: `calmcache` prints the chain,
    /// which names it a second time (kept so that the output is unchanged).
    pub source: std::io::Error,
    /// Advice for the common cases, or empty.
    pub hint: &'static str,
}

/// What a proxy listener speaks, fixed when it is bound. A TLS listener's
/// certificates are not here but in the generation's [`ListenConf`]: a
/// reload replaces them without re-binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// HTTP/1.1, and HTTP/2 with prior knowledge when `server.h2c` is on.
    Plain,
    /// A TLS handshake first, then HTTP/1.1 or HTTP/2 as ALPN chose.
    Tls,
}

impl Transport {
    /// In words, for reload notes: `plain HTTP` or `TLS`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Plain => "plain HTTP",
            Transport::Tls => "TLS",
        }
    }
}

/// What a reload replaces, read by every accept loop and request.
pub(crate) struct Live {
    /// The current generation (the admin API reads it per request).
    proxy: RwLock<Arc<Proxy>>,
    /// Connection settings and TLS certificates of the proxy listeners.
    listen: RwLock<ListenConf>,
    /// When a shutdown began: its deadline for requests and tunnels.
    deadline: RwLock<Option<tokio::time::Instant>>,
    /// Worker threads not done with their own work at shutdown. Each
    /// waits for the others before its runtime goes: an upstream
    /// connection one of them drives may carry another's request.
    busy: AtomicUsize,
    /// Woken when `busy` reaches zero.
    all_done: tokio::sync::Notify,
}

/// The reloadable part of how proxy connections are served.
#[derive(Clone)]
pub(crate) struct ListenConf {
    pub settings: ConnSettings,
    /// The certificates of the [`Transport::Tls`] listeners; `None` when
    /// the config has none (then it has no TLS listener either).
    pub tls: Option<TlsAcceptor>,
    /// The listeners that expect a PROXY protocol header and who may send
    /// it; `None` when none does (the accept path then asks nothing).
    pub relays: Option<Arc<Relays>>,
}

impl ListenConf {
    pub(crate) fn of(config: &Config) -> ListenConf {
        let mut settings = ConnSettings::of(&config.server);
        // Connections carry a hint injector only when some route can hint.
        if !config.routes.iter().any(|r| r.answers.early_hints.on) {
            settings.early_hints = crate::net::conn::Hints::Off;
        }
        ListenConf {
            settings,
            tls: (!config.server.tls.is_empty())
                .then(|| TlsAcceptor::from(crate::net::tls::server_config(&config.server.tls))),
            relays: Relays::of(&config.server),
        }
    }
}

impl Live {
    pub(crate) fn new(proxy: Arc<Proxy>, listen: ListenConf) -> Live {
        Live {
            proxy: RwLock::new(proxy),
            listen: RwLock::new(listen),
            deadline: RwLock::new(None),
            busy: AtomicUsize::new(0),
            all_done: tokio::sync::Notify::new(),
        }
    }

    /// One more worker thread that will call [`Live::worker_done`].
    pub(crate) fn worker_started(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
    }

    /// A worker that never ran: the others do not wait for it.
    fn worker_gone(&self) {
        if self.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_done.notify_waiters();
        }
    }

    /// This worker's work is done: waits (polling its runtime, so the
    /// connections it drives keep serving the others) until every worker's
    /// is, or the shutdown deadline.
    async fn worker_done(&self) {
        self.worker_gone();
        let deadline = self.deadline();
        loop {
            let notified = self.all_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.busy.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// The current generation.
    pub(crate) fn proxy(&self) -> Arc<Proxy> {
        self.proxy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set(&self, proxy: Arc<Proxy>, listen: ListenConf) {
        *self.proxy.write().unwrap_or_else(|e| e.into_inner()) = proxy;
        *self.listen.write().unwrap_or_else(|e| e.into_inner()) = listen;
    }

    fn listen_conf(&self) -> ListenConf {
        self.listen
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_deadline(&self, at: tokio::time::Instant) {
        *self.deadline.write().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    fn deadline(&self) -> tokio::time::Instant {
        let set = *self.deadline.read().unwrap_or_else(|e| e.into_inner());
        set.unwrap_or_else(tokio::time::Instant::now)
    }
}

/// One worker thread's current generation and its control channel.
pub(crate) struct WorkerSlot {
    current: RwLock<Arc<Worker>>,
    /// This thread's WebSocket tunnels (of every generation).
    pub tunnels: Arc<Tunnels>,
    commands: mpsc::UnboundedSender<Command>,
}

impl WorkerSlot {
    /// A worker thread's slot, serving `worker` until a reload switches it.
    pub(crate) fn new(
        worker: Arc<Worker>,
        tunnels: Arc<Tunnels>,
        commands: mpsc::UnboundedSender<Command>,
    ) -> WorkerSlot {
        WorkerSlot {
            current: RwLock::new(worker),
            tunnels,
            commands,
        }
    }

    /// The generation a new request on this thread is served by: an
    /// uncontended per-thread lock (a reload writes it once), no global one.
    fn worker(&self) -> Arc<Worker> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Moves this thread to a new generation.
    pub(crate) fn switch(&self, proxy: Arc<Proxy>) {
        let worker = Arc::new(Worker::new(proxy, self.tunnels.clone()));
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = worker;
    }

    /// Starts serving `socket` (the listener `listener`) on this thread
    /// until `stop` says true.
    pub(crate) fn listen(
        &self,
        socket: std::net::TcpListener,
        (transport, listener): (Transport, ListenerId),
        stop: watch::Receiver<bool>,
    ) {
        let _ = self.commands.send(Command::Listen {
            socket,
            transport,
            listener,
            stop,
        });
    }
}

/// What a worker thread is asked to do.
pub(crate) enum Command {
    /// Serve a newly bound socket until `stop`.
    Listen {
        socket: std::net::TcpListener,
        transport: Transport,
        /// The listen address as configured, interned (net/listener.rs).
        listener: ListenerId,
        stop: watch::Receiver<bool>,
    },
}

/// One listen address: a socket per worker thread, stopped together.
pub(crate) struct Bound {
    /// The configured address (port 0 kept as asked).
    pub asked: SocketAddr,
    /// The address bound.
    pub actual: SocketAddr,
    pub transport: Transport,
    pub stop: watch::Sender<bool>,
}

/// Every address the config asks to listen on, plain ones first, each with
/// its transport.
pub(crate) fn addresses(config: &crate::config::Config) -> Vec<(SocketAddr, Transport)> {
    let server = &config.server;
    let plain = server.listen.iter().map(|a| (*a, Transport::Plain));
    let tls = server.tls_listen.iter().map(|a| (*a, Transport::Tls));
    plain.chain(tls).collect()
}

/// Binds `addr` once per worker thread (`SO_REUSEPORT`) and hands each
/// thread its socket.
pub(crate) fn bind_on_workers(
    addr: SocketAddr,
    transport: Transport,
    backlog: i32,
    slots: &[Arc<WorkerSlot>],
) -> Result<Bound, BindError> {
    // SO_REUSEPORT would let a second calmcache share a port that is
    // already taken instead of failing clearly: probe it exclusively first.
    if addr.port() != 0 {
        drop(bind_std(addr, Sharing::Exclusive, backlog)?);
    }
    // The first socket learns the real port (when 0 was asked); the rest join it.
    let first = bind_std(addr, Sharing::PerWorker, backlog)?;
    let actual = first.local_addr().unwrap_or(addr);
    let mut sockets = vec![first];
    for _ in 1..slots.len() {
        sockets.push(bind_std(actual, Sharing::PerWorker, backlog)?);
    }
    let (stop, stopped) = watch::channel(false);
    // Named as configured (port 0 too), as `routes.listeners` names it.
    let listener = ListenerId::of(addr);
    for (slot, socket) in slots.iter().zip(sockets) {
        slot.listen(socket, (transport, listener), stopped.clone());
    }
    Ok(Bound {
        asked: addr,
        actual,
        transport,
        stop,
    })
}

/// Serves the admin API on `listener` until `own` or `stopped` says true;
/// each request sees the current generation.
pub(crate) async fn admin_loop(
    listener: TcpListener,
    stopped: watch::Receiver<bool>,
    own: watch::Receiver<bool>,
    live: Arc<Live>,
    reloader: Arc<dyn Reload>,
) {
    let serve = move |req: Request<Incoming>, _peer: Peer| {
        admin::handle(live.proxy(), req, reloader.clone())
    };
    accept_loop(listener, stopped, Some(own), serve, Listening::plain()).await;
}

/// The PROXY protocol sender of a request's connection, if any.
fn balancer_of<B>(req: &Request<B>) -> Option<std::net::IpAddr> {
    req.extensions().get::<conn::Balancer>().map(|b| b.0)
}

/// Blocking-pool threads per worker thread (disk I/O, compression).
const BLOCKING_THREADS: usize = 4;

/// One worker thread: a current-thread runtime serving its own sockets.
pub(crate) fn run_worker(
    slot: Arc<WorkerSlot>,
    mut inbox: mpsc::UnboundedReceiver<Command>,
    mut stopped: watch::Receiver<bool>,
    log: Option<AccessLog>,
    live: Arc<Live>,
) {
    let runtime = match worker_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "worker runtime failed to start");
            live.worker_gone();
            return;
        }
    };
    // Fills and refreshes started by requests: finished before the runtime
    // goes (up to the shutdown deadline).
    let background = crate::proxy::background::track_this_thread();
    runtime.block_on(async move {
        let mut loops = JoinSet::new();
        loop {
            let command = tokio::select! {
                command = inbox.recv() => command,
                _ = stopped.changed() => None,
            };
            let Some(Command::Listen {
                socket,
                transport,
                listener: id,
                stop,
            }) = command
            else {
                break;
            };
            let Ok(listener) = TcpListener::from_std(socket) else {
                tracing::error!("worker could not adopt its listening socket");
                continue;
            };
            let how = Listening {
                live: Some(live.clone()),
                transport,
                counted: Some(slot.worker().proxy.metrics.clone()),
                listener: id,
            };
            let (slot, stopped) = (slot.clone(), stopped.clone());
            // Two loops, not a branch per request: without an access log a
            // request pays nothing for it.
            if let Some(log) = log.clone() {
                let serve = move |req: Request<Incoming>, peer: Peer| {
                    let pending = log.begin(&req, peer.addr, balancer_of(&req));
                    access_log::serve(pending, handle::handle(slot.worker(), req, peer))
                };
                loops.spawn(accept_loop(listener, stopped, Some(stop), serve, how));
                continue;
            }
            let serve =
                move |req: Request<Incoming>, peer: Peer| handle::handle(slot.worker(), req, peer);
            loops.spawn(accept_loop(listener, stopped, Some(stop), serve, how));
        }
        // An HTTP/2 connection drains only once its streams end, and a
        // tunnel's stream (RFC 8441) ends when its tunnel is closed: the
        // tunnels get until the deadline whether the connections drained or
        // not, or each would wait for the other.
        let drained = async { while loops.join_next().await.is_some() {} };
        tokio::join!(drained, slot.tunnels.close_by(live.deadline()));
        wind_down(&slot, &live, &background).await;
    });
}

/// A worker thread's runtime: current-thread, with a few blocking threads
/// for disk zone reads and writes, so a burst of disk hits queues instead
/// of waking dozens of threads on two cores.
fn worker_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
}

/// After a worker's connections drained: its tunnels, then the fills and
/// refreshes still running (a body's file to commit), then their commits
/// to the fleet, get until the shutdown deadline.
async fn wind_down(slot: &WorkerSlot, live: &Live, background: &tokio_util::task::TaskTracker) {
    slot.tunnels.close_by(live.deadline()).await;
    if !crate::proxy::background::finish_by(background, live.deadline()).await {
        tracing::warn!("fills or refreshes still running at the shutdown deadline; dropped");
    }
    // Their commits to the fleet (off the fill's path) too: a fill that
    // ended within the drain shares its copy, and its peers need not fetch.
    if let Some(fleet) = slot.worker().proxy.fleet.clone() {
        if !fleet.finish_work_by(live.deadline()).await {
            tracing::warn!("fleet commits still running at the shutdown deadline; dropped");
        }
    }
    live.worker_done().await;
}

/// How a listening socket is shared.
#[derive(Clone, Copy)]
enum Sharing {
    /// Only this socket on the address (admin, origin, and the probe in `start`).
    Exclusive,
    /// One socket per worker on the same address (`SO_REUSEPORT`).
    PerWorker,
}

/// Binds with a deep backlog and `SO_REUSEADDR`, as NGINX does.
fn bind_std(
    addr: SocketAddr,
    sharing: Sharing,
    backlog: i32,
) -> Result<std::net::TcpListener, BindError> {
    let to_err = |source: std::io::Error| bind_error(addr, source);
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .map_err(to_err)?;
    socket.set_reuse_address(true).map_err(to_err)?;
    #[cfg(unix)]
    if let Sharing::PerWorker = sharing {
        socket.set_reuse_port(true).map_err(to_err)?;
    }
    socket.set_nonblocking(true).map_err(to_err)?;
    socket.bind(&addr.into()).map_err(to_err)?;
    socket.listen(backlog).map_err(to_err)?;
    Ok(socket.into())
}

fn bind_error(addr: SocketAddr, source: std::io::Error) -> BindError {
    let hint = match source.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (another process holds this port; choose another address)"
        }
        std::io::ErrorKind::PermissionDenied => " (ports below 1024 need privileges)",
        _ => "",
    };
    BindError { addr, source, hint }
}

fn to_tokio(socket: std::net::TcpListener, addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::from_std(socket).map_err(|e| bind_error(addr, e))
}

/// Binds one listener on the current runtime (admin, bundled origin).
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    to_tokio(bind_std(addr, Sharing::Exclusive, 1024)?, addr)
}

/// How an accept loop's connections are served.
#[derive(Clone)]
pub(crate) struct Listening {
    /// Settings and certificates, reloadable; `None`: the defaults, no TLS
    /// (admin listener, bundled origin).
    pub live: Option<Arc<Live>>,
    /// Plain or TLS (its certificates come with the settings).
    pub transport: Transport,
    /// The proxy's metrics (connections, max_connections slots); `None`
    /// for the admin listener and the bundled origin.
    pub counted: Option<Arc<Metrics>>,
    /// Which proxy listener this is, for its connections' [`Peer`];
    /// [`ListenerId::NONE`] for the admin listener and the bundled origin.
    pub listener: ListenerId,
}

impl Listening {
    /// Plain HTTP/1.1 with default settings, uncounted (admin, origin).
    pub(crate) fn plain() -> Listening {
        Listening {
            live: None,
            transport: Transport::Plain,
            counted: None,
            listener: ListenerId::NONE,
        }
    }

    fn conf(&self) -> ListenConf {
        match &self.live {
            Some(live) => live.listen_conf(),
            None => ListenConf {
                settings: ConnSettings::default(),
                tls: None,
                relays: None,
            },
        }
    }
}

/// The TLS handshake of an accepted connection, done by `deadline`, and the
/// protocol its ALPN chose; `None` (logged at debug) when it fails.
async fn tls_handshake(
    tls: &TlsAcceptor,
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    deadline: tokio::time::Instant,
) -> Option<(
    tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    Protocol,
)> {
    let stream = match tokio::time::timeout_at(deadline, tls.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(peer = %addr, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(peer = %addr, "TLS handshake not done within header_read_timeout");
            return None;
        }
    };
    let protocol = match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::Http2,
        _ => Protocol::Http1,
    };
    Some((stream, protocol))
}

/// A connection slot under `max_connections` (`Some(None)` when
/// connections are not counted); `None` when the listener stops first.
async fn take_slot(
    how: &Listening,
    stopped: &mut watch::Receiver<bool>,
    own: &mut watch::Receiver<bool>,
) -> Option<Option<tokio::sync::OwnedSemaphorePermit>> {
    let slots = how
        .counted
        .as_ref()
        .and_then(|m| m.connection_slots.clone());
    let Some(slots) = slots else {
        return Some(None);
    };
    tokio::select! {
        slot = slots.acquire_owned() => Some(slot.ok()),
        _ = stopped.changed() => None,
        _ = own.changed() => None,
    }
}

/// The next accepted connection; `None` when the listener stops first. A
/// failed accept (EMFILE and friends) backs off instead of spinning, and
/// does not log 20 lines a second per worker.
async fn accept_next(
    listener: &TcpListener,
    stopped: &mut watch::Receiver<bool>,
    own: &mut watch::Receiver<bool>,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => return Some(accepted),
                Err(e) => {
                    static ACCEPT_FAILED: WarnLimit = WarnLimit::new();
                    calmcache_core::warn_limited!(ACCEPT_FAILED, "accept failed", error = %e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped.changed() => return None,
            _ = own.changed() => return None,
        }
    }
}

/// What a connection needs before it is served: a PROXY protocol header
/// to read, a TLS handshake, or both (in that order).
struct Opening {
    relay: Option<Arc<Relays>>,
    tls: Option<TlsAcceptor>,
    drain: watch::Receiver<()>,
    guard: Option<crate::telemetry::metrics::ConnectionGuard>,
    settings: ConnSettings,
}

/// Reads the PROXY header (its client becomes the peer's address), does
/// the TLS handshake, then serves; the connection closes at the first
/// failure. Both are part of the first head's time (`header_read_timeout`).
async fn open_then_serve<S, F, B>(
    mut stream: tokio::net::TcpStream,
    mut accepted: Accepted,
    opening: Opening,
    serve: S,
) where
    S: Fn(Request<Incoming>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Opening {
        relay,
        tls,
        drain,
        guard,
        settings,
    } = opening;
    let deadline = accepted.at + settings.header_read_timeout;
    if let Some(relay) = relay {
        let metrics = guard.as_ref().map(|g| &**g.metrics());
        let tcp_peer = accepted.peer.addr;
        match relay
            .receive(&mut stream, tcp_peer, deadline, metrics)
            .await
        {
            Some(client) => {
                accepted.peer.addr = client;
                accepted.balancer = Some(tcp_peer.ip());
            }
            None => return,
        }
    }
    let Some(tls) = tls else {
        conn::spawn(stream, accepted, serve, drain, guard, settings);
        return;
    };
    let Some((stream, protocol)) = tls_handshake(&tls, stream, accepted.peer.addr, deadline).await
    else {
        return;
    };
    accepted.peer.scheme = crate::http::scheme::Scheme::Https;
    accepted.protocol = protocol;
    conn::spawn(stream, accepted, serve, drain, guard, settings);
}

/// Connections an accept loop takes in one go before it lets the worker's
/// other tasks run.
///
/// Under tokio's cooperative budget (128 units per poll of a task, one for
/// the slot and one for the accept of each connection) a loop took some 64
/// connections per turn of its worker, and a turn with
/// thousands of busy connections lasts tens of milliseconds: with wrk
/// opening 10,000 connections at once, the last ones waited seconds in the
/// listen backlog with their first request already sent (bench/scaling:
/// 1 KB hits, p99 1.87 s at 10,000 connections, NGINX 286 ms). The accepts
/// are taken out of the budget and bounded here instead, as NGINX's
/// `multi_accept` drains its backlog.
const ACCEPT_BURST: u32 = 256;

/// Accepts until `stopped` (the whole proxy) or `own` (this listener, at a
/// reload that removed it) says true, then lets its connections finish.
pub(crate) async fn accept_loop<S, F, B>(
    listener: TcpListener,
    mut stopped: watch::Receiver<bool>,
    own: Option<watch::Receiver<bool>>,
    serve: S,
    how: Listening,
) where
    S: Fn(Request<Incoming>, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Every connection holds a receiver: a send asks them to finish
    // gracefully, and the channel closes when the last one has. (hyper-util's
    // GracefulShutdown does not take connections built with upgrades.)
    let (graceful, _) = watch::channel(());
    // Without a listener of its own to stop, a receiver whose sender lives
    // as long as the loop (a dropped sender would read as a change).
    let (_never, unchanging) = watch::channel(false);
    let mut own = own.unwrap_or(unchanging);
    if *own.borrow() {
        return;
    }
    // `$server_port`: the port bound (the one asked unless it was 0).
    let port = listener.local_addr().map_or(0, |a| a.port());
    let arrived = |addr, scheme| Peer {
        addr,
        scheme,
        listener: how.listener,
        port,
    };
    let mut burst = 0;
    loop {
        // A burst of connections is accepted ACCEPT_BURST at a time (see there).
        burst += 1;
        if burst > ACCEPT_BURST {
            burst = 1;
            tokio::task::yield_now().await;
        }
        // max_connections: take a slot before accepting, so connections past
        // it wait in the listen backlog, not in the process.
        let slot = tokio::task::unconstrained(take_slot(&how, &mut stopped, &mut own));
        let Some(slot) = slot.await else {
            break;
        };
        let next = tokio::task::unconstrained(accept_next(&listener, &mut stopped, &mut own));
        let Some((stream, addr)) = next.await else {
            break;
        };
        let at = tokio::time::Instant::now();
        let _ = stream.set_nodelay(true);
        let guard = how.counted.as_ref().map(|m| m.connection(slot));
        let drain = graceful.subscribe();
        let conf = how.conf();
        let settings = conf.settings;
        // PROXY protocol: a header to read first, on a task of its own.
        let relay = conf.relays.filter(|r| r.expects(how.listener));
        let plain = if settings.h2c {
            Protocol::Detect
        } else {
            Protocol::Http1
        };
        // The scheme and protocol of a TLS connection come with its handshake.
        let accepted = Accepted {
            peer: arrived(addr, crate::http::scheme::Scheme::Http),
            protocol: plain,
            at,
            balancer: None,
        };
        let tls = match (how.transport, conf.tls) {
            (Transport::Plain, _) if relay.is_none() => {
                conn::spawn(stream, accepted, serve.clone(), drain, guard, settings);
                continue;
            }
            (Transport::Plain, _) => None,
            (Transport::Tls, Some(tls)) => Some(tls),
            // A reload cannot remove the certificates of a TLS listener it
            // keeps (the config check refuses it); drop the connection.
            (Transport::Tls, None) => continue,
        };
        let opening = Opening {
            relay,
            tls,
            drain,
            guard,
            settings,
        };
        tokio::spawn(open_then_serve(stream, accepted, opening, serve.clone()));
    }
    drop(listener);
    let _ = graceful.send(());
    graceful.closed().await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::net::conn::Hints;

    fn hints_of(routes: &str) -> Hints {
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.app]\n\
             servers = [\"127.0.0.1:8081\"]\n{routes}"
        );
        let config = Config::from_toml(&text, "test.toml").unwrap();
        ListenConf::of(&config).settings.early_hints
    }

    #[test]
    fn connections_carry_a_hint_injector_only_when_some_route_hints() {
        let on = "[[routes]]\nupstream = \"app\"\n";
        let off = "[[routes]]\nupstream = \"app\"\nearly_hints = false\n";
        assert_eq!(hints_of(on), Hints::On, "the default");
        assert_eq!(hints_of(off), Hints::Off);
        assert_eq!(hints_of(&format!("{off}{off}")), Hints::Off);
        assert_eq!(hints_of(&format!("{off}{on}")), Hints::On);
    }
}
