#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn a_server_answers_dies_comes_back_and_hangs_on_demand() {
    let mut redis = Redis::start();
    assert_eq!(redis.command(&["SET", "k", "v"]).unwrap(), "+OK");
    assert_eq!(redis.command(&["GET", "k"]).unwrap(), "v");
    // kill -9: nothing answers; restarted on the same port, empty.
    redis.kill9();
    assert!(redis.command(&["PING"]).is_err(), "a killed server answers");
    redis.restart();
    assert_eq!(redis.command(&["PING"]).unwrap(), "+PONG");
    assert_eq!(
        redis.command(&["EXISTS", "k"]).unwrap(),
        ":0",
        "no persistence"
    );
    // SIGSTOP: connections are accepted by the kernel but nothing answers.
    redis.pause();
    let started = Instant::now();
    assert!(redis.command(&["PING"]).is_err(), "a paused server answers");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "it timed out"
    );
    redis.resume();
    assert_eq!(redis.command(&["PING"]).unwrap(), "+PONG");
}

#[test]
fn a_cluster_of_three_masters_puts_one_hash_tag_in_one_slot() {
    let cluster = RedisCluster::start();
    assert_eq!(cluster.nodes.len(), 3);
    assert!(cluster.ok());
    let info = cluster.nodes[0].command(&["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_size:3"), "{info}");
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    // Every key of one object shares its hash tag, so one slot.
    let slot = cluster.slot("cc:{abc}:m");
    for suffix in ["l", "f", "p", "x", "b:1:0"] {
        assert_eq!(cluster.slot(&format!("cc:{{abc}}:{suffix}")), slot);
    }
    assert_ne!(
        cluster.slot("cc:{abd}:m"),
        slot,
        "another tag, another slot"
    );
}

#[test]
fn a_tls_server_answers_over_tls_only_and_to_clients_of_its_ca() {
    let mut redis = Redis::start_tls(ClientCerts::Required);
    let addr = redis.addr();
    assert_eq!(redis.url(), format!("rediss://{addr}"));
    assert_eq!(redis.command(&["SET", "k", "v"]).unwrap(), "+OK");
    assert_eq!(redis.command(&["GET", "k"]).unwrap(), "v");
    // Plain RESP on the TLS port: no reply (and no plain port at all).
    let plain = command(addr, None, &["PING"]);
    assert!(plain.as_deref().map_or(true, |r| r != "+PONG"), "{plain:?}");
    let tls = redis.tls().unwrap();
    // No client certificate: the server refuses (after the handshake in
    // TLS 1.3, so at the first reply).
    let anonymous = command(addr, Some(tls.ca.client(&[])), &["PING"]);
    assert!(anonymous.is_err(), "{anonymous:?}");
    // A client of another CA does not trust the server.
    let dir =
        std::env::temp_dir().join(format!("calmcache-redis-tls-other-{}", std::process::id()));
    let other = crate::tls::TestCa::new(&dir);
    let stranger = other.leaf("stranger", &[]);
    let wrong_ca = command(addr, Some(other.client_with_cert(&stranger)), &["PING"]);
    assert!(wrong_ca.is_err(), "{wrong_ca:?}");
    // Its own client certificate, of the right CA, from another client.
    let same = command(addr, Some(tls.ca.client_with_cert(&tls.client)), &["PING"]);
    assert_eq!(same.unwrap(), "+PONG");
    let _ = std::fs::remove_dir_all(dir);
    // Restarted: TLS still, with the same files.
    redis.restart();
    assert_eq!(redis.command(&["PING"]).unwrap(), "+PONG");
    assert!(command(addr, None, &["PING"]).map_or(true, |r| r != "+PONG"));
}

#[test]
fn a_tls_server_that_asks_no_certificate_takes_any_client_of_its_ca() {
    let redis = Redis::start_tls(ClientCerts::NotAsked);
    let tls = redis.tls().unwrap();
    let anonymous = command(redis.addr(), Some(tls.ca.client(&[])), &["PING"]);
    assert_eq!(anonymous.unwrap(), "+PONG");
    assert!(tls
        .fleet_keys()
        .contains(&tls.ca.ca_pem.display().to_string()));
}

#[test]
fn a_tls_cluster_of_three_masters_serves_every_slot_over_tls() {
    let cluster = RedisCluster::start_tls(ClientCerts::Required);
    assert!(cluster.ok());
    assert!(cluster
        .urls()
        .iter()
        .all(|u| u.starts_with("rediss://127.0.0.1:")));
    let info = cluster.nodes[0].command(&["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    assert!(info.contains("cluster_known_nodes:3"), "{info}");
    // Clients are sent to the nodes' TLS ports (`IP:PORT@BUS_PORT`).
    let nodes = cluster.nodes[0].command(&["CLUSTER", "NODES"]).unwrap();
    for node in &cluster.nodes {
        assert!(nodes.contains(&format!("{}@", node.addr())), "{nodes}");
    }
}

#[test]
fn a_tls_server_that_cannot_start_says_why() {
    let tls = RedisTls::new(ClientCerts::Required);
    std::fs::write(&tls.server.cert, "not a certificate\n").unwrap();
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut redis = Redis::unstarted(ip, free_port(), None, false, Some(tls));
    let e = redis.launch().unwrap_err();
    // Its log says it: "Failed to configure TLS", after the reason.
    assert!(e.contains("TLS"), "{e}");
}
