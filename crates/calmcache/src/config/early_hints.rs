//! A route's 103 Early Hints settings (`early_hints`, `early_hints_links`,
//! `early_hints_origins`), as validated.
//!
//! Owns the type only; the checks are `validate/early_hints.rs`'s, the
//! sending the request path's and the network layer's.

use http::HeaderValue;

/// How a route hints navigations that wait for the origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarlyHintsConfig {
    /// Send 103 Early Hints at all (default true).
    pub on: bool,
    /// The route's own `Link` values, hinted on every waiting navigation
    /// (each `<target>; rel=preload|modulepreload|preconnect...`).
    pub links: Vec<HeaderValue>,
    /// Other origins (`https://cdn.example`, lower-case, no path) whose
    /// links from a stored answer may be hinted; by default only links to
    /// the page's own origin are.
    pub origins: Vec<String>,
}

impl Default for EarlyHintsConfig {
    fn default() -> Self {
        EarlyHintsConfig {
            on: crate::config::defaults::route::EARLY_HINTS,
            links: Vec::new(),
            origins: Vec::new(),
        }
    }
}
