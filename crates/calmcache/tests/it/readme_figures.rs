//! The figures README.md's first screen quotes are bench/README.md's: every
//! ratio (`1.39x`) in its "Measured against them" item appears in a row of
//! the current results table for the bench named before it, so a new
//! bench run cannot leave the first screen quoting an older one.

use std::path::Path;

/// `(bench, figure)` for each ratio in `text`: the bench named in the
/// same sentence (`bench/<name>`, before or after it; empty if none) and
/// the ratio as written (`1.39x`).
fn quoted_figures(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for sentence in text.split(". ") {
        let words: Vec<&str> = sentence
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '/'))
            .collect();
        let bench = words
            .iter()
            .find(|w| {
                // A bench's name; not a link to bench/README.md.
                w.strip_prefix("bench/").is_some_and(|name| {
                    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
            })
            .map_or(String::new(), |w| (*w).to_owned());
        for word in words.iter().filter(|w| is_ratio(w)) {
            found.push((bench.clone(), (*word).to_owned()));
        }
    }
    found
}

/// `1.39x`, `0.25x`: digits, a point, digits, `x`.
fn is_ratio(word: &str) -> bool {
    let Some(number) = word.strip_suffix('x') else {
        return false;
    };
    let mut parts = number.split('.');
    let digits =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    digits(parts.next()) && digits(parts.next()) && parts.next().is_none()
}

/// README's "Measured against them" item, up to the next item.
fn first_screen_item(readme: &str) -> &str {
    let start = readme
        .find("**Measured against them")
        .expect("README's first screen has its 'Measured against them' item");
    let rest = &readme[start..];
    let end = rest.find("\n- **").unwrap_or(rest.len());
    &rest[..end]
}

/// The rows of bench/README.md's "Current results" table.
fn current_rows(bench_readme: &str) -> Vec<&str> {
    let start = bench_readme
        .find("## Current results")
        .expect("bench/README.md has its current results");
    let section = &bench_readme[start + 3..];
    let end = section.find("\n## ").unwrap_or(section.len());
    section[..end]
        .lines()
        .filter(|l| l.starts_with('|'))
        .collect()
}

/// What in `item` is not in `rows`: "bench figure" each.
fn missing(item: &str, rows: &[&str]) -> Vec<String> {
    quoted_figures(item)
        .into_iter()
        .filter(|(bench, figure)| {
            let named = format!("`{bench}`");
            !rows
                .iter()
                .any(|row| row.contains(&named) && row.contains(figure.as_str()))
        })
        .map(|(bench, figure)| format!("{bench} {figure}"))
        .collect()
}

#[test]
fn the_first_screens_ratios_are_the_current_bench_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let bench = std::fs::read_to_string(root.join("bench/README.md")).unwrap();
    let item = first_screen_item(&readme);
    let quoted = quoted_figures(item);
    assert!(quoted.len() >= 5, "ratios found: {quoted:?}");
    let rows = current_rows(&bench);
    let missing = missing(item, &rows);
    assert!(
        missing.is_empty(),
        "README.md quotes figures bench/README.md's current results do not have: {missing:?}"
    );
}

#[test]
fn a_figure_the_table_does_not_have_is_reported() {
    let item = "**Measured against them**: `bench/hits` (1 KB): **1.91x** NGINX's. \
                Over TLS: **2.31x** (`bench/h2`). And 3.0x of something.";
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(b, f)| ((*b).to_owned(), (*f).to_owned()))
            .collect()
    };
    assert_eq!(
        quoted_figures(item),
        pairs(&[("bench/hits", "1.91x"), ("bench/h2", "2.31x"), ("", "3.0x")])
    );
    let rows = [
        "| 1 KB memory hits | `bench/hits` | 1.91x req/s |",
        "| HTTP/2 | `bench/h2` | 2.30x req/s |",
    ];
    assert_eq!(missing(item, &rows), ["bench/h2 2.31x", " 3.0x"]);
}
