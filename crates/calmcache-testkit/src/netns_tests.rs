#![allow(clippy::unwrap_used)]
use super::*;
use crate::redis::Redis;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// Namespaces listed by `ip netns list`.
fn namespaces() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn interface_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .output()
        .unwrap()
        .status
        .success()
}

/// A connection with 1 s read and write timeouts.
fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    stream
}

/// Reads a `+PONG` within `within`, retrying 1 s reads that time out.
fn read_pong(stream: &mut TcpStream, within: Duration) {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0; 64];
    while !got.ends_with(b"\r\n") {
        assert!(Instant::now() < deadline, "no PONG within {within:?}");
        match stream.read(&mut buf) {
            Ok(0) => panic!("the connection was closed"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(e) => panic!("the connection failed: {e}"),
        }
    }
    assert_eq!(got, b"+PONG\r\n");
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[test]
fn a_partition_stops_packets_keeps_connections_and_heals() {
    let Some(ns) = NetNs::create_or_skip() else {
        return;
    };
    let redis = Redis::start_in(&ns);
    assert_eq!(redis.addr().ip(), ns.addr());
    assert_eq!(redis.url(), format!("redis://{}:6379", ns.addr()));
    assert_eq!(redis.command(&["PING"]).unwrap(), "+PONG");
    let mut held = connect(redis.addr());
    held.write_all(PING).unwrap();
    read_pong(&mut held, Duration::from_secs(5));

    ns.link_down();
    // The host keeps its route through the veth (no carrier): packets are
    // dropped here, not sent to the default gateway.
    let route = Command::new("ip")
        .args(["route", "get", &ns.addr().to_string()])
        .output()
        .unwrap();
    let route = String::from_utf8_lossy(&route.stdout);
    assert!(route.contains(ns.host_interface()), "{route}");
    // A new connection times out (the SYN is dropped): no refusal, no reset.
    let started = Instant::now();
    let fresh = redis.command(&["PING"]);
    assert!(fresh.is_err(), "PING across a partition: {fresh:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "it failed fast instead of timing out: {fresh:?}"
    );
    // The connection opened before stays open: the write is buffered and
    // the read times out (an RST would fail it, a FIN would read 0).
    held.write_all(PING).unwrap();
    let mut buf = [0; 16];
    match held.read(&mut buf) {
        Err(e) if is_timeout(&e) => {}
        other => panic!("a read across a partition: {other:?}"),
    }

    ns.link_up();
    // TCP retransmits the PING written during the partition.
    read_pong(&mut held, Duration::from_secs(15));
    held.write_all(PING).unwrap();
    read_pong(&mut held, Duration::from_secs(5));
    assert_eq!(redis.command(&["PING"]).unwrap(), "+PONG");
}

#[test]
fn redis_in_a_namespace_still_dies_comes_back_and_hangs_on_demand() {
    let Some(ns) = NetNs::create_or_skip() else {
        return;
    };
    let mut redis = Redis::start_in(&ns);
    // `ip netns exec` execs: the child is redis-server itself, so signals reach it.
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", redis.pid().unwrap())).unwrap();
    assert_eq!(comm.trim(), "redis-server");
    assert_eq!(redis.command(&["SET", "k", "v"]).unwrap(), "+OK");
    redis.kill9();
    assert!(redis.command(&["PING"]).is_err(), "a killed server answers");
    redis.restart();
    assert_eq!(redis.command(&["EXISTS", "k"]).unwrap(), ":0");
    redis.pause();
    assert!(redis.command(&["PING"]).is_err(), "a paused server answers");
    redis.resume();
    assert_eq!(redis.command(&["PING"]).unwrap(), "+PONG");
    // A second server in the same namespace gets the next port.
    let second = Redis::start_in(&ns);
    assert_eq!(second.addr().port(), redis.addr().port() + 1);
}

#[test]
fn parallel_namespaces_get_their_own_addresses() {
    let Some(a) = NetNs::create_or_skip() else {
        return;
    };
    let b = NetNs::create();
    assert_ne!(a.name(), b.name());
    assert_ne!(a.host_interface(), b.host_interface());
    assert_ne!(a.addr(), b.addr());
    for ns in [&a, &b] {
        let octets = ns.addr().octets();
        assert_eq!(octets[0], 198);
        assert!(
            matches!(octets[1], 18 | 19),
            "in 198.18.0.0/15: {}",
            ns.addr()
        );
        assert_eq!(octets[3] % 4, 2, "the inside end of a /30: {}", ns.addr());
        assert_eq!(u32::from(ns.host_addr()) + 1, u32::from(ns.addr()));
    }
}

#[test]
fn drop_removes_the_namespace_its_link_and_its_processes() {
    let Some(ns) = NetNs::create_or_skip() else {
        return;
    };
    let (name, host_if) = (ns.name().to_owned(), ns.host_interface().to_owned());
    let mut sleeper = ns.spawn_in("sleep", ["60"]).unwrap();
    let mut redis = Redis::start_in(&ns);
    assert!(namespaces().contains(&name));
    assert!(interface_exists(&host_if));
    let mut held = connect(redis.addr());
    held.write_all(PING).unwrap();
    read_pong(&mut held, Duration::from_secs(5));
    // Dropped in a partition: the link comes up for the processes' last
    // packets, so the host's connection is closed, not left hanging.
    ns.link_down();
    drop(ns);
    let mut buf = [0; 16];
    match held.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the host's connection after the drop: {other:?}"),
    }
    assert!(!namespaces().contains(&name), "{name} left behind");
    assert!(!interface_exists(&host_if), "{host_if} left behind");
    let deadline = Instant::now() + Duration::from_secs(5);
    while sleeper.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "a process inside outlived it");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Killed (a zombie until `redis` reaps it); not dialled: without the
    // veth, its address routes to the default gateway.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", redis.pid().unwrap()));
    assert!(
        stat.map_or(true, |s| s.contains(") Z ")),
        "redis-server outlived it"
    );
    redis.kill9();
}

#[test]
fn a_panicking_test_still_removes_its_namespace() {
    let Some(probe) = NetNs::create_or_skip() else {
        return;
    };
    drop(probe);
    let mut name = String::new();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ns = NetNs::create();
        name = ns.name().to_owned();
        panic!("a test fails with its namespace up");
    }));
    assert!(panicked.is_err());
    assert!(!name.is_empty());
    assert!(!namespaces().contains(&name), "{name} left behind");
}

#[test]
fn where_namespaces_cannot_be_made_a_test_skips_aloud_or_fails_under_ci() {
    // The skip path itself (here, namespaces can usually be made); only
    // its CI half, so that no run prints a stray "skipped:" line.
    let failed = std::panic::catch_unwind(|| skip("not root (euid 1000)", SkipPolicy::Fail));
    let message = failed.unwrap_err();
    let message = message.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with(
            "skipped: cannot create network namespaces (needs root and iproute2): not root"
        ),
        "{message}"
    );
    assert!(message.contains("CI=true"), "{message}");
    assert!(
        message.contains("fails_under_ci]"),
        "names the test: {message}"
    );
}

/// `ip ARGS`'s standard output.
fn ip_out(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Connects to `addr` and says how it failed: at once, on this machine
/// (`EHOSTUNREACH` from the range's `unreachable` route), never a time-out
/// of packets that left it.
fn assert_fails_here(addr: SocketAddr, when: &str) {
    let started = Instant::now();
    let result = TcpStream::connect_timeout(&addr, Duration::from_secs(3));
    let error = result.expect_err(when);
    assert_eq!(error.raw_os_error(), Some(113), "{when}: {error}"); // EHOSTUNREACH
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{when}: took {:?}",
        started.elapsed()
    );
    // The kernel's own word: no route off the machine for it.
    let out = Command::new("ip")
        .args(["route", "get", &addr.ip().to_string()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("No route to host"),
        "{when}: {said}"
    );
}

/// Regression (issue 25, item 10): once a test's veth was gone (or its host
/// end down), packets for the namespace's address followed the host's
/// default route off the machine. The namespace has no default route, and
/// the host's `unreachable` route for the range makes a connection fail
/// here, at once: with the host end down, and after the namespace is gone.
#[test]
fn a_gone_or_downed_link_fails_on_this_machine_not_off_it() {
    let Some(ns) = NetNs::create_or_skip() else {
        return;
    };
    assert_eq!(ip_out(&["-n", ns.name(), "route", "show", "default"]), "");
    assert!(ip_out(&["route", "show", RANGE]).starts_with("unreachable"));
    let addr = SocketAddr::from((ns.addr(), 9));
    let host_if = ns.host_interface().to_owned();
    ip(["link", "set", &host_if, "down"]).unwrap();
    assert_fails_here(addr, "host end down");
    ip(["link", "set", &host_if, "up"]).unwrap();
    drop(ns);
    assert_fails_here(addr, "namespace dropped");
}
