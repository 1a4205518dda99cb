//! The manual's reference pages hold to the code: every key of
//! `config.example.toml` is in `docs/reference/config.md` with the default
//! the example's comment gives ("Default 10000.", `Default "75s"`), and
//! every key there is in the example; every `calmcache_*` family in
//! `docs/reference/metrics.md` is one a running calmcache exports, and every
//! family it exports is there (a disk zone, the access log, active health
//! checks and fleet mode on a real `redis-server` switched on, so every
//! family is).
//!
//! Reads the docs and the example as text; does not judge what they say
//! beyond names and defaults.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use calmcache_testkit::redis::Redis;
use calmcache_testkit::{get, Origin, Proxy};

use crate::scratch;

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A key's place as the reference names it: `server.listen`,
/// `upstreams.NAME.servers`, `routes[].ttl`, `server.tls[].cert`.
type KeyPath = String;

/// `[server]`, `# [[server.tls]]`, `[upstreams.app]` as a section name:
/// `server`, `server.tls[]`, `upstreams.NAME` (the table's own name is the
/// user's). `None` for any other line.
fn section_of(line: &str) -> Option<String> {
    let line = line.trim_start_matches('#').trim();
    let (inner, array) = match line.strip_prefix("[[") {
        Some(rest) => (rest.strip_suffix("]]")?, true),
        None => (line.strip_prefix('[')?.strip_suffix(']')?, false),
    };
    if inner.is_empty()
        || !inner
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'.')
    {
        return None;
    }
    let name = match inner.split_once('.') {
        Some((table @ ("upstreams" | "zones" | "limits"), _)) => format!("{table}.NAME"),
        _ => inner.to_owned(),
    };
    Some(if array { format!("{name}[]") } else { name })
}

/// `key = value` or `# key = value` (a key shown commented out): the key.
/// An indented `#   servers = ...` is an example inside a comment.
fn key_of(line: &str) -> Option<&str> {
    let code = match line.strip_prefix('#') {
        Some(rest) if !rest.starts_with("   ") => rest.trim_start(),
        Some(_) => return None,
        None => line,
    };
    let (key, _) = code.split_once('=')?;
    let key = key.trim_end();
    let first = key.bytes().next()?;
    let word = key
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    (first.is_ascii_lowercase() && word).then_some(key)
}

/// The TOML value `text` starts with: a string, an array or inline table
/// (brackets balanced), a number or a boolean. `None` for prose.
fn literal_at(text: &str) -> Option<&str> {
    let first = text.chars().next()?;
    let end = match first {
        '"' | '\'' => text[1..].find(first)? + 2,
        '[' | '{' => {
            let close = if first == '[' { ']' } else { '}' };
            let mut depth = 0;
            text.char_indices().find_map(|(i, c)| {
                depth += i32::from(c == first) - i32::from(c == close);
                (depth == 0).then_some(i + 1)
            })?
        }
        _ => {
            let end = text
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
                .unwrap_or(text.len());
            let word = text[..end].trim_end_matches('.');
            let number =
                word.parse::<f64>().is_ok() && word.starts_with(|c: char| c.is_ascii_digit());
            (number || word == "true" || word == "false").then_some(word.len())?
        }
    };
    Some(&text[..end])
}

/// The literal after the first "Default" of a key's comment block
/// (`Default 8, at least 1.` -> `8`; `Default: none` -> `None`).
fn default_in(comment: &str) -> Option<String> {
    let at = comment.find("Default")?;
    let rest = comment[at + "Default".len()..]
        .trim_start_matches(':')
        .trim_start();
    literal_at(rest).map(str::to_owned)
}

/// Every key of the example (first place it appears) and the default its
/// comment block gives.
fn example_keys(text: &str) -> BTreeMap<KeyPath, Option<String>> {
    let mut keys = BTreeMap::new();
    let mut section: Option<String> = None;
    let mut comment = String::new();
    for line in text.lines() {
        if let Some(name) = section_of(line) {
            section = Some(name);
            comment.clear();
        } else if let (Some(key), Some(section)) = (key_of(line), &section) {
            let path = format!("{section}.{key}");
            keys.entry(path).or_insert_with(|| default_in(&comment));
            comment.clear();
        } else if let Some(words) = line.strip_prefix('#') {
            comment.push_str(words.trim());
            comment.push(' ');
        } else if line.trim().is_empty() {
            comment.clear();
        }
    }
    keys
}

/// The reference's rows: `## \`[server]\`` headings name the section,
/// `| \`key\` | default | ... |` rows its keys; the default cell as written.
fn reference_keys(text: &str) -> BTreeMap<KeyPath, String> {
    let mut keys = BTreeMap::new();
    let mut section = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = section_of(heading.trim_matches('`'));
        } else if let (Some(row), Some(section)) = (line.strip_prefix("| `"), &section) {
            let cells: Vec<&str> = row.split(" | ").collect();
            let key = cells[0].trim_end_matches('`');
            let default = cells.get(1).copied().unwrap_or_default().to_owned();
            keys.insert(format!("{section}.{key}"), default);
        }
    }
    keys
}

#[test]
fn the_config_reference_has_every_key_of_the_example_with_its_default() {
    let example = example_keys(&repo_file("config.example.toml"));
    let reference = reference_keys(&repo_file("docs/reference/config.md"));
    assert!(example.len() >= 80, "example keys: {example:?}");
    let mut wrong = Vec::new();
    for (path, default) in &example {
        match (reference.get(path), default) {
            (None, _) => wrong.push(format!("{path}: not in the reference")),
            (Some(cell), Some(default)) if *cell != format!("`{default}`") => wrong.push(format!(
                "{path}: the example's default is {default}, the reference says {cell}"
            )),
            _ => {}
        }
    }
    for path in reference.keys().filter(|p| !example.contains_key(*p)) {
        wrong.push(format!(
            "{path}: in the reference, not in config.example.toml"
        ));
    }
    assert!(
        wrong.is_empty(),
        "docs/reference/config.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn example_lines_are_read_as_sections_keys_and_defaults() {
    let text = "[server]\n# Default 8, at least 1.\nthreads = 8\n# Default: none.\n\
                # tls_listen = [\"0.0.0.0:443\"]\n#   servers = [\"x\"]\n\n\
                # [[server.tls]]\n# Default [\"a\", \"b\"] (two).\n# names = []\n\
                [upstreams.app]\n# Default \"5s\".\nconnect_timeout = \"5s\"\n";
    let keys = example_keys(text);
    let keys: Vec<(&str, Option<&str>)> = keys
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    assert_eq!(
        keys,
        [
            ("server.threads", Some("8")),
            ("server.tls[].names", Some("[\"a\", \"b\"]")),
            ("server.tls_listen", None),
            ("upstreams.NAME.connect_timeout", Some("\"5s\"")),
        ]
    );
    assert_eq!(default_in("Default 1.0, finite"), Some("1.0".to_owned()));
    assert_eq!(default_in("Default (and 0): the number"), None);
}

/// The metric families of the reference: the first cell of each row,
/// `| \`calmcache_requests_total\` | counter | ... |`.
fn documented_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("| `calmcache_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("calmcache_{name}"))
        .collect()
}

/// The families of a scrape: its `# TYPE name kind` lines.
fn exported_families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_reference_names_every_exported_family() {
    let origin = Origin::start().await;
    let redis = Redis::start();
    let dir = scratch("metrics-reference");
    let log: PathBuf = dir.join("access.log");
    let proxy = Proxy::new(&origin)
        .disk_zone(&dir.join("zone"), "")
        .access_log(&log, "combined")
        .admin("listen = \"127.0.0.1:0\"")
        .upstream("health_check = { path = \"/health\", interval = \"100ms\" }")
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    assert_eq!(get(&proxy.url("/a")).await.status, 200);
    let scrape = get(&proxy.admin_url("/metrics")).await;
    assert_eq!(scrape.status, 200);
    let exported = exported_families(&scrape.body);
    assert!(exported.len() >= 40, "{}", scrape.body);
    let documented = documented_families(&repo_file("docs/reference/metrics.md"));
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&exported).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/reference/metrics.md lacks {undocumented:?}; names families /metrics does not \
         export: {unknown:?}"
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
