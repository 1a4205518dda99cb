use std::future::poll_fn;

use http::{HeaderValue, Version};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// A loopback connection whose server side takes no more bytes: both
/// socket buffers are full (the client has not read). How many it took.
async fn full_socket() -> (TcpStream, TcpStream, usize) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let filler = vec![b'a'; 64 * 1024];
    let mut filled = 0;
    // Bounded: loopback buffers are a few MiB at most.
    for _ in 0..10_000 {
        match server.try_write(&filler) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (client, server, filled),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the socket never filled");
}

fn clocked(io: TcpStream, hints: &Arc<EarlyHints>) -> Clocked<TcpStream> {
    let peer = io.peer_addr().unwrap();
    let minute = Duration::from_secs(60);
    let write = WriteClock::new(minute, peer, None);
    let phase = Arc::new(Phase::default());
    Clocked::new(
        io,
        phase,
        minute,
        None,
        Instant::now() + minute,
        None,
        write,
    )
    .hinting(Some(hints.clone()))
}

/// Offers a hint as an HTTP/1.1 request on `hints`' connection would.
async fn offer(hints: &Arc<EarlyHints>) -> bool {
    let links = [HeaderValue::from_static("</a.css>; rel=preload")];
    early_hints::scope(Some(hints), Version::HTTP_11, async {
        early_hints::offer(&links)
    })
    .await
}

/// The review's sequence: a flush completes, hyper's next write (the
/// previous answer's last bytes) finds the socket full and is taken 0
/// bytes; a pipelined request then offers a hint. It must not be queued
/// (it would go out before those bytes, inside the previous answer).
#[tokio::test]
async fn a_write_the_full_socket_took_nothing_of_leaves_no_room_for_a_hint() {
    let hints = EarlyHints::new(false);
    let (mut client, server, filled) = full_socket().await;
    let mut io = clocked(server, &hints);
    poll_fn(|cx| Pin::new(&mut io).poll_flush(cx))
        .await
        .unwrap();
    let last = b"LAST";
    let took = poll_fn(|cx| Poll::Ready(Pin::new(&mut io).poll_write(cx, last))).await;
    assert!(took.is_pending(), "the socket is full");
    assert!(!offer(&hints).await, "an answer is still going out");
    // The client reads: the answer's last bytes follow the filler directly.
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; filled + last.len()];
        client.read_exact(&mut got).await.unwrap();
        got
    });
    poll_fn(|cx| Pin::new(&mut io).poll_write(cx, last))
        .await
        .unwrap();
    poll_fn(|cx| Pin::new(&mut io).poll_flush(cx))
        .await
        .unwrap();
    let got = reader.await.unwrap();
    assert!(got[..filled].iter().all(|b| *b == b'a'));
    assert_eq!(&got[filled..], last);
    // Flushed with nothing left: the next answer may be hinted.
    assert!(offer(&hints).await);
}

/// A hint taken for writing but not begun when the connection shuts (the
/// socket was full) is dropped: the client sees the answer bytes, then the
/// end, never the start of a 103 with nothing after it.
#[tokio::test]
async fn a_hint_not_begun_is_dropped_at_shutdown() {
    let hints = EarlyHints::new(false);
    let (mut client, server, filled) = full_socket().await;
    let mut io = clocked(server, &hints);
    poll_fn(|cx| Pin::new(&mut io).poll_flush(cx))
        .await
        .unwrap();
    assert!(offer(&hints).await, "clean: queued");
    // The next write takes the hint first, and the full socket none of it.
    let took = poll_fn(|cx| Poll::Ready(Pin::new(&mut io).poll_write(cx, b"X"))).await;
    assert!(took.is_pending());
    assert!(io.hint_out.as_ref().is_some_and(|(_, sent)| *sent == 0));
    poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx))
        .await
        .unwrap();
    assert!(io.hint_out.is_none());
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(got.len(), filled);
    assert!(got.iter().all(|b| *b == b'a'));
}
