//! calmcache: a caching reverse proxy that keeps slow origins calm.
//!
//! # Layout
//! - [`config`]: config file -> raw (serde) -> validated [`config::Config`].
//! - [`access_log`]: one line per request (`combined` or `json`), reopened for logrotate.
//! - [`server`]: listeners, connections, graceful stop; [`start`] runs a proxy.
//! - [`write_clock`], [`stream_clock`]: `send_timeout` on client writes and
//!   on HTTP/2 streams without window.
//! - [`state`]: routes bound to upstreams and zones, the single-flight table.
//! - [`edge`]: the one trusted view of a request (authority, normalised path,
//!   framing and forwarding fields), built when it arrives.
//! - [`proxy`]: the request path (lookup, refresh decision, serve or fetch).
//! - [`file_body`]: streaming large disk objects in bounded memory.
//! - [`fill`]: fetching from the origin and storing.
//! - [`tunnel`]: WebSocket upgrades, bytes relayed both ways.
//! - [`upstream`]: keepalive pools, round robin, timeouts, refresh slots.
//! - [`health`]: upstream servers' health (passive `max_fails`, active checks).
//! - [`growing`]: a body still arriving, read by every waiting request.
//! - [`inflight`]: the `max_inflight_body` budget of bodies held by fills.
//! - [`headers`]: hop-by-hop, `X-Forwarded-*`, `Age`, `Cache-Status`.
//! - [`body`]: response bodies (shared cached bytes or streams), body timeouts.
//! - [`compress`]: br/gzip encodings made once per stored object.
//! - [`conditions`]: `bypass` / `no_store` request conditions.
//! - [`key_template`]: cache key templates (`$scheme$host$uri$is_args$args`).
//! - [`range`]: `Range` / `If-Range` answered from stored responses.
//! - [`conditional`]: client preconditions, 304s, revalidation and 304 merging.
//! - [`invalidate`]: unsafe methods invalidating stored URIs (RFC 9111 §4.4).
//! - [`lookup`]: primary keys and Vary resolution; [`vary`]: secondary keys.
//! - [`respond`]: building client responses from stored objects and relays.
//! - [`error`]: proxy errors and their status codes.
//! - [`stats`]: counters; [`metrics`]: histograms, gauges, `Served`;
//!   [`admin`]: `/status`, `/metrics`, health, the dashboard.
//! - [`purge`]: purges by URL, key, prefix, tag or all, hard or soft.
//! - [`warm`]: keeping `warm` paths fresh without traffic.
//! - [`origin`]: the bundled slow origin; [`demo`]: `calmcache demo`.
//! - [`preflight`]: what `check`, `serve` and reloads check beyond the config
//!   text (zone directories writable, the access log openable).

pub mod access_log;
pub mod admin;
pub mod body;
pub mod compress;
pub mod conditional;
pub mod conditions;
pub mod config;
pub mod conn;
pub mod demo;
pub mod edge;
pub mod error;
pub mod file_body;
pub mod fill;
pub mod growing;
pub mod headers;
pub mod health;
pub mod inflight;
pub mod invalidate;
pub mod key_template;
pub mod lookup;
pub mod metrics;
pub mod origin;
pub mod preflight;
pub mod prometheus;
pub mod proxy;
pub mod purge;
pub mod range;
pub mod reload;
pub mod respond;
pub mod server;
pub mod state;
pub mod stats;
pub mod stream_clock;
pub mod tls;
pub mod tunnel;
pub mod upstream;
pub mod vary;
pub mod warm;
pub mod write_clock;

pub use server::{start, start_from, Running, StartError};
