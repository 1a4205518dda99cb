//! HEAD: RFC 9110 §9.3.2 (the same header fields as a GET, no content) and
//! RFC 9111 §4 (a stored GET response answers a HEAD); calmcache fills a HEAD
//! miss with a GET unless the route says `convert_head = false`.

use calmcache_testkit::Origin;
use http::Method;

use crate::cases::{get, head, run, Case, Expect::*};

const BODY: &str = "hello head";

/// The origin answers `hello head` (10 bytes) with an ETag, for 60 s.
fn case(section: &'static str, name: &'static str) -> Case {
    Case::new(section, name)
        .cc("max-age=60")
        .h("x-origin-body", BODY)
        .respond("ETag: \"h\"")
        .respond("Content-Type: text/plain")
}

fn like_the_get() -> crate::cases::Step {
    head()
        .expect(Status(200))
        .expect(EmptyBody)
        .expect(Header("content-length", "10".into()))
        .expect(Header("etag", "\"h\"".into()))
        .expect(Header("content-type", "text/plain".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_is_answered_from_a_stored_get() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let cases = vec![
        case(
            "RFC 9111 §4, RFC 9110 §9.3.2",
            "a HEAD after a GET is a hit without a body",
        )
        .step(get().fetched(1).expect(Body(BODY.into())))
        .step(like_the_get().hit(1)),
        case(
            "RFC 9110 §9.3.2 (calmcache convert_head)",
            "a HEAD miss is filled with a GET",
        )
        .step(
            like_the_get()
                .expect(OriginHits("{p}", 1))
                .expect(OriginMethod("{p}", Method::GET)),
        )
        .step(get().hit(1).expect(Body(BODY.into())))
        .step(like_the_get().hit(1)),
        Case::new(
            "RFC 9110 §9.3.2",
            "a HEAD of an unstorable response has no body",
        )
        .cc("no-store")
        .h("x-origin-body", BODY)
        .step(head().expect(Status(200)).expect(EmptyBody))
        .step(head().expect(Status(200)).expect(OriginHits("{p}", 2))),
    ];
    run("head", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convert_head_false_passes_head_through() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "convert_head = false").await;
    let cases = vec![
        case(
            "calmcache convert_head = false",
            "a HEAD miss goes to the origin as a HEAD",
        )
        .step(
            like_the_get()
                .expect(OriginHits("{p}", 1))
                .expect(OriginMethod("{p}", Method::HEAD))
                .expect(Lacks("stored")),
        )
        .step(get().fetched(2).expect(Body(BODY.into()))),
        case("RFC 9111 §4", "a stored GET still answers a HEAD")
            .step(get().fetched(1))
            .step(like_the_get().hit(1)),
    ];
    run("head-pass", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
