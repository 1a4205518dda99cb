//! Listeners and connections: bind, accept, serve HTTP/1.1 with keepalive
//! (and upgrades, for WebSocket tunnels), and stop gracefully.
//!
//! [`start`] raises the soft open files limit, binds every listener first (a
//! taken port is an error before anything runs), then spawns the accept
//! loops, the admin listener and the warm-up tasks on the current Tokio
//! runtime. A worker that stops drains its connections, then closes its
//! tunnels.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::access_log::{self, AccessLog};
use crate::config::Config;
use crate::metrics::{ConnectionGuard, Metrics};
use crate::state::{Proxy, Worker};
use crate::{admin, proxy, warm};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}{hint}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
        /// Advice for the common cases.
        hint: &'static str,
    },
    /// The config could not be turned into a running proxy.
    #[error("{0}")]
    Setup(String),
}

/// A started proxy: its bound addresses and the handle that stops it.
pub struct Running {
    /// The proxy's listening addresses, in config order (real ports when 0 was asked).
    pub proxy_addrs: Vec<SocketAddr>,
    /// The admin listener's address, if configured.
    pub admin_addr: Option<SocketAddr>,
    /// The shared state (for tests and the demo).
    pub proxy: Arc<Proxy>,
    access_log: Option<AccessLog>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    /// The access log, if configured (its `dropped` count; a handle for signals).
    pub fn access_log(&self) -> Option<&AccessLog> {
        self.access_log.as_ref()
    }

    /// Reopens the access log file at its path (SIGUSR1, after logrotate).
    pub fn reopen_logs(&self) {
        if let Some(log) = &self.access_log {
            log.reopen();
        }
    }

    /// Stops accepting, lets open requests finish (up to `grace`), then returns.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        let workers = std::mem::take(&mut self.workers);
        let all = async {
            while self.tasks.join_next().await.is_some() {}
            let joined = tokio::task::spawn_blocking(move || {
                workers.into_iter().for_each(|w| drop(w.join()));
            });
            let _ = joined.await;
        };
        if tokio::time::timeout(grace, all).await.is_err() {
            // Worker threads end with the process; their connections close then.
            tracing::warn!("connections still open after {grace:?}; closing them");
            self.tasks.abort_all();
        }
        if let Some(log) = self.access_log.take() {
            let flushed = tokio::task::spawn_blocking(move || log.flush(Duration::from_secs(1)));
            let _ = flushed.await;
        }
    }
}

/// Binds every listener, then serves: `server.threads` worker threads, each
/// with its own single-threaded runtime and its own `SO_REUSEPORT` socket per
/// listen address (the kernel spreads connections; no work stealing, no
/// cross-thread wakeups on the hit path). The admin listener and warm-up run
/// on the calling runtime.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let files = raise_open_files_limit();
    // Each client connection may hold an upstream one too (and a tunnel
    // always does), plus files of disk zones and the listeners.
    let needed = (config.server.max_connections as u64).saturating_mul(2) + 256;
    if let Some(files) = files.filter(|&f| f < needed) {
        tracing::warn!(
            max_connections = config.server.max_connections,
            open_files_limit = files,
            "server.max_connections cannot fit the open files limit (each connection may need \
             two descriptors): raise the hard limit (LimitNOFILE=, ulimit -Hn) or lower max_connections"
        );
    }
    let backlog = i32::try_from(config.server.backlog).unwrap_or(i32::MAX);
    let access_log = match &config.access_log {
        Some(c) => Some(AccessLog::open(c).map_err(|e| match &c.target {
            access_log::LogTarget::File(path) => StartError::Setup(format!(
                "access_log.path: cannot open {} for appending: {e}",
                path.display()
            )),
            access_log::LogTarget::Stdout => {
                StartError::Setup(format!("access_log: cannot start its writer: {e}"))
            }
        })?),
        None => None,
    };
    let proxy = Proxy::new(config).map_err(StartError::Setup)?;
    if let Some(log) = &access_log {
        let _ = proxy.access_log.set(log.clone());
    }
    proxy.start_background();
    let threads = config.server.threads.max(1);
    let mut per_thread: Vec<Vec<std::net::TcpListener>> =
        (0..threads).map(|_| Vec::new()).collect();
    let mut proxy_addrs = Vec::new();
    for addr in &config.server.listen {
        // SO_REUSEPORT would let a second calmcache share a port that is
        // already taken instead of failing clearly: probe it exclusively first.
        if addr.port() != 0 {
            drop(bind_std(*addr, Sharing::Exclusive, backlog)?);
        }
        // The first socket learns the real port (when 0 was asked); the rest join it.
        let first = bind_std(*addr, Sharing::PerWorker, backlog)?;
        let actual = first.local_addr().unwrap_or(*addr);
        proxy_addrs.push(actual);
        per_thread[0].push(first);
        for sockets in per_thread.iter_mut().skip(1) {
            sockets.push(bind_std(actual, Sharing::PerWorker, backlog)?);
        }
    }
    let admin_listener = match &config.admin {
        Some(a) => Some(bind(a.listen)?),
        None => None,
    };
    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    let (stop, stopped) = watch::channel(false);
    let mut workers = Vec::with_capacity(threads);
    for (i, sockets) in per_thread.into_iter().enumerate() {
        let (proxy, stopped, log) = (proxy.clone(), stopped.clone(), access_log.clone());
        let worker = std::thread::Builder::new()
            .name(format!("calmcache-worker-{i}"))
            .spawn(move || run_worker(proxy, sockets, stopped, log))
            .map_err(|e| StartError::Setup(format!("cannot start worker thread: {e}")))?;
        workers.push(worker);
    }
    let mut tasks = JoinSet::new();
    if let Some(listener) = admin_listener {
        let proxy = proxy.clone();
        let serve =
            move |req: Request<Incoming>, _peer: SocketAddr| admin::handle(proxy.clone(), req);
        tasks.spawn(accept_loop(
            listener,
            stopped.clone(),
            serve,
            None,
            ConnSettings::default(),
        ));
    }
    if let Some(first) = proxy_addrs.first() {
        warm::start(&proxy, *first, stopped.clone());
    }
    // Listeners bound, workers started, disk loaders running.
    proxy
        .ready
        .store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(Running {
        proxy_addrs,
        admin_addr,
        proxy,
        access_log,
        stop,
        tasks,
        workers,
    })
}

/// One worker thread: a current-thread runtime serving its own sockets.
/// Blocking-pool threads per worker thread (disk I/O, compression).
const BLOCKING_THREADS: usize = 4;

fn run_worker(
    proxy: Arc<Proxy>,
    sockets: Vec<std::net::TcpListener>,
    stopped: watch::Receiver<bool>,
    log: Option<AccessLog>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Disk zone reads and writes: a few threads per worker, so a burst
        // of disk hits queues instead of waking dozens of threads on two cores.
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "worker runtime failed to start");
            return;
        }
    };
    let worker = Arc::new(Worker::new(proxy));
    runtime.block_on(async move {
        let mut loops = JoinSet::new();
        for socket in sockets {
            let Ok(listener) = TcpListener::from_std(socket) else {
                tracing::error!("worker could not adopt its listening socket");
                continue;
            };
            let worker = worker.clone();
            let counted = Some(worker.proxy.metrics.clone());
            let settings = worker.proxy.conn_settings;
            // Two loops, not a branch per request: without an access log a
            // request pays nothing for it.
            if let Some(log) = log.clone() {
                let serve = move |req: Request<Incoming>, peer: SocketAddr| {
                    let pending = log.begin(&req, peer);
                    access_log::serve(pending, proxy::handle(worker.clone(), req, peer))
                };
                loops.spawn(accept_loop(
                    listener,
                    stopped.clone(),
                    serve,
                    counted,
                    settings,
                ));
                continue;
            }
            let serve = move |req: Request<Incoming>, peer: SocketAddr| {
                proxy::handle(worker.clone(), req, peer)
            };
            loops.spawn(accept_loop(
                listener,
                stopped.clone(),
                serve,
                counted,
                settings,
            ));
        }
        while loops.join_next().await.is_some() {}
        // Connections drained: end this thread's WebSocket tunnels too.
        worker.tunnels.close().await;
    });
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit: every tunnel holds two
/// descriptors and every proxied request one or two, and the usual soft
/// limit (1024) is far below what a busy proxy needs. Returns the soft
/// limit now in force (`None`: unlimited); a failure is logged, not fatal.
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return limit.current;
    }
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::debug!(from = ?limit.current, to = ?limit.maximum, "raised RLIMIT_NOFILE");
            limit.maximum
        }
        Err(e) => {
            tracing::warn!(soft = ?limit.current, hard = ?limit.maximum, error = %e,
                "cannot raise the open files limit");
            limit.current
        }
    }
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
) -> Result<std::net::TcpListener, StartError> {
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

fn bind_error(addr: SocketAddr, source: std::io::Error) -> StartError {
    let hint = match source.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (another process holds this port; choose another address)"
        }
        std::io::ErrorKind::PermissionDenied => " (ports below 1024 need privileges)",
        _ => "",
    };
    StartError::Bind { addr, source, hint }
}

fn to_tokio(socket: std::net::TcpListener, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::from_std(socket).map_err(|e| bind_error(addr, e))
}

/// Binds one listener on the current runtime (admin, bundled origin).
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    to_tokio(bind_std(addr, Sharing::Exclusive, 1024)?, addr)
}

/// How client connections of a listener are served.
#[derive(Clone, Copy, Debug)]
pub struct ConnSettings {
    /// hyper's head read timeout: idle keepalive and slow heads alike.
    pub keepalive_timeout: Duration,
    /// Requests per connection; the last answer says `Connection: close`.
    pub keepalive_requests: u32,
    /// Largest request head (hyper's read buffer), at least 8 KiB.
    pub max_header_size: usize,
}

impl Default for ConnSettings {
    /// The admin listener's and the bundled origin's.
    fn default() -> Self {
        ConnSettings {
            keepalive_timeout: Duration::from_secs(75),
            keepalive_requests: u32::MAX,
            max_header_size: 64 * 1024,
        }
    }
}

impl ConnSettings {
    /// The proxy listeners' settings from `[server]`.
    pub fn of(server: &crate::config::ServerConfig) -> ConnSettings {
        ConnSettings {
            keepalive_timeout: server.keepalive_timeout,
            keepalive_requests: server.keepalive_requests,
            max_header_size: server.max_header_size.max(8192),
        }
    }
}

pub(crate) async fn accept_loop<S, F, B>(
    listener: TcpListener,
    mut stopped: watch::Receiver<bool>,
    serve: S,
    counted: Option<Arc<Metrics>>,
    settings: ConnSettings,
) where
    S: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Every connection holds a receiver: a send asks them to finish
    // gracefully, and the channel closes when the last one has. (hyper-util's
    // GracefulShutdown does not take connections built with upgrades.)
    let (graceful, _) = watch::channel(());
    loop {
        // max_connections: take a slot before accepting, so connections past
        // it wait in the listen backlog, not in the process.
        let slot = match counted.as_ref().and_then(|m| m.connection_slots.clone()) {
            Some(slots) => tokio::select! {
                slot = slots.acquire_owned() => slot.ok(),
                _ = stopped.changed() => break,
            },
            None => None,
        };
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let guard = counted.as_ref().map(|m| m.connection(slot));
                    let drain = graceful.subscribe();
                    serve_connection(stream, peer, serve.clone(), drain, guard, settings);
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped.changed() => break,
        }
    }
    drop(listener);
    let _ = graceful.send(());
    graceful.closed().await;
}

fn serve_connection<S, F, B>(
    stream: TcpStream,
    peer: SocketAddr,
    serve: S,
    mut drain: watch::Receiver<()>,
    guard: Option<ConnectionGuard>,
    settings: ConnSettings,
) where
    S: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = stream.set_nodelay(true);
    // keepalive_requests: the last answer on the connection closes it.
    let served = std::sync::atomic::AtomicU32::new(0);
    let service = service_fn(move |req| {
        let n = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let answer = serve(req, peer);
        async move {
            let mut resp = answer.await?;
            if n >= settings.keepalive_requests
                && resp.status() != http::StatusCode::SWITCHING_PROTOCOLS
            {
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(settings.keepalive_timeout)
        .max_buf_size(settings.max_header_size)
        .serve_connection(TokioIo::new(stream), service)
        // WebSocket handshakes hand the connection to a tunnel (tunnel.rs).
        .with_upgrades();
    tokio::spawn(async move {
        let _open = guard;
        let mut conn = std::pin::pin!(conn);
        let ended = tokio::select! {
            ended = conn.as_mut() => ended,
            _ = drain.changed() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        // `drain` is held until here: the accept loop waits for it.
        drop(drain);
        if let Err(e) = ended {
            tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
        }
    });
}
