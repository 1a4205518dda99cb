//! Zero-copy sends of large cached bodies on plain TCP: `vmsplice` +
//! `splice` instead of `writev`.
//!
//! A memory-zone body of 64 KiB or more lies in pages of its own that are
//! never written again and never reused ([`calmcache_core::page_body`]).
//! When such a body is answered on a plain HTTP/1.x connection, the
//! response body offers its bytes ([`crate::http::paged::offer`]: a clone
//! kept in a small per-thread list). hyper then writes the head and the body with one
//! vectored write into [`crate::net::conn::Clocked`], which asks
//! [`Splicer::send`] to look for a slice that lies inside an offered body:
//! the head before it goes out with `MSG_MORE`, the body is mapped into a
//! pipe of the connection's own (`vmsplice`: the kernel takes references to
//! the pages, no copy) and moved from there to the socket (`splice`). The
//! client receives the same bytes; the proxy no longer copies 100 KiB into
//! the socket per hit, which was most of its CPU on large hits.
//!
//! Only offered slices are spliced: a heap buffer is freed and reused while
//! the kernel may still be sending it; an offered body's pages are not.
//! The offer holds a reference to the body, so the pages checked are the
//! pages sent. TLS and HTTP/2 connections never splice (they copy anyway).
//! Anything the kernel refuses (no pipe, `vmsplice` unsupported) turns
//! splicing off for the connection and the write goes out as before.
//!
//! Bytes moved into the pipe count as written (hyper may drop its
//! reference); what is still in the pipe is sent before any later write,
//! flush or shutdown of the connection.

use std::io::{self, IoSlice};
use std::os::fd::OwnedFd;
use std::task::{Context, Poll};

use rustix::net::{SendAncillaryBuffer, SendFlags};
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::http::paged::{offered, SPLICE_MIN};

/// The pipe's capacity, if the kernel grants it (else its default, 64 KiB).
const PIPE_SIZE: usize = 256 * 1024;

/// The socket under a connection's IO, when it is plain TCP.
pub(crate) trait PlainSocket {
    /// The TCP stream, if bytes written to this IO go to it unchanged.
    fn plain_tcp(&self) -> Option<&TcpStream> {
        None
    }

    /// A splice into [`PlainSocket::plain_tcp`] made outside this IO's own
    /// writes (a tunnel's, net/tunnel_splice.rs) took bytes (`Ready(Ok)`)
    /// or waits on the peer (`Pending`): the IO's write clock, if it has
    /// one (a client connection's `send_timeout`), sees it as one of its
    /// own writes, and `Ready(Err)` is its cut. Without a clock, `spliced`
    /// is passed back.
    fn clock_splice(
        &mut self,
        _cx: &mut Context<'_>,
        spliced: Poll<io::Result<()>>,
    ) -> Poll<io::Result<()>> {
        spliced
    }
}

impl PlainSocket for TcpStream {
    fn plain_tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl<IO> PlainSocket for tokio_rustls::server::TlsStream<IO> {}

/// A connection's splicing state: its pipe and what is still in it.
#[derive(Debug, Default)]
pub(crate) struct Splicer {
    /// (read end, write end), made on the first splice.
    pipe: Option<(OwnedFd, OwnedFd)>,
    /// Bytes in the pipe, counted as written, not yet in the socket.
    pending: usize,
    /// The kernel refused something: plain writes from now on.
    off: bool,
    /// Body bytes handed to the pipe, not yet counted in the metrics.
    spliced: u64,
}

impl Splicer {
    /// Index of the first slice of `bufs` to splice, if any (none once
    /// the kernel refused).
    pub(crate) fn pick(&self, bufs: &[IoSlice<'_>]) -> Option<usize> {
        if self.off {
            return None;
        }
        pick(bufs)
    }

    /// Sends what is still in the pipe; ready when it is empty.
    pub(crate) fn poll_drain(
        &mut self,
        cx: &mut Context<'_>,
        sock: &TcpStream,
    ) -> Poll<io::Result<()>> {
        while self.pending > 0 {
            let Some((read, _)) = &self.pipe else {
                self.pending = 0;
                break;
            };
            let pending = self.pending;
            let moved = std::task::ready!(poll_io(cx, sock, || {
                rustix::pipe::splice(
                    read,
                    None,
                    sock,
                    None,
                    pending,
                    SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
                )
                .map_err(io::Error::from)
            }))?;
            if moved == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "splice moved nothing out of a non-empty pipe",
                )));
            }
            self.pending -= moved;
        }
        Poll::Ready(Ok(()))
    }

    /// Writes `bufs` up to and including the spliced slice `at` (the pipe
    /// must be empty): the slices before it with `MSG_MORE`, then as much
    /// of slice `at` as the pipe takes. Returns the bytes written, or
    /// `None` when splicing turned out impossible and nothing was written.
    pub(crate) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        sock: &TcpStream,
        bufs: &[IoSlice<'_>],
        at: usize,
    ) -> Poll<Option<io::Result<usize>>> {
        debug_assert_eq!(self.pending, 0);
        if self.pipe.is_none() {
            match new_pipe() {
                Ok(pipe) => self.pipe = Some(pipe),
                Err(e) => {
                    tracing::debug!(error = %e, "no pipe for a zero-copy send; copying");
                    self.off = true;
                    return Poll::Ready(None);
                }
            }
        }
        let head = &bufs[..at];
        let head_len: usize = head.iter().map(|b| b.len()).sum();
        let mut written = 0;
        if head_len > 0 {
            written = match std::task::ready!(poll_io(cx, sock, || {
                rustix::net::sendmsg(
                    sock,
                    head,
                    &mut SendAncillaryBuffer::default(),
                    SendFlags::MORE | SendFlags::NOSIGNAL,
                )
                .map_err(io::Error::from)
            })) {
                Ok(n) => n,
                Err(e) => return Poll::Ready(Some(Err(e))),
            };
            if written < head_len {
                return Poll::Ready(Some(Ok(written)));
            }
        }
        let Some((_, write)) = &self.pipe else {
            return Poll::Ready(Some(Ok(written)));
        };
        let body = &bufs[at];
        let mapped = match nix::fcntl::vmsplice(
            write,
            &[IoSlice::new(body)],
            nix::fcntl::SpliceFFlags::SPLICE_F_NONBLOCK,
        ) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "vmsplice refused; copying from now on");
                self.off = true;
                return Poll::Ready(if written > 0 { Some(Ok(written)) } else { None });
            }
        };
        self.pending = mapped;
        self.spliced += mapped as u64;
        // As much as the socket takes now; the rest before the next write.
        if let Poll::Ready(Err(e)) = self.poll_drain(cx, sock) {
            return Poll::Ready(Some(Err(e)));
        }
        Poll::Ready(Some(Ok(written + mapped)))
    }

    /// Body bytes spliced since the last call (for `spliced_bytes`).
    pub(crate) fn take_spliced(&mut self) -> u64 {
        std::mem::take(&mut self.spliced)
    }

    /// Bytes in the pipe, not yet in the socket.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }
}

/// Index of the first slice of `bufs` that lies in an offered paged body
/// and is worth a splice, if any.
pub(crate) fn pick(bufs: &[IoSlice<'_>]) -> Option<usize> {
    bufs.iter()
        .position(|b| b.len() >= SPLICE_MIN && offered(b))
}

/// A nonblocking pipe, as large as the kernel grants up to [`PIPE_SIZE`].
fn new_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    // Best effort: a smaller pipe only means more splices per body.
    let _ = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE);
    Ok((read, write))
}

/// Runs a write-side syscall on `sock` when tokio says it is writable;
/// pending (with the waker registered) while the kernel says it would block.
pub(crate) fn poll_io<T>(
    cx: &mut Context<'_>,
    sock: &TcpStream,
    mut op: impl FnMut() -> io::Result<T>,
) -> Poll<io::Result<T>> {
    loop {
        std::task::ready!(sock.poll_write_ready(cx))?;
        match sock.try_io(Interest::WRITABLE, &mut op) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            done => return Poll::Ready(done),
        }
    }
}
