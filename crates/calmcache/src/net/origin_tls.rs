//! Origins over TLS: the rustls client an upstream's `https://` servers
//! (or `tls = true`) are reached with, and the connector of its keepalive
//! pool (TCP, then TLS for an `https` URI).
//!
//! ```text
//! UpstreamTls (config) ─ OriginTls::new ─> rustls ClientConfig: roots (tls_ca_file, else the
//!   system's: rustls-native-certs, Debian's /etc/ssl/certs), client certificate, ALPN http/1.1
//! Connector::call(uri) ─ a unix server's pool name: its socket (unix_origin.rs)
//!   └─ else HttpConnector (connect_timeout, TCP_NODELAY)
//!   └─ https: OriginTls::handshake(SNI: tls_server_name, else the URI's host; an IP
//!      literal sends none and is verified as an IP) within connect_timeout
//! ```
//!
//! A handshake that fails (an unknown issuer, a wrong name, no client
//! certificate for an origin that wants one) is a connect error: it counts
//! against the server as a refused connect does, and answers 502. This
//! module owns the TLS client and the origin connection's IO
//! ([`OriginStream`]); it must not choose servers or read requests.
//!
//! Each connection the pool's connector makes is counted in its server's
//! [`ServerConns`]: opened, then closed by the origin (a read found its
//! end or an error) or by calmcache (dropped otherwise), and carries a
//! [`ConnRequests`] its answers get as an extension.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::Scheme;
use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivateKeyDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::config::UpstreamTls;
use crate::net::unix_origin::{self, UnixSockets};
use crate::telemetry::upstream_conns::{Closed, ConnRequests, Opened, ServerConns};

/// An upstream's TLS client: its rustls config and the SNI name it sends.
pub(crate) struct OriginTls {
    connector: tokio_rustls::TlsConnector,
    /// `tls_server_name`, when set: every server's SNI and verified name.
    server_name: Option<ServerName<'static>>,
}

impl OriginTls {
    /// The client for `cfg`; the error says what could not be used (no
    /// system roots, a client key rustls refuses).
    pub(crate) fn new(cfg: &UpstreamTls) -> Result<OriginTls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?;
        let builder = if cfg.verify {
            builder.with_root_certificates(roots(cfg)?)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        };
        let mut config = match &cfg.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(&cert.pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{}: {e:?}", cert.path.display()))?;
                let key = PrivateKeyDer::from_pem_slice(&key.pem)
                    .map_err(|e| format!("{}: {e:?}", key.path.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("{}: {e}", cert.path.display()))?
            }
        };
        // Origins speak HTTP/1.1 to us (every upstream request leaves as HTTP/1.1).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let server_name = match &cfg.server_name {
            None => None,
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|e| format!("tls_server_name {name:?}: {e}"))?,
            ),
        };
        Ok(OriginTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }

    /// TLS over `tcp` to `host` (the server's host, brackets allowed),
    /// within `limit`. The error names the server name and rustls' reason.
    pub(crate) async fn handshake(
        &self,
        tcp: TcpStream,
        host: &str,
        limit: Duration,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => {
                let bare = host.trim_start_matches('[').trim_end_matches(']');
                ServerName::try_from(bare.to_owned()).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?}: {e}"))
                })?
            }
        };
        let shown = name.to_str().into_owned();
        match tokio::time::timeout(limit, self.connector.connect(name, tcp)).await {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(e)) => Err(io::Error::new(
                e.kind(),
                format!("tls handshake with {shown}: {e}"),
            )),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("tls handshake with {shown} took longer than connect_timeout {limit:?}"),
            )),
        }
    }
}

/// The roots an origin's certificate is checked against: `tls_ca_file`'s,
/// else the system's.
fn roots(cfg: &UpstreamTls) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = &cfg.ca {
        for cert in CertificateDer::pem_slice_iter(&ca.pem) {
            let cert = cert.map_err(|e| format!("{}: {e:?}", ca.path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", ca.path.display()))?;
        }
        return Ok(roots);
    }
    let (added, _) = roots.add_parsable_certificates(system_roots()?);
    if added == 0 {
        return Err("none of the system's CA certificates is usable".to_owned());
    }
    Ok(roots)
}

/// The system's CA certificates (Debian: /etc/ssl/certs; `SSL_CERT_FILE`
/// and `SSL_CERT_DIR` override), or why there are none: the config check
/// (`run/preflight.rs`) asks this too.
pub(crate) fn system_roots() -> Result<Vec<CertificateDer<'static>>, String> {
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        let why: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
        let why = if why.is_empty() {
            "none found".to_owned()
        } else {
            why.join("; ")
        };
        return Err(format!(
            "no system CA certificates to verify origins with ({why})"
        ));
    }
    Ok(found.certs)
}

/// `tls_verify = false`: every certificate accepted (the handshake's
/// signatures are still checked, so the peer holds the key it shows).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The keepalive pool's connector: a unix server's socket, or TCP by
/// hyper-util's connector, then TLS when the URI is `https` (the upstream
/// has a TLS client then).
#[derive(Clone)]
pub(crate) struct Connector {
    tcp: HttpConnector,
    tls: Option<Arc<OriginTls>>,
    /// The upstream's unix servers, by pool name (empty for TCP only).
    unix: UnixSockets,
    /// The TLS handshake's own limit (the TCP connect has its copy in `tcp`).
    connect_timeout: Duration,
    /// Each server's connection counters, by the pool key its URIs carry.
    counts: ConnCounts,
}

/// The upstream's servers' connection counters, by scheme and authority
/// (the pool's key): a connection the connector makes is counted as
/// opened for [`Opened::PoolEmpty`] and, when it ends, as closed by
/// whichever side ended it. A handful of servers: a linear search, once
/// per connection.
pub(crate) type ConnCounts = Arc<[(Scheme, http::uri::Authority, Arc<ServerConns>)]>;

impl Connector {
    /// `TCP_NODELAY`, `connect_timeout` for the connect and again for the
    /// handshake; `tls` for `https` URIs; `unix` servers' sockets dialed
    /// for their pool names; each connection counted in `counts`.
    pub(crate) fn new(
        connect_timeout: Duration,
        tls: Option<Arc<OriginTls>>,
        unix: UnixSockets,
        counts: ConnCounts,
    ) -> Connector {
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(connect_timeout));
        tcp.set_nodelay(true);
        // `https` URIs come here too: TLS is this connector's job.
        tcp.enforce_http(false);
        Connector {
            tcp,
            tls,
            unix,
            connect_timeout,
            counts,
        }
    }

    /// The counters of the server `uri` is for (`None`: not one of ours).
    fn counts_of(&self, uri: &Uri) -> Option<Arc<ServerConns>> {
        let (scheme, authority) = (uri.scheme()?, uri.authority()?);
        let found = self
            .counts
            .iter()
            .find(|(s, a, _)| s == scheme && a == authority);
        found.map(|(_, _, c)| c.clone())
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for Connector {
    type Response = OriginIo;
    type Error = BoxError;
    // One allocation per new connection, not per request.
    type Future = Pin<Box<dyn Future<Output = Result<OriginIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let counts = self.counts_of(&uri);
        if let Some(path) = self.unix.path_of(uri.authority()) {
            // Plain HTTP: config refuses TLS with a unix server.
            let (path, limit) = (path.to_owned(), self.connect_timeout);
            return Box::pin(async move {
                let stream = unix_origin::connect(&path, limit).await?;
                Ok(OriginIo::new(OriginStream::Unix(stream), counts))
            });
        }
        let tls = if uri.scheme() == Some(&Scheme::HTTPS) {
            match &self.tls {
                Some(tls) => Some(tls.clone()),
                None => {
                    let e = io::Error::other("an https server in an upstream without TLS settings");
                    return Box::pin(async move { Err(e.into()) });
                }
            }
        } else {
            None
        };
        let connecting = self.tcp.call(uri.clone());
        let limit = self.connect_timeout;
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let Some(tls) = tls else {
                return Ok(OriginIo::new(OriginStream::Plain(tcp), counts));
            };
            let host = uri.host().unwrap_or_default();
            let stream = tls.handshake(tcp, host, limit).await?;
            Ok(OriginIo::new(OriginStream::Tls(Box::new(stream)), counts))
        })
    }
}

/// A connection to an origin: plain TCP or TLS over it.
// The TLS stream is boxed: a plain connection stays small.
pub(crate) enum OriginStream {
    /// `http` servers.
    Plain(TcpStream),
    /// `https` servers (and `tls = true`).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// `unix:/path` servers.
    Unix(tokio::net::UnixStream),
}

impl crate::net::zero_copy::PlainSocket for OriginStream {
    fn plain_tcp(&self) -> Option<&TcpStream> {
        match self {
            OriginStream::Plain(io) => Some(io),
            OriginStream::Tls(_) | OriginStream::Unix(_) => None,
        }
    }
}

impl AsyncRead for OriginStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(io) => Pin::new(io).poll_read(cx, buf),
            OriginStream::Tls(io) => Pin::new(io).poll_read(cx, buf),
            OriginStream::Unix(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for OriginStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginStream::Plain(io) => Pin::new(io).poll_write(cx, buf),
            OriginStream::Tls(io) => Pin::new(io).poll_write(cx, buf),
            OriginStream::Unix(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginStream::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            OriginStream::Tls(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            OriginStream::Unix(io) => Pin::new(io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            OriginStream::Plain(io) => io.is_write_vectored(),
            OriginStream::Tls(io) => io.is_write_vectored(),
            OriginStream::Unix(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(io) => Pin::new(io).poll_flush(cx),
            OriginStream::Tls(io) => Pin::new(io).poll_flush(cx),
            OriginStream::Unix(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(io) => Pin::new(io).poll_shutdown(cx),
            OriginStream::Tls(io) => Pin::new(io).poll_shutdown(cx),
            OriginStream::Unix(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}

/// [`OriginStream`] as hyper's IO, for the pool (hyper-util's
/// `Connection` cannot be implemented on `TokioIo` here), counted: opened
/// when made, closed (by whichever side) when the pool lets it go, and
/// its requests ([`ConnRequests`], handed to each answer as a response
/// extension, so a request can tell a new connection from a reused one).
pub(crate) struct OriginIo {
    io: TokioIo<Counted>,
    requests: ConnRequests,
}

impl OriginIo {
    fn new(stream: OriginStream, counts: Option<Arc<ServerConns>>) -> OriginIo {
        if let Some(c) = &counts {
            c.opened(Opened::PoolEmpty);
        }
        let counted = Counted {
            stream,
            counts,
            closed_by: Closed::Calmcache,
        };
        OriginIo {
            io: TokioIo::new(counted),
            requests: ConnRequests::default(),
        }
    }
}

impl Connection for OriginIo {
    fn connected(&self) -> Connected {
        Connected::new().extra(self.requests.clone())
    }
}

/// An origin stream that notes when the origin ended it (a read that
/// found its end, or an error), and counts its close on drop.
struct Counted {
    stream: OriginStream,
    counts: Option<Arc<ServerConns>>,
    /// Who ended it: calmcache, until a read says the origin did.
    closed_by: Closed,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(c) = &self.counts {
            c.closed(self.closed_by);
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let ended = match &read {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            this.closed_by = Closed::Origin;
        }
        read
    }
}

/// The five write methods of tokio's `AsyncWrite` and hyper's
/// `rt::Write` (same names, same signatures), each passed to `self.$field`:
/// [`Counted`] counts only reads, [`OriginIo`] only adds the pool's
/// `Connection`, so both write straight through.
macro_rules! write_through {
    ($field:ident) => {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.get_mut().$field).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.get_mut().$field).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            self.$field.is_write_vectored()
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().$field).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().$field).poll_shutdown(cx)
        }
    };
}

impl AsyncWrite for Counted {
    write_through!(stream);
}

impl hyper::rt::Read for OriginIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for OriginIo {
    write_through!(io);
}
