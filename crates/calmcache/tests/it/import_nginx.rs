//! `calmcache import-nginx`: every NGINX config block of the seed posts
//! (tests/fixtures/nginx/, each naming its post and block) converts and
//! passes `check`; configs that cannot be parsed get file:line and exit 2;
//! and, side by side, a real NGINX (Debian's /usr/sbin/nginx) and calmcache
//! from the imported config answer the same requests alike, with the same
//! number of origin requests.
//!
//! Each proxy has an origin of its own (the same testkit origin, started
//! twice), so that the `n=<count>` in each body compares: a shared origin
//! would number the two proxies' requests together.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use calmcache_testkit::{client, Origin};

use crate::{free_port, scratch, wait_listening, wait_until, Child};

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");
const NGINX: &str = "/usr/sbin/nginx";

/// Every fixture: one NGINX config block of a seed post each.
const FIXTURES: [&str; 15] = [
    "seed000-map.conf",
    "seed000-content-generator.conf",
    "seed000-split-clients.conf",
    "seed001-workers.conf",
    "seed001-events.conf",
    "seed001-timeouts.conf",
    "seed001-keepalive.conf",
    "seed001-nginx-conf.conf",
    "seed003-proxy.conf",
    "seed003-microcache.conf",
    "seed003-lock-stale.conf",
    "world-forum.conf",
    "world-social.conf",
    "world-microcache-unix.conf",
    "issue28-nested-avatar.conf",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nginx")
        .join(name)
}

fn import(path: &Path) -> Output {
    Command::new(BIN)
        .arg("import-nginx")
        .arg(path)
        .output()
        .unwrap()
}

/// The imported TOML of `path`, which must succeed.
pub(crate) fn imported(path: &Path) -> String {
    let out = import(path);
    assert!(
        out.status.success(),
        "import-nginx {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `toml` with every zone `path` moved under `dir` (the seeds' /mnt/... and
/// /tmp/cache are not this test's to write).
fn zone_paths_under(toml: &str, dir: &Path) -> String {
    toml.lines()
        .map(|line| match line.strip_prefix("path = \"/") {
            Some(rest) => format!("path = \"{}/{rest}", dir.display()),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn check(toml: &str, dir: &Path) -> Output {
    let path = dir.join("calmcache.toml");
    std::fs::write(&path, toml).unwrap();
    Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap()
}

#[test]
fn every_seed_fixture_converts_and_passes_check() {
    for name in FIXTURES {
        let dir = scratch("import-check");
        let toml = zone_paths_under(&imported(&fixture(name)), &dir.join("zones"));
        let out = check(&toml, &dir);
        assert!(
            out.status.success(),
            "{name}: check failed:\n{}\n--- imported:\n{toml}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn every_directive_of_a_fixture_is_carried_over_or_commented() {
    // The directives nothing maps to a key must be named in a comment.
    let toml = imported(&fixture("seed000-split-clients.conf"));
    for needle in [
        "`status_zone loadbalancer`",
        "`proxy_http_version 1.1`",
        "levels=1:2 ignored",
        "use_temp_path=off ignored",
    ] {
        assert!(toml.contains(needle), "{needle} not in:\n{toml}");
    }
    let toml = imported(&fixture("seed000-content-generator.conf"));
    for needle in ["`try_files /1mb.txt =404`", "`expires max`", "PLACEHOLDER"] {
        assert!(toml.contains(needle), "{needle} not in:\n{toml}");
    }
}

#[test]
fn output_file_with_o() {
    let dir = scratch("import-o");
    let out_path = dir.join("out.toml");
    let out = Command::new(BIN)
        .arg("import-nginx")
        .arg(fixture("seed003-proxy.conf"))
        .arg("-o")
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let written = std::fs::read_to_string(&out_path).unwrap();
    assert!(
        written.contains("[upstreams.wordpress-upstreams]"),
        "{written}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn configs_that_cannot_be_parsed_name_file_and_line_and_exit_2() {
    let dir = scratch("import-bad");
    let cases: [(&str, &str, &str); 6] = [
        (
            "braces.conf",
            "http {\n server {\n  listen 80;\n }\n",
            "braces.conf:1: this block's { is never closed",
        ),
        (
            "quote.conf",
            "server {\n add_header X \"open;\n}\n",
            "quote.conf:2: unterminated \" quote",
        ),
        (
            "semi.conf",
            "server {\n listen 80\n}\n",
            "semi.conf:2: directive \"listen\" has no ending ';'",
        ),
        (
            "include.conf",
            "http {\n\n include missing/*.conf;\n include nothere.conf;\n}\n",
            "include.conf:4: cannot read",
        ),
        (
            "semi-inside.conf",
            "server {\n location / {\n  proxy_pass http://app\n  proxy_cache one;\n }\n}\n",
            "semi-inside.conf:3: invalid number of arguments in \"proxy_pass\"",
        ),
        (
            "loop.conf",
            "http {\n include loop.conf;\n}\n",
            "loop.conf:2: include loop",
        ),
    ];
    for (file, text, want) in cases {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        let out = import(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains(want), "{file}: want {want:?}, got {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn upstream_weights_and_tls_pass_check() {
    let dir = scratch("import-upt");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        "upstream app { server 127.0.0.1:8081 weight=3; server 127.0.0.1:8082; }
         server { listen 127.0.0.1:8080;
           location /secure/ { proxy_pass https://app; proxy_ssl_server_name on; proxy_ssl_name origin.example; proxy_ssl_verify off; }
           location / { proxy_pass https://127.0.0.1:8443; } }",
    )
    .unwrap();
    let toml = imported(&conf);
    let out = check(&toml, &dir);
    assert!(
        out.status.success(),
        "{}\n{toml}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Mastodon's upstream line, `server 127.0.0.1:3000 fail_timeout=0;`:
/// imported as a server never marked down (max_fails = 0), which `check`
/// passes (it refuses fail_timeout = "0s"). Issue 28, importer mistake 2.
#[test]
fn fail_timeout_zero_imports_to_a_config_check_passes() {
    let dir = scratch("import-ft0");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        "upstream backend { server 127.0.0.1:3000 fail_timeout=0; }
         upstream streaming { server 127.0.0.1:4000 fail_timeout=0; server 127.0.0.1:4001 fail_timeout=0; }
         server { listen 127.0.0.1:8080;
           location /api/v1/streaming { proxy_pass http://streaming; }
           location / { proxy_pass http://backend; } }",
    )
    .unwrap();
    let toml = imported(&conf);
    assert!(!toml.contains("fail_timeout = \"0s\""), "{toml}");
    assert!(toml.contains("max_fails = 0"), "{toml}");
    let out = check(&toml, &dir);
    assert!(
        out.status.success(),
        "{}\n{toml}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 28: `internal`, `return` and a port-80 server that only
/// redirects import to routes that answer themselves, which `check` passes.
#[test]
fn answering_locations_and_a_redirect_server_pass_check() {
    let dir = scratch("import-answers");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        "limit_req_zone $binary_remote_addr zone=api:10m rate=10r/s;
         limit_conn_zone $binary_remote_addr zone=addr:10m;
         server { listen 127.0.0.1:8080; server_name example.com; return 301 https://$host$request_uri; }
         server { listen 127.0.0.1:8081; server_name example.com;
           proxy_set_header Host $host; proxy_set_header X-Real-IP $remote_addr;
           add_header X-Cache-Status $upstream_cache_status always; proxy_hide_header X-Powered-By; expires 1h;
           location = /healthz { return 204; }
           location /backups/ { internal; proxy_pass http://127.0.0.1:3000; }
           location /gone/ { return 410 \"gone\"; }
           location /dl/ { limit_req zone=api burst=20 nodelay; limit_conn addr 4; proxy_pass http://127.0.0.1:3000; }
           location / { proxy_pass http://127.0.0.1:3000; } }",
    )
    .unwrap();
    let toml = imported(&conf);
    assert!(toml.contains("internal = true"), "{toml}");
    assert!(toml.contains("listeners = [\"127.0.0.1:8080\"]"), "{toml}");
    assert!(toml.contains("X-Real-IP = \"$remote_addr\""), "{toml}");
    assert!(toml.contains("limits = [\"api\", \"addr\"]"), "{toml}");
    let out = check(&toml, &dir);
    assert!(
        out.status.success(),
        "{}\n{toml}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 28: unix-socket servers, `least_conn` and `hash ... consistent`
/// import to keys `check` passes.
#[test]
fn unix_servers_and_balance_pass_check() {
    let dir = scratch("import-balance");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        "gzip on; gzip_types text/css; gzip_min_length 256;
         upstream app { server unix:/run/app/puma.sock fail_timeout=0; server 127.0.0.1:3000; hash $request_uri consistent; }
         upstream api { least_conn; server 127.0.0.1:4000; server 127.0.0.1:4001; }
         server { listen 127.0.0.1:8080;
           location /api/ { proxy_pass http://api; }
           location /sock/ { proxy_pass http://unix:/run/other.sock:; }
           location / { proxy_pass http://app; } }",
    )
    .unwrap();
    let toml = imported(&conf);
    assert!(toml.contains("unix:/run/app/puma.sock"), "{toml}");
    assert!(toml.contains("\"unix:/run/other.sock\""), "{toml}");
    assert!(toml.contains("balance = \"least_conn\""), "{toml}");
    assert!(toml.contains("hash_key = \"$request_uri\""), "{toml}");
    assert!(toml.contains("compress_passed = [\"gzip\"]"), "{toml}");
    let out = check(&toml, &dir);
    assert!(
        out.status.success(),
        "{}\n{toml}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- side by side with NGINX ----

/// Whether the nginx binary is here; under CI=true its absence fails.
pub(crate) fn nginx_available() -> bool {
    if Path::new(NGINX).exists() {
        return true;
    }
    let message =
        format!("skipped: {NGINX} not found (Debian package nginx; ./scripts/test installs it)");
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{message} (CI=true: a test may not skip)"
    );
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
    false
}

/// One request of a sequence and whether both proxies must answer alike.
struct Step {
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    /// Sleep this long before sending (to let objects expire).
    after: Duration,
    /// `false` where the refresh policy's difference (explained in the
    /// imported config's comments) lets the bodies differ.
    same: bool,
}

fn step(path: &'static str, headers: &'static [(&'static str, &'static str)]) -> Step {
    Step {
        path,
        headers,
        after: Duration::ZERO,
        same: true,
    }
}

/// NGINX and calmcache from `name`, each before an origin of its own.
struct SideBySide {
    dir: PathBuf,
    nginx_origin: Origin,
    calm_origin: Origin,
    nginx_port: u16,
    nginx: Option<Nginx>,
    calm: Option<calmcache::Running>,
}

impl SideBySide {
    async fn start(name: &str) -> SideBySide {
        let dir = scratch(&format!("side-{}", name.trim_end_matches(".conf")));
        SideBySide::start_in(dir, name).await
    }

    /// [`SideBySide::start`] in `dir` (files the fixture serves put there
    /// first, under `nginx/` and `calmcache/`).
    async fn start_in(dir: PathBuf, name: &str) -> SideBySide {
        let nginx_origin = Origin::start().await;
        let calm_origin = Origin::start().await;
        let nginx_port = free_port();
        let text = std::fs::read_to_string(fixture(name)).unwrap();
        // NGINX: the fixture inside http { }, its ports and paths this test's.
        let ndir = dir.join("nginx");
        let conf_text = localise(&text, nginx_origin.addr(), &ndir)
            .lines()
            .map(|line| {
                let t = line.trim_start();
                if t.starts_with("listen ") {
                    format!("listen 127.0.0.1:{nginx_port};")
                } else if t.starts_with("status_zone") {
                    "# status_zone: NGINX Plus only".to_owned()
                } else {
                    line.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let nginx = start_nginx(&ndir, &conf_text, nginx_port).await;
        // calmcache: the imported config, its ports and paths this test's.
        let cdir = dir.join("calmcache");
        std::fs::create_dir_all(&cdir).unwrap();
        let toml = localise(&imported(&fixture(name)), calm_origin.addr(), &cdir);
        let calm = start_calm(&cdir, &toml).await;
        SideBySide {
            dir,
            nginx_origin,
            calm_origin,
            nginx_port,
            nginx: Some(nginx),
            calm: Some(calm),
        }
    }

    /// Sends `steps` to both and compares the answers.
    async fn run(&self, steps: &[Step]) {
        let calm_addr = self.calm.as_ref().expect("running").proxy_addrs[0];
        for (i, s) in steps.iter().enumerate() {
            tokio::time::sleep(s.after).await;
            let n = client::get_with(
                http::Method::GET,
                &format!("http://127.0.0.1:{}{}", self.nginx_port, s.path),
                s.headers,
            )
            .await;
            let c = client::get_with(
                http::Method::GET,
                &format!("http://{calm_addr}{}", s.path),
                s.headers,
            )
            .await;
            assert_eq!(n.status, c.status, "step {i} {}: statuses", s.path);
            if s.same {
                assert_eq!(n.body, c.body, "step {i} {}: bodies", s.path);
            }
        }
    }

    /// Waits (bounded) for background refreshes, then asserts both origins
    /// got `expected` requests.
    async fn origin_requests(&self, expected: u64) {
        wait_until(
            Duration::from_secs(5),
            "calmcache's origin requests settle",
            async || self.calm_origin.hits() >= expected,
        )
        .await;
        wait_until(
            Duration::from_secs(5),
            "NGINX's origin requests settle",
            async || self.nginx_origin.hits() >= expected,
        )
        .await;
        assert_eq!(
            self.nginx_origin.hits(),
            expected,
            "NGINX's origin requests"
        );
        assert_eq!(
            self.calm_origin.hits(),
            expected,
            "calmcache's origin requests"
        );
    }

    /// Files under `sub` of NGINX's and of calmcache's cache directories.
    fn files(&self, sub: &str) -> (usize, usize) {
        let count = |p: PathBuf| count_files(&p);
        (
            count(self.dir.join("nginx").join(sub)),
            count(self.dir.join("calmcache").join(sub)),
        )
    }
}

impl SideBySide {
    async fn stop(mut self) {
        if let Some(calm) = self.calm.take() {
            calm.shutdown(Duration::from_secs(1)).await;
        }
    }
}

impl Drop for SideBySide {
    fn drop(&mut self) {
        drop(self.nginx.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running NGINX master, stopped with its workers when dropped.
pub(crate) struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers (SIGKILL, Child's drop, would
        // leave them listening).
        crate::signal(&self.0, "-TERM");
        for _ in 0..200 {
            if matches!(self.0 .0.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// NGINX in `ndir` with `site` (directives of an http block) as its whole
/// config, once it listens on `port` (which `site`'s listens use).
pub(crate) async fn start_nginx(ndir: &Path, site: &str, port: u16) -> Nginx {
    std::fs::create_dir_all(ndir.join("logs")).unwrap();
    // NGINX creates a cache directory, not its parents.
    for line in site.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("proxy_cache_path ") {
            let path = Path::new(rest.split_whitespace().next().unwrap());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        }
    }
    std::fs::write(ndir.join("site.conf"), site).unwrap();
    let main = format!(
        "user root;\nworker_processes 1;\nevents {{ worker_connections 256; }}\n\
         http {{ access_log off; include {}; }}\n",
        ndir.join("site.conf").display()
    );
    let conf = ndir.join("nginx.conf");
    std::fs::write(&conf, main).unwrap();
    let nginx = Command::new(NGINX)
        .arg("-p")
        .arg(format!("{}/", ndir.display()))
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(ndir.join("error.log"))
        .arg("-g")
        .arg(format!(
            "daemon off; pid {};",
            ndir.join("nginx.pid").display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let nginx = Nginx(Child(nginx));
    wait_listening_or_log(port, ndir).await;
    nginx
}

/// calmcache from the imported `toml` (written in `cdir`), listening on a
/// port of its own.
pub(crate) async fn start_calm(cdir: &Path, toml: &str) -> calmcache::Running {
    let toml = toml
        .lines()
        .map(|line| {
            if line.starts_with("listen = ") {
                "listen = [\"127.0.0.1:0\"]".to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = cdir.join("calmcache.toml");
    std::fs::write(&path, &toml).unwrap();
    let config = calmcache::load_config(&path).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    calmcache::start(&config).await.unwrap()
}

async fn wait_listening_or_log(port: u16, dir: &Path) {
    if tokio::spawn(wait_listening(port)).await.is_err() {
        let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        panic!("nginx did not listen on {port}:\n{log}");
    }
}

/// The fixture's origin addresses -> `origin`, its cache paths -> under `dir`.
fn localise(text: &str, origin: std::net::SocketAddr, dir: &Path) -> String {
    let origin = origin.to_string();
    text.replace("127.0.0.1:8081", &origin)
        .replace("127.0.0.2:8081", &origin)
        .replace("/mnt/", &format!("{}/mnt/", dir.display()))
        .replace("/tmp/cache", &format!("{}/tmp-cache", dir.display()))
}

/// Regular files under `dir` (recursively), calmcache's own `.calmcache-*`
/// markers left out.
fn count_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                count_files(&path)
            } else {
                usize::from(!e.file_name().to_string_lossy().starts_with(".calmcache"))
            }
        })
        .sum()
}

const CACHEABLE: &[(&str, &str)] = &[("x-origin-cache-control", "max-age=60")];
/// NGINX keeps a `proxy_cache_valid ... 1s` object until the second after
/// next (whole seconds); past 2 s both have expired it.
const PAST_ONE_SECOND: Duration = Duration::from_millis(2200);

#[tokio::test]
async fn side_by_side_seed000_map_mp4_to_disk_cache() {
    if !nginx_available() {
        return;
    }
    let both = SideBySide::start("seed000-map.conf").await;
    both.run(&[
        step("/v/a.mp4", CACHEABLE),
        step("/v/a.mp4", CACHEABLE),
        step("/p/b.html", CACHEABLE),
        step("/p/b.html", CACHEABLE),
        step("/v/c.avi?start=1", CACHEABLE),
        step("/v/c.avi?start=1", CACHEABLE),
    ])
    .await;
    both.origin_requests(3).await;
    wait_until(
        Duration::from_secs(5),
        "the objects reach the disk zones",
        async || both.files("mnt/disk/cache") == (2, 2) && both.files("mnt/ssd/cache") == (1, 1),
    )
    .await;
    both.stop().await;
}

#[tokio::test]
async fn side_by_side_seed000_split_clients_over_two_disks() {
    if !nginx_available() {
        return;
    }
    let both = SideBySide::start("seed000-split-clients.conf").await;
    const PATHS: [&str; 16] = [
        "/1.txt", "/2.txt", "/3.txt", "/4.txt", "/5.txt", "/6.txt", "/7.txt", "/8.txt", "/9.txt",
        "/10.txt", "/11.txt", "/12.txt", "/13.txt", "/14.txt", "/15.txt", "/16.txt",
    ];
    let mut steps = Vec::new();
    for path in PATHS {
        steps.push(step(path, CACHEABLE));
        steps.push(step(path, CACHEABLE));
    }
    both.run(&steps).await;
    both.origin_requests(PATHS.len() as u64).await;
    wait_until(
        Duration::from_secs(5),
        "every object reaches a disk",
        async || {
            let (n1, c1) = both.files("mnt/disk1/cache");
            let (n2, c2) = both.files("mnt/disk2/cache");
            n1 + n2 == PATHS.len() && c1 + c2 == PATHS.len()
        },
    )
    .await;
    // Both split the keys over both disks (which keys go where differs:
    // NGINX hashes $request_uri, calmcache the cache key).
    let (n1, c1) = both.files("mnt/disk1/cache");
    let (n2, c2) = both.files("mnt/disk2/cache");
    assert!(
        n1 > 0 && n2 > 0 && c1 > 0 && c2 > 0,
        "nginx {n1}/{n2}, calmcache {c1}/{c2}"
    );
    both.stop().await;
}

#[tokio::test]
async fn side_by_side_seed003_proxy_without_cache() {
    if !nginx_available() {
        return;
    }
    let both = SideBySide::start("seed003-proxy.conf").await;
    both.run(&[
        step("/", CACHEABLE),
        step("/", CACHEABLE),
        step("/?p=1", &[]),
    ])
    .await;
    both.origin_requests(3).await;
    both.stop().await;
}

#[tokio::test]
async fn side_by_side_seed003_microcaching() {
    if !nginx_available() {
        return;
    }
    let both = SideBySide::start("seed003-microcache.conf").await;
    both.run(&[
        step("/", &[]),
        step("/", &[]),
        Step {
            after: PAST_ONE_SECOND,
            ..step("/", &[])
        },
        step("/", &[]),
        step("/other", &[]),
    ])
    .await;
    both.origin_requests(3).await;
    both.stop().await;
}

#[tokio::test]
async fn side_by_side_seed003_lock_and_stale_updating() {
    if !nginx_available() {
        return;
    }
    let both = SideBySide::start("seed003-lock-stale.conf").await;
    both.run(&[
        step("/", &[]),
        step("/", &[]),
        // Expired: NGINX makes this request wait for the new copy, calmcache
        // serves it the stale one and refreshes behind (the imported
        // config's stale_while_revalidate comment); one origin request each.
        Step {
            after: PAST_ONE_SECOND,
            same: false,
            ..step("/", &[])
        },
    ])
    .await;
    both.origin_requests(2).await;
    both.run(&[step("/", &[])]).await;
    both.origin_requests(2).await;
    both.stop().await;
}

/// Three server blocks on one port, as in the import's unit tests: `a.test`
/// (cached), `*.b.test` (not cached) and a default server that is not the
/// first block. Each Host reaches the same origin through NGINX and through
/// the imported calmcache config.
fn three_servers(origins: &[Origin; 3], cache: &Path, listen: &str) -> String {
    format!(
        "proxy_cache_path {cache}/a keys_zone=a:1m;
server {{
  listen {listen};
  server_name a.test;
  location / {{ proxy_pass http://{a}; proxy_cache a; proxy_cache_valid 200 1m; }}
}}
server {{
  listen {listen};
  server_name *.b.test;
  location / {{ proxy_pass http://{b}; }}
}}
server {{
  listen {listen} default_server;
  server_name _;
  location / {{ proxy_pass http://{c}; }}
}}
",
        cache = cache.display(),
        a = origins[0].addr(),
        b = origins[1].addr(),
        c = origins[2].addr(),
    )
}

async fn three_origins() -> [Origin; 3] {
    [
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
    ]
}

#[tokio::test]
async fn side_by_side_server_names_pick_the_same_server_block() {
    if !nginx_available() {
        return;
    }
    let dir = scratch("side-server-names");
    let (ndir, cdir) = (dir.join("nginx"), dir.join("calmcache"));
    std::fs::create_dir_all(&cdir).unwrap();
    let (nginx_origins, calm_origins) = (three_origins().await, three_origins().await);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let nginx = start_nginx(&ndir, &three_servers(&nginx_origins, &ndir, &listen), port).await;
    let conf = cdir.join("nginx.conf");
    let site = three_servers(&calm_origins, &cdir, &listen);
    std::fs::write(&conf, format!("http {{\n{site}}}\n")).unwrap();
    let calm = start_calm(&cdir, &imported(&conf)).await;
    let calm_addr = calm.proxy_addrs[0];
    for host in [
        "a.test",
        "www.b.test",
        "x.y.b.test",
        "b.test",
        "other.test",
        "A.TEST",
    ] {
        for round in 0..2 {
            let get = |addr: String| async move {
                client::get_with(
                    http::Method::GET,
                    &format!("http://{addr}/p"),
                    &[("host", host)],
                )
                .await
            };
            let n = get(listen.clone()).await;
            let c = get(calm_addr.to_string()).await;
            assert_eq!(n.status, c.status, "{host} #{round}: statuses");
            assert_eq!(n.body, c.body, "{host} #{round}: bodies");
        }
    }
    // a.test and A.TEST: one fetch, cached; names under b.test: four, not
    // cached; b.test itself and other.test: the default server's four.
    let hits = |origins: &[Origin; 3]| origins.iter().map(Origin::hits).collect::<Vec<_>>();
    assert_eq!(hits(&nginx_origins), [1, 4, 4], "NGINX's origin requests");
    assert_eq!(
        hits(&calm_origins),
        [1, 4, 4],
        "calmcache's origin requests"
    );
    calm.shutdown(Duration::from_secs(1)).await;
    drop(nginx);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 28, importer mistake 1: `location ~* \.(png|jpg)$` nested in
/// `location ~ ^/uploads/` stays under /uploads/, so /letter_avatar/x.png
/// is the avatar route's and cached: 1 origin request for 3 client
/// requests, in NGINX and in calmcache (it was 3 in calmcache).
#[tokio::test]
async fn side_by_side_nested_regex_leaves_the_avatar_route_cached() {
    if !nginx_available() {
        return;
    }
    let side = SideBySide::start("issue28-nested-avatar.conf").await;
    let avatar = step("/letter_avatar/x.png", &[]);
    side.run(&[
        avatar,
        step("/letter_avatar/x.png", &[]),
        step("/letter_avatar/x.png", &[]),
    ])
    .await;
    side.origin_requests(1).await;
    // The nested rule still takes the uploads' images, uncached.
    side.run(&[step("/uploads/a.png", &[]), step("/uploads/a.png", &[])])
        .await;
    side.origin_requests(3).await;
    side.stop().await;
}

/// The files both serve from their own copy of the fixture's root.
fn static_site(dir: &Path) {
    let www = dir.join("mnt/www");
    std::fs::create_dir_all(www.join("static/sub")).unwrap();
    std::fs::create_dir_all(www.join("assets")).unwrap();
    std::fs::write(www.join("404.html"), "<p>not found here</p>\n").unwrap();
    std::fs::write(www.join("50x.html"), "<p>back soon</p>\n").unwrap();
    std::fs::write(www.join("robots.txt"), "User-agent: *\n").unwrap();
    std::fs::write(www.join("static/a.css"), "body{color:red}\n").unwrap();
    std::fs::write(www.join("assets/app.js"), "run();\n").unwrap();
    std::fs::create_dir_all(www.join("app")).unwrap();
    std::fs::write(www.join("app/index.html"), "<div id=app></div>\n").unwrap();
    std::fs::write(www.join("app/main.js"), "mount();\n").unwrap();
}

/// Issue 28: a location with only `root`, an `alias`, `try_files $uri
/// =404`, `try_files $uri /app/index.html`, `error_page` at server and location level, internal page
/// locations and `proxy_intercept_errors`, side by side: the same statuses
/// and bodies (the error pages' files), the same origin requests.
#[tokio::test]
async fn side_by_side_static_files_and_error_pages() {
    if !nginx_available() {
        return;
    }
    let dir = scratch("side-static-pages");
    static_site(&dir.join("nginx"));
    static_site(&dir.join("calmcache"));
    // SideBySide::start builds its own dirs: give it this fixture's.
    let both = SideBySide::start_in(dir, "issue28-static-error-pages.conf").await;
    let page_404: &[(&str, &str)] = &[("x-origin-status", "404")];
    let differ = |path: &'static str| Step {
        same: false,
        ..step(path, &[])
    };
    both.run(&[
        // Files, by root, alias and try_files.
        step("/static/a.css", &[]),
        step("/assets/app.js", &[]),
        step("/robots.txt", &[]),
        // No file: 404 with the server's error page.
        step("/static/missing.css", &[]),
        step("/assets/missing.js", &[]),
        // A single-page app: its files, else its index.html with 200.
        step("/app/main.js", &[]),
        step("/app/", &[]),
        step("/app/users/7", &[]),
        // The page locations are internal: 404, with the 404 page.
        step("/50x.html", &[]),
        step("/404.html", &[]),
        // NGINX's own pages (their signature differs): statuses only.
        differ("/static/sub/"),
        differ("/static/sub"),
        // The app's answers; its 404 intercepted.
        step("/shop", &[]),
        step("/shop/gone", page_404),
        // A dead upstream: the location's own error_page, as 503.
        step("/dead/x", &[]),
    ])
    .await;
    both.origin_requests(2).await;
    both.stop().await;
}
