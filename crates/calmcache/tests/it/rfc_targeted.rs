//! Targeted cache control: RFC 9213 §2.2 (the most specific targeted field
//! present is used and `Cache-Control` ignored), §2.3 (its freshness replaces
//! the other fields'), §3 (`CDN-Cache-Control`). `Calmcache-Cache-Control`
//! (ours) wins over `CDN-Cache-Control`; calmcache does not forward either
//! to clients unless the route says `forward_targeted_cache_control = true`.

use calmcache_testkit::Origin;

use crate::cases::{get, run, Case, Expect::*, Step};

const CDN: &str = "cdn-cache-control";
const OURS: &str = "calmcache-cache-control";

fn without_targeted(step: Step) -> Step {
    step.expect(NoHeader(CDN)).expect(NoHeader(OURS))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targeted_fields_win_over_cache_control() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let cases = vec![
        Case::new(
            "RFC 9213 §2.2, §3",
            "CDN-Cache-Control max-age wins over Cache-Control no-store",
        )
        .cc("no-store")
        .respond("CDN-Cache-Control: max-age=60")
        .step(without_targeted(get().fetched(1)))
        .step(without_targeted(
            get()
                .hit(1)
                .expect(SameBodyAs(0))
                .expect(HeaderContains("cache-control", "no-store".into())),
        )),
        Case::new(
            "RFC 9213 §2.2, §3",
            "CDN-Cache-Control no-store wins over Cache-Control max-age",
        )
        .cc("max-age=60")
        .respond("CDN-Cache-Control: no-store")
        .step(without_targeted(get().fetched(1)))
        .step(get().fetched(2)),
        Case::new("RFC 9213 §3", "CDN-Cache-Control alone gives the lifetime")
            .respond("CDN-Cache-Control: max-age=60")
            .step(get().fetched(1))
            .step(without_targeted(
                get().hit(1).expect(TtlBetween(58.0, 60.0)),
            )),
        Case::new(
            "RFC 9213 §2.3",
            "the targeted lifetime replaces the Cache-Control one",
        )
        .cc("max-age=3600")
        .respond("CDN-Cache-Control: max-age=30")
        .step(get().fetched(1))
        .step(get().hit(1).expect(TtlBetween(28.0, 30.0))),
        Case::new("RFC 9213 §2.2", "our own field wins over CDN-Cache-Control")
            .cc("no-store")
            .respond("CDN-Cache-Control: no-store")
            .respond("Calmcache-Cache-Control: max-age=60")
            .step(without_targeted(get().fetched(1)))
            .step(without_targeted(get().hit(1))),
        Case::new(
            "RFC 9213 §2.2",
            "our own no-store wins over CDN-Cache-Control",
        )
        .respond("CDN-Cache-Control: max-age=60")
        .respond("Calmcache-Cache-Control: no-store")
        .not_reused(),
    ];
    run("targeted", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targeted_fields_are_forwarded_when_the_route_says_so() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "forward_targeted_cache_control = true").await;
    let both = |step: Step| {
        step.expect(Header(CDN, "max-age=60".into()))
            .expect(Header(OURS, "max-age=30".into()))
    };
    let cases = vec![Case::new(
        "RFC 9213 §2.2 (calmcache option)",
        "forward_targeted_cache_control = true keeps both fields",
    )
    .cc("no-store")
    .respond("CDN-Cache-Control: max-age=60")
    .respond("Calmcache-Cache-Control: max-age=30")
    .step(both(get().fetched(1)))
    .step(both(get().hit(1).expect(TtlBetween(28.0, 30.0))))];
    run("targeted-fwd", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
