//! `[[server.tls]]` entries loaded when the config is checked: a missing
//! file, a key that does not match its certificate, or a file without the
//! one key it should hold is a config error naming the file and saying what
//! it found. The key is in its own file (`key`) or in the certificate's (a
//! combined PEM, as HAProxy reads them: `key` left out or naming the same
//! file). The names a certificate answers for are its `names` key, or else
//! the DNS names of its subjectAltName; whether an entry may have none (the
//! first, default one may) is `validate.rs`'s call. The network layer's
//! [`crate::net::tls`] turns them into the listeners' rustls config. The
//! same checks serve `[fleet]`'s client certificate and CA file for
//! `rediss://` ([`PemFile`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{PemObject, SectionKind};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// One `[[server.tls]]` entry, loaded.
#[derive(Clone)]
pub struct TlsCert {
    /// The PEM certificate chain file, leaf first.
    pub cert: PathBuf,
    /// The PEM file the private key was read from: `key`, or `cert` itself
    /// for a combined PEM.
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

/// Reads and checks a certificate chain and its key. `key` `None`, or the
/// certificate's own path, takes the key from the certificate file (a
/// combined PEM, as HAProxy reads them). `names` empty takes the
/// certificate's DNS names (maybe none: the caller decides whether an entry
/// may go without). The error says which file and what is wrong.
pub(crate) fn load(cert: &Path, key: Option<&Path>, names: Vec<String>) -> Result<TlsCert, String> {
    let contents = read(cert, "certificate").and_then(|pem| {
        PemContents::scan(&pem)
            .map_err(|why| format!("{}: cannot read the certificate: {why}", cert.display()))
    })?;
    let (chain, dns_names) = contents.chain(cert)?;
    let names = if names.is_empty() {
        dns_names
    } else {
        names.iter().map(|n| n.to_ascii_lowercase()).collect()
    };
    let (key, private) = match key {
        Some(key) if key != cert => {
            let private = read(key, "private key").and_then(|pem| parse_key(key, &pem))?;
            (key, private)
        }
        _ => (cert, contents.combined_key(cert)?),
    };
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

/// Every PEM block of a file, sorted by kind, so that an error can say what
/// the file holds instead of what it lacks only.
struct PemContents {
    certs: Vec<CertificateDer<'static>>,
    keys: Vec<PrivateKeyDer<'static>>,
    /// `BEGIN ENCRYPTED PRIVATE KEY` blocks: rustls cannot use them.
    encrypted_keys: usize,
    /// Blocks of any other kind (public keys, CRLs, requests).
    others: usize,
}

impl PemContents {
    /// The blocks of `pem`; a block that does not decode is an error (the
    /// reason: the caller names the file).
    fn scan(pem: &[u8]) -> Result<PemContents, String> {
        let mut contents = PemContents {
            certs: Vec::new(),
            keys: Vec::new(),
            encrypted_keys: count_blocks(pem, b"ENCRYPTED PRIVATE KEY"),
            others: 0,
        };
        for block in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
            let (kind, der) = block.map_err(|e| pem_error(&e))?;
            match kind {
                SectionKind::Certificate => contents.certs.push(CertificateDer::from(der)),
                kind => match PrivateKeyDer::from_pem(kind, der) {
                    Some(key) => contents.keys.push(key),
                    None => contents.others += 1,
                },
            }
        }
        Ok(contents)
    }

    /// What the file holds, for messages: `1 certificate and 2 private
    /// keys`, `no PEM block`.
    fn found(&self) -> String {
        let mut parts = Vec::new();
        for (n, what) in [
            (self.certs.len(), "certificate"),
            (self.keys.len(), "private key"),
            (self.encrypted_keys, "encrypted private key"),
            (self.others, "other PEM block"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}{}", if n == 1 { "" } else { "s" }));
            }
        }
        match parts.len() {
            0 => "no PEM block".to_string(),
            _ => parts.join(" and "),
        }
    }

    /// The chain (leaf first) and the leaf's DNS names (lower case).
    fn chain(&self, cert: &Path) -> Result<(Vec<CertificateDer<'static>>, Vec<String>), String> {
        let Some(first) = self.certs.first() else {
            return Err(format!(
                "{}: no certificate in it (expected a PEM \"BEGIN CERTIFICATE\" block; found {})",
                cert.display(),
                self.found()
            ));
        };
        let leaf = webpki::EndEntityCert::try_from(first)
            .map_err(|e| format!("{}: not a valid X.509 certificate: {e}", cert.display()))?;
        let names = leaf
            .valid_dns_names()
            .map(|n| n.to_ascii_lowercase())
            .collect();
        Ok((self.certs.clone(), names))
    }

    /// The one private key of a key file (`key`).
    fn key(self, key: &Path) -> Result<PrivateKeyDer<'static>, String> {
        self.one_key()
            .map_err(|why| format!("{}: cannot read the private key: {why}", key.display()))
    }

    /// The one private key of a combined file (`cert`, no `key` named).
    fn combined_key(&self, cert: &Path) -> Result<PrivateKeyDer<'static>, String> {
        self.one_key().map_err(|why| {
            format!(
                "{}: {why}; with no `key`, the certificate file must hold its private key too \
                 (a combined PEM), else name the key file: key = \"/path/key.pem\"",
                cert.display()
            )
        })
    }

    fn one_key(&self) -> Result<PrivateKeyDer<'static>, String> {
        match self.keys.as_slice() {
            [key] => Ok(key.clone_key()),
            [] if self.encrypted_keys > 0 => Err(format!(
                "the private key is encrypted (found {}), and calmcache reads no passphrase; \
                 decrypt it with `openssl pkey -in <file> -out <key.pem>`",
                self.found()
            )),
            [] => Err(format!("no private key in it (found {})", self.found())),
            keys => Err(format!(
                "{} private keys in it (found {}); keep only the certificate's own",
                keys.len(),
                self.found()
            )),
        }
    }
}

/// How many `-----BEGIN <label>-----` lines `pem` has.
fn count_blocks(pem: &[u8], label: &[u8]) -> usize {
    let mut begin = b"-----BEGIN ".to_vec();
    begin.extend_from_slice(label);
    begin.extend_from_slice(b"-----");
    pem.windows(begin.len())
        .filter(|w| *w == begin.as_slice())
        .count()
}

/// The certificate chain in `pem` (read from `cert`), leaf first, and the
/// leaf's DNS names (lower case): at least one certificate, the leaf a
/// valid X.509 certificate.
pub(crate) fn parse_chain(
    cert: &Path,
    pem: &[u8],
) -> Result<(Vec<CertificateDer<'static>>, Vec<String>), String> {
    PemContents::scan(pem)
        .map_err(|why| format!("{}: cannot read the certificate: {why}", cert.display()))?
        .chain(cert)
}

/// The one private key in `pem` (read from `key`): none, or two, is an
/// error saying what the file holds.
pub(crate) fn parse_key(key: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PemContents::scan(pem)
        .map_err(|why| format!("{}: cannot read the private key: {why}", key.display()))?
        .key(key)
}

/// `chain` and `private` as one signing identity: the error says when the
/// key (file `key`, maybe the certificate's own file) does not belong to
/// the certificate (file `cert`).
pub(crate) fn certify(
    cert: &Path,
    key: &Path,
    chain: Vec<CertificateDer<'static>>,
    private: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, private, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) if key == cert => format!(
            "{}: its private key does not belong to its certificate (the first in the file)",
            key.display()
        ),
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
        let e = load(&missing, None, Vec::new()).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{}: cannot read the certificate",
                missing.display()
            )),
            "{e}"
        );
        let junk = write(&dir, "junk.pem", "not a pem file\n");
        let e = load(&junk, Some(&junk), Vec::new()).unwrap_err();
        assert!(e.contains("no certificate in it"), "{e}");
        let fake = write(
            &dir,
            "fake.pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let e = load(&fake, None, Vec::new()).unwrap_err();
        assert!(e.contains("not a valid X.509 certificate"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
