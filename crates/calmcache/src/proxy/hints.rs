//! 103 Early Hints on the request path: which requests get one (a
//! navigation about to wait for the origin on a route with `early_hints`),
//! with which links (the route's `early_hints_links`, then the waiting
//! stale copy's, or else those remembered of the last answer stored for
//! the URL; kept in each route's `hint_memory`).
//!
//! Links to other origins are dropped unless the route names the origin
//! (`early_hints_origins`). Nothing here touches a hit: [`before_wait`] is
//! called only on the paths that wait for the origin, [`remember`] only
//! after a fetch stored an answer. The bytes are [`crate::net::early_hints`]'s.

use calmcache_core::{CachedObject, KeyRef};
use http::header::{ACCEPT, AUTHORIZATION, LINK};
use http::{HeaderMap, HeaderValue, Version};

use crate::config::early_hints::EarlyHintsConfig;
use crate::http::link;
use crate::net::early_hints;
use crate::proxy::hint_memory::MAX_LINKS;
use crate::proxy::state::Route;

/// What a hint needs to know of the request.
pub(crate) struct Asking<'a> {
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// `http` or `https`: for scheme-relative and own-origin targets.
    pub scheme: &'a str,
    /// The request's host (as admitted).
    pub host: &'a str,
    /// Its primary key.
    pub key: KeyRef<'a>,
}

/// A navigation (RFC 8297 §2 via the HTML fetch standard: the document a
/// browser loads): HTML accepted and `Sec-Fetch-Mode: navigate`; on
/// HTTP/2 also a request without fetch metadata at all. On HTTP/1.1 the
/// mode is required: clients there that are not browsers (Python's
/// `http.client`, so urllib3 and requests) take any 1xx but 100 as the
/// final answer and leave the real one in the pooled connection, and
/// Chromium ignores a 103 on HTTP/1.1 anyway. Never one carrying
/// credentials the cache does not share (`Authorization`). `version`:
/// the client's (`None`: no hint can be sent).
fn is_navigation(headers: &HeaderMap, version: Option<Version>) -> bool {
    let html = headers
        .get_all(ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("text/html")));
    let mode = headers.get("sec-fetch-mode");
    let navigate = match version {
        Some(Version::HTTP_2) => mode.is_none_or(|m| m == "navigate"),
        Some(_) => mode.is_some_and(|m| m == "navigate"),
        None => false,
    };
    html && navigate && !headers.contains_key(AUTHORIZATION)
}

/// Offers a 103 to a request about to wait for the origin, with the
/// waiting `stale` copy if any. Counted when it is sent.
pub(crate) fn before_wait(route: &Route, asking: &Asking<'_>, stale: Option<&CachedObject>) {
    let cfg = &route.cfg.answers.early_hints;
    if !cfg.on || !is_navigation(asking.headers, early_hints::version()) {
        return;
    }
    let mut links = cfg.links.clone();
    match stale {
        Some(copy) => {
            let page = (asking.scheme, asking.host);
            links.extend(hintable(cfg, page, copy.head.get_all(&LINK)));
        }
        None => {
            let hash = calmcache_core::key::key_hash(&asking.key);
            let origin = format!("{}://{}", asking.scheme, asking.host);
            if let Some(known) = route.hints.get(hash, &origin) {
                links.extend(known.iter().cloned());
            }
        }
    }
    dedup(&mut links);
    links.truncate(MAX_LINKS);
    if early_hints::offer(&links) {
        route.activity.early_hints.inc();
    }
}

/// Remembers the hint links of an answer just stored for the request.
pub(crate) fn remember(route: &Route, asking: &Asking<'_>, stored: &HeaderMap) {
    let cfg = &route.cfg.answers.early_hints;
    if !cfg.on {
        return;
    }
    let fields = stored.get_all(LINK).iter().map(HeaderValue::as_bytes);
    let mut links = hintable(cfg, (asking.scheme, asking.host), fields);
    dedup(&mut links);
    links.truncate(MAX_LINKS);
    let origin = format!("{}://{}", asking.scheme, asking.host);
    let hash = calmcache_core::key::key_hash(&asking.key);
    route.hints.put(hash, &origin, links);
}

/// On a request passed to the origin uncached: a navigation's origin may
/// answer 103 Early Hints itself; they are relayed to the client, their
/// links filtered as the stored ones are (hyper's client sees the 1xx on
/// the upstream connection's task: the request's hint handle goes along).
pub(crate) fn relay_origin_hints<B>(route: &Route, req: &mut http::Request<B>, scheme: &str) {
    let cfg = &route.cfg.answers.early_hints;
    if !cfg.on {
        return;
    }
    let Some(hinter) = early_hints::current() else {
        return;
    };
    if !is_navigation(req.headers(), Some(hinter.version())) {
        return;
    }
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let (cfg, scheme, activity) = (cfg.clone(), scheme.to_owned(), route.activity.clone());
    hyper::ext::on_informational(req, move |res| {
        if res.status() != http::StatusCode::EARLY_HINTS {
            return;
        }
        let fields = res
            .headers()
            .get_all(LINK)
            .iter()
            .map(HeaderValue::as_bytes);
        let mut links = hintable(&cfg, (&scheme, &host), fields);
        dedup(&mut links);
        links.truncate(MAX_LINKS);
        if hinter.offer(&links) {
            activity.early_hints.inc();
        }
    });
}

/// The link-values of `fields` a hint may carry: a hint relation, and a
/// target on the page's own origin or one of the route's origins.
fn hintable<'a>(
    cfg: &EarlyHintsConfig,
    (scheme, host): (&str, &str),
    fields: impl Iterator<Item = &'a [u8]>,
) -> Vec<HeaderValue> {
    let own = format!("{scheme}://{host}");
    let mut out = Vec::new();
    for field in fields.filter_map(|f| std::str::from_utf8(f).ok()) {
        for value in link::values(field).filter(|v| link::is_hint(v)) {
            let Some(target) = link::target(value) else {
                continue;
            };
            let allowed = match link::origin_of(target) {
                None => true,
                Some(origin) => {
                    origin.is(scheme, &own) || cfg.origins.iter().any(|o| origin.is(scheme, o))
                }
            };
            if let (true, Ok(value)) = (allowed, HeaderValue::from_str(value)) {
                out.push(value);
            }
        }
    }
    out
}

/// Drops repeated links, keeping the first of each.
fn dedup(links: &mut Vec<HeaderValue>) {
    let mut seen = Vec::with_capacity(links.len());
    links.retain(|l| {
        let new = !seen.contains(l);
        if new {
            seen.push(l.clone());
        }
        new
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn navigations_are_html_with_navigate_or_on_h2_no_fetch_metadata() {
        let (h1, h2) = (Some(Version::HTTP_11), Some(Version::HTTP_2));
        let mut h = HeaderMap::new();
        assert!(!is_navigation(&h, h2));
        h.insert(ACCEPT, HeaderValue::from_static("text/html,*/*;q=0.8"));
        assert!(is_navigation(&h, h2));
        // HTTP/1.1 clients without fetch metadata may not handle a 103.
        assert!(!is_navigation(&h, h1));
        assert!(!is_navigation(&h, Some(Version::HTTP_10)));
        h.insert("sec-fetch-mode", HeaderValue::from_static("navigate"));
        assert!(is_navigation(&h, h2));
        assert!(is_navigation(&h, h1));
        assert!(!is_navigation(&h, None));
        h.insert("sec-fetch-mode", HeaderValue::from_static("cors"));
        assert!(!is_navigation(&h, h2));
        assert!(!is_navigation(&h, h1));
        h.remove("sec-fetch-mode");
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic eDp5"));
        assert!(!is_navigation(&h, h2));
    }

    #[test]
    fn only_hint_relations_to_allowed_origins_are_kept() {
        let mut cfg = EarlyHintsConfig::default();
        let field = b"</a.css>; rel=preload; as=style, </next>; rel=next, \
            <https://shop.example/b.js>; rel=modulepreload, \
            <https://cdn.example/c.css>; rel=preload, <https://fonts.example>; rel=preconnect";
        let kept = hintable(&cfg, ("https", "shop.example"), [&field[..]].into_iter());
        assert_eq!(
            kept,
            [
                "</a.css>; rel=preload; as=style",
                "<https://shop.example/b.js>; rel=modulepreload"
            ]
        );
        cfg.origins.push("https://cdn.example".into());
        let kept = hintable(&cfg, ("https", "shop.example"), [&field[..]].into_iter());
        assert_eq!(kept.len(), 3);
        assert_eq!(kept[2], "<https://cdn.example/c.css>; rel=preload");
    }
}
