//! Property tests for the `Cache-Control` parsers: arbitrary field values
//! never panic, and directive sets written out as header text (any order,
//! case and spacing; quoted or token arguments) parse back to the same
//! [`CacheControl`] / [`RequestCacheControl`], in `Cache-Control` and in the
//! RFC 9213 targeted fields.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, PRAGMA};
use http::HeaderMap;
use proptest::prelude::*;

use super::{directives, CacheControl, RequestCacheControl, CDN_CACHE_CONTROL};

/// RFC 9111 §1.2.2: the cap on delta-seconds.
const CAP: u64 = 2_147_483_648;

fn capped(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(n.min(CAP)))
}

/// Text made of the characters the splitter cares about, so that quotes,
/// escapes, commas and `=` meet each other often.
fn directive_soup() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        r#"([a-z-]{0,16}|[ \t,=";\\]|"[^"]{0,8}"?|[0-9]{0,12}|\PC){0,12}"#,
    )
    .unwrap()
}

/// A header map holding `value` (any bytes a header value may hold) under
/// each of `names`.
fn map_with(names: &[&HeaderName], value: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(value) {
        for name in names {
            h.append((*name).clone(), v.clone());
        }
    }
    h
}

/// A delta-seconds argument as written: maybe leading zeros, maybe quoted.
#[derive(Clone, Debug)]
struct Seconds {
    value: u64,
    zeros: usize,
    quoted: bool,
}

impl Seconds {
    fn text(&self, allow_quotes: bool) -> String {
        let digits = format!("{}{}", "0".repeat(self.zeros), self.value);
        if self.quoted && allow_quotes {
            format!("\"{digits}\"")
        } else {
            digits
        }
    }
}

fn seconds() -> impl Strategy<Value = Seconds> {
    (
        prop_oneof![0..100_000u64, any::<u64>(), Just(CAP - 1), Just(CAP)],
        0..3usize,
        any::<bool>(),
    )
        .prop_map(|(value, zeros, quoted)| Seconds {
            value,
            zeros,
            quoted,
        })
}

fn field_name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,10}"
}

/// A response directive set, each directive at most once.
#[derive(Clone, Debug)]
struct ResponseSet {
    max_age: Option<Seconds>,
    s_maxage: Option<Seconds>,
    swr: Option<Seconds>,
    sie: Option<Seconds>,
    flags: [bool; 10],
    no_cache_fields: Vec<String>,
    private_fields: Vec<String>,
}

const FLAG_NAMES: [&str; 10] = [
    "no-store",
    "no-cache",
    "private",
    "public",
    "must-revalidate",
    "proxy-revalidate",
    "no-transform",
    "immutable",
    "must-understand",
    "x-unknown-extension",
];

fn response_set() -> impl Strategy<Value = ResponseSet> {
    (
        proptest::option::of(seconds()),
        proptest::option::of(seconds()),
        proptest::option::of(seconds()),
        proptest::option::of(seconds()),
        any::<[bool; 10]>(),
        proptest::collection::vec(field_name(), 0..4),
        proptest::collection::vec(field_name(), 0..4),
    )
        .prop_map(
            |(max_age, s_maxage, swr, sie, flags, no_cache_fields, private_fields)| ResponseSet {
                max_age,
                s_maxage,
                swr,
                sie,
                flags,
                no_cache_fields,
                private_fields,
            },
        )
}

impl ResponseSet {
    /// What the parser must make of it.
    fn expected(&self) -> CacheControl {
        let secs = |s: &Option<Seconds>| s.as_ref().and_then(|s| capped(s.value));
        CacheControl {
            max_age: secs(&self.max_age),
            s_maxage: secs(&self.s_maxage),
            stale_while_revalidate: secs(&self.swr),
            stale_if_error: secs(&self.sie),
            no_store: self.flags[0],
            no_cache: self.flags[1],
            private: self.flags[2],
            public: self.flags[3],
            must_revalidate: self.flags[4],
            proxy_revalidate: self.flags[5],
            no_transform: self.flags[6],
            immutable: self.flags[7],
            must_understand: self.flags[8],
            no_cache_fields: self.no_cache_fields.clone(),
            private_fields: self.private_fields.clone(),
        }
    }

    /// The directives as text, one per element; integers quoted where
    /// asked and `allow_quotes`.
    fn members(&self, allow_quotes: bool) -> Vec<String> {
        let mut out = Vec::new();
        for (name, s) in [
            ("max-age", &self.max_age),
            ("s-maxage", &self.s_maxage),
            ("stale-while-revalidate", &self.swr),
            ("stale-if-error", &self.sie),
        ] {
            if let Some(s) = s {
                out.push(format!("{name}={}", s.text(allow_quotes)));
            }
        }
        for (name, on) in FLAG_NAMES.iter().zip(self.flags) {
            if on {
                out.push((*name).to_owned());
            }
        }
        for (name, fields) in [
            ("no-cache", &self.no_cache_fields),
            ("private", &self.private_fields),
        ] {
            if !fields.is_empty() {
                out.push(format!("{name}=\"{}\"", fields.join(", ")));
            }
        }
        out
    }
}

/// Shuffles `members` by `order`, changes the case of each name by `case`
/// (when `mixed_case`), and joins them with the separators in `seps`.
fn write_out(
    mut members: Vec<String>,
    order: &[usize],
    case: &[bool],
    seps: &[&str],
    mixed_case: bool,
) -> String {
    for (i, &j) in order.iter().enumerate() {
        let n = members.len();
        if n > 1 {
            members.swap(i % n, j % n);
        }
    }
    let mut out = String::new();
    for (i, m) in members.iter().enumerate() {
        if i > 0 {
            out.push_str(seps[i % seps.len()]);
        }
        let (name, rest) = m.split_at(m.find('=').unwrap_or(m.len()));
        if mixed_case && case[i % case.len()] {
            out.push_str(&name.to_ascii_uppercase());
        } else {
            out.push_str(name);
        }
        out.push_str(rest);
    }
    out
}

fn layout() -> impl Strategy<Value = (Vec<usize>, Vec<bool>, Vec<&'static str>)> {
    (
        proptest::collection::vec(0..32usize, 0..16),
        proptest::collection::vec(any::<bool>(), 1..8),
        proptest::collection::vec(
            prop_oneof![Just(","), Just(", "), Just(" ,\t"), Just(",,")],
            1..4,
        ),
    )
}

/// A request directive set, each directive at most once.
#[derive(Clone, Debug)]
struct RequestSet {
    max_age: Option<Seconds>,
    /// `Some(None)`: a bare `max-stale`.
    max_stale: Option<Option<Seconds>>,
    min_fresh: Option<Seconds>,
    no_cache: bool,
    no_store: bool,
    only_if_cached: bool,
}

fn request_set() -> impl Strategy<Value = RequestSet> {
    (
        proptest::option::of(seconds()),
        proptest::option::of(proptest::option::of(seconds())),
        proptest::option::of(seconds()),
        any::<[bool; 3]>(),
    )
        .prop_map(
            |(max_age, max_stale, min_fresh, [no_cache, no_store, only_if_cached])| RequestSet {
                max_age,
                max_stale,
                min_fresh,
                no_cache,
                no_store,
                only_if_cached,
            },
        )
}

impl RequestSet {
    fn expected(&self) -> RequestCacheControl {
        let secs = |s: &Option<Seconds>| s.as_ref().and_then(|s| capped(s.value));
        RequestCacheControl {
            max_age: secs(&self.max_age),
            max_stale: self.max_stale.as_ref().map(secs),
            min_fresh: secs(&self.min_fresh),
            no_cache: self.no_cache,
            no_store: self.no_store,
            only_if_cached: self.only_if_cached,
        }
    }

    fn members(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, s) in [("max-age", &self.max_age), ("min-fresh", &self.min_fresh)] {
            if let Some(s) = s {
                out.push(format!("{name}={}", s.text(true)));
            }
        }
        match &self.max_stale {
            Some(Some(s)) => out.push(format!("max-stale={}", s.text(true))),
            Some(None) => out.push("max-stale".to_owned()),
            None => {}
        }
        for (name, on) in [
            ("no-cache", self.no_cache),
            ("no-store", self.no_store),
            ("only-if-cached", self.only_if_cached),
        ] {
            if on {
                out.push(name.to_owned());
            }
        }
        out
    }
}

proptest! {
    /// Any text, and any bytes a header value may hold, in any of the
    /// fields: no panic, and a field that is not text sets nothing.
    #[test]
    fn arbitrary_values_never_panic(
        text in prop_oneof![directive_soup(), any::<String>()],
        bytes in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        let _ = CacheControl::parse([text.as_str()]);
        let _: Vec<_> = directives(&text).collect();
        for value in [text.as_bytes(), &bytes[..]] {
            let _ = CacheControl::for_response(&map_with(
                &[&super::CALMCACHE_CACHE_CONTROL, &CDN_CACHE_CONTROL, &CACHE_CONTROL],
                value,
            ));
            let _ = RequestCacheControl::from_headers(&map_with(&[&CACHE_CONTROL], value));
            let _ = RequestCacheControl::from_headers(&map_with(&[&PRAGMA], value));
            if HeaderValue::from_bytes(value).is_ok_and(|v| v.to_str().is_err()) {
                // Not visible ASCII: as if the field were absent.
                let h = map_with(&[&CDN_CACHE_CONTROL, &CACHE_CONTROL], value);
                prop_assert_eq!(CacheControl::for_response(&h), (CacheControl::default(), false));
                prop_assert!(RequestCacheControl::from_headers(&h).is_empty());
            }
        }
    }

    /// `directives` yields non-empty, lower-cased names, and never more
    /// directives than the value has commas plus one.
    #[test]
    fn directives_are_named_and_bounded(text in directive_soup()) {
        let all: Vec<_> = directives(&text).collect();
        prop_assert!(all.len() <= text.matches(',').count() + 1, "{:?}", all);
        for (name, _) in &all {
            prop_assert!(!name.is_empty());
            prop_assert_eq!(name, &name.to_ascii_lowercase());
        }
    }

    /// A response directive set written as `Cache-Control` text, in any
    /// order, case and list spacing, split over one or two field lines,
    /// parses back to itself.
    #[test]
    fn response_directives_round_trip(
        set in response_set(),
        (order, case, seps) in layout(),
        split_at in 0..12usize,
    ) {
        let members = set.members(true);
        let line = write_out(members.clone(), &order, &case, &seps, true);
        prop_assert_eq!(CacheControl::parse([line.as_str()]), set.expected(), "{}", line);

        // Over two field lines (a list may be split anywhere between members).
        let (a, b) = members.split_at(split_at.min(members.len()));
        let (a, b) = (a.join(", "), b.join(", "));
        prop_assert_eq!(CacheControl::parse([a.as_str(), b.as_str()]), set.expected());
        let mut h = HeaderMap::new();
        for part in [&a, &b] {
            h.append(CACHE_CONTROL, HeaderValue::from_str(part).unwrap());
        }
        prop_assert_eq!(CacheControl::for_response(&h), (set.expected(), false));
    }

    /// The same set in `CDN-Cache-Control`, written as a Structured Fields
    /// dictionary (lower-case keys, bare integers), wins over a
    /// `Cache-Control` that says otherwise; one with a quoted integer is
    /// invalid as a whole and `Cache-Control` is used (RFC 9213 §2.1).
    #[test]
    fn targeted_directives_round_trip(
        set in response_set(),
        (order, case, _) in layout(),
    ) {
        // RFC 8941 §4.2.2: members separated by OWS "," OWS; no empty ones.
        let members = set.members(false);
        let line = write_out(members, &order, &case, &[", "], false);
        let mut h = HeaderMap::new();
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store, max-age=1"));
        h.insert(&CDN_CACHE_CONTROL, HeaderValue::from_str(&line).unwrap());
        let fallback = CacheControl::parse(["no-store, max-age=1"]);
        let got = CacheControl::for_response(&h);
        if line.is_empty() {
            // RFC 9213 §2.1: an empty targeted field is ignored.
            prop_assert_eq!(got, (fallback, false));
        } else {
            prop_assert_eq!(got, (set.expected(), true), "{}", line);
            // A quoted integer is the wrong type: the field is invalid.
            let bad = format!("{line}, max-age=\"5\"");
            h.insert(&CDN_CACHE_CONTROL, HeaderValue::from_str(&bad).unwrap());
            prop_assert_eq!(CacheControl::for_response(&h), (fallback, false), "{}", bad);
        }
    }

    /// A request directive set written as `Cache-Control` parses back to
    /// itself; `Pragma` counts only without `Cache-Control` (RFC 9111 §5.4).
    #[test]
    fn request_directives_round_trip(
        set in request_set(),
        (order, case, seps) in layout(),
    ) {
        let line = write_out(set.members(), &order, &case, &seps, true);
        let mut h = HeaderMap::new();
        h.insert(CACHE_CONTROL, HeaderValue::from_str(&line).unwrap());
        h.insert(PRAGMA, HeaderValue::from_static("no-cache"));
        let got = RequestCacheControl::from_headers(&h);
        prop_assert_eq!(&got, &set.expected(), "{}", line);
        prop_assert_eq!(got.is_empty(), set.members().is_empty());
        h.remove(CACHE_CONTROL);
        prop_assert!(RequestCacheControl::from_headers(&h).no_cache);
    }

    /// A quoted argument may hold commas, `=` and escaped quotes: it stays
    /// one directive, unescaped, and the directive after it is still seen.
    #[test]
    fn quoted_arguments_do_not_split(content in r#"[a-z ,=;\\"]{0,24}"#) {
        let escaped: String = content
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let value = format!("ext=\"{escaped}\", max-age=7");
        let all: Vec<_> = directives(&value).collect();
        prop_assert_eq!(
            all,
            vec![
                ("ext".to_owned(), Some(content.clone())),
                ("max-age".to_owned(), Some("7".to_owned())),
            ]
        );
    }
}
