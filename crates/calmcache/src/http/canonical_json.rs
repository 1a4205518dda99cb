//! The canonical form of a JSON text, for keying request bodies
//! (`body_key = "json"`): object members sorted by name, insignificant
//! whitespace dropped, strings re-escaped one way, numbers exactly as
//! written (`1`, `1.0` and `1e0` stay three bodies: an origin may tell them
//! apart, and no precision is ever lost).
//!
//! Not JSON (RFC 8259) gives `None`, and so do texts two readers could take
//! differently: an object with the same name twice (the first or the last
//! wins, depending on the parser), nesting deeper than [`MAX_DEPTH`].
//! Equal canonical forms mean equal JSON values; different values never
//! share a form. Strings are decoded and re-encoded by serde_json.

/// The deepest nesting accepted (the parser recurses once per level).
pub(crate) const MAX_DEPTH: usize = 128;

/// The canonical form of `text`, or `None` when it is not JSON (see the
/// module doc).
pub(crate) fn canonical(text: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut parser = Parser { text, at: 0 };
    let mut out = String::with_capacity(text.len());
    parser.skip_space();
    parser.value(&mut out, 0)?;
    parser.skip_space();
    (parser.at == text.len()).then(|| out.into_bytes())
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Takes `byte`, after optional whitespace.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn value(&mut self, out: &mut String, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(out, depth),
            b'[' => self.array(out, depth),
            b'"' => {
                let s = self.string()?;
                push_string(out, &s);
                Some(())
            }
            b't' => self.literal(out, "true"),
            b'f' => self.literal(out, "false"),
            b'n' => self.literal(out, "null"),
            _ => self.number(out),
        }
    }

    fn object(&mut self, out: &mut String, depth: usize) -> Option<()> {
        self.at += 1;
        let mut members: Vec<(String, String)> = Vec::new();
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                self.skip_space();
                let name = self.string()?;
                self.expect(b':')?;
                self.skip_space();
                let mut value = String::new();
                self.value(&mut value, depth + 1)?;
                members.push((name, value));
                self.skip_space();
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        members.sort_by(|a, b| a.0.cmp(&b.0));
        if members.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return None;
        }
        out.push('{');
        for (i, (name, value)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_string(out, name);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        Some(())
    }

    fn array(&mut self, out: &mut String, depth: usize) -> Option<()> {
        self.at += 1;
        out.push('[');
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            out.push(']');
            return Some(());
        }
        loop {
            self.skip_space();
            self.value(out, depth + 1)?;
            self.skip_space();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    out.push(',');
                }
                b']' => {
                    self.at += 1;
                    out.push(']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string, decoded (serde_json checks its escapes and characters).
    fn string(&mut self) -> Option<String> {
        let start = self.at;
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
        self.at += 1;
        serde_json::from_str(self.text.get(start..self.at)?).ok()
    }

    fn literal(&mut self, out: &mut String, word: &str) -> Option<()> {
        let rest = self.text.get(self.at..)?;
        rest.starts_with(word).then(|| {
            self.at += word.len();
            out.push_str(word);
        })
    }

    /// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`,
    /// copied as written.
    fn number(&mut self, out: &mut String) -> Option<()> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        out.push_str(self.text.get(start..self.at)?);
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }

    /// At least one digit.
    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }
}

/// `s` as a JSON string, escaped as serde_json escapes.
fn push_string(out: &mut String, s: &str) {
    // Serialising a str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn c(text: &str) -> Option<String> {
        canonical(text.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn members_are_sorted_and_space_dropped() {
        assert_eq!(
            c(" { \"b\" : [1, 2.50, -0e+3] ,\n\"a\":{\"y\":null,\"x\":true} } ").as_deref(),
            Some(r#"{"a":{"x":true,"y":null},"b":[1,2.50,-0e+3]}"#)
        );
        assert_eq!(c("[]").as_deref(), Some("[]"));
        assert_eq!(c("{ }").as_deref(), Some("{}"));
        assert_eq!(c("\"\\u0041\\/\"").as_deref(), Some("\"A/\""));
        assert_eq!(c("12").as_deref(), Some("12"));
    }

    #[test]
    fn numbers_stay_as_written() {
        assert_ne!(c("1"), c("1.0"));
        assert_ne!(c("1e0"), c("1"));
        assert_ne!(
            c("12345678901234567890123"),
            c("12345678901234567890124"),
            "no precision lost"
        );
    }

    #[test]
    fn not_json_or_ambiguous_is_none() {
        for bad in [
            "",
            "{",
            "{\"a\":1,}",
            "[1,]",
            "01",
            "1.",
            "-",
            ".5",
            "+1",
            "{\"a\":1}x",
            "{\"a\":1,\"a\":2}",
            "{a:1}",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"tab\there\"",
            "tru",
            "nul",
            "[1 2]",
            "\u{feff}{}",
        ] {
            assert_eq!(c(bad), None, "{bad:?}");
        }
        assert_eq!(canonical(b"\xff"), None);
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert_eq!(c(&deep), None);
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(c(&ok).is_some());
    }
}
