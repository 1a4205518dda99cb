//! The header's framing and parsing as tables, then over real loopback
//! sockets: split over packets, nothing read past it, bounded waits.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// A v2 header: `command` (0x20 LOCAL, 0x21 PROXY), `family` byte, the
/// address block and TLVs in `rest`.
pub(crate) fn v2(command: u8, family: u8, rest: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(command);
    out.push(family);
    out.extend(u16::try_from(rest.len()).unwrap().to_be_bytes());
    out.extend(rest);
    out
}

/// The v2 address block of 192.0.2.7:5555 -> 10.0.0.1:443.
fn v4_block() -> Vec<u8> {
    let mut block = vec![192, 0, 2, 7, 10, 0, 0, 1];
    block.extend(5555u16.to_be_bytes());
    block.extend(443u16.to_be_bytes());
    block
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn framing_tells_the_length_from_as_few_bytes_as_the_spec_allows() {
    let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 5555 443\r\nGET / HTTP/1.1\r\n";
    assert_eq!(framing(b""), Ok(Framing::More));
    assert_eq!(framing(b"PRO"), Ok(Framing::More));
    assert_eq!(framing(&line[..20]), Ok(Framing::More));
    assert_eq!(framing(line), Ok(Framing::V1(40)), "the CRLF ends it");
    let header = v2(0x21, 0x11, &v4_block());
    assert_eq!(framing(&header[..5]), Ok(Framing::More));
    assert_eq!(framing(&header[..15]), Ok(Framing::More));
    assert_eq!(framing(&header[..16]), Ok(Framing::V2(28)));
    // What is not a header is refused at its first byte that differs.
    assert_eq!(framing(b"GET / HTTP/1.1\r\n"), Err(ProxyHeader::Missing));
    assert_eq!(framing(b"G"), Err(ProxyHeader::Missing));
    assert_eq!(
        framing(&[0x16, 0x03, 0x01]),
        Err(ProxyHeader::Missing),
        "a ClientHello"
    );
    assert_eq!(framing(b"PRI * HTTP/2.0\r\n"), Err(ProxyHeader::Missing));
    assert_eq!(framing(b"\r\n\r\nX"), Err(ProxyHeader::Missing));
}

#[test]
fn framing_refuses_long_lines_and_lengths_and_bare_newlines() {
    let long = [b"PROXY ".as_slice(), &[b'1'; 101]].concat();
    assert_eq!(long.len(), V1_MAX);
    assert_eq!(framing(&long[..106]), Ok(Framing::More));
    assert_eq!(
        framing(&long),
        Err(ProxyHeader::TooLong),
        "107 bytes without CRLF"
    );
    assert_eq!(
        framing(b"PROXY TCP4 1.2.3.4\n"),
        Err(ProxyHeader::Malformed)
    );
    let mut big = v2(0x21, 0x11, &[]);
    big[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(framing(&big), Err(ProxyHeader::TooLong));
    let limit = u16::try_from(V2_MAX - V2_FIXED).unwrap();
    big[14..16].copy_from_slice(&limit.to_be_bytes());
    assert_eq!(
        framing(&big),
        Ok(Framing::V2(V2_MAX)),
        "the limit itself is taken"
    );
}

#[test]
fn parse_takes_the_source_and_keeps_the_peer_where_there_is_none() {
    let v1 = |line: &str| parse(line.as_bytes());
    let client = |v, a: &str| Ok(Source::Client((v, addr(a))));
    assert_eq!(
        v1("PROXY TCP4 192.0.2.7 10.0.0.1 5555 443\r\n"),
        client(1, "192.0.2.7:5555")
    );
    assert_eq!(
        v1("PROXY TCP6 2001:db8::7 2001:db8::1 5555 443\r\n"),
        client(1, "[2001:db8::7]:5555")
    );
    assert_eq!(
        v1("PROXY UNKNOWN\r\n"),
        Ok(Source::Peer(ProxyHeader::Unknown))
    );
    assert_eq!(
        v1("PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n"),
        Ok(Source::Peer(ProxyHeader::Unknown))
    );
    for bad in [
        "PROXY TCP4 192.0.2.300 10.0.0.1 5555 443\r\n",
        "PROXY TCP4 192.0.2.7 10.0.0.1 5555\r\n",
        "PROXY TCP4 2001:db8::7 10.0.0.1 5555 443\r\n",
        "PROXY TCP4 192.0.2.7 10.0.0.1 99999 443\r\n",
        "PROXY UDP4 192.0.2.7 10.0.0.1 5555 443\r\n",
        "PROXY  TCP4 192.0.2.7 10.0.0.1 5555 443\r\n",
    ] {
        assert_eq!(v1(bad), Err(ProxyHeader::Malformed), "{bad:?}");
    }
    assert_eq!(
        parse(&v2(0x21, 0x11, &v4_block())),
        client(2, "192.0.2.7:5555")
    );
    let mut v6 = [0u8; 36];
    v6[..16].copy_from_slice(
        &"2001:db8::7"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    v6[32..34].copy_from_slice(&5555u16.to_be_bytes());
    assert_eq!(parse(&v2(0x21, 0x21, &v6)), client(2, "[2001:db8::7]:5555"));
    // TLVs after the addresses are skipped, whatever they hold.
    let tlvs = [v4_block(), vec![0x04, 0, 3, 1, 2, 3, 0xEE, 0, 1, 9]].concat();
    assert_eq!(parse(&v2(0x21, 0x11, &tlvs)), client(2, "192.0.2.7:5555"));
    // LOCAL (a health check), UNSPEC and AF_UNIX: the TCP peer.
    assert_eq!(
        parse(&v2(0x20, 0x11, &v4_block())),
        Ok(Source::Peer(ProxyHeader::Local))
    );
    assert_eq!(
        parse(&v2(0x20, 0x00, &[])),
        Ok(Source::Peer(ProxyHeader::Local))
    );
    assert_eq!(
        parse(&v2(0x21, 0x00, &[])),
        Ok(Source::Peer(ProxyHeader::Unknown))
    );
    assert_eq!(
        parse(&v2(0x21, 0x31, &[0; 216])),
        Ok(Source::Peer(ProxyHeader::Unknown))
    );
    // A bad version, command or family, or addresses cut short.
    for (command, family, block) in [
        (0x11, 0x11, v4_block()),
        (0x22, 0x11, v4_block()),
        (0x21, 0x41, v4_block()),
        (0x21, 0x11, v4_block()[..8].to_vec()),
        (0x21, 0x21, v4_block()),
    ] {
        let header = v2(command, family, &block);
        assert_eq!(
            parse(&header),
            Err(ProxyHeader::Malformed),
            "{command:#x} {family:#x}"
        );
    }
}

/// A connected pair on loopback: (the client's end, the server's end).
async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (client, server)
}

fn relays(from: &str) -> Relays {
    let listen = addr("127.0.0.1:1");
    Relays {
        listeners: vec![ListenerId::of(listen)],
        config: ProxyProtocolConfig {
            listeners: vec![listen],
            from: vec![from.parse().unwrap()],
        },
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

#[tokio::test]
async fn a_header_split_over_packets_is_read_whole_and_not_a_byte_more() {
    for header in [
        b"PROXY TCP4 192.0.2.7 10.0.0.1 5555 443\r\n".to_vec(),
        v2(
            0x21,
            0x11,
            &[v4_block(), vec![0x04, 0, 200], vec![7; 200]].concat(),
        ),
    ] {
        let (mut client, mut server) = pair().await;
        let metrics = Metrics::default();
        let writer = tokio::spawn(async move {
            for piece in header.chunks(7) {
                client.write_all(piece).await.unwrap();
                client.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            client
        });
        let relays = relays("127.0.0.0/8");
        let peer = server.peer_addr().unwrap();
        let got = relays
            .receive(&mut server, peer, soon(), Some(&metrics))
            .await;
        assert_eq!(got, Some(addr("192.0.2.7:5555")));
        let mut rest = [0u8; 16];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!(
            &rest, b"GET / HTTP/1.1\r\n",
            "what follows the header is left to HTTP"
        );
        drop(writer.await.unwrap());
    }
}

#[tokio::test]
async fn untrusted_missing_slow_and_closed_connections_are_refused_and_counted() {
    let metrics = Metrics::default();
    let count = |r: ProxyHeader| metrics.proxy_protocol[r as usize].get();
    // From outside the ranges: refused before anything is read.
    let (mut client, mut server) = pair().await;
    client.write_all(b"PROXY UNKNOWN\r\n").await.unwrap();
    let peer = server.peer_addr().unwrap();
    assert_eq!(
        relays("10.0.0.0/8")
            .receive(&mut server, peer, soon(), Some(&metrics))
            .await,
        None
    );
    assert_eq!(count(ProxyHeader::Untrusted), 1);
    let relays = relays("127.0.0.1/32");
    // HTTP straight away.
    let (mut client, mut server) = pair().await;
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        relays
            .receive(&mut server, peer, soon(), Some(&metrics))
            .await,
        None
    );
    assert_eq!(count(ProxyHeader::Missing), 1);
    // Half a header, then nothing: the deadline ends the wait.
    let (mut client, mut server) = pair().await;
    client.write_all(b"PROXY TCP4 192.0.2.7").await.unwrap();
    let deadline = Instant::now() + Duration::from_millis(200);
    assert_eq!(
        relays
            .receive(&mut server, peer, deadline, Some(&metrics))
            .await,
        None
    );
    assert_eq!(count(ProxyHeader::Timeout), 1);
    // Half a header, then the client leaves.
    let (mut client, mut server) = pair().await;
    client.write_all(b"PROXY TCP4 192.0.2.7").await.unwrap();
    drop(client);
    assert_eq!(
        relays
            .receive(&mut server, peer, soon(), Some(&metrics))
            .await,
        None
    );
    assert_eq!(count(ProxyHeader::Closed), 1);
    // A line past 107 bytes, and a v2 length past the limit.
    let (mut client, mut server) = pair().await;
    client
        .write_all([b"PROXY ".as_slice(), &[b'9'; 200]].concat().as_slice())
        .await
        .unwrap();
    assert_eq!(
        relays
            .receive(&mut server, peer, soon(), Some(&metrics))
            .await,
        None
    );
    let (mut client, mut server) = pair().await;
    let mut big = v2(0x21, 0x11, &[]);
    big[14..16].copy_from_slice(&60_000u16.to_be_bytes());
    client.write_all(&big).await.unwrap();
    assert_eq!(
        relays
            .receive(&mut server, peer, soon(), Some(&metrics))
            .await,
        None
    );
    assert_eq!(count(ProxyHeader::TooLong), 2);
    // LOCAL: served as the TCP peer.
    let (mut client, mut server) = pair().await;
    client.write_all(&v2(0x20, 0x00, &[])).await.unwrap();
    assert_eq!(
        relays
            .receive(&mut server, peer, soon(), Some(&metrics))
            .await,
        Some(peer)
    );
    assert_eq!(count(ProxyHeader::Local), 1);
}
