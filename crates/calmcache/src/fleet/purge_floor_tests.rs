use calmcache_core::CacheKey;

use super::{PurgeFloors, SharedRule, RULES_MAX};

fn key(host: &str, path: &str) -> CacheKey {
    CacheKey::new("http", host, path)
}

fn prefix(host: Option<&str>, path: &str) -> SharedRule {
    SharedRule::Prefix {
        host: host.map(str::to_owned),
        path: path.to_owned(),
    }
}

/// A floors past its start: the baseline (epoch 0) read.
fn started() -> PurgeFloors {
    let floors = PurgeFloors::default();
    assert!(floors.needs_baseline());
    floors.set_baseline(0);
    floors
}

#[test]
fn a_prefix_purge_floors_its_own_keys_only() {
    let floors = started();
    floors.note(prefix(None, "/s3/"), Some(1_000), 1_000);
    floors.saw_epoch(1_000);
    assert_eq!(floors.floor(&key("a.example", "/s3/x")), 1_000);
    assert_eq!(floors.floor(&key("b.example", "/s3/")), 1_000);
    assert_eq!(
        floors.floor(&key("a.example", "/s4/x")),
        0,
        "another prefix"
    );
    assert_eq!(floors.floor(&key("a.example", "/s")), 0, "shorter than it");
}

#[test]
fn a_prefix_on_one_host_floors_that_host_only() {
    let floors = started();
    floors.note(prefix(Some("a.example"), "/p"), Some(5), 5);
    assert_eq!(floors.floor(&key("a.example", "/page")), 5);
    assert_eq!(floors.floor(&key("b.example", "/page")), 0);
}

#[test]
fn tags_and_everything_floor_every_key() {
    let floors = started();
    floors.note(SharedRule::Everything, Some(7), 7);
    assert_eq!(floors.floor(&key("a.example", "/x")), 7);
    // Named keys that came with an epoch: taken as every key.
    floors.note(SharedRule::Keys, Some(9), 9);
    assert_eq!(floors.floor(&key("z.example", "/y")), 9);
    // One that named its keys sets no floor.
    floors.note(SharedRule::Keys, None, 20);
    assert_eq!(floors.floor(&key("z.example", "/y")), 9);
}

#[test]
fn an_epoch_no_purge_accounts_for_floors_every_key_until_one_does() {
    let floors = started();
    // Another node's prefix purge: its epoch is read before its entry.
    floors.saw_epoch(100);
    assert_eq!(floors.floor(&key("a.example", "/other")), 100);
    floors.note(prefix(None, "/s3/"), Some(100), 100);
    assert_eq!(floors.floor(&key("a.example", "/other")), 0);
    assert_eq!(floors.floor(&key("a.example", "/s3/1")), 100);
}

#[test]
fn an_older_nodes_purge_without_an_epoch_is_a_rule_at_its_stream_time() {
    let floors = started();
    floors.saw_epoch(100);
    // No `epoch` field: the epoch stays unexplained (every key), the rule
    // counts from when the entry entered the stream.
    floors.note(prefix(None, "/s3/"), None, 104);
    assert_eq!(floors.floor(&key("a.example", "/other")), 100);
    assert_eq!(floors.floor(&key("a.example", "/s3/1")), 104);
}

#[test]
fn the_epoch_at_start_and_after_a_gap_floors_every_key_for_good() {
    let floors = PurgeFloors::default();
    // Read before the stream position was known: not a baseline.
    floors.saw_epoch(50);
    assert!(floors.needs_baseline());
    floors.set_baseline(60);
    assert!(!floors.needs_baseline());
    // A later purge explained by its entry does not lift the baseline:
    // what the purges before the start took is not known.
    floors.note(prefix(None, "/a"), Some(80), 80);
    floors.saw_epoch(80);
    assert_eq!(floors.floor(&key("h", "/b")), 60);
    // A gap: every epoch seen is a floor for every key, and the next one.
    floors.lost_track();
    assert_eq!(floors.floor(&key("h", "/b")), 80);
    assert!(floors.needs_baseline());
    floors.set_baseline(90);
    assert_eq!(floors.floor(&key("h", "/b")), 90);
}

#[test]
fn rules_past_the_limit_fold_into_the_floor_for_every_key() {
    let floors = started();
    for i in 0..RULES_MAX as u64 + 1 {
        floors.note(prefix(None, &format!("/r{i}/")), Some(i + 1), i + 1);
    }
    // The oldest rule (at 1) went into every key's floor.
    assert_eq!(floors.floor(&key("h", "/elsewhere")), 1);
    assert_eq!(floors.floor(&key("h", "/r4000/x")), 4_001);
}
