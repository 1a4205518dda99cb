//! The drift judgement: majority, this node, others, split.

#![allow(clippy::unwrap_used)]

use super::{admit, judge, read_records, Beat, Drift, Member, Members, Refusal};
use crate::config::FleetSecret;
use crate::fleet::fingerprint::{Fingerprint, FingerprintPart};
use crate::fleet::sign::Signer;
use redis::Value;

fn fp(keys: &str, routes: &str) -> Fingerprint {
    Fingerprint::from_parts(keys.into(), routes.into(), "f".into())
}

fn member(name: &str, fingerprint: &Fingerprint) -> Member {
    Member {
        name: name.into(),
        id: format!("{name}-id"),
        version: "1".into(),
        fingerprint: fingerprint.clone(),
        started_at_ms: 0,
        last_seen_ms_ago: 0,
        this_node: false,
        differs: Vec::new(),
    }
}

#[test]
fn members_that_agree_show_no_drift() {
    let same = fp("k", "r");
    let members = vec![member("a", &same), member("b", &same), member("c", &same)];
    let view = judge(members, "b", &same);
    assert_eq!(view.config_drift, Drift::None);
    let members = view.members.unwrap();
    assert!(members.iter().all(|m| m.differs.is_empty()));
    assert_eq!(members.iter().filter(|m| m.this_node).count(), 1);
}

#[test]
fn the_odd_node_is_flagged_on_every_node_with_the_part_that_differs() {
    let same = fp("k", "r");
    let odd = fp("k2", "r");
    let members = || vec![member("a", &same), member("b", &same), member("c", &odd)];
    let at_a = judge(members(), "a", &same);
    assert_eq!(at_a.config_drift, Drift::Others);
    assert!(at_a.config_drift_parts.is_empty());
    let flagged: Vec<_> = at_a
        .members
        .unwrap()
        .into_iter()
        .filter(|m| !m.differs.is_empty())
        .collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0].name, "c");
    assert_eq!(flagged[0].differs, [FingerprintPart::Keys]);
    let at_c = judge(members(), "c", &odd);
    assert_eq!(at_c.config_drift, Drift::ThisNode);
    assert_eq!(at_c.config_drift_parts, [FingerprintPart::Keys]);
    assert!(at_c.config_drift.this_node_drifts());
}

#[test]
fn no_majority_is_a_split_seen_from_this_node() {
    let a = fp("k", "r");
    let b = fp("k", "r2");
    let view = judge(vec![member("a", &a), member("b", &b)], "a", &a);
    assert_eq!(view.config_drift, Drift::Split);
    let members = view.members.unwrap();
    assert!(members[0].differs.is_empty());
    assert_eq!(members[1].differs, [FingerprintPart::Routes]);
}

#[test]
fn a_lone_node_agrees_with_itself() {
    let a = fp("k", "r");
    let view = judge(vec![member("a", &a)], "a", &a);
    assert_eq!(view.config_drift, Drift::None);
}

#[test]
fn a_drift_is_logged_once_per_change() {
    let same = fp("k", "r");
    let odd = fp("k2", "r");
    let members = || vec![member("a", &same), member("b", &same), member("c", &odd)];
    let log = Members::default();
    let view = judge(members(), "c", &odd);
    assert!(log.log_drift(&view, "c"), "the first drift is logged");
    for _ in 0..5 {
        assert!(
            !log.log_drift(&view, "c"),
            "the same drift is not logged again"
        );
    }
    // The majority's nodes do not log (they show it in /status).
    let at_a = judge(members(), "a", &same);
    assert!(!Members::default().log_drift(&at_a, "a"));
}

#[test]
fn heartbeats_read_from_redis_are_checked() {
    let own = fp("k", "r");
    let beat = |name: &str| {
        let b = Beat::new(name.to_owned(), "id".to_owned(), &own);
        Value::BulkString(serde_json::to_vec(&b).unwrap())
    };
    let answer = Value::Array(vec![
        Value::Int(10_000),
        Value::BulkString(b"a".to_vec()),
        Value::Int(9_000),
        beat("a"),
        // A name that would forge a log line, something not JSON, too long.
        Value::BulkString(b"b".to_vec()),
        Value::Int(9_500),
        beat("b\nWARN forged"),
        Value::BulkString(b"c".to_vec()),
        Value::Int(9_500),
        Value::BulkString(b"not json".to_vec()),
        Value::BulkString(b"d".to_vec()),
        Value::Int(9_500),
        Value::BulkString(vec![b'x'; 5000]),
    ]);
    let members = admit(read_records(answer), None).members;
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].name, "a");
    assert_eq!(members[0].last_seen_ms_ago, 1_000);
    assert_eq!(members[0].fingerprint, own);
}

fn signer(secret: &[u8]) -> Signer {
    Signer::new(
        &FleetSecret {
            current: secret.to_vec(),
            also_accepted: None,
        },
        "cc:",
    )
}

/// One record of the members script's answer: `name`, last seen at
/// `seen`, holding `beat`.
fn record(name: &str, seen: i64, beat: &Beat) -> [Value; 3] {
    [
        Value::BulkString(name.as_bytes().to_vec()),
        Value::Int(seen),
        Value::BulkString(serde_json::to_vec(beat).unwrap()),
    ]
}

/// A signed fleet (issue 30): a record that is unsigned, signed with
/// another secret, a real one moved under another name, or one signed
/// long before it was last written is refused, with why; signed ones are
/// members. Without a secret the same records are all members, as before.
#[test]
fn on_a_signed_fleet_only_verified_heartbeats_are_members() {
    let key = b"fleet-secret-0123456789abcdef0123456789";
    let own = fp("k", "r");
    let other = fp("k", "r2");
    let real = Beat::new("a".into(), "a-id".into(), &own).signed(&signer(key), 9_000);
    let unsigned = Beat::new("b".into(), "b-id".into(), &other);
    let foreign = Beat::new("c".into(), "c-id".into(), &other)
        .signed(&signer(b"another-secret-0123456789abcdef0123"), 9_500);
    let old = Beat::new("d".into(), "d-id".into(), &own).signed(&signer(key), 1_000);
    let mut items = vec![Value::Int(10_000)];
    items.extend(record("a", 9_000, &real));
    items.extend(record("b", 9_500, &unsigned));
    items.extend(record("c", 9_500, &foreign));
    items.extend(record("copy", 9_500, &real));
    items.extend(record("d", 9_500, &old));
    let answer = Value::Array(items);

    let listed = admit(read_records(answer.clone()), Some(&signer(key)));
    let names: Vec<&str> = listed.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["a"]);
    let refused: Vec<(&str, Refusal)> = listed
        .refused
        .iter()
        .map(|r| (r.name.as_str(), r.why))
        .collect();
    assert_eq!(
        refused,
        [
            ("b", Refusal::Unsigned),
            ("c", Refusal::Forged),
            ("a", Refusal::Forged),
            ("d", Refusal::Replayed),
        ]
    );
    assert_eq!(listed.refused[0].last_seen_ms_ago, 500);
    // The refused never weigh in: a alone agrees with itself.
    assert_eq!(judge(listed.members, "a", &own).config_drift, Drift::None);

    let unsigned_fleet = admit(read_records(answer), None);
    assert_eq!(unsigned_fleet.members.len(), 5);
    assert!(unsigned_fleet.refused.is_empty());
}

/// A signature covers every field: a heartbeat whose fingerprint was
/// changed after signing does not verify.
#[test]
fn a_changed_field_breaks_a_heartbeat_s_signature() {
    let key = b"fleet-secret-0123456789abcdef0123456789";
    let mut beat = Beat::new("a".into(), "a-id".into(), &fp("k", "r")).signed(&signer(key), 9_000);
    assert!(beat.verifies(&signer(key)));
    beat.routes = "r2".into();
    assert!(!beat.verifies(&signer(key)));
}
