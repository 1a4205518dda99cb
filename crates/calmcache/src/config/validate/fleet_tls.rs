//! `[fleet]` over TLS: `tls_ca`, `tls_cert` and `tls_key` read and checked
//! with the config (PEM that parses, CA certificates usable as trust
//! anchors, a key that belongs to its certificate, the two client keys
//! together), only with `rediss://` URLs; and the URL forms redis-rs would
//! only refuse when connecting (a node would then just look cut off from
//! Redis): `#insecure`, a cluster whose nodes mix `redis://` and
//! `rediss://`.

use std::path::Path;

use super::Checker;
use crate::config::error::Problem;
use crate::config::tls::{self, PemFile};

const TLS: &str = "rediss://";

impl Checker {
    /// The CA file and the client certificate and key of `[fleet]`, for
    /// the `nodes` of `fleet.redis` (`cluster`: it was a list).
    pub(super) fn fleet_tls(
        &mut self,
        nodes: &[String],
        cluster: bool,
        ca: Option<String>,
        cert: Option<String>,
        key: Option<String>,
    ) -> (Option<PemFile>, Option<(PemFile, PemFile)>) {
        self.tls_urls(nodes, cluster);
        if !nodes.is_empty() && !nodes.iter().any(|n| n.starts_with(TLS)) {
            for (name, set) in [
                ("tls_ca", ca.is_some()),
                ("tls_cert", cert.is_some()),
                ("tls_key", key.is_some()),
            ] {
                if set {
                    self.report(
                        Problem::new(
                            format!("fleet.{name}"),
                            "only used over TLS, and fleet.redis is not a rediss:// URL",
                        )
                        .hint(format!(
                            "write rediss:// in fleet.redis to reach Redis over TLS, or remove {name}"
                        )),
                    );
                }
            }
        }
        let ca = ca.and_then(|path| self.ca_file("fleet.tls_ca", path));
        let client = match (cert, key) {
            (None, None) => None,
            (Some(_), None) => {
                self.missing_half("fleet.tls_key", "tls_cert", "tls_key");
                None
            }
            (None, Some(_)) => {
                self.missing_half("fleet.tls_cert", "tls_key", "tls_cert");
                None
            }
            (Some(cert), Some(key)) => {
                self.client_cert(["fleet.tls_cert", "fleet.tls_key"], cert, key)
            }
        };
        (ca, client)
    }

    /// `#insecure` and a cluster of mixed schemes, refused here.
    fn tls_urls(&mut self, nodes: &[String], cluster: bool) {
        for (i, url) in nodes.iter().enumerate() {
            let insecure = url.starts_with(TLS)
                && url
                    .split_once('#')
                    .is_some_and(|(_, fragment)| fragment == "insecure");
            if insecure {
                let path = if cluster {
                    format!("fleet.redis[{i}]")
                } else {
                    "fleet.redis".to_string()
                };
                self.report(
                    Problem::new(
                        path,
                        format!(
                            "{:?}: #insecure (no check of Redis' certificate) is not supported",
                            crate::config::redact_url(url)
                        ),
                    )
                    .hint(r#"trust the CA that signed it instead: tls_ca = "/etc/calmcache/redis-ca.pem""#),
                );
            }
        }
        let tls = nodes.iter().filter(|n| n.starts_with(TLS)).count();
        if cluster && tls > 0 && tls < nodes.len() {
            self.report(
                Problem::new(
                    "fleet.redis",
                    "the cluster's nodes mix redis:// and rediss://",
                )
                .hint("every node of a cluster is reached the same way: all rediss:// for TLS"),
            );
        }
    }

    fn missing_half(&mut self, path: &str, set: &str, unset: &str) {
        self.report(
            Problem::new(path, format!("{set} is set but not {unset}")).hint(
                "a client certificate needs its private key: set tls_cert and tls_key, or neither",
            ),
        );
    }

    /// A CA file (`fleet.tls_ca`, an upstream's `tls_ca_file`, TOML path
    /// `at`): one or more CA certificates, each usable as a trust anchor.
    pub(super) fn ca_file(&mut self, at: &str, path: String) -> Option<PemFile> {
        let file = Path::new(&path);
        let checked = tls::read(file, "CA certificates").and_then(|pem| {
            let (certs, _) = tls::parse_chain(file, &pem)?;
            let mut roots = rustls::RootCertStore::empty();
            for (i, cert) in certs.into_iter().enumerate() {
                roots.add(cert).map_err(|e| {
                    format!(
                        "{}: certificate {} is not usable as a CA certificate: {e}",
                        file.display(),
                        i + 1
                    )
                })?;
            }
            Ok(pem)
        });
        match checked {
            Ok(pem) => Some(PemFile {
                path: path.into(),
                pem,
            }),
            Err(reason) => {
                self.report(Problem::new(at, reason));
                None
            }
        }
    }

    /// A client certificate and its key (`fleet.tls_cert` and `tls_key`, an
    /// upstream's `tls_client_cert` and `tls_client_key`, at the TOML paths
    /// `at`): a chain and the private key of its leaf (`key` may be the
    /// certificate's own file).
    pub(super) fn client_cert(
        &mut self,
        at: [&str; 2],
        cert: String,
        key: String,
    ) -> Option<(PemFile, PemFile)> {
        let (cert_file, key_file) = (Path::new(&cert), Path::new(&key));
        let chain = tls::read(cert_file, "certificate")
            .and_then(|pem| tls::parse_chain(cert_file, &pem).map(|(chain, _)| (pem, chain)));
        let private = tls::read(key_file, "private key")
            .and_then(|pem| tls::parse_key(key_file, &pem).map(|private| (pem, private)));
        let ((cert_pem, chain), (key_pem, private)) = match (chain, private) {
            (Ok(chain), Ok(private)) => (chain, private),
            (chain, private) => {
                if let Err(reason) = chain {
                    self.report(Problem::new(at[0], reason));
                }
                if let Err(reason) = private {
                    self.report(Problem::new(at[1], reason));
                }
                return None;
            }
        };
        if let Err(reason) = tls::certify(cert_file, key_file, chain, private) {
            self.report(Problem::new(at[1], reason));
            return None;
        }
        Some((
            PemFile {
                path: cert.into(),
                pem: cert_pem,
            },
            PemFile {
                path: key.into(),
                pem: key_pem,
            },
        ))
    }
}
