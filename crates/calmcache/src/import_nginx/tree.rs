//! Builds the directive tree from tokens and expands `include`.
//!
//! Owns NGINX's syntax: a directive is a name and arguments ending in `;`,
//! or in a `{ ... }` block of directives. Reports unbalanced braces and a
//! missing `;` with the file and line. `include PATTERN;` is replaced by the
//! directives of the files it names: a relative pattern is taken from the
//! directory of the main config file (NGINX's conf prefix when started with
//! `-c`), a `*`, `?` or `[...]` in the file name part is a glob (matches in
//! name order; none is not an error, as in NGINX), and a file that includes
//! itself, directly or not, is an error instead of a hang. It must not know
//! what any other directive means.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::lexer::{tokens, Pos, Tok};
use super::ImportError;

/// Nesting of includes past which the config is refused (a loop is caught
/// sooner; this bounds a chain of distinct files).
const MAX_INCLUDE_DEPTH: usize = 32;

/// One directive with its arguments and, for `name ... { }`, its block.
#[derive(Clone, Debug)]
pub(crate) struct Directive {
    /// The directive's name, e.g. `proxy_cache_path`.
    pub(crate) name: String,
    /// Its arguments, unquoted.
    pub(crate) args: Vec<String>,
    /// Where its name is.
    pub(crate) pos: Pos,
    /// The directives of its `{ }` block, if it has one.
    pub(crate) block: Option<Vec<Directive>>,
}

impl Directive {
    /// The directive as written, e.g. `proxy_cache_valid 200 1s`, for comments.
    pub(crate) fn text(&self) -> String {
        let mut text = self.name.clone();
        for arg in &self.args {
            text.push(' ');
            if arg.is_empty() || arg.contains(char::is_whitespace) {
                text.push_str(&format!("{arg:?}"));
            } else {
                text.push_str(arg);
            }
        }
        text
    }

    /// The directives inside its block (none without one).
    pub(crate) fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }
}

/// Reads `path` and every file it includes into one tree.
pub(crate) fn load(path: &Path) -> Result<Vec<Directive>, ImportError> {
    let prefix = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut loader = Loader {
        prefix,
        stack: Vec::new(),
    };
    loader.file(path, None)
}

/// Parses `text` (named `name` in errors) on its own; `include` is resolved
/// against `prefix`.
#[cfg(test)]
pub(crate) fn parse_text(
    text: &str,
    name: &str,
    prefix: &Path,
) -> Result<Vec<Directive>, ImportError> {
    let mut loader = Loader {
        prefix: prefix.to_path_buf(),
        stack: vec![PathBuf::from(name)],
    };
    loader.text(text, name)
}

/// Include state: where relative patterns start, and the files being read
/// (to catch loops).
struct Loader {
    prefix: PathBuf,
    stack: Vec<PathBuf>,
}

impl Loader {
    fn file(&mut self, path: &Path, from: Option<&Pos>) -> Result<Vec<Directive>, ImportError> {
        let shown = path.display().to_string();
        let fail = |message: String| match from {
            Some(pos) => ImportError::at(pos, message),
            None => ImportError::file(&shown, message),
        };
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if self.stack.contains(&canonical) {
            let chain: Vec<String> = self.stack.iter().map(|p| p.display().to_string()).collect();
            return Err(fail(format!(
                "include loop: {} includes {shown} again",
                chain.join(" -> ")
            )));
        }
        if self.stack.len() >= MAX_INCLUDE_DEPTH {
            return Err(fail(format!(
                "includes nested more than {MAX_INCLUDE_DEPTH} deep"
            )));
        }
        let text = std::fs::read(path).map_err(|e| fail(format!("cannot read {shown}: {e}")))?;
        let text = String::from_utf8_lossy(&text);
        self.stack.push(canonical);
        let tree = self.text(&text, &shown);
        self.stack.pop();
        tree
    }

    fn text(&mut self, text: &str, name: &str) -> Result<Vec<Directive>, ImportError> {
        let file: Arc<str> = Arc::from(name);
        let toks = tokens(text, &file)?;
        let mut iter = toks.into_iter().peekable();
        let tree = self.block(&mut iter, None)?;
        Ok(tree)
    }

    /// Directives up to the `}` closing the block opened at `open` (or the
    /// end of the file at the top).
    fn block(
        &mut self,
        toks: &mut std::iter::Peekable<std::vec::IntoIter<(Tok, Pos)>>,
        open: Option<&Pos>,
    ) -> Result<Vec<Directive>, ImportError> {
        let mut out = Vec::new();
        loop {
            let Some((tok, pos)) = toks.next() else {
                return match open {
                    Some(open) => Err(ImportError::at(
                        open,
                        "this block's { is never closed (unbalanced braces: a } is missing)",
                    )),
                    None => Ok(out),
                };
            };
            let name = match tok {
                Tok::Word(name) => name,
                Tok::Close => {
                    return match open {
                        Some(_) => Ok(out),
                        None => Err(ImportError::at(&pos, "unexpected } (unbalanced braces)")),
                    }
                }
                Tok::Semi => {
                    return Err(ImportError::at(
                        &pos,
                        "unexpected ; (no directive before it)",
                    ))
                }
                Tok::Open => {
                    return Err(ImportError::at(
                        &pos,
                        "unexpected { (no directive before it)",
                    ))
                }
            };
            let mut args = Vec::new();
            let block = loop {
                match toks.next() {
                    Some((Tok::Word(word), _)) => args.push(word),
                    Some((Tok::Semi, _)) => break None,
                    Some((Tok::Open, open_pos)) => break Some(self.block(toks, Some(&open_pos))?),
                    Some((Tok::Close, close)) => {
                        return Err(ImportError::at(
                            &pos,
                            format!(
                                "directive {name:?} has no ending ';' (a }} follows at line {})",
                                close.line
                            ),
                        ))
                    }
                    None => {
                        return Err(ImportError::at(
                            &pos,
                            format!("directive {name:?} has no ending ';' (the file ends)"),
                        ))
                    }
                }
            };
            let directive = Directive {
                name,
                args,
                pos,
                block,
            };
            if directive.name == "include" && directive.block.is_none() {
                out.extend(self.include(&directive)?);
            } else {
                out.push(directive);
            }
        }
    }

    fn include(&mut self, directive: &Directive) -> Result<Vec<Directive>, ImportError> {
        let [pattern] = directive.args.as_slice() else {
            return Err(ImportError::at(
                &directive.pos,
                "include takes one file name or pattern",
            ));
        };
        let mut out = Vec::new();
        for path in self.expand(pattern, &directive.pos)? {
            out.extend(self.file(&path, Some(&directive.pos))?);
        }
        Ok(out)
    }

    /// The files `pattern` names, relative to the conf prefix.
    fn expand(&self, pattern: &str, pos: &Pos) -> Result<Vec<PathBuf>, ImportError> {
        let full = self.prefix.join(pattern);
        let is_glob = |s: &str| s.contains(['*', '?', '[']);
        if !is_glob(pattern) {
            return Ok(vec![full]);
        }
        let dir = full.parent().unwrap_or(Path::new("."));
        let name = full.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if is_glob(&dir.to_string_lossy()) {
            return Err(ImportError::at(
                pos,
                format!("include {pattern:?}: wildcards in directory names are not supported, only in the file name"),
            ));
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            // glob() in NGINX: a directory that does not exist matches nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(ImportError::at(
                    pos,
                    format!("include {pattern:?}: cannot list {}: {e}", dir.display()),
                ))
            }
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| {
                let file = e.file_name();
                let file = file.to_string_lossy();
                // Like glob(3): a leading dot is matched only by a leading dot.
                (!file.starts_with('.') || name.starts_with('.')) && wildcard(name, &file)
            })
            .map(|e| e.path())
            .collect();
        found.sort();
        Ok(found)
    }
}

/// Shell wildcard match of `name` against `pattern`: `*`, `?`, `[abc]`,
/// `[a-z]`, `[!a]`.
fn wildcard(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches_from(&p, &n)
}

fn matches_from(p: &[char], n: &[char]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some('*') => (0..=n.len()).any(|skip| matches_from(&p[1..], &n[skip..])),
        Some('?') => !n.is_empty() && matches_from(&p[1..], &n[1..]),
        Some('[') => {
            let Some(end) = p.iter().skip(2).position(|&c| c == ']').map(|i| i + 2) else {
                return n.first() == Some(&'[') && matches_from(&p[1..], &n[1..]);
            };
            let Some(&c) = n.first() else { return false };
            in_class(&p[1..end], c) && matches_from(&p[end + 1..], &n[1..])
        }
        Some(&lit) => n.first() == Some(&lit) && matches_from(&p[1..], &n[1..]),
    }
}

fn in_class(class: &[char], c: char) -> bool {
    let (negate, class) = match class.first() {
        Some('!' | '^') => (true, &class[1..]),
        _ => (false, class),
    };
    let mut hit = false;
    let mut i = 0;
    while i < class.len() {
        if i + 2 < class.len() && class[i + 1] == '-' {
            hit |= (class[i]..=class[i + 2]).contains(&c);
            i += 3;
        } else {
            hit |= class[i] == c;
            i += 1;
        }
    }
    hit != negate
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(text: &str) -> Result<Vec<Directive>, ImportError> {
        parse_text(text, "t.conf", Path::new("/nonexistent"))
    }

    #[test]
    fn blocks_nest() {
        let tree = parse("http { server { listen 80; } }\nuser x;").unwrap();
        assert_eq!(tree.len(), 2);
        assert_eq!(tree[0].children()[0].children()[0].text(), "listen 80");
        assert_eq!(tree[1].pos.line, 2);
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            (
                "http {\n server {\n listen 80;\n}\n",
                "t.conf:1: this block's { is never closed",
            ),
            ("a;\n}\n", "t.conf:2: unexpected }"),
            (
                "a;\nproxy_pass x\n}",
                "t.conf:2: directive \"proxy_pass\" has no ending ';' (a } follows at line 3)",
            ),
            (
                "x {\n listen 80\n",
                "t.conf:2: directive \"listen\" has no ending ';' (the file ends)",
            ),
            ("a;\n;", "t.conf:2: unexpected ;"),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn wildcards() {
        assert!(wildcard("*.conf", "a.conf"));
        assert!(!wildcard("*.conf", "a.conf.bak"));
        assert!(wildcard("site-?.[a-c]*", "site-1.b.conf"));
        assert!(!wildcard("[!a]x", "ax"));
    }
}
