//! Test fixtures for calmcache: a steerable origin that counts and records its
//! requests, an in-process proxy built from a few lines of TOML, and a small
//! client.
//!
//! # Layout
//! - [`origin`]: [`Origin`], steered per request by `x-origin-*` headers,
//!   answering conditionals like a real server; [`RecordedRequest`]s.
//! - [`proxy`]: [`Proxy`], a running calmcache on `127.0.0.1:0` with its admin listener.
//! - [`client`]: [`request`], [`get`] and [`Reply`] (with the parsed
//!   `Cache-Status`, [`CacheStatusParams`]), one request with timing.
//! - [`date`]: IMF-fixdate formatting and parsing.
//! - [`raw`]: byte-level HTTP for hostile inputs: [`raw::RawRecorder`] (an
//!   origin judging the exact bytes it gets), [`raw::send_raw`] and
//!   [`raw::RawConn`] (HTTP/1 written byte for byte), [`raw::h2::H2Conn`]
//!   (HTTP/2 frames and header blocks built by hand).
//! - [`tls`]: a test CA, leaf certificates by name, a TLS client (with a
//!   client certificate, or without).
//! - [`wire`]: one request over HTTP/1.1, h2c or HTTP/2 over TLS; [`Wires`],
//!   a proxy listening all three ways.
//! - [`tier`]: [`CountingTier`], a third kind of tier that counts what it
//!   is asked, plugged into a zone through the `Tier` trait.
//! - [`redis`]: real `redis-server` processes on free loopback ports
//!   ([`redis::Redis`]: killed, restarted or hung on demand;
//!   [`redis::RedisCluster`]: three masters), killed when dropped; either
//!   speaks TLS only on demand, with a throw-away CA's certificates
//!   ([`redis::RedisTls`]), client certificates required or not.
//! - [`delay_proxy`]: [`DelayProxy`], a TCP proxy on `127.0.0.1:0` in front
//!   of one address that adds a one-way delay and jitter per chunk (bytes
//!   stay in order), holds everything in a blackhole, or resets every
//!   connection; changed while it runs.
//! - [`netns`]: [`NetNs`], a network namespace joined by a veth pair on a
//!   /30 of 198.18.0.0/15 (RFC 2544), whose link goes down and up with
//!   connections open; [`redis::Redis::start_in`] runs a server inside.
//!
//! - [`wait`]: [`wait_until`], the one way a test waits for a condition
//!   (polled, with a deadline, failing with what was awaited).
//!
//! # Failing links (fleet mode, issue 14)
//! A slow or silent link needs no privilege: put a [`DelayProxy`] between
//! the node and its peer. A real partition does: [`NetNs`] needs root and
//! iproute2 (`./scripts/test` installs it), and a test that uses it starts
//! with `let Some(ns) = NetNs::create_or_skip() else { return };`, which
//! prints `skipped: cannot create network namespaces (needs root and
//! iproute2): <reason> [<test>]` where it cannot, and fails the test under
//! `CI=true`. Only loopback and the namespaces' /30s are ever dialled.
//!
//! # Debian tools
//! [`tools::debian_tool`] finds a program such as `promtool` or
//! `systemd-analyze` on `PATH`, or skips the test with a note (fails it
//! under `CI=true`), the same rule as [`NetNs`].

#![warn(missing_docs, unreachable_pub)]

pub mod client;
pub mod date;
pub mod delay_proxy;
pub mod netns;
pub mod origin;
pub mod proxy;
pub mod raw;
pub mod redis;
pub mod tier;
pub mod tls;
pub mod tools;
pub mod wait;
pub mod wire;

pub use client::{get, get_with, request, request_with_body, CacheStatusParams, Reply};
pub use date::{http_date, http_date_ago, http_date_in, parse_http_date};
pub use delay_proxy::DelayProxy;
pub use netns::NetNs;
pub use origin::{stream_byte, Origin, RecordedRequest};
pub use proxy::{Proxy, RunningProxy};
pub use tier::{CountingTier, TierCounts};
pub use wait::wait_until;
pub use wire::{Wire, Wires};
