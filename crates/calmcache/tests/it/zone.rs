//! The memory zone under a stream of distinct objects.

use calmcache_testkit::{get_with, Origin, Proxy};
use http::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_zone_stays_under_max_size_while_thousands_of_objects_pass() {
    let origin = Origin::start().await;
    let max = 256 * 1024u64;
    let proxy = Proxy::new(&origin)
        .route("ttl = { 200 = \"1h\" }")
        .zone("256KiB", "16KiB")
        .start()
        .await;
    let body = ("x-origin-body-bytes", "2000");
    for batch in 0..30 {
        let mut tasks = Vec::new();
        for i in 0..100 {
            let url = proxy.url(&format!("/obj/{batch}/{i}"));
            tasks.push(tokio::spawn(async move {
                get_with(Method::GET, &url, &[body]).await.status
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
        let status = proxy.status().await;
        let size = status["zones"]["ram"]["size_bytes"].as_u64().unwrap();
        assert!(
            size <= max,
            "zone at {size} bytes > {max} after batch {batch}"
        );
    }
    let status = proxy.status().await;
    let objects = status["zones"]["ram"]["objects"].as_u64().unwrap();
    assert!(
        objects >= 50,
        "the zone still holds many objects: {objects}"
    );
    assert_eq!(status["zones"]["ram"]["stores"], 3000);
}
