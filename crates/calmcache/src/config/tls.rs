//! `[[server.tls]]` entries loaded when the config is checked: a missing
//! file, a key that does not match its certificate or a certificate without
//! names is a config error naming the file. The names a certificate answers
//! for are its `names` key, or else the DNS names of its subjectAltName.
//! The network layer's [`crate::net::tls`] turns them into the listeners'
//! rustls config. The same checks serve `[fleet]`'s client certificate and
//! CA file for `rediss://` ([`PemFile`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// One `[[server.tls]]` entry, loaded.
#[derive(Clone)]
pub struct TlsCert {
    /// The PEM certificate chain file, leaf first.
    pub cert: PathBuf,
    /// The PEM private key file.
    pub key: PathBuf,
    /// Host names served with this certificate (lower case; `*.` prefixes
    /// match one label).
    pub names: Vec<String>,
    /// The chain and the signing key.
    pub(crate) certified: Arc<CertifiedKey>,
}

impl std::fmt::Debug for TlsCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl PartialEq for TlsCert {
    /// Same files, same names and the same certificate bytes (a renewed
    /// certificate at the same path is a change).
    fn eq(&self, other: &Self) -> bool {
        self.cert == other.cert
            && self.key == other.key
            && self.names == other.names
            && self.certified.cert == other.certified.cert
    }
}

impl Eq for TlsCert {}

/// A PEM file named in the config (`fleet.tls_ca`, `tls_cert`, `tls_key`),
/// read and checked with the config: a renewed file is a changed config.
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its contents (never printed: it may hold a private key).
    pub pem: Vec<u8>,
}

impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PemFile").field(&self.path).finish()
    }
}

/// Reads and checks a certificate chain and its key. `names` empty takes
/// the certificate's DNS names. The error says which file and what is wrong.
pub(crate) fn load(cert: &Path, key: &Path, names: Vec<String>) -> Result<TlsCert, String> {
    let (chain, dns_names) = read(cert, "certificate").and_then(|pem| parse_chain(cert, &pem))?;
    let names = if names.is_empty() {
        dns_names
    } else {
        names.iter().map(|n| n.to_ascii_lowercase()).collect()
    };
    let private = read(key, "private key").and_then(|pem| parse_key(key, &pem))?;
    let certified = certify(cert, key, chain, private)?;
    Ok(TlsCert {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        names,
        certified: Arc::new(certified),
    })
}

/// A PEM file's bytes; the error names the file and `what` it should hold.
pub(crate) fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: cannot read the {what}: {e}", path.display()))
}

/// The certificate chain in `pem` (read from `cert`), leaf first, and the
/// leaf's DNS names (lower case): at least one certificate, the leaf a
/// valid X.509 certificate.
pub(crate) fn parse_chain(
    cert: &Path,
    pem: &[u8],
) -> Result<(Vec<CertificateDer<'static>>, Vec<String>), String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            format!(
                "{}: cannot read the certificate: {}",
                cert.display(),
                pem_error(&e)
            )
        })?;
    let Some(first) = chain.first() else {
        return Err(format!(
            "{}: no certificate in it (expected a PEM \"BEGIN CERTIFICATE\" block)",
            cert.display()
        ));
    };
    let leaf = webpki::EndEntityCert::try_from(first)
        .map_err(|e| format!("{}: not a valid X.509 certificate: {e}", cert.display()))?;
    let names = leaf
        .valid_dns_names()
        .map(|n| n.to_ascii_lowercase())
        .collect();
    Ok((chain, names))
}

/// The private key in `pem` (read from `key`).
pub(crate) fn parse_key(key: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        format!(
            "{}: cannot read the private key: {}",
            key.display(),
            pem_error(&e)
        )
    })
}

/// `chain` and `private` as one signing identity: the error says when the
/// key (file `key`) does not belong to the certificate (file `cert`).
pub(crate) fn certify(
    cert: &Path,
    key: &Path,
    chain: Vec<CertificateDer<'static>>,
    private: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, private, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "{}: this key does not belong to the certificate {}",
            key.display(),
            cert.display()
        ),
        e => format!("{}: unusable private key: {e}", key.display()),
    })
}

fn pem_error(e: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    match e {
        Error::Io(io) => io.to_string(),
        Error::NoItemsFound => "no PEM item of the expected kind in it".to_string(),
        e => format!("bad PEM: {e:?}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("calmcache-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn bad_files_are_named_with_the_reason() {
        let dir = temp_dir("bad");
        let missing = dir.join("missing.pem");
        let e = load(&missing, &missing, Vec::new()).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{}: cannot read the certificate",
                missing.display()
            )),
            "{e}"
        );
        let junk = write(&dir, "junk.pem", "not a pem file\n");
        let e = load(&junk, &junk, Vec::new()).unwrap_err();
        assert!(e.contains("no certificate in it"), "{e}");
        let fake = write(
            &dir,
            "fake.pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let e = load(&fake, &fake, Vec::new()).unwrap_err();
        assert!(e.contains("not a valid X.509 certificate"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
