//! [`Scheme`]: `http` or `https`, the one spelling inside calmcache of a
//! client connection's scheme (a TLS listener, or a trusted proxy's
//! `X-Forwarded-Proto`) and of an origin server's (`https://` or
//! `tls = true`). It becomes an [`http::uri::Scheme`] only where a URI is
//! built for hyper ([`Scheme::uri`]).
//!
//! Imports nothing of this crate.

/// `http` or `https`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP.
    #[default]
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// `Https` when `tls`.
    pub fn from_tls(tls: bool) -> Scheme {
        if tls {
            Scheme::Https
        } else {
            Scheme::Http
        }
    }

    /// `"http"` or `"https"`: `$scheme`, `X-Forwarded-Proto`, URIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// True for `https`.
    pub fn is_tls(self) -> bool {
        self == Scheme::Https
    }

    /// The port a URI of this scheme means when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// As hyper's URIs spell it.
    pub fn uri(self) -> http::uri::Scheme {
        match self {
            Scheme::Http => http::uri::Scheme::HTTP,
            Scheme::Https => http::uri::Scheme::HTTPS,
        }
    }
}
