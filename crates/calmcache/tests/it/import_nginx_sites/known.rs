//! The differences the side-by-side table allows, each with its reason
//! (docs/migrating-from-nginx.md lists them with their row counts).

use super::{Column, Listener, Row, Site};

/// A difference the table allows, and why.
pub(super) struct Known {
    pub(super) site: &'static str,
    /// Rows it covers: those whose path starts with one of these (`/`:
    /// every row).
    paths: &'static [&'static str],
    /// `None`: every host.
    host: Option<&'static str>,
    /// `None`: every listener.
    listener: Option<Listener>,
    columns: &'static [Column],
    pub(super) why: Why,
}

/// Whose difference it is.
pub(super) enum Why {
    /// NGINX does it, calmcache deliberately does not.
    Deliberate(&'static str),
}

const CACHED_FORUM: &[&str] = &[
    "/uploads/a.png",
    "/uploads/B.JPG",
    "/letter_avatar/",
    "/user_avatar/",
];
const NGINX_KEY: &str = "NGINX's default key ($scheme$proxy_host$request_uri) has no Host: it \
    serves one host's stored answer to another; calmcache's key has the Host";
const ABOVE_ROOT: &str = "a path climbing above / (`/../x`, `/%2e%2e/x`): NGINX answers 400, \
    calmcache resolves the dot segments clamped at / (RFC 3986 §5.2.4) and routes /x";
pub(super) const KNOWN: &[Known] = &[
    Known {
        site: "world-forum.conf",
        paths: CACHED_FORUM,
        host: Some("unknown.example"),
        listener: None,
        columns: &[Column::Body, Column::OriginRequests],
        why: Why::Deliberate(NGINX_KEY),
    },
    Known {
        site: "world-forum.conf",
        paths: &["/../"],
        host: None,
        listener: None,
        columns: &[
            Column::Status,
            Column::Body,
            Column::Host,
            Column::Encoding,
            Column::OriginRequests,
        ],
        why: Why::Deliberate(ABOVE_ROOT),
    },
    Known {
        site: "world-social.conf",
        paths: &["/%2e%2e/"],
        host: None,
        listener: None,
        columns: &[
            Column::Status,
            Column::Body,
            Column::Host,
            Column::Location,
            Column::Encoding,
            Column::XCacheStatus,
            Column::OriginRequests,
        ],
        why: Why::Deliberate(ABOVE_ROOT),
    },
    Known {
        site: "world-social.conf",
        paths: &["/@user/2?sc=1"],
        host: None,
        listener: Some(Listener::Tls),
        columns: &[Column::SetCookie],
        why: Why::Deliberate(
            "proxy_ignore_headers Set-Cookie: NGINX stores the answer with its Set-Cookie and \
             hands that cookie to every client a hit goes to; calmcache removes it from the \
             stored copy (only the client whose request fetched it gets it)",
        ),
    },
    Known {
        site: "world-social.conf",
        paths: &["/gone?st=410"],
        host: None,
        listener: Some(Listener::Tls),
        columns: &[Column::Encoding],
        why: Why::Deliberate(
            "NGINX gzips only 200, 403 and 404 answers; calmcache's compress (written for \
             `gzip on` on a route that stores) gzips any stored answer, here a stored 410",
        ),
    },
    Known {
        site: "world-social.conf",
        paths: &["/"],
        host: Some("unknown.example"),
        listener: Some(Listener::Tls),
        columns: &[
            Column::Body,
            Column::Host,
            Column::XCacheStatus,
            Column::OriginRequests,
        ],
        // Last of this site's: the entries above say why for their paths.
        why: Why::Deliberate(NGINX_KEY),
    },
    Known {
        site: "world-microcache-unix.conf",
        paths: &["/static/../"],
        host: None,
        listener: None,
        columns: &[Column::Body],
        why: Why::Deliberate(
            "proxy_pass without a URI: NGINX passes the client's request target as sent \
             (/static/../etc/passwd), calmcache the normalised path it routed (/etc/passwd)",
        ),
    },
];

impl Why {
    pub(super) fn label(&self) -> String {
        match self {
            Why::Deliberate(w) => format!("deliberate: {w}"),
        }
    }
}

/// The first entry of `KNOWN` that allows `row` to differ in `column`.
pub(super) fn known(site: &Site, row: &Row, column: Column) -> Option<usize> {
    KNOWN.iter().position(|k| {
        k.site == site.file
            && k.columns.contains(&column)
            && k.listener.is_none_or(|l| l == row.listener)
            && k.host.is_none_or(|h| h == row.host)
            && k.paths.iter().any(|p| row.path.starts_with(p))
    })
}
