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

/// Regression (issue 16): `check` stopped at the first unknown key,
/// although the README promises every problem at once. Three unknown keys
/// in three tables and a bad value: one run, four lines, exit 2.
#[test]
fn check_reports_every_unknown_key_and_bad_value_in_one_run() {
    let out = check(
        r#"
[server]
listen = ["127.0.0.1:8080"]
keepalive_timout = "75s"
[upstreams.app]
servers = ["127.0.0.1:8081"]
conect_timeout = "5s"
[zones.ram]
kind = "memory"
max_size = "12 parsecs"
[[routes]]
upstream = "app"
zone = "ram"
refrsh = "sus"
"#,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    for needle in [
        r#"server.keepalive_timout: unknown field `keepalive_timout`"#,
        r#"(line 4, column 1) (hint: did you mean "keepalive_timeout"?)"#,
        r#"upstreams.app.conect_timeout: unknown field `conect_timeout`"#,
        r#"(hint: did you mean "connect_timeout"?)"#,
        r#"routes[0].refrsh: unknown field `refrsh`"#,
        r#"(hint: did you mean "refresh"?)"#,
        r#"zones.ram.max_size: "12 parsecs""#,
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
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

/// `calmcache demo --fleet` run by a test: stopped with SIGTERM when
/// dropped (a SIGKILL would leave its redis-server running), killed if it
/// does not stop.
struct FleetDemo(std::process::Child);

impl Drop for FleetDemo {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..200 {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `redis-cli`-free: one inline command to Redis at `addr`, its raw reply.
fn redis_command(addr: &str, command: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    conn.write_all(format!("{command}\r\n").as_bytes()).unwrap();
    let mut reply = vec![0u8; 4096];
    let n = conn.read(&mut reply).unwrap();
    String::from_utf8_lossy(&reply[..n]).into_owned()
}

#[test]
fn demo_fleet_starts_redis_and_three_nodes_serves_on_each_and_stops_cleanly() {
    let mut child = Command::new(BIN)
        .args(["demo", "--fleet", "--listen", "127.0.0.1:0"])
        .args(["--admin", "127.0.0.1:0", "--origin", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut demo = FleetDemo(child);
    let mut banner = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let last = line.starts_with("Ctrl-C");
        banner.push(line);
        if last {
            break;
        }
    }
    let text = banner.join("\n");
    // "  node N: http://PROXY/   dashboard: http://ADMIN/ ..."
    let nodes: Vec<(String, String)> = banner
        .iter()
        .filter_map(|l| l.trim().strip_prefix("node "))
        .map(|l| {
            let urls: Vec<&str> = l
                .split_whitespace()
                .filter(|w| w.starts_with("http://"))
                .collect();
            (urls[0].to_owned(), urls[1].to_owned())
        })
        .collect();
    assert_eq!(nodes.len(), 3, "three nodes in:\n{text}");
    assert_eq!(banner[0], nodes[0].0, "the first line is node 1's URL");
    let redis = banner
        .iter()
        .find_map(|l| l.trim().strip_prefix("redis:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.strip_prefix("redis://"))
        .unwrap_or_else(|| panic!("no redis address in:\n{text}"))
        .to_owned();
    assert!(text.contains("Host: demo"), "{text}");
    // A Redis that keeps nothing on disk.
    assert!(redis_command(&redis, "CONFIG GET save").contains("$0\r\n"));
    assert!(redis_command(&redis, "CONFIG GET appendonly").contains("no"));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let host = [("host", "demo")];
    let first = rt.block_on(calmcache_testkit::get_with(
        http::Method::GET,
        &format!("{}cli-fleet", nodes[0].0),
        &host,
    ));
    assert_eq!(first.status, 200, "{first:?}");
    assert!(first.body.contains("Generated at"));
    // The copy node 1 stored reaches Redis off the request path.
    let committed = crate::wait_until(
        std::time::Duration::from_secs(10),
        "node 1's copy committed to redis",
        async || {
            let status = calmcache_testkit::get(&format!("{}status", nodes[0].1)).await;
            let status: serde_json::Value = serde_json::from_str(&status.body).unwrap();
            status["fleet"]["commits"].as_u64() >= Some(1)
        },
    );
    rt.block_on(committed);
    for (proxy, admin) in &nodes {
        let reply = rt.block_on(calmcache_testkit::get_with(
            http::Method::GET,
            &format!("{proxy}cli-fleet"),
            &host,
        ));
        assert_eq!(reply.status, 200, "{proxy}: {reply:?}");
        assert!(reply.cache_status().starts_with("calmcache;"), "{reply:?}");
        assert_eq!(reply.body, first.body, "{proxy}: the fleet's one copy");
        let status = rt.block_on(calmcache_testkit::get(&format!("{admin}status")));
        let status: serde_json::Value = serde_json::from_str(&status.body).unwrap();
        assert_eq!(status["fleet"]["breaker"], "closed", "{admin}: {status:#}");
    }

    // SIGTERM: every node, the origin and Redis stop; exit 0.
    let pid = demo.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let exited = rt.block_on(crate::wait_until(
        std::time::Duration::from_secs(10),
        "the demo stopping after SIGTERM",
        async || demo.0.try_wait().unwrap(),
    ));
    assert!(exited.success(), "{exited}");
    assert!(
        std::net::TcpStream::connect(&redis).is_err(),
        "its redis-server is gone"
    );
    for (proxy, _) in &nodes {
        let addr = proxy.trim_start_matches("http://").trim_end_matches('/');
        assert!(std::net::TcpStream::connect(addr).is_err(), "{addr} closed");
    }
}

#[test]
fn demo_fleet_without_redis_server_names_the_debian_package() {
    let empty = crate::scratch("no-redis");
    let out = Command::new(BIN)
        .args(["demo", "--fleet", "--listen", "127.0.0.1:0"])
        .args(["--admin", "127.0.0.1:0", "--origin", "127.0.0.1:0"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&empty);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("redis-server not found on PATH")
            && err.contains("apt-get install redis-server"),
        "{err}"
    );
}
