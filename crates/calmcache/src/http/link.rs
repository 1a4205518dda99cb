//! `Link` fields (RFC 8288) as far as 103 Early Hints need them: splitting a
//! field into its link-values, the relations a hint may carry (`preload`,
//! `modulepreload`, `preconnect`), and the origin a target points at.
//!
//! Owns the parsing; which origins a route lets through is the caller's.

/// The relations a 103 carries: what a browser acts on before the page.
const HINTED: [&str; 3] = ["preload", "modulepreload", "preconnect"];

/// The link-values of one `Link` field: split at the commas outside
/// `<...>` and outside quoted strings, trimmed, empty ones dropped.
pub(crate) fn values(field: &str) -> impl Iterator<Item = &str> {
    let mut rest = field;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let end = top_level_comma(rest).unwrap_or(rest.len());
        let value = rest[..end].trim();
        rest = rest.get(end + 1..).unwrap_or("");
        if !value.is_empty() {
            return Some(value);
        }
    })
}

/// Where the first comma outside `<...>` and quotes is.
fn top_level_comma(s: &str) -> Option<usize> {
    let (mut angle, mut quoted, mut escaped) = (false, false, false);
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' if !angle => quoted = !quoted,
            b'<' if !quoted => angle = true,
            b'>' if !quoted => angle = false,
            b',' if !angle && !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// A link-value's target: what is between its `<` and `>`. `None` as well
/// for a target with a `\`, ASCII whitespace or a control character
/// anywhere: browsers strip or reinterpret them (WHATWG URL: a leading
/// space or tab is trimmed, tabs inside are removed, `\` is `/`), so
/// `</\evil.example/x>` or `</\t/evil.example>` would load from
/// `//evil.example/` while reading here as a path on the page's own origin.
pub(crate) fn target(value: &str) -> Option<&str> {
    let inner = value.trim_start().strip_prefix('<')?;
    let target = &inner[..inner.find('>')?];
    let unsafe_byte = |b: u8| b == b'\\' || b.is_ascii_whitespace() || b.is_ascii_control();
    (!target.bytes().any(unsafe_byte)).then_some(target)
}

/// Whether a link-value has a relation a 103 carries (RFC 8288 §3.3: `rel`
/// is a space-separated list, compared case-insensitively).
pub(crate) fn is_hint(value: &str) -> bool {
    let Some(close) = value.find('>') else {
        return false;
    };
    value[close + 1..].split(';').any(|param| {
        let Some((name, val)) = param.split_once('=') else {
            return false;
        };
        name.trim().eq_ignore_ascii_case("rel")
            && val
                .trim()
                .trim_matches('"')
                .split_ascii_whitespace()
                .any(|rel| HINTED.iter().any(|h| rel.eq_ignore_ascii_case(h)))
    })
}

/// The origin (`scheme://authority`, lower-case) of an absolute or
/// scheme-relative target; `None` for a path on the page's own origin.
pub(crate) fn origin_of(target: &str) -> Option<Origin<'_>> {
    if let Some(rest) = target.strip_prefix("//") {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        return Some(Origin {
            scheme: None,
            authority: &rest[..end],
        });
    }
    let colon = target.find(':')?;
    let scheme = &target[..colon];
    // RFC 3986 §3.1: a scheme starts with a letter; a colon after a slash
    // is in the path.
    let is_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !is_scheme {
        return None;
    }
    let rest = target[colon + 1..].strip_prefix("//").unwrap_or("");
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(Origin {
        scheme: Some(scheme),
        authority: &rest[..end],
    })
}

/// Where a target points, when not at the page's own origin by a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin<'a> {
    /// `None` for a scheme-relative target (`//cdn.example/x`).
    pub scheme: Option<&'a str>,
    /// `host[:port]`, empty for a scheme without one (`data:`).
    pub authority: &'a str,
}

impl Origin<'_> {
    /// Whether this is `scheme://authority` (compared case-insensitively;
    /// a scheme-relative target takes `page_scheme`).
    pub(crate) fn is(&self, page_scheme: &str, origin: &str) -> bool {
        let scheme = self.scheme.unwrap_or(page_scheme);
        origin.split_once("://").is_some_and(|(s, a)| {
            s.eq_ignore_ascii_case(scheme) && a.eq_ignore_ascii_case(self.authority)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_field_splits_at_top_level_commas_only() {
        let field =
            r#"</a,b.css>; rel=preload; title="x, y", <https://cdn.example>; rel=preconnect,,"#;
        let got: Vec<&str> = values(field).collect();
        assert_eq!(
            got,
            [
                r#"</a,b.css>; rel=preload; title="x, y""#,
                "<https://cdn.example>; rel=preconnect"
            ]
        );
    }

    #[test]
    fn hint_relations_are_recognised() {
        assert!(is_hint("</a.css>; rel=preload; as=style"));
        assert!(is_hint(r#"</m.js>; rel="modulepreload""#));
        assert!(is_hint(r#"<https://x>; REL="dns-prefetch preconnect""#));
        assert!(!is_hint("</a.css>; rel=stylesheet"));
        assert!(!is_hint("</next>; rel=next"));
        assert!(!is_hint("</preload>; title=preload"));
        assert!(!is_hint("no target; rel=preload"));
    }

    #[test]
    fn targets_a_browser_would_read_as_another_origin_are_refused() {
        for value in [
            r"</\evil.example/x.js>; rel=preload",
            r"<\\evil.example/x>; rel=preload",
            "<\t//evil.example/x>; rel=preload",
            "< //evil.example/x>; rel=preload",
            "<\u{1}//evil.example/x>; rel=preload",
            "</\t/evil.example>; rel=preload",
            "</\n/evil.example>; rel=preload",
            "</a b.css>; rel=preload",
            "</a.css\u{7f}>; rel=preload",
        ] {
            assert_eq!(target(value), None, "{value:?}");
        }
        // A scheme-relative target is another origin, checked as one.
        let evil = origin_of(target("<//evil.example/x>").unwrap()).unwrap();
        assert!(!evil.is("https", "https://shop.example"));
        assert_eq!(target("</a/b.css?x=1>; rel=preload"), Some("/a/b.css?x=1"));
    }

    #[test]
    fn origins_of_targets() {
        assert_eq!(target(" </a.css>; rel=preload"), Some("/a.css"));
        assert_eq!(target("</a.css"), None);
        assert_eq!(origin_of("/a.css"), None);
        assert_eq!(origin_of("a.css"), None);
        assert_eq!(origin_of("a/b:c"), None);
        let cdn = origin_of("https://CDN.example:8443/x.css").unwrap();
        assert!(cdn.is("http", "https://cdn.example:8443"));
        assert!(!cdn.is("https", "https://cdn.example"));
        let relative = origin_of("//cdn.example/x").unwrap();
        assert!(relative.is("https", "https://cdn.example"));
        assert!(!relative.is("http", "https://cdn.example"));
        assert!(!origin_of("data:text/css,x")
            .unwrap()
            .is("https", "https://a"));
    }
}
