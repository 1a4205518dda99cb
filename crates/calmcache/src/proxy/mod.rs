//! The request path: from a request to an answer, through the cache. The
//! edge's one view of a request, lookup (primary key, Vary), the refresh
//! decision, fetches coalesced in flight and filled from the origin,
//! bodies read while they arrive, responses from stored objects, WebSocket
//! tunnels, routes that answer without the origin (`return`, files:
//! answering/), invalidation, purges and warm-up; the state one generation of
//! the config runs on.
//!
//! Owns: what a request does to the cache and what it answers. Imports:
//! [`crate::http`], [`crate::config`], [`crate::telemetry`], [`crate::net`];
//! never [`crate::ops`] or [`crate::run`].

pub(crate) mod answer;
pub(crate) mod answering;
pub(crate) mod background;
pub(crate) mod body_key;
pub(crate) mod carry;
pub(crate) mod edge;
pub(crate) mod error_pages;
pub(crate) mod fetch;
pub(crate) mod fill;
pub(crate) mod growing;
pub(crate) mod growing_range;
pub(crate) mod handle;
pub(crate) mod header_rules;
pub(crate) mod hint_memory;
pub(crate) mod hints;
pub(crate) mod invalidate;
pub(crate) mod limit;
pub(crate) mod lookup;
pub(crate) mod orphan;
pub(crate) mod outcome;
pub(crate) mod pass;
pub(crate) mod plan;
pub(crate) mod purge;
pub(crate) mod range_fetch;
pub(crate) mod request_body;
pub(crate) mod respond;
pub(crate) mod setup;
pub(crate) mod state;
pub(crate) mod tunnel;
pub(crate) mod warm;
pub(crate) mod zones;
