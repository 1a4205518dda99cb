//! Property tests for body keys: two different bodies never give the same
//! key (nor one body under two methods); two JSON texts of one value, their
//! members in any order and with any insignificant whitespace, give the
//! same key under `body_key = "json"`, and texts of different values never
//! do.

#![allow(clippy::unwrap_used)]

use calmcache_core::{CacheKey, KeyRef};
use proptest::prelude::*;
use serde_json::Value;

use super::{digest, Framing};
use crate::config::BodyKey;

fn key(method: &str, how: BodyKey, body: &[u8]) -> Option<CacheKey> {
    let uri = KeyRef::new("http", "h", "/graphql");
    let framing = Framing {
        media: "application/json".to_owned(),
        coding: String::new(),
    };
    Some(uri.with_body(method, &digest(how, &framing, body)?))
}

/// JSON values without floats (their spelling is the origin's business:
/// numbers are keyed as written, see canonical_json.rs).
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map("[a-z\"\\\\é]{0,4}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `value` as JSON text, its members in an order and with whitespace drawn
/// from `seed`.
fn render(value: &Value, seed: &mut u64, out: &mut String) {
    let mut next = || {
        *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        *seed >> 33
    };
    let space = [" ", "", "\n", "\t ", "", "\r\n"][(next() % 6) as usize];
    out.push_str(space);
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(item, seed, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut members: Vec<(&String, &Value)> = members.iter().collect();
            let len = members.len().max(1);
            members.rotate_left((next() as usize) % len);
            if next() % 2 == 0 {
                members.reverse();
            }
            out.push('{');
            for (i, (name, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(name).unwrap());
                out.push_str(" : ");
                render(item, seed, out);
            }
            out.push('}');
        }
        leaf => out.push_str(&serde_json::to_string(leaf).unwrap()),
    }
    let space = [" ", "", "\n"][(*seed % 3) as usize];
    out.push_str(space);
}

fn text(value: &Value, mut seed: u64) -> String {
    let mut out = String::new();
    render(value, &mut seed, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn different_bodies_never_share_a_key(
        a in prop::collection::vec(any::<u8>(), 0..64),
        b in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let (ka, kb) = (key("POST", BodyKey::Bytes, &a), key("POST", BodyKey::Bytes, &b));
        prop_assert_eq!(a == b, ka == kb);
        prop_assert_ne!(ka, key("QUERY", BodyKey::Bytes, &a));
    }

    #[test]
    fn one_json_value_gives_one_key_however_written(
        value in json(),
        s1 in any::<u64>(),
        s2 in any::<u64>(),
    ) {
        let (t1, t2) = (text(&value, s1), text(&value, s2));
        let k1 = key("POST", BodyKey::Json, t1.as_bytes());
        prop_assert!(k1.is_some(), "{t1:?} is JSON");
        prop_assert_eq!(&k1, &key("POST", BodyKey::Json, t2.as_bytes()), "{} / {}", t1, t2);
    }

    #[test]
    fn different_json_values_never_share_a_key(
        a in json(),
        b in json(),
        s1 in any::<u64>(),
        s2 in any::<u64>(),
    ) {
        let ka = key("POST", BodyKey::Json, text(&a, s1).as_bytes());
        let kb = key("POST", BodyKey::Json, text(&b, s2).as_bytes());
        prop_assert_eq!(a == b, ka == kb);
    }
}
