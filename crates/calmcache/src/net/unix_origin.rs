//! Origins on unix sockets (`servers = ["unix:/run/app.sock"]`): the
//! table of an upstream's unix servers that its pool's connector consults
//! ([`UnixSockets`]), and the connect itself, within `connect_timeout`.
//!
//! A unix server's requests carry a name of calmcache's own making as
//! their URI's authority (config/unix_socket.rs): it keys the pool, so
//! connections to one socket are kept alive and reused as TCP ones are,
//! and it is how the connector knows to dial the socket. A socket that is
//! absent, refuses, or is not a socket (a regular file) is a failed
//! connect, counted against the server like a refused TCP connect.
//!
//! Owns no IO type of its own (origin_tls.rs's `OriginStream` has the
//! unix variant); must not choose servers or read requests.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::uri::Authority;
use tokio::net::UnixStream;

use crate::config::UpstreamServer;

/// An upstream's unix servers: each one's pool name and socket path.
/// Empty (no allocation, nothing looked up) for an upstream of TCP servers.
#[derive(Clone, Default)]
pub(crate) struct UnixSockets(Arc<[(Authority, PathBuf)]>);

impl UnixSockets {
    /// The unix servers among `servers`.
    pub(crate) fn of(servers: &[UpstreamServer]) -> Self {
        let unix = servers.iter().filter_map(|s| {
            let path = s.unix.clone()?;
            Some((s.address.clone(), path))
        });
        UnixSockets(unix.collect())
    }

    /// The socket behind the pool name `authority`, if it is a unix
    /// server's (a linear scan of a few entries, once per new connection).
    pub(crate) fn path_of(&self, authority: Option<&Authority>) -> Option<&Path> {
        let authority = authority?;
        self.0
            .iter()
            .find(|(name, _)| name == authority)
            .map(|(_, path)| path.as_path())
    }
}

/// Connects to the socket at `path` within `limit`; a connect that takes
/// longer fails with [`io::ErrorKind::TimedOut`] (a connect time-out, as
/// for TCP). The error names the socket.
pub(crate) async fn connect(path: &Path, limit: Duration) -> io::Result<UnixStream> {
    match tokio::time::timeout(limit, UnixStream::connect(path)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(io::Error::new(
            e.kind(),
            format!("unix socket connect error: {}: {e}", path.display()),
        )),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "unix socket connect to {} took longer than connect_timeout {limit:?}",
                path.display()
            ),
        )),
    }
}
