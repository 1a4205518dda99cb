//! Disk hits of 64 KiB to 1 MiB (issue 29, written for the `sendfile` path
//! that was measured and not kept: see bench/HISTORY.md, "disk hits sent
//! with sendfile"). Whatever path sends a disk body, a slow reader must get
//! exactly the version it asked for while that object's file is purged
//! (unlinked), refilled (a new file renamed over the path) and evicted under
//! it, and every wire (HTTP/1.1, h2c, HTTP/2 over TLS) gets the same bytes,
//! whole and in ranges, around the sizes where a send path could change.

use std::time::Duration;

use calmcache_testkit::{Origin, Proxy, Wires};
use http::Method;

use crate::purge_integrity::admin;
use crate::slow_churn::{slow_readers_keep_their_version, SlowCase};

async fn disk_wires(dir: &std::path::Path) -> (Origin, Wires) {
    let origin = Origin::start().await;
    let builder = Proxy::new(&origin)
        .zone("24MiB", "4MiB")
        .disk_zone(dir, "")
        .admin(&admin())
        .route("ttl = { 200 = \"600s\" }");
    let wires = Wires::start(builder, "").await;
    (origin, wires)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_hits_are_byte_exact_on_every_wire_around_the_sendfile_sizes() {
    let dir = crate::disk_zone::scratch("sendfile-wires");
    let (_origin, wires) = disk_wires(&dir).await;
    // Around the sendfile threshold (64 KiB of file), a stand-in's size
    // (256 KiB: a longer body is several) and the inline limit (1 MiB).
    for len in [65_000usize, 70_000, 262_100, 262_144, 600_001, 1_040_000] {
        let path = format!("/s{len}");
        let size = len.to_string();
        let ask = [("x-origin-body-bytes", size.as_str())];
        for wire in &wires.all {
            // (A TLS request is another key: each wire fills its own.)
            let stored = wires
                .send(wire, Method::GET, "sf.test", &path, &ask, "")
                .await;
            let want = stored.bytes.clone();
            assert_eq!(want.len(), len, "{len} {}: the fill", wire.label());
            // The fill's answer can end before its file is renamed in: a
            // request then joins the write (`collapsed`), not a hit yet.
            let what = format!("{len} {}: a hit", wire.label());
            let hit = crate::wait_until(Duration::from_secs(5), &what, async || {
                let r = wires
                    .send(wire, Method::GET, "sf.test", &path, &ask, "")
                    .await;
                r.cache_status_params().has("hit").then_some(r)
            })
            .await;
            assert!(
                hit.bytes[..] == want[..],
                "{len} {}: the hit's bytes",
                wire.label()
            );
            let range = [("range", "bytes=1000-60999")];
            let part = wires
                .send(wire, Method::GET, "sf.test", &path, &range, "")
                .await;
            assert_eq!(part.status, 206, "{len} {}", wire.label());
            assert!(
                part.bytes[..] == want[1000..61_000],
                "{len} {}: the range",
                wire.label()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_its_disk_body_while_the_file_is_purged_replaced_and_evicted() {
    // Purged: its file unlinked; refilled: a new file renamed over the
    // path; pushed out: a 24 MiB zone, 900 KB each, the manager evicts
    // files. The readers read half before the second churn.
    let dir = crate::disk_zone::scratch("sendfile-slow");
    let (origin, wires) = disk_wires(&dir).await;
    let case = SlowCase {
        host: "sf.test",
        len: 900_000,
        read_before_churn: 450_000,
    };
    slow_readers_keep_their_version(&origin, &wires, case).await;
    let _ = std::fs::remove_dir_all(&dir);
}
