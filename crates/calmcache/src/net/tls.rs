//! TLS termination: one certificate chosen per handshake by SNI, ALPN `h2`
//! and `http/1.1`.
//!
//! [`server_config`] turns the entries the config loaded
//! ([`crate::config::tls`]) into the rustls server config the TLS listeners
//! share. `*.example.com` matches one label. A client without SNI, or with a
//! name no certificate has, gets the first entry's certificate (NGINX's
//! default server does the same).

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::config::tls::TlsCert;

/// The rustls server config of the TLS listeners: certificates by SNI,
/// ALPN `h2` then `http/1.1`.
pub(crate) fn server_config(certs: &[TlsCert]) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // ring's provider supports TLS 1.2 and 1.3: the defaults cannot fail.
        .unwrap_or_else(|_| rustls::ServerConfig::builder());
    let mut config = builder
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver::new(certs)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Picks the certificate for the SNI name of a handshake.
#[derive(Debug)]
struct SniResolver {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` as `.example.com`.
    wildcard: Vec<(String, Arc<CertifiedKey>)>,
    default: Option<Arc<CertifiedKey>>,
}

impl SniResolver {
    fn new(certs: &[TlsCert]) -> SniResolver {
        let mut exact = HashMap::new();
        let mut wildcard = Vec::new();
        for cert in certs {
            for name in &cert.names {
                match name.strip_prefix('*') {
                    Some(suffix) if suffix.starts_with('.') => {
                        wildcard.push((suffix.to_string(), cert.certified.clone()));
                    }
                    // The first entry naming a host wins, as in file order.
                    _ => {
                        exact
                            .entry(name.clone())
                            .or_insert_with(|| cert.certified.clone());
                    }
                }
            }
        }
        SniResolver {
            exact,
            wildcard,
            default: certs.first().map(|c| c.certified.clone()),
        }
    }

    fn pick(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = name else {
            return self.default.clone();
        };
        // rustls hands SNI names over lower-cased.
        if let Some(cert) = self.exact.get(name) {
            return Some(cert.clone());
        }
        if let Some(dot) = name.find('.') {
            let suffix = &name[dot..];
            if let Some((_, cert)) = self.wildcard.iter().find(|(s, _)| s == suffix) {
                return Some(cert.clone());
            }
        }
        self.default.clone()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}
