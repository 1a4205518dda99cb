//! Just enough HPACK (RFC 7541) for hostile HTTP/2 tests: [`encode_literal`]
//! writes every field as "literal without indexing, new name" with plain
//! (non-Huffman) strings, so a test sends exactly the names and values it
//! chose, malformed ones included; [`Decoder`] reads a server's header
//! blocks whole (static and dynamic tables, Huffman strings).

/// Encodes `fields` as literals without indexing, new names, no Huffman
/// (RFC 7541 §6.2.2): byte `0x00`, then the name and the value as
/// length-prefixed strings. Names are sent as given (uppercase too).
pub fn encode_literal(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        encode_literal_bytes(&mut out, name.as_bytes(), value.as_bytes());
    }
    out
}

/// One literal field of raw bytes (values with control bytes, say).
pub fn encode_literal_bytes(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    encode_string(out, name);
    encode_string(out, value);
}

fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    encode_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

/// An integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the
/// bits above the prefix.
pub fn encode_int(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// The static table (RFC 7541 Appendix A), index 1 first.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// A decoder's state: the dynamic table, newest first.
#[derive(Default)]
pub struct Decoder {
    dynamic: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max_size: usize,
}

impl Decoder {
    /// A decoder with the default 4096-byte table limit.
    pub fn new() -> Decoder {
        Decoder {
            max_size: 4096,
            ..Decoder::default()
        }
    }

    fn entry(&self, index: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
        if index == 0 {
            return Err("index 0".into());
        }
        if index <= STATIC.len() {
            let (n, v) = STATIC[index - 1];
            return Ok((n.as_bytes().to_vec(), v.as_bytes().to_vec()));
        }
        self.dynamic
            .get(index - STATIC.len() - 1)
            .cloned()
            .ok_or_else(|| format!("index {index} beyond the tables"))
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + 32;
        self.size += size;
        self.dynamic.push_front((name, value));
        self.evict();
    }

    fn evict(&mut self) {
        while self.size > self.max_size {
            match self.dynamic.pop_back() {
                Some((n, v)) => self.size -= n.len() + v.len() + 32,
                None => break,
            }
        }
    }

    /// Decodes one whole header block into (name, value) pairs.
    pub fn decode(&mut self, mut block: &[u8]) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        // Bounded by the block's length: every field takes at least a byte.
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                let index = decode_int(&mut block, 7)?;
                let (n, v) = self.entry(index)?;
                out.push((text(&n), text(&v)));
            } else if first & 0xc0 == 0x40 {
                let index = decode_int(&mut block, 6)?;
                let (n, v) = self.literal(&mut block, index)?;
                out.push((text(&n), text(&v)));
                self.insert(n, v);
            } else if first & 0xe0 == 0x20 {
                let size = decode_int(&mut block, 5)?;
                self.max_size = size;
                self.evict();
            } else {
                // Without indexing (0000) or never indexed (0001).
                let index = decode_int(&mut block, 4)?;
                let (n, v) = self.literal(&mut block, index)?;
                out.push((text(&n), text(&v)));
            }
        }
        Ok(out)
    }

    fn literal(&self, block: &mut &[u8], index: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
        let name = if index == 0 {
            decode_string(block)?
        } else {
            self.entry(index)?.0
        };
        Ok((name, decode_string(block)?))
    }
}

fn decode_int(block: &mut &[u8], n: u32) -> Result<usize, String> {
    let (&first, rest) = block.split_first().ok_or("truncated integer")?;
    *block = rest;
    let max = (1usize << n) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok(value);
    }
    for shift in (0..35).step_by(7) {
        let (&b, rest) = block.split_first().ok_or("truncated integer")?;
        *block = rest;
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("integer too long".into())
}

fn decode_string(block: &mut &[u8]) -> Result<Vec<u8>, String> {
    let huffman = block.first().is_some_and(|b| b & 0x80 != 0);
    let len = decode_int(block, 7)?;
    if block.len() < len {
        return Err("truncated string".into());
    }
    let (s, rest) = block.split_at(len);
    *block = rest;
    if huffman {
        huffman_decode(s)
    } else {
        Ok(s.to_vec())
    }
}

/// Decodes a Huffman string (RFC 7541 §5.2, Appendix B), bit by bit.
pub fn huffman_decode(s: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let (mut code, mut len) = (0u32, 0u8);
    for &byte in s {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            if len > 30 {
                return Err("a Huffman code over 30 bits".into());
            }
            if let Some(sym) = (0..256).find(|&i| CODE_LENGTHS[i] == len && CODES[i] == code) {
                out.push(sym as u8);
                code = 0;
                len = 0;
            }
        }
    }
    // Padding: fewer than 8 bits, all ones (the EOS prefix).
    if len >= 8 || code != (1u32 << len) - 1 {
        return Err("bad Huffman padding".into());
    }
    Ok(out)
}

// RFC 7541 Appendix B: the code of each symbol 0-255 and its bit length
// (EOS, 0x3fffffff/30, is never a symbol here). Table as generated in the
// h2 crate (MIT), from the RFC.
const CODES: [u32; 256] = [
    0x1ff8, 0x7fffd8, 0xfffffe2, 0xfffffe3, 0xfffffe4, 0xfffffe5, 0xfffffe6, 0xfffffe7, 0xfffffe8,
    0xffffea, 0x3ffffffc, 0xfffffe9, 0xfffffea, 0x3ffffffd, 0xfffffeb, 0xfffffec, 0xfffffed,
    0xfffffee, 0xfffffef, 0xffffff0, 0xffffff1, 0xffffff2, 0x3ffffffe, 0xffffff3, 0xffffff4,
    0xffffff5, 0xffffff6, 0xffffff7, 0xffffff8, 0xffffff9, 0xffffffa, 0xffffffb, 0x14, 0x3f8,
    0x3f9, 0xffa, 0x1ff9, 0x15, 0xf8, 0x7fa, 0x3fa, 0x3fb, 0xf9, 0x7fb, 0xfa, 0x16, 0x17, 0x18,
    0x0, 0x1, 0x2, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x5c, 0xfb, 0x7ffc, 0x20, 0xffb,
    0x3fc, 0x1ffa, 0x21, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0xfc, 0x73, 0xfd, 0x1ffb, 0x7fff0,
    0x1ffc, 0x3ffc, 0x22, 0x7ffd, 0x3, 0x23, 0x4, 0x24, 0x5, 0x25, 0x26, 0x27, 0x6, 0x74, 0x75,
    0x28, 0x29, 0x2a, 0x7, 0x2b, 0x76, 0x2c, 0x8, 0x9, 0x2d, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7ffe,
    0x7fc, 0x3ffd, 0x1ffd, 0xffffffc, 0xfffe6, 0x3fffd2, 0xfffe7, 0xfffe8, 0x3fffd3, 0x3fffd4,
    0x3fffd5, 0x7fffd9, 0x3fffd6, 0x7fffda, 0x7fffdb, 0x7fffdc, 0x7fffdd, 0x7fffde, 0xffffeb,
    0x7fffdf, 0xffffec, 0xffffed, 0x3fffd7, 0x7fffe0, 0xffffee, 0x7fffe1, 0x7fffe2, 0x7fffe3,
    0x7fffe4, 0x1fffdc, 0x3fffd8, 0x7fffe5, 0x3fffd9, 0x7fffe6, 0x7fffe7, 0xffffef, 0x3fffda,
    0x1fffdd, 0xfffe9, 0x3fffdb, 0x3fffdc, 0x7fffe8, 0x7fffe9, 0x1fffde, 0x7fffea, 0x3fffdd,
    0x3fffde, 0xfffff0, 0x1fffdf, 0x3fffdf, 0x7fffeb, 0x7fffec, 0x1fffe0, 0x1fffe1, 0x3fffe0,
    0x1fffe2, 0x7fffed, 0x3fffe1, 0x7fffee, 0x7fffef, 0xfffea, 0x3fffe2, 0x3fffe3, 0x3fffe4,
    0x7ffff0, 0x3fffe5, 0x3fffe6, 0x7ffff1, 0x3ffffe0, 0x3ffffe1, 0xfffeb, 0x7fff1, 0x3fffe7,
    0x7ffff2, 0x3fffe8, 0x1ffffec, 0x3ffffe2, 0x3ffffe3, 0x3ffffe4, 0x7ffffde, 0x7ffffdf,
    0x3ffffe5, 0xfffff1, 0x1ffffed, 0x7fff2, 0x1fffe3, 0x3ffffe6, 0x7ffffe0, 0x7ffffe1, 0x3ffffe7,
    0x7ffffe2, 0xfffff2, 0x1fffe4, 0x1fffe5, 0x3ffffe8, 0x3ffffe9, 0xffffffd, 0x7ffffe3, 0x7ffffe4,
    0x7ffffe5, 0xfffec, 0xfffff3, 0xfffed, 0x1fffe6, 0x3fffe9, 0x1fffe7, 0x1fffe8, 0x7ffff3,
    0x3fffea, 0x3fffeb, 0x1ffffee, 0x1ffffef, 0xfffff4, 0xfffff5, 0x3ffffea, 0x7ffff4, 0x3ffffeb,
    0x7ffffe6, 0x3ffffec, 0x3ffffed, 0x7ffffe7, 0x7ffffe8, 0x7ffffe9, 0x7ffffea, 0x7ffffeb,
    0xffffffe, 0x7ffffec, 0x7ffffed, 0x7ffffee, 0x7ffffef, 0x7fffff0, 0x3ffffee,
];

const CODE_LENGTHS: [u8; 256] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rfc7541_c4_requests_with_huffman_decode() {
        // C.4.1: GET http://www.example.com/
        let block = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        let mut d = Decoder::new();
        let fields = d.decode(&block).unwrap();
        assert_eq!(
            fields,
            [
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        // C.4.2: the authority is now dynamic index 62.
        let fields = d
            .decode(&[
                0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf,
            ])
            .unwrap();
        assert_eq!(fields[3].1, "www.example.com");
        assert_eq!(fields[4], ("cache-control".into(), "no-cache".into()));
    }

    #[test]
    fn literals_round_trip_with_long_lengths() {
        let long = "x".repeat(300);
        let block = encode_literal(&[("X-Upper", &long), (":path", "/")]);
        let fields = Decoder::new().decode(&block).unwrap();
        assert_eq!(fields[0], ("X-Upper".into(), long));
        assert_eq!(fields[1], (":path".into(), "/".into()));
    }
}
