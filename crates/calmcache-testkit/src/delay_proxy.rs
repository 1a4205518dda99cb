//! [`DelayProxy`]: a TCP proxy on `127.0.0.1:0` in front of one address (a
//! Redis, an origin) that makes the link slow, jittery, silent or reset while
//! a test runs: fleet mode (issue 14) needs a slow link to its shared tier,
//! and this kernel has no netem.
//!
//! Each direction of a connection is a reader, a FIFO queue of chunks with
//! their release time, and a writer that waits for each chunk's time: a
//! delay never reorders bytes, jitter only stretches the gaps. It owns no
//! sockets but its listener and the connections it accepted, and it ends
//! every task when dropped. Only loopback and the target are ever dialled.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// The most one read takes from a socket: one queued chunk.
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction before the reader stops reading (then the
/// sender's kernel buffers fill, as on a real slow link).
const QUEUE: usize = 64;

/// Whether bytes get through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Pass,
    /// Nothing is forwarded; what arrives is held (see [`DelayProxy::blackhole`]).
    Blackhole,
}

/// What the link does now; read per chunk, so changes apply at once.
#[derive(Clone, Copy, Debug)]
struct Link {
    delay: Duration,
    jitter: Duration,
    flow: Flow,
}

struct Shared {
    link: watch::Sender<Link>,
    /// Bumped by [`DelayProxy::reset_all`]: every connection accepted
    /// before the bump resets itself.
    resets: watch::Sender<u64>,
    accepted: AtomicU64,
    open: AtomicUsize,
    /// xorshift64 state for the jitter (never zero).
    rng: AtomicU64,
}

impl Shared {
    /// When a chunk read now may leave: the delay plus a uniform jitter.
    fn release_time(&self) -> Instant {
        let link = *self.link.borrow();
        let jitter_us = u64::try_from(link.jitter.as_micros()).unwrap_or(u64::MAX);
        let extra = match jitter_us {
            0 => 0,
            max => self.next_random() % max.saturating_add(1),
        };
        Instant::now() + link.delay + Duration::from_micros(extra)
    }

    fn next_random(&self) -> u64 {
        fn step(mut x: u64) -> u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
        // The closure always returns Some: Ok and Err both carry the old state.
        let old = self
            .rng
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
            .unwrap_or_else(|x| x);
        step(old)
    }

    async fn wait_for_pass(&self) {
        let mut link = self.link.subscribe();
        // The sender lives in `self`, so the wait cannot fail on a closed channel.
        let _ = link.wait_for(|l| l.flow == Flow::Pass).await;
    }
}

/// A running delay proxy to one target; every task ends when it is dropped
/// (the listener closes, open connections are closed).
pub struct DelayProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl DelayProxy {
    /// A proxy on `127.0.0.1:0` forwarding to `target`, with no delay yet.
    pub async fn start(target: SocketAddr) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind delay proxy");
        let addr = listener.local_addr().expect("delay proxy addr");
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id());
        let shared = Arc::new(Shared {
            link: watch::Sender::new(Link {
                delay: Duration::ZERO,
                jitter: Duration::ZERO,
                flow: Flow::Pass,
            }),
            resets: watch::Sender::new(0),
            accepted: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            rng: AtomicU64::new(seed | 1),
        });
        let accept = tokio::spawn(accept_loop(listener, target, shared.clone()));
        DelayProxy {
            addr,
            shared,
            accept,
        }
    }

    /// Where clients connect (`127.0.0.1:PORT`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// One-way delay added to every chunk, in each direction: a round trip
    /// gets twice this. Chunks already queued keep their release time.
    pub fn set_delay(&self, one_way: Duration) {
        self.shared.link.send_modify(|l| l.delay = one_way);
    }

    /// Uniform extra delay of 0..=`max_extra` per chunk, on top of the
    /// delay; bytes stay in order (a chunk never overtakes the one before).
    pub fn set_jitter(&self, max_extra: Duration) {
        self.shared.link.send_modify(|l| l.jitter = max_extra);
    }

    /// A partition: connections are accepted and stay open, but nothing is
    /// forwarded, and a new connection's upstream connect waits. Bytes are
    /// held, not dropped (what TCP does across a partition that heals): they
    /// are delivered, in order, after [`unblackhole`](Self::unblackhole);
    /// once a direction's queue is full the proxy stops reading and the
    /// sender's buffers fill.
    pub fn blackhole(&self) {
        self.shared.link.send_modify(|l| l.flow = Flow::Blackhole);
    }

    /// Ends [`blackhole`](Self::blackhole): held bytes flow again.
    pub fn unblackhole(&self) {
        self.shared.link.send_modify(|l| l.flow = Flow::Pass);
    }

    /// Closes every open connection with a TCP RST (`SO_LINGER` 0) on both
    /// sides, client and target, as a middlebox that lost its state would.
    /// Returns at once; the resets follow within a scheduler tick.
    pub fn reset_all(&self) {
        self.shared.resets.send_modify(|epoch| *epoch += 1);
    }

    /// Connections accepted since the start.
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open right now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // The connection tasks live in the accept task's JoinSet: aborting it
        // drops the set, which aborts them.
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    // Ends when the proxy is dropped (the task is aborted).
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // EMFILE and the like: do not spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let epoch = *shared.resets.borrow();
        let open = OpenGuard::new(shared.clone());
        conns.spawn(connection(client, target, open, epoch));
        while conns.try_join_next().is_some() {}
    }
}

/// Counts a connection as open from its accept until its task ends
/// (aborted or not).
struct OpenGuard(Arc<Shared>);

impl OpenGuard {
    fn new(shared: Arc<Shared>) -> OpenGuard {
        shared.open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(shared)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a connection ended.
enum End {
    /// Both directions reached EOF and everything was delivered.
    Closed,
    /// A socket failed (reset, refused): the other side is reset too.
    Failed,
    /// [`DelayProxy::reset_all`].
    Reset,
}

async fn connection(mut client: TcpStream, target: SocketAddr, open: OpenGuard, epoch: u64) {
    let shared = &open.0;
    let mut resets = shared.resets.subscribe();
    let mut upstream = None;
    let end = tokio::select! {
        r = relay(&mut client, &mut upstream, target, shared) => match r {
            Ok(()) => End::Closed,
            Err(_) => End::Failed,
        },
        _ = resets.wait_for(|e| *e != epoch) => End::Reset,
    };
    if matches!(end, End::Failed | End::Reset) {
        // Dropping a socket with a zero linger sends an RST instead of a FIN.
        let _ = client.set_zero_linger();
        if let Some(up) = &upstream {
            let _ = up.set_zero_linger();
        }
    }
}

async fn relay(
    client: &mut TcpStream,
    upstream: &mut Option<TcpStream>,
    target: SocketAddr,
    shared: &Shared,
) -> io::Result<()> {
    // Across a partition, the connect to the target waits too.
    shared.wait_for_pass().await;
    let up = upstream.insert(TcpStream::connect(target).await?);
    let _ = up.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (client_read, client_write) = client.split();
    let (up_read, up_write) = up.split();
    tokio::try_join!(
        direction(client_read, up_write, shared),
        direction(up_read, client_write, shared),
    )?;
    Ok(())
}

/// One queued read: bytes, or `None` for the EOF (a FIN, forwarded as one).
struct Chunk {
    at: Instant,
    bytes: Option<Vec<u8>>,
}

async fn direction(
    from: impl AsyncRead + Unpin,
    to: impl AsyncWrite + Unpin,
    shared: &Shared,
) -> io::Result<()> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::try_join!(read_side(from, tx, shared), write_side(to, rx, shared))?;
    Ok(())
}

async fn read_side(
    mut from: impl AsyncRead + Unpin,
    tx: mpsc::Sender<Chunk>,
    shared: &Shared,
) -> io::Result<()> {
    // Ends at EOF, on an error, or when the writer is gone.
    loop {
        let mut buf = vec![0; CHUNK];
        let n = from.read(&mut buf).await?;
        let at = shared.release_time();
        buf.truncate(n);
        let bytes = (n > 0).then_some(buf);
        let eof = bytes.is_none();
        if tx.send(Chunk { at, bytes }).await.is_err() || eof {
            return Ok(());
        }
    }
}

async fn write_side(
    mut to: impl AsyncWrite + Unpin,
    mut rx: mpsc::Receiver<Chunk>,
    shared: &Shared,
) -> io::Result<()> {
    // One chunk at a time, in arrival order: a jittered chunk holds back the
    // ones behind it instead of being overtaken.
    while let Some(chunk) = rx.recv().await {
        tokio::time::sleep_until(chunk.at).await;
        shared.wait_for_pass().await;
        match chunk.bytes {
            Some(bytes) => to.write_all(&bytes).await?,
            None => {
                to.shutdown().await?;
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "delay_proxy_tests.rs"]
mod tests;
