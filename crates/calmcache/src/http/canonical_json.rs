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
///
/// Two passes, so that the work stays linear in the text whatever its
/// depth: the first checks the text and notes each object's members sorted
/// by name (the offset where each value starts); the second writes the
/// whole form once into one buffer, each object's members in that order.
/// (Building each object's form and copying it into its parent's would
/// copy a document once per level of nesting.)
pub(crate) fn canonical(text: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut parser = Parser {
        text,
        at: 0,
        objects: Vec::new(),
        out: None,
    };
    parser.skip_space();
    let start = parser.at;
    parser.value(0)?;
    parser.skip_space();
    if parser.at != text.len() {
        return None;
    }
    parser.at = start;
    parser.out = Some(String::with_capacity(text.len()));
    parser.value(0)?;
    parser.out.map(String::into_bytes)
}

/// An object of the text, as the first pass found it.
struct Object {
    /// Offset of its `{`.
    start: usize,
    /// Offset just past its `}`.
    end: usize,
    /// Its members sorted by (decoded) name: the name and the offset where
    /// the value starts.
    members: Vec<(String, usize)>,
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    /// Every object, in the order their `{` come (so sorted by `start`).
    objects: Vec<Object>,
    /// `None` in the first pass (checking), the form in the second.
    out: Option<String>,
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

    fn push(&mut self, s: &str) {
        if let Some(out) = self.out.as_mut() {
            out.push_str(s);
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' if self.out.is_some() => self.write_object(depth),
            b'{' => self.check_object(depth),
            b'[' => self.array(depth),
            b'"' => {
                let s = self.string()?;
                if let Some(out) = self.out.as_mut() {
                    push_string(out, &s);
                }
                Some(())
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => self.number(),
        }
    }

    /// First pass: checks an object and notes its members, sorted.
    fn check_object(&mut self, depth: usize) -> Option<()> {
        let index = self.objects.len();
        self.objects.push(Object {
            start: self.at,
            end: 0,
            members: Vec::new(),
        });
        self.at += 1;
        let mut members: Vec<(String, usize)> = Vec::new();
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                self.skip_space();
                let name = self.string()?;
                self.expect(b':')?;
                self.skip_space();
                members.push((name, self.at));
                self.value(depth + 1)?;
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
        let object = self.objects.get_mut(index)?;
        object.end = self.at;
        object.members = members;
        Some(())
    }

    /// Second pass: writes the object at `self.at`, members in the order
    /// the first pass sorted them.
    fn write_object(&mut self, depth: usize) -> Option<()> {
        let index = self
            .objects
            .binary_search_by_key(&self.at, |o| o.start)
            .ok()?;
        self.push("{");
        let count = self.objects.get(index)?.members.len();
        for i in 0..count {
            if i > 0 {
                self.push(",");
            }
            let (name, at) = self.objects.get(index)?.members.get(i)?;
            let at = *at;
            if let Some(out) = self.out.as_mut() {
                push_string(out, name);
                out.push(':');
            }
            self.at = at;
            self.value(depth + 1)?;
        }
        self.push("}");
        self.at = self.objects.get(index)?.end;
        Some(())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.at += 1;
        self.push("[");
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            self.push("]");
            return Some(());
        }
        loop {
            self.skip_space();
            self.value(depth + 1)?;
            self.skip_space();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.push(",");
                }
                b']' => {
                    self.at += 1;
                    self.push("]");
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

    fn literal(&mut self, word: &str) -> Option<()> {
        let rest = self.text.get(self.at..)?;
        rest.starts_with(word).then_some(())?;
        self.at += word.len();
        self.push(word);
        Some(())
    }

    /// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`,
    /// copied as written.
    fn number(&mut self) -> Option<()> {
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
        let text = self.text;
        self.push(text.get(start..self.at)?);
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

    /// A document of a few MiB, 128 objects deep, each level out of order
    /// (a large member before the nested one): written once, not copied
    /// once per level, and right.
    #[test]
    fn a_deep_large_document_is_canonicalised_whole() {
        let pad = "x".repeat(32 * 1024);
        let levels = MAX_DEPTH - 1; // and the array inside: 128 levels
        let mut text = String::new();
        let mut want = String::new();
        for i in 0..levels {
            text.push_str(&format!("{{ \"z{i}\": \"{pad}\", \"a\": "));
            want.push_str("{\"a\":");
        }
        text.push_str("[1, 2]");
        want.push_str("[1,2]");
        for i in (0..levels).rev() {
            text.push('}');
            want.push_str(&format!(",\"z{i}\":\"{pad}\"}}"));
        }
        assert!(text.len() > 3 << 20);
        assert_eq!(c(&text).as_deref(), Some(want.as_str()));
    }
}
