//! A stored response head in one buffer: what a zone keeps instead of a
//! `HeaderMap` (about 100 bytes per field in its slots and index, plus an
//! allocation per custom name and one for the values).
//!
//! The buffer holds the number of fields (two bytes), a table (per field:
//! one byte naming it, then its value's length in 7-bit groups, low group
//! first, the high bit set on all but the last: one byte below 128, two
//! below 16,384) and the values back to back (nothing at all for no
//! fields); a small body may follow in
//! the same allocation ([`StoredHead::with_tail`]). A field's name is an
//! index into `KNOWN` (HTTP's standard names, static text) or, for any
//! other name, the next one of the head's own `customs`. Serving a hit
//! builds a fresh `HeaderMap` with room for the fields a hit adds
//! ([`StoredHead::to_map`]): two allocations (the map's index and slots),
//! as cloning a stored map took, and no regrowth when `Age` and
//! `Cache-Status` are set; each value is a slice of the shared buffer.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::HeaderMap;

/// Names stored as one byte: their index here. Any other name is custom.
static KNOWN: [HeaderName; 80] = [
    header::ACCEPT,
    header::ACCEPT_CHARSET,
    header::ACCEPT_ENCODING,
    header::ACCEPT_LANGUAGE,
    header::ACCEPT_RANGES,
    header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
    header::ACCESS_CONTROL_ALLOW_HEADERS,
    header::ACCESS_CONTROL_ALLOW_METHODS,
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
    header::ACCESS_CONTROL_MAX_AGE,
    header::ACCESS_CONTROL_REQUEST_HEADERS,
    header::ACCESS_CONTROL_REQUEST_METHOD,
    header::AGE,
    header::ALLOW,
    header::ALT_SVC,
    header::AUTHORIZATION,
    header::CACHE_CONTROL,
    header::CACHE_STATUS,
    header::CDN_CACHE_CONTROL,
    header::CONNECTION,
    header::CONTENT_DISPOSITION,
    header::CONTENT_ENCODING,
    header::CONTENT_LANGUAGE,
    header::CONTENT_LENGTH,
    header::CONTENT_LOCATION,
    header::CONTENT_RANGE,
    header::CONTENT_SECURITY_POLICY,
    header::CONTENT_SECURITY_POLICY_REPORT_ONLY,
    header::CONTENT_TYPE,
    header::COOKIE,
    header::DNT,
    header::DATE,
    header::ETAG,
    header::EXPECT,
    header::EXPIRES,
    header::FORWARDED,
    header::FROM,
    header::HOST,
    header::IF_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_NONE_MATCH,
    header::IF_RANGE,
    header::IF_UNMODIFIED_SINCE,
    header::LAST_MODIFIED,
    header::LINK,
    header::LOCATION,
    header::MAX_FORWARDS,
    header::ORIGIN,
    header::PRAGMA,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::PUBLIC_KEY_PINS,
    header::PUBLIC_KEY_PINS_REPORT_ONLY,
    header::RANGE,
    header::REFERER,
    header::REFERRER_POLICY,
    header::REFRESH,
    header::RETRY_AFTER,
    header::SEC_WEBSOCKET_ACCEPT,
    header::SEC_WEBSOCKET_EXTENSIONS,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_PROTOCOL,
    header::SEC_WEBSOCKET_VERSION,
    header::SERVER,
    header::SET_COOKIE,
    header::STRICT_TRANSPORT_SECURITY,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::USER_AGENT,
    header::UPGRADE,
    header::UPGRADE_INSECURE_REQUESTS,
    header::VARY,
    header::VIA,
    header::WARNING,
    header::WWW_AUTHENTICATE,
    header::X_CONTENT_TYPE_OPTIONS,
    header::X_FRAME_OPTIONS,
    header::X_XSS_PROTECTION,
];

/// The code of a custom name (the next of `customs`).
const CUSTOM: u8 = u8::MAX;

/// Bytes of the table for a field whose value is `len` bytes long: the
/// name's code and the length in 7-bit groups (one byte per group).
fn entry_len(len: usize) -> usize {
    1 + (usize::BITS - (len | 1).leading_zeros()).div_ceil(7) as usize
}

/// Writes `len` in 7-bit groups, low group first, the high bit set on all
/// but the last.
fn put_len(buf: &mut BytesMut, mut len: usize) {
    while len >= 0x80 {
        buf.put_u8((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    buf.put_u8(len as u8);
}

/// A length [`put_len`] wrote at the start of `b`, and the bytes after it
/// (`None` when `b` ends inside it).
fn take_len(b: &[u8]) -> Option<(usize, &[u8])> {
    let mut len = 0usize;
    for (i, &byte) in b.iter().enumerate().take(usize::BITS.div_ceil(7) as usize) {
        len |= ((byte & 0x7f) as usize) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((len, &b[i + 1..]));
        }
    }
    None
}

/// Fields a hit may add to a stored head (`Age`, `Cache-Status`, an
/// encoding's `Content-Encoding`, a range's `Content-Range`): room kept in
/// the map [`StoredHead::to_map`] builds, so setting them does not regrow it.
pub const SERVED_ROOM: usize = 4;

/// `v` as text when it is visible ASCII (and tabs), as
/// `HeaderValue::to_str` takes it; without building a `HeaderValue`.
pub fn visible_str(v: &[u8]) -> Option<&str> {
    if v.iter().all(|&b| b == b'\t' || (32..127).contains(&b)) {
        std::str::from_utf8(v).ok()
    } else {
        None
    }
}

fn code_of(name: &HeaderName) -> u8 {
    KNOWN
        .iter()
        .position(|k| k == name)
        .map_or(CUSTOM, |i| i as u8)
}

/// Bytes before the table: the number of fields.
const COUNT: usize = 2;

/// A response head as a zone keeps it (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct StoredHead {
    /// The count, the table, then the values (empty for no fields).
    buf: Bytes,
    /// Names not in [`KNOWN`], in the order of their fields.
    customs: Box<[HeaderName]>,
}

impl StoredHead {
    /// The fields of `headers`, in their iteration order, in a buffer of
    /// their own (values copied: a value that sliced hyper's read buffer
    /// would pin the whole buffer).
    pub fn new(headers: &HeaderMap) -> Self {
        Self::with_tail(headers, &[]).0
    }

    /// The fields of `headers` and `tail` (a small body) in one buffer:
    /// the head, and `tail` as a slice of the same allocation.
    pub fn with_tail(headers: &HeaderMap, tail: &[u8]) -> (Self, Bytes) {
        let head_len = Self::encoded_len(headers);
        let mut buf = BytesMut::with_capacity(head_len + tail.len());
        let customs = Self::write(headers, &mut buf);
        buf.extend_from_slice(tail);
        let mut buf = buf.freeze();
        let tail = if tail.is_empty() {
            Bytes::new()
        } else {
            buf.split_off(head_len)
        };
        (StoredHead { buf, customs }, tail)
    }

    /// The bytes of the buffer that [`Self::new`] makes for `headers`.
    pub fn encoded_len(headers: &HeaderMap) -> usize {
        let fields = headers.len().min(u16::MAX as usize);
        if fields == 0 {
            return 0;
        }
        let values: usize = headers
            .values()
            .take(fields)
            .map(|v| entry_len(v.len()) + v.len())
            .sum();
        COUNT + values
    }

    /// The head of `headers` written after `body`, in its spare room when
    /// it fits exactly (no copy of the body), else in a new buffer with
    /// the body copied after the head; the head and the body, sharing
    /// one buffer of exactly their size.
    pub fn after_body(headers: &HeaderMap, mut body: BytesMut) -> (Self, Bytes) {
        let need = Self::encoded_len(headers);
        if body.capacity() - body.len() != need {
            return Self::with_tail(headers, &body);
        }
        let at = body.len();
        let customs = Self::write(headers, &mut body);
        let mut buf = body.freeze();
        let head = buf.split_off(at);
        let head = StoredHead { buf: head, customs };
        (head, buf)
    }

    /// Writes the count, table and values of `headers` to `buf`; the
    /// custom names, in order.
    fn write(headers: &HeaderMap, buf: &mut BytesMut) -> Box<[HeaderName]> {
        let fields = headers.len().min(u16::MAX as usize);
        let mut customs = Vec::new();
        if fields == 0 {
            return customs.into_boxed_slice();
        }
        buf.put_u16_le(fields as u16);
        for (name, value) in headers.iter().take(fields) {
            let code = code_of(name);
            if code == CUSTOM {
                customs.push(name.clone());
            }
            buf.put_u8(code);
            put_len(buf, value.len());
        }
        for value in headers.values().take(fields) {
            buf.extend_from_slice(value.as_bytes());
        }
        customs.into_boxed_slice()
    }

    /// The same head in a new buffer followed by `tail`, and `tail` as a
    /// slice of it (names shared, not copied).
    pub fn repacked(&self, tail: &[u8]) -> (Self, Bytes) {
        let mut buf = BytesMut::with_capacity(self.buf.len() + tail.len());
        buf.extend_from_slice(&self.buf);
        buf.extend_from_slice(tail);
        let mut buf = buf.freeze();
        let tail = if tail.is_empty() {
            Bytes::new()
        } else {
            buf.split_off(self.buf.len())
        };
        let head = StoredHead {
            buf,
            customs: self.customs.clone(),
        };
        (head, tail)
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        match self.buf.get(..COUNT) {
            Some(&[a, b]) => u16::from_le_bytes([a, b]) as usize,
            _ => 0,
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every field, in order: its name and the position of its value in
    /// the buffer.
    fn entries(&self) -> impl Iterator<Item = (&HeaderName, std::ops::Range<usize>)> + '_ {
        let n = self.len();
        // The values start where the table ends: found by reading it.
        let mut rest = self.buf.get(COUNT..).unwrap_or_default();
        for _ in 0..n {
            match rest.get(1..).and_then(take_len) {
                Some((_, after)) => rest = after,
                None => break,
            }
        }
        let mut at = self.buf.len() - rest.len();
        let mut table = self.buf.get(COUNT..).unwrap_or_default();
        let mut custom = 0;
        (0..n).map_while(move |_| {
            let (&code, rest) = table.split_first()?;
            let (len, rest) = take_len(rest)?;
            table = rest;
            let name = if code == CUSTOM {
                custom += 1;
                self.customs.get(custom - 1)?
            } else {
                KNOWN.get(code as usize)?
            };
            at += len;
            (at <= self.buf.len()).then_some((name, at - len..at))
        })
    }

    /// Every field, in order: name and value bytes.
    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, &[u8])> + '_ {
        self.entries().map(|(name, at)| (name, &self.buf[at]))
    }

    /// The values of every field named `name`, in order.
    pub fn get_all<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter().filter(move |(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The first value of `name`, as text (`None` when absent or not visible ASCII).
    pub fn get_str<'a>(&'a self, name: &'a HeaderName) -> Option<&'a str> {
        self.get_all(name).next().and_then(visible_str)
    }

    /// True when a field is named `name`.
    pub fn contains_key(&self, name: &HeaderName) -> bool {
        self.iter().any(|(n, _)| n == name)
    }

    /// The head as a `HeaderMap` with room for `room` more fields; each
    /// value shares the buffer (no copy).
    pub fn to_map(&self, room: usize) -> HeaderMap {
        // A map holds at most 32,768 fields: past that it grows as it must
        // (never a panic).
        let mut map = HeaderMap::try_with_capacity(self.len() + room).unwrap_or_default();
        for (name, at) in self.entries() {
            // Every stored value came from a `HeaderValue`: always valid.
            if let Ok(value) = HeaderValue::from_maybe_shared(self.buf.slice(at)) {
                map.append(name.clone(), value);
            }
        }
        map
    }

    /// RAM it takes besides its inline struct, as the allocator hands it
    /// out, when it does not share its buffer with a body: the buffer and
    /// its shared count, the custom names' slots and their text.
    pub fn memory_cost(&self) -> usize {
        self.buffer_cost(0) + self.names_cost()
    }

    /// The buffer (and its shared count) with a tail of `tail` bytes.
    pub(crate) fn buffer_cost(&self, tail: usize) -> usize {
        let n = self.buf.len() + tail;
        if n == 0 {
            0
        } else {
            crate::cost::malloc_cost(n) + crate::cost::SHARED_COST
        }
    }

    /// The custom names: their slots and each name's own shared text.
    pub(crate) fn names_cost(&self) -> usize {
        crate::cost::malloc_cost(self.customs.len() * std::mem::size_of::<HeaderName>())
            + self
                .customs
                .iter()
                .map(|n| crate::cost::malloc_cost(n.as_str().len()) + crate::cost::SHARED_COST)
                .sum::<usize>()
    }

    /// Bytes of names and values, with `per_field` more for each field
    /// (the zone-independent weight of [`crate::object::weigh`]).
    pub fn text_len(&self, per_field: usize) -> usize {
        self.iter()
            .map(|(n, v)| n.as_str().len() + v.len() + per_field)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_keeps_every_field_in_order() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
        h.append("x-one", HeaderValue::from_static("1"));
        h.append(header::SET_COOKIE, HeaderValue::from_static("a=1"));
        h.append(header::SET_COOKIE, HeaderValue::from_static("b=2"));
        h.append("x-two", HeaderValue::from_static(""));
        let (head, tail) = StoredHead::with_tail(&h, b"body");
        assert_eq!(&tail[..], b"body");
        assert_eq!(head.len(), 5);
        assert_eq!(head.to_map(0), h);
        let cookies: Vec<&[u8]> = head.get_all(&header::SET_COOKIE).collect();
        assert_eq!(cookies, [&b"a=1"[..], b"b=2"]);
        assert_eq!(head.get_str(&header::CONTENT_TYPE), Some("text/html"));
        assert!(head.contains_key(&HeaderName::from_static("x-two")));
        assert!(!head.contains_key(&header::ETAG));
        assert_eq!(
            StoredHead::new(&HeaderMap::new()).to_map(0),
            HeaderMap::new()
        );
    }

    #[test]
    fn value_lengths_take_one_byte_per_7_bits_and_read_back() {
        for len in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            70_000,
            1 << 21,
            u32::MAX as usize,
        ] {
            let mut buf = BytesMut::new();
            put_len(&mut buf, len);
            buf.put_u8(9);
            assert_eq!(buf.len(), entry_len(len), "{len}");
            assert_eq!(take_len(&buf), Some((len, &[9u8][..])), "{len}");
        }
        assert_eq!(take_len(&[0x80, 0x80]), None);
        // A head of long and short values round trips, and costs what
        // `encoded_len` said.
        let mut h = HeaderMap::new();
        for len in [0, 5, 127, 128, 300, 20_000] {
            h.append(
                HeaderName::from_bytes(format!("x-{len}").as_bytes()).unwrap_or(header::VIA),
                HeaderValue::from_str(&"v".repeat(len)).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h.append(
            header::DATE,
            HeaderValue::from_static("Tue, 24 Nov 2026 23:46:44 GMT"),
        );
        let head = StoredHead::new(&h);
        assert_eq!(head.to_map(0), h);
        assert_eq!(head.buf.len(), StoredHead::encoded_len(&h));
        // Two bytes of count; per field a code and one byte of length
        // below 128 (two below 16,384, three above).
        let values: usize = h.values().map(|v| v.len()).sum();
        let lengths = 1 + 1 + 1 + 2 + 2 + 3 + 1;
        assert_eq!(head.buf.len(), 2 + 7 + lengths + values);
    }

    #[test]
    fn a_served_map_has_room_for_what_a_hit_adds() {
        let mut h = HeaderMap::new();
        for i in 0..6 {
            h.append(
                HeaderName::from_bytes(format!("x-{i}").as_bytes()).unwrap_or(header::VIA),
                HeaderValue::from(i),
            );
        }
        let map = StoredHead::new(&h).to_map(SERVED_ROOM);
        assert!(map.capacity() >= h.len() + SERVED_ROOM);
    }
}
