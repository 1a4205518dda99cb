//! Listeners and workers: bind, accept, hand connections to `conn`, reload,
//! and stop gracefully.
//!
//! [`start`] raises the soft open files limit, binds every listener first (a
//! taken port is an error before anything runs), then starts the worker
//! threads, the admin listener and the warm-up tasks, and then tells the
//! service manager it is ready (`run::notify`). Each worker thread
//! serves its own `SO_REUSEPORT` socket of every listen address and takes
//! new listeners from a command channel (reload re-binds changed addresses
//! there). The proxy state a request sees is its worker's current
//! generation ([`WorkerSlot`]), replaced whole by a reload. A stopping worker
//! drains its connections, then gives its WebSocket tunnels until the
//! shutdown deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::config::Config;
use crate::net::shutdown::Tunnels;
use crate::proxy::state::{Proxy, Worker};
use crate::proxy::zones::ZoneTiers;
use crate::run::listen::{
    bind_on_workers, run_worker, Bound, ListenConf, Live, Transport, WorkerSlot,
};
use crate::run::notify::Notifier;
use crate::run::reload::Reloader;
use crate::telemetry::access_log::AccessLog;

pub use crate::run::listen::StartError;

/// A started proxy: its bound addresses and the handle that reloads and stops it.
pub struct Running {
    /// The plain listeners' addresses, in config order (real ports when 0 was asked).
    pub proxy_addrs: Vec<SocketAddr>,
    /// The TLS listeners' addresses, in config order.
    pub tls_addrs: Vec<SocketAddr>,
    /// The admin listener's address, if configured.
    pub admin_addr: Option<SocketAddr>,
    /// The first generation's state (for tests and the demo; metrics are
    /// shared by every generation).
    pub proxy: Arc<Proxy>,
    reloader: Arc<Reloader>,
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

    /// The reload handle (SIGHUP, `POST /reload`).
    pub fn reloader(&self) -> &Arc<Reloader> {
        &self.reloader
    }

    /// `server.shutdown_timeout` of the config running now.
    pub fn shutdown_timeout(&self) -> Duration {
        self.reloader.shutdown_timeout()
    }

    /// Stops accepting, lets requests in flight finish and open tunnels run
    /// (up to `grace`), closes what is left, then returns.
    pub async fn shutdown(mut self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        self.reloader.live.set_deadline(deadline);
        self.reloader.notify.stopping(&format!(
            "stopping: finishing requests in flight and open tunnels (up to {grace:?})"
        ));
        let _ = self.stop.send(true);
        let workers = std::mem::take(&mut self.workers);
        let all = async {
            while self.tasks.join_next().await.is_some() {}
            let _ = joined(workers).await;
        };
        // A little past the deadline: the workers close their tunnels at it.
        if tokio::time::timeout_at(deadline + Duration::from_millis(500), all)
            .await
            .is_err()
        {
            // Worker threads end with the process; their connections close then.
            tracing::warn!("requests still in flight after {grace:?}; closing their connections");
            self.tasks.abort_all();
        }
        self.hand_over_leases().await;
        if let Some(log) = self.access_log.take() {
            let flushed = tokio::task::spawn_blocking(move || log.flush(Duration::from_secs(1)));
            let _ = flushed.await;
        }
    }
}

impl Running {
    /// The fleet leases of fetches the stop cut short (at the deadline,
    /// with their worker's runtime) are released at once: a peer waiting
    /// for one takes over now, not when it lapses. Fetches that ended
    /// within the drain have committed and let theirs go already. Then
    /// the node's heartbeat is removed, so peers list it gone.
    async fn hand_over_leases(&self) {
        let Some(fleet) = self.reloader.live.proxy().fleet.clone() else {
            return;
        };
        let hand_over = async {
            fleet.hand_over().await;
            fleet.leave_membership().await;
        };
        if tokio::time::timeout(HAND_OVER_WITHIN, hand_over)
            .await
            .is_err()
        {
            tracing::warn!("fleet leases not all released within {HAND_OVER_WITHIN:?}; they lapse");
        }
    }
}

/// Resolves once every worker thread has ended. The joins run on a thread
/// of their own, not on the runtime's blocking pool: dropping the runtime
/// waits for its blocking tasks, so a join there kept the process (and a
/// response still in flight) alive past `shutdown_timeout` until the
/// response ended (issue 30: a 500 ms drain that lasted 5 s).
fn joined(workers: Vec<std::thread::JoinHandle<()>>) -> tokio::sync::oneshot::Receiver<()> {
    let (done, ended) = tokio::sync::oneshot::channel();
    let joiner = std::thread::Builder::new()
        .name("calmcache-stop".into())
        .spawn(move || {
            workers.into_iter().for_each(|w| drop(w.join()));
            let _ = done.send(());
        });
    if let Err(e) = joiner {
        // `done` dropped with the closure: the stop does not wait.
        tracing::warn!(error = %e, "cannot wait for the worker threads; stopping without");
    }
    ended
}

/// The longest a stop waits for Redis to take back its leases.
const HAND_OVER_WITHIN: Duration = Duration::from_secs(1);

/// Binds every listener, then serves: `server.threads` worker threads, each
/// with its own single-threaded runtime and its own `SO_REUSEPORT` socket per
/// listen address (the kernel spreads connections; no work stealing, no
/// cross-thread wakeups on the hit path). The admin listener and warm-up run
/// on the calling runtime.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    start_from(config, None).await
}

/// [`start`], remembering the file the config came from so that a reload
/// (SIGHUP, `POST /reload`) reads it again.
pub async fn start_from(
    config: &Config,
    path: Option<std::path::PathBuf>,
) -> Result<Running, StartError> {
    start_with(config, path, ZoneTiers::new()).await
}

/// [`start_from`], with zones stored in tiers the embedding application
/// supplies (any [`Tier`](calmcache_core::Tier), by zone name; see
/// [`ZoneTiers`]) instead of the ones their config `kind` builds. The
/// request path is the same for every tier; reloads keep them.
pub async fn start_with(
    config: &Config,
    path: Option<std::path::PathBuf>,
    tiers: ZoneTiers,
) -> Result<Running, StartError> {
    warn_if_files_short(config);
    config.log_warnings();
    let access_log = open_access_log(config)?;
    let proxy = Proxy::with_tiers(config, tiers)?;
    if let Some(log) = &access_log {
        let _ = proxy.access_log.set(log.clone());
    }
    proxy.start_background(None);
    let live = Arc::new(Live::new(proxy.clone(), ListenConf::of(config)));
    let (stop, stopped) = watch::channel(false);
    let (slots, workers) = spawn_workers(config, &proxy, &live, &stopped, &access_log)?;
    let bound = match bind_listeners(config, &slots) {
        Ok(bound) => bound,
        Err(e) => {
            let _ = stop.send(true);
            return Err(e);
        }
    };
    let addrs_of = |transport| -> Vec<SocketAddr> {
        let on = bound.iter().filter(|b| b.transport == transport);
        on.map(|b| b.actual).collect()
    };
    let proxy_addrs = addrs_of(Transport::Plain);
    let tls_addrs = addrs_of(Transport::Tls);
    let reloader = Arc::new(Reloader::new(
        live.clone(),
        slots,
        bound,
        config.clone(),
        path,
        stopped.clone(),
        Notifier::from_env(),
    ));
    let mut tasks = JoinSet::new();
    let admin_addr = match &config.admin {
        Some(a) => match reloader.serve_admin(a.listen, &mut tasks) {
            Ok(addr) => Some(addr),
            Err(e) => {
                let _ = stop.send(true);
                return Err(e.into());
            }
        },
        None => None,
    };
    reloader.start_warm(&proxy);
    // Listeners bound, workers started, disk loaders running.
    proxy
        .ready
        .store(true, std::sync::atomic::Ordering::Relaxed);
    reloader.notify.ready(&reloader.serving());
    Ok(Running {
        proxy_addrs,
        tls_addrs,
        admin_addr,
        proxy,
        reloader,
        access_log,
        stop,
        tasks,
        workers,
    })
}

/// Raises the open files limit and warns when `max_connections` cannot fit
/// it (never a refusal: the limit may be raised later, and a proxy that
/// never reaches its maximum is fine).
fn warn_if_files_short(config: &Config) {
    let files = raise_open_files_limit();
    let needed = files_needed(config.server.max_connections);
    if let Some(files) = files.filter(|&f| f < needed) {
        tracing::warn!(
            max_connections = config.server.max_connections,
            open_files_limit = files,
            needed,
            "server.max_connections cannot fit the open files limit (each connection may need \
             {FILES_PER_CONNECTION} descriptors: its socket, the two ends of its zero-copy pipe, \
             an upstream connection; plus {FILES_RESERVED} for listeners, zone files and logs): \
             raise the hard limit (LimitNOFILE=, ulimit -Hn) or lower max_connections"
        );
    }
}

/// Opens the access log the config names, if any.
fn open_access_log(config: &Config) -> Result<Option<AccessLog>, StartError> {
    let Some(c) = &config.access_log else {
        return Ok(None);
    };
    let log = AccessLog::open(c).map_err(|error| match &c.target {
        crate::config::LogTarget::File(path) => StartError::AccessLogFile {
            path: path.clone(),
            error,
        },
        crate::config::LogTarget::Stdout => StartError::AccessLogWriter(error),
    })?;
    Ok(Some(log))
}

/// The worker threads' slots and handles, as [`spawn_workers`] returns them.
type Workers = (Vec<Arc<WorkerSlot>>, Vec<std::thread::JoinHandle<()>>);

/// Starts `server.threads` worker threads, each with its own runtime, its
/// generation slot and its command channel (new listeners come through it).
fn spawn_workers(
    config: &Config,
    proxy: &Arc<Proxy>,
    live: &Arc<Live>,
    stopped: &watch::Receiver<bool>,
    access_log: &Option<AccessLog>,
) -> Result<Workers, StartError> {
    let threads = config.server.threads.max(1);
    let mut slots = Vec::with_capacity(threads);
    let mut workers = Vec::with_capacity(threads);
    for i in 0..threads {
        let (commands, inbox) = mpsc::unbounded_channel();
        let tunnels = Arc::new(Tunnels::default());
        let slot = Arc::new(WorkerSlot::new(
            Arc::new(Worker::new(proxy.clone(), tunnels.clone())),
            tunnels,
            commands,
        ));
        let (run, stopped, log, live) = (
            slot.clone(),
            stopped.clone(),
            access_log.clone(),
            live.clone(),
        );
        live.worker_started();
        let worker = std::thread::Builder::new()
            .name(format!("calmcache-worker-{i}"))
            .spawn(move || run_worker(run, inbox, stopped, log, live))
            .map_err(StartError::WorkerThread)?;
        workers.push(worker);
        slots.push(slot);
    }
    Ok((slots, workers))
}

/// Binds every listen address (plain, then TLS) on every worker; the first
/// address that cannot be bound is the error.
fn bind_listeners(config: &Config, slots: &[Arc<WorkerSlot>]) -> Result<Vec<Bound>, StartError> {
    let backlog = i32::try_from(config.server.backlog).unwrap_or(i32::MAX);
    crate::run::listen::addresses(config)
        .into_iter()
        .map(|(addr, transport)| {
            bind_on_workers(addr, transport, backlog, slots).map_err(StartError::from)
        })
        .collect()
}

/// Descriptors one client connection may hold at once: its socket, the
/// pipe a plain HTTP/1.x connection keeps once it has spliced a body
/// (net/zero_copy.rs: two ends, held until the connection closes), and an
/// upstream connection for a request in flight or a tunnel. An HTTP/2
/// connection may have one upstream connection per stream in flight: this
/// counts the usual case, one, as
/// NGINX's `worker_connections` sizing does; the rest is what
/// [`FILES_RESERVED`] and the hard limit's headroom are for.
pub(crate) const FILES_PER_CONNECTION: u64 = 4;

/// Descriptors beside the connections: listeners, disk zone files being
/// read or written, the access log, Redis, the runtimes' own.
pub(crate) const FILES_RESERVED: u64 = 256;

/// The open files limit `max_connections` needs.
pub(crate) fn files_needed(max_connections: usize) -> u64 {
    (max_connections as u64)
        .saturating_mul(FILES_PER_CONNECTION)
        .saturating_add(FILES_RESERVED)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit: a connection may hold
/// up to [`FILES_PER_CONNECTION`] descriptors, and the usual soft
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
