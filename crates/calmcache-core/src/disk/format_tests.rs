#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// A scratch directory removed on drop (no tempfile dependency).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "calmcache-disk-format-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn temp_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.0.clone()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                } else if is_temp_name(&entry.file_name()) {
                    out.push(entry.path());
                }
            }
        }
        out
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Deterministic splitmix64, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn freshness() -> Freshness {
    Freshness {
        lifetime: Duration::from_secs(300),
        initial_age: Duration::from_millis(1_500),
        stale_while_revalidate: Duration::from_secs(30),
        stale_if_error: Duration::from_secs(86_400),
        stale_forbidden: false,
        immutable: true,
        source: crate::freshness::LifetimeSource::Heuristic,
    }
}

fn meta(freshness: Freshness) -> ObjectMeta {
    ObjectMeta {
        stored_at: Instant::now(),
        freshness,
        fetch_time: Duration::from_millis(42),
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn key() -> CacheKey {
    CacheKey::new("https", "example.com", "/feed/?page=2")
}

fn plain() -> CachedObject {
    CachedObject::assemble(
        meta(freshness()),
        StatusCode::OK,
        headers(&[
            ("content-type", "text/html; charset=utf-8"),
            ("set-cookie", "b=2"),
            ("etag", "\"v1\""),
            ("set-cookie", "a=1"),
            ("link", "</a.css>; rel=preload"),
            ("link", "</b.js>; rel=preload"),
        ]),
        Bytes::from_static(b"<html>hello</html>"),
        Vec::new(),
        None,
    )
}

fn not_found() -> CachedObject {
    let mut f = freshness();
    f.stale_forbidden = true;
    f.immutable = false;
    CachedObject::assemble(
        meta(f),
        StatusCode::NOT_FOUND,
        headers(&[("content-type", "text/plain")]),
        Bytes::from_static(b"no such page"),
        Vec::new(),
        None,
    )
}

fn encoded() -> CachedObject {
    CachedObject::assemble(
        meta(freshness()),
        StatusCode::OK,
        headers(&[("content-type", "text/css"), ("vary", "accept-encoding")]),
        Bytes::from(vec![b'x'; 5000]),
        vec![
            Encoded {
                coding: "br",
                body: Bytes::from_static(b"brotli bytes"),
            },
            Encoded {
                coding: "gzip",
                body: Bytes::from_static(b"gzip bytes, a few more"),
            },
        ],
        None,
    )
}

fn variant() -> CachedObject {
    CachedObject::assemble(
        meta(freshness()),
        StatusCode::OK,
        headers(&[("content-language", "fr"), ("vary", "accept-language")]),
        Bytes::from_static(b"bonjour"),
        Vec::new(),
        Some(Box::from("accept-language=fr")),
    )
}

fn marker() -> CachedObject {
    CachedObject::marker(
        meta(freshness()),
        VaryIndex {
            id: 0xDEAD_BEEF_1234,
            names: vec![
                HeaderName::from_static("accept-encoding"),
                HeaderName::from_static("accept-language"),
            ],
        },
    )
}

fn empty_body() -> CachedObject {
    CachedObject::assemble(
        meta(freshness()),
        StatusCode::NO_CONTENT,
        HeaderMap::new(),
        Bytes::new(),
        Vec::new(),
        None,
    )
}

fn pairs(map: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

fn assert_same(a: &CachedObject, b: &CachedObject) {
    assert_eq!(a.status, b.status);
    assert_eq!(pairs(&a.headers()), pairs(&b.headers()));
    assert_eq!(a.body, b.body);
    let codings = |o: &CachedObject| {
        o.encodings()
            .iter()
            .map(|e| (e.coding, e.body.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(codings(a), codings(b));
    assert_eq!(a.variant(), b.variant());
    assert_eq!(a.vary_index(), b.vary_index());
    assert_eq!(a.has_targeted, b.has_targeted);
    assert_eq!(a.weight(), b.weight());
    assert_eq!(a.meta.freshness, b.meta.freshness);
    assert_eq!(a.meta.fetch_time, b.meta.fetch_time);
}

/// Writes `object` under [`key`] to `name` in `dir` and returns its path and bytes.
fn written(dir: &Scratch, name: &str, object: &CachedObject) -> (PathBuf, Vec<u8>) {
    let path = dir.path(name);
    let len = write_object(&dir.0, &path, &key(), object, SystemTime::now()).unwrap();
    let bytes = fs::read(&path).unwrap();
    assert_eq!(len, bytes.len() as u64);
    (path, bytes)
}

#[test]
fn round_trips() {
    let dir = Scratch::new();
    let cases: [(&str, CachedObject); 6] = [
        ("plain", plain()),
        ("404", not_found()),
        ("encoded", encoded()),
        ("variant", variant()),
        ("marker", marker()),
        ("empty body", empty_body()),
    ];
    for (name, object) in &cases {
        let path = dir.path(&format!("sub/dir/{}", name.replace(' ', "_")));
        let len = write_object(&dir.0, &path, &key(), object, SystemTime::now()).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), len, "{name}");
        let (got_key, got) = read_object(&path, Some(&key().as_ref())).unwrap();
        assert_eq!(got_key, key(), "{name}");
        assert_same(object, &got);

        let summary = read_summary(&path).unwrap();
        assert_eq!(summary.key, key(), "{name}");
        assert_eq!(summary.file_len, len, "{name}");
        assert_eq!(summary.status, object.status.as_u16(), "{name}");
        assert_eq!(summary.freshness, object.meta.freshness, "{name}");
        assert_eq!(summary.meta_lifetime, object.meta.freshness.lifetime);
        assert_eq!(summary.fetch_time, object.meta.fetch_time, "{name}");
        assert_eq!(summary.is_marker, object.vary_index().is_some(), "{name}");
    }
    assert!(dir.temp_files().is_empty());
}

#[test]
fn multi_valued_headers_keep_their_order() {
    let dir = Scratch::new();
    let (path, _) = written(&dir, "obj", &plain());
    let (_, got) = read_object(&path, None).unwrap();
    let got_headers = got.headers();
    let cookies: Vec<_> = got_headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["b=2", "a=1"]);
    let links: Vec<_> = got_headers.get_all("link").iter().collect();
    assert_eq!(links, ["</a.css>; rel=preload", "</b.js>; rel=preload"]);
}

#[test]
fn overhead_is_99_bytes_plus_fields() {
    let dir = Scratch::new();
    let object = CachedObject::assemble(
        meta(freshness()),
        StatusCode::OK,
        headers(&[("etag", "\"v1\"")]),
        Bytes::from_static(b"body"),
        vec![Encoded {
            coding: "gzip",
            body: Bytes::from_static(b"gz"),
        }],
        Some(Box::from("v")),
    );
    let (_, bytes) = written(&dir, "obj", &object);
    let key_text = "https".len() + "example.com".len() + "/feed/?page=2".len();
    let header_field = 6 + "etag".len() + "\"v1\"".len();
    let encoding = 9 + "gzip".len() + 2;
    let variant = 4 + 1;
    assert_eq!(
        bytes.len(),
        99 + key_text + header_field + encoding + variant + "body".len()
    );
    let (_, bytes) = written(&dir, "marker", &marker());
    let names = 2 + "accept-encoding".len() + 2 + "accept-language".len();
    assert_eq!(bytes.len(), 99 + key_text + 10 + names);
}

#[test]
fn stored_at_maps_onto_the_monotonic_clock() {
    let dir = Scratch::new();
    let path = dir.path("obj");
    let ten_ago = SystemTime::now() - Duration::from_secs(10);
    write_object(&dir.0, &path, &key(), &plain(), ten_ago).unwrap();
    let (_, got) = read_object(&path, None).unwrap();
    let resident = got.meta.resident(Instant::now());
    assert!(
        resident >= Duration::from_millis(9_990) && resident < Duration::from_secs(11),
        "{resident:?}"
    );
    let summary = read_summary(&path).unwrap();
    let off = summary
        .stored_at
        .duration_since(ten_ago)
        .unwrap_or_else(|e| e.duration());
    assert!(off < Duration::from_millis(1), "{off:?}");

    // A store time in the future counts as now.
    let ahead = SystemTime::now() + Duration::from_secs(3600);
    write_object(&dir.0, &path, &key(), &plain(), ahead).unwrap();
    let (_, got) = read_object(&path, None).unwrap();
    assert!(got.meta.resident(Instant::now()) < Duration::from_secs(1));
}

#[test]
fn durations_keep_whole_milliseconds() {
    let dir = Scratch::new();
    let mut f = freshness();
    f.lifetime = Duration::from_nanos(1_999_999);
    f.stale_if_error = Duration::MAX;
    let mut object = plain();
    object.meta.freshness = f;
    object.meta.fetch_time = Duration::from_micros(2_500);
    let (path, _) = written(&dir, "obj", &object);
    let summary = read_summary(&path).unwrap();
    assert_eq!(summary.freshness.lifetime, Duration::from_millis(1));
    assert_eq!(summary.fetch_time, Duration::from_millis(2));
    assert_eq!(
        summary.freshness.stale_if_error,
        Duration::from_millis(u64::MAX)
    );
}

#[test]
fn key_mismatch() {
    let dir = Scratch::new();
    let (path, _) = written(&dir, "obj", &plain());
    for other in [
        KeyRef::new("http", "example.com", "/feed/?page=2"),
        KeyRef::new("https", "example.org", "/feed/?page=2"),
        KeyRef::new("https", "example.com", "/feed/?page=3"),
        KeyRef::new("https", "example.co", "m/feed/?page=2"),
    ] {
        assert!(
            matches!(
                read_object(&path, Some(&other)),
                Err(FormatError::KeyMismatch)
            ),
            "{other:?}"
        );
    }
    assert!(read_object(&path, Some(&key().as_ref())).is_ok());
}

#[test]
fn every_truncation_is_an_error() {
    let dir = Scratch::new();
    for (name, object) in [("plain", plain()), ("marker", marker())] {
        let (path, bytes) = written(&dir, name, &object);
        let torn = dir.path("torn");
        for len in 0..bytes.len() {
            fs::write(&torn, &bytes[..len]).unwrap();
            let full = read_object(&torn, None);
            let summary = read_summary(&torn);
            assert!(full.is_err(), "{name}: len {len} read");
            assert!(summary.is_err(), "{name}: len {len} summarised");
            if len >= 8 {
                assert!(
                    matches!(full, Err(FormatError::Truncated { actual, .. }) if actual == len as u64),
                    "{name}: len {len}: {full:?}"
                );
            } else {
                assert!(matches!(full, Err(FormatError::BadMagic)), "{len}");
            }
        }
        // And one byte too many.
        let mut longer = bytes.clone();
        longer.push(0);
        fs::write(&torn, &longer).unwrap();
        assert!(read_object(&torn, None).is_err());
        assert!(read_summary(&torn).is_err());
        assert!(read_object(&path, None).is_ok());
    }
}

/// Where the header starts and ends in a file.
fn header_range(bytes: &[u8]) -> std::ops::Range<usize> {
    let len = u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
    14..14 + len
}

#[test]
fn flipped_bytes() {
    let dir = Scratch::new();
    let (_, bytes) = written(&dir, "obj", &encoded());
    let header = header_range(&bytes);
    let payload_at = header.end + 4;
    let path = dir.path("flipped");
    let flip = |at: usize| {
        let mut b = bytes.clone();
        b[at] ^= 0x20;
        fs::write(&path, &b).unwrap();
    };

    // Header and its CRC: both readers refuse it.
    for at in [
        header.start,
        header.start + 5,
        header.end - 1,
        header.end + 2,
    ] {
        flip(at);
        assert!(
            matches!(read_summary(&path), Err(FormatError::Checksum)),
            "{at}"
        );
        assert!(
            matches!(read_object(&path, None), Err(FormatError::Checksum)),
            "{at}"
        );
    }
    // Body, encodings and body CRC: the summary (which never reads the
    // body) still reads, read_object catches it.
    for at in [
        payload_at,
        payload_at + 4999,
        bytes.len() - 10,
        bytes.len() - 1,
    ] {
        flip(at);
        assert!(read_summary(&path).is_ok(), "{at}");
        assert!(
            matches!(read_object(&path, None), Err(FormatError::Checksum)),
            "{at}"
        );
    }
    // Magic and version.
    flip(0);
    assert!(matches!(
        read_object(&path, None),
        Err(FormatError::BadMagic)
    ));
    let mut b = bytes.clone();
    b[8..10].copy_from_slice(&2u16.to_le_bytes());
    fs::write(&path, &b).unwrap();
    assert!(matches!(
        read_summary(&path),
        Err(FormatError::UnsupportedVersion(2))
    ));
    assert!(matches!(
        read_object(&path, None),
        Err(FormatError::UnsupportedVersion(2))
    ));
}

#[test]
fn foreign_files_have_bad_magic() {
    let dir = Scratch::new();
    let path = dir.path("foreign");
    let cases: [(&str, Vec<u8>); 5] = [
        ("empty", Vec::new()),
        ("random", Rng(7).bytes(4096)),
        (
            "text",
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nhi".to_vec(),
        ),
        ("short text", b"CALM".to_vec()),
        (
            "almost magic",
            b"CALMOBJ\x01\x01\x00\x00\x00\x00\x00".to_vec(),
        ),
    ];
    for (name, bytes) in cases {
        fs::write(&path, bytes).unwrap();
        assert!(
            matches!(read_object(&path, None), Err(FormatError::BadMagic)),
            "{name}"
        );
        assert!(
            matches!(read_summary(&path), Err(FormatError::BadMagic)),
            "{name}"
        );
    }
    assert!(matches!(
        read_object(&dir.path("missing"), None),
        Err(FormatError::Io(_))
    ));
}

/// Builds a file around a hand-made header, with a correct CRC, so the
/// header parser's own checks are reached.
fn craft(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(&crc32fast::hash(header).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out
}

struct HeaderBuilder(Vec<u8>);

impl HeaderBuilder {
    /// Key, status 200, timings, `flags`.
    fn new(flags: u8) -> Self {
        let mut h = Vec::new();
        for part in ["https", "example.com", "/x"] {
            h.extend_from_slice(&(part.len() as u32).to_le_bytes());
            h.extend_from_slice(part.as_bytes());
        }
        h.extend_from_slice(&200u16.to_le_bytes());
        for _ in 0..6 {
            h.extend_from_slice(&1000u64.to_le_bytes());
        }
        h.push(flags);
        HeaderBuilder(h)
    }

    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }

    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

#[test]
fn nonsense_headers_are_corrupt() {
    let dir = Scratch::new();
    let path = dir.path("crafted");
    let one_header = |name: &[u8], value: &[u8]| {
        HeaderBuilder::new(0)
            .u32(1)
            .u16(name.len() as u16)
            .raw(name)
            .u32(value.len() as u32)
            .raw(value)
            .u16(0)
            .u64(0)
    };
    let cases: Vec<(&str, HeaderBuilder, Vec<u8>)> = vec![
        (
            "unknown flags",
            HeaderBuilder::new(0x40).u32(0).u16(0).u64(0),
            vec![],
        ),
        (
            "two lifetime sources",
            HeaderBuilder::new(0x30).u32(0).u16(0).u64(0),
            vec![],
        ),
        ("bad header name", one_header(b"bad name", b"v"), vec![]),
        (
            "bad header value",
            one_header(b"x-a", b"line\nbreak"),
            vec![],
        ),
        (
            "unknown coding",
            HeaderBuilder::new(0)
                .u32(0)
                .u16(1)
                .u8(7)
                .raw(b"deflate")
                .u64(1)
                .u64(0),
            vec![b'z'],
        ),
        (
            "huge header count",
            HeaderBuilder::new(0).u32(u32::MAX).u16(0).u64(0),
            vec![],
        ),
        (
            "huge string",
            HeaderBuilder::new(0)
                .u32(1)
                .u16(3)
                .raw(b"x-a")
                .u32(u32::MAX),
            vec![],
        ),
        (
            "huge vary count",
            HeaderBuilder::new(FLAG_MARKER).u32(0).u64(1).u16(u16::MAX),
            vec![],
        ),
        (
            "marker with body",
            HeaderBuilder::new(FLAG_MARKER)
                .u32(0)
                .u64(1)
                .u16(0)
                .u16(0)
                .u64(1),
            vec![b'b'],
        ),
        (
            "variant not UTF-8",
            HeaderBuilder::new(FLAG_VARIANT)
                .u32(0)
                .u32(2)
                .raw(&[0xff, 0xfe])
                .u16(0)
                .u64(0),
            vec![],
        ),
        (
            "trailing header bytes",
            HeaderBuilder::new(0).u32(0).u16(0).u64(0).u8(0),
            vec![],
        ),
        (
            "header cut short",
            HeaderBuilder::new(0).u32(0).u16(0),
            vec![],
        ),
    ];
    for (name, header, payload) in cases {
        fs::write(&path, craft(&header.0, &payload)).unwrap();
        let full = read_object(&path, None);
        assert!(
            matches!(full, Err(FormatError::Corrupt(_))),
            "{name}: {full:?}"
        );
        let summary = read_summary(&path);
        assert!(
            matches!(summary, Err(FormatError::Corrupt(_))),
            "{name}: {summary:?}"
        );
    }

    // Lengths that add up past u64 or past the file.
    let overflow = HeaderBuilder::new(0)
        .u32(0)
        .u16(1)
        .u8(2)
        .raw(b"br")
        .u64(u64::MAX)
        .u64(u64::MAX);
    fs::write(&path, craft(&overflow.0, b"")).unwrap();
    assert!(matches!(
        read_object(&path, None),
        Err(FormatError::Corrupt(_))
    ));
    let past_end = HeaderBuilder::new(0).u32(0).u16(0).u64(1 << 40);
    fs::write(&path, craft(&past_end.0, b"")).unwrap();
    assert!(matches!(
        read_summary(&path),
        Err(FormatError::Truncated { .. })
    ));

    // The crafted builder itself makes a valid file.
    let fine = HeaderBuilder::new(0).u32(0).u16(0).u64(3);
    fs::write(&path, craft(&fine.0, b"abc")).unwrap();
    let (key, object) = read_object(&path, None).unwrap();
    assert_eq!(key.as_str(), "https://example.com/x");
    assert_eq!(&object.body[..], b"abc");
}

#[test]
fn writing_refuses_unknown_codings() {
    let dir = Scratch::new();
    let object = CachedObject::assemble(
        meta(freshness()),
        StatusCode::OK,
        HeaderMap::new(),
        Bytes::from_static(b"x"),
        vec![Encoded {
            coding: "zstd",
            body: Bytes::from_static(b"z"),
        }],
        None,
    );
    let path = dir.path("obj");
    let err = write_object(&dir.0, &path, &key(), &object, SystemTime::now());
    assert!(matches!(err, Err(FormatError::Corrupt(_))), "{err:?}");
    assert!(!path.exists());
    assert!(dir.temp_files().is_empty());
}

#[test]
fn failed_writes_leave_no_temp_file() {
    let dir = Scratch::new();
    fs::write(dir.path("a_file"), b"not a directory").unwrap();
    fs::create_dir(dir.path("a_dir")).unwrap();
    fs::write(dir.path("a_dir/inside"), b"keeps the directory non-empty").unwrap();
    let cases = [
        ("parent is a file", dir.path("a_file/obj")),
        ("target is a directory", dir.path("a_dir")),
    ];
    for (name, path) in cases {
        let err = write_object(&dir.0, &path, &key(), &plain(), SystemTime::now());
        assert!(matches!(err, Err(FormatError::Io(_))), "{name}: {err:?}");
        assert!(dir.temp_files().is_empty(), "{name}");
    }
    // Outside the zone directory: refused before anything is written.
    let other = Scratch::new();
    let err = write_object(
        &dir.0,
        &other.path("obj"),
        &key(),
        &plain(),
        SystemTime::now(),
    );
    assert!(matches!(err, Err(FormatError::Io(_))), "{err:?}");
    assert!(!other.path("obj").exists());
}

#[test]
fn rewriting_replaces_the_file_atomically() {
    let dir = Scratch::new();
    let (path, _) = written(&dir, "obj", &plain());
    let len = write_object(&dir.0, &path, &key(), &encoded(), SystemTime::now()).unwrap();
    let (_, got) = read_object(&path, None).unwrap();
    assert_same(&encoded(), &got);
    assert_eq!(read_summary(&path).unwrap().file_len, len);
    assert!(dir.temp_files().is_empty());
}

#[test]
fn temp_names() {
    let dir = Scratch::new();
    let (tmp, _file) = create_temp(&dir.0).unwrap();
    assert!(is_temp_name(tmp.file_name().unwrap()));
    assert!(is_own_temp_name(tmp.file_name().unwrap()));
    let name = tmp.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!(".tmp-{}-", start_token())),
        "named after the start token, not the PID: {name}"
    );
    assert_eq!(start_token().len(), 16);
    assert!(!is_own_temp_name(OsStr::new(".tmp-1-1")));
    for (name, temp) in [
        (".tmp-123-4", true),
        (".tmp-", true),
        ("tmp-1", false),
        ("abcdef0123", false),
        (".tmpx", false),
        ("", false),
    ] {
        assert_eq!(is_temp_name(OsStr::new(name)), temp, "{name}");
    }
}

#[test]
fn random_mutations_never_panic() {
    let dir = Scratch::new();
    let (_, variant_bytes) = written(&dir, "variant", &variant());
    let (_, marker_bytes) = written(&dir, "marker", &marker());
    let (_, encoded_bytes) = written(&dir, "encoded", &encoded());
    let originals = [variant_bytes, marker_bytes, encoded_bytes];
    let path = dir.path("mutant");
    let mut rng = Rng(0x00CA_1DCA_C4E0);
    let mut accepted = 0;
    let mut reframed_ok = 0;
    for round in 0..2_000 {
        let original = &originals[round % originals.len()];
        let mut b = original.clone();
        // Mostly the header, where the parser lives.
        let hot = header_range(original).end + 4;
        for _ in 0..1 + rng.below(4) {
            let at = if rng.below(4) == 0 {
                rng.below(b.len().max(1))
            } else {
                rng.below(hot.min(b.len()).max(1))
            };
            match rng.below(6) {
                0 if at < b.len() => b[at] ^= 1 << rng.below(8),
                1 if at < b.len() => b[at] = rng.next() as u8,
                2 => b.truncate(at),
                3 => b.insert(at.min(b.len()), rng.next() as u8),
                4 if at < b.len() => {
                    b.remove(at);
                }
                _ => {
                    let n = rng.below(8);
                    let end = (at + n).min(b.len());
                    let fill = rng.bytes(end.saturating_sub(at));
                    if at < end {
                        b[at..end].copy_from_slice(&fill);
                    }
                }
            }
        }
        if round % 2 == 1 {
            // Re-frame the mutated header with valid lengths and checksums,
            // so the header parser itself sees the damage.
            let header = header_range(original);
            let mut h = original[header.clone()].to_vec();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(h.len().max(1));
                match rng.below(4) {
                    0 if at < h.len() => h[at] ^= 1 << rng.below(8),
                    1 if at < h.len() => h[at] = rng.next() as u8,
                    2 => h.truncate(at),
                    _ => h.insert(at.min(h.len()), rng.next() as u8),
                }
            }
            let payload = &original[header.end + 4..original.len() - 4];
            let reframed = craft(&h, payload);
            fs::write(&path, &reframed).unwrap();
            // Anything may come out (a changed timing is still a valid
            // file), but never a panic, and the two readers agree on the header.
            let full = read_object(&path, None);
            let summary = read_summary(&path);
            assert_eq!(full.is_ok(), summary.is_ok(), "round {round}: {full:?}");
            reframed_ok += usize::from(full.is_ok());
            continue;
        }
        fs::write(&path, &b).unwrap();
        let full = read_object(&path, None);
        let summary = read_summary(&path);
        if full.is_ok() {
            // Only a mutation that changed nothing can pass both checksums.
            assert_eq!(&b, original, "round {round}");
            accepted += 1;
        }
        if full.is_ok() {
            assert!(summary.is_ok(), "round {round}");
        }
    }
    assert!(accepted < 100, "{accepted} unchanged mutants");
    // Some re-framed mutants (timings, text) are valid files, most are not.
    assert!(
        (1..900).contains(&reframed_ok),
        "{reframed_ok} valid mutants"
    );
}

#[test]
fn encoded_in_memory_is_the_file_and_parses_back_verified() {
    let dir = Scratch::new();
    let at = SystemTime::now();
    for (name, object) in [
        ("plain", plain()),
        ("encoded", encoded()),
        ("marker", marker()),
    ] {
        let bytes = encode_object(&key(), &object, at).unwrap();
        let path = dir.path(name);
        write_object(&dir.0, &path, &key(), &object, at).unwrap();
        assert_eq!(
            bytes,
            fs::read(&path).unwrap(),
            "{name}: same bytes as the file"
        );
        let (got_key, got) = parse_object(bytes.clone(), Some(&key().as_ref()), true).unwrap();
        assert_eq!(got_key, key());
        assert_same(&object, &got);
        // One flipped bit anywhere is refused, never served.
        for at in [0, 12, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(
                parse_object(bad, Some(&key().as_ref()), true).is_err(),
                "{name}: a flip at {at} parsed"
            );
        }
        let short = bytes[..bytes.len() - 1].to_vec();
        assert!(
            parse_object(short, None, true).is_err(),
            "{name}: truncated"
        );
    }
}
