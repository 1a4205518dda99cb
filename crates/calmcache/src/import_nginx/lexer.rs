//! Splits NGINX config text into tokens, each with the file and line it
//! starts on.
//!
//! Owns NGINX's lexical rules: words separated by white space, `"..."` and
//! `'...'` quotes with backslash escapes, `#` comments to the end of the
//! line, and the three punctuation tokens `{`, `}` and `;`. A `{` right after
//! `$` inside a word is part of a `${var}` variable, as in NGINX. It must not
//! know what any directive means.

use std::sync::Arc;

use super::ImportError;

/// Where a token or directive starts: the file as the user named it, and a
/// 1-based line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pos {
    /// The file, as it was given or found by `include`.
    pub(crate) file: Arc<str>,
    /// 1-based line number.
    pub(crate) line: usize,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    /// A word, quotes removed and escapes resolved.
    Word(String),
    /// `{`
    Open,
    /// `}`
    Close,
    /// `;`
    Semi,
}

/// Tokenizes `text` from `file`; an unterminated quote is an error at the
/// line where the quote opened.
pub(crate) fn tokens(text: &str, file: &Arc<str>) -> Result<Vec<(Tok, Pos)>, ImportError> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    let pos = |line| Pos {
        file: file.clone(),
        line,
    };
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            '{' => out.push((Tok::Open, pos(line))),
            '}' => out.push((Tok::Close, pos(line))),
            ';' => out.push((Tok::Semi, pos(line))),
            '"' | '\'' => {
                let start = line;
                let word = quoted(&mut chars, c, &mut line).ok_or_else(|| {
                    ImportError::at(&pos(start), format!("unterminated {c} quote"))
                })?;
                out.push((Tok::Word(word), pos(start)));
            }
            c => {
                let mut word = String::from(c);
                bare(&mut chars, &mut word);
                out.push((Tok::Word(word), pos(line)));
            }
        }
    }
    Ok(out)
}

/// The rest of a quoted word (after its opening `quote`), or `None` at the
/// end of the text.
fn quoted(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    quote: char,
    line: &mut usize,
) -> Option<String> {
    let mut word = String::new();
    loop {
        let c = chars.next()?;
        match c {
            c if c == quote => return Some(word),
            '\\' => {
                let next = chars.next()?;
                // NGINX keeps the backslash except before a quote or another
                // backslash (and turns \t \r \n into the characters).
                match next {
                    '"' | '\'' | '\\' => word.push(next),
                    't' => word.push('\t'),
                    'r' => word.push('\r'),
                    'n' => word.push('\n'),
                    other => {
                        word.push('\\');
                        word.push(other);
                    }
                }
                if next == '\n' {
                    *line += 1;
                }
            }
            '\n' => {
                *line += 1;
                word.push(c);
            }
            c => word.push(c),
        }
    }
}

/// The rest of an unquoted word: up to white space, `;`, `{` (unless it
/// opens `${var}`) or `}` (unless it closes one).
fn bare(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, word: &mut String) {
    let mut in_var = false;
    while let Some(&c) = chars.peek() {
        match c {
            '{' if word.ends_with('$') => in_var = true,
            '}' if in_var => in_var = false,
            c if c.is_whitespace() || matches!(c, ';' | '{' | '}') => return,
            '\\' => {
                word.push(c);
                chars.next();
                if let Some(&next) = chars.peek() {
                    word.push(next);
                    chars.next();
                }
                continue;
            }
            _ => {}
        }
        word.push(c);
        chars.next();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn words(text: &str) -> Vec<Tok> {
        let file: Arc<str> = Arc::from("t.conf");
        tokens(text, &file)
            .unwrap()
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    }

    #[test]
    fn splits_words_quotes_and_punctuation() {
        let toks = words("a 'b c' \"d\\\"e\"; x { y; } # z ;\n");
        assert_eq!(
            toks,
            vec![
                Tok::Word("a".into()),
                Tok::Word("b c".into()),
                Tok::Word("d\"e".into()),
                Tok::Semi,
                Tok::Word("x".into()),
                Tok::Open,
                Tok::Word("y".into()),
                Tok::Semi,
                Tok::Close,
            ]
        );
    }

    #[test]
    fn keeps_braces_of_variables_in_words() {
        assert_eq!(words("k ${host}x;")[1], Tok::Word("${host}x".into()));
    }

    #[test]
    fn lines_are_counted() {
        let file: Arc<str> = Arc::from("t.conf");
        let toks = tokens("a;\n\n'x\ny' b;", &file).unwrap();
        let lines: Vec<usize> = toks.iter().map(|(_, p)| p.line).collect();
        assert_eq!(lines, vec![1, 1, 3, 4, 4]);
    }

    #[test]
    fn unterminated_quote_names_its_line() {
        let file: Arc<str> = Arc::from("t.conf");
        let err = tokens("a;\nb \"never\nclosed;", &file).unwrap_err();
        assert_eq!(err.to_string(), "t.conf:2: unterminated \" quote");
    }
}
