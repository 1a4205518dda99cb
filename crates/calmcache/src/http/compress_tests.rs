#![allow(clippy::unwrap_used)]

use std::io::Read as _;

use super::*;

/// A deterministic HTML-like page of about `len` bytes.
fn html(len: usize) -> Vec<u8> {
    let mut out =
        String::from("<!doctype html><html><head><title>calmcache</title></head><body>\n");
    let mut i = 0u64;
    while out.len() < len {
        // A cheap LCG so rows differ the way real markup does.
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.push_str(&format!(
            "<tr class=\"row r{}\"><td><a href=\"/item/{}\">Item {}</a></td><td>{} in stock</td></tr>\n",
            i % 7,
            i >> 40,
            (i >> 20) % 10_000,
            (i >> 50) % 300,
        ));
    }
    out.push_str("</body></html>\n");
    out.into_bytes()
}

/// Bytes that do not compress (xorshift output).
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        Coding::Br => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Coding::Gzip => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
        }
    }
    out
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn values(lines: &[&str]) -> Vec<HeaderValue> {
    lines
        .iter()
        .map(|l| HeaderValue::from_str(l).unwrap())
        .collect()
}

const BG: [Coding; 2] = [Coding::Br, Coding::Gzip];
const GB: [Coding; 2] = [Coding::Gzip, Coding::Br];

/// RFC 7932 (br) and RFC 1952 (gzip): what `encode` makes decodes back to
/// the input, for text, incompressible and empty bodies.
#[test]
fn rfc7932_rfc1952_round_trip() {
    for body in [html(100_000), html(300), noise(10_000), Vec::new()] {
        for coding in Coding::ALL {
            let encoded = encode(coding, &body).unwrap();
            assert_eq!(
                decode(coding, &encoded),
                body,
                "{coding:?} len {}",
                body.len()
            );
        }
    }
    let page = html(100_000);
    for coding in Coding::ALL {
        let encoded = encode(coding, &page).unwrap();
        assert!(
            encoded.len() * 3 < page.len(),
            "{coding:?}: {}",
            encoded.len()
        );
        // Deterministic: the same input stores the same bytes.
        assert_eq!(encoded, encode(coding, &page).unwrap());
    }
}

/// RFC 9110 §8.4 / §7.7 / §14.4, RFC 9111 §5.2.2.6: which responses may be
/// encoded.
#[test]
fn rfc9110_s8_4_compressible_table() {
    let cases: &[(&[(&str, &str)], bool)] = &[
        (&[("content-type", "text/html; charset=utf-8")], true),
        (&[("content-type", "TEXT/CSS")], true),
        (&[("content-type", "text/plain")], true),
        (&[("content-type", "application/json")], true),
        (
            &[("content-type", "Application/JSON ; charset=UTF-8")],
            true,
        ),
        (&[("content-type", "application/problem+json")], true),
        (&[("content-type", "application/manifest+json")], true),
        (&[("content-type", "application/javascript")], true),
        (&[("content-type", "application/x-javascript")], true),
        (&[("content-type", "application/ecmascript")], true),
        (&[("content-type", "application/xml")], true),
        (&[("content-type", "application/atom+xml")], true),
        (&[("content-type", "image/svg+xml")], true),
        (&[("content-type", "application/wasm")], true),
        (&[("content-type", "font/ttf")], true),
        (&[("content-type", "font/otf")], true),
        (&[("content-type", "application/vnd.ms-fontobject")], true),
        (&[("content-type", "image/png")], false),
        (&[("content-type", "image/jpeg")], false),
        (&[("content-type", "font/woff2")], false),
        (&[("content-type", "application/octet-stream")], false),
        (&[("content-type", "application/zip")], false),
        (&[("content-type", "application/+json")], false),
        (&[("content-type", "text/")], false),
        (&[("content-type", "text")], false),
        (&[("content-type", "")], false),
        (&[], false),
        (
            &[
                ("content-type", "text/html"),
                ("content-type", "text/plain"),
            ],
            false,
        ),
        (
            &[("content-type", "text/html"), ("content-encoding", "gzip")],
            false,
        ),
        (
            &[
                ("content-type", "text/html"),
                ("content-encoding", "identity"),
            ],
            true,
        ),
        (
            &[
                ("content-type", "text/html"),
                ("content-encoding", "identity, br"),
            ],
            false,
        ),
        (
            &[("content-type", "text/html"), ("content-encoding", "")],
            true,
        ),
        (
            &[
                ("content-type", "text/html"),
                ("cache-control", "public, No-Transform"),
            ],
            false,
        ),
        (
            &[
                ("content-type", "text/html"),
                ("cache-control", "max-age=60"),
                ("cache-control", "no-transform"),
            ],
            false,
        ),
        (
            &[
                ("content-type", "text/html"),
                ("cache-control", "max-age=60, must-revalidate"),
            ],
            true,
        ),
        (
            &[
                ("content-type", "text/html"),
                ("content-range", "bytes 0-99/1000"),
            ],
            false,
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(compressible(&headers(pairs)), *want, "{pairs:?}");
    }
    // Non-ASCII (obs-text) values are not readable: no compression.
    let mut map = headers(&[("content-type", "text/html")]);
    map.insert(
        CACHE_CONTROL,
        HeaderValue::from_bytes(b"no-transform, \xff").unwrap(),
    );
    assert!(!compressible(&map));
    let mut map = HeaderMap::new();
    map.insert(CONTENT_TYPE, HeaderValue::from_bytes(b"text/\xe9").unwrap());
    assert!(!compressible(&map));
}

/// RFC 9110 §12.5.3 (and §12.4.2 for weights, §8.4.1.3 for x-gzip).
#[test]
fn rfc9110_s12_5_3_negotiate_table() {
    let cases: &[(&[&str], &[Coding], Option<Coding>)] = &[
        (&["gzip, deflate, br"], &BG, Some(Coding::Br)),
        (&["gzip, deflate, br"], &GB, Some(Coding::Gzip)),
        (&["gzip;q=1.0, br;q=0.5"], &BG, Some(Coding::Gzip)),
        (&["GZIP;Q=0.5, BR;Q=0.8"], &GB, Some(Coding::Br)),
        (&["br;q=0"], &BG, None),
        (&["br;q=0, gzip"], &BG, Some(Coding::Gzip)),
        (&["*"], &BG, Some(Coding::Br)),
        (&["*"], &GB, Some(Coding::Gzip)),
        (&["*;q=0, gzip"], &BG, Some(Coding::Gzip)),
        (&["*;q=0.5, br;q=0"], &BG, Some(Coding::Gzip)),
        (&["*;q=0"], &BG, None),
        (&["identity"], &BG, None),
        (&["identity;q=0"], &BG, None),
        (&[""], &BG, None),
        (&[], &BG, None),
        (&["deflate, compress"], &BG, None),
        (&["gzip"], &[Coding::Br], None),
        (&["gzip, br"], &[], None),
        (&["x-gzip"], &BG, Some(Coding::Gzip)),
        (&["x-gzip;q=0.3, br;q=0.2"], &BG, Some(Coding::Gzip)),
        // Several field lines are one list.
        (&["gzip;q=0.5", "br"], &GB, Some(Coding::Br)),
        // Whitespace is optional around ';' and members.
        (&["  gzip ;  q=0.9 ,br ; q=0.8  "], &BG, Some(Coding::Gzip)),
        // Weights: up to three decimals, "1." and "0." are valid.
        (&["br;q=0.001, gzip;q=0.000"], &BG, Some(Coding::Br)),
        (&["br;q=0.5, gzip;q=0.501"], &BG, Some(Coding::Gzip)),
        (&["br;q=1., gzip;q=0."], &BG, Some(Coding::Br)),
        (&["br;q=1.000, gzip;q=1"], &GB, Some(Coding::Gzip)),
        // Invalid weights: the member is ignored, as if absent.
        (&["br;q=abc, gzip"], &BG, Some(Coding::Gzip)),
        (&["br;q=abc"], &BG, None),
        (&["br;q=abc, *"], &BG, Some(Coding::Br)),
        (&["br;q=1.5, gzip;q=0.1"], &BG, Some(Coding::Gzip)),
        (&["br;q=0.1234, gzip;q=0.1"], &BG, Some(Coding::Gzip)),
        (&["br;q=, gzip;q=0.1"], &BG, Some(Coding::Gzip)),
        (&["br;q=-0, gzip;q=0.1"], &BG, Some(Coding::Gzip)),
        (&["br;q=1.001, gzip;q=0.1"], &BG, Some(Coding::Gzip)),
        // The first member for a coding wins.
        (&["br;q=0, br, gzip"], &BG, Some(Coding::Gzip)),
        // Identity wins only with a strictly higher weight.
        (&["gzip;q=0.5, identity"], &BG, None),
        (&["gzip, identity"], &BG, Some(Coding::Gzip)),
        (&["gzip;q=0.5, *;q=0.5"], &BG, Some(Coding::Br)),
        // Identity excluded and nothing acceptable: identity anyway.
        (&["identity;q=0, deflate"], &BG, None),
        // Empty members and junk.
        (&[",,, ,br,,"], &BG, Some(Coding::Br)),
        (&[";q=1, ;;, =, br;;q=0.2;foo"], &BG, Some(Coding::Br)),
    ];
    for (lines, available, want) in cases {
        let vals = values(lines);
        assert_eq!(
            negotiate(vals.iter(), available),
            *want,
            "{lines:?} with {available:?}"
        );
    }
}

/// RFC 9110 §12.5.3 / §12.5.5: the Vary secondary key and upstream value.
#[test]
fn rfc9110_s12_5_5_normalise_table() {
    let cases: &[(&[&str], &str)] = &[
        (&["gzip, deflate, br"], "br"),
        (&["gzip;q=1.0, br;q=0.1"], "br"),
        (&["gzip"], "gzip"),
        (&["x-gzip"], "gzip"),
        (&["X-GZIP, deflate"], "gzip"),
        (&["br;q=0, gzip"], "gzip"),
        (&["br;q=0, *"], "gzip"),
        (&["*"], "br"),
        (&["*;q=0, gzip"], "gzip"),
        (&["*;q=0"], ""),
        (&["identity"], ""),
        (&["deflate"], ""),
        (&[""], ""),
        (&[], ""),
        (&["br;q=abc"], ""),
        (&["br;q=abc, gzip"], "gzip"),
        (&["gzip;q=0.001"], "gzip"),
        (&["deflate", "br"], "br"),
    ];
    for (lines, want) in cases {
        let vals = values(lines);
        assert_eq!(normalise_accept_encoding(vals.iter()), *want, "{lines:?}");
    }
}

/// RFC 9110 §8.8.3: a strong ETag becomes weak on the encoded variant.
#[test]
fn rfc9110_s8_8_3_weak_etag() {
    let cases: &[(&[u8], Option<&[u8]>)] = &[
        (b"\"abc\"", Some(b"W/\"abc\"")),
        (b"W/\"abc\"", Some(b"W/\"abc\"")),
        (b"\"\"", Some(b"W/\"\"")),
        (b"W/\"\"", Some(b"W/\"\"")),
        (b"\"a!#~\x80\xff\"", Some(b"W/\"a!#~\x80\xff\"")),
        (b"abc", None),
        (b"", None),
        (b"\"", None),
        (b"W/", None),
        (b"W/abc", None),
        (b"w/\"abc\"", None),
        (b"\"a\"b\"", None),
        (b"\"a b\"", None),
        (b" \"abc\"", None),
        (b"\"abc", None),
        (b"*", None),
    ];
    for (input, want) in cases {
        let got = weak_etag(&HeaderValue::from_bytes(input).unwrap());
        assert_eq!(
            got.as_ref().map(HeaderValue::as_bytes),
            *want,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

/// RFC 9110 §8.4: an encoding is kept only when it makes the content
/// smaller, and bodies under MIN_SIZE are not encoded at all.
#[test]
fn rfc9110_s8_4_encode_all_keeps_smaller() {
    let page = html(10_000);
    let all = encode_all(&BG, &page);
    assert_eq!(all.iter().map(|(c, _)| *c).collect::<Vec<_>>(), BG);
    for (coding, encoded) in &all {
        assert!(encoded.len() < page.len());
        assert_eq!(decode(*coding, encoded), page);
    }
    // Route order is kept, duplicates are encoded once.
    let order = [Coding::Gzip, Coding::Br, Coding::Gzip];
    let all = encode_all(&order, &page);
    assert_eq!(all.iter().map(|(c, _)| *c).collect::<Vec<_>>(), GB);
    // Incompressible: both encodings come out bigger and are dropped.
    assert!(encode_all(&BG, &noise(4096)).is_empty());
    // Below MIN_SIZE nothing, at MIN_SIZE compressible text is encoded.
    let small = html(MIN_SIZE);
    assert!(encode_all(&BG, &small[..MIN_SIZE - 1]).is_empty());
    assert!(!encode_all(&BG, &small[..MIN_SIZE]).is_empty());
    assert!(encode_all(&BG, b"").is_empty());
    assert!(encode_all(&[], &page).is_empty());
}

/// RFC 9110 §5.5 / §12.5.3: no header value, however odd, panics.
#[test]
fn rfc9110_s5_5_no_panic_on_any_header() {
    let mut x: u64 = 1;
    let alphabet = b"bgrzipxq=.0129*;, \t-/W\"identy\x80\xff";
    for _ in 0..5_000 {
        let len = (x % 24) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                alphabet[(x % alphabet.len() as u64) as usize]
            })
            .collect();
        let value = HeaderValue::from_bytes(&bytes).unwrap();
        let _ = negotiate(std::iter::once(&value), &BG);
        let _ = normalise_accept_encoding(std::iter::once(&value));
        let _ = weak_etag(&value);
        let mut map = HeaderMap::new();
        map.insert(CONTENT_TYPE, value.clone());
        map.insert(CACHE_CONTROL, value.clone());
        map.insert(CONTENT_ENCODING, value);
        let _ = compressible(&map);
    }
}
