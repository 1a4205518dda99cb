//! Invalidation after unsafe methods (RFC 9111 §4.4): a non-error response to
//! POST, PUT, DELETE, PATCH (any method not known to be safe) removes the
//! stored responses for the target URI and for same-origin `Location` and
//! `Content-Location` URIs. Removing a URI's primary entry removes all its
//! variants with it: they hang off the Vary marker's generation.

use http::header::{CONTENT_LOCATION, LOCATION};
use http::{HeaderMap, Method, Request, StatusCode, Uri};

use crate::http::headers::host_of;
use crate::proxy::lookup::PrimaryKey;
use crate::proxy::state::Proxy;

/// What an unsafe request may invalidate, captured before its body is sent.
pub(crate) struct Target {
    scheme: &'static str,
    host: String,
    path_and_query: String,
    headers: HeaderMap,
}

impl Target {
    /// `Some` for a request whose method is not safe (RFC 9110 §9.2.1;
    /// QUERY is safe, draft-ietf-httpbis-safe-method-w-body).
    pub(crate) fn of<B>(req: &Request<B>, scheme: &'static str) -> Option<Target> {
        if matches!(
            *req.method(),
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        ) || *req.method() == *crate::http::QUERY
        {
            return None;
        }
        Some(Target {
            scheme,
            host: host_of(req).to_owned(),
            path_and_query: req
                .uri()
                .path_and_query()
                .map_or("/", |pq| pq.as_str())
                .to_owned(),
            headers: req.headers().clone(),
        })
    }

    /// Invalidates after the response arrived with `status` and `headers`.
    pub(crate) async fn apply(&self, proxy: &Proxy, status: StatusCode, headers: &HeaderMap) {
        // §4.4: "a non-error status code" (2xx or 3xx).
        if !(status.is_success() || status.is_redirection()) {
            return;
        }
        self.remove(proxy, &self.path_and_query).await;
        for name in [LOCATION, CONTENT_LOCATION] {
            let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) else {
                continue;
            };
            if let Some(pq) = self.same_origin_path(value) {
                self.remove(proxy, &pq).await;
            }
        }
    }

    /// The path and query of `reference` when it names this origin
    /// (§4.4: only same-origin URIs, to stop denial-of-service by a third party).
    fn same_origin_path(&self, reference: &str) -> Option<String> {
        // RFC 3986 §5.2.2: the fragment is never part of the target.
        let reference = reference.split('#').next().unwrap_or("");
        let base = self.path_and_query.split('?').next().unwrap_or("/");
        if let Some(rest) = reference.strip_prefix("//") {
            // Network-path reference: same host (any port spelling as sent).
            let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
            if !self.is_host(authority) {
                return None;
            }
            return Some(if path.is_empty() {
                "/".to_owned()
            } else {
                resolve("", path)
            });
        }
        if has_scheme(reference) {
            let uri: Uri = reference.parse().ok()?;
            let authority = uri.authority()?;
            let same = self.is_host(authority.as_str()) && uri.scheme_str() == Some(self.scheme);
            return same.then(|| {
                uri.path_and_query()
                    .map_or("/", |pq| pq.as_str())
                    .to_owned()
            });
        }
        if reference.is_empty() {
            return Some(self.path_and_query.clone());
        }
        if reference.starts_with('?') {
            return Some(format!("{base}{reference}"));
        }
        if reference.starts_with('/') {
            return Some(resolve("", reference));
        }
        Some(resolve(base, reference))
    }

    /// `authority` names this request's host (as the edge normalises hosts:
    /// case, a trailing dot and the default port do not matter).
    fn is_host(&self, authority: &str) -> bool {
        crate::proxy::edge::normalise_host(authority, self.scheme).is_ok_and(|h| *h == *self.host)
    }

    async fn remove(&self, proxy: &Proxy, path_and_query: &str) {
        // Keyed as a request for it would be (edge.rs).
        let Ok(path_and_query) = crate::proxy::edge::normalise_target(path_and_query) else {
            return;
        };
        let path_and_query = path_and_query.as_str();
        let Some(route) = proxy.routes.iter().find(|r| r.cfg.matches(path_and_query)) else {
            return;
        };
        if route.zone.is_none() {
            return;
        }
        let key = PrimaryKey::of(
            route,
            self.scheme,
            &Method::GET,
            &self.host,
            path_and_query,
            &self.headers,
        );
        if route.remove(&key.key_ref()).await {
            route.activity.invalidations.inc();
            tracing::debug!(route = %route.cfg.name, path = %path_and_query, "invalidated");
        }
    }
}

/// RFC 3986 §3.1: `scheme ":"`, scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
fn has_scheme(reference: &str) -> bool {
    let Some((scheme, _)) = reference.split_once(':') else {
        return false;
    };
    let mut bytes = scheme.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        && !scheme.contains('/')
}

/// Resolves a relative path reference against `base` (RFC 3986 §5.2.2-5.2.4,
/// path-only): merged with the base's directory, dot segments removed.
fn resolve(base: &str, reference: &str) -> String {
    let (reference, query) = match reference.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (reference, None),
    };
    let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
    let merged = format!("{dir}{reference}");
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = merged.split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." => {}
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
            }
            s => out.push(s),
        }
        // A trailing "." or ".." leaves a directory path.
        if i == last && matches!(*segment, "." | "..") {
            out.push("");
        }
    }
    let mut path = out.join("/");
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    }
}

#[cfg(test)]
mod tests {
    use super::{resolve, Target};

    #[test]
    fn relative_references_resolve_against_the_request_path() {
        // RFC 3986 §5.4.1 examples, path part (base /b/c/d;p).
        let base = "/b/c/d;p";
        for (reference, want) in [
            ("g", "/b/c/g"),
            ("./g", "/b/c/g"),
            ("g/", "/b/c/g/"),
            ("g?y", "/b/c/g?y"),
            (".", "/b/c/"),
            ("..", "/b/"),
            ("../g", "/b/g"),
            ("../..", "/"),
            ("../../../g", "/g"),
        ] {
            assert_eq!(resolve(base, reference), want, "{reference}");
        }
    }

    #[test]
    fn references_of_every_form() {
        // RFC 3986 §5.4.1, from a request for /b/c/d;p?q on host "a".
        let target = Target {
            scheme: "http",
            host: "a".into(),
            path_and_query: "/b/c/d;p?q".into(),
            headers: http::HeaderMap::new(),
        };
        for (reference, want) in [
            ("g#s", Some("/b/c/g")),
            ("?y", Some("/b/c/d;p?y")),
            ("", Some("/b/c/d;p?q")),
            ("#s", Some("/b/c/d;p?q")),
            ("//a/g", Some("/g")),
            ("//other/g", None),
            ("http://a/g?x", Some("/g?x")),
            ("http://other/g", None),
            ("https://a/g", None),
            ("mailto:x@a", None),
            ("/g", Some("/g")),
            ("é/../x", Some("/b/c/x")),
        ] {
            assert_eq!(
                target.same_origin_path(reference).as_deref(),
                want,
                "{reference:?}"
            );
        }
    }
}
