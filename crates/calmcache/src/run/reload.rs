//! Reload: a new config applied to the running proxy without dropping a
//! connection (SIGHUP, `calmcache reload`, `POST /reload`).
//!
//! [`Reloader::reload_file`] reads the config file again; an invalid one
//! changes nothing and every problem is logged and returned. A valid one
//! becomes a new generation of [`Proxy`]: routes, upstreams and admin
//! settings are new (a server whose health settings are unchanged keeps
//! its health; active checks restart), zones of the same name and storage are the same
//! objects (contents kept), and metrics, fetches in flight and the access
//! log carry over. Listen addresses that are new are bound first (a taken
//! port fails the reload before anything changed), then every worker
//! thread switches generation (requests already running finish on the
//! old one), then listeners no longer configured stop accepting and drain.
//! `threads`, `max_connections`, `backlog` and `[access_log]` apply at the
//! next restart, and the outcome says so when they changed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::{Config, ConfigError};
use crate::ops::admin::ReloadRefusal;
use crate::proxy::setup::SetupError;
use crate::proxy::state::Proxy;
use crate::run::listen::{self, BindError, Bound, ListenConf, Live, Transport, WorkerSlot};
use crate::run::notify::Notifier;

/// What a successful reload did, in words for the log and the admin API.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Outcome {
    /// Changes applied and changes waiting for a restart.
    pub notes: Vec<String>,
}

/// Why a reload was refused; the running generation stays. The log and
/// `POST /reload` show it as its [`problems`](ReloadError::problems).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// Started without a config file (demo, embedded): nothing to read again.
    #[error(
        "this proxy was started without a config file (demo or embedded config): \
         nothing to read again"
    )]
    NoConfigFile,
    /// The file is unreadable or invalid, or its environment (zone
    /// directories, access log) unusable: every problem, one line each.
    #[error(transparent)]
    Config(ConfigError),
    /// The blocking task reading the file failed (it panicked).
    #[error("reload task failed: {0}")]
    Task(tokio::task::JoinError),
    /// The new generation could not be built (an upstream, a zone directory).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A new listen or admin address could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
}

impl ReloadError {
    /// Every problem, one line each, as logged and as `POST /reload` lists
    /// them: a config's one by one (its message has a line for each), else
    /// the one message.
    pub fn problems(&self) -> Vec<String> {
        match self {
            ReloadError::Config(e) => e.to_string().lines().map(str::to_owned).collect(),
            other => vec![other.to_string()],
        }
    }
}

impl ReloadRefusal for ReloadError {
    fn problems(&self) -> Vec<String> {
        ReloadError::problems(self)
    }
}

impl crate::ops::admin::Reload for Reloader {
    fn reload_file(self: Arc<Self>) -> crate::ops::admin::ReloadFuture {
        Box::pin(async move {
            let reloaded = Reloader::reload_file(&self).await;
            reloaded
                .map(|o| o.notes)
                .map_err(|e| Box::new(e) as Box<dyn ReloadRefusal>)
        })
    }
}

/// The running proxy's reloadable parts.
pub struct Reloader {
    /// What requests and accept loops read.
    pub(crate) live: Arc<Live>,
    state: Mutex<State>,
    stopped: watch::Receiver<bool>,
    /// systemd's `$NOTIFY_SOCKET` (readiness, reloads, the stop).
    pub(crate) notify: Notifier,
}

struct State {
    slots: Vec<Arc<WorkerSlot>>,
    bound: Vec<Bound>,
    admin: Option<AdminBound>,
    config: Config,
    path: Option<PathBuf>,
    /// Stops the current generation's warm-up tasks and health checks.
    warm_stop: watch::Sender<bool>,
}

struct AdminBound {
    asked: SocketAddr,
    actual: SocketAddr,
    stop: watch::Sender<bool>,
}

impl Reloader {
    pub(crate) fn new(
        live: Arc<Live>,
        slots: Vec<Arc<WorkerSlot>>,
        bound: Vec<Bound>,
        config: Config,
        path: Option<PathBuf>,
        stopped: watch::Receiver<bool>,
        notify: Notifier,
    ) -> Reloader {
        Reloader {
            live,
            state: Mutex::new(State {
                slots,
                bound,
                admin: None,
                config,
                path,
                warm_stop: watch::channel(false).0,
            }),
            stopped,
            notify,
        }
    }

    /// What is served where, for the service manager's `STATUS=`:
    /// `serving on 0.0.0.0:80, TLS on 0.0.0.0:443, admin on 127.0.0.1:9090`.
    pub(crate) fn serving(&self) -> String {
        let state = self.state();
        let on = |transport| {
            let addrs = state.bound.iter().filter(|b| b.transport == transport);
            addrs.map(|b| b.actual.to_string()).collect::<Vec<_>>()
        };
        let mut parts = Vec::new();
        for (what, addrs) in [
            ("serving on", on(Transport::Plain)),
            ("TLS on", on(Transport::Tls)),
        ] {
            if !addrs.is_empty() {
                parts.push(format!("{what} {}", addrs.join(" ")));
            }
        }
        if let Some(admin) = &state.admin {
            parts.push(format!("admin on {}", admin.actual));
        }
        parts.join(", ")
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Binds the admin listener and serves it (into `tasks` at start, on
    /// its own task at a reload).
    pub(crate) fn serve_admin(
        self: &Arc<Self>,
        addr: SocketAddr,
        tasks: &mut JoinSet<()>,
    ) -> Result<SocketAddr, BindError> {
        let listener = listen::bind(addr)?;
        let actual = listener.local_addr().unwrap_or(addr);
        let (stop, own) = watch::channel(false);
        tasks.spawn(listen::admin_loop(
            listener,
            self.stopped.clone(),
            own,
            self.live.clone(),
            self.clone(),
        ));
        self.state().admin = Some(AdminBound {
            asked: addr,
            actual,
            stop,
        });
        Ok(actual)
    }

    /// Starts keeping `proxy`'s `warm` paths fresh and its upstreams'
    /// active health checks, stopping the previous generation's tasks.
    pub(crate) fn start_warm(&self, proxy: &Arc<Proxy>) {
        let mut state = self.state();
        let first = |transport| {
            let bound = state.bound.iter().find(|b| b.transport == transport);
            bound.map(|b| b.actual)
        };
        let listeners = crate::proxy::warm::Listeners {
            plain: first(Transport::Plain),
            tls: first(Transport::Tls),
        };
        let (stop, stopped) = watch::channel(false);
        let old = std::mem::replace(&mut state.warm_stop, stop);
        let _ = old.send(true);
        let own_stop = stopped.clone();
        // Either stop ends them: a reload or the proxy's shutdown.
        let stopped = merge(stopped, self.stopped.clone());
        for upstream in &proxy.upstreams {
            upstream.start_checks(&stopped);
        }
        if proxy.fleet.is_some() {
            tokio::spawn(crate::proxy::purge::follow_fleet(
                proxy.clone(),
                stopped.clone(),
            ));
        }
        self.start_membership(proxy, &state, &own_stop);
        crate::proxy::warm::start(proxy, listeners, stopped);
    }

    /// Starts this generation's fleet heartbeat (fleet/members.rs) with
    /// its config's fingerprint, under this node's name (host name and
    /// first listen address); it ends at the next reload (`reload`), or
    /// removes the heartbeat when the proxy stops.
    fn start_membership(&self, proxy: &Arc<Proxy>, state: &State, reload: &watch::Receiver<bool>) {
        let Some(fleet) = &proxy.fleet else {
            return;
        };
        use crate::fleet::{fingerprint::Fingerprint, members};
        let first = state.bound.iter().map(|b| b.actual).next();
        let fingerprint = Fingerprint::of(&state.config);
        let own = members::Beat::new(
            members::node_name(first),
            fleet.node().to_owned(),
            &fingerprint,
        );
        tokio::spawn(members::keep_membership(
            fleet.clone(),
            own,
            reload.clone(),
            self.stopped.clone(),
        ));
    }

    /// Reads the config file the proxy was started from and applies it;
    /// the service manager hears `RELOADING=1` before, `READY=1` after
    /// (applied or refused: either way the proxy serves).
    pub async fn reload_file(self: &Arc<Self>) -> Result<Outcome, ReloadError> {
        let path = self.state().path.clone();
        let Some(path) = path else {
            return Err(ReloadError::NoConfigFile);
        };
        self.notify.reloading();
        let result = self.read_and_apply(path).await;
        let status = match &result {
            Ok(_) => format!("reloaded; {}", self.serving()),
            Err(e) => format!(
                "reload refused ({} problem(s), see the log), still running the previous config; {}",
                e.problems().len(),
                self.serving()
            ),
        };
        self.notify.ready(&status);
        result
    }

    async fn read_and_apply(self: &Arc<Self>, path: PathBuf) -> Result<Outcome, ReloadError> {
        let read = tokio::task::spawn_blocking(move || crate::run::preflight::load(&path)).await;
        let config = match read {
            Ok(Ok(config)) => config,
            Ok(Err(e)) => {
                self.live.proxy().metrics.reloads_failed.inc();
                let refused = ReloadError::Config(e);
                log_refused(&refused);
                return Err(refused);
            }
            Err(e) => return Err(ReloadError::Task(e)),
        };
        self.apply(config).await
    }

    /// Applies a valid config: new generation, listeners re-bound. On an
    /// error (a port taken, a zone directory unusable) nothing changed.
    pub async fn apply(self: &Arc<Self>, config: Config) -> Result<Outcome, ReloadError> {
        let result = self.apply_now(config);
        let metrics = self.live.proxy().metrics.clone();
        match &result {
            Ok(outcome) => {
                metrics.reloads_ok.inc();
                tracing::info!(changes = ?outcome.notes, "config reloaded");
                self.state().config.log_warnings();
            }
            Err(refused) => {
                metrics.reloads_failed.inc();
                log_refused(refused);
            }
        }
        result
    }

    fn apply_now(self: &Arc<Self>, config: Config) -> Result<Outcome, ReloadError> {
        let mut state = self.state();
        let mut notes = restart_only(&state.config, &config);
        let old = self.live.proxy();
        let proxy = Proxy::new(&config, Some(&old), &mut notes)?;
        // New addresses first: a failure here leaves everything as it was.
        let (kept, added) = bind_new_listeners(&state, &config, &mut notes)?;
        let admin_wanted = config.admin.as_ref().map(|a| a.listen);
        let admin_changed = state.admin.as_ref().map(|a| a.asked) != admin_wanted;
        let new_admin = match admin_wanted.filter(|_| admin_changed).map(listen::bind) {
            Some(Err(e)) => {
                for b in added {
                    let _ = b.stop.send(true);
                }
                return Err(e.into());
            }
            Some(Ok(listener)) => admin_wanted.map(|addr| (addr, listener)),
            None => None,
        };
        // The switch: every request from here on sees the new generation.
        proxy.take_over(&old, &config);
        retire_fleet(&old, &proxy);
        proxy.start_background(Some(&old));
        self.live.set(proxy.clone(), ListenConf::of(&config));
        for slot in &state.slots {
            slot.switch(proxy.clone());
        }
        retire_listeners(&mut state, kept, added, &mut notes);
        if admin_changed {
            self.switch_admin(&mut state, new_admin, &mut notes);
        }
        state.config = config;
        drop(state);
        self.start_warm(&proxy);
        Ok(Outcome { notes })
    }

    /// Stops the admin listener no longer configured and serves the new one.
    fn switch_admin(
        self: &Arc<Self>,
        state: &mut State,
        new_admin: Option<(SocketAddr, tokio::net::TcpListener)>,
        notes: &mut Vec<String>,
    ) {
        if let Some(old) = state.admin.take() {
            let _ = old.stop.send(true);
            notes.push(format!("admin API no longer on {}", old.asked));
        }
        if let Some((asked, listener)) = new_admin {
            let actual = listener.local_addr().unwrap_or(asked);
            let (stop, own) = watch::channel(false);
            tokio::spawn(listen::admin_loop(
                listener,
                self.stopped.clone(),
                own,
                self.live.clone(),
                self.clone(),
            ));
            state.admin = Some(AdminBound {
                asked,
                actual,
                stop,
            });
            notes.push(format!("admin API now on {actual}"));
        }
    }

    /// `server.shutdown_timeout` of the config running now.
    pub fn shutdown_timeout(&self) -> std::time::Duration {
        self.state().config.server.shutdown_timeout
    }
}

/// Binds the addresses `config` lists that no listener serves yet. Each
/// configured address keeps the listener asked for the same way (port 0
/// included: it keeps the port it got). Returns which of the bound
/// listeners are kept and the new ones; on an error, the new ones are
/// stopped and nothing changed.
fn bind_new_listeners(
    state: &State,
    config: &Config,
    notes: &mut Vec<String>,
) -> Result<(Vec<bool>, Vec<Bound>), ReloadError> {
    let backlog = i32::try_from(state.config.server.backlog).unwrap_or(i32::MAX);
    let mut kept = vec![false; state.bound.len()];
    let mut added: Vec<Bound> = Vec::new();
    for (addr, transport) in listen::addresses(config) {
        let same = (0..state.bound.len()).find(|&i| {
            let b = &state.bound[i];
            !kept[i] && b.asked == addr && b.transport == transport
        });
        if let Some(i) = same {
            kept[i] = true;
            continue;
        }
        match listen::bind_on_workers(addr, transport, backlog, &state.slots) {
            Ok(b) => {
                let on = transport.as_str();
                notes.push(format!("now listening on {} ({on})", b.actual));
                added.push(b);
            }
            Err(e) => {
                for b in added {
                    let _ = b.stop.send(true);
                }
                return Err(e.into());
            }
        }
    }
    Ok((kept, added))
}

/// A reload that turns fleet mode off or changes its link leaves the old
/// link to the fills in flight (each commits or releases its own lease
/// through it); the leases it gave up while Redis was out are let go now,
/// since no follow loop of it will run again.
fn retire_fleet(old: &Proxy, new: &Proxy) {
    let Some(fleet) = old.fleet.clone() else {
        return;
    };
    if new.fleet.as_ref().is_some_and(|f| Arc::ptr_eq(f, &fleet)) {
        return;
    }
    tokio::spawn(async move { fleet.retire().await });
}

/// Listeners no longer configured stop accepting and drain; the new ones
/// join the kept ones.
fn retire_listeners(
    state: &mut State,
    kept: Vec<bool>,
    added: Vec<Bound>,
    notes: &mut Vec<String>,
) {
    let mut bound = Vec::new();
    for (b, keep) in std::mem::take(&mut state.bound).into_iter().zip(kept) {
        if keep {
            bound.push(b);
        } else {
            notes.push(format!(
                "stopped listening on {} ({})",
                b.actual,
                b.transport.as_str()
            ));
            let _ = b.stop.send(true);
        }
    }
    bound.extend(added);
    state.bound = bound;
}

/// Logs each problem of a refused reload on a line of its own.
fn log_refused(refused: &ReloadError) {
    for problem in refused.problems() {
        tracing::error!("reload refused, still running the previous config: {problem}");
    }
}

/// Settings a running proxy cannot change, named when a reload changes them.
fn restart_only(old: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    let (o, n) = (&old.server, &new.server);
    for (key, changed) in [
        ("server.threads", o.threads != n.threads),
        (
            "server.max_connections",
            o.max_connections != n.max_connections,
        ),
        ("server.backlog", o.backlog != n.backlog),
        ("access_log", old.access_log != new.access_log),
    ] {
        if changed {
            notes.push(format!("{key}: changed; applies at the next restart"));
        }
    }
    notes
}

/// A receiver that turns true when either `a` or `b` does.
fn merge(a: watch::Receiver<bool>, b: watch::Receiver<bool>) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(*a.borrow() || *b.borrow());
    tokio::spawn(async move {
        let (mut a, mut b) = (a, b);
        tokio::select! {
            _ = a.wait_for(|v| *v) => {}
            _ = b.wait_for(|v| *v) => {}
            _ = tx.closed() => return,
        }
        let _ = tx.send(true);
    });
    rx
}
