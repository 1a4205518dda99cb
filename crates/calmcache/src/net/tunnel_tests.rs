use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Drives `pump` over in-memory pipes: `(client end, upstream end, task)`.
fn piped(
    limits: Limits,
) -> (
    tokio::io::DuplexStream,
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<std::io::Result<End>>,
    watch::Sender<bool>,
) {
    let (client, a) = tokio::io::duplex(64);
    let (upstream, b) = tokio::io::duplex(64);
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(pump((a, Bytes::new()), (b, Bytes::new()), limits, rx));
    (client, upstream, task, tx)
}

const LIMITS: Limits = Limits {
    idle: Duration::from_secs(10),
    write: Duration::from_secs(1),
};

#[tokio::test]
async fn bytes_flow_both_ways_until_either_side_ends() {
    let (mut client, mut upstream, task, _stop) = piped(LIMITS);
    client.write_all(b"hello").await.unwrap();
    let mut buf = [0u8; 5];
    upstream.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello");
    upstream.write_all(b"world").await.unwrap();
    client.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"world");
    // The last bytes before the end still arrive, then the end itself.
    client.write_all(b"bye").await.unwrap();
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    upstream.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"bye");
    assert!(matches!(task.await.unwrap(), Ok(End::Closed)));
    // Both connections are closed: the client end reads its end too.
    assert_eq!(client.read(&mut buf).await.unwrap(), 0);
}

/// Traffic every 3 s one way keeps a tunnel with a 5 s idle limit open;
/// it ends 5 s after the last byte (the lazy timer counts either way).
async fn idle_limit_counts_traffic(from_client: bool) {
    let limits = Limits {
        idle: Duration::from_secs(5),
        ..LIMITS
    };
    let (mut client, mut upstream, task, _stop) = piped(limits);
    let (from, to) = if from_client {
        (&mut client, &mut upstream)
    } else {
        (&mut upstream, &mut client)
    };
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        from.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        to.read_exact(&mut one).await.unwrap();
    }
    assert!(
        !task.is_finished(),
        "traffic every 3 s keeps a 5 s tunnel open (from the client: {from_client})"
    );
    let quiet = Instant::now();
    assert!(matches!(task.await.unwrap(), Ok(End::Idle)));
    let after = quiet.elapsed();
    assert!(
        after >= Duration::from_secs(5) && after < Duration::from_secs(6),
        "{after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn silence_in_both_directions_ends_the_tunnel() {
    idle_limit_counts_traffic(true).await;
}

#[tokio::test(start_paused = true)]
async fn traffic_from_the_upstream_alone_keeps_a_tunnel_open() {
    idle_limit_counts_traffic(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_stalled_write_ends_the_tunnel() {
    let (mut client, _upstream, task, _stop) = piped(LIMITS);
    // The upstream end never reads: the pipe fills and the write stalls.
    let _ = timeout(Duration::from_secs(5), client.write_all(&[0u8; 4096])).await;
    let ended = task.await.unwrap();
    assert_eq!(ended.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
}

#[tokio::test]
async fn the_stop_flag_ends_the_tunnel() {
    let (_client, _upstream, task, stop) = piped(LIMITS);
    stop.send_replace(true);
    assert!(matches!(task.await.unwrap(), Ok(End::Stopped)));
}

#[tokio::test(start_paused = true)]
async fn a_stall_is_cut_while_the_other_direction_keeps_moving() {
    let limits = Limits {
        idle: Duration::from_secs(60),
        write: Duration::from_secs(2),
    };
    let (mut client, mut upstream, task, _stop) = piped(limits);
    // The client never reads: what the upstream sends fills its pipe.
    upstream.write_all(&[7u8; 100]).await.unwrap();
    let started = Instant::now();
    // Meanwhile the client talks and the upstream reads: the tunnel is
    // busy, but the write to the client has waited the limit.
    let mut one = [0u8; 1];
    while !task.is_finished() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if client.write_all(b"z").await.is_err() {
            break;
        }
        let _ = timeout(Duration::from_millis(100), upstream.read_exact(&mut one)).await;
    }
    let ended = task.await.unwrap();
    assert_eq!(ended.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    let after = started.elapsed();
    assert!(after < Duration::from_secs(3), "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_but_steady_reader_is_not_cut() {
    let limits = Limits {
        idle: Duration::from_secs(60),
        write: Duration::from_secs(1),
    };
    let (mut client, mut upstream, task, _stop) = piped(limits);
    let sent: Vec<u8> = (0..1024u32).map(|i| i as u8).collect();
    let writer = tokio::spawn(async move {
        client.write_all(&sent).await.unwrap();
        client
    });
    // 64 bytes every 500 ms: 8 s in all, each wait shorter than the limit.
    let mut got = Vec::new();
    let mut chunk = [0u8; 64];
    while got.len() < 1024 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n = upstream.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(got, (0..1024u32).map(|i| i as u8).collect::<Vec<_>>());
    assert!(!task.is_finished(), "cut although every wait made progress");
    drop(writer.await.unwrap());
    assert!(matches!(task.await.unwrap(), Ok(End::Closed)));
}

#[tokio::test]
async fn bytes_read_with_the_handshake_go_first() {
    let (mut client, a) = tokio::io::duplex(64);
    let (mut upstream, b) = tokio::io::duplex(64);
    let (_stop, rx) = watch::channel(false);
    let task = tokio::spawn(pump(
        (a, Bytes::from_static(b"from the client's head; ")),
        (b, Bytes::from_static(b"from the 101; ")),
        LIMITS,
        rx,
    ));
    client.write_all(b"then more").await.unwrap();
    let mut buf = vec![0u8; b"from the client's head; then more".len()];
    upstream.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf, b"from the client's head; then more");
    upstream.write_all(b"then more").await.unwrap();
    let mut buf = vec![0u8; b"from the 101; then more".len()];
    client.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf, b"from the 101; then more");
    drop(client);
    assert!(matches!(task.await.unwrap(), Ok(End::Closed)));
}

/// In-memory pipes are not sockets: copied.
impl PlainSocket for tokio::io::DuplexStream {}

/// A connected pair of loopback TCP sockets.
async fn tcp_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (near, far) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    (near.unwrap(), far.unwrap().0)
}

/// Bytes that tell their place: a lost, doubled or swapped chunk shows.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32) as u8 ^ (i >> 12) as u8)
        .collect()
}

/// Plain TCP on both sides: the pump splices (tunnel_splice.rs). Large
/// messages both ways at once, read slowly on one side so the pipe holds
/// bytes across waits, arrive exact, with the handshake's early bytes
/// first, and the client's end is passed on.
#[tokio::test]
async fn spliced_tunnel_moves_exact_bytes_both_ways_to_a_slow_reader() {
    let (mut client, a) = tcp_pair().await;
    let (mut upstream, b) = tcp_pair().await;
    assert!(a.plain_tcp().is_some() && b.plain_tcp().is_some());
    let (_stop, rx) = watch::channel(false);
    let task = tokio::spawn(pump(
        (a, Bytes::from_static(b"early-up;")),
        (b, Bytes::from_static(b"early-down;")),
        LIMITS,
        rx,
    ));
    const LEN: usize = 4 << 20;
    let up = pattern(LEN, 1);
    let down = pattern(LEN, 7);
    let (mut client_r, mut client_w) = client.split();
    let (mut upstream_r, mut upstream_w) = upstream.split();
    let send_up = client_w.write_all(&up);
    let send_down = upstream_w.write_all(&down);
    // The upstream reads in small bites, yielding: a slow reader.
    let read_up = async {
        let mut got = vec![0u8; 9 + LEN];
        for bite in got.chunks_mut(1000) {
            upstream_r.read_exact(bite).await.unwrap();
            tokio::task::yield_now().await;
        }
        got
    };
    let read_down = async {
        let mut got = vec![0u8; 11 + LEN];
        client_r.read_exact(&mut got).await.unwrap();
        got
    };
    let (sent_up, sent_down, got_up, got_down) =
        tokio::join!(send_up, send_down, read_up, read_down);
    sent_up.unwrap();
    sent_down.unwrap();
    assert_eq!(&got_up[..9], b"early-up;");
    assert!(got_up[9..] == up[..], "upstream got other bytes than sent");
    assert_eq!(&got_down[..11], b"early-down;");
    assert!(
        got_down[11..] == down[..],
        "client got other bytes than sent"
    );
    // The client's end is passed on: the upstream reads it.
    client_w.shutdown().await.unwrap();
    assert_eq!(upstream_r.read(&mut [0u8; 1]).await.unwrap(), 0);
    assert!(matches!(task.await.unwrap(), Ok(End::Closed)));
}

/// A spliced tunnel whose reader takes nothing is cut at the write limit,
/// like a copied one.
#[tokio::test]
async fn spliced_tunnel_cut_when_the_reader_takes_nothing() {
    let (client, a) = tcp_pair().await;
    let (_upstream, b) = tcp_pair().await;
    let (_stop, rx) = watch::channel(false);
    let limits = Limits {
        idle: Duration::from_secs(30),
        write: Duration::from_millis(300),
    };
    let task = tokio::spawn(pump((a, Bytes::new()), (b, Bytes::new()), limits, rx));
    let writer = flood(client);
    let ended = tokio::time::timeout(Duration::from_secs(20), task).await;
    let err = ended.unwrap().unwrap().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    drop(writer);
}

/// A plain socket with a write clock of its own that cuts at the first
/// wait (as a client connection's `send_timeout` would, with no delay),
/// naming the path the wait came by.
struct OwnClock(tokio::net::TcpStream);

impl PlainSocket for OwnClock {
    fn plain_tcp(&self) -> Option<&tokio::net::TcpStream> {
        Some(&self.0)
    }

    fn clock_splice(
        &mut self,
        _cx: &mut Context<'_>,
        spliced: Poll<std::io::Result<()>>,
    ) -> Poll<std::io::Result<()>> {
        match spliced {
            Poll::Pending => Poll::Ready(Err(std::io::Error::other("own clock: splice"))),
            done => done,
        }
    }
}

impl AsyncRead for OwnClock {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for OwnClock {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.0).poll_write(cx, buf) {
            Poll::Pending => Poll::Ready(Err(std::io::Error::other("own clock: copy"))),
            done => done,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Regression (issue 30, slow_readers' WebSocket test): a spliced burst
/// into a side with a write clock of its own (a client connection's
/// `send_timeout`) is under that clock, not only under the tunnel's
/// limit (the upstream's `send_timeout`, 30 s here). Before, the splice
/// went around it and the stalled client was held for the tunnel's limit.
#[tokio::test]
async fn a_spliced_burst_is_under_the_writers_own_clock() {
    let (client, a) = tcp_pair().await;
    let (_upstream, b) = tcp_pair().await;
    let (_stop, rx) = watch::channel(false);
    let limits = Limits {
        idle: Duration::from_secs(60),
        write: Duration::from_secs(30),
    };
    let task = tokio::spawn(pump(
        (a, Bytes::new()),
        (OwnClock(b), Bytes::new()),
        limits,
        rx,
    ));
    let writer = flood(client);
    let ended = tokio::time::timeout(Duration::from_secs(10), task).await;
    let err = ended
        .expect("cut by the writer's clock, not the tunnel's 30 s")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.to_string(), "own clock: splice");
    drop(writer);
}

/// Writes 64 MiB to `client` (bounded: far more than both sockets'
/// buffers and the pipe hold), stopping at the first error; the socket
/// back at the end.
fn flood<W: tokio::io::AsyncWrite + Unpin + Send + 'static>(
    mut client: W,
) -> tokio::task::JoinHandle<W> {
    tokio::spawn(async move {
        let chunk = vec![7u8; 64 * 1024];
        for _ in 0..1024 {
            if client.write_all(&chunk).await.is_err() {
                break;
            }
        }
        client
    })
}
