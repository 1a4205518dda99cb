//! A third kind of tier, which the proxy was not written for, plugged into
//! a zone through the `Tier` trait (the testkit's `CountingTier`): misses,
//! stores, hits, purges, `/status` and reloads go through it over every
//! wire, with the request path unchanged.

use calmcache_testkit::wire::TLS_NAME;
use calmcache_testkit::{CountingTier, Origin, Proxy, Wires};
use http::Method;

const TOKEN: &str = "third-tier-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_tier_plugged_into_a_zone_serves_misses_hits_and_purges_on_every_wire() {
    let origin = Origin::start().await;
    let tier = CountingTier::new(64 << 20, 1 << 20);
    let builder = Proxy::new(&origin)
        .route("ttl = { 200 = \"1h\" }")
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .zone_tier(tier.clone());
    let text = builder.toml();
    let wires = Wires::start(builder, "").await;
    for (i, wire) in wires.all.iter().enumerate() {
        let what = wire.label();
        let path = format!("/third/{i}");
        let tag = format!("Cache-Tag: t{i}");
        let headers = [("x-origin-header", tag.as_str())];
        let send = || wires.send(wire, Method::GET, TLS_NAME, &path, &headers, "");
        // A miss: looked up in the tier, fetched, stored in the tier.
        let (misses, inserts, before) = (tier.misses(), tier.inserts(), origin.hits());
        let miss = send().await;
        assert_eq!(miss.status, 200, "{what}: {}", miss.body);
        assert!(!miss.is_hit(), "{what}: {}", miss.cache_status());
        assert!(
            tier.misses() > misses,
            "{what}: the lookup reached the tier"
        );
        assert_eq!(tier.inserts(), inserts + 1, "{what}: stored in the tier");
        assert_eq!(origin.hits(), before + 1, "{what}");
        // A hit: answered from the tier, the origin untouched.
        let hits = tier.hits();
        let hit = send().await;
        assert!(hit.is_hit(), "{what}: {}", hit.cache_status());
        assert_eq!(hit.body, miss.body, "{what}");
        assert_eq!(tier.hits(), hits + 1, "{what}: one lookup, a hit");
        assert_eq!(origin.hits(), before + 1, "{what}");
        // A purge of the URL reaches the tier: the next request is a miss.
        let url = format!("http://{TLS_NAME}{path}");
        let json = wires
            .proxy
            .purge(TOKEN, &format!(r#"{{"url": "{url}"}}"#))
            .await;
        assert_eq!(json["purged"], 1, "{what}: {json}");
        assert!(!send().await.is_hit(), "{what}: purged");
        assert_eq!(origin.hits(), before + 2, "{what}");
        // A tag purge scans the tier.
        let json = wires
            .proxy
            .purge(TOKEN, &format!(r#"{{"tag": "t{i}"}}"#))
            .await;
        assert_eq!(json["purged"], 1, "{what}: {json}");
        assert!(!send().await.is_hit(), "{what}: purged by tag");
        assert!(send().await.is_hit(), "{what}: stored again");
    }
    // /status shows the tier as it reports itself.
    let status = wires.proxy.status().await;
    let zone = &status["zones"]["ram"];
    assert_eq!(zone["kind"], "counting", "{status:#}");
    assert_eq!(zone["objects"], wires.all.len(), "{status:#}");
    assert!(zone.get("disk").is_none(), "{status:#}");
    // A reload keeps the supplied tier, contents and all.
    // (Its TLS listener goes: this config has none.)
    let config = calmcache::Config::from_toml(&text, "<test>").unwrap();
    let outcome = wires.proxy.running().reloader().apply(config).await;
    let notes = outcome.unwrap().notes;
    assert!(!notes.iter().any(|n| n.contains("zones.ram")), "{notes:?}");
    let hits = tier.hits();
    let again = wires
        .send(&wires.all[0], Method::GET, TLS_NAME, "/third/0", &[], "")
        .await;
    assert!(again.is_hit(), "{}", again.cache_status());
    assert_eq!(tier.hits(), hits + 1);
}
