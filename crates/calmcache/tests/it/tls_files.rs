//! TLS files as users have them (issue 16): a self-signed certificate with
//! no DNS names (`openssl req -x509 -subj /CN=localhost`) served as the
//! only, default certificate with a warning (in `check` and at start), over
//! HTTP/1.1 and HTTP/2; combined PEM files (chain and key in one, as
//! HAProxy reads them) served and reloaded on SIGHUP; bad combined files
//! refused with their path and what they hold.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{free_port, scratch, signal, wait_listening, wait_until, Child};
use calmcache::Config;
use calmcache_testkit::tls::{pinned_client, tls_get, Leaf, TestCa};
use calmcache_testkit::wire::{self, Wire};
use calmcache_testkit::Origin;
use http::Method;

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

/// A config with a plain and a TLS listener on fixed free ports, the
/// `[[server.tls]]` entries `tls`, and a cached catch-all route to `origin`.
fn config(origin: &Origin, plain: u16, tls_port: u16, tls: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:{plain}\"]\ntls_listen = [\"127.0.0.1:{tls_port}\"]\n\
         threads = 1\n{tls}\n\
         [upstreams.origin]\nservers = [\"{}\"]\n\
         [zones.ram]\nkind = \"memory\"\nmax_size = \"8MiB\"\n\
         [[routes]]\nupstream = \"origin\"\nzone = \"ram\"\nttl = {{ 200 = \"60s\" }}\n",
        origin.addr()
    )
}

fn entry(cert: &Path, key: Option<&Path>) -> String {
    let mut text = format!("[[server.tls]]\ncert = {:?}\n", cert.display().to_string());
    if let Some(key) = key {
        text.push_str(&format!("key = {:?}\n", key.display().to_string()));
    }
    text
}

/// A config for `Config::from_toml` only: listeners on port 0, the
/// `[[server.tls]]` entries `tls`, an uncached route.
fn check_only(tls: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\ntls_listen = [\"127.0.0.1:0\"]\n{tls}\
         [upstreams.o]\nservers = [\"127.0.0.1:1\"]\n[[routes]]\nupstream = \"o\"\n"
    )
}

/// The error `Config::from_toml` gives for `text`, as printed.
fn refusal(text: &str) -> String {
    Config::from_toml(text, "t.toml").unwrap_err().to_string()
}

/// `calmcache serve` on `path`, its stderr into `log`.
fn serve(path: &Path, log: &Path) -> Child {
    Child(
        Command::new(BIN)
            .args(["serve", "--config", path.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// The leaf certificate the TLS listener on `port` sends, and the raw
/// HTTP/1.1 answer to `GET path` (the client pins `der`).
async fn h1_over_tls(port: u16, der: &[u8], path: &str) -> String {
    let client = pinned_client(der, &[b"http/1.1"]);
    let addr = ([127, 0, 0, 1], port).into();
    let reply = tls_get(addr, "localhost", client, Some(path))
        .await
        .unwrap_or_else(|e| panic!("TLS to {port} with the pinned certificate: {e}"));
    assert_eq!(reply.leaf, der, "the served certificate");
    assert_eq!(reply.alpn.as_deref(), Some(&b"http/1.1"[..]));
    reply.response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_without_names_is_served_as_the_default_with_a_warning() {
    let origin = Origin::start().await;
    let dir = scratch("tls-noname");
    let leaf = Leaf::self_signed_without_names(&dir, "localhost", "localhost");
    let (plain, tls_port) = (free_port(), free_port());
    let path = dir.join("calmcache.toml");
    let text = config(
        &origin,
        plain,
        tls_port,
        &entry(&leaf.cert, Some(&leaf.key)),
    );
    std::fs::write(&path, &text).unwrap();
    // `check`: accepted (exit 0) with the warning on stderr, its path first.
    let out = Command::new(BIN)
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok"));
    let warning = format!(
        "{}: warning: server.tls[0].cert: {}: the certificate has no DNS names",
        path.display(),
        leaf.cert.display()
    );
    assert!(stderr.contains(&warning), "{stderr}");
    // `serve`: the same warning logged at start, then served.
    let log = dir.join("stderr.log");
    let child = serve(&path, &log);
    wait_listening(tls_port).await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("config: server.tls[0].cert:")
            && logged.contains("the certificate has no DNS names"),
        "{logged}"
    );
    // HTTP/1.1 over TLS (SNI `localhost`, which the certificate does not
    // list: the default is sent), cached.
    let first = h1_over_tls(tls_port, &leaf.der, "/noname").await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // HTTP/2 over TLS (SNI `calm.test`): a hit on the same object.
    let h2 = Wire::H2Tls(pinned_client(&leaf.der, &[b"h2"]));
    let addr = ([127, 0, 0, 1], tls_port).into();
    let reply = wire::send(
        &h2,
        addr,
        Method::GET,
        "localhost",
        "/noname",
        &[],
        "".into(),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.cache_status().contains("hit"),
        "{}",
        reply.cache_status()
    );
    assert_eq!(origin.hits_for("/noname"), 1);
    // No client SNI at all gets it too (an IP address is never sent as SNI).
    let client = pinned_client(&leaf.der, &[b"http/1.1"]);
    let by_ip = tls_get(addr, "127.0.0.1", client, Some("/ip"))
        .await
        .unwrap();
    assert_eq!(by_ip.leaf, leaf.der);
    assert!(
        by_ip.response.starts_with("HTTP/1.1 200"),
        "{}",
        by_ip.response
    );
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_certificate_without_names_after_the_first_entry_is_refused() {
    let dir = scratch("tls-noname-second");
    let ca = TestCa::new(&dir);
    let named = ca.leaf("named", &["a.test"]);
    let bare = Leaf::self_signed_without_names(&dir, "bare", "localhost");
    let text = check_only(&format!(
        "{}{}",
        entry(&named.cert, Some(&named.key)),
        entry(&bare.cert, Some(&bare.key)),
    ));
    let e = refusal(&text);
    assert!(
        e.contains(&format!(
            "t.toml: server.tls[1].cert: {}: the certificate has no DNS names",
            bare.cert.display()
        )),
        "{e}"
    );
    assert!(e.contains("only the first [[server.tls]] entry"), "{e}");
    assert!(e.contains(r#"names = ["example.com"]"#), "{e}");
    // With names given, the same file is fine in second place.
    let listed = text.replace(
        &entry(&bare.cert, Some(&bare.key)),
        &format!(
            "{}names = [\"localhost\"]\n",
            entry(&bare.cert, Some(&bare.key))
        ),
    );
    let config = Config::from_toml(&listed, "t.toml").unwrap();
    assert!(config.warnings().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_combined_pem_is_served_and_reloaded_on_sighup() {
    let origin = Origin::start().await;
    let dir = scratch("tls-combined");
    let ca = TestCa::new(&dir);
    let first = ca.leaf("first", &["localhost"]);
    let combined = dir.join("combined.pem");
    first.write_combined(&combined);
    let (plain, tls_port) = (free_port(), free_port());
    let path = dir.join("calmcache.toml");
    // No `key`: the certificate file holds it.
    std::fs::write(
        &path,
        config(&origin, plain, tls_port, &entry(&combined, None)),
    )
    .unwrap();
    let log = dir.join("stderr.log");
    let child = serve(&path, &log);
    wait_listening(tls_port).await;
    let addr = ([127, 0, 0, 1], tls_port).into();
    let served = tls_get(addr, "localhost", ca.client(&[b"h2"]), None)
        .await
        .unwrap();
    assert_eq!(served.leaf, first.der);
    assert_eq!(served.alpn.as_deref(), Some(&b"h2"[..]));
    // Renewed in place (another certificate and key, same file): SIGHUP.
    // (`calm.test`: the name the HTTP/2 wire asks for.)
    let second = ca.leaf("second", &["localhost", "calm.test"]);
    second.write_combined(&combined);
    signal(&child, "-HUP");
    wait_until(Duration::from_secs(10), "no reload logged", async || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("config reloaded")
    })
    .await;
    let reply = tls_get(
        addr,
        "localhost",
        ca.client(&[b"http/1.1"]),
        Some("/renewed"),
    )
    .await
    .unwrap();
    assert_eq!(reply.leaf, second.der, "the renewed certificate");
    assert!(
        reply.response.starts_with("HTTP/1.1 200"),
        "{}",
        reply.response
    );
    // `key` naming the same file as `cert` reads it the same way.
    let same = config(&origin, plain, tls_port, &entry(&combined, Some(&combined)));
    std::fs::write(&path, same).unwrap();
    signal(&child, "-HUP");
    wait_until(
        Duration::from_secs(10),
        "no second reload logged",
        async || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("config reloaded")
                .count()
                >= 2
        },
    )
    .await;
    let h2 = Wire::H2Tls(ca.client(&[b"h2"]));
    let reply = wire::send(&h2, addr, Method::GET, "localhost", "/h2", &[], "".into()).await;
    assert_eq!(reply.status, 200);
    // A broken renewal (the key left out) is refused; the last good one stays.
    std::fs::copy(&second.cert, &combined).unwrap();
    signal(&child, "-HUP");
    wait_until(Duration::from_secs(10), "no refusal logged", async || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("reload refused")
    })
    .await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains(&format!(
            "{}: no private key in it (found 1 certificate)",
            combined.display()
        )),
        "{logged}"
    );
    let still = tls_get(addr, "localhost", ca.client(&[b"h2"]), None)
        .await
        .unwrap();
    assert_eq!(still.leaf, second.der);
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_combined_files_are_refused_with_their_path_and_what_they_hold() {
    let dir = scratch("tls-combined-bad");
    let ca = TestCa::new(&dir);
    let a = ca.leaf("a", &["a.test"]);
    let b = ca.leaf("b", &["b.test"]);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let write = |name: &str, parts: &[&Path]| {
        let path = dir.join(name);
        std::fs::write(&path, parts.iter().map(|p| read(p)).collect::<String>()).unwrap();
        path
    };
    let cases = [
        (
            write("no-key.pem", &[&a.cert]),
            "no private key in it (found 1 certificate); with no `key`, the certificate \
             file must hold its private key too",
        ),
        (
            write("two-keys.pem", &[&a.cert, &a.key, &b.key]),
            "2 private keys in it (found 1 certificate and 2 private keys)",
        ),
        (
            write("wrong-key.pem", &[&a.cert, &b.key]),
            "its private key does not belong to its certificate",
        ),
        (
            write("key-only.pem", &[&a.key]),
            "no certificate in it (expected a PEM \"BEGIN CERTIFICATE\" block; found 1 private key)",
        ),
    ];
    for (file, reason) in &cases {
        for key in [None, Some(file.as_path())] {
            let e = refusal(&check_only(&entry(file, key)));
            let want = format!("t.toml: server.tls[0]: {}: {reason}", file.display());
            assert!(e.contains(&want), "want {want:?}\n got {e}");
        }
    }
    // A separate key file holding two keys names that file.
    let keys = write("keys.pem", &[&a.key, &b.key]);
    let e = refusal(&check_only(&entry(&a.cert, Some(&keys))));
    assert!(
        e.contains(&format!(
            "{}: cannot read the private key: 2 private keys in it",
            keys.display()
        )),
        "{e}"
    );
    // `check` on the binary: exit 2, the file named.
    let path = dir.join("calmcache.toml");
    std::fs::write(&path, check_only(&entry(&cases[0].0, None))).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&cases[0].0.display().to_string()),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
