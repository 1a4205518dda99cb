//! NGINX location and map patterns as calmcache route regexes, each with
//! the route key that matches what NGINX matched.
//!
//! Owns one fact: an NGINX `location` (and a `map` on `$uri`) sees the path
//! only, as calmcache's `path` key does; a `map` on `$request_uri` sees the
//! path and the query, as `match` does. So a location regex is carried over
//! as written (`path = '\.mp4$'`), and cannot take `/page?file=a.mp4`.
//! Rust's regex has no look-around and no back-references: such a pattern
//! is reported, not converted.

/// A converted pattern and the route key that gives it NGINX's meaning.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RouteRegex {
    /// `path`: the normalised path without the query.
    Path(String),
    /// `match`: the normalised path and the query.
    Target(String),
}

impl RouteRegex {
    /// The route key: `path` or `match`.
    pub(crate) fn key(&self) -> &'static str {
        match self {
            RouteRegex::Path(_) => "path",
            RouteRegex::Target(_) => "match",
        }
    }

    /// The regex.
    pub(crate) fn regex(&self) -> &str {
        match self {
            RouteRegex::Path(re) | RouteRegex::Target(re) => re,
        }
    }
}

/// `location = /favicon.ico` -> `path = '^/favicon\.ico$'`.
pub(crate) fn exact(path: &str) -> RouteRegex {
    RouteRegex::Path(format!("^{}$", regex::escape(path)))
}

/// A literal condition on the path (a prefix, or with `exact` the whole
/// path; `ci`: any case), as `path`.
pub(crate) fn literal_path(text: &str, exact: bool, ci: bool) -> RouteRegex {
    let end = if exact { "$" } else { "" };
    RouteRegex::Path(format!("{}^{}{end}", case(ci), regex::escape(text)))
}

/// The same condition as `match`, which sees the path and the query: the
/// path never holds a `?`, so "the path is the text" is the text followed
/// by the query or the end.
pub(crate) fn literal_target(text: &str, exact: bool, ci: bool) -> RouteRegex {
    let end = if exact { r"(\?|$)" } else { "" };
    RouteRegex::Target(format!("{}^{}{end}", case(ci), regex::escape(text)))
}

fn case(ci: bool) -> &'static str {
    if ci {
        "(?i)"
    } else {
        ""
    }
}

/// `location ~ \.php$` (or `~*` with `case_insensitive`) -> `path`, as
/// written.
pub(crate) fn location(pattern: &str, case_insensitive: bool) -> Result<RouteRegex, String> {
    checked(pattern, with_case(pattern, case_insensitive)).map(RouteRegex::Path)
}

/// A `map $request_uri` regex entry (`~` / `~*`): `$request_uri` is the path
/// and the query, as calmcache's `match` sees them, so only case is added.
pub(crate) fn request_uri(pattern: &str, case_insensitive: bool) -> Result<RouteRegex, String> {
    checked(pattern, with_case(pattern, case_insensitive)).map(RouteRegex::Target)
}

/// A map's exact string entry on `$request_uri`.
pub(crate) fn request_uri_exact(text: &str) -> RouteRegex {
    RouteRegex::Target(format!("^{}$", regex::escape(text)))
}

fn with_case(pattern: &str, case_insensitive: bool) -> String {
    if case_insensitive {
        format!("(?i){pattern}")
    } else {
        pattern.to_owned()
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use regex::Regex;

    fn is(re: &RouteRegex, text: &str) -> bool {
        Regex::new(re.regex()).unwrap().is_match(text)
    }

    #[test]
    fn locations_become_path_regexes_as_written() {
        let mp4 = location(r"\.mp4$", false).unwrap();
        assert_eq!(mp4, RouteRegex::Path(r"\.mp4$".into()));
        assert_eq!(mp4.key(), "path");
        assert!(is(&mp4, "/v/a.mp4"));
        assert!(!is(&mp4, "/a.mp4x"));
        let ci = location(r"\.(JPG|png)$", true).unwrap();
        assert_eq!(ci.regex(), r"(?i)\.(JPG|png)$");
        assert!(is(&ci, "/x.jpg"));
    }

    #[test]
    fn prefixes_and_exact_paths() {
        let prefix = |p| literal_path(p, false, false);
        assert_eq!(prefix("/a.b/"), RouteRegex::Path(r"^/a\.b/".into()));
        assert!(is(&prefix("/a.b/"), "/a.b/c"));
        assert!(!is(&prefix("/a.b/"), "/axb/c"));
        let exact_target = literal_target("/a", true, true);
        assert!(is(&exact_target, "/A?x=1"));
        assert!(is(&exact_target, "/a"));
        assert!(!is(&exact_target, "/ab"));
        let e = exact("/f.ico");
        assert_eq!(e.key(), "path");
        assert!(is(&e, "/f.ico"));
        assert!(!is(&e, "/f.icox"));
    }

    #[test]
    fn request_uri_maps_stay_on_match() {
        let re = request_uri(r"\.mp4(\?.*)?$", false).unwrap();
        assert_eq!(re, RouteRegex::Target(r"\.mp4(\?.*)?$".into()));
        assert_eq!(re.key(), "match");
        assert_eq!(request_uri_exact("/a?b").regex(), r"^/a\?b$");
    }

    #[test]
    fn look_around_is_reported() {
        let err = location(r"^/(?!admin)", false).unwrap_err();
        assert!(err.contains("look-around"), "{err}");
    }
}
