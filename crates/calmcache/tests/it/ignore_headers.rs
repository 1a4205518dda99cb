//! A route's `ignore_headers` (NGINX's proxy_ignore_headers, issue 28 item
//! 4) over HTTP/1.1, h2c and HTTP/2 over TLS. The pair that matters most:
//! an ignored `Set-Cookie` with each place a stored copy lives (memory, a
//! disk zone's files, the fleet's Redis copy). The answer is stored, the
//! client whose request fetched it gets its cookie, the followers of that
//! fetch and every later hit get none, and no stored byte holds it.

use std::sync::Arc;
use std::time::Duration;

use calmcache_testkit::redis::Redis;
use calmcache_testkit::{Origin, Proxy, Reply, Wire, Wires};
use http::Method;

use crate::wait_until;

/// The cookie the origin sets: unique enough to scan storage for.
const COOKIE: &str = "session=for-the-filler-only-7f3a9c";
const HOST: &str = "ignore.test";
/// The route: stored for a minute, its Set-Cookie ignored.
const ROUTE: &str =
    "ttl = { 200 = \"60s\" }\nignore_headers = [\"Set-Cookie\"]\nlock_timeout = \"5s\"";
/// How long the origin thinks, so that followers join the fetch.
const DELAY_MS: &str = "400";
const FOLLOWERS: usize = 3;

/// The origin's steering for a cookie-setting answer; `big` streams a body
/// of unknown length (the fill stores it while it streams).
fn steering(big: bool) -> Vec<(&'static str, &'static str)> {
    let mut h = vec![
        ("x-origin-set-cookie", COOKIE),
        ("x-origin-delay-ms", DELAY_MS),
    ];
    if big {
        h.extend([
            ("x-origin-stream-bytes", "300000"),
            ("x-origin-chunked", "1"),
        ]);
    }
    h
}

async fn get(node: &Wires, wire: &Wire, path: &str, big: bool) -> Reply {
    node.send(wire, Method::GET, HOST, path, &steering(big), "")
        .await
}

fn cookies(reply: &Reply) -> Vec<&str> {
    reply.header_all("set-cookie")
}

/// One fetch with followers on `node` over `wire`: the leader gets the
/// cookie, the followers the same body without it, one origin request.
async fn leader_and_followers(
    origin: &Origin,
    node: &Arc<Wires>,
    wire: &Wire,
    path: &str,
    big: bool,
) -> Reply {
    let label = format!("{} {path}", wire.label());
    let before = origin.in_progress();
    let leader = {
        let (node, wire, path) = (node.clone(), wire.clone(), path.to_owned());
        tokio::spawn(async move { get(&node, &wire, &path, big).await })
    };
    wait_until(
        Duration::from_secs(5),
        "the leader at the origin",
        async || origin.in_progress() > before,
    )
    .await;
    let followers: Vec<_> = (0..FOLLOWERS)
        .map(|_| {
            let (node, wire, path) = (node.clone(), wire.clone(), path.to_owned());
            tokio::spawn(async move { get(&node, &wire, &path, big).await })
        })
        .collect();
    let leader = leader.await.unwrap();
    assert_eq!(leader.status, 200, "{label}: {}", leader.body);
    assert_eq!(
        cookies(&leader),
        [COOKIE],
        "{label}: the filler gets its cookie"
    );
    assert!(
        leader.cache_status_params().has("stored"),
        "{label}: {}",
        leader.cache_status()
    );
    for follower in followers {
        let follower = follower.await.unwrap();
        assert_eq!(follower.status, 200, "{label}");
        assert!(
            cookies(&follower).is_empty(),
            "{label}: a follower got {:?}",
            cookies(&follower)
        );
        assert_eq!(follower.bytes, leader.bytes, "{label}: the same body");
    }
    assert_eq!(origin.hits_for(path), 1, "{label}: one fetch");
    leader
}

/// A later request is a hit without the cookie.
async fn hit_without_cookie(node: &Wires, wire: &Wire, path: &str, big: bool) {
    let label = format!("{} {path}", wire.label());
    let hit = get(node, wire, path, big).await;
    assert!(hit.is_hit(), "{label}: {}", hit.cache_status());
    assert!(
        cookies(&hit).is_empty(),
        "{label}: a hit got {:?}",
        cookies(&hit)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_set_cookie_goes_to_the_filler_alone_in_memory() {
    let origin = Origin::start().await;
    let node = Arc::new(Wires::start(Proxy::new(&origin).route(ROUTE), "").await);
    for wire in node.all.clone() {
        for big in [false, true] {
            let path = format!("/mem/{}/{big}", wire.label().replace(' ', "-"));
            leader_and_followers(&origin, &node, &wire, &path, big).await;
            hit_without_cookie(&node, &wire, &path, big).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_set_cookie_is_never_written_to_a_disk_zone() {
    let origin = Origin::start().await;
    let dir = crate::scratch("ignore-set-cookie-disk");
    let proxy = Proxy::new(&origin).route(ROUTE).disk_zone(&dir, "");
    let node = Arc::new(Wires::start(proxy, "").await);
    for wire in node.all.clone() {
        for big in [false, true] {
            let path = format!("/disk/{}/{big}", wire.label().replace(' ', "-"));
            leader_and_followers(&origin, &node, &wire, &path, big).await;
            hit_without_cookie(&node, &wire, &path, big).await;
        }
    }
    // Every object is on disk (six of them, small and streamed), and none
    // holds the cookie.
    let files = files_under(&dir);
    let holding: Vec<_> = files
        .iter()
        .filter(|f| contains(&std::fs::read(f).unwrap_or_default(), COOKIE.as_bytes()))
        .collect();
    assert!(files.len() >= 6, "objects on disk: {files:?}");
    assert!(holding.is_empty(), "the cookie on disk in {holding:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_set_cookie_never_reaches_the_fleets_redis_copy() {
    let redis = Redis::start();
    let origin = Origin::start().await;
    let node = async || {
        let proxy = Proxy::new(&origin)
            .admin("listen = \"127.0.0.1:0\"\ntoken = \"t\"")
            .route(ROUTE)
            .fleet(&redis.url(), "timeout = \"1s\"");
        Arc::new(Wires::start(proxy, "").await)
    };
    let (a, b) = (node().await, node().await);
    crate::fleet_harness::wait_connected(
        &[a.clone(), b.clone()],
        crate::fleet_harness::CLOSED_WITHIN,
        "ignore_headers",
    )
    .await;
    for w in 0..a.all.len() {
        let path = format!("/fleet/{w}");
        let commits = crate::fleet_harness::total(std::slice::from_ref(&a), &["commits"]).await;
        leader_and_followers(&origin, &a, &a.all[w], &path, false).await;
        wait_until(Duration::from_secs(10), "the copy in redis", async || {
            crate::fleet_harness::total(std::slice::from_ref(&a), &["commits"]).await > commits
        })
        .await;
        // The other node takes the copy from Redis: no cookie, no fetch.
        let shared = get(&b, &b.all[w], &path, false).await;
        assert!(
            shared.cache_status().contains("hit"),
            "{}",
            shared.cache_status()
        );
        assert!(
            cookies(&shared).is_empty(),
            "node b got {:?}",
            cookies(&shared)
        );
        assert_eq!(origin.hits_for(&path), 1, "{}: one fetch", a.all[w].label());
    }
    let stored = redis_values(&redis);
    assert!(!stored.is_empty(), "the fleet stored in redis");
    assert!(!stored.contains(COOKIE), "the cookie is in redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_cache_control_and_vary_store_one_answer_for_all() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route("ttl = { 200 = \"60s\" }\nignore_headers = [\"Cache-Control\", \"Vary\"]");
    let node = Wires::start(proxy, "").await;
    let steer = [
        ("x-origin-cache-control", "private, no-store"),
        ("x-origin-header", "Vary: Accept-Language"),
    ];
    for wire in &node.all {
        let label = wire.label();
        let path = format!("/one/{}", label.replace(' ', "-"));
        let ask = async |lang: &'static str| {
            let mut h = steer.to_vec();
            h.push(("accept-language", lang));
            node.send(wire, Method::GET, HOST, &path, &h, "").await
        };
        let first = ask("en").await;
        assert!(
            first.cache_status_params().has("stored"),
            "{label}: {}",
            first.cache_status()
        );
        assert!(
            !first.has_header("vary"),
            "{label}: the stored answer no longer varies"
        );
        let other = ask("fr").await;
        assert!(other.is_hit(), "{label}: {}", other.cache_status());
        assert_eq!(other.body, first.body, "{label}");
        // The origin's Cache-Control is passed on as it was (as NGINX does).
        assert_eq!(
            other.header("cache-control"),
            "private, no-store",
            "{label}"
        );
        assert_eq!(origin.hits_for(&path), 1, "{label}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ignore_headers_set_cookie_is_still_never_stored() {
    // The default is the origin's word: the pair's other half.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin).route("ttl = { 200 = \"60s\" }");
    let node = Wires::start(proxy, "").await;
    for wire in &node.all {
        let path = format!("/default/{}", wire.label().replace(' ', "-"));
        for _ in 0..2 {
            let r = node
                .send(
                    wire,
                    Method::GET,
                    HOST,
                    &path,
                    &[("x-origin-set-cookie", COOKIE)],
                    "",
                )
                .await;
            assert_eq!(cookies(&r), [COOKIE]);
            assert!(!r.is_hit(), "{}", r.cache_status());
        }
        assert_eq!(origin.hits_for(&path), 2, "{}", wire.label());
    }
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if !entry
                .file_name()
                .to_string_lossy()
                .starts_with(".calmcache")
            {
                out.push(path);
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every string and hash value in `redis`, joined (lossy UTF-8), to scan.
fn redis_values(redis: &Redis) -> String {
    let cli = |args: &[&str]| {
        let port = redis.addr().port().to_string();
        let out = std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port, "--raw"])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut all = String::new();
    for key in cli(&["--scan"]).lines() {
        match cli(&["TYPE", key]).trim() {
            "string" => all.push_str(&cli(&["GET", key])),
            "hash" => all.push_str(&cli(&["HGETALL", key])),
            "stream" => all.push_str(&cli(&["XRANGE", key, "-", "+"])),
            _ => {}
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revalidation_hands_its_set_cookie_to_its_own_client_alone() {
    // Stale on arrival (no-cache) with a validator: every use revalidates,
    // and a 304's ignored Set-Cookie goes to the client that asked.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .no_default_ttl()
        .route("ignore_headers = [\"Set-Cookie\"]");
    let node = Wires::start(proxy, "").await;
    for wire in &node.all {
        let label = wire.label();
        let path = format!("/revalidated/{}", label.replace(' ', "-"));
        let validated = [
            ("x-origin-cache-control", "no-cache"),
            ("x-origin-header", "ETag: \"v1\""),
        ];
        let with_cookie = [validated[0], validated[1], ("x-origin-set-cookie", COOKIE)];
        let send =
            async |h: &[(&str, &str)]| node.send(wire, Method::GET, HOST, &path, h, "").await;
        let first = send(&with_cookie).await;
        assert!(
            first.cache_status_params().has("stored"),
            "{label}: {}",
            first.cache_status()
        );
        assert_eq!(cookies(&first), [COOKIE], "{label}");
        // The origin's 304 sets no cookie: the stored copy gives none.
        let plain = send(&validated).await;
        assert_eq!(
            plain.cache_status_params().param("fwd-status"),
            Some("304"),
            "{label}: {}",
            plain.cache_status()
        );
        assert!(cookies(&plain).is_empty(), "{label}: {:?}", cookies(&plain));
        // A 304 that sets one: this client gets it, once.
        let again = send(&with_cookie).await;
        assert_eq!(
            cookies(&again),
            [COOKIE],
            "{label}: {}",
            again.cache_status()
        );
        assert_eq!(origin.hits_for(&path), 3, "{label}");
    }
}
