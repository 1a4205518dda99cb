//! Conditional requests (RFC 9110 §13): evaluating a client's preconditions
//! against a stored response, building the 304 it gets, the validators a
//! revalidation sends upstream, and merging a 304 from the origin into the
//! stored response (RFC 9111 §4.3.4, §3.2).

use std::time::SystemTime;

use calmcache_core::freshness::parse_date;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// What a request's preconditions say about answering it from a representation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition, or all passed: send the representation.
    Proceed,
    /// `If-None-Match` / `If-Modified-Since` matched: 304 (RFC 9110 §13.1.2-3).
    NotModified,
    /// `If-Match` / `If-Unmodified-Since` failed: 412 (RFC 9110 §13.1.1, §13.1.4).
    Failed,
}

/// True when the request carries any precondition (cheap check for the hit path).
pub fn has_preconditions(request: &HeaderMap) -> bool {
    request.contains_key(header::IF_NONE_MATCH)
        || request.contains_key(header::IF_MODIFIED_SINCE)
        || request.contains_key(header::IF_MATCH)
        || request.contains_key(header::IF_UNMODIFIED_SINCE)
}

/// RFC 9110 §13.2.2: evaluates the preconditions of a GET or HEAD in order
/// against the representation's `ETag` and `Last-Modified` in `response`.
pub fn evaluate(request: &HeaderMap, response: &HeaderMap) -> Precondition {
    let etag = response.get(header::ETAG).and_then(|v| v.to_str().ok());
    let modified = response
        .get(header::LAST_MODIFIED)
        .and_then(|v| parse_date(v.as_bytes()));
    // Step 1-2: If-Match, else If-Unmodified-Since.
    if let Some(list) = joined(request, &header::IF_MATCH) {
        if !matches_any(&list, etag, true) {
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
    if let Some(list) = joined(request, &header::IF_NONE_MATCH) {
        if matches_any(&list, etag, false) {
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

/// All field lines of a list header joined; `None` when absent.
fn joined(request: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut values = request.get_all(name).iter().peekable();
    values.peek()?;
    let parts: Vec<&str> = values.filter_map(|v| v.to_str().ok()).collect();
    Some(parts.join(","))
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

/// RFC 9110 §8.8.3.2: `*` matches any current representation; otherwise the
/// list is compared with strong (If-Match) or weak (If-None-Match) comparison.
fn matches_any(list: &str, etag: Option<&str>, strong: bool) -> bool {
    // A stored response is a current representation, with or without an ETag.
    if list.trim() == "*" {
        return true;
    }
    let Some(etag) = etag.map(str::trim) else {
        return false;
    };
    entity_tags(list).any(|tag| {
        if strong {
            !is_weak(tag) && !is_weak(etag) && tag == etag
        } else {
            opaque(tag) == opaque(etag)
        }
    })
}

/// Splits a list of entity-tags; commas may appear inside quoted opaque tags.
fn entity_tags(list: &str) -> impl Iterator<Item = &str> {
    let mut rest = list;
    std::iter::from_fn(move || {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return None;
        }
        let start = usize::from(rest.starts_with("W/")) * 2;
        let end = match rest[start..].strip_prefix('"') {
            Some(body) => body.find('"').map_or(rest.len(), |i| start + i + 2),
            None => rest.find(',').unwrap_or(rest.len()),
        };
        let (tag, tail) = rest.split_at(end);
        rest = tail;
        Some(tag.trim())
    })
}

fn is_weak(tag: &str) -> bool {
    tag.starts_with("W/")
}

fn opaque(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// The headers of a 304 made from a stored response (RFC 9110 §15.4.5): the
/// validators and caching fields, without the representation's length and format.
pub fn not_modified_headers(headers: &mut HeaderMap) {
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
pub fn add_validators(request: &mut HeaderMap, stored: &HeaderMap) {
    if let Some(etag) = stored.get(header::ETAG) {
        request.insert(header::IF_NONE_MATCH, etag.clone());
    }
    if let Some(modified) = stored.get(header::LAST_MODIFIED) {
        request.insert(header::IF_MODIFIED_SINCE, modified.clone());
    }
}

/// The headers of a 412 made from a stored response: nothing that would let
/// a downstream cache keep it or take it for the representation.
pub fn precondition_failed_headers(headers: &mut HeaderMap) {
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
pub fn has_validator(stored: &HeaderMap) -> bool {
    stored.contains_key(header::ETAG) || stored.contains_key(header::LAST_MODIFIED)
}

/// RFC 9111 §4.3.3: a 304 applies to the stored response when its strong
/// validator matches (or it carries none to compare).
pub fn applies_to(not_modified: &HeaderMap, stored: &HeaderMap) -> bool {
    match (
        not_modified.get(header::ETAG).and_then(|v| v.to_str().ok()),
        stored.get(header::ETAG).and_then(|v| v.to_str().ok()),
    ) {
        (Some(new), Some(old)) => opaque(new.trim()) == opaque(old.trim()),
        (Some(_), None) => false,
        _ => true,
    }
}

/// RFC 9111 §3.2 / §4.3.4: the stored headers updated with those of a 304:
/// each field the 304 carries replaces the stored one, except Content-Length
/// (it describes the 304, not the stored body) and `skip` (fields that must
/// not be stored, lower-cased). The stored `Age` is dropped.
pub fn merge_not_modified(stored: &HeaderMap, update: &HeaderMap, skip: &[String]) -> HeaderMap {
    let mut merged = stored.clone();
    // The stored Age described the first response; the 304's own Age (or
    // none) describes the freshened one (RFC 9111 §4.2.3).
    merged.remove(header::AGE);
    let replaced = |name: &HeaderName| {
        *name != header::CONTENT_LENGTH && !skip.iter().any(|s| s == name.as_str())
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
