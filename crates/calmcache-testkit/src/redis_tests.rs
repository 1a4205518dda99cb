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
