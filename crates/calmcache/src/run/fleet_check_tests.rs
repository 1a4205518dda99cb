//! The memory judgement of `check --fleet`: Redis' own warning passed on,
//! sizes against `maxmemory`, nothing for a Redis with room.

use std::time::Duration;

use super::{memory_line, memory_warnings};
use crate::config::FleetConfig;
use crate::fleet::RedisMemory;

const MIB: u64 = 1 << 20;

/// The defaults' sizes: 64 MiB objects, 256 MiB in flight per node.
fn fleet() -> FleetConfig {
    FleetConfig {
        nodes: vec!["redis://127.0.0.1:6379".to_owned()],
        cluster: false,
        user: None,
        password: None,
        prefix: "cc:".to_owned(),
        max_object_size: 64 * MIB,
        max_pieces_in_flight: 256 * MIB,
        stream_from_peers: false,
        timeout: Duration::from_millis(50),
        lease: Duration::from_secs(3),
        tls_ca: None,
        tls_client: None,
        secret: None,
    }
}

fn redis(maxmemory: u64, policy: &str) -> RedisMemory {
    RedisMemory {
        used_memory: Some(3 * MIB),
        maxmemory: Some(maxmemory),
        used_ratio: (maxmemory > 0).then(|| 3.0 * MIB as f64 / maxmemory as f64),
        maxmemory_policy: Some(policy.to_owned()),
        evicted_keys: Some(0),
        nodes: 1,
        read_ms_ago: Some(0),
        warning: None,
    }
}

#[test]
fn a_redis_with_room_for_the_fleet_gets_no_warning() {
    // 3 nodes x 256 MiB in flight = 768 MiB, under half of 2 GiB.
    let memory = redis(2048 * MIB, "allkeys-lfu");
    assert!(memory_warnings(&memory, &fleet(), 3).is_empty());
    let line = memory_line(&memory);
    assert!(line.contains("maxmemory 2 GiB (0% used)"), "{line}");
    assert!(line.contains("policy allkeys-lfu"), "{line}");
}

#[test]
fn large_objects_and_pieces_in_flight_are_weighed_against_maxmemory() {
    let memory = redis(256 * MIB, "allkeys-lfu");
    let warnings = memory_warnings(&memory, &fleet(), 3);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("max_object_size (64 MiB) is over 1/8 of redis' maxmemory (256 MiB)"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("max_pieces_in_flight (256 MiB) x 3 node(s) = 768 MiB"),
        "{warnings:?}"
    );
    // Six nodes need more room than three: 1.5 GiB in flight against 2 GiB.
    let memory = redis(2048 * MIB, "allkeys-lfu");
    let warnings = memory_warnings(&memory, &fleet(), 6);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("x 6 node(s)"), "{warnings:?}");
}

#[test]
fn the_node_s_own_warning_is_passed_on_in_its_words() {
    let mut memory = redis(0, "noeviction");
    memory.used_ratio = None;
    memory.warning = Some("redis has no maxmemory: it grows".to_owned());
    let warnings = memory_warnings(&memory, &fleet(), 3);
    // No limit: nothing to weigh the sizes against.
    assert_eq!(warnings, ["redis has no maxmemory: it grows"]);
    assert!(memory_line(&memory).contains("no maxmemory"));
}

#[test]
fn an_unread_redis_says_so() {
    let memory = RedisMemory::default();
    let warnings = memory_warnings(&memory, &fleet(), 1);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("not checked"), "{warnings:?}");
    assert_eq!(
        memory_line(&memory),
        "redis memory: unknown (INFO did not answer)\n"
    );
}
