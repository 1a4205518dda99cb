//! Where a request names a query argument or a cookie, as the origins behind
//! a cache read names: for `$arg_NAME` and `$cookie_NAME` keys, whose value
//! must be the one the origin reads.
//!
//! Owns one fact: which spellings of a name some common origin reads as that
//! name. It must not decide what happens to a request that uses them: the
//! key template calls such a request ambiguous and the proxy passes it.
//!
//! The key reads an argument or cookie spelled exactly as in the template;
//! origins are more liberal, and each differently:
//!
//! | spelling | read as `page` / `lang` by |
//! |---|---|
//! | `pag%65=2`, `%70age=2` | Python `parse_qs`, Node `querystring`, Go `net/url`, PHP (names are percent-decoded, `+` read as a space) |
//! | `x=1;page=2` | Python before 3.9.2 (CVE-2021-23336), Rack 2 (`;` separates too) |
//! | `Page=2` | ASP.NET (names compared regardless of case) |
//! | `%20page=2`, `+page=2`, `page[]=2`; `a.b=1` for `a_b` | PHP (leading spaces dropped; ` `, `.`, `[` read as `_`; `[` starts an array) |
//! | `Cookie: lang =de` | Django, Go `net/http`, Node `cookie`, Python `http.cookies` (names trimmed) |
//! | `Cookie: a=1 lang=de` | Python `http.cookies` (whitespace separates cookies) |
//! | `Cookie: a=1, lang=de` | Python `http.cookies`, RFC 2965 parsers (`,` separates cookies) |
//!
//! A *mention* is any such spelling; the *exact* one is the name as the
//! template spells it, where the key reads it, with a non-empty value (the
//! key renders an empty value as it renders an absent name, which origins
//! tell apart: `?page=` is not `?page` missing to Flask or Django). A request
//! that mentions a keyed name other than exactly once, exactly, is
//! ambiguous: the key and the origin could read different values, and one
//! request would store its answer for everyone who asks for another.
//! Scanning allocates nothing.

use http::HeaderMap;

/// How often `query` mentions argument `name`, and how many of those are
/// exact (`name=value` between `&`s).
pub(crate) fn arg_mentions(query: &str, name: &str) -> Mentions {
    let mut seen = Mentions::default();
    for piece in query.split('&') {
        for (i, part) in piece.split(';').enumerate() {
            let (raw, value) = part.split_once('=').unwrap_or((part, ""));
            if reads_as(raw.as_bytes(), name) {
                seen.note(i == 0 && raw == name && !value.is_empty());
            }
        }
    }
    seen
}

/// How often the Cookie field lines mention cookie `name`, and how many of
/// those are exact (`name=value` first in a `;`-separated piece, after spaces).
pub(crate) fn cookie_mentions(headers: &HeaderMap, name: &str) -> Mentions {
    let mut seen = Mentions::default();
    for line in headers.get_all(http::header::COOKIE) {
        for piece in line.as_bytes().split(|b| *b == b';') {
            for (i, part) in piece.split(|b| *b == b',').enumerate() {
                cookie_part(part, name, i == 0, &mut seen);
            }
        }
    }
    seen
}

/// The mentions in one `;`/`,`-separated part of a Cookie line, read word
/// by word (whitespace separates words): `name=value`, `name =value` (a
/// word `name` before one that starts with `=`) and a bare `name` ending
/// the part (Go reads it as an empty cookie). Exact: `name=` as the
/// part's first word, in the first `,`-separated piece of a `;` piece.
fn cookie_part(part: &[u8], name: &str, first_piece: bool, seen: &mut Mentions) {
    let mut words = part
        .split(u8::is_ascii_whitespace)
        .filter(|word| !word.is_empty())
        .enumerate()
        .peekable();
    while let Some((k, word)) = words.next() {
        let key = match word.iter().position(|b| *b == b'=') {
            Some(eq) => &word[..eq],
            None => match words.peek() {
                None => word,
                Some((_, next)) if next.first() == Some(&b'=') => word,
                Some(_) => continue,
            },
        };
        if reads_as(key, name) {
            // `name=` with nothing between the name and `=`.
            let joined = key.len() < word.len();
            let exact =
                first_piece && k == 0 && joined && key == name.as_bytes() && has_value(part);
            seen.note(exact);
        }
    }
}

/// True when `part` (whose first word is `name=...`) gives a non-empty value.
fn has_value(part: &[u8]) -> bool {
    part.iter()
        .position(|b| *b == b'=')
        .is_some_and(|eq| !part[eq + 1..].trim_ascii().is_empty())
}

/// What a scan found: every spelling of a name, and the exact ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mentions {
    /// Every spelling some origin reads as the name.
    pub all: usize,
    /// The name spelled as the template spells it, where the key reads it.
    pub exact: usize,
}

impl Mentions {
    fn note(&mut self, exact: bool) {
        self.all += 1;
        self.exact += usize::from(exact);
    }

    /// True unless the name is absent or present once, exactly: the key
    /// then reads what every origin in the module doc reads.
    pub(crate) fn is_ambiguous(self) -> bool {
        self.all > 1 || self.all != self.exact
    }
}

/// True when some origin reads `raw` (a name as sent) as `name` (`[A-Za-z0-9_]+`):
/// percent-escapes decoded and `+` as a space, then leading spaces dropped,
/// ASCII case ignored, ` ` `.` `[` read as `_`; anything after the name
/// must start an array (`[`).
fn reads_as(raw: &[u8], name: &str) -> bool {
    let mut decoded = Decoded { raw, at: 0 }.skip_while(|b| *b == b' ').peekable();
    for want in name.bytes() {
        match decoded.next() {
            Some(got) if fold(got) == fold(want) => {}
            _ => return false,
        }
    }
    matches!(decoded.peek(), None | Some(b'['))
}

/// PHP's name mangling and ASP.NET's case folding in one byte map.
fn fold(b: u8) -> u8 {
    match b {
        b' ' | b'.' | b'[' => b'_',
        other => other.to_ascii_lowercase(),
    }
}

/// The bytes of a query name once decoded: `%XX` as its byte, `+` as a
/// space, a `%` without two hex digits as itself (as Python and Node read
/// it; Go refuses the pair).
struct Decoded<'a> {
    raw: &'a [u8],
    at: usize,
}

impl Iterator for Decoded<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        let b = *self.raw.get(self.at)?;
        self.at += 1;
        match b {
            b'+' => Some(b' '),
            b'%' => {
                let hex = |i: usize| self.raw.get(i).and_then(|h| char::from(*h).to_digit(16));
                match (hex(self.at), hex(self.at + 1)) {
                    (Some(hi), Some(lo)) => {
                        self.at += 2;
                        // Two hex digits make at most 0xff.
                        u8::try_from(hi * 16 + lo).ok()
                    }
                    _ => Some(b'%'),
                }
            }
            other => Some(other),
        }
    }
}

#[cfg(test)]
#[path = "request_names_tests.rs"]
mod tests;
