//! A route's `hosts`: the host names it answers for, as NGINX's
//! `server_name` has them: `example.com` (that name), `*.example.com` (any
//! name under it, at any depth, not the name itself) and `.example.com`
//! (the name and any under it). Matched against the request's host as
//! admitted (lower-cased, one trailing dot and the port dropped), so every
//! wire and spelling of a name picks the same route.

use std::fmt;

/// One entry of `hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// `example.com`: that name.
    Exact(String),
    /// `*.example.com` (`include_self` false) or `.example.com` (true):
    /// names ending in `.example.com`, and the name itself when
    /// `include_self`. Holds `example.com`.
    Under { suffix: String, include_self: bool },
}

impl HostPattern {
    /// Parses one `hosts` entry; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let lower = text.to_ascii_lowercase();
        let (name, under) = if let Some(rest) = lower.strip_prefix("*.") {
            (rest, Some(false))
        } else if let Some(rest) = lower.strip_prefix('.') {
            (rest, Some(true))
        } else {
            (lower.as_str(), None)
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        if name.is_empty() {
            return Err("is empty".into());
        }
        if name.contains("://") {
            return Err("is a URL (write the host name alone)".into());
        }
        if name.contains('*') {
            return Err("has a '*' that is not a leading \"*.\"".into());
        }
        if name.contains(':') {
            return Err("has a port (hosts are names; every port matches)".into());
        }
        let label_ok = |label: &str| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !name.split('.').all(label_ok) {
            return Err("is not a host name (letters, digits, '-', '_', dot-separated)".into());
        }
        Ok(match under {
            None => HostPattern::Exact(name.to_owned()),
            Some(include_self) => HostPattern::Under {
                suffix: name.to_owned(),
                include_self,
            },
        })
    }

    /// True when `host` (lower-case, without port or trailing dot) is one
    /// of this pattern's names.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => host == name,
            HostPattern::Under {
                suffix,
                include_self,
            } => match host.strip_suffix(suffix.as_str()) {
                Some("") => *include_self,
                Some(rest) => rest.ends_with('.') && rest.len() > 1,
                None => false,
            },
        }
    }

    /// The name itself for an exact pattern (a host to warm with).
    pub fn exact(&self) -> Option<&str> {
        match self {
            HostPattern::Exact(name) => Some(name),
            HostPattern::Under { .. } => None,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(name) => f.write_str(name),
            HostPattern::Under {
                suffix,
                include_self: false,
            } => write!(f, "*.{suffix}"),
            HostPattern::Under { suffix, .. } => write!(f, ".{suffix}"),
        }
    }
}

/// The name part of an admitted Host value (`name`, `name:port`,
/// `[v6]:port`): what `hosts` match against.
pub(crate) fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// True when `patterns` is empty (every host) or one of them matches the
/// admitted Host value `host`.
pub(crate) fn any_matches(patterns: &[HostPattern], host: &str) -> bool {
    if patterns.is_empty() {
        return true;
    }
    let name = host_name(host);
    patterns.iter().any(|p| p.matches(name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn p(text: &str) -> HostPattern {
        HostPattern::parse(text).unwrap()
    }

    #[test]
    fn the_three_forms_match_as_nginx_server_name_does() {
        let exact = p("Example.COM.");
        assert_eq!(exact, HostPattern::Exact("example.com".into()));
        assert!(exact.matches("example.com"));
        assert!(!exact.matches("www.example.com"));
        assert!(!exact.matches("example.com.evil"));

        let star = p("*.example.com");
        assert!(star.matches("www.example.com"));
        assert!(star.matches("a.b.example.com"));
        assert!(!star.matches("example.com"));
        assert!(!star.matches("badexample.com"), "on a dot border only");
        assert!(!star.matches(".example.com"));

        let dot = p(".example.com");
        assert!(dot.matches("example.com"));
        assert!(dot.matches("www.example.com"));
        assert!(!dot.matches("notexample.com"));
        for text in ["example.com", "*.example.com", ".example.com"] {
            assert_eq!(p(text).to_string(), text);
        }
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (text, why) in [
            ("", "empty"),
            ("*.", "empty"),
            ("example.*", "'*'"),
            ("w*w.example.com", "'*'"),
            ("example.com:8080", "port"),
            ("~^www\\.", "not a host name"),
            ("exa mple.com", "not a host name"),
            ("a..b", "not a host name"),
            ("http://example.com", "URL"),
        ] {
            let err = HostPattern::parse(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_port_is_not_part_of_the_name() {
        assert_eq!(host_name("example.com:8080"), "example.com");
        assert_eq!(host_name("example.com"), "example.com");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        let hosts = [p("example.com")];
        assert!(any_matches(&hosts, "example.com:8443"));
        assert!(!any_matches(&hosts, ""));
        assert!(any_matches(&[], ""), "no hosts: every request");
    }
}
