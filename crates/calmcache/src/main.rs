//! The `calmcache` command: `serve`, `check`, `reload`, `import-nginx`, `demo`, `origin`, `completions`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use calmcache::{Config, DemoOptions, OriginOptions};
use clap::{CommandFactory, Parser, Subcommand};

/// A caching reverse proxy that keeps slow origins calm.
#[derive(Parser, Debug)]
#[command(name = "calmcache", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the proxy from a config file.
    Serve {
        /// The TOML config (see config.example.toml).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Ask the running proxy to read its config file again (POST /reload on
    /// the admin listener named in FILE); exit 0 when it did, 1 when it
    /// refused (every problem printed; it keeps running the previous config).
    Reload {
        /// The config of the running proxy (for its admin address and token).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a config and the environment it needs (zone directories
    /// writable, the access log openable, TLS files loaded; not the ports):
    /// every problem with its TOML path (exit 2), or a summary (exit 0).
    /// With --fleet: compare the config's fingerprint with the live members
    /// of its fleet (exit 0: all the same, 3: a member differs, 1: Redis
    /// not reached or no [fleet]).
    Check {
        /// The TOML config.
        #[arg(long, short)]
        config: PathBuf,
        /// Connect to the fleet's Redis (as a node of this config would),
        /// list the live members and say which run another config, and in
        /// which part (keys, routes, fleet).
        #[arg(long)]
        fleet: bool,
    },
    /// Start a bundled slow origin and calmcache in front of it, no file needed
    /// (with --fleet: a local redis-server and three nodes sharing one cache).
    Demo {
        /// Where the proxy listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Where the admin listener (dashboard, /status, /metrics) listens.
        #[arg(long, default_value = "127.0.0.1:9090")]
        admin: SocketAddr,
        /// Where the bundled origin listens.
        #[arg(long, default_value = "127.0.0.1:8081")]
        origin: SocketAddr,
        /// Fleet mode: start a local redis-server (Debian's redis-server
        /// package, from PATH) and three nodes on it, their proxies from
        /// --listen up and their admin listeners from --admin up (ports in
        /// use skipped; port 0: free ports).
        #[arg(long)]
        fleet: bool,
    },
    /// Print an NGINX config (and the files it includes) as an equivalent
    /// calmcache config, with a comment on every directive not carried over
    /// and on every behaviour difference (see docs/migrating-from-nginx.md).
    /// A config that cannot be parsed: the file and line, exit 2.
    ImportNginx {
        /// The NGINX config, e.g. /etc/nginx/nginx.conf.
        file: PathBuf,
        /// Write the TOML here instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Run only the bundled slow origin (for benchmarks and experiments).
    Origin {
        /// Where it listens.
        #[arg(long, default_value = "127.0.0.1:8081")]
        listen: SocketAddr,
        /// Milliseconds of busy CPU work per page.
        #[arg(long, default_value_t = 180)]
        cpu_ms: u64,
        /// Milliseconds of idle wait per page, after the CPU work.
        #[arg(long, default_value_t = 0)]
        sleep_ms: u64,
        /// Pages computed at once; the rest queue.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Pad each page to at least this many bytes.
        #[arg(long, default_value_t = 0)]
        body_bytes: usize,
        /// Send this Cache-Control header.
        #[arg(long)]
        cache_control: Option<String>,
        /// Answer every page with this status (e.g. 503 to play a failing
        /// origin); `POST /__origin/steer?status=N&sleep_ms=M` changes it live.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u16).range(200..=599))]
        status: u16,
        /// Tag every page `Cache-Tag: g<k>`, k = the last run of digits in its
        /// path (else a hash of the path) modulo N, for purges by tag; 0: no tag.
        #[arg(long, default_value_t = 0, value_name = "N")]
        tag_groups: u64,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: calmcache::Shell,
    },
    /// Print the man page (roff), for packagers.
    #[command(hide = true)]
    Manpage,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Check { config, fleet } => return check(&config, fleet),
        Command::Reload { config } => return reload(&config),
        Command::Completions { shell } => {
            return calmcache::print_completions(shell, Cli::command())
        }
        Command::Manpage => return calmcache::print_manpage(Cli::command()),
        Command::ImportNginx { file, output } => return import_nginx(&file, output.as_deref()),
        Command::Serve { config } => serve(&config),
        Command::Demo {
            listen,
            admin,
            origin,
            fleet,
        } => {
            let opts = DemoOptions {
                listen,
                admin,
                origin,
            };
            if fleet {
                run_fleet_demo(&opts)
            } else {
                run_demo(opts)
            }
        }
        Command::Origin {
            listen,
            cpu_ms,
            sleep_ms,
            workers,
            body_bytes,
            cache_control,
            status,
            tag_groups,
        } => {
            let opts = OriginOptions {
                listen,
                cpu: Duration::from_millis(cpu_ms),
                sleep: Duration::from_millis(sleep_ms),
                workers,
                body_bytes,
                cache_control,
                status: http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK),
            };
            run_origin(opts, tag_groups)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("calmcache: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CALMCACHE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(calmcache::stderr_colour())
        .finish();
    // Not `.init()`: its `log` bridge would pass the Redis client's lines
    // (about 9 a second per node during an outage) as they come; ours
    // rate-limits them (telemetry/client_log.rs).
    if tracing::subscriber::set_global_default(subscriber).is_ok() {
        let _ = calmcache::install_client_log();
    }
}

fn check(path: &std::path::Path, fleet: bool) -> ExitCode {
    match calmcache::load_config(path) {
        Ok(config) => {
            for warning in config.warnings() {
                eprintln!("{}: warning: {warning}", path.display());
            }
            if fleet {
                return check_fleet(&config);
            }
            println!("{}", config.summary());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// `calmcache check --fleet`: exit 0 when every live member runs this
/// config's fingerprint, 3 when one differs, 1 when Redis is not reached.
fn check_fleet(config: &Config) -> ExitCode {
    let checked = match runtime(1) {
        Ok(rt) => rt.block_on(calmcache::check_fleet(config)),
        Err(e) => {
            eprintln!("calmcache: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    match checked {
        Ok(report) => {
            print!("{}", report.text());
            // Warnings go to stderr, as `check`'s do, and leave the exit
            // code to the fingerprints: a rollout script gates on those.
            for warning in report.warnings() {
                eprintln!("calmcache: warning: {warning}");
            }
            if report.differing() > 0 {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("calmcache: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `calmcache import-nginx FILE [-o OUT]`.
fn import_nginx(file: &std::path::Path, output: Option<&std::path::Path>) -> ExitCode {
    let toml = match calmcache::import_nginx(file) {
        Ok(toml) => toml,
        Err(e) => {
            eprintln!("calmcache: {e}");
            return ExitCode::from(2);
        }
    };
    match output {
        None => say(toml.trim_end()),
        Some(out) => {
            if let Err(e) = std::fs::write(out, toml) {
                eprintln!("calmcache: cannot write {}: {e}", out.display());
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}

fn runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn serve(path: &std::path::Path) -> anyhow::Result<()> {
    // The same checks as `check`, reported the same way (exit 2).
    let config = match calmcache::load_config(path) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(e.exit_code());
        }
    };
    // The proxy's own worker threads are started by `calmcache::start`; this
    // runtime only carries the admin listener, warm-up and signals.
    runtime(1)?.block_on(async {
        // Listening for SIGUSR1 before starting: its default action would
        // end the process, and logrotate may send it at any time.
        #[cfg(unix)]
        let usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1());
        #[cfg(unix)]
        let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        let running = calmcache::start_from(&config, Some(path.to_path_buf())).await?;
        #[cfg(unix)]
        match hup {
            Ok(hup) => reload_on_signal(hup, running.reloader().clone()),
            Err(e) => tracing::warn!(error = %e, "cannot handle SIGHUP: reload with POST /reload"),
        }
        #[cfg(unix)]
        match usr1 {
            Ok(usr1) => reopen_on_signal(usr1, running.access_log().cloned()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot handle SIGUSR1: the access log cannot be reopened")
            }
        }
        for addr in &running.proxy_addrs {
            tracing::info!(%addr, "calmcache listening");
        }
        for addr in &running.tls_addrs {
            tracing::info!(%addr, "calmcache listening (TLS)");
        }
        if let Some(addr) = running.admin_addr {
            tracing::info!(%addr, "admin listening (GET /status)");
        }
        stop_signal().await;
        let grace = running.shutdown_timeout();
        tracing::info!(?grace, "stopping: finishing requests in flight and open tunnels");
        running.shutdown(grace).await;
        Ok(())
    })
}

fn run_demo(opts: DemoOptions) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    runtime(threads)?.block_on(async {
        let origin = calmcache::start_origin(opts.origin_options()).await?;
        let config = opts
            .config(origin.addr)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let running = calmcache::start(&config).await?;
        let proxy = running.proxy_addrs.first().copied().unwrap_or(opts.listen);
        let admin = running.admin_addr.unwrap_or(opts.admin);
        say(&DemoOptions::banner(proxy, admin, origin.addr));
        stop_signal().await;
        origin.stop();
        running.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

fn run_fleet_demo(opts: &DemoOptions) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    runtime(threads)?.block_on(async {
        #[cfg(unix)]
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        let demo = calmcache::FleetDemo::start(opts).await?;
        say(&demo.banner());
        // A closed terminal (SIGHUP) stops it too: Redis must not outlive it.
        #[cfg(unix)]
        match hangup {
            Ok(mut hup) => {
                tokio::select! {
                    () = stop_signal() => {}
                    _ = hup.recv() => {}
                }
            }
            Err(_) => stop_signal().await,
        }
        #[cfg(not(unix))]
        stop_signal().await;
        demo.stop(Duration::from_secs(5)).await;
        Ok(())
    })
}

fn run_origin(opts: OriginOptions, tag_groups: u64) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    runtime(threads)?.block_on(async {
        let origin = calmcache::start_origin_with_tags(opts, tag_groups).await?;
        say(&format!("http://{}/", origin.addr));
        stop_signal().await;
        origin.stop();
        Ok(())
    })
}

/// Prints to stdout; a reader that went away (`calmcache demo | head -1`) is
/// not a reason to stop serving, so write errors are ignored.
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Reopens the access log on each SIGUSR1 (logrotate's `postrotate`).
#[cfg(unix)]
fn reopen_on_signal(mut usr1: tokio::signal::unix::Signal, log: Option<calmcache::AccessLog>) {
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            match &log {
                Some(log) => log.reopen(),
                None => tracing::info!("SIGUSR1: no access log to reopen"),
            }
        }
    });
}

/// Reloads the config on each SIGHUP (errors are logged by the reloader).
#[cfg(unix)]
fn reload_on_signal(
    mut hup: tokio::signal::unix::Signal,
    reloader: std::sync::Arc<calmcache::Reloader>,
) {
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            let _ = reloader.reload_file().await;
        }
    });
}

/// `calmcache reload`: POST /reload to the admin listener of `path`.
fn reload(path: &std::path::Path) -> ExitCode {
    let config = match Config::from_file(path) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            eprintln!("(not sent: the running proxy would refuse it too)");
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let Some(admin) = config.admin else {
        eprintln!(
            "{}: no [admin] listener to ask; send SIGHUP to the calmcache process instead \
             (kill -HUP PID)",
            path.display()
        );
        return ExitCode::from(2);
    };
    let result = runtime(1).and_then(|rt| {
        let asked = calmcache::post_reload(admin.listen, admin.token.as_deref());
        // anyhow for its `{:#}`: the cause and every source under it.
        rt.block_on(asked).map_err(anyhow::Error::from)
    });
    match result {
        Ok((status, body)) => {
            print!("{body}");
            if status == 200 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("cannot reach the admin listener at {}: {e:#}", admin.listen);
            ExitCode::from(1)
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
