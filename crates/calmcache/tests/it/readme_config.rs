//! The docs' configs pass `calmcache check`: every ```toml block of
//! `README.md` and the manual (`docs/**/*.md`), and the whole of `config.example.toml` and
//! `dist/*.toml` (when they exist), run through the real binary, so an
//! example cannot drift from what the proxy accepts.
//!
//! A block fenced ```` ```toml fragment ```` is a deliberate excerpt (keys
//! shown out of a whole config): it is skipped and counted, and the count is
//! printed. Every other block must be a complete config.
//!
//! Files the blocks name are rewritten into a temp dir, and nothing else is:
//! a TOML string that is an absolute path under one of [`FILE_ROOTS`]
//! (`"/var/cache/calmcache/ssd"`, `"/etc/ssl/example.com/fullchain.pem"`)
//! becomes the same path under the temp dir; regexes, URL paths (`warm`,
//! `health_check.path`) and addresses stay as written. The files `check`
//! reads are then created there: a certificate and its key for each
//! `cert`/`key` pair (`tls_cert`/`tls_key`, ... alike; for the table's
//! `names`, else the name of the certificate's directory when it is a host
//! name; a `cert` without its key gets both in one PEM), a CA certificate
//! for a key with a word `ca` (`tls_ca`, `tls_ca_file`), a one-line secret for other
//! `*_file` keys (of 32 bytes or more, as `fleet.secret_file` wants), and the parent directory of any other path (a zone's
//! directory, the access log's file).

use std::path::{Path, PathBuf};
use std::process::Command;

use calmcache_testkit::tls::TestCa;

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

/// The first directories of the absolute paths rewritten into the temp dir.
const FILE_ROOTS: [&str; 10] = [
    "etc", "var", "mnt", "srv", "opt", "run", "tmp", "home", "data", "media",
];

/// One ```toml block (or a whole `.toml` file), where it starts.
struct Block {
    /// `README.md:512`: the file and the line of the block's first TOML line.
    place: String,
    text: String,
}

/// What the docs hold: the blocks to check and the fragments skipped.
#[derive(Default)]
struct Found {
    blocks: Vec<Block>,
    fragments: Vec<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files (`README.md`, the whole manual `docs/**/*.md`) and
/// TOML files (`config.example.toml`, `dist/*.toml`) that exist, sorted.
fn doc_files(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut markdown = vec![root.join("README.md")];
    markdown.extend(files_under(&root.join("docs"), "md"));
    let mut toml = vec![root.join("config.example.toml")];
    toml.extend(
        files_under(&root.join("dist"), "toml")
            .into_iter()
            .filter(|p| {
                // dist/*.toml only: not the monitoring files' folders.
                p.parent() == Some(&root.join("dist"))
            }),
    );
    toml.retain(|p| p.exists());
    (markdown, toml)
}

/// The files ending in `.ext` under `dir`, its subdirectories included,
/// sorted (none when `dir` does not exist).
fn files_under(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == ext) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The ```toml blocks of one Markdown file. `name` is how failures name it.
fn markdown_blocks(name: &str, text: &str, found: &mut Found) {
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let words: Vec<&str> = info.split_whitespace().collect();
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|(_, l)| !l.trim_start().starts_with("```"))
            .map(|(_, l)| l)
            .collect();
        let place = format!("{name}:{}", n + 2);
        match words.as_slice() {
            ["toml"] => found.blocks.push(Block {
                place,
                text: body.join("\n"),
            }),
            ["toml", "fragment", ..] => found.fragments.push(place),
            _ => {}
        }
    }
}

fn collect(root: &Path) -> Found {
    let mut found = Found::default();
    let (markdown, toml) = doc_files(root);
    let name = |p: &Path| {
        p.strip_prefix(root)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    for file in markdown {
        let text = std::fs::read_to_string(&file).unwrap();
        markdown_blocks(&name(&file), &text, &mut found);
    }
    for file in toml {
        found.blocks.push(Block {
            place: format!("{}:1", name(&file)),
            text: std::fs::read_to_string(&file).unwrap(),
        });
    }
    found
}

/// `text` with every quoted absolute path under [`FILE_ROOTS`] moved under
/// `dir` (basic `"..."` and literal `'...'` strings alike; comments and
/// everything else copied as they are).
fn rewrite_paths(text: &str, dir: &Path) -> String {
    let dir = dir.to_string_lossy();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        match c {
            '#' => {
                while let Some(c) = chars.next_if(|&c| c != '\n') {
                    out.push(c);
                }
            }
            '"' | '\'' => {
                let content = string_content(&mut chars, c);
                let root = content.strip_prefix('/').and_then(|p| p.split_once('/'));
                if root.is_some_and(|(root, _)| FILE_ROOTS.contains(&root)) {
                    out.push_str(&dir);
                }
                out.push_str(&content);
            }
            _ => {}
        }
    }
    out
}

/// The rest of a string opened by `quote`, its closing quote included (a
/// basic string's `\"` does not close it; a line end always does).
fn string_content(chars: &mut impl Iterator<Item = char>, quote: char) -> String {
    let mut content = String::new();
    let mut escaped = false;
    for c in chars {
        content.push(c);
        if (c == quote && !escaped) || c == '\n' {
            break;
        }
        escaped = quote == '"' && c == '\\' && !escaped;
    }
    content
}

/// Creates what `check` reads for every rewritten path in `config`.
fn create_files(config: &toml::Table, dir: &Path, ca: &TestCa) {
    let mut tables = vec![config];
    while let Some(table) = tables.pop() {
        for (key, value) in table {
            match value {
                toml::Value::Table(inner) => tables.push(inner),
                toml::Value::Array(items) => {
                    tables.extend(items.iter().filter_map(toml::Value::as_table));
                }
                toml::Value::String(path) if path.starts_with(&*dir.to_string_lossy()) => {
                    create_file(table, key, Path::new(path), ca);
                }
                _ => {}
            }
        }
    }
}

/// One file (or directory) for `table[key] = path`: see the module doc.
fn create_file(table: &toml::Table, key: &str, path: &Path, ca: &TestCa) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let is_ca = key.split('_').any(|word| word == "ca");
    let cert_key = ["cert", "certificate"]
        .iter()
        .find_map(|suffix| key.strip_suffix(suffix));
    if is_ca {
        std::fs::copy(&ca.ca_pem, path).unwrap();
    } else if let Some(prefix) = cert_key {
        let names = leaf_names(table, path);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let leaf = ca.leaf(&leaf_file(path), &names);
        let cert = std::fs::read_to_string(&leaf.cert).unwrap();
        let private = std::fs::read_to_string(&leaf.key).unwrap();
        match table.get(&format!("{prefix}key")).and_then(|v| v.as_str()) {
            Some(key_path) => {
                std::fs::create_dir_all(Path::new(key_path).parent().unwrap()).unwrap();
                std::fs::write(key_path, private).unwrap();
                std::fs::write(path, cert).unwrap();
            }
            // A combined PEM: the key and the chain in one file.
            None => std::fs::write(path, format!("{private}{cert}")).unwrap(),
        }
    } else if key.ends_with("key") {
        // Written with its certificate (above).
    } else if key.ends_with("_file") {
        std::fs::write(path, "a-secret-from-the-docs-test-at-least-32-bytes-long\n").unwrap();
    }
}

/// A file name for the leaf's PEM files in the CA's dir, unique per path.
fn leaf_file(path: &Path) -> String {
    path.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The table's `names`, else the certificate's directory when it looks like
/// a host name (`/etc/ssl/example.com/fullchain.pem`), else `localhost`.
fn leaf_names(table: &toml::Table, path: &Path) -> Vec<String> {
    let mut names: Vec<String> = match table.get("names").and_then(|v| v.as_array()) {
        Some(names) => names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect(),
        None => path
            .parent()
            .and_then(Path::file_name)
            .map(|d| d.to_string_lossy().into_owned())
            .filter(|d| d.contains('.'))
            .into_iter()
            .collect(),
    };
    if names.is_empty() {
        names.push("localhost".to_owned());
    }
    names
}

/// Runs `check` on one block; `Err` holds what to print about it.
fn check_block(block: &Block, n: usize, ca: &TestCa) -> Result<(), String> {
    let dir = crate::scratch(&format!("docs-{n}"));
    let text = rewrite_paths(&block.text, &dir);
    let fail = |what: String| {
        format!(
            "{}: {what}\n--- the block, as checked ---\n{text}\n---",
            block.place
        )
    };
    let table: toml::Table = text
        .parse()
        .map_err(|e| fail(format!("not valid TOML: {e}")))?;
    create_files(&table, &dir, ca);
    let file = dir.join("calmcache.toml");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.contains("never used") {
        // A doc example whose route no request reaches teaches the wrong order.
        return Err(fail(format!("a route is never used:\n{said}")));
    }
    if out.status.success() {
        return Ok(());
    }
    Err(fail(format!(
        "calmcache check exited {:?}:\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

#[test]
fn every_toml_block_of_the_docs_passes_check() {
    let found = collect(&repo_root());
    // The README alone has more than this: fewer means the extraction broke.
    assert!(
        found.blocks.len() >= 8,
        "only {} blocks found",
        found.blocks.len()
    );
    let ca_dir = crate::scratch("docs-ca");
    let ca = TestCa::new(&ca_dir);
    let failures: Vec<String> = found
        .blocks
        .iter()
        .enumerate()
        .filter_map(|(n, block)| check_block(block, n, &ca).err())
        .collect();
    let _ = std::fs::remove_dir_all(&ca_dir);
    println!(
        "{} TOML blocks checked, {} fragments skipped: {}",
        found.blocks.len(),
        found.fragments.len(),
        found.fragments.join(", ")
    );
    assert!(
        failures.is_empty(),
        "{} of {} TOML blocks fail `calmcache check`:\n\n{}",
        failures.len(),
        found.blocks.len(),
        failures.join("\n\n")
    );
}

#[test]
fn paths_are_the_only_thing_rewritten() {
    let dir = Path::new("/tmp/x");
    let text = r#"path = "/var/cache/a" # the seed's "/var/x"
match = '^/api/'
x = "a \"/etc/no\" b"
warm = ["/", "/feed/", "/etc"]
cert = '/etc/ssl/a.pem'
health_check = { path = "/healthz" }
"#;
    assert_eq!(
        rewrite_paths(text, dir),
        r#"path = "/tmp/x/var/cache/a" # the seed's "/var/x"
match = '^/api/'
x = "a \"/etc/no\" b"
warm = ["/", "/feed/", "/etc"]
cert = '/tmp/x/etc/ssl/a.pem'
health_check = { path = "/healthz" }
"#
    );
}

#[test]
fn fences_are_read_with_their_info_string() {
    let text = "a\n```toml\n[server]\n```\n```toml fragment\nx = 1\n```\n```sh\nls\n```\n";
    let mut found = Found::default();
    markdown_blocks("R.md", text, &mut found);
    assert_eq!(found.blocks.len(), 1);
    assert_eq!(found.blocks[0].place, "R.md:3");
    assert_eq!(found.blocks[0].text, "[server]");
    assert_eq!(found.fragments, ["R.md:6"]);
}

/// The quick start's config ("Put it in front of my site"), run: a
/// logged-in visitor's static files are shared and cached (issue 25: the
/// cookie rule sat on the only cached route, so every CSS, JS, image and
/// video of a logged-in visitor went to the application), while their
/// pages, the private area and a page whose query merely ends like a file
/// (`/account.php?x.css`) are never stored for others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_shares_static_files_but_not_pages() {
    use calmcache_testkit::{get_with, Origin};
    use http::Method;
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = readme
        .split_once("## Put it in front of my site")
        .map(|(_, rest)| rest)
        .unwrap();
    let mut found = Found::default();
    markdown_blocks("README.md", section, &mut found);
    let origin = Origin::start().await;
    let text = found.blocks[0]
        .text
        .replace("\"0.0.0.0:8080\"", "\"127.0.0.1:0\"")
        .replace("\"127.0.0.1:9090\"", "\"127.0.0.1:0\"")
        .replace("\"127.0.0.1:8000\"", &format!("\"{}\"", origin.addr()));
    let config = calmcache::Config::from_toml(&text, "<quick start>").unwrap();
    let running = calmcache::start_with(&config, None, calmcache::ZoneTiers::new())
        .await
        .unwrap();
    let url = |p: &str| format!("http://{}{p}", running.proxy_addrs[0]);
    let logged_in = [("cookie", "sessionid=abc")];
    for path in [
        "/static/app.css",
        "/js/app.js?v=3",
        "/img/a.png",
        "/media/v.mp4",
    ] {
        let first = get_with(Method::GET, &url(path), &logged_in).await;
        assert_eq!(first.status, 200, "{path}");
        let again = get_with(Method::GET, &url(path), &logged_in).await;
        assert!(
            again.cache_status_params().has("hit"),
            "{path}: {}",
            again.cache_status()
        );
        let anonymous = get_with(Method::GET, &url(path), &[]).await;
        assert!(anonymous.cache_status_params().has("hit"), "{path}");
        let bare = path.split('?').next().unwrap();
        assert_eq!(
            origin.hits_for(bare),
            1,
            "{path}: the application asked once"
        );
    }
    // Pages of a logged-in visitor, the private area, and a query that
    // ends like a file: never stored, so the next visitor gets their own.
    for path in [
        "/",
        "/account.php?x.css",
        "/admin/site.css",
        "/account/style.css",
    ] {
        let mine = get_with(Method::GET, &url(path), &logged_in).await;
        assert_eq!(mine.status, 200, "{path}");
        let next = get_with(Method::GET, &url(path), &[]).await;
        assert!(
            !next.cache_status_params().has("hit"),
            "{path}: {}",
            next.cache_status()
        );
        let bare = path.split('?').next().unwrap();
        assert_eq!(origin.hits_for(bare), 2, "{path}");
    }
    running.shutdown(std::time::Duration::from_secs(5)).await;
}
