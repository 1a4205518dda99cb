//! HTTP pieces that know nothing of routes, zones, config or the running
//! proxy: header rules (hop-by-hop, forwarding fields, `Age`,
//! `Cache-Status`), response bodies, content codings, `Vary`, preconditions
//! and validators, ranges, the proxy's errors and small canned answers.
//!
//! Owns: everything a response or request header means on its own.
//! Imports: `calmcache-core` only; nothing else of this crate (it is the
//! bottom layer, so every other folder may use it).

pub(crate) mod body;
pub(crate) mod canonical_json;
pub(crate) mod compress;
pub(crate) mod compress_passed;
pub(crate) mod conditional;
pub(crate) mod error;
pub(crate) mod file_body;
pub(crate) mod gzip_stream;
pub(crate) mod headers;
pub(crate) mod link;
pub(crate) mod paged;
pub(crate) mod range;
pub(crate) mod reply;
pub(crate) mod scheme;
pub(crate) mod static_file;
pub(crate) mod vary;

/// The QUERY method (draft-ietf-httpbis-safe-method-w-body): safe and
/// idempotent like GET, with a body like POST.
pub(crate) static QUERY: std::sync::LazyLock<http::Method> = std::sync::LazyLock::new(|| {
    http::Method::from_bytes(b"QUERY").unwrap_or_else(|_| unreachable!("QUERY is a token"))
});
