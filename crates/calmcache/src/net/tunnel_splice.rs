//! One direction of a plain-TCP WebSocket tunnel moved by `splice`:
//! socket -> pipe -> socket, the bytes never copied into the proxy's
//! memory (net/tunnel.rs's pump uses it when both sides are plain TCP).
//!
//! A direction holds a pipe only while bytes are in flight: it waits for
//! the reading socket to be readable without one, then takes an empty pipe
//! from its thread's small pool, splices what the socket holds into it and
//! from it to the other socket, and gives it back once it is empty. An idle
//! tunnel holds no pipe, and a busy one costs no `pipe2`/`close` per
//! message. A pipe that saw an error is closed, never pooled: a pooled pipe
//! is always empty.
//!
//! Never blocks a worker: the sockets are nonblocking (tokio's), the pipes
//! are made `O_NONBLOCK` and every splice passes `SPLICE_F_NONBLOCK`; a
//! splice runs only after tokio reported readiness, and `EAGAIN` clears it.
//!
//! Must not: hold a pipe across a wait for the reading side, pool a pipe
//! with bytes in it, or know anything of WebSocket frames, clocks or
//! limits (the pump keeps those).

use std::cell::RefCell;
use std::io;
use std::os::fd::OwnedFd;
use std::task::{Context, Poll};

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::net::zero_copy::poll_io;

/// Most bytes asked of one splice into the pipe: its default capacity.
const CHUNK: usize = 64 * 1024;

/// Empty pipes kept per worker thread (each two descriptors).
const POOL_MAX: usize = 32;

thread_local! {
    static POOL: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

/// A nonblocking pipe: (read end, write end).
struct Pipe(OwnedFd, OwnedFd);

impl Pipe {
    /// An empty pipe from this thread's pool, or a new one.
    fn take() -> io::Result<Pipe> {
        if let Some(p) = POOL.with(|pool| pool.borrow_mut().pop()) {
            return Ok(p);
        }
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(Pipe(read, write))
    }

    /// Back to the pool. Invariant: the pipe is empty (every byte spliced
    /// in was spliced out).
    fn give(self) {
        POOL.with(|pool| {
            let mut pool = pool.borrow_mut();
            if pool.len() < POOL_MAX {
                pool.push(self);
            }
        });
    }
}

/// What one step of a direction did.
pub(crate) enum Step {
    /// This many bytes went from the reading socket to the writing one
    /// (one splice's worth).
    Moved(usize),
    /// The reading socket ended its stream (the pipe is empty).
    Eof,
}

/// A direction's pipe and the bytes in it.
#[derive(Default)]
pub(crate) struct Splice {
    /// Held only while `pending > 0`.
    pipe: Option<Pipe>,
    /// Bytes in the pipe, not yet in the writing socket.
    pending: usize,
    /// Bytes the last splice into the pipe brought.
    batch: usize,
    /// Some bytes went into the writing socket since [`Splice::took`]
    /// was last asked.
    took: bool,
}

impl Splice {
    /// Whether the writing socket took bytes since the last ask (a partial
    /// drain counts: progress for the writer's clock).
    pub(crate) fn took(&mut self) -> bool {
        std::mem::take(&mut self.took)
    }

    /// Moves what the reading socket holds into the writing one, through a
    /// pipe. `Ready(Moved)` after some bytes went all the way (the caller
    /// loops); `Pending` while the reader has nothing or the writer takes
    /// nothing (`writing` then says which: the pump's stall clock).
    pub(crate) fn poll_step(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        writing: &mut bool,
    ) -> Poll<io::Result<Step>> {
        if self.pending == 0 {
            *writing = false;
            std::task::ready!(self.poll_fill(cx, from))?;
            if self.pending == 0 {
                return Poll::Ready(Ok(Step::Eof));
            }
        }
        *writing = true;
        std::task::ready!(self.poll_drain(cx, to))?;
        Poll::Ready(Ok(Step::Moved(self.batch)))
    }

    /// Splices what `from` holds into a pipe (taken only once it is
    /// readable). Leaves `pending == 0` at the end of its stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>, from: &TcpStream) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(from.poll_read_ready(cx))?;
            let pipe = Pipe::take()?;
            let filled = from.try_io(Interest::READABLE, || {
                rustix::pipe::splice(
                    from,
                    None,
                    &pipe.1,
                    None,
                    CHUNK,
                    SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
                )
                .map_err(io::Error::from)
            });
            match filled {
                Ok(n) => {
                    self.pending = n;
                    self.batch = n;
                    if n > 0 {
                        self.pipe = Some(pipe);
                    } else {
                        pipe.give();
                    }
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale (try_io cleared it): wait again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => pipe.give(),
                // Nothing went in: the pipe is still empty.
                Err(e) => {
                    pipe.give();
                    return Poll::Ready(Err(e));
                }
            }
        }
    }

    /// Splices the pipe's bytes into `to`; ready when the pipe is empty
    /// (and back in the pool).
    fn poll_drain(&mut self, cx: &mut Context<'_>, to: &TcpStream) -> Poll<io::Result<()>> {
        while self.pending > 0 {
            let Some(pipe) = &self.pipe else {
                self.pending = 0;
                break;
            };
            let pending = self.pending;
            let moved = match std::task::ready!(poll_io(cx, to, || {
                rustix::pipe::splice(
                    &pipe.0,
                    None,
                    to,
                    None,
                    pending,
                    SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
                )
                .map_err(io::Error::from)
            })) {
                Ok(0) => Err(io::ErrorKind::WriteZero.into()),
                other => other,
            };
            match moved {
                Ok(n) => {
                    self.pending -= n;
                    self.took = true;
                }
                Err(e) => {
                    // Bytes may be left in it: closed, not pooled.
                    self.pipe = None;
                    self.pending = 0;
                    return Poll::Ready(Err(e));
                }
            }
        }
        if let Some(pipe) = self.pipe.take() {
            pipe.give();
        }
        Poll::Ready(Ok(()))
    }
}
