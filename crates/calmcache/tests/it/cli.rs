//! The binary: `check` exit codes and messages, `demo` banner and taken ports.

use crate::free_port;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

/// Runs `calmcache check` on `text`, written to a temp file removed afterwards.
fn check(text: &str) -> Output {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let path = std::env::temp_dir().join(format!("calmcache-test-{}-{n}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = check_file(path.to_str().unwrap());
    let _ = std::fs::remove_file(&path);
    out
}

fn check_file(path: &str) -> Output {
    Command::new(BIN)
        .args(["check", "--config", path])
        .output()
        .unwrap()
}

#[test]
fn check_reports_every_problem_with_its_path_and_exits_2() {
    let out = check(
        r#"
[server]
listen = ["127.0.0.1:8080"]
[upstreams.app]
servers = ["127.0.0.1:8081"]
read_timeout = "60"
[zones.ssd]
kind = "memory"
max_size = "1MiB"
[[routes]]
upstream = "app"
[[routes]]
upstream = "nope"
zone = "sdd"
match = '(unclosed'
"#,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "upstreams.app.read_timeout",
        "routes[1].upstream",
        "routes[1].zone",
        "did you mean \"ssd\"",
        "routes[1].match",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

#[test]
fn check_prints_a_summary_for_a_good_config() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config.example.toml");
    let out = check_file(example);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(summary.lines().count(), 1);
    assert!(summary.starts_with("ok"), "{summary}");
}

#[test]
fn unknown_keys_are_errors_with_their_path() {
    let out = check("[server]\nlisten = [\"127.0.0.1:8080\"]\nlisten_typo = 1\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.listen_typo"));
}

#[test]
fn demo_prints_the_proxy_url_first_and_serves_cached_pages() {
    let (p, a, o) = (free_port(), free_port(), free_port());
    let mut child = Command::new(BIN)
        .args([
            "demo",
            "--listen",
            &format!("127.0.0.1:{p}"),
            "--admin",
            &format!("127.0.0.1:{a}"),
        ])
        .args(["--origin", &format!("127.0.0.1:{o}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Regression: the demo used to panic on a closed stdout ("failed printing
    // to stdout") when its reader stopped after the first line, killing the
    // origin under a running proxy. Read one line and close the pipe on purpose.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(first.trim(), format!("http://127.0.0.1:{p}/"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let reply = rt.block_on(calmcache_testkit::get(&format!("http://127.0.0.1:{p}/")));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.body.contains("Generated at"));
    assert!(reply.cache_status().starts_with("calmcache;"));
}

#[test]
fn demo_on_a_taken_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .args([
            "demo",
            "--listen",
            &addr,
            "--admin",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .args(["--origin", &format!("127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

/// Regression (issue 12, item 7): `check` passed a disk zone on a read-only
/// file system and an access log in a missing directory; `serve` then
/// refused the first (exit 1, as for a runtime failure). Both now report
/// both problems, each with its TOML path, and exit 2.
#[test]
fn check_and_serve_report_a_read_only_zone_and_a_missing_log_directory_alike() {
    let base = crate::scratch("check-env");
    let mut ro = base.join("ro");
    let mounted = crate::disk_zone::Tmpfs::mount_with(&ro, "ro,size=1m");
    // Where tests may not mount (no CAP_SYS_ADMIN), another unusable
    // directory: one without write permission (non-root), or below a file
    // (root, whom permissions do not stop).
    let root = crate::disk_full::is_root();
    if mounted.is_none() {
        eprintln!("\n!!! check_and_serve_report...: no tmpfs here; a stand-in for a read-only file system\n");
        if root {
            std::fs::write(base.join("file"), b"in the way").unwrap();
            ro = base.join("file/zone");
        } else {
            std::fs::create_dir_all(&ro).unwrap();
            let mut perms = std::fs::metadata(&ro).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
            std::fs::set_permissions(&ro, perms).unwrap();
        }
    }
    let config = base.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{}\"]\n[upstreams.o]\nservers = [\"127.0.0.1:9\"]\n\
             [zones.d]\nkind = \"disk\"\nmax_size = \"1MiB\"\npath = {:?}\n\
             [[routes]]\nupstream = \"o\"\nzone = \"d\"\n\
             [access_log]\npath = {:?}\n",
            free_port(),
            ro.display().to_string(),
            base.join("no-such-dir/access.log").display().to_string()
        ),
    )
    .unwrap();
    let out = check_file(config.to_str().unwrap());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    let zone_line = err
        .lines()
        .find(|l| l.contains("zones.d.path"))
        .unwrap_or_else(|| panic!("no zone problem in:\n{err}"));
    if mounted.is_some() {
        assert!(zone_line.contains("is not writable"), "{zone_line}");
        assert!(zone_line.contains("Read-only file system"), "{zone_line}");
    }
    let log_line = err
        .lines()
        .find(|l| l.contains("access_log.path"))
        .unwrap_or_else(|| panic!("no access log problem in:\n{err}"));
    assert!(log_line.contains("does not exist"), "{log_line}");
    assert!(!base.join("no-such-dir").exists(), "check creates nothing");

    // `serve` refuses with the same lines and the same exit code.
    let served = crate::disk_full::serve_until_exit(&config, std::time::Duration::from_secs(20));
    let serve_err = String::from_utf8_lossy(&served.stderr);
    assert_eq!(served.status.code(), Some(2), "{serve_err}");
    for line in [zone_line, log_line] {
        assert!(
            serve_err.contains(line),
            "serve lacks {line:?}:\n{serve_err}"
        );
    }
    drop(mounted);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn check_says_what_it_checks() {
    let out = Command::new(BIN)
        .args(["check", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("not the ports"), "{help}");
}
