//! An upstream's `balance` with several real origins, over HTTP/1.1, h2c
//! and HTTP/2 over TLS: `"hash"` keeps each `$request_uri` on one server,
//! sends a down server's keys to the next along the ring (the others'
//! stay put) and gives them back when it recovers; `"least_conn"` sends
//! requests past a server that is busy with a slow one.

use std::time::Duration;

use calmcache_testkit::{Origin, Proxy, Reply, Wire, Wires};
use http::Method;

use crate::wait_until;

const LIMIT: Duration = Duration::from_secs(20);

async fn get(wires: &Wires, wire: &Wire, path: &str, headers: &[(&str, &str)]) -> Reply {
    let host = wires.proxy.host();
    wires
        .send(wire, Method::GET, &host, path, headers, "")
        .await
}

/// Which of `origins` answered `path` how many times.
fn seen_by(origins: &[Origin], path: &str) -> Vec<u64> {
    origins.iter().map(|o| o.hits_for(path)).collect()
}

fn owner(origins: &[Origin], path: &str) -> usize {
    let seen = seen_by(origins, path);
    let owners: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] > 0).collect();
    assert_eq!(owners.len(), 1, "{path}: seen by {seen:?}");
    owners[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_keeps_each_uri_on_one_server_and_moves_only_a_down_server_s_keys() {
    let mut origins = vec![
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
    ];
    let proxy = Proxy::new(&origins[0])
        .also_server(origins[1].addr())
        .also_server(origins[2].addr())
        .no_zone()
        .upstream("balance = \"hash\"\nhash_key = \"$request_uri\"\nfail_timeout = \"1s\"");
    let wires = Wires::start(proxy, "").await;
    let paths: Vec<String> = (0..24).map(|i| format!("/k/{i}")).collect();
    // Each URI twice over each wire: always the same server.
    let mut owners = Vec::new();
    for path in &paths {
        for wire in &wires.all {
            let reply = get(&wires, wire, path, &[]).await;
            assert_eq!(reply.status, 200, "{} {path}", wire.label());
        }
        owners.push(owner(&origins, path));
    }
    for i in 0..3 {
        assert!(owners.contains(&i), "origin {i} got no keys: {owners:?}");
    }
    // /status says how servers are chosen.
    let status = wires.proxy.status().await;
    let upstream = &status["upstreams"]["origin"];
    assert_eq!(upstream["balance"], "hash", "{upstream}");
    assert_eq!(upstream["hash_key"], "$request_uri", "{upstream}");
    // Origin 1 goes away: its keys go elsewhere, every other key stays.
    let addr = origins[1].addr();
    origins[1].stop();
    let before: Vec<Vec<u64>> = paths.iter().map(|p| seen_by(&origins, p)).collect();
    for (path, &was) in paths.iter().zip(&owners) {
        for wire in &wires.all {
            let reply = get(&wires, wire, path, &[]).await;
            assert_eq!(
                reply.status,
                200,
                "{} {path} with origin 1 down",
                wire.label()
            );
        }
        let now = seen_by(&origins, path);
        let before = &before[paths.iter().position(|p| p == path).unwrap()];
        if was != 1 {
            assert_eq!(now[was], before[was] + 3, "{path} moved off origin {was}");
        } else {
            // One next server along the ring for every request of the key.
            let moved: Vec<usize> = (0..3).filter(|&i| now[i] > before[i]).collect();
            assert_eq!(moved.len(), 1, "{path}: {before:?} -> {now:?}");
            assert_ne!(moved[0], 1);
        }
    }
    // Back on the same address: its keys come back once its trial passed.
    origins[1] = Origin::start_on(addr).await;
    let back = paths[owners.iter().position(|&o| o == 1).unwrap()].clone();
    let wire = &wires.all[0];
    wait_until(LIMIT, "origin 1's key back on origin 1", async || {
        get(&wires, wire, &back, &[]).await;
        Some(()).filter(|_| origins[1].hits_for(&back) > 0)
    })
    .await;
    for wire in &wires.all {
        let hits = origins[1].hits_for(&back);
        get(&wires, wire, &back, &[]).await;
        assert_eq!(origins[1].hits_for(&back), hits + 1, "{}", wire.label());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_conn_sends_requests_past_a_server_busy_with_a_slow_one() {
    let origins = [Origin::start().await, Origin::start().await];
    let proxy = Proxy::new(&origins[0])
        .also_server(origins[1].addr())
        .no_zone()
        .upstream("balance = \"least_conn\"");
    let wires = std::sync::Arc::new(Wires::start(proxy, "").await);
    let status = wires.proxy.status().await;
    assert_eq!(status["upstreams"]["origin"]["balance"], "least_conn");
    assert!(status["upstreams"]["origin"]["hash_key"].is_null());
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let busy_before: Vec<u64> = origins.iter().map(Origin::hits).collect();
        let slow = {
            let (wires, wire) = (wires.clone(), wire.clone());
            tokio::spawn(async move {
                let path = format!("/slow/{w}");
                get(&wires, &wire, &path, &[("x-origin-delay-ms", "4000")]).await
            })
        };
        let slow_path = format!("/slow/{w}");
        let busy = wait_until(LIMIT, "the slow request at an origin", async || {
            (0..2).find(|&i| origins[i].hits_for(&slow_path) > 0)
        })
        .await;
        let idle = 1 - busy;
        for i in 0..6 {
            let path = format!("/fast/{w}/{i}");
            let reply = get(&wires, wire, &path, &[]).await;
            assert_eq!(reply.status, 200, "{what}");
            assert_eq!(
                origins[idle].hits_for(&path),
                1,
                "{what}: {path} went to the busy server"
            );
        }
        assert_eq!(slow.await.unwrap().status, 200, "{what}");
        // Both idle again: ties go in turn, so both get some.
        for i in 0..6 {
            get(&wires, wire, &format!("/after/{w}/{i}"), &[]).await;
        }
        let after: Vec<u64> = (0..2).map(|i| origins[i].hits() - busy_before[i]).collect();
        assert!(after[busy] >= 2, "{what}: {after:?}");
    }
}

/// The origin budget holds under `"hash"`: with one slot per server, a
/// request whose ring server is busy takes a free slot at another server
/// at once (as with round robin) instead of a second one at its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_keeps_to_the_origin_budget() {
    let origins = [Origin::start().await, Origin::start().await];
    let proxy = Proxy::new(&origins[0])
        .also_server(origins[1].addr())
        .no_zone()
        .upstream(
            "balance = \"hash\"\nhash_key = \"$uri\"\nmax_inflight = 1\nqueue_timeout = \"10s\"",
        );
    let wires = std::sync::Arc::new(Wires::start(proxy, "").await);
    for (w, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/budget/{w}");
        // Where the key lives.
        get(&wires, wire, &path, &[]).await;
        let home = owner(&origins, &path);
        let slow = {
            let (wires, wire, path) = (wires.clone(), wire.clone(), path.clone());
            tokio::spawn(async move {
                get(&wires, &wire, &path, &[("x-origin-delay-ms", "3000")]).await
            })
        };
        wait_until(LIMIT, "the slow request at the key's server", async || {
            Some(()).filter(|_| origins[home].in_progress() == 1)
        })
        .await;
        let reply = get(&wires, wire, &path, &[]).await;
        assert_eq!(reply.status, 200, "{what}");
        assert_eq!(
            origins[1 - home].hits_for(&path),
            1,
            "{what}: not at the free server"
        );
        assert_eq!(
            origins[home].peak_in_progress(),
            1,
            "{what}: two at once at the key's server"
        );
        assert_eq!(slow.await.unwrap().status, 200, "{what}");
    }
}
