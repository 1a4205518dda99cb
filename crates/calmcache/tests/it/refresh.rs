//! Refresh policies against a stampede: one origin fetch per expiry, nobody stranded.

use std::time::Duration;

use calmcache_testkit::{get, get_with, Origin, Proxy};
use http::Method;

use crate::{burst, wait_until, CLIENTS};

/// How long a test waits for a refresh to reach the origin or land.
const LIMIT: Duration = Duration::from_secs(10);

const SLOW: (&str, &str) = ("x-origin-delay-ms", "300");

/// Stores `/hot`, lets it expire, then sends 200 concurrent requests.
async fn stampede_on_expired(policy: &str) -> (Origin, Vec<calmcache_testkit::Reply>) {
    stampede_with(policy, "").await
}

/// [`stampede_on_expired`] with more route keys.
async fn stampede_with(policy: &str, keys: &str) -> (Origin, Vec<calmcache_testkit::Reply>) {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route(&format!(
            "refresh = \"{policy}\"\nttl = {{ 200 = \"500ms\" }}\n{keys}"
        ))
        .start()
        .await;
    let url = proxy.url("/hot");
    let first = get_with(Method::GET, &url, &[SLOW]).await;
    assert!(
        first.cache_status_params().has("stored"),
        "{}",
        first.cache_status()
    );
    // Expired by ~50 ms: inside SUS's landing window of one delta (300 ms).
    tokio::time::sleep(Duration::from_millis(550)).await;
    // The refresh's answer lives 60 s: a burst slower than the new copy's
    // 500 ms (a loaded machine) must not see it expire or near expiry and
    // count a second, legitimate refresh as a duplicate (CI saw 3 for sus).
    let lasting = ("x-origin-cache-control", "max-age=60");
    let replies = burst(&url, CLIENTS, &[SLOW, lasting]).await;
    (origin, replies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_sends_one_fetch_for_200_requests_on_an_expired_key() {
    let (origin, replies) = stampede_on_expired("lock").await;
    assert_eq!(origin.hits(), 2, "one fill, one refresh");
    assert!(replies.iter().all(|r| r.status == 200));
    let collapsed = replies
        .iter()
        .filter(|r| r.cache_status().contains("collapsed"))
        .count();
    // Requests that connect after the fetch landed get plain hits of it.
    assert!(
        collapsed >= CLIENTS / 2,
        "most waited for the leader: {collapsed}"
    );
    assert!(
        replies.iter().all(|r| r.body.contains("n=2")),
        "everyone got the new copy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_sends_one_fetch_for_200_requests_on_an_expired_key() {
    let (origin, replies) = stampede_on_expired("per").await;
    assert_eq!(origin.hits(), 2);
    assert!(replies
        .iter()
        .all(|r| r.status == 200 && r.body.contains("n=2")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sus_sends_one_fetch_and_keeps_answering_from_the_copy() {
    // With the default stale window nobody waits: the first request after
    // expiry gets the copy and starts the refresh in the background.
    let (origin, replies) = stampede_on_expired("sus").await;
    let waited: Vec<_> = replies
        .iter()
        .filter(|r| !r.cache_status().contains("hit"))
        .collect();
    assert!(
        waited.is_empty(),
        "nobody waits under sus: {:?}",
        waited.iter().map(|r| r.cache_status()).collect::<Vec<_>>()
    );
    wait_until(LIMIT, "the background refresh", async || origin.hits() >= 2).await;
    assert_eq!(origin.hits(), 2, "one background refresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_lets_the_stampede_through() {
    // The contrast that makes the other tests meaningful.
    let (origin, _) = stampede_on_expired("none").await;
    assert!(
        origin.hits() > 10,
        "none should stampede, origin saw {}",
        origin.hits()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_serves_stale_and_refreshes_once() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"\nttl = { 200 = \"300ms\" }\nstale_while_revalidate = \"10s\"")
        .start()
        .await;
    let url = proxy.url("/page");
    get_with(Method::GET, &url, &[SLOW]).await;
    // The 300 ms ttl runs out.
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The refresh takes 1.5 s, far longer than the burst takes to arrive.
    let refresh_slowly = ("x-origin-delay-ms", "1500");
    let replies = burst(&url, 50, &[refresh_slowly]).await;
    for r in &replies {
        assert!(
            r.cache_status().contains("detail=stale-while-revalidate"),
            "{}",
            r.cache_status()
        );
        assert!(r.body.contains("n=1"), "stale copy served");
    }
    // The 1.5 s refresh lands. A sleep: polling with GETs would count as
    // stale served, and no counter says "stored".
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert_eq!(origin.hits(), 2, "exactly one background refresh");
    let fresh = get(&url).await;
    assert!(fresh.body.contains("n=2") && fresh.cache_status().contains("hit"));
    let status = proxy.status().await;
    assert_eq!(status["totals"]["stale_served"], 50);
    assert_eq!(status["totals"]["background_refreshes"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sus_refreshes_early_in_the_background() {
    // A 1 s object is refreshed before it expires; clients keep getting hits.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"sus\"\nttl = { 200 = \"1s\" }")
        .start()
        .await;
    let url = proxy.url("/early");
    get(&url).await;
    let mut early = 0;
    for _ in 0..300 {
        let r = get(&url).await;
        assert!(
            r.cache_status().contains("hit") || r.cache_status().contains("fwd=stale"),
            "{}",
            r.cache_status()
        );
        early += r.cache_status().contains("refresh-early") as usize;
        // Requests spread over the lifetime: time is the subject here.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(early >= 1, "an early refresh was drawn");
    let status = proxy.status().await;
    let started = status["totals"]["early_refreshes"].as_u64().unwrap();
    assert!(started >= 1);
    // Counted when started, not each time a request draws while one is in flight.
    assert!(
        started < origin.hits(),
        "{started} early refreshes, {} origin hits",
        origin.hits()
    );
    assert!(
        status["totals"]["misses"].as_u64().unwrap() <= 2,
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_leader_does_not_strand_its_waiters() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"")
        .start()
        .await;
    let url = proxy.url("/slow");
    let leader = {
        let url = url.clone();
        tokio::spawn(
            async move { get_with(Method::GET, &url, &[("x-origin-delay-ms", "500")]).await },
        )
    };
    wait_until(LIMIT, "the leader's fetch at the origin", async || {
        origin.hits() >= 1
    })
    .await;
    leader.abort(); // the client goes away mid-fetch
    let follower = get_with(Method::GET, &url, &[("x-origin-delay-ms", "500")]).await;
    assert_eq!(follower.status, 200);
    assert!(
        follower.cache_status().contains("collapsed"),
        "{}",
        follower.cache_status()
    );
    assert_eq!(origin.hits(), 1, "the fetch went on without its client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_wait_for_a_leader_that_makes_progress() {
    // lock_timeout is 100 ms, the leader's fetch takes 1 s but stays within
    // the upstream's read_timeout: the follower waits for it and does not
    // send a second request to the slow origin.
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"lock\"\nlock_timeout = \"100ms\"")
        .start()
        .await;
    let url = proxy.url("/stuck");
    let u = url.clone();
    let leader =
        tokio::spawn(
            async move { get_with(Method::GET, &u, &[("x-origin-delay-ms", "1000")]).await },
        );
    wait_until(LIMIT, "the leader's fetch at the origin", async || {
        origin.hits() >= 1
    })
    .await;
    let follower = get_with(Method::GET, &url, &[("x-origin-delay-ms", "10")]).await;
    assert_eq!(follower.status, 200);
    assert!(follower.body.contains("n=1"), "{}", follower.body);
    assert!(follower.cache_status().contains("collapsed"));
    assert_eq!(leader.await.unwrap().status, 200);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_paths_are_fetched_before_anyone_asks_and_kept_fresh() {
    let origin = Origin::start().await;
    let proxy = Proxy::new(&origin)
        .route("refresh = \"sus\"\nttl = { 200 = \"400ms\" }\nwarm = [\"/\", \"/feed/\"]\nwarm_host = \"warm.test\"")
        .start()
        .await;
    // Three 400 ms lifetimes pass: the warm-up must refresh ahead of each.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(
        origin.hits_for("/feed/") >= 3,
        "refreshed ahead of each expiry: {}",
        origin.hits_for("/feed/")
    );
    assert!(
        origin.hits_for("/feed/") <= 5,
        "about one per lifetime: {}",
        origin.hits_for("/feed/")
    );
    let r = get_with(Method::GET, &proxy.url("/feed/"), &[("host", "warm.test")]).await;
    assert!(
        r.cache_status().contains("hit"),
        "first visitor gets a hit: {}",
        r.cache_status()
    );
}
