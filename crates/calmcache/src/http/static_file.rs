//! Files served from a directory (a route's `root`): a request path turned
//! into a path below the directory, refusing every spelling that could
//! leave it; the `Content-Type` of a name (NGINX's `mime.types` basics);
//! the validators NGINX makes for a file. No I/O here: the proxy's
//! `proxy/answering/files.rs` opens (beneath the root, on the blocking
//! pool) and streams.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A request path made into one below a directory.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Below {
    /// Relative, plain segments only (may be empty: the directory itself).
    pub path: PathBuf,
    /// The path ended in `/`: a directory, served by its index.
    pub directory: bool,
}

/// Why a request path cannot name a file below a directory (answered 400).
pub(crate) type Refused = &'static str;

/// The normalised request path (`/a/b%20c.txt`, no query) as a path below
/// a root: percent-escapes decoded; an escaped `/` (`%2F`), a backslash
/// (escaped or not), NUL, or a `.` / `..` segment is refused, since each
/// could name something else than the path routes matched (the edge has
/// removed dot-segments already; this holds whatever it did).
pub(crate) fn below(path: &str) -> Result<Below, Refused> {
    let directory = path.ends_with('/');
    let mut out = PathBuf::new();
    let mut segment = Vec::with_capacity(path.len());
    for raw in path.split('/').filter(|s| !s.is_empty()) {
        segment.clear();
        decode_into(raw, &mut segment)?;
        if segment == b"." || segment == b".." {
            return Err("a dot-segment in a file path");
        }
        out.push(OsStr::from_bytes(&segment));
    }
    Ok(Below {
        path: out,
        directory,
    })
}

/// Percent-decodes one segment into `out`; refuses NUL, `/` and `\`.
fn decode_into(raw: &str, out: &mut Vec<u8>) -> Result<(), Refused> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or("a broken %-escape")?;
                let text = std::str::from_utf8(hex).map_err(|_| "a broken %-escape")?;
                i += 2;
                u8::from_str_radix(text, 16).map_err(|_| "a broken %-escape")?
            }
            b => b,
        };
        match b {
            0 => return Err("NUL in a file path"),
            b'/' => return Err("an escaped slash in a file path"),
            b'\\' => return Err("a backslash in a file path"),
            _ => out.push(b),
        }
        i += 1;
    }
    Ok(())
}

/// The `Content-Type` NGINX's stock `mime.types` gives a file name's
/// extension (lower-cased), `application/octet-stream` (its `default_type`
/// with those types) for any other.
pub(crate) fn content_type(name: &Path) -> &'static str {
    let ext = name
        .extension()
        .and_then(OsStr::to_str)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    TYPES
        .iter()
        .find(|(exts, _)| exts.contains(&ext.as_str()))
        .map_or("application/octet-stream", |(_, t)| t)
}

/// Extensions and types, as NGINX's `conf/mime.types` says them.
const TYPES: &[(&[&str], &str)] = &[
    (&["html", "htm", "shtml"], "text/html"),
    (&["css"], "text/css"),
    (&["xml"], "text/xml"),
    (&["gif"], "image/gif"),
    (&["jpeg", "jpg"], "image/jpeg"),
    (&["js"], "application/javascript"),
    (&["atom"], "application/atom+xml"),
    (&["rss"], "application/rss+xml"),
    (&["txt"], "text/plain"),
    (&["png"], "image/png"),
    (&["svg", "svgz"], "image/svg+xml"),
    (&["webp"], "image/webp"),
    (&["avif"], "image/avif"),
    (&["ico"], "image/x-icon"),
    (&["woff"], "font/woff"),
    (&["woff2"], "font/woff2"),
    (&["json"], "application/json"),
    (&["pdf"], "application/pdf"),
    (&["zip"], "application/zip"),
    (&["wasm"], "application/wasm"),
    (&["mp3"], "audio/mpeg"),
    (&["ogg"], "audio/ogg"),
    (&["mp4"], "video/mp4"),
    (&["webm"], "video/webm"),
];

/// NGINX's `ETag` for a file: `"<mtime seconds, hex>-<size, hex>"`.
pub(crate) fn etag(modified: SystemTime, len: u64) -> String {
    format!("\"{:x}-{:x}\"", seconds(modified), len)
}

/// The `Last-Modified` value of a file modified at `modified`.
pub(crate) fn last_modified(modified: SystemTime) -> String {
    // An HTTP date ends with year 9999 (httpdate panics past it); a file's
    // mtime may say later (touch -d, some file systems).
    let seconds = seconds(modified).min(LAST_HTTP_DATE);
    httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(seconds))
}

/// 9999-12-31T23:59:59Z, the last time an HTTP date can say.
const LAST_HTTP_DATE: u64 = 253_402_300_799;

fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file touched to year 10000 panicked in httpdate on every request.
    #[test]
    fn an_mtime_past_year_9999_is_the_last_http_date() {
        let far = UNIX_EPOCH + std::time::Duration::from_secs(LAST_HTTP_DATE + 86_400 * 400);
        assert_eq!(last_modified(far), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn paths_below_a_root() {
        let ok = |p: &str| below(p).map(|b| (b.path, b.directory));
        assert_eq!(ok("/"), Ok((PathBuf::new(), true)));
        assert_eq!(ok("/a/b.txt"), Ok((PathBuf::from("a/b.txt"), false)));
        assert_eq!(ok("/a%20b/"), Ok((PathBuf::from("a b"), true)));
        assert_eq!(ok("/%C3%A9.txt"), Ok((PathBuf::from("é.txt"), false)));
        for bad in [
            "/a/..%2Fetc/passwd",
            "/%2e%2e/etc/passwd",
            "/a/%2e/b",
            "/..",
            "/a%2Fb",
            "/a%2fb",
            "/a%5Cb",
            "/a\\b",
            "/a%00b",
            "/a%zz",
            "/a%4",
        ] {
            assert!(below(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn types_and_validators_as_nginx() {
        assert_eq!(content_type(Path::new("a/index.HTML")), "text/html");
        assert_eq!(content_type(Path::new("app.js")), "application/javascript");
        assert_eq!(content_type(Path::new("noext")), "application/octet-stream");
        let t = UNIX_EPOCH + std::time::Duration::from_secs(0x5f5e_1000);
        assert_eq!(etag(t, 0x1234), "\"5f5e1000-1234\"");
        assert_eq!(last_modified(t), "Sun, 13 Sep 2020 12:26:40 GMT");
    }
}
