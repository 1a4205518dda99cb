#![allow(clippy::unwrap_used)]
use super::*;

/// A generous bound for anything that should happen "soon": no test asserts
/// tighter upper limits than this.
const SOON: Duration = Duration::from_secs(5);

/// An echo server on `127.0.0.1:0`; it ends with the test's runtime.
async fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // Ends with the runtime at the end of the test.
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Writes `msg` and reads it back; how long that took.
async fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> Duration {
    let started = Instant::now();
    stream.write_all(msg).await.unwrap();
    let mut back = vec![0; msg.len()];
    tokio::time::timeout(SOON, stream.read_exact(&mut back))
        .await
        .expect("echo within 5 s")
        .unwrap();
    assert_eq!(back, msg);
    started.elapsed()
}

/// Waits (at most [`SOON`]) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + SOON;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {SOON:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_round_trip_takes_at_least_twice_the_one_way_delay() {
    let proxy = DelayProxy::start(echo().await).await;
    let mut stream = connect(proxy.addr()).await;
    let fast = round_trip(&mut stream, b"ping").await;
    assert!(fast < SOON, "no delay: {fast:?}");
    proxy.set_delay(Duration::from_millis(50));
    for _ in 0..3 {
        let slow = round_trip(&mut stream, b"ping").await;
        assert!(
            slow >= Duration::from_millis(100),
            "50 ms each way: {slow:?}"
        );
    }
    // Changes apply to the next chunk, on the same connection.
    proxy.set_delay(Duration::ZERO);
    let again = round_trip(&mut stream, b"ping").await;
    assert!(again < SOON, "delay removed: {again:?}");
    assert_eq!(proxy.connections(), 1);
    assert_eq!(proxy.open_connections(), 1);
}

#[tokio::test]
async fn jitter_never_reorders_bytes() {
    let proxy = DelayProxy::start(echo().await).await;
    proxy.set_delay(Duration::from_millis(2));
    proxy.set_jitter(Duration::from_millis(20));
    let stream = connect(proxy.addr()).await;
    let (mut r, mut w) = stream.into_split();
    // 10,000 bytes: 2,500 numbers, each one unique, written 10 at a time so
    // the proxy reads (and jitters) many separate chunks.
    let sent: Vec<u8> = (0u32..2_500).flat_map(u32::to_be_bytes).collect();
    let writer = {
        let sent = sent.clone();
        tokio::spawn(async move {
            for piece in sent.chunks(40) {
                w.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            w
        })
    };
    let mut got = vec![0; sent.len()];
    tokio::time::timeout(Duration::from_secs(30), r.read_exact(&mut got))
        .await
        .expect("10,000 bytes within 30 s")
        .unwrap();
    let _w = writer.await.unwrap();
    let first_wrong = got.iter().zip(&sent).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "bytes out of order");
}

#[tokio::test]
async fn a_blackhole_holds_the_bytes_and_keeps_the_connection_open() {
    let proxy = DelayProxy::start(echo().await).await;
    let mut stream = connect(proxy.addr()).await;
    round_trip(&mut stream, b"before").await;
    proxy.blackhole();
    stream.write_all(b"held").await.unwrap();
    let mut buf = [0; 4];
    let read = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await;
    assert!(read.is_err(), "a read through a blackhole timed out");
    // A connection made during the blackhole is accepted and waits too.
    let mut late = connect(proxy.addr()).await;
    late.write_all(b"late").await.unwrap();
    eventually("two open connections", || proxy.open_connections() == 2).await;

    proxy.unblackhole();
    // Held, not dropped: the bytes sent during the blackhole arrive first.
    tokio::time::timeout(SOON, stream.read_exact(&mut buf))
        .await
        .expect("held bytes within 5 s")
        .unwrap();
    assert_eq!(&buf, b"held");
    round_trip(&mut stream, b"after").await;
    tokio::time::timeout(SOON, late.read_exact(&mut buf))
        .await
        .expect("the late connection's bytes within 5 s")
        .unwrap();
    assert_eq!(&buf, b"late");
    assert_eq!(proxy.connections(), 2);
}

#[tokio::test]
async fn reset_all_resets_every_open_connection() {
    let proxy = DelayProxy::start(echo().await).await;
    let mut a = connect(proxy.addr()).await;
    let mut b = connect(proxy.addr()).await;
    round_trip(&mut a, b"a").await;
    round_trip(&mut b, b"b").await;
    proxy.reset_all();
    for stream in [&mut a, &mut b] {
        let mut buf = [0; 1];
        let read = tokio::time::timeout(SOON, stream.read(&mut buf))
            .await
            .expect("the reset within 5 s");
        let kind = read.map_err(|e| e.kind());
        assert_eq!(kind, Err(io::ErrorKind::ConnectionReset), "RST, not FIN");
    }
    eventually("no connection open", || proxy.open_connections() == 0).await;
    // The proxy itself still works.
    let mut c = connect(proxy.addr()).await;
    round_trip(&mut c, b"c").await;
    assert_eq!(proxy.connections(), 3);
}

#[tokio::test]
async fn a_refused_upstream_resets_the_client() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = DelayProxy::start(closed).await;
    let mut stream = connect(proxy.addr()).await;
    let mut buf = [0; 1];
    let read = tokio::time::timeout(SOON, stream.read(&mut buf))
        .await
        .expect("the reset within 5 s");
    assert_eq!(
        read.map_err(|e| e.kind()),
        Err(io::ErrorKind::ConnectionReset)
    );
}

#[tokio::test]
async fn dropping_the_proxy_ends_every_task() {
    let proxy = DelayProxy::start(echo().await).await;
    let addr = proxy.addr();
    let mut stream = connect(addr).await;
    round_trip(&mut stream, b"x").await;
    let shared = Arc::downgrade(&proxy.shared);
    drop(proxy);
    // Every task held the shared state: once it is gone, so are they.
    eventually("every task ended", || shared.upgrade().is_none()).await;
    let mut buf = [0; 1];
    let read = tokio::time::timeout(SOON, stream.read(&mut buf))
        .await
        .expect("the close within 5 s");
    assert_eq!(read.unwrap(), 0, "an open connection is closed");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}
