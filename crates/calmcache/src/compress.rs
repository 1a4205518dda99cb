//! Compression of stored objects: each text-like object the origin sends
//! uncompressed is encoded once per configured coding when it is stored, and
//! every client gets the best encoding its `Accept-Encoding` allows.

/// A content coding calmcache can produce (`compress = ["br", "gzip"]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    /// Brotli (RFC 7932), `Content-Encoding: br`.
    Br,
    /// gzip (RFC 1952), `Content-Encoding: gzip`.
    Gzip,
}

impl Coding {
    /// Every coding, in the spelling the config and `Content-Encoding` use.
    pub const ALL: [Coding; 2] = [Coding::Br, Coding::Gzip];

    /// The `Content-Encoding` token.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// Parses a config or header token (case-insensitive).
    pub fn parse(token: &str) -> Option<Coding> {
        Coding::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(token.trim()))
    }
}
