//! The request path: from a request to an answer, through the cache. The
//! edge's one view of a request, lookup (primary key, Vary), the refresh
//! decision, fetches coalesced in flight and filled from the origin,
//! bodies read while they arrive, responses from stored objects, WebSocket
//! tunnels, invalidation, purges and warm-up; the state one generation of
//! the config runs on.
//!
//! Owns: what a request does to the cache and what it answers. Imports:
//! [`crate::http`], [`crate::config`], [`crate::telemetry`], [`crate::net`];
//! never [`crate::ops`] or [`crate::run`].

pub mod edge;
pub mod fill;
pub mod growing;
pub mod handle;
pub mod invalidate;
pub mod lookup;
pub mod outcome;
pub mod purge;
pub mod respond;
pub mod setup;
pub mod state;
pub mod tunnel;
pub mod warm;
pub mod zones;
