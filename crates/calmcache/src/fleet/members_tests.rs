//! The drift judgement: majority, this node, others, split.

#![allow(clippy::unwrap_used)]

use super::{judge, read_members, Beat, Drift, Member, Members};
use crate::fleet::fingerprint::{Fingerprint, FingerprintPart};
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
    let members = read_members(answer);
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].name, "a");
    assert_eq!(members[0].last_seen_ms_ago, 1_000);
    assert_eq!(members[0].fingerprint, own);
}
