//! Unix-socket upstream servers: `servers = ["unix:/run/app.sock"]`, NGINX's
//! `server unix:/run/app.sock;` (most Ruby, Python and PHP deployments).
//!
//! Owns the spelling (`unix:` and an absolute path), the path's checks
//! (absolute, not empty, no NUL, at most [`SUN_PATH_MAX`] bytes: what a
//! `sockaddr_un` holds), and the name of calmcache's own making that keys
//! the server's pooled connections ([`pool_authority`]). Whether the socket
//! exists is not a config question: an application may start after
//! calmcache, and until its socket appears the server is down, as a TCP
//! server that refuses connections.
//!
//! Must not connect (net/ does) nor import anything past config/.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use http::uri::Authority;

use super::units::BadValue;

/// How a unix-socket server is written, as in NGINX.
pub(crate) const PREFIX: &str = "unix:";

/// The longest socket path: `sun_path` is 108 bytes on Linux, one of them
/// the terminating NUL.
pub(crate) const SUN_PATH_MAX: usize = 107;

/// The host every unix server's pool name ends in: `.invalid` never
/// resolves (RFC 6761 §6.4), so the name can only mean this socket.
const POOL_HOST_SUFFIX: &str = ".unix.invalid";

/// The socket path of a `servers` entry written `unix:/path`; `None` when
/// the entry is not a unix server (then it is `host:port` or a URL).
pub(crate) fn parse(text: &str) -> Option<Result<PathBuf, BadValue>> {
    let path = text.strip_prefix(PREFIX)?;
    let bad = |message: String, hint: &str| {
        Some(Err(BadValue {
            message,
            hint: hint.to_owned(),
        }))
    };
    if path.is_empty() {
        return bad(
            format!("{text:?} names no socket"),
            r#"write the socket's absolute path, e.g. "unix:/run/app/app.sock""#,
        );
    }
    if !path.starts_with('/') {
        return bad(
            format!("{text:?}: the socket path must be absolute"),
            "a relative path would depend on the directory calmcache was started in; \
             write it from /, e.g. \"unix:/run/app/app.sock\"",
        );
    }
    if path.contains('\0') {
        return bad(
            format!("{text:?}: the socket path holds a NUL byte"),
            "remove it",
        );
    }
    if path.len() > SUN_PATH_MAX {
        return bad(
            format!(
                "{text:?}: the socket path is {} bytes, more than a unix socket address \
                 holds ({SUN_PATH_MAX})",
                path.len()
            ),
            "listen on a shorter path (e.g. under /run) or link a short path to it",
        );
    }
    Some(Ok(PathBuf::from(path)))
}

/// The server as `/status`, metrics, logs and errors show it: `unix:/path`.
pub(crate) fn label(path: &Path) -> String {
    format!("{PREFIX}{}", path.display())
}

/// The name that keys a unix server's connections in the upstream's pool
/// (and that its requests' URIs carry): `<the path's bytes in hex>.unix.invalid:80`,
/// one per path, the same at every reload. It is never resolved nor sent
/// as `Host`.
pub(crate) fn pool_authority(path: &Path) -> Authority {
    let mut host = String::with_capacity(path.as_os_str().len() * 2 + 20);
    for byte in path.as_os_str().as_bytes() {
        let _ = write!(host, "{byte:02x}");
    }
    host.push_str(POOL_HOST_SUFFIX);
    host.push_str(":80");
    // Invariant: hex digits, dots and a port always make an authority; a
    // path too long for one is refused by `parse` first.
    host.parse()
        .unwrap_or_else(|_| Authority::from_static("unix.invalid:80"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn unix_servers_are_absolute_paths_a_sockaddr_holds() {
        assert!(parse("127.0.0.1:8081").is_none());
        assert!(parse("https://app:443").is_none());
        let ok = parse("unix:/run/app.sock").unwrap().ok();
        assert_eq!(ok, Some(PathBuf::from("/run/app.sock")));
        for bad in [
            "unix:",
            "unix:run/app.sock",
            "unix:./app.sock",
            "unix:/a\0b",
        ] {
            assert!(matches!(parse(bad), Some(Err(_))), "{bad:?}");
        }
        let longest = format!("unix:/{}", "a".repeat(SUN_PATH_MAX - 1));
        assert!(matches!(parse(&longest), Some(Ok(_))));
        let longer = format!("unix:/{}", "a".repeat(SUN_PATH_MAX));
        assert!(matches!(parse(&longer), Some(Err(_))));
    }

    #[test]
    fn pool_names_are_one_per_path_and_never_resolve() {
        let a = pool_authority(Path::new("/run/a.sock"));
        let b = pool_authority(Path::new("/run/b.sock"));
        assert_ne!(a, b);
        assert_eq!(a, pool_authority(Path::new("/run/a.sock")));
        assert!(a.host().ends_with(".unix.invalid"), "{a}");
        assert_eq!(a.port_u16(), Some(80));
        let longest = format!("/{}", "\u{e9}".repeat(SUN_PATH_MAX / 2 - 1));
        let long = pool_authority(Path::new(&longest));
        assert!(long.host().ends_with(".unix.invalid"), "{long}");
        assert_eq!(label(Path::new("/run/a.sock")), "unix:/run/a.sock");
    }
}
