//! The fingerprint is stable (runs, the TOML's key order, unrelated keys,
//! secrets) and changes with what decides keys and storing, in the part
//! that names it.

#![allow(clippy::unwrap_used)]

use super::{Fingerprint, FingerprintPart};
use crate::config::Config;

/// A fleet node's config with `extra_route` keys in its route and
/// `extra_fleet` keys in `[fleet]`, its tables and the route's keys in another
/// order when `reversed`.
fn config(extra_route: &str, extra_fleet: &str, reversed: bool) -> Config {
    let mut lines = vec![
        "upstream = \"app\"",
        "zone = \"ram\"",
        "ttl = { 200 = \"10s\" }",
        extra_route,
    ];
    if reversed {
        lines.reverse();
    }
    let route = lines.join("\n");
    let fleet = format!("redis = \"redis://127.0.0.1:6379\"\nprefix = \"cc:\"\n{extra_fleet}");
    let tables = [
        format!("[server]\nlisten = [\"127.0.0.1:0\"]\n"),
        format!("[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n"),
        format!("[zones.ram]\nkind = \"memory\"\nmax_size = \"10MiB\"\n"),
        format!("[zones.ram2]\nkind = \"memory\"\nmax_size = \"10MiB\"\n"),
        format!("[fleet]\n{fleet}"),
        format!("[[routes]]\n{route}"),
    ];
    let mut text: Vec<&str> = tables.iter().map(String::as_str).collect();
    if reversed {
        // Tables in another order, the last (the route) kept last.
        let route = text.pop().unwrap();
        text.reverse();
        text.push(route);
    }
    Config::from_toml(&text.join("\n"), "test.toml").unwrap()
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
    let ttl = config("", "", false);
    let mut longer = ttl.clone();
    let text = "upstream = \"app\"\nzone = \"ram\"\nttl = { 200 = \"20s\" }\n";
    longer.routes = config_with_route(text).routes;
    assert_eq!(
        Fingerprint::of(&ttl).differs_in(&Fingerprint::of(&longer)),
        [FingerprintPart::Routes]
    );
    let zone = config_with_route("upstream = \"app\"\nzone = \"ram2\"\nttl = { 200 = \"10s\" }\n");
    assert_eq!(
        base().differs_in(&Fingerprint::of(&zone)),
        [FingerprintPart::Routes]
    );
}

fn config_with_route(route: &str) -> Config {
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n\
         [zones.ram]\nkind = \"memory\"\nmax_size = \"10MiB\"\n\
         [zones.ram2]\nkind = \"memory\"\nmax_size = \"10MiB\"\n\
         [fleet]\nredis = \"redis://127.0.0.1:6379\"\nprefix = \"cc:\"\n[[routes]]\n{route}"
    );
    Config::from_toml(&text, "test.toml").unwrap()
}

#[test]
fn a_changed_prefix_differs_in_fleet_only() {
    let text =
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n\
         [zones.ram]\nkind = \"memory\"\nmax_size = \"10MiB\"\n\
         [zones.ram2]\nkind = \"memory\"\nmax_size = \"10MiB\"\n\
         [fleet]\nredis = \"redis://127.0.0.1:6379\"\nprefix = \"other:\"\n[[routes]]\n\
         upstream = \"app\"\nzone = \"ram\"\nttl = { 200 = \"10s\" }\n";
    let other = Fingerprint::of(&Config::from_toml(text, "test.toml").unwrap());
    assert_eq!(base().differs_in(&other), [FingerprintPart::Fleet]);
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
