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
