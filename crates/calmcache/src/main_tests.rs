//! The commands the docs show are the CLI's: every `calmcache ...` (or
//! `cargo run --release -- ...`) in a ```sh, ```bash or ```console block of
//! README.md and the manual (docs/**/*.md) parses with [`Cli`] (each part of a line split at
//! `&&`, `||`, `|` and `;`; comments dropped), so a renamed flag or
//! subcommand cannot leave the docs behind.

use super::Cli;
use clap::Parser;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and the whole manual, docs/**/*.md.
fn doc_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut docs = Vec::new();
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for path in std::fs::read_dir(&dir)
            .expect("docs/ is readable")
            .flatten()
            .map(|e| e.path())
        {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
    }
    docs.sort();
    let mut files = vec![root.join("README.md")];
    files.extend(docs);
    files
}

/// The calmcache command lines of `text`'s shell blocks: (line number,
/// argv with `calmcache` first).
fn invocations(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let mut in_shell = false;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            in_shell = !in_shell && matches!(info.trim(), "sh" | "bash" | "console" | "shell");
            continue;
        }
        if !in_shell {
            continue;
        }
        let code = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
        let code = code.split(" #").next().unwrap_or_default();
        for part in code.split("&&").flat_map(|p| p.split(['|', ';'])) {
            let words: Vec<&str> = part.split_whitespace().collect();
            let args = match words.as_slice() {
                ["calmcache", rest @ ..] => rest,
                ["cargo", "run", "--release", "--", rest @ ..] => rest,
                _ => continue,
            };
            let mut argv = vec!["calmcache".to_owned()];
            argv.extend(args.iter().map(|a| (*a).to_owned()));
            found.push((i + 1, argv));
        }
    }
    found
}

#[test]
fn the_commands_in_the_docs_parse() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    let root = repo_root();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).expect("doc is readable");
        for (line, argv) in invocations(&text) {
            checked += 1;
            if let Err(e) = Cli::try_parse_from(&argv) {
                let name = file.strip_prefix(&root).unwrap_or(&file).to_string_lossy();
                wrong.push(format!("{name}:{line}: {}\n{e}", argv.join(" ")));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // README's two commands, check/serve/reload/origin, import-nginx...
    assert!(
        checked >= 10,
        "only {checked} commands found: fences not read?"
    );
}

#[test]
fn a_wrong_flag_or_subcommand_in_a_doc_is_found_and_fails() {
    let doc = "text\n```sh\ncalmcache check --konfig a.toml && calmcache serve -c a.toml\n\
               cargo run --release -- dmo   # typo\n```\n```toml\ncalmcache = 1\n```\n";
    let found = invocations(doc);
    let lines: Vec<usize> = found.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, [3, 3, 4], "{found:?}");
    let parses: Vec<bool> = found
        .iter()
        .map(|(_, argv)| Cli::try_parse_from(argv).is_ok())
        .collect();
    assert_eq!(parses, [false, true, false]);
}
