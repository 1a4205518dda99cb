//! `early_hints*` route keys -> [`EarlyHintsConfig`].

use http::HeaderValue;

use super::Checker;
use crate::config::defaults::route;
use crate::config::early_hints::EarlyHintsConfig;
use crate::config::error::Problem;
use crate::http::link;

const LINK_HINT: &str =
    r#"e.g. "</app.css>; rel=preload; as=style" or "<https://cdn.example>; rel=preconnect""#;
const ORIGIN_HINT: &str = r#"e.g. "https://cdn.example.com" (scheme and host, no path)"#;

impl Checker {
    /// A route's Early Hints keys, under `path` (`routes[i]`).
    pub(super) fn early_hints(
        &mut self,
        path: &str,
        on: Option<bool>,
        links: &[String],
        origins: &[String],
    ) -> EarlyHintsConfig {
        EarlyHintsConfig {
            on: on.unwrap_or(route::EARLY_HINTS),
            links: links
                .iter()
                .enumerate()
                .filter_map(|(i, l)| self.hint_link(&format!("{path}.early_hints_links[{i}]"), l))
                .collect(),
            origins: origins
                .iter()
                .enumerate()
                .filter_map(|(i, o)| {
                    self.hint_origin(&format!("{path}.early_hints_origins[{i}]"), o)
                })
                .collect(),
        }
    }

    fn hint_link(&mut self, path: &str, text: &str) -> Option<HeaderValue> {
        let problem = if text.contains(',') && link::values(text).count() > 1 {
            Some("one link per entry (a comma separates two links)")
        } else if link::target(text).is_none() {
            Some("a link starts with its target in <...>")
        } else if !link::is_hint(text) {
            Some("rel must be preload, modulepreload or preconnect (what a 103 carries)")
        } else {
            None
        };
        let value = HeaderValue::from_str(text.trim()).ok();
        match (problem, value) {
            (None, Some(value)) => Some(value),
            (problem, _) => {
                let what = problem.unwrap_or("not a valid header value (control characters)");
                self.report(Problem::new(path, format!("{text:?}: {what}")).hint(LINK_HINT));
                None
            }
        }
    }

    fn hint_origin(&mut self, path: &str, text: &str) -> Option<String> {
        let origin = text.trim().trim_end_matches('/').to_ascii_lowercase();
        let ok = origin.split_once("://").is_some_and(|(scheme, authority)| {
            matches!(scheme, "http" | "https")
                && !authority.is_empty()
                && !authority.contains(['/', '?', '#', '@', ' '])
        });
        if ok {
            return Some(origin);
        }
        let problem = Problem::new(path, format!("{text:?} is not an origin"));
        self.report(problem.hint(ORIGIN_HINT));
        None
    }
}
