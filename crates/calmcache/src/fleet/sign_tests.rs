#![allow(clippy::unwrap_used)]
use super::*;

const OLD: &[u8] = b"old-secret-0123456789abcdef0123456789";
const NEW: &[u8] = b"new-secret-0123456789abcdef0123456789";

fn signer(current: &[u8], also: Option<&[u8]>) -> Signer {
    scoped(current, also, "cc:")
}

fn scoped(current: &[u8], also: Option<&[u8]>, prefix: &str) -> Signer {
    Signer::new(
        &FleetSecret {
            current: current.to_vec(),
            also_accepted: also.map(<[u8]>::to_vec),
        },
        prefix,
    )
}

/// Review of issue 25: two fleets sharing a secret under different prefixes
/// (staging and production) cannot replay each other's purges or entries.
#[test]
fn another_fleets_signatures_do_not_verify_under_the_same_secret() {
    let staging = scoped(NEW, None, "staging:");
    let prod = scoped(NEW, None, "prod:");
    let sig = staging.sign_purge("n1", 1_000, r#"{"all":true}"#);
    assert_eq!(
        prod.check_purge("n1", r#"{"all":true}"#, Some("1000"), Some(&sig), 1_000),
        PurgeCheck::Refused
    );
    assert_eq!(
        staging.check_purge("n1", r#"{"all":true}"#, Some("1000"), Some(&sig), 1_000),
        PurgeCheck::Valid
    );
    let sealed = staging.seal_entry(&key("/a"), 7, b"blob");
    assert!(prod.open_entry(&key("/a"), 7, sealed.clone()).is_none());
    assert_eq!(
        staging.open_entry(&key("/a"), 7, sealed).as_deref(),
        Some(&b"blob"[..])
    );
}

fn key(path: &str) -> CacheKey {
    CacheKey::new("http", "h", path)
}

#[test]
fn an_entry_opens_only_for_its_key_time_bytes_and_secret() {
    let s = signer(NEW, None);
    let sealed = s.seal_entry(&key("/a"), 7, b"blob");
    assert!(sealed.starts_with(ENTRY_MAGIC));
    assert_eq!(
        s.open_entry(&key("/a"), 7, sealed.clone()).unwrap(),
        b"blob"
    );
    assert_eq!(s.open_entry(&key("/b"), 7, sealed.clone()), None, "key");
    assert_eq!(s.open_entry(&key("/a"), 8, sealed.clone()), None, "time");
    let mut changed = sealed.clone();
    *changed.last_mut().unwrap() ^= 1;
    assert_eq!(s.open_entry(&key("/a"), 7, changed), None, "a byte");
    assert_eq!(
        s.open_entry(&key("/a"), 7, b"blob".to_vec()),
        None,
        "unsigned"
    );
    assert_eq!(s.open_entry(&key("/a"), 7, sealed[..20].to_vec()), None);
    let other = signer(OLD, None);
    assert_eq!(other.open_entry(&key("/a"), 7, sealed), None, "secret");
}

#[test]
fn a_rotation_accepts_both_secrets_and_signs_with_the_first() {
    let old = signer(OLD, None);
    let rotating = signer(NEW, Some(OLD));
    let by_old = old.seal_entry(&key("/a"), 1, b"x");
    assert!(rotating.open_entry(&key("/a"), 1, by_old).is_some());
    let by_rotating = rotating.seal_entry(&key("/a"), 1, b"x");
    assert_eq!(
        by_rotating,
        signer(NEW, None).seal_entry(&key("/a"), 1, b"x")
    );
    assert!(old.open_entry(&key("/a"), 1, by_rotating).is_none());
}

#[test]
fn vary_names_open_only_for_their_uri() {
    let s = signer(NEW, None);
    let sealed = s.seal_names(&key("/a"), "accept-language");
    assert_eq!(s.open_names(&key("/a"), &sealed), Some("accept-language"));
    assert_eq!(s.open_names(&key("/b"), &sealed), None);
    assert_eq!(s.open_names(&key("/a"), "accept-language"), None);
    let swapped = sealed.replacen("accept-language", "x-evil", 1);
    assert_eq!(s.open_names(&key("/a"), &swapped), None);
}

#[test]
fn a_purge_is_valid_signed_near_its_stream_time_only() {
    let s = signer(NEW, Some(OLD));
    let all = r#"{"all":true}"#;
    let sig = s.sign_purge("node-a", 100_000, all);
    let check = |node, purge, at: Option<&str>, sig: Option<&str>, entered| {
        s.check_purge(node, purge, at, sig, entered)
    };
    let at = Some("100000");
    assert_eq!(
        check("node-a", all, at, Some(&sig), 100_050),
        PurgeCheck::Valid
    );
    assert_eq!(
        check("node-a", all, at, Some(&sig), 160_000),
        PurgeCheck::Valid
    );
    // Copied into the stream later: a replay.
    assert_eq!(
        check("node-a", all, at, Some(&sig), 160_001),
        PurgeCheck::Replayed
    );
    assert_eq!(
        check("node-a", all, at, Some(&sig), 39_999),
        PurgeCheck::Replayed
    );
    // Anything changed, or missing, or signed with another secret.
    let refused = PurgeCheck::Refused;
    assert_eq!(check("node-b", all, at, Some(&sig), 100_000), refused);
    assert_eq!(
        check("node-a", r#"{"url":"/"}"#, at, Some(&sig), 100_000),
        refused
    );
    assert_eq!(
        check("node-a", all, Some("100001"), Some(&sig), 100_000),
        refused
    );
    assert_eq!(check("node-a", all, None, None, 100_000), refused);
    assert_eq!(check("node-a", all, at, Some("zz"), 100_000), refused);
    assert_eq!(
        check("node-a", all, Some("x"), Some(&sig), 100_000),
        refused
    );
    let foreign = signer(b"another-fleet-0123456789abcdef0123", None);
    let sig = foreign.sign_purge("node-a", 100_000, all);
    assert_eq!(check("node-a", all, at, Some(&sig), 100_000), refused);
    // The previous secret still verifies during a rotation.
    let sig = signer(OLD, None).sign_purge("node-a", 100_000, all);
    assert_eq!(
        check("node-a", all, at, Some(&sig), 100_000),
        PurgeCheck::Valid
    );
}

/// Heartbeats (fleet/members.rs): a field changed, another secret, or a
/// purge's tag does not verify; the rotation's old secret does.
#[test]
fn a_heartbeat_verifies_only_as_signed() {
    let fields: [&[u8]; 3] = [b"n1", b"keys", b"routes"];
    let sig = signer(NEW, None).sign_beat(&fields);
    assert!(signer(NEW, None).check_beat(&fields, &sig));
    assert!(signer(OLD, Some(NEW)).check_beat(&fields, &sig));
    assert!(!signer(NEW, None).check_beat(&[b"n1", b"keys", b"other"], &sig));
    assert!(!signer(OLD, None).check_beat(&fields, &sig));
    assert!(!scoped(NEW, None, "staging:").check_beat(&fields, &sig));
    assert!(!signer(NEW, None).check_beat(&fields, "not hex"));
    let purge = signer(NEW, None).sign_purge("n1", 0, "keys");
    assert!(!signer(NEW, None).check_beat(&fields, &purge));
}
