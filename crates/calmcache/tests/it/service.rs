//! Installed as a service (issue 16): systemd's readiness protocol spoken by
//! a real `calmcache serve` to a datagram socket the test binds (as
//! systemd's `$NOTIFY_SOCKET`), the unit in `dist/` verified by
//! `systemd-analyze`, the packaged config by `calmcache check`, and the
//! files the `Containerfile` copies.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use calmcache_testkit::tools::debian_tool;
use calmcache_testkit::{get, Origin};
use tokio::net::UnixDatagram;

use crate::{scratch, signal, Child};

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// `calmcache serve` on `config` with `NOTIFY_SOCKET=notify_socket`.
fn serve(config: &Path, notify_socket: &str) -> Child {
    Child(
        Command::new(BIN)
            .args(["serve", "-c"])
            .arg(config)
            .env("NOTIFY_SOCKET", notify_socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The next datagram, within 20 s.
async fn next(socket: &UnixDatagram) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), socket.recv(&mut buf))
        .await
        .expect("no notification within 20 s")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The proxy address a READY=1 message's STATUS names ("serving on A, ...").
fn serving_addr(ready: &str) -> String {
    let status = ready
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("no STATUS= in {ready:?}"));
    let after = status
        .strip_prefix("serving on ")
        .unwrap_or_else(|| panic!("STATUS does not start with the listeners: {status:?}"));
    after.split([' ', ',']).next().unwrap().to_owned()
}

fn config(dir: &Path, origin: &Origin) -> PathBuf {
    let path = dir.join("calmcache.toml");
    let disk = dir.join("disk");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nthreads = 1\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [upstreams.app]\nservers = [\"{}\"]\n\
             [zones.disk]\nkind = \"disk\"\npath = {:?}\nmax_size = \"16MiB\"\n\
             [[routes]]\nupstream = \"app\"\nzone = \"disk\"\nttl = {{ 200 = \"10s\" }}\n",
            origin.addr(),
            disk.display().to_string()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_hears_ready_once_the_port_serves_and_stopping_on_sigterm() {
    let origin = Origin::start().await;
    let dir = scratch("notify");
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let mut child = serve(&config(&dir, &origin), socket_path.to_str().unwrap());
    let ready = next(&socket).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    // Ready means serving: the first request after it is answered, and
    // /readyz (listeners bound, the disk zone's loader started) says ready.
    let addr = serving_addr(&ready);
    let reply = get(&format!("http://{addr}/a")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let admin = ready
        .split("admin on ")
        .nth(1)
        .unwrap_or_else(|| panic!("no admin address in {ready:?}"));
    let readyz = get(&format!("http://{}/readyz", admin.trim())).await;
    assert_eq!(readyz.status, 200, "{readyz:?}");
    assert_eq!(readyz.body, "ready\n");
    signal(&child, "-TERM");
    let stopping = next(&socket).await;
    assert!(
        stopping.starts_with("STOPPING=1\nSTATUS=stopping"),
        "{stopping:?}"
    );
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_is_reloading_then_ready_on_an_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let origin = Origin::start().await;
    let dir = scratch("notify-reload");
    let name = format!(
        "calmcache-it-notify-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    );
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let std_socket = std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap();
    std_socket.set_nonblocking(true).unwrap();
    let socket = UnixDatagram::from_std(std_socket).unwrap();
    let path = config(&dir, &origin);
    let child = serve(&path, &format!("@{name}"));
    let ready = next(&socket).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");

    signal(&child, "-HUP");
    let reloading = next(&socket).await;
    let mut lines = reloading.lines();
    assert_eq!(lines.next(), Some("RELOADING=1"), "{reloading:?}");
    let usec = lines.next().and_then(|l| l.strip_prefix("MONOTONIC_USEC="));
    assert!(
        usec.is_some_and(|u| u.parse::<u64>().is_ok_and(|u| u > 0)),
        "{reloading:?}"
    );
    let reloaded = next(&socket).await;
    assert!(
        reloaded.starts_with("READY=1\nSTATUS=reloaded; serving on "),
        "{reloaded:?}"
    );

    // A refused reload ends with READY=1 too: the previous config serves.
    std::fs::write(&path, "[server]\nlisten = 1\n").unwrap();
    signal(&child, "-HUP");
    assert!(next(&socket).await.starts_with("RELOADING=1\n"));
    let refused = next(&socket).await;
    assert!(
        refused.starts_with("READY=1\nSTATUS=reload refused"),
        "{refused:?}"
    );
    assert_eq!(
        get(&format!("http://{}/b", serving_addr(&ready)))
            .await
            .status,
        200
    );
    signal(&child, "-TERM");
    assert!(next(&socket).await.starts_with("STOPPING=1\n"));
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_unit_in_dist_passes_systemd_analyze_verify() {
    let Some(analyze) = debian_tool("systemd-analyze", "systemd") else {
        return;
    };
    let root = scratch("unit-root");
    // /etc/systemd/system: first in the search path, so a calmcache.service
    // among the host's units copied below cannot shadow it.
    let units = root.join("etc/systemd/system");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::copy(
        repo("dist/calmcache.service"),
        units.join("calmcache.service"),
    )
    .unwrap();
    // The programs the unit runs, as stand-ins (the package test verifies
    // the unit with the real binary).
    for program in ["usr/bin/calmcache", "bin/kill"] {
        let at = root.join(program);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let problems = verify_unit(&analyze, &root);
    assert!(problems.is_empty(), "systemd-analyze verify:\n{problems}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `systemd-analyze verify calmcache.service` against `root` (the unit in
/// `root/etc/systemd/system`, the host's own units copied in for
/// `multi-user.target` and the like); its complaints, empty when none.
/// `verify` exits 0 on unknown keys and bad values, so any output counts.
fn verify_unit(analyze: &Path, root: &Path) -> String {
    let host_units = Path::new("/usr/lib/systemd/system");
    let copied = root.join("usr/lib/systemd");
    std::fs::create_dir_all(&copied).unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(host_units)
        .arg(&copied)
        .status()
        .unwrap();
    assert!(status.success(), "cp -a {}", host_units.display());
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", root.display()))
        .arg("calmcache.service")
        .output()
        .unwrap();
    let mut problems = String::from_utf8_lossy(&out.stderr).into_owned();
    problems.push_str(&String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        problems.push_str(&format!("\n(exit {:?})", out.status.code()));
    }
    problems
}

#[test]
fn the_packaged_config_passes_check() {
    // Its paths point under /var: checked here with them moved to a temp
    // dir (check creates and probes the zone directory).
    let dir = scratch("dist-config");
    let text = std::fs::read_to_string(repo("dist/calmcache.toml")).unwrap();
    assert!(
        text.contains("/var/cache/calmcache/"),
        "the disk zone moved?"
    );
    let moved = text
        .replace(
            "/var/cache/calmcache",
            &dir.join("cache").display().to_string(),
        )
        .replace("/var/log/calmcache", &dir.join("log").display().to_string());
    let path = dir.join("calmcache.toml");
    std::fs::write(&path, moved).unwrap();
    let out = Command::new(BIN)
        .args(["check", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_containerfile_copies_files_that_exist() {
    // Images cannot be built here (no registry); what can be checked is
    // that every COPY from the build context names a file of the repository.
    let text = std::fs::read_to_string(repo("Containerfile")).unwrap();
    let mut copies = 0;
    for line in text.lines().map(str::trim) {
        let Some(args) = line.strip_prefix("COPY ") else {
            continue;
        };
        if args.contains("--from=") {
            continue;
        }
        let words: Vec<&str> = args
            .split_whitespace()
            .filter(|w| !w.starts_with("--"))
            .collect();
        for source in &words[..words.len() - 1] {
            assert!(
                repo(source).exists(),
                "Containerfile: COPY {source}: no such file"
            );
            copies += 1;
        }
    }
    assert!(copies > 0, "no COPY from the build context");
    // It moves the packaged config's port with sed: the text must be there.
    let config = std::fs::read_to_string(repo("dist/calmcache.toml")).unwrap();
    assert!(text.contains(r#"s/"0.0.0.0:80"/"0.0.0.0:8080"/"#));
    assert!(config.contains(r#"listen = ["0.0.0.0:80"]"#), "{config}");
}

#[test]
fn completions_and_the_man_page_come_from_the_cli() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("serve") && script.contains("check"),
            "{shell}: {script}"
        );
    }
    let out = Command::new(BIN).arg("manpage").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH calmcache 1"),
        "{page}"
    );
    assert!(page.contains("serve"), "{page}");
    // Hidden from the help, which lists completions.
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("completions") && !help.contains("manpage"),
        "{help}"
    );
}
