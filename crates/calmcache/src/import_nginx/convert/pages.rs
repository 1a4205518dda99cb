//! NGINX's `error_page` and `proxy_intercept_errors` as a route's
//! `error_pages` and `intercept_errors`, with NGINX's inheritance (a level
//! that writes `error_page` replaces every one it inherits: Settings).
//!
//! Owns which error pages carry over: statuses 300-599, an optional `=` or
//! `=CODE`, and a plain path (`/50x.html`). A page from a named location
//! (`@name`), a URL (a redirect) or a path with variables is commented.
//! The first line that names a status wins, as NGINX's. It must not decide
//! the route's other keys.

use super::super::note_skipped;
use super::super::settings::Settings;
use super::super::toml_out::{Section, Value};
use super::super::tree::Directive;
use super::ledger;

/// Whether a route proxies (the origin's answers can be intercepted) or
/// answers itself.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Serves {
    Proxied,
    Itself,
}

/// Writes the route's `error_pages` (and `intercept_errors` on a proxied
/// route) from the `error_page` lines in effect.
pub(super) fn error_pages(route: &mut Section, s: &Settings, serves: Serves) {
    // A try_files fallback (files.rs) is the route's first page.
    let mut table: Vec<(String, Value)> = match route.get("error_pages") {
        Some(Value::Table(fallback)) => fallback.clone(),
        _ => Vec::new(),
    };
    let mut seen: Vec<u16> = table
        .iter()
        .flat_map(|(codes, _)| codes.split(' ').filter_map(|c| c.parse().ok()))
        .collect();
    for d in s.unmarked("error_page") {
        match page(d, &seen) {
            Ok((codes, target)) => {
                ledger::carried(d);
                route.note(format!("From `{}` ({}).", d.text(), d.pos));
                seen.extend(&codes);
                let key: Vec<String> = codes.iter().map(u16::to_string).collect();
                table.push((key.join(" "), Value::Str(target)));
            }
            Err(why) => route.note(note_skipped(d, &why)),
        }
    }
    let intercept = s.unmarked("proxy_intercept_errors").last();
    if table.is_empty() {
        return;
    }
    route.set("error_pages", Value::Table(table)).note(
        "A page's path is routed again as a GET: it must reach a route that answers itself \
               (a file or a return); one that reaches a proxied route leaves the answer as it was \
               (NGINX would fetch the page from the origin).",
    );
    if let (Some(d), Serves::Proxied) = (intercept, serves) {
        if d.args.first().is_some_and(|a| a == "on") {
            ledger::carried(d);
            route
                .set("intercept_errors", Value::Bool(true))
                .note(format!("From `{}` ({}).", d.text(), d.pos));
        }
    }
}

/// The statuses (those `seen` left out) and calmcache's target of one
/// `error_page` line, or why it is not carried over.
fn page(d: &Directive, seen: &[u16]) -> Result<(Vec<u16>, String), String> {
    let Some((target, rest)) = d.args.split_last() else {
        return Err("not an error_page NGINX accepts".into());
    };
    let (set, codes) = match rest.split_last() {
        Some((last, codes)) if last.starts_with('=') => (Some(last.as_str()), codes),
        _ => (None, rest),
    };
    let mut statuses = Vec::new();
    for code in codes {
        match code.parse::<u16>() {
            Ok(c) if (300..=599).contains(&c) => statuses.push(c),
            _ => return Err(format!("{code:?} is not a status 300-599")),
        }
    }
    if target.starts_with('@') {
        return Err(
            "an error page from a named location: calmcache's pages come from routes that \
             answer themselves (a file or a return), not from the origin"
                .into(),
        );
    }
    if !target.starts_with('/') || target.contains(['$', '?']) {
        return Err("calmcache's error pages are plain paths (no URL, variables or query)".into());
    }
    let fresh: Vec<u16> = statuses.into_iter().filter(|c| !seen.contains(c)).collect();
    if fresh.is_empty() {
        return Err(
            "every status it names has an earlier error_page (NGINX uses the first)".into(),
        );
    }
    if let Some(code) = set.map(|s| &s[1..]).filter(|c| !c.is_empty()) {
        if !code.parse::<u16>().is_ok_and(|c| (200..=599).contains(&c)) {
            return Err(format!("={code} is not a status 200-599"));
        }
    }
    let target = match set {
        None => target.clone(),
        Some("=") => format!("= {target}"),
        Some(code) => format!("{code} {target}"),
    };
    Ok((fresh, target))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::import_nginx::tree::parse_text;

    fn pages(text: &str, serves: Serves) -> Section {
        let tree = parse_text(text, "t.conf", std::path::Path::new("/")).unwrap();
        let s = Settings::default().child(&tree);
        let mut route = Section::new("[[routes]]");
        error_pages(&mut route, &s, serves);
        route
    }

    #[test]
    fn error_pages_carry_their_statuses_and_status_change() {
        let route = pages(
            "error_page 404 /404.html; error_page 500 502 503 504 /50x.html;\n\
             error_page 403 =200 /empty.gif; error_page 410 = /gone;\n\
             proxy_intercept_errors on;",
            Serves::Proxied,
        );
        assert_eq!(
            route.get("error_pages"),
            Some(&Value::Table(vec![
                ("404".into(), Value::Str("/404.html".into())),
                ("500 502 503 504".into(), Value::Str("/50x.html".into())),
                ("403".into(), Value::Str("=200 /empty.gif".into())),
                ("410".into(), Value::Str("= /gone".into())),
            ]))
        );
        assert_eq!(route.get("intercept_errors"), Some(&Value::Bool(true)));
        // A route that answers itself has nothing to intercept.
        let itself = pages(
            "error_page 404 /404.html; proxy_intercept_errors on;",
            Serves::Itself,
        );
        assert!(itself.get("intercept_errors").is_none());
    }

    #[test]
    fn error_pages_calmcache_cannot_say_are_commented() {
        let route = pages(
            "error_page 404 @fallback; error_page 502 https://status.example/;\n\
             error_page 500 /50x.html?x=$uri; error_page 200 /x; error_page 404 =99 /x;",
            Serves::Proxied,
        );
        assert!(route.get("error_pages").is_none());
        assert_eq!(route.comments.len(), 5, "{:#?}", route.comments);
        assert!(route
            .comments
            .iter()
            .all(|c| c.starts_with("not carried over")));
        // The first line with a status wins; a later one naming only it is commented.
        let route = pages(
            "error_page 404 /a.html; error_page 404 500 /b.html;",
            Serves::Itself,
        );
        assert_eq!(
            route.get("error_pages"),
            Some(&Value::Table(vec![
                ("404".into(), Value::Str("/a.html".into())),
                ("500".into(), Value::Str("/b.html".into())),
            ]))
        );
        // proxy_intercept_errors without pages: nothing written.
        let none = pages("proxy_intercept_errors on;", Serves::Proxied);
        assert!(none.entries.is_empty());
    }
}
