//! The fingerprint is stable (runs, the TOML's key order, unrelated keys,
//! secrets) and changes with what decides keys and storing, in the part
//! that names it.

#![allow(clippy::unwrap_used)]

use super::{Fingerprint, FingerprintPart};
use crate::config::Config;

/// The tables every test config has besides its `[fleet]` and route.
const TABLES: [&str; 4] = [
    "[server]\nlisten = [\"127.0.0.1:0\"]\n",
    "[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n",
    "[zones.ram]\nkind = \"memory\"\nmax_size = \"10MiB\"\n",
    "[zones.ram2]\nkind = \"memory\"\nmax_size = \"10MiB\"\n",
];

/// The route's keys every test config has.
const ROUTE: [&str; 3] = [
    "upstream = \"app\"",
    "zone = \"ram\"",
    "ttl = { 200 = \"10s\" }",
];

/// A fleet node's config with `extra_route` keys in its route and
/// `extra_fleet` keys in `[fleet]`; its tables and the route's keys in
/// another order when `reversed`.
fn config(extra_route: &str, extra_fleet: &str, reversed: bool) -> Config {
    let mut lines: Vec<&str> = ROUTE.iter().copied().chain([extra_route]).collect();
    let mut tables = TABLES.to_vec();
    let fleet =
        format!("[fleet]\nredis = \"redis://127.0.0.1:6379\"\nprefix = \"cc:\"\n{extra_fleet}\n");
    tables.push(&fleet);
    if reversed {
        lines.reverse();
        tables.reverse();
    }
    let route = format!("[[routes]]\n{}\n", lines.join("\n"));
    tables.push(&route);
    Config::from_toml(&tables.join("\n"), "test.toml").unwrap()
}

/// The same config with the route written as `route` and the `prefix`.
fn config_with(route: &str, prefix: &str) -> Config {
    let fleet = format!("[fleet]\nredis = \"redis://127.0.0.1:6379\"\nprefix = \"{prefix}\"\n");
    let text = format!("{}\n{fleet}\n[[routes]]\n{route}\n", TABLES.join("\n"));
    Config::from_toml(&text, "test.toml").unwrap()
}

fn base() -> Fingerprint {
    Fingerprint::of(&config("", "", false))
}

#[test]
fn the_same_config_has_the_same_fingerprint_whatever_its_table_order() {
    assert_eq!(base(), base());
    assert_eq!(base(), Fingerprint::of(&config("", "", true)));
    assert_eq!(base().all.len(), 16);
}

#[test]
fn a_changed_key_template_differs_in_keys_only() {
    let other = Fingerprint::of(&config("key = \"$host$uri\"", "", false));
    assert_eq!(base().differs_in(&other), [FingerprintPart::Keys]);
    assert_ne!(base().all, other.all);
}

#[test]
fn a_changed_ttl_or_zone_differs_in_routes_only() {
    let ttl = config_with(
        "upstream = \"app\"\nzone = \"ram\"\nttl = { 200 = \"20s\" }",
        "cc:",
    );
    assert_eq!(
        base().differs_in(&Fingerprint::of(&ttl)),
        [FingerprintPart::Routes]
    );
    let zone = config_with(
        "upstream = \"app\"\nzone = \"ram2\"\nttl = { 200 = \"10s\" }",
        "cc:",
    );
    assert_eq!(
        base().differs_in(&Fingerprint::of(&zone)),
        [FingerprintPart::Routes]
    );
}

#[test]
fn a_changed_prefix_differs_in_fleet_only() {
    let other = config_with(&ROUTE.join("\n"), "other:");
    assert_eq!(
        base().differs_in(&Fingerprint::of(&other)),
        [FingerprintPart::Fleet]
    );
    assert_eq!(
        base(),
        Fingerprint::of(&config_with(&ROUTE.join("\n"), "cc:"))
    );
}

#[test]
fn unrelated_keys_and_secrets_leave_it_unchanged() {
    // A password, the fleet timeout, a route's lock and refresh settings:
    // none decides a key or what is stored.
    let other = config(
        "lock_timeout = \"9s\"\nper_beta = 2.0",
        "password = \"hunter2-hunter2\"\ntimeout = \"80ms\"",
        false,
    );
    assert_eq!(base(), Fingerprint::of(&other));
    let with_password = config("", "password = \"another-password\"", false);
    assert_eq!(base(), Fingerprint::of(&with_password));
}

#[test]
fn the_fleet_secret_changes_only_whether_entries_are_signed() {
    let dir = std::env::temp_dir().join(format!("cc-fingerprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, secret: &str| {
        let path = dir.join(name);
        std::fs::write(&path, secret).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
        std::fs::set_permissions(&path, perms).unwrap();
        format!("secret_file = {:?}", path.display().to_string())
    };
    let a = config("", &write("a", &"a".repeat(40)), false);
    let b = config("", &write("b", &"b".repeat(40)), false);
    assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
    assert_eq!(
        base().differs_in(&Fingerprint::of(&a)),
        [FingerprintPart::Fleet]
    );
    // No digest holds the secret's bytes or a digest of them alone.
    let shown = serde_json::to_string(&Fingerprint::of(&a)).unwrap();
    assert!(!shown.contains("aaaa"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn parts_read_back_give_the_same_whole() {
    let fp = base();
    let back = Fingerprint::from_parts(fp.keys.clone(), fp.routes.clone(), fp.fleet.clone());
    assert_eq!(fp, back);
}
