//! Certificates for the TLS tests: a CA and leaf certificates for given host
//! names, written as PEM files, and a rustls client that trusts the CA and
//! tells which certificate and protocol the server chose. Also what users
//! bring: a self-signed certificate without names (`openssl req -x509 -subj
//! /CN=localhost`), combined PEM files (chain and key in one), and a client
//! that trusts one pinned certificate whatever its names.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A throw-away certificate authority writing its files into `dir`.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    /// The CA certificate (for `curl --cacert`).
    pub ca_pem: PathBuf,
}

/// A leaf certificate's files and its DER bytes.
pub struct Leaf {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8).
    pub key: PathBuf,
    /// The certificate, as the server sends it.
    pub der: Vec<u8>,
}

impl Leaf {
    /// `cert` and `key` written as `dir/<file>.pem` and `dir/<file>.key`.
    fn write(dir: &Path, file: &str, cert: &rcgen::Certificate, key: &KeyPair) -> Leaf {
        let (cert_path, key_path) = (
            dir.join(format!("{file}.pem")),
            dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        Leaf {
            cert: cert_path,
            key: key_path,
            der: cert.der().to_vec(),
        }
    }
}

impl TestCa {
    /// A new CA; its certificate is written to `dir/ca.pem`.
    pub fn new(dir: &Path) -> TestCa {
        std::fs::create_dir_all(dir).expect("ca dir");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "calmcache test CA");
        let key = KeyPair::generate().expect("ca key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("ca cert");
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, issuer.pem()).expect("write ca");
        TestCa {
            issuer,
            dir: dir.to_path_buf(),
            ca_pem,
        }
    }

    /// A certificate for `names` signed by this CA, as `dir/<file>.pem` and
    /// `dir/<file>.key`.
    pub fn leaf(&self, file: &str, names: &[&str]) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, file);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        Leaf::write(&self.dir, file, &cert, &key)
    }

    /// A self-signed certificate for `names` (no CA: only a client that
    /// verifies nothing accepts it), as `dir/<file>.pem` and `.key`.
    pub fn self_signed(dir: &Path, file: &str, names: &[&str]) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(names)
            .expect("params")
            .self_signed(&key)
            .expect("self-signed");
        Leaf::write(dir, file, &cert, &key)
    }

    /// A server config for an origin showing `leaf`, ALPN `http/1.1`; with
    /// `client_ca`, a client certificate signed by that CA is required.
    pub fn server_config(leaf: &Leaf, client_ca: Option<&TestCa>) -> Arc<rustls::ServerConfig> {
        let chain = vec![CertificateDer::from(leaf.der.clone())];
        let key = PrivateKeyDer::from_pem_file(&leaf.key).expect("read the leaf's key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions");
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from(ca.issuer.der().to_vec()))
                    .expect("trust the CA");
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots.into(),
                    provider,
                )
                .build()
                .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, key).expect("server cert");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// A client config trusting this CA only, offering `alpn`.
    pub fn client(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut config = self.trusting().with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// A client config trusting this CA only, showing `leaf` (signed by
    /// any CA) to a server that asks for a client certificate.
    pub fn client_with_cert(&self, leaf: &Leaf) -> Arc<rustls::ClientConfig> {
        let key = PrivateKeyDer::from_pem_file(&leaf.key).expect("read the leaf's key");
        let chain = vec![CertificateDer::from(leaf.der.clone())];
        let config = self
            .trusting()
            .with_client_auth_cert(chain, key)
            .expect("a client certificate");
        Arc::new(config)
    }

    /// A client config builder with this CA as its only root.
    fn trusting(
        &self,
    ) -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.issuer.der().to_vec()))
            .expect("trust the CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
    }
}

impl Leaf {
    /// A self-signed certificate with no subjectAltName, its subject
    /// `CN=<common_name>` only (what `openssl req -x509 -subj
    /// /CN=localhost` makes), as `dir/<file>.pem` and `dir/<file>.key`.
    pub fn self_signed_without_names(dir: &Path, file: &str, common_name: &str) -> Leaf {
        std::fs::create_dir_all(dir).expect("cert dir");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed cert");
        Leaf::write(dir, file, &cert, &key)
    }

    /// The certificate then its private key in one file at `path` (a
    /// combined PEM, as HAProxy reads them).
    pub fn write_combined(&self, path: &Path) {
        let mut pem = std::fs::read(&self.cert).expect("read cert");
        pem.extend(std::fs::read(&self.key).expect("read key"));
        std::fs::write(path, pem).expect("write combined PEM");
    }
}

/// A client config that accepts exactly the certificate `der` (its
/// signatures checked, its names not), offering `alpn`: for a certificate
/// no name verifies, such as [`Leaf::self_signed_without_names`].
pub fn pinned_client(der: &[u8], alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pinned = Pinned {
        der: der.to_vec(),
        algorithms: provider.signature_verification_algorithms,
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// The verifier of [`pinned_client`].
#[derive(Debug)]
struct Pinned {
    der: Vec<u8>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.der.as_slice() {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "not the pinned certificate".to_string(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// What a TLS handshake (and one HTTP/1.1 request, if asked) showed.
pub struct TlsReply {
    /// The leaf certificate the server sent.
    pub leaf: Vec<u8>,
    /// The protocol agreed by ALPN.
    pub alpn: Option<Vec<u8>>,
    /// The raw HTTP/1.1 response (empty when no request was sent).
    pub response: String,
}

/// Connects to `addr` with SNI `name` (verified against the CA), and sends
/// `GET path` over HTTP/1.1 when `path` is given (reading to the end:
/// the request says `Connection: close`).
pub async fn tls_get(
    addr: std::net::SocketAddr,
    name: &str,
    config: Arc<rustls::ClientConfig>,
    path: Option<&str>,
) -> std::io::Result<TlsReply> {
    let connector = tokio_rustls::TlsConnector::from(config);
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut tls = connector.connect(server_name, tcp).await?;
    let (_, session) = tls.get_ref();
    let leaf = session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let alpn = session.alpn_protocol().map(|p| p.to_vec());
    let mut response = String::new();
    if let Some(path) = path {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
        tls.write_all(req.as_bytes()).await?;
        let mut bytes = Vec::new();
        // A close_notify-less end is fine here: the body is read whole first.
        let _ = tls.read_to_end(&mut bytes).await;
        response = String::from_utf8_lossy(&bytes).into_owned();
    }
    Ok(TlsReply {
        leaf,
        alpn,
        response,
    })
}
