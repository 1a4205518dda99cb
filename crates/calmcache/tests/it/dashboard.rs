//! The live dashboard (`GET /` on the admin listener) in a real browser:
//! Debian's `chromium`, headless, loads it from a running proxy, its numbers
//! follow the traffic sent through the proxy (the Fleet panel only in fleet
//! mode, on a real redis-server), the page logs nothing to the
//! console (no errors, no uncaught exceptions), and a screenshot is saved as
//! `target/dashboard.png`.
//!
//! No DevTools client: each check is one chromium run with
//! `--virtual-time-budget` (the page polls `/status` every virtual second, and
//! virtual time waits for each fetch), `--dump-dom` for the DOM it rendered, and
//! `--enable-logging=stderr`, where chromium prints every console message and
//! uncaught exception as `INFO:CONSOLE...] "text", source: URL (line)`
//! whatever its level. The page never logs, so any such line fails the test;
//! a first run checks this chromium prints them at all. The page's elements
//! carry `data-metric="name"` with the raw number in `data-value` ("" when
//! absent), so nothing here parses formatted text.
//!
//! The login form (a listener whose `/status` needs the token) is the one
//! check that must act on the page: there chromium runs with
//! `--remote-debugging-port=0` and the test speaks the DevTools protocol
//! (`Runtime.evaluate` over its loopback WebSocket) to type the token into
//! the form and submit it, then reads the same `data-*` attributes.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use calmcache_testkit::{get, Origin, Proxy};

use crate::wait_until;

/// Browsers tried in `PATH`, Debian's first; `CALMCACHE_CHROMIUM` overrides.
const BROWSERS: [&str; 4] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
];

pub(crate) fn browser() -> PathBuf {
    if let Some(path) = std::env::var_os("CALMCACHE_CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in BROWSERS {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "no headless browser found (tried {BROWSERS:?} in PATH): the dashboard test needs \
         Debian's chromium; scripts/test installs it (apt-get install chromium)"
    );
}

/// What one chromium run left: the DOM when the budget ran out, and every
/// console line it printed.
pub(crate) struct Run {
    dom: String,
    pub(crate) console: Vec<String>,
    pub(crate) stderr: String,
}

/// Loads `url` for `budget_ms` of virtual time, with `extra` flags.
pub(crate) async fn chromium(url: &str, budget_ms: u32, extra: &[String]) -> Run {
    static N: AtomicU32 = AtomicU32::new(0);
    let profile = std::env::temp_dir().join(format!(
        "calmcache-it-chromium-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let mut cmd = tokio::process::Command::new(browser());
    cmd.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-sync",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--mute-audio",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1400,1000",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--virtual-time-budget={budget_ms}"))
    .args(extra)
    .arg("--dump-dom")
    .arg(url)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start {:?}: {e} (scripts/test installs chromium)",
            browser()
        )
    });
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("chromium finished within 90 s")
        .expect("chromium output");
    let _ = std::fs::remove_dir_all(&profile);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "chromium exited with {}:\n{stderr}",
        out.status
    );
    let console = stderr
        .lines()
        .filter(|l| l.contains("CONSOLE"))
        .map(str::to_owned)
        .collect();
    // The rendered markup, without the page's script (whose source names
    // the same attributes).
    let dom = String::from_utf8_lossy(&out.stdout);
    let dom = dom.split("<script").next().unwrap_or_default().to_owned();
    Run {
        dom,
        console,
        stderr,
    }
}

/// The opening tag holding `attr` (e.g. `data-metric="requests-total"`) in `html`.
fn tag_with<'a>(html: &'a str, attr: &str) -> Option<&'a str> {
    let at = html.find(attr)?;
    let start = html[..at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    Some(&html[start..end])
}

/// The value of attribute `name` in the opening tag `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let from = tag.find(&key)? + key.len();
    Some(&tag[from..from + tag[from..].find('"')?])
}

/// The raw `data-value` of metric `name` in `html` (None: no such element;
/// Some(""): the page shows it as absent).
fn metric<'a>(html: &'a str, name: &str) -> Option<&'a str> {
    attr(
        tag_with(html, &format!("data-metric=\"{name}\""))?,
        "data-value",
    )
}

/// The `<tr>` of a table row, e.g. `data-route="test"`.
fn row<'a>(html: &'a str, attr: &str) -> Option<&'a str> {
    let at = html.find(attr)?;
    Some(&html[at..at + html[at..].find("</tr>")?])
}

/// Collects failed checks so one run reports all of them.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    /// `metric` in `html` equals `want`.
    fn eq(&mut self, what: &str, html: &str, name: &str, want: &str) {
        match metric(html, name) {
            Some(v) if v == want => {}
            other => self
                .0
                .push(format!("{what}: {name} = {other:?}, want {want:?}")),
        }
    }

    /// `metric` in `html` is a number (the page shows a value).
    fn number(&mut self, what: &str, html: &str, name: &str) -> Option<f64> {
        let v = metric(html, name);
        match v.and_then(|v| v.parse::<f64>().ok()) {
            Some(n) if n.is_finite() => Some(n),
            _ => {
                self.0
                    .push(format!("{what}: {name} = {v:?}, want a number"));
                None
            }
        }
    }

    fn check(&mut self, ok: bool, msg: String) {
        if !ok {
            self.0.push(msg);
        }
    }

    /// The page state every run must show: polled, connected, no JS errors,
    /// no console lines.
    fn healthy(&mut self, what: &str, run: &Run, min_samples: u32) {
        let body = tag_with(&run.dom, "data-samples=").unwrap_or("");
        let samples: u32 = attr(body, "data-samples")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        self.check(
            samples >= min_samples,
            format!("{what}: {samples} /status samples, want at least {min_samples}"),
        );
        self.check(
            attr(body, "data-js-errors") == Some("0"),
            format!(
                "{what}: data-js-errors = {:?}",
                attr(body, "data-js-errors")
            ),
        );
        let badge = tag_with(&run.dom, "id=\"conn\"").unwrap_or("");
        self.check(
            attr(badge, "data-state") == Some("ok"),
            format!(
                "{what}: connection badge {:?}, want \"ok\" ({})",
                attr(badge, "data-state"),
                badge
            ),
        );
        self.check(
            run.console.is_empty(),
            format!(
                "{what}: console messages (the page logs nothing unless broken):\n  {}",
                run.console.join("\n  ")
            ),
        );
    }

    fn finish(self, proxy_status: &serde_json::Value) {
        assert!(
            self.0.is_empty(),
            "{} dashboard check(s) failed:\n- {}\n/status was:\n{proxy_status:#}",
            self.0.len(),
            self.0.join("\n- ")
        );
    }
}

/// `target/dashboard.png` of this workspace (or of `CARGO_TARGET_DIR`).
fn screenshot_path() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    };
    std::fs::create_dir_all(&target).expect("target dir");
    target
        .canonicalize()
        .expect("target dir path")
        .join("dashboard.png")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_headless_chromium_follows_traffic() {
    // 0. This chromium prints console errors and uncaught exceptions where
    //    the checks below look for them.
    let probe = chromium(
        "data:text/html,<script>console.error('probe-console-error');null.probe()</script>",
        500,
        &[],
    )
    .await;
    let joined = probe.console.join("\n");
    assert!(
        joined.contains("probe-console-error") && joined.contains("Uncaught"),
        "this chromium does not print console messages as `CONSOLE` lines on stderr; \
         the console check would be blind. stderr:\n{}",
        probe.stderr
    );

    let origin = Origin::start().await;
    // A second route, for one host name: the page names it with its hosts.
    let proxy = Proxy::new(&origin)
        .route(
            "ttl = { 200 = \"60s\" }\nrefresh = \"lock\"\n\n\
             [[routes]]\nname = \"shop\"\nupstream = \"origin\"\nhosts = [\"shop.test\", \"*.shop.test\"]\n",
        )
        .start()
        .await;
    let page = proxy.admin_url("/");
    let served = get(&page).await;
    assert_eq!(
        served.status, 200,
        "GET / on the admin listener serves the dashboard: {}",
        served.body
    );
    assert!(
        served.header("content-type").starts_with("text/html"),
        "content-type {:?}",
        served.header("content-type")
    );
    let mut checks = Checks::default();

    // 1. Before any traffic: connected, zeros.
    let before = chromium(&page, 2500, &[]).await;
    checks.healthy("before traffic", &before, 2);
    for name in [
        "requests-total",
        "upstream-requests-total",
        "status-hit",
        "status-miss",
    ] {
        checks.eq("before traffic", &before.dom, name, "0");
    }
    checks.eq("before traffic", &before.dom, "hit-ratio-total", "");

    // 2. Known traffic: 3 paths, 10 requests each, one after another: 3 misses
    //    (3 origin requests), 27 hits.
    for i in 0..30 {
        let reply = get(&proxy.url(&format!("/dash/{}", i / 10))).await;
        assert_eq!(reply.status, 200);
    }
    assert_eq!(origin.hits(), 3, "the origin saw one request per path");
    let status = proxy.status().await;

    // 3. After: the page shows what /status counts.
    let after = chromium(&page, 2500, &[]).await;
    let what = "after 30 requests";
    checks.healthy(what, &after, 2);
    let dom = &after.dom;
    checks.eq(what, dom, "requests-total", "30");
    checks.eq(what, dom, "upstream-requests-total", "3");
    checks.eq(what, dom, "origin-saved-total", "27");
    checks.eq(what, dom, "origin-saved-pct", "0.9");
    checks.eq(what, dom, "status-hit", "27");
    checks.eq(what, dom, "status-miss", "3");
    checks.eq(what, dom, "status-stale", "0");
    checks.eq(what, dom, "status-bypass", "0");
    checks.eq(what, dom, "hit-ratio-total", "0.9");
    checks.eq(what, dom, "coalesced-total", "0");
    for (table, field, name, want) in [
        ("data-route=\"test\"", "route-requests", "route test", "30"),
        ("data-zone=\"ram\"", "zone-objects", "zone ram", "3"),
        (
            "data-upstream=\"origin\"",
            "upstream-requests",
            "upstream origin",
            "3",
        ),
        (
            "data-upstream=\"origin\"",
            "upstream-errors",
            "upstream origin",
            "0",
        ),
        (
            "data-upstream=\"origin\"",
            "server-state",
            "upstream origin server",
            "up",
        ),
    ] {
        match row(dom, table) {
            Some(r) => checks.eq(&format!("{what}, {name}"), r, field, want),
            None => checks.0.push(format!("{what}: no row {table}")),
        }
    }
    let shop = row(dom, "data-route=\"shop\"").unwrap_or_default();
    checks.check(
        shop.contains("shop · shop.test *.shop.test"),
        format!("{what}: the shop route's row names its hosts: {shop}"),
    );
    if let Some(size) = row(dom, "data-zone=\"ram\"").and_then(|r| metric(r, "zone-size")) {
        checks.check(
            size.parse::<u64>().is_ok_and(|n| n > 0),
            format!("{what}: zone ram size {size:?}, want > 0 bytes"),
        );
    }
    // Fields the page computes from newer /status sections: present once
    // /status serves them.
    checks.number(what, dom, "uptime");
    checks.number(what, dom, "connections-active");
    let p50 = checks.number(what, dom, "latency-p50");
    let p99 = checks.number(what, dom, "latency-p99");
    if let (Some(p50), Some(p99)) = (p50, p99) {
        checks.check(
            p50 > 0.0 && p50 <= p99 && p99 < 10_000.0,
            format!("{what}: latency p50 {p50} ms, p99 {p99} ms"),
        );
    }
    if let Some(r) = row(dom, "data-upstream=\"origin\"") {
        checks.number(&format!("{what}, upstream origin"), r, "upstream-p50");
        // Reuse: at most one connection per upstream request, so between 0
        // and 100 % (the exact figure depends on what ran at once).
        let reuse = checks.number(&format!("{what}, upstream origin"), r, "upstream-reuse");
        checks.check(
            reuse.is_some_and(|r| (0.0..=100.0).contains(&r)),
            format!("{what}: upstream reuse {reuse:?}"),
        );
    }
    let fleet_panel = tag_with(dom, "id=\"fleet\"").unwrap_or("");
    checks.check(
        attr(fleet_panel, "hidden").is_some(),
        format!("{what}: the fleet panel shows without [fleet]: {fleet_panel}"),
    );
    let budget_panel = tag_with(dom, "id=\"budget\"").unwrap_or("");
    checks.check(
        attr(budget_panel, "hidden").is_some(),
        format!("{what}: the origin budget panel shows without max_inflight: {budget_panel}"),
    );

    // 4. Live: traffic while the page polls, and the screenshot.
    let shot = screenshot_path();
    let _ = std::fs::remove_file(&shot);
    let stop = Arc::new(AtomicBool::new(false));
    let quiet = origin.hits();
    let traffic = {
        let stop = stop.clone();
        let url = proxy.url("");
        tokio::spawn(async move {
            let mut sent = 0u32;
            while !stop.load(Ordering::Relaxed) && sent < 5_000 {
                let path = if sent % 10 == 9 {
                    format!("/live/new-{sent}")
                } else {
                    format!("/live/{}", sent % 20)
                };
                get(&format!("{url}{path}")).await;
                sent += 1;
                // Paced: live traffic while the page draws, not a flood.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sent
        })
    };
    wait_until(
        Duration::from_secs(10),
        "live traffic at the origin",
        async || origin.hits() >= quiet + 5,
    )
    .await;
    let live = chromium(&page, 12_000, &[format!("--screenshot={}", shot.display())]).await;
    stop.store(true, Ordering::Relaxed);
    let sent = tokio::time::timeout(Duration::from_secs(20), traffic)
        .await
        .expect("traffic stops")
        .unwrap();
    checks.healthy("live traffic", &live, 5);
    if let Some(total) = checks.number("live traffic", &live.dom, "requests-total") {
        checks.check(
            total > 30.0,
            format!("live traffic: requests-total {total} after {sent} more requests"),
        );
    }
    let png = std::fs::read(&shot).unwrap_or_default();
    checks.check(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 30_000,
        format!(
            "screenshot {} is {} bytes, want a PNG over 30 kB",
            shot.display(),
            png.len()
        ),
    );
    if png.len() >= 24 {
        let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
        let height = u32::from_be_bytes([png[20], png[21], png[22], png[23]]);
        checks.check(
            width >= 1400 && height >= 1000,
            format!("screenshot is {width}x{height}, want 1400x1000"),
        );
    }
    checks.finish(&status);
    proxy.stop().await;
}

/// Fleet mode: the Fleet panel shows the node's breaker, Redis calls,
/// leases, commits and purges, and a row per Redis operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_the_fleet_panel_in_fleet_mode() {
    let redis = calmcache_testkit::redis::Redis::start();
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    // A second node with another route ttl: a member that differs.
    let other = Proxy::new(&origin)
        .route("ttl = { 200 = \"30s\" }\nrefresh = \"lock\"")
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    assert_eq!(get(&proxy.url("/fleet/a")).await.status, 200);
    // The commit to Redis runs off the request path; heartbeats every 2 s.
    wait_until(
        Duration::from_secs(10),
        "the commit and both members",
        async || {
            let fleet = proxy.status().await["fleet"].clone();
            fleet["commits"] == 1
                && fleet["members"].as_array().map(Vec::len) == Some(2)
                && fleet["redis"]["nodes"] == 1
        },
    )
    .await;
    let status = proxy.status().await;
    let run = chromium(&proxy.admin_url("/"), 2500, &[]).await;
    let what = "fleet mode";
    let mut checks = Checks::default();
    checks.healthy(what, &run, 2);
    let dom = &run.dom;
    let panel = tag_with(dom, "id=\"fleet\"").unwrap_or("");
    checks.check(
        !panel.is_empty() && attr(panel, "hidden").is_none(),
        format!("{what}: the fleet panel is hidden: {panel:?}"),
    );
    checks.eq(what, dom, "fleet-breaker", "closed");
    checks.eq(what, dom, "fleet-breaker-opened", "0");
    checks.eq(what, dom, "fleet-breaker-closed", "0");
    checks.eq(what, dom, "fleet-breaker-last-reason", "");
    checks.eq(what, dom, "fleet-leases-acquired", "1");
    checks.eq(what, dom, "fleet-leases-held", "0");
    checks.eq(what, dom, "fleet-shared-hits", "0");
    checks.eq(what, dom, "fleet-commits", "1");
    checks.eq(what, dom, "fleet-commits-refused", "0");
    checks.eq(what, dom, "fleet-purges-sent", "0");
    checks.eq(what, dom, "fleet-waits-timed-out", "0");
    checks.eq(what, dom, "fleet-calls-timed-out", "0");
    checks.eq(what, dom, "fleet-leases-newer", "0");
    checks.eq(what, dom, "fleet-leases-active", "0");
    checks.eq(what, dom, "fleet-leases-lost", "0");
    checks.eq(what, dom, "fleet-purge-gaps", "0");
    match row(dom, "data-fleet-object=\"") {
        Some(r) => {
            checks.check(r.contains("/fleet/a"), format!("{what}: object row {r}"));
            checks.eq(&format!("{what}, object"), r, "fleet-object-fleet", "1");
            checks.eq(&format!("{what}, object"), r, "fleet-object-here", "1");
        }
        None => checks
            .0
            .push(format!("{what}: no row for the object fetched")),
    }
    if let Some(ok) = checks.number(what, dom, "fleet-calls-ok") {
        checks.check(ok >= 2.0, format!("{what}: {ok} redis calls ok"));
    }
    checks.number(what, dom, "fleet-call-mean-us");
    for (op, want) in [("acquire", "1"), ("commit", "1"), ("release", "0")] {
        match row(dom, &format!("data-fleet-op=\"{op}\"")) {
            Some(r) => checks.eq(&format!("{what}, op {op}"), r, "fleet-op-ok", want),
            None => checks.0.push(format!("{what}: no row for op {op}")),
        }
    }
    if let Some(r) = row(dom, "data-fleet-op=\"acquire\"") {
        checks.number(&format!("{what}, op acquire"), r, "fleet-op-mean-us");
    }
    // Membership: both nodes listed, this one marked, the other differing
    // (no majority of two: this node reads it as a split).
    checks.eq(what, dom, "fleet-members", "2");
    checks.eq(what, dom, "fleet-config-drift", "split");
    let rows: Vec<&str> = dom
        .match_indices("data-fleet-member=\"")
        .filter_map(|(at, _)| row(&dom[at..], "data-fleet-member=\""))
        .collect();
    checks.check(rows.len() == 2, format!("{what}: member rows {rows:?}"));
    let mine: Vec<&&str> = rows
        .iter()
        .filter(|r| r.contains("data-this-node=\"yes\""))
        .collect();
    checks.check(
        mine.len() == 1 && mine[0].contains("(this node)"),
        format!("{what}: this node's row {mine:?}"),
    );
    let differing: Vec<&&str> = rows
        .iter()
        .filter(|r| r.contains("data-differs=\"yes\""))
        .collect();
    checks.check(
        differing.len() == 1 && differing[0].contains("differs in routes"),
        format!("{what}: the differing member's row {differing:?}"),
    );
    // Redis' memory: the testkit's redis-server has no maxmemory, which the
    // panel shows as "no limit" with the node's warning.
    checks.number(what, dom, "fleet-redis-used");
    checks.eq(what, dom, "fleet-redis-maxmemory", "0");
    checks.eq(what, dom, "fleet-redis-evicted", "0");
    checks.eq(what, dom, "fleet-redis-evicting", "");
    let warning = metric(dom, "fleet-redis-warning").unwrap_or("");
    checks.check(
        warning.contains("no maxmemory"),
        format!("{what}: redis warning {warning:?}"),
    );
    checks.finish(&status);
    other.stop().await;
    proxy.stop().await;
}

/// Redis' memory on the Fleet panel (issue 30): used of maxmemory, the
/// policy and the evicted keys, no warning for a Redis set up as FLEET asks
/// (maxmemory, an evicting policy); then, with the page open, Redis filled
/// past its 4 MB: the panel turns to "evicting" within a read or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_redis_memory_and_when_it_evicts() {
    let redis = calmcache_testkit::redis::Redis::start();
    let set = |k: &str, v: &str| redis.command(&["CONFIG", "SET", k, v]).unwrap();
    assert_eq!(set("maxmemory", "4mb"), "+OK");
    assert_eq!(set("maxmemory-policy", "allkeys-lru"), "+OK");
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .fleet(&redis.url(), "timeout = \"500ms\"")
        .start()
        .await;
    let mut tab = Devtools::open(&proxy.admin_url("/")).await;
    let shown = tab
        .when(&format!("{REDIS_STATE}.max === '4194304'"), REDIS_STATE)
        .await;
    assert_eq!(shown["policy"], "allkeys-lru", "{shown:#}");
    assert_eq!(shown["evicted"], "0", "{shown:#}");
    assert_eq!(shown["evicting"], "", "{shown:#}");
    assert_eq!(shown["look"], "no", "{shown:#}");
    assert_eq!(shown["warning"], "", "{shown:#}");
    assert!(
        shown["used"].as_str().and_then(|v| v.parse::<u64>().ok()) > Some(0),
        "{shown:#}"
    );
    assert!(
        shown["ratio"]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|r| r > 0.0 && r < 1.0),
        "{shown:#}"
    );

    // Fill it past maxmemory (64 KiB values, 25 MiB at most).
    let value = "x".repeat(64 * 1024);
    let evicted = || {
        let info = redis.command(&["INFO", "stats"]).unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("evicted_keys:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    for i in 0..400 {
        redis
            .command(&["SET", &format!("filler:{i}"), &value])
            .unwrap();
        if i % 20 == 19 && evicted() > 0 {
            break;
        }
    }
    assert!(evicted() > 0, "redis did not evict");
    // INFO is read every 5 s; the page polls every second.
    let evicting = wait_until(
        Duration::from_secs(20),
        "the panel to show evicting",
        async || {
            let state = tab.eval(REDIS_STATE).await;
            (state["look"] == "yes").then_some(state)
        },
    )
    .await;
    assert!(
        evicting["evicted"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            > Some(0),
        "{evicting:#}"
    );
    assert!(
        evicting["evicting"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            > Some(0),
        "{evicting:#}"
    );
    assert_eq!(evicting["warning"], "", "{evicting:#}");
    assert_eq!(evicting["jsErrors"], "0", "{evicting:#}");
    let console = tab.console();
    assert!(
        console.is_empty(),
        "console messages (the page logs nothing unless broken):\n  {}",
        console.join("\n  ")
    );
    tab.close().await;
    proxy.stop().await;
}

/// A signed fleet (issue 30): a heartbeat record forged in Redis is listed
/// apart on the Fleet panel, refused with why, and the one real node is
/// the only member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_lists_a_forged_heartbeat_apart() {
    let redis = calmcache_testkit::redis::Redis::start();
    let origin = Origin::start().await;
    let dir = crate::scratch("dashboard-signed");
    let secret = dir.join("fleet.secret");
    std::fs::write(&secret, "dashboard-secret-0123456789abcdef0123456789\n").unwrap();
    let proxy = Proxy::new(&origin)
        .fleet(
            &redis.url(),
            &format!(
                "timeout = \"500ms\"\nsecret_file = {:?}",
                secret.display().to_string()
            ),
        )
        .start()
        .await;
    let forged = r#"{"name":"forged","id":"x","version":"0","keys":"k","routes":"r","fleet":"f","started_at_ms":0}"#;
    let status = wait_until(
        Duration::from_secs(15),
        "the forged record refused",
        async || {
            crate::fleet_members::forge(&redis, "forged", forged);
            let fleet = proxy.status().await["fleet"].clone();
            (fleet["refused_members"].as_array().map(Vec::len) == Some(1)
                && fleet["members"].as_array().map(Vec::len) == Some(1))
            .then_some(fleet)
        },
    )
    .await;
    // Kept live while the page loads (a record is trimmed 6 s after its
    // last write).
    crate::fleet_members::forge(&redis, "forged", forged);
    let run = chromium(&proxy.admin_url("/"), 2500, &[]).await;
    let what = "signed fleet";
    let mut checks = Checks::default();
    checks.healthy(what, &run, 2);
    let dom = &run.dom;
    checks.eq(what, dom, "fleet-members", "1");
    if let Some(n) = checks.number(what, dom, "fleet-members-refused") {
        checks.check(n >= 1.0, format!("{what}: {n} records refused"));
    }
    match row(dom, "data-fleet-refused=\"forged\"") {
        Some(r) => checks.eq(
            &format!("{what}, refused"),
            r,
            "fleet-refused-why",
            "unsigned",
        ),
        None => checks
            .0
            .push(format!("{what}: no row for the forged record")),
    }
    checks.check(
        !dom.contains("data-fleet-member=\"forged\""),
        format!("{what}: the forged record is listed as a member"),
    );
    checks.finish(&status);
    proxy.stop().await;
}

/// The Fleet panel's Redis memory line, as one JSON object.
const REDIS_STATE: &str = "(function (m) { \
    m = function (name) { var e = document.querySelector('[data-metric=\"' + name + '\"]'); \
      return e ? e.getAttribute('data-value') : null; }; return { \
    used: m('fleet-redis-used'), max: m('fleet-redis-maxmemory'), ratio: m('fleet-redis-used-ratio'), \
    policy: m('fleet-redis-policy'), evicted: m('fleet-redis-evicted'), \
    evicting: m('fleet-redis-evicting'), warning: m('fleet-redis-warning'), \
    look: document.getElementById('fleet-redis').getAttribute('data-evicting'), \
    jsErrors: document.body.getAttribute('data-js-errors') }; })()";

/// The origin budget: an upstream with `max_inflight` gets a row in the
/// Origin budget panel with its limit, the queue and the sheds. One request
/// holds the only slot for 1.5 s; a second one, with no copy to fall back
/// on, waits `queue_timeout` and gets a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_the_origin_budget() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .upstream("max_inflight = 1\nqueue_timeout = \"200ms\"")
        .start()
        .await;
    let slow = {
        let url = proxy.url("/budget/slow");
        tokio::spawn(async move {
            calmcache_testkit::get_with(http::Method::GET, &url, &[("x-origin-delay-ms", "1500")])
                .await
        })
    };
    wait_until(
        Duration::from_secs(10),
        "the slow request at the origin",
        async || origin.hits_for("/budget/slow") == 1,
    )
    .await;
    let shed = get(&proxy.url("/budget/other")).await;
    assert_eq!(
        shed.status, 503,
        "no slot, no copy: 503 after queue_timeout"
    );
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), slow)
            .await
            .expect("slow request ends")
            .unwrap()
            .status,
        200
    );
    let status = proxy.status().await;
    assert_eq!(
        status["upstreams"]["origin"]["budget"]["shed_busy"], 1,
        "{status}"
    );
    let run = chromium(&proxy.admin_url("/"), 2500, &[]).await;
    let what = "origin budget";
    let mut checks = Checks::default();
    checks.healthy(what, &run, 2);
    let panel = tag_with(&run.dom, "id=\"budget\"").unwrap_or("");
    checks.check(
        !panel.is_empty() && attr(panel, "hidden").is_none(),
        format!("{what}: the origin budget panel is hidden: {panel:?}"),
    );
    match row(&run.dom, "data-budget=\"origin\"") {
        Some(r) => {
            for (name, want) in [
                ("budget-limit", "1"),
                ("budget-inflight", "0"),
                ("budget-queued", "0"),
                ("budget-shed-busy", "1"),
                ("budget-shed-stale", "0"),
                ("budget-refresh-skipped", "0"),
            ] {
                checks.eq(what, r, name, want);
            }
            checks.number(what, r, "budget-queue-wait");
        }
        None => checks.0.push(format!("{what}: no row for upstream origin")),
    }
    checks.finish(&status);
    proxy.stop().await;
}

/// A chromium page driven through the DevTools protocol: `Runtime.evaluate`
/// on the page's WebSocket (loopback, its port picked by chromium).
struct Devtools {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
    child: tokio::process::Child,
    console: Arc<std::sync::Mutex<Vec<String>>>,
    profile: PathBuf,
}

impl Devtools {
    /// Starts headless chromium on `url` and attaches to its page.
    async fn open(url: &str) -> Devtools {
        use tokio::io::AsyncBufReadExt;
        static N: AtomicU32 = AtomicU32::new(0);
        let profile = std::env::temp_dir().join(format!(
            "calmcache-it-chromium-cdp-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&profile);
        let mut child = tokio::process::Command::new(browser())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-sync",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-default-apps",
                "--mute-audio",
                "--enable-logging=stderr",
                "--v=0",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1400,1000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("chromium starts");
        // stderr: the DevTools address first, console lines all along.
        let console = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let seen = console.clone();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut all = String::new();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(at) = line.find("DevTools listening on ") {
                    let ws = line[at + "DevTools listening on ".len()..]
                        .trim()
                        .to_owned();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(Ok(ws));
                    }
                }
                if line.contains("CONSOLE") {
                    seen.lock().unwrap().push(line.clone());
                }
                all.push_str(&line);
                all.push('\n');
            }
            if let Some(tx) = tx.take() {
                let _ = tx.send(Err(all));
            }
        });
        let browser_ws = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("chromium printed its DevTools address within 30 s")
            .unwrap()
            .unwrap_or_else(|stderr| panic!("chromium printed no DevTools address:\n{stderr}"));
        // ws://127.0.0.1:PORT/devtools/browser/ID -> the page's own socket.
        let port_at = browser_ws
            .strip_prefix("ws://127.0.0.1:")
            .expect("DevTools on 127.0.0.1");
        let port = &port_at[..port_at.find('/').unwrap()];
        let page_ws = wait_until(
            Duration::from_secs(10),
            "chromium lists its page",
            async || {
                let list = get(&format!("http://127.0.0.1:{port}/json/list")).await;
                let targets: serde_json::Value =
                    serde_json::from_str(&list.body).unwrap_or_default();
                targets.as_array().and_then(|all| {
                    all.iter()
                        .find(|t| t["type"] == "page")
                        .and_then(|t| t["webSocketDebuggerUrl"].as_str())
                        .map(str::to_owned)
                })
            },
        )
        .await;
        let (ws, _) = tokio_tungstenite::connect_async(page_ws.as_str())
            .await
            .expect("DevTools WebSocket");
        let mut tab = Devtools {
            ws,
            next_id: 0,
            child,
            console,
            profile,
        };
        // Attached maybe before the page replaced about:blank: a promise
        // evaluated there would never settle, so ask until it is loaded.
        let origin = url.split('/').take(3).collect::<Vec<_>>().join("/");
        let loaded = format!("{origin} complete");
        let what = format!("chromium to load {url}");
        wait_until(Duration::from_secs(10), &what, async || {
            let at = tab
                .eval("location.origin + ' ' + document.readyState")
                .await;
            at.as_str() == Some(&loaded)
        })
        .await;
        tab
    }

    /// Evaluates `expression` in the page (a promise is awaited) and returns
    /// its value; panics on an exception.
    async fn eval(&mut self, expression: &str) -> serde_json::Value {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        self.next_id += 1;
        let id = self.next_id;
        let call = serde_json::json!({
            "id": id,
            "method": "Runtime.evaluate",
            "params": {"expression": expression, "awaitPromise": true, "returnByValue": true},
        });
        self.ws.send(Message::text(call.to_string())).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let msg = self.ws.next().await.expect("DevTools open").unwrap();
                let Message::Text(text) = msg else { continue };
                let v: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
                if v["id"] == id {
                    return v;
                }
            }
        })
        .await
        .expect("DevTools answered within 30 s");
        assert!(
            reply["result"]["exceptionDetails"].is_null() && reply["error"].is_null(),
            "{expression}\nthrew: {reply:#}"
        );
        reply["result"]["result"]["value"].clone()
    }

    /// Waits (in the page, up to 10 s) until `condition` holds, then
    /// returns `snapshot`'s value.
    async fn when(&mut self, condition: &str, snapshot: &str) -> serde_json::Value {
        let js = format!(
            "new Promise(function (ok, no) {{ var t0 = Date.now(); (function wait() {{ \
               var done = false; try {{ done = ({condition}); }} catch (e) {{}} \
               if (done) ok({snapshot}); \
               else if (Date.now() - t0 > 10000) no(new Error('timed out waiting for: ' + {cond:?})); \
               else setTimeout(wait, 50); }})(); }})",
            cond = condition
        );
        self.eval(&js).await
    }

    /// Console lines printed so far.
    fn console(&self) -> Vec<String> {
        self.console.lock().unwrap().clone()
    }

    async fn close(mut self) {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// What the page shows, as one JSON object (for `Devtools::when`).
const PAGE_STATE: &str = "(function (m) { \
    m = function (name) { var e = document.querySelector('[data-metric=\"' + name + '\"]'); \
      return e ? e.getAttribute('data-value') : null; }; return { \
    conn: document.getElementById('conn').getAttribute('data-state'), \
    form: !document.getElementById('login').hidden, \
    note: document.getElementById('login-note').textContent, \
    samples: Number(document.body.getAttribute('data-samples')), \
    jsErrors: document.body.getAttribute('data-js-errors'), \
    requests: m('requests-total'), \
    hits: m('status-hit'), \
    url: location.href, \
    stored: sessionStorage.getItem('calmcache-admin-token') }; })()";

/// Types `token` into the login form and submits it, as a user would.
fn submit(token: &str) -> String {
    format!(
        "(function () {{ var i = document.getElementById('login-token'); i.focus(); \
           i.value = {token:?}; document.getElementById('login').requestSubmit(); return true; }})()"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_asks_for_the_token_and_shows_numbers_after_login() {
    const TOKEN: &str = "dashboard-login-token-for-tests";
    let origin = Origin::start().await;
    // Not on loopback: /status needs the token, the page does not.
    let proxy = Proxy::new(&origin)
        .admin(&format!("listen = \"0.0.0.0:0\"\ntoken = \"{TOKEN}\""))
        .route("ttl = { 200 = \"60s\" }\nrefresh = \"lock\"")
        .start()
        .await;
    for _ in 0..5 {
        assert_eq!(get(&proxy.url("/login/a")).await.status, 200);
    }
    assert_eq!(get(&proxy.admin_url("/status")).await.status, 401);
    let page = proxy.admin_url("/");
    // A ?token= in the address is not read any more.
    let mut page_tab = Devtools::open(&format!("{page}?token={TOKEN}")).await;

    // 1. /status answered 401: the form, no numbers.
    let shown = page_tab
        .when("!document.getElementById('login').hidden", PAGE_STATE)
        .await;
    assert_eq!(shown["conn"], "login", "{shown:#}");
    assert_eq!(shown["samples"], 0, "{shown:#}");
    assert_eq!(shown["requests"], "", "{shown:#}");

    // 2. A wrong token: refused, forgotten, the form again.
    page_tab.eval(&submit("not-the-token")).await;
    let refused = page_tab
        .when(
            "!document.getElementById('login').hidden && \
             document.getElementById('login-note').textContent.indexOf('refused') >= 0",
            PAGE_STATE,
        )
        .await;
    assert_eq!(refused["conn"], "login", "{refused:#}");
    assert!(refused["stored"].is_null(), "{refused:#}");

    // 3. The right token: the tiles show the traffic.
    page_tab.eval(&submit(TOKEN)).await;
    let live = page_tab
        .when(
            "Number(document.body.getAttribute('data-samples')) >= 2",
            PAGE_STATE,
        )
        .await;
    assert_eq!(live["conn"], "ok", "{live:#}");
    assert_eq!(live["form"], false, "{live:#}");
    assert_eq!(live["requests"], "5", "{live:#}");
    assert_eq!(live["hits"], "4", "{live:#}");
    assert_eq!(live["jsErrors"], "0", "{live:#}");
    assert_eq!(live["stored"], TOKEN, "kept in sessionStorage: {live:#}");
    // The address is the one it was opened with: the form never puts the
    // token there.
    assert_eq!(live["url"], format!("{page}?token={TOKEN}"), "{live:#}");
    let console = page_tab.console();
    assert!(
        console.is_empty(),
        "console messages (the page logs nothing unless broken):\n  {}",
        console.join("\n  ")
    );
    page_tab.close().await;
    proxy.stop().await;
}
