//! Vary (RFC 9111 §4.1): which request headers select among a URI's stored
//! responses, and the secondary key built from their values.
//!
//! A URI whose responses carry `Vary` is stored as a marker under its primary
//! key (the header names, see [`calmcache_core::VaryIndex`]) plus one entry
//! per variant under `primary + generation + normalised values`. Values are
//! normalised as §4.1 allows: field lines combined, whitespace around commas
//! dropped, and `Accept-Encoding` reduced to the coding that will be chosen.

use calmcache_core::{CacheKey, KeyRef};
use http::header::{HeaderName, ACCEPT_ENCODING, VARY};
use http::HeaderMap;

/// The request header names a response varies on, lower-cased, sorted and
/// without duplicates; empty when it does not vary. `Vary: *` never reaches
/// here (such responses are not stored). With `drop_accept_encoding` (the
/// route compresses itself and asks the origin without it), Accept-Encoding
/// is left out.
pub(crate) fn names(response: &HeaderMap, drop_accept_encoding: bool) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = response
        .get_all(VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .filter(|n| !(drop_accept_encoding && n == ACCEPT_ENCODING))
        .collect();
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    names.dedup();
    names
}

/// The secondary key of a request: each named header's normalised value.
/// An absent header and an empty one are different selections.
pub(crate) fn secondary(names: &[HeaderName], request: &HeaderMap) -> String {
    let mut out = String::new();
    for name in names {
        out.push_str(name.as_str());
        let mut values = request.get_all(name).iter().peekable();
        // Accept-Encoding is reduced to the coding chosen; "none" is the same
        // selection whether the header is absent or accepts nothing we make
        // (fills forward the reduced value and drop an empty one).
        if name == ACCEPT_ENCODING {
            out.push(':');
            out.push_str(crate::http::compress::normalise_accept_encoding(values));
            out.push('\n');
            continue;
        }
        if values.peek().is_none() {
            out.push_str("!\n");
            continue;
        }
        out.push(':');
        let mut items: Vec<String> = values
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|item| item.trim().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        // Language tags are case-insensitive (RFC 4647): `De, EN` and
        // `de, en` select alike. Their order is kept: origins break ties
        // between equal weights by it.
        if name == http::header::ACCEPT_LANGUAGE {
            for item in &mut items {
                item.make_ascii_lowercase();
            }
        }
        out.push_str(&items.join(","));
        out.push('\n');
    }
    out
}

/// The key of one variant under a marker of generation `id`
/// ([`KeyRef::variant`]: the engine owns the variant key's layout).
pub(crate) fn variant_key(primary: &KeyRef<'_>, id: u64, secondary: &str) -> CacheKey {
    primary.variant(id, secondary)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http::HeaderValue;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn names_are_normalised() {
        // RFC 9111 §4.1: Vary is a list of field names, case-insensitive.
        let r = h(&[
            ("vary", "Accept-Language, accept-encoding"),
            ("vary", "Accept-Language"),
        ]);
        let n = names(&r, false);
        assert_eq!(n, ["accept-encoding", "accept-language"]);
        assert_eq!(names(&r, true), ["accept-language"]);
        assert!(names(&h(&[("vary", " ")]), false).is_empty());
    }

    #[test]
    fn secondary_keys_normalise_whitespace_and_field_lines() {
        // RFC 9111 §4.1: "combining multiple header fields... normalizing
        // both stored and presented values" is allowed.
        let n = names(&h(&[("vary", "accept-language")]), false);
        let a = secondary(&n, &h(&[("accept-language", "en,  fr")]));
        let b = secondary(
            &n,
            &h(&[("accept-language", "en"), ("accept-language", "fr")]),
        );
        assert_eq!(a, b);
        let absent = secondary(&n, &HeaderMap::new());
        let empty = secondary(&n, &h(&[("accept-language", "")]));
        assert_ne!(absent, empty);
        assert_ne!(a, secondary(&n, &h(&[("accept-language", "de")])));
        // Language lists: case does not matter, order does.
        assert_eq!(a, secondary(&n, &h(&[("accept-language", "EN, Fr")])));
        assert_ne!(a, secondary(&n, &h(&[("accept-language", "fr, en")])));
    }

    #[test]
    fn accept_encoding_is_reduced_to_the_coding_chosen() {
        let n = names(&h(&[("vary", "Accept-Encoding")]), false);
        let a = secondary(&n, &h(&[("accept-encoding", "gzip, deflate, br")]));
        let b = secondary(&n, &h(&[("accept-encoding", "br, gzip")]));
        assert_eq!(a, b);
        let c = secondary(&n, &h(&[("accept-encoding", "gzip")]));
        assert_ne!(a, c);
        let none = secondary(&n, &HeaderMap::new());
        assert_eq!(none, secondary(&n, &h(&[("accept-encoding", "identity")])));
    }

    #[test]
    fn variant_keys_stay_apart_from_uris() {
        let p = KeyRef::new("http", "h", "/a");
        let k = variant_key(&p, 7, "x:1\n");
        assert_ne!(k, p.to_owned_key());
        assert_ne!(k, variant_key(&p, 8, "x:1\n"));
    }
}
