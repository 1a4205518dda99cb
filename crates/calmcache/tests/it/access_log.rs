//! The access log: the line formats as written by a running proxy, bytes and
//! cache status per request, reopening after logrotate's rename (in process
//! and by SIGUSR1 to the binary), and a bad path stopping the start.

use crate::{free_port, scratch, wait_until, Child};
use std::path::Path;
use std::time::Duration;

use calmcache_testkit::{get, get_with, Origin, Proxy};
use http::Method;

/// The file's lines once it has at least `n` (polled, at most 5 s).
async fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    let what = format!("{} lines in {}", n, path.display());
    wait_until(Duration::from_secs(10), &what, async || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() < n {
            return None;
        }
        assert!(text.ends_with('\n'), "whole lines only: {text:?}");
        Some(lines)
    })
    .await
}

/// The fields of a `combined` line, checked against its whole shape.
struct Combined {
    time: String,
    request: String,
    status: u16,
    bytes: usize,
    referer: String,
    user_agent: String,
    cache_status: String,
    upstream_addr: String,
    upstream_time: String,
    request_time: f64,
}

fn parse_combined(line: &str) -> Combined {
    let shape = regex::Regex::new(
        r#"^127\.0\.0\.1 - - \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" "([^"]*)" (\S+) (\S+) (\d+\.\d{3})$"#,
    )
    .unwrap();
    let c = shape
        .captures(line)
        .unwrap_or_else(|| panic!("not a combined line: {line:?}"));
    let time = regex::Regex::new(r"^\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000$").unwrap();
    assert!(time.is_match(&c[1]), "{line}");
    Combined {
        time: c[1].to_owned(),
        request: c[2].to_owned(),
        status: c[3].parse().unwrap(),
        bytes: c[4].parse().unwrap(),
        referer: c[5].to_owned(),
        user_agent: c[6].to_owned(),
        cache_status: c[7].to_owned(),
        upstream_addr: c[8].to_owned(),
        upstream_time: c[9].to_owned(),
        request_time: c[10].parse().unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_lines_carry_request_status_bytes_and_cache_status() {
    let origin = Origin::start().await;
    let dir = scratch("log-combined");
    let path = dir.join("access.log");
    let proxy = Proxy::new(&origin)
        .access_log(&path, "combined")
        .start()
        .await;
    let client = [
        ("user-agent", "tester \"quoted\" \\ agent"),
        ("referer", "http://example.com/from"),
    ];
    let miss = get_with(Method::GET, &proxy.url("/a?x=1"), &client).await;
    assert_eq!(miss.status, 200);
    let hit = get(&proxy.url("/a?x=1")).await;
    let head = get_with(Method::HEAD, &proxy.url("/a?x=1"), &[]).await;
    // Over max_object_size (1 MiB): streamed through, not stored.
    let big = get_with(
        Method::GET,
        &proxy.url("/big"),
        &[("x-origin-body-bytes", "2000000")],
    )
    .await;
    assert_eq!(big.bytes.len(), 2_000_000);
    let lines = wait_lines(&path, 4).await;
    assert_eq!(lines.len(), 4, "{lines:#?}");

    let first = parse_combined(&lines[0]);
    assert_eq!(first.request, "GET /a?x=1 HTTP/1.1");
    assert_eq!((first.status, first.bytes), (200, miss.bytes.len()));
    assert_eq!(first.cache_status, "MISS");
    assert_eq!(first.referer, "http://example.com/from");
    // Quotes and backslashes escaped as NGINX does.
    assert_eq!(first.user_agent, r"tester \x22quoted\x22 \x5C agent");
    // A miss names the upstream server and how long it took.
    assert_eq!(
        first.upstream_addr,
        origin.addr().to_string(),
        "{}",
        lines[0]
    );
    let upstream_time: f64 = first.upstream_time.parse().unwrap();
    assert!((0.0..5.0).contains(&upstream_time), "{}", lines[0]);
    assert!(first.request_time < 5.0, "{}", lines[0]);

    let second = parse_combined(&lines[1]);
    assert_eq!(second.request, "GET /a?x=1 HTTP/1.1");
    assert_eq!((second.status, second.bytes), (200, hit.bytes.len()));
    assert_eq!(second.cache_status, "HIT");
    assert_eq!(
        (second.referer.as_str(), second.user_agent.as_str()),
        ("-", "-")
    );
    assert_eq!(
        (second.upstream_addr.as_str(), second.upstream_time.as_str()),
        ("-", "-"),
        "a hit made no upstream call"
    );
    assert!(!second.time.is_empty());

    let third = parse_combined(&lines[2]);
    assert_eq!(third.request, "HEAD /a?x=1 HTTP/1.1");
    assert_eq!((third.status, third.bytes), (head.status.as_u16(), 0));
    assert_eq!(third.cache_status, "HIT");

    let fourth = parse_combined(&lines[3]);
    assert_eq!(fourth.request, "GET /big HTTP/1.1");
    assert_eq!((fourth.status, fourth.bytes), (200, 2_000_000));
    assert_eq!(fourth.cache_status, "MISS");
    assert_eq!(proxy.status().await["access_log"]["dropped"], 0);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_parse_with_every_field() {
    let origin = Origin::start().await;
    let dir = scratch("log-json");
    let path = dir.join("access.json");
    let proxy = Proxy::new(&origin).access_log(&path, "json").start().await;
    let miss = get_with(
        Method::GET,
        &proxy.url("/j"),
        &[("user-agent", "line\tbreak \"ua\"")],
    )
    .await;
    wait_lines(&path, 1).await;
    let hit = get(&proxy.url("/j")).await;
    let lines = wait_lines(&path, 2).await;
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    for (v, (reply, status)) in parsed.iter().zip([(&miss, "MISS"), (&hit, "HIT")]) {
        assert_eq!(v["method"], "GET");
        assert_eq!(v["uri"], "/j");
        assert_eq!(v["protocol"], "HTTP/1.1");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes_sent"], reply.bytes.len() as u64);
        assert_eq!(v["cache_status"], status);
        assert_eq!(v["remote_addr"], "127.0.0.1");
        assert_eq!(v["host"], proxy.host());
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert!(v["request_time"].as_f64().unwrap() < 5.0, "{v}");
        assert!(v.get("upstream_addr").is_some() && v.get("upstream_time").is_some());
        let time = v["time"].as_str().unwrap();
        assert_eq!(time.len(), "2024-05-01T12:34:56.789Z".len(), "{time}");
        assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
    }
    assert_eq!(parsed[0]["user_agent"], "line\tbreak \"ua\"");
    assert_eq!(parsed[1]["user_agent"], serde_json::Value::Null);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_rename_and_reopen_lines_go_to_a_new_file() {
    let origin = Origin::start().await;
    let dir = scratch("log-reopen");
    let path = dir.join("access.log");
    let proxy = Proxy::new(&origin)
        .access_log(&path, "combined")
        .start()
        .await;
    get(&proxy.url("/before")).await;
    wait_lines(&path, 1).await;
    let rotated = dir.join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    proxy.reopen_logs();
    get(&proxy.url("/after")).await;
    let new = wait_lines(&path, 1).await;
    assert_eq!(new.len(), 1, "{new:#?}");
    assert_eq!(parse_combined(&new[0]).request, "GET /after HTTP/1.1");
    let old = wait_lines(&rotated, 1).await;
    assert_eq!(old.len(), 1, "{old:#?}");
    assert_eq!(parse_combined(&old[0]).request, "GET /before HTTP/1.1");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_the_answer_is_logged_as_499() {
    let origin = Origin::start().await;
    let dir = scratch("log-499");
    let path = dir.join("access.log");
    let proxy = Proxy::new(&origin)
        .access_log(&path, "combined")
        .start()
        .await;
    let url = proxy.url("/slow");
    let client =
        tokio::spawn(
            async move { get_with(Method::GET, &url, &[("x-origin-delay-ms", "3000")]).await },
        );
    wait_until(
        Duration::from_secs(10),
        "the request at the origin",
        async || origin.hits() >= 1,
    )
    .await;
    client.abort();
    let lines = wait_lines(&path, 1).await;
    let line = parse_combined(&lines[0]);
    assert_eq!(line.request, "GET /slow HTTP/1.1");
    assert_eq!((line.status, line.bytes), (499, 0));
    assert_eq!(line.cache_status, "-");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_access_log_that_cannot_be_opened_stops_the_start() {
    let text = "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.o]\nservers = [\"127.0.0.1:9\"]\n\
                [[routes]]\nupstream = \"o\"\n\
                [access_log]\npath = \"/nonexistent-calmcache-logs/access.log\"\n";
    let config = calmcache::Config::from_toml(text, "<test>").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(calmcache::start(&config)).err().unwrap();
    let message = err.to_string();
    assert!(
        message.starts_with(
            "access_log.path: cannot open /nonexistent-calmcache-logs/access.log for appending"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reopens_its_access_log_on_sigusr1() {
    let origin = Origin::start().await;
    let dir = scratch("log-sigusr1");
    let path = dir.join("access.log");
    let port = free_port();
    let config = dir.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\nthreads = 1\n\
             [upstreams.o]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"o\"\n\
             [access_log]\npath = {:?}\nformat = \"json\"\n",
            origin.addr(),
            path.display().to_string()
        ),
    )
    .unwrap();
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_calmcache"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
    crate::wait_listening(port).await;
    get(&url("/before")).await;
    wait_lines(&path, 1).await;
    let rotated = dir.join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    let pid = child.0.id().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-USR1", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    // The reopen creates the new file.
    wait_until(
        Duration::from_secs(5),
        "a new file after SIGUSR1",
        async || path.exists(),
    )
    .await;
    get(&url("/after")).await;
    let new = wait_lines(&path, 1).await;
    let v: serde_json::Value = serde_json::from_str(&new[0]).unwrap();
    assert_eq!(v["uri"], "/after");
    let old = wait_lines(&rotated, 1).await;
    let v: serde_json::Value = serde_json::from_str(&old[0]).unwrap();
    assert_eq!(v["uri"], "/before");
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "SIGUSR1 must not stop calmcache"
    );
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_no_route_counts_are_logged_as_bypass_and_not_timed() {
    // A request matching no route (404) and one refused at the edge (417)
    // carry `Cache-Status: calmcache; fwd=bypass`: the log says BYPASS, as
    // their class, while /status counts only the routes' answers.
    let origin = Origin::start().await;
    let dir = scratch("log-uncounted");
    let path = dir.join("access.log");
    let proxy = Proxy::new(&origin)
        .route("match = '^/routed/'")
        .admin("listen = \"127.0.0.1:0\"")
        .access_log(&path, "combined")
        .start()
        .await;
    let nowhere = get(&proxy.url("/elsewhere")).await;
    assert_eq!(nowhere.status, 404);
    let refused = get_with(Method::GET, &proxy.url("/routed/x"), &[("expect", "x")]).await;
    assert_eq!(refused.status, 417);
    for reply in [&nowhere, &refused] {
        let member = reply.headers["cache-status"].to_str().unwrap();
        assert!(member.contains("fwd=bypass"), "{member}");
    }
    let routed = get(&proxy.url("/routed/x")).await;
    assert_eq!(routed.status, 200);
    let lines = wait_lines(&path, 3).await;
    let words: Vec<(u16, String)> = lines
        .iter()
        .map(|l| parse_combined(l))
        .map(|c| (c.status, c.cache_status))
        .collect();
    assert_eq!(
        words,
        [
            (404, "BYPASS".to_owned()),
            (417, "BYPASS".to_owned()),
            (200, "MISS".to_owned()),
        ]
    );
    let status: serde_json::Value =
        serde_json::from_str(&get(&proxy.admin_url("/status")).await.body).unwrap();
    let counted: u64 = status["cache_status"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(counted, 1, "{:#}", status["cache_status"]);
    assert_eq!(status["cache_status"]["miss"], 1);
    assert_eq!(status["totals"]["requests"], 1);
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 25: the `uri` of an HTTP/2 request was its full URL
/// (`https://calm.test/a?x=1`) and of an HTTP/1.1 request its path, so log
/// tools counted every resource twice. One form now, origin form, over
/// HTTP/1.1 (origin and absolute form), h2c and HTTP/2 over TLS, on a
/// cached and an uncached route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uri_is_the_path_and_query_on_every_wire() {
    use calmcache_testkit::Wires;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::start().await;
    let dir = scratch("log-uri");
    let path = dir.join("access.json");
    let proxy = Proxy::new(&origin)
        .route("match = '^/c/'\n\n[[routes]]\nname = \"pass\"\nupstream = \"origin\"")
        .access_log(&path, "json");
    let wires = Wires::start(proxy, "").await;
    let mut want = Vec::new();
    for wire in &wires.all {
        for route in ["c", "pass"] {
            let target = format!("/{route}/{}?x=1&y=%20", wire.label().replace(' ', "-"));
            let r = wires
                .send(wire, Method::GET, "calm.test", &target, &[], "")
                .await;
            assert_eq!(r.status, 200, "{} {target}", wire.label());
            want.push(target);
        }
    }
    // HTTP/1.1 in absolute form (RFC 9112 §3.2.2).
    let addr = wires.proxy.running().proxy_addrs[0];
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET http://calm.test/c/absolute?x=1 HTTP/1.1\r\nHost: calm.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    want.push("/c/absolute?x=1".into());
    let lines = wait_lines(&path, want.len()).await;
    let mut logged: Vec<String> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["uri"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    logged.sort();
    want.sort();
    assert_eq!(logged, want);
    wires.proxy.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
