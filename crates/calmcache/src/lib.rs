//! calmcache: a caching reverse proxy that keeps slow origins calm.
//!
//! # Public surface
//! The modules are private; this file re-exports what `main.rs`, the
//! testkit and the integration tests use: [`Config`] and [`load_config`],
//! [`start`] / [`start_from`] / [`start_with`] (a zone's storage supplied
//! through the engine's `Tier` trait, [`ZoneTiers`]) and [`Running`], the
//! reload pieces ([`Reloader`], [`post_reload`]), [`AccessLog`], the demo
//! ([`DemoOptions`], [`start_origin`], [`FleetDemo`]) and the errors below.
//!
//! # Layout
//! Folders are layers; a folder imports only from the folders above it in
//! this list (`scripts/module-cycles --layers` reads this list and checks
//! it in CI, and that no two files of the crate import each other in a
//! cycle):
//! - `http/`: HTTP pieces with no cache state (headers, bodies, encodings,
//!   ranges, preconditions, errors).
//! - `config/`: config file -> raw (serde) -> validated [`Config`];
//!   key templates and request conditions.
//! - `telemetry/`: counters, histograms, gauges and the access log.
//! - `net/`: client connections, TLS, write clocks, upstream pools, health.
//! - `fleet/`: fleet mode: the shared tier, leases and purges on Redis, every
//!   call behind a deadline and a circuit breaker, counted per operation.
//! - `proxy/`: the request path: edge view, lookup, refresh decision,
//!   fill, respond, tunnels, invalidation, purge, warm-up.
//! - `ops/`: the admin listener's endpoints, `/status`, `/metrics`, the dashboard.
//! - `run/`: starting a proxy, listeners and workers, reloads, graceful stop.
//! - `demo/`: `calmcache demo` and the bundled slow origin.
//! - `import_nginx/`: `calmcache import-nginx`, an NGINX config turned into
//!   calmcache's TOML (it reads `config/`'s names only).
//! - `manual.rs`: the man page and shell completions from the CLI's definition.
//!
//! # Errors
//! Starting, reloading and purging fail with `thiserror` enums that name
//! what went wrong ([`StartError`], [`SetupError`],
//! [`ReloadError`], [`PurgeError`], ...); `anyhow`
//! is for `main.rs` only. A message that shows its cause does not also
//! return it from `source()`, so `calmcache`'s `{:#}` prints it once
//! ([`BindError`] still does both, as before, keeping its
//! output); a config's problems are a [`ConfigError`].

#![warn(missing_docs, unreachable_pub)]

mod config;
mod demo;
mod fleet;
mod http;
mod import_nginx;
mod manual;
mod net;
mod ops;
mod proxy;
mod run;
mod telemetry;

pub use config::{Config, ConfigError, InlineSecrets};
pub use demo::fleet::{DemoError, FleetDemo};
pub use demo::origin::{
    start as start_origin, start_with_tags as start_origin_with_tags, OriginOptions, RunningOrigin,
};
pub use demo::DemoOptions;
pub use import_nginx::{import_nginx, ImportError};
pub use manual::{print_completions, print_manpage, Shell};
pub use ops::admin::{post_reload, ReloadRequestError};
pub use proxy::purge::PurgeError;
pub use proxy::setup::SetupError;
pub use proxy::tunnel::accept_for as websocket_accept;
pub use proxy::zones::ZoneTiers;
pub use run::fleet_check::{check_fleet, FleetCheckError, FleetReport};
pub use run::listen::BindError;
pub use run::preflight::load as load_config;
pub use run::reload::{ReloadError, Reloader};
pub use run::server::{raise_open_files_limit, start, start_from, start_with, Running, StartError};
pub use telemetry::access_log::AccessLog;
pub use telemetry::client_log::install as install_client_log;
pub use telemetry::log_colour::stderr_colour;
