//! Finding a request's stored response: its primary key (the route's `key`
//! template, or scheme + host + path and query without rendering for the
//! default), then the variant its `Vary`'d headers select (RFC 9111 §4.1).

use std::borrow::Cow;
use std::sync::Arc;

use calmcache_core::{CacheKey, CachedObject, Fwd, KeyRef};
use http::{HeaderMap, Method};

use crate::config::key_template::RequestView;
use crate::http::vary;
use crate::proxy::state::Route;
use calmcache_core::Zone;

/// A request's primary key, borrowed from the request when the default
/// template allows (the hit path then allocates nothing).
pub(crate) enum PrimaryKey<'a> {
    /// The default template: host (lower-cased) and path with query.
    Parts {
        /// `http` or `https`.
        scheme: &'static str,
        /// `Host`, lower-cased (borrowed when it already is).
        host: Cow<'a, str>,
        /// Path and query as requested.
        path_and_query: &'a str,
    },
    /// Any other template, rendered.
    Rendered(String),
    /// A request keyed by its body (body_key.rs): the key of the template
    /// above with the method and the body's digest appended.
    Body(CacheKey),
}

impl<'a> PrimaryKey<'a> {
    /// The key of a request for `path_and_query` with `headers` on `route`.
    pub(crate) fn of(
        route: &Route,
        scheme: &'static str,
        method: &Method,
        host: &'a str,
        path_and_query: &'a str,
        headers: &HeaderMap,
    ) -> PrimaryKey<'a> {
        if route.key_is_default {
            let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
                Cow::Owned(host.to_ascii_lowercase())
            } else {
                Cow::Borrowed(host)
            };
            return PrimaryKey::Parts {
                scheme,
                host,
                path_and_query,
            };
        }
        let view = RequestView {
            scheme,
            method,
            host,
            path_and_query,
            headers,
        };
        let mut out = String::new();
        route.cfg.storage.key.render(&view, &mut out);
        PrimaryKey::Rendered(out)
    }

    /// This key for a `method` request whose body's digest is `digest`.
    pub(crate) fn with_body(&self, method: &Method, digest: &str) -> PrimaryKey<'static> {
        PrimaryKey::Body(self.key_ref().with_body(method.as_str(), digest))
    }

    /// The borrowed form, for lookups.
    pub(crate) fn key_ref(&self) -> KeyRef<'_> {
        match self {
            PrimaryKey::Body(key) => key.as_ref(),
            PrimaryKey::Parts {
                scheme,
                host,
                path_and_query,
            } => KeyRef::new(scheme, host, path_and_query),
            PrimaryKey::Rendered(text) => KeyRef::new("", "", text),
        }
    }
}

impl std::fmt::Display for PrimaryKey<'_> {
    /// The key as `Cache-Status` shows it: `http://host/path?query`, or the
    /// rendered template; with the method and body digest of a body-keyed
    /// request after a space.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrimaryKey::Parts {
                scheme,
                host,
                path_and_query,
            } => write!(f, "{scheme}://{host}{path_and_query}"),
            PrimaryKey::Rendered(text) => f.write_str(text),
            // `http://host/graphql POST sha256:<hex>`: a header can hold no NUL.
            PrimaryKey::Body(key) => {
                let k = key.as_ref();
                let (uri, body) = k
                    .path_and_query
                    .split_once("\0v")
                    .unwrap_or((k.path_and_query, ""));
                let (method, digest) = body.split_once(':').unwrap_or((body, ""));
                if !k.scheme.is_empty() {
                    write!(f, "{}://{}", k.scheme, k.host)?;
                }
                write!(f, "{uri} {method} sha256:{digest}")
            }
        }
    }
}

/// What a lookup found.
pub(crate) struct Found {
    /// The stored response that matches the request, if any.
    pub object: Option<Arc<CachedObject>>,
    /// When nothing matched: `uri-miss` or `vary-miss`.
    pub fwd: Fwd,
    /// The variant key when the URI's responses vary (the fetch and its
    /// single flight use it instead of the primary key).
    pub variant: Option<CacheKey>,
}

/// Looks `primary` up in `zone`, resolving a Vary marker with `request`'s headers.
pub(crate) async fn lookup(
    route: &Route,
    zone: &Zone,
    primary: &KeyRef<'_>,
    request: &HeaderMap,
) -> Found {
    let Some(object) = route.get(zone, primary).await else {
        return Found {
            object: None,
            fwd: Fwd::UriMiss,
            variant: None,
        };
    };
    let Some(index) = &object.vary_index() else {
        return Found {
            object: Some(object),
            fwd: Fwd::UriMiss,
            variant: None,
        };
    };
    let key = vary::variant_key(primary, index.id, &vary::secondary(&index.names, request));
    Found {
        object: route.get(zone, &key.as_ref()).await,
        fwd: Fwd::VaryMiss,
        variant: Some(key),
    }
}
