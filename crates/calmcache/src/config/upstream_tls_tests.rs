//! Config tests for upstreams over TLS and server weights: the server
//! forms, every TLS key's problems (with its TOML path and the file), the
//! `tls_verify = false` warning, and `weight`'s range.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use super::tests::{addresses, FleetTlsFiles as Files};
use super::{Config, ConfigError, Problem};

fn config(servers: &str, keys: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\n[upstreams.app]\nservers = {servers}\n\
         {keys}\n\n[[routes]]\nupstream = \"app\"\n"
    )
}

/// Whether each server is reached over TLS, in order.
fn tls_of(upstream: &super::UpstreamConfig) -> Vec<bool> {
    upstream.servers.iter().map(|s| s.scheme.is_tls()).collect()
}

/// Each server's weight, in order.
fn weights(upstream: &super::UpstreamConfig) -> Vec<u32> {
    upstream.servers.iter().map(|s| s.weight).collect()
}

fn load(servers: &str, keys: &str) -> Config {
    let text = config(servers, keys);
    Config::from_toml(&text, "test.toml").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn problems(servers: &str, keys: &str) -> Vec<Problem> {
    match Config::from_toml(&config(servers, keys), "test.toml") {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

/// The one problem's path and its line.
fn one(servers: &str, keys: &str) -> (String, String) {
    let found = problems(servers, keys);
    assert_eq!(found.len(), 1, "expected one problem, got {found:#?}");
    (found[0].path.clone(), found[0].to_string())
}

const HTTPS: &str = r#"["https://origin.test"]"#;

#[test]
fn servers_take_http_and_https_origins() {
    let c = load(
        r#"["https://a.test", "https://b.test:8443/", "http://c.test", "d.test:81"]"#,
        "",
    );
    let u = &c.upstreams[0];
    assert_eq!(
        addresses(u),
        ["a.test:443", "b.test:8443", "c.test:80", "d.test:81"]
    );
    assert_eq!(tls_of(u), [true, true, false, false]);
    let tls = u.tls.as_ref().unwrap();
    assert!(tls.verify);
    assert_eq!(
        (&tls.server_name, &tls.ca, &tls.client),
        (&None, &None, &None)
    );
    assert!(
        c.summary().contains("app: 4 servers, some tls"),
        "{}",
        c.summary()
    );

    let all = load(
        r#"["10.0.0.1:443", { address = "10.0.0.2:443" }]"#,
        "tls = true",
    );
    assert_eq!(tls_of(&all.upstreams[0]), [true, true]);
    assert!(all.summary().contains("app: 2 servers, tls"));

    let plain = load(r#"["127.0.0.1:8081"]"#, "");
    assert_eq!(plain.upstreams[0].tls, None);
    assert_eq!(weights(&plain.upstreams[0]), [1]);
}

#[test]
fn schemes_that_contradict_tls_are_refused() {
    let (path, line) = one(r#"["http://a:80"]"#, "tls = true");
    assert_eq!(path, "upstreams.app.servers[0]");
    assert!(
        line.contains("an http:// server in an upstream with tls = true"),
        "{line}"
    );
    let (path, line) = one(HTTPS, "tls = false");
    assert_eq!(path, "upstreams.app.servers[0]");
    assert!(line.contains("tls = false"), "{line}");
    for bad in [
        r#"["ftp://a:21"]"#,
        r#"["https://a/x"]"#,
        r#"["https://:443"]"#,
    ] {
        let (path, _) = one(bad, "");
        assert_eq!(path, "upstreams.app.servers[0]", "{bad}");
    }
}

#[test]
fn tls_keys_without_a_tls_server_are_refused() {
    let f = Files::new("unused");
    let keys = format!(
        "tls_server_name = \"a.test\"\ntls_ca_file = {:?}\ntls_verify = true\n\
         tls_client_cert = {:?}\ntls_client_key = {:?}",
        f.ca, f.cert, f.key
    );
    let found = problems(r#"["127.0.0.1:8081"]"#, &keys);
    let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "upstreams.app.tls_server_name",
            "upstreams.app.tls_ca_file",
            "upstreams.app.tls_verify",
            "upstreams.app.tls_client_cert",
            "upstreams.app.tls_client_key"
        ]
    );
    assert!(found[0].to_string().contains("only used over TLS"));
}

#[test]
fn every_bad_tls_key_and_file_is_named() {
    let f = Files::new("bad");
    let missing = f.dir.join("missing.pem").display().to_string();
    let junk = f.write("junk.pem", "not a pem file\n");
    let cases: Vec<(String, &str, String)> = vec![
        (
            "tls_server_name = \"not a name\"".into(),
            "upstreams.app.tls_server_name",
            "is not a DNS name or IP address".into(),
        ),
        (
            format!("tls_ca_file = {missing:?}"),
            "upstreams.app.tls_ca_file",
            format!("{missing}: cannot read the CA certificates"),
        ),
        (
            format!("tls_ca_file = {junk:?}"),
            "upstreams.app.tls_ca_file",
            format!("{junk}: no certificate in it"),
        ),
        (
            format!("tls_verify = false\ntls_ca_file = {:?}", f.ca),
            "upstreams.app.tls_ca_file",
            "not used: tls_verify = false".into(),
        ),
        (
            format!("tls_client_key = {:?}", f.key),
            "upstreams.app.tls_client_cert",
            "tls_client_key is set but not tls_client_cert".into(),
        ),
        (
            format!(
                "tls_client_cert = {missing:?}\ntls_client_key = {:?}",
                f.key
            ),
            "upstreams.app.tls_client_cert",
            format!("{missing}: cannot read the certificate"),
        ),
        (
            format!("tls_client_cert = {:?}\ntls_client_key = {junk:?}", f.cert),
            "upstreams.app.tls_client_key",
            format!("{junk}: cannot read the private key"),
        ),
        (
            format!(
                "tls_client_cert = {:?}\ntls_client_key = {:?}",
                f.cert, f.other_key
            ),
            "upstreams.app.tls_client_key",
            "this key does not belong to the certificate".into(),
        ),
        (
            // No tls_client_key and no key in the certificate's file.
            format!("tls_client_cert = {:?}", f.cert),
            "upstreams.app.tls_client_cert",
            format!(
                "{}: no private key in it, and tls_client_key is not set",
                f.cert
            ),
        ),
        (
            "tls_verify = \"no\"".into(),
            "upstreams.app.tls_verify",
            "invalid type".into(),
        ),
    ];
    for (keys, path, says) in cases {
        let (at, line) = one(HTTPS, &keys);
        assert_eq!(at, path, "{keys}: {line}");
        assert!(line.contains(&says), "{keys}: {line}");
    }
}

#[test]
fn tls_files_load_and_the_key_may_share_the_certificate_file() {
    let f = Files::new("good");
    let c = load(
        HTTPS,
        &format!(
            "tls_server_name = \"origin.example\"\ntls_ca_file = {:?}\n\
             tls_client_cert = {:?}\ntls_client_key = {:?}",
            f.ca, f.cert, f.key
        ),
    );
    let tls = c.upstreams[0].tls.as_ref().unwrap();
    assert_eq!(tls.server_name.as_deref(), Some("origin.example"));
    assert_eq!(tls.ca.as_ref().unwrap().path, Path::new(&f.ca));
    let mut combined = std::fs::read_to_string(&f.cert).unwrap();
    combined.push_str(&std::fs::read_to_string(&f.key).unwrap());
    let both = f.write("both.pem", &combined);
    let c = load(HTTPS, &format!("tls_client_cert = {both:?}"));
    let (cert, key) = c.upstreams[0].tls.as_ref().unwrap().client.clone().unwrap();
    assert_eq!(cert.path, PathBuf::from(&both));
    assert_eq!(key.path, PathBuf::from(&both));
    assert!(c.warnings().is_empty());
}

#[test]
fn tls_verify_false_is_warned_about() {
    let c = load(HTTPS, "tls_verify = false");
    assert!(!c.upstreams[0].tls.as_ref().unwrap().verify);
    let warnings = c.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let line = warnings[0].to_string();
    assert!(
        line.starts_with("upstreams.app.tls_verify: false: ") && line.contains("NOT checked"),
        "{line}"
    );
}

#[test]
fn weights_are_one_to_a_thousand() {
    let c = load(
        r#"[{ address = "a:80", weight = 3 }, "b:80", { address = "c:80", weight = 1000 }]"#,
        "",
    );
    assert_eq!(weights(&c.upstreams[0]), [3, 1, 1000]);
    for bad in ["0", "-1", "1001", "4294967296"] {
        let servers = format!(r#"[{{ address = "a:80", weight = {bad} }}]"#);
        let (path, line) = one(&servers, "");
        assert_eq!(path, "upstreams.app.servers[0].weight", "{bad}");
        assert!(line.contains("must be from 1 to 1000"), "{line}");
    }
}
