//! Upstream servers over TLS and their weights: a `servers` entry's
//! scheme (`https://host:port`, `http://host:port` or a bare `host:port`;
//! `https://host` means port 443), the upstream's `tls`, `tls_server_name`,
//! `tls_ca_file`, `tls_verify`, `tls_client_cert` and `tls_client_key`, and
//! a server's `weight`.
//!
//! The CA and client certificate files are read and checked here (as
//! `[fleet]`'s, `fleet_tls.rs`), so `check` names a missing or invalid file
//! and a reload that meets one keeps the running config. The system's roots
//! are the environment's: `run/preflight.rs` checks there are some.

use super::Checker;
use crate::config::defaults::upstream;
use crate::config::error::Problem;
use crate::config::raw::RawUpstream;
use crate::config::tls::PemFile;
use crate::config::units::BadValue;
use crate::config::{Scheme, UpstreamServer, UpstreamTls};

/// The largest `weight`: enough for any ratio NGINX configs use, small
/// enough that a typo (`weight = 30000`) is caught.
pub(super) const MAX_WEIGHT: u32 = 1000;

/// A `servers` entry without its scheme: `host:port` (the scheme's default
/// port added when it had none) and the scheme it named, `None` for none.
pub(super) fn split_scheme(text: &str) -> Result<(String, Option<Scheme>), BadValue> {
    let bad = |hint: &str| BadValue {
        message: format!("{text:?} is not host:port or an http:// or https:// origin"),
        hint: hint.to_owned(),
    };
    let (rest, scheme) = if let Some(rest) = text.strip_prefix("https://") {
        (rest, Scheme::Https)
    } else if let Some(rest) = text.strip_prefix("http://") {
        (rest, Scheme::Http)
    } else if text.contains("://") {
        return Err(bad(
            r#"only http:// and https:// origins, e.g. "https://origin.example:443""#,
        ));
    } else {
        return Ok((text.to_owned(), None));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return Err(bad(
            "write the origin without a path; routes decide the path",
        ));
    }
    let has_port = match rest.strip_prefix('[') {
        Some(v6) => v6.split_once(']').is_some_and(|(_, p)| p.starts_with(':')),
        None => rest.contains(':'),
    };
    if has_port || rest.is_empty() {
        Ok((rest.to_owned(), Some(scheme)))
    } else {
        Ok((format!("{rest}:{}", scheme.default_port()), Some(scheme)))
    }
}

/// True when the file at `path` holds a PEM private key (an unreadable
/// file: true, so the certificate's own check names the problem).
fn has_key(path: &str) -> bool {
    use rustls_pki_types::pem::PemObject;
    match std::fs::read(path) {
        Ok(pem) => rustls_pki_types::PrivateKeyDer::from_pem_slice(&pem).is_ok(),
        Err(_) => true,
    }
}

impl Checker {
    /// A server's `weight` at `path`: 1 to [`MAX_WEIGHT`], 1 when absent
    /// or invalid.
    pub(super) fn weight(&mut self, path: &str, raw: Option<i64>) -> u32 {
        let Some(value) = raw else {
            return upstream::WEIGHT;
        };
        match u32::try_from(value) {
            Ok(w @ 1..=MAX_WEIGHT) => w,
            _ => {
                let problem =
                    Problem::new(path, format!("must be from 1 to {MAX_WEIGHT}, got {value}"));
                self.report(problem.hint(
                    "a server with weight = 3 gets three requests for each one a weight-1 server gets",
                ));
                upstream::WEIGHT
            }
        }
    }

    /// Which servers use TLS (their schemes set from `written`, as
    /// [`split_scheme`] found them, and the upstream's `tls`; `at_servers`
    /// the upstream's `servers` path) and the upstream's TLS keys at
    /// `path`; `None` when no server uses TLS.
    pub(super) fn upstream_tls(
        &mut self,
        path: &str,
        at_servers: &str,
        servers: &mut [UpstreamServer],
        written: &[Option<Scheme>],
        raw: &RawUpstream,
    ) -> Option<UpstreamTls> {
        let at = |key: &str| format!("{path}.{key}");
        for (i, (server, written)) in servers.iter_mut().zip(written).enumerate() {
            server.scheme = self.server_scheme(&format!("{at_servers}[{i}]"), *written, raw.tls);
        }
        let keys = [
            ("tls_server_name", raw.tls_server_name.is_some()),
            ("tls_ca_file", raw.tls_ca_file.is_some()),
            ("tls_verify", raw.tls_verify.is_some()),
            ("tls_client_cert", raw.tls_client_cert.is_some()),
            ("tls_client_key", raw.tls_client_key.is_some()),
        ];
        if !servers.iter().any(|s| s.scheme.is_tls()) {
            for (key, set) in keys {
                if set {
                    self.report(
                        Problem::new(
                            at(key),
                            "only used over TLS, and no server of this upstream uses it",
                        )
                        .hint(r#"write servers as "https://host:port", or set tls = true"#),
                    );
                }
            }
            return None;
        }
        let verify = raw.tls_verify.unwrap_or(upstream::TLS_VERIFY);
        let server_name = raw.tls_server_name.clone().filter(|name| {
            let ok = rustls_pki_types::ServerName::try_from(name.as_str()).is_ok();
            if !ok {
                self.report(
                    Problem::new(
                        at("tls_server_name"),
                        format!("{name:?} is not a DNS name or IP address"),
                    )
                    .hint(r#"the name the origin's certificate holds, e.g. "origin.example""#),
                );
            }
            ok
        });
        if !verify && raw.tls_ca_file.is_some() {
            self.report(
                Problem::new(
                    at("tls_ca_file"),
                    "not used: tls_verify = false accepts any certificate",
                )
                .hint("remove tls_verify = false to check the origin against this CA"),
            );
        }
        let ca = raw
            .tls_ca_file
            .clone()
            .and_then(|file| self.ca_file(&at("tls_ca_file"), file));
        let client = self.upstream_client(&at, raw);
        let tls = UpstreamTls {
            server_name,
            ca,
            verify,
            client,
        };
        Some(tls)
    }

    /// A server's scheme: `https` if it wrote `https://` or the upstream
    /// says `tls = true`; a scheme that contradicts `tls` is reported.
    fn server_scheme(&mut self, at: &str, written: Option<Scheme>, tls: Option<bool>) -> Scheme {
        match (tls, written) {
            (Some(true), Some(Scheme::Http)) => self.report(
                Problem::new(at, "an http:// server in an upstream with tls = true")
                    .hint("write https:// or a bare host:port, or remove tls = true"),
            ),
            (Some(false), Some(Scheme::Https)) => self.report(
                Problem::new(at, "an https:// server in an upstream with tls = false")
                    .hint("remove tls = false: https:// servers are reached over TLS"),
            ),
            _ => {}
        }
        let tls = tls.unwrap_or(upstream::TLS) || written == Some(Scheme::Https);
        Scheme::from_tls(tls)
    }

    /// `tls_client_cert` and `tls_client_key` at `at(..)`; the key may sit
    /// in the certificate's file, as HAProxy takes it.
    fn upstream_client(
        &mut self,
        at: &dyn Fn(&str) -> String,
        raw: &RawUpstream,
    ) -> Option<(PemFile, PemFile)> {
        match (raw.tls_client_cert.clone(), raw.tls_client_key.clone()) {
            (None, None) => None,
            (None, Some(_)) => {
                self.report(
                    Problem::new(at("tls_client_cert"), "tls_client_key is set but not tls_client_cert")
                        .hint("a client key needs its certificate: set tls_client_cert too, or remove tls_client_key"),
                );
                None
            }
            (Some(cert), Some(key)) => {
                let paths = [at("tls_client_cert"), at("tls_client_key")];
                self.client_cert([paths[0].as_str(), paths[1].as_str()], cert, key)
            }
            // The key may sit in the certificate's file, as HAProxy takes it.
            (Some(cert), None) if !has_key(&cert) => {
                self.report(
                    Problem::new(
                        at("tls_client_cert"),
                        format!("{cert}: no private key in it, and tls_client_key is not set"),
                    )
                    .hint("set tls_client_key to the key's file, or append the key to this file"),
                );
                None
            }
            (Some(cert), None) => {
                let at_cert = at("tls_client_cert");
                self.client_cert([at_cert.as_str(), at_cert.as_str()], cert.clone(), cert)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::split_scheme;
    use crate::config::Scheme;

    #[test]
    fn schemes_are_split_and_default_ports_added() {
        let ok = |text: &str| split_scheme(text).unwrap();
        assert_eq!(ok("a:81"), ("a:81".to_owned(), None));
        let https = Some(Scheme::Https);
        assert_eq!(ok("https://a"), ("a:443".to_owned(), https));
        assert_eq!(ok("https://a:8443/"), ("a:8443".to_owned(), https));
        assert_eq!(ok("http://a"), ("a:80".to_owned(), Some(Scheme::Http)));
        assert_eq!(ok("https://[::1]"), ("[::1]:443".to_owned(), https));
        assert_eq!(ok("https://[::1]:9"), ("[::1]:9".to_owned(), https));
        assert!(split_scheme("ftp://a:21").is_err());
        assert!(split_scheme("https://a:1/x").is_err());
    }
}
