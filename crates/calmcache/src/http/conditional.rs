//! Conditional requests (RFC 9110 §13): evaluating a client's preconditions
//! against a stored response, building the 304 it gets, the validators a
//! revalidation sends upstream, and merging a 304 from the origin into the
//! stored response (RFC 9111 §4.3.4, §3.2).
//!
//! It owns entity-tags ([`EntityTag`], RFC 9110 §8.8.3): their parsing,
//! strong and weak comparison and `If-Match`/`If-None-Match` list matching,
//! for preconditions here, `If-Range` (range.rs) and the weak tag of an
//! encoded variant (compress.rs). Dates are read by the engine's
//! [`parse_date`], the one HTTP-date parser.

use std::time::SystemTime;

use calmcache_core::freshness::parse_date;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::http::headers::trim_ows;

/// What a request's preconditions say about answering it from a representation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// No precondition, or all passed: send the representation.
    Proceed,
    /// `If-None-Match` / `If-Modified-Since` matched: 304 (RFC 9110 §13.1.2-3).
    NotModified,
    /// `If-Match` / `If-Unmodified-Since` failed: 412 (RFC 9110 §13.1.1, §13.1.4).
    Failed,
}

/// True when the request carries any precondition (cheap check for the hit path).
pub(crate) fn has_preconditions(request: &HeaderMap) -> bool {
    request.contains_key(header::IF_NONE_MATCH)
        || request.contains_key(header::IF_MODIFIED_SINCE)
        || request.contains_key(header::IF_MATCH)
        || request.contains_key(header::IF_UNMODIFIED_SINCE)
}

/// RFC 9110 §13.2.2: evaluates the preconditions of a GET or HEAD in order
/// against the representation's `ETag` and `Last-Modified` in `response`.
pub(crate) fn evaluate(request: &HeaderMap, response: &HeaderMap) -> Precondition {
    let etag = etag_of(response);
    let modified = response
        .get(header::LAST_MODIFIED)
        .and_then(|v| parse_date(v.as_bytes()));
    // Step 1-2: If-Match, else If-Unmodified-Since.
    if request.contains_key(header::IF_MATCH) {
        let lines = request.get_all(header::IF_MATCH).iter();
        if !list_matches(lines, etag, Comparison::Strong) {
            return Precondition::Failed;
        }
    } else if let (Some(since), Some(modified)) =
        (date(request, &header::IF_UNMODIFIED_SINCE), modified)
    {
        if modified > since {
            return Precondition::Failed;
        }
    }
    // Step 3-4: If-None-Match, else If-Modified-Since.
    if request.contains_key(header::IF_NONE_MATCH) {
        let lines = request.get_all(header::IF_NONE_MATCH).iter();
        if list_matches(lines, etag, Comparison::Weak) {
            return Precondition::NotModified;
        }
        return Precondition::Proceed;
    }
    if let (Some(since), Some(modified)) = (date(request, &header::IF_MODIFIED_SINCE), modified) {
        if modified <= since {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// A valid single HTTP-date; an invalid one makes the header ignored (§13.1.3-4).
fn date(request: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    let mut values = request.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_date(first.as_bytes())
}

/// An entity-tag (RFC 9110 §8.8.3): `[ "W/" ] opaque-tag`.
///
/// Read as leniently as clients echo what origins send: the opaque part is
/// whatever follows `W/`, so an unquoted `abc` compares equal to itself (as
/// NGINX compares them). [`EntityTag::is_valid`] tells whether it has the
/// RFC's syntax, `DQUOTE *etagc DQUOTE`; `If-Range` and the weak tag of an
/// encoded variant require it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntityTag<'a> {
    weak: bool,
    /// The opaque-tag, quotes included when it has them.
    opaque: &'a [u8],
}

/// How two entity-tags are compared (RFC 9110 §8.8.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Comparison {
    /// Neither weak, and the opaque-tags equal (`If-Match`, `If-Range`).
    Strong,
    /// The opaque-tags equal, weak or not (`If-None-Match`, a 304's fit).
    Weak,
}

impl<'a> EntityTag<'a> {
    /// The tag in `text`, exactly as given: a caller trims the OWS around a
    /// field value (hyper's field values have none). `W/` is
    /// case-sensitive (§8.8.3).
    pub(crate) fn parse(text: &'a [u8]) -> EntityTag<'a> {
        match text.strip_prefix(b"W/") {
            Some(opaque) => EntityTag { weak: true, opaque },
            None => EntityTag {
                weak: false,
                opaque: text,
            },
        }
    }

    /// The tag in `text` when it is a valid entity-tag, else `None`.
    pub(crate) fn parse_valid(text: &'a [u8]) -> Option<EntityTag<'a>> {
        Some(EntityTag::parse(text)).filter(|tag| tag.is_valid())
    }

    /// `W/` was given: the tag is a weak validator (§8.8.1).
    pub(crate) fn is_weak(self) -> bool {
        self.weak
    }

    /// RFC 9110 §8.8.3: `opaque-tag = DQUOTE *etagc DQUOTE`, `etagc = %x21
    /// / %x23-7E / obs-text`.
    pub(crate) fn is_valid(self) -> bool {
        let etagc = |b: &u8| matches!(*b, 0x21 | 0x23..=0x7e | 0x80..=0xff);
        self.opaque
            .strip_prefix(b"\"")
            .and_then(|rest| rest.strip_suffix(b"\""))
            .is_some_and(|inner| inner.iter().all(etagc))
    }

    /// RFC 9110 §8.8.3.2: "Strong comparison: two entity tags are equivalent
    /// if both are not weak and their opaque-tags match character-by-
    /// character. Weak comparison: two entity tags are equivalent if their
    /// opaque-tags match character-by-character, regardless of either or
    /// both being tagged as weak."
    pub(crate) fn matches(self, other: EntityTag<'_>, how: Comparison) -> bool {
        let strong_enough = match how {
            Comparison::Strong => !self.weak && !other.weak,
            Comparison::Weak => true,
        };
        strong_enough && self.opaque == other.opaque
    }
}

/// The tag of a response's (first) `ETag` field.
fn etag_of(response: &HeaderMap) -> Option<EntityTag<'_>> {
    let value = response.get(header::ETAG)?;
    Some(EntityTag::parse(trim_ows(value.as_bytes())))
}

/// RFC 9110 §13.1.1-2: whether an `If-Match` or `If-None-Match` field (all
/// its field `lines`) matches the current representation, whose tag is
/// `current`: `*` matches any (a stored response is a current
/// representation, with or without an ETag), a list of entity-tags matches
/// when one of them does by `how`.
pub(crate) fn list_matches<'v>(
    lines: impl Iterator<Item = &'v HeaderValue>,
    current: Option<EntityTag<'_>>,
    how: Comparison,
) -> bool {
    let mut lines = lines.peekable();
    let Some(first) = lines.next() else {
        return false;
    };
    // `*` stands alone: one field line, nothing else in the field.
    if trim_ows(first.as_bytes()) == b"*" && lines.peek().is_none() {
        return true;
    }
    let Some(current) = current else {
        return false;
    };
    std::iter::once(first)
        .chain(lines)
        .any(|line| entity_tags(line.as_bytes()).any(|tag| tag.matches(current, how)))
}

/// Splits one field line of a list of entity-tags; commas may appear inside
/// quoted opaque tags.
fn entity_tags(list: &[u8]) -> impl Iterator<Item = EntityTag<'_>> {
    let mut rest = list;
    std::iter::from_fn(move || {
        while let [b' ' | b'\t' | b',', tail @ ..] = rest {
            rest = tail;
        }
        if rest.is_empty() {
            return None;
        }
        let start = usize::from(rest.starts_with(b"W/")) * 2;
        let end = match rest[start..].strip_prefix(b"\"") {
            Some(body) => body
                .iter()
                .position(|&b| b == b'"')
                .map_or(rest.len(), |i| start + i + 2),
            None => rest.iter().position(|&b| b == b',').unwrap_or(rest.len()),
        };
        let (tag, tail) = rest.split_at(end);
        rest = tail;
        Some(EntityTag::parse(trim_ows(tag)))
    })
}

/// The headers of a 304 made from a stored response (RFC 9110 §15.4.5): the
/// validators and caching fields, without the representation's length and format.
pub(crate) fn not_modified_headers(headers: &mut HeaderMap) {
    for name in [
        header::CONTENT_LENGTH,
        header::CONTENT_TYPE,
        header::CONTENT_ENCODING,
        header::CONTENT_LANGUAGE,
        header::CONTENT_RANGE,
        header::TRANSFER_ENCODING,
    ] {
        headers.remove(name);
    }
}

/// The validators a revalidation sends (RFC 9111 §4.3.1): `If-None-Match`
/// with the stored ETag and `If-Modified-Since` with its Last-Modified.
pub(crate) fn add_validators(request: &mut HeaderMap, stored: &HeaderMap) {
    if let Some(etag) = stored.get(header::ETAG) {
        request.insert(header::IF_NONE_MATCH, etag.clone());
    }
    if let Some(modified) = stored.get(header::LAST_MODIFIED) {
        request.insert(header::IF_MODIFIED_SINCE, modified.clone());
    }
}

/// The headers of a 412 made from a stored response: nothing that would let
/// a downstream cache keep it or take it for the representation.
pub(crate) fn precondition_failed_headers(headers: &mut HeaderMap) {
    not_modified_headers(headers);
    for name in [
        header::CACHE_CONTROL,
        header::EXPIRES,
        header::ETAG,
        header::LAST_MODIFIED,
        header::VARY,
    ] {
        headers.remove(name);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
}

/// True when a stored response can be revalidated at all.
pub(crate) fn has_validator(stored: &HeaderMap) -> bool {
    stored.contains_key(header::ETAG) || stored.contains_key(header::LAST_MODIFIED)
}

/// RFC 9111 §4.3.3: a 304 applies to the stored response when its strong
/// validator matches (or it carries none to compare).
pub(crate) fn applies_to(not_modified: &HeaderMap, stored: &HeaderMap) -> bool {
    match (etag_of(not_modified), etag_of(stored)) {
        (Some(new), Some(old)) => new.matches(old, Comparison::Weak),
        (Some(_), None) => false,
        _ => true,
    }
}

/// Fields a 304 never replaces: they describe the stored bytes, which the
/// 304 does not carry. Content-Length is RFC 9111 §3.2's own exception; the
/// others are the omissions it allows "to assure integrity of the stored
/// response": the stored body (and the br/gzip copies made from it) is in
/// the stored Content-Encoding, covers the stored Content-Range, and hashes
/// to the stored Content-MD5.
const KEPT_ON_304: [&str; 4] = [
    "content-length",
    "content-encoding",
    "content-range",
    "content-md5",
];

/// RFC 9111 §3.2 / §4.3.4: the stored headers updated with those of a 304:
/// each field the 304 carries replaces the stored one, except those that
/// describe the stored bytes ([`KEPT_ON_304`]) and `skip` (fields that must
/// not be stored, lower-cased). The stored `Age` is dropped.
pub(crate) fn merge_not_modified(
    stored: &HeaderMap,
    update: &HeaderMap,
    skip: &[String],
) -> HeaderMap {
    let mut merged = stored.clone();
    // The stored Age described the first response; the 304's own Age (or
    // none) describes the freshened one (RFC 9111 §4.2.3).
    merged.remove(header::AGE);
    let replaced = |name: &HeaderName| {
        !KEPT_ON_304.contains(&name.as_str()) && !skip.iter().any(|s| s == name.as_str())
    };
    for name in update.keys() {
        if replaced(name) {
            merged.remove(name);
        }
    }
    for (name, value) in update {
        if replaced(name) {
            if let Ok(copy) = HeaderValue::from_bytes(value.as_bytes()) {
                merged.append(name.clone(), copy);
            }
        }
    }
    merged
}

#[cfg(test)]
#[path = "conditional_tests.rs"]
mod tests;
