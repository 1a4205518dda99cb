//! NGINX location and map patterns as calmcache `match` regexes.
//!
//! Owns one fact: calmcache's `match` runs on the path *and* the query
//! (`/a/b?c=d`), while an NGINX location sees the path only. A location regex
//! is rewritten so that it cannot see past the `?`: `.` becomes `[^?]`, a
//! negated class `[^...]` also refuses `?`, `\S` `\W` `\D` refuse it, `$`
//! (and PCRE's `\Z` `\z`) becomes "end of path" `(?:\?|$)`, and an
//! unanchored regex is searched for in the path only (`^[^?]*?(?:...)`).
//! Rust's regex has no look-around and no back-references: such a pattern
//! is reported, not converted.

/// `location /images/` -> `^/images/`.
pub(crate) fn prefix(path: &str) -> String {
    format!("^{}", regex::escape(path))
}

/// `location = /favicon.ico` -> `^/favicon\.ico(?:\?|$)`.
pub(crate) fn exact(path: &str) -> String {
    format!("^{}(?:\\?|$)", regex::escape(path))
}

/// `location ~ \.php$` (or `~*` with `case_insensitive`) as a regex on the
/// path part of calmcache's path-and-query.
pub(crate) fn location(pattern: &str, case_insensitive: bool) -> Result<String, String> {
    let body = path_only(pattern);
    let anchored = body.starts_with('^') && !body.contains('|');
    let mut out = String::new();
    if case_insensitive {
        out.push_str("(?i)");
    }
    if anchored {
        out.push_str(&body);
    } else {
        out.push_str(&format!("^[^?]*?(?:{body})"));
    }
    checked(pattern, out)
}

/// A `map $request_uri` regex entry (`~` / `~*`): `$request_uri` is the path
/// and the query, as calmcache's `match` sees them, so only case is added.
pub(crate) fn request_uri(pattern: &str, case_insensitive: bool) -> Result<String, String> {
    let out = if case_insensitive {
        format!("(?i){pattern}")
    } else {
        pattern.to_owned()
    };
    checked(pattern, out)
}

/// A map's exact string entry on `$request_uri`.
pub(crate) fn request_uri_exact(text: &str) -> String {
    format!("^{}$", regex::escape(text))
}

fn checked(original: &str, out: String) -> Result<String, String> {
    match regex::Regex::new(&out) {
        Ok(_) => Ok(out),
        Err(e) => {
            let first = e.to_string();
            let first = first.lines().last().unwrap_or("").trim().to_owned();
            Err(format!(
                "the regex {original:?} is not one calmcache's regex engine accepts ({first}): \
                 no look-around, no back-references"
            ))
        }
    }
}

/// The rewrite described in the module doc.
fn path_only(pattern: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('S') => out.push_str("[^\\s?]"),
                Some('W') => out.push_str("[^\\w?]"),
                Some('D') => out.push_str("[^\\d?]"),
                Some('Z' | 'z') => out.push_str("(?:\\?|$)"),
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push('\\'),
            },
            '[' => class(&mut chars, &mut out),
            '.' => out.push_str("[^?]"),
            '$' => out.push_str("(?:\\?|$)"),
            c => out.push(c),
        }
    }
    out
}

/// Copies a character class (its `[` already read), adding `?` to a negated
/// one.
fn class(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut String) {
    out.push('[');
    let negated = chars.peek() == Some(&'^');
    if negated {
        out.push('^');
        chars.next();
    }
    // A `]` first in the class is a literal.
    if chars.peek() == Some(&']') {
        out.push_str("\\]");
        chars.next();
    }
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.push('\\');
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            '[' if chars.peek() == Some(&':') => {
                // [:alpha:] inside a class.
                out.push('[');
                for c in chars.by_ref() {
                    out.push(c);
                    if c == ']' {
                        break;
                    }
                }
            }
            ']' => {
                if negated {
                    out.push('?');
                }
                out.push(']');
                return;
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use regex::Regex;

    fn is(pattern: &str, text: &str) -> bool {
        Regex::new(pattern).unwrap().is_match(text)
    }

    #[test]
    fn location_regexes_see_the_path_only() {
        let mp4 = location(r"\.mp4$", false).unwrap();
        assert!(is(&mp4, "/v/a.mp4"));
        assert!(is(&mp4, "/v/a.mp4?start=10"));
        assert!(!is(&mp4, "/page?file=a.mp4"));
        assert!(!is(&mp4, "/a.mp4x"));
        let any = location(r"^/a.*b", false).unwrap();
        assert!(is(&any, "/a/xb"));
        assert!(!is(&any, "/a?b"));
        let neg = location(r"^/[^/]+$", false).unwrap();
        assert!(is(&neg, "/top?x=/y"));
        assert!(!is(&neg, "/a/b"));
        let ci = location(r"\.(JPG|png)$", true).unwrap();
        assert!(is(&ci, "/x.jpg?v=1"));
    }

    #[test]
    fn prefixes_and_exact_paths() {
        assert!(is(&prefix("/a.b/"), "/a.b/c?x"));
        assert!(!is(&prefix("/a.b/"), "/axb/c"));
        let e = exact("/f.ico");
        assert!(is(&e, "/f.ico"));
        assert!(is(&e, "/f.ico?v=2"));
        assert!(!is(&e, "/f.icox"));
    }

    #[test]
    fn look_around_is_reported() {
        let err = location(r"^/(?!admin)", false).unwrap_err();
        assert!(err.contains("look-around"), "{err}");
    }
}
