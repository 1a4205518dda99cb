//! Invalidation: RFC 9111 §4.4. A non-error (2xx, 3xx) response to an unsafe
//! method invalidates the target URI and the same-host `Location` and
//! `Content-Location` URIs; an error response does not, nor does a URI on
//! another host.

use calmcache_testkit::Origin;
use http::Method;

use crate::cases::{get, method, run, Case, Expect::*};

/// `{p}` stored, then `unsafe_method` answered with `status`; then a GET of
/// `{p}`: fetched again when `invalidates`, a hit otherwise. The origin sees
/// the unsafe request too, so a refetch is its third request.
fn target(name: &'static str, unsafe_method: Method, status: u16, invalidates: bool) -> Case {
    let after = if invalidates {
        get().fetched(3)
    } else {
        get().hit(2)
    };
    Case::new("RFC 9111 §4.4", name)
        .cc("max-age=60")
        .step(get().fetched(1))
        .step(method(unsafe_method).status(status).expect(Status(status)))
        .step(after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_methods_invalidate_what_they_change() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let other_host = ("host", "other.example");
    let cases = vec![
        target(
            "a 200 to POST invalidates the target",
            Method::POST,
            200,
            true,
        ),
        target(
            "a 201 to PUT invalidates the target",
            Method::PUT,
            201,
            true,
        ),
        target(
            "a 204 to DELETE invalidates the target",
            Method::DELETE,
            204,
            true,
        ),
        target(
            "a 200 to PATCH invalidates the target",
            Method::PATCH,
            200,
            true,
        ),
        target(
            "a 303 to POST invalidates the target",
            Method::POST,
            303,
            true,
        ),
        target(
            "a 500 to POST does not invalidate",
            Method::POST,
            500,
            false,
        ),
        target(
            "a 404 to DELETE does not invalidate",
            Method::DELETE,
            404,
            false,
        ),
        Case::new(
            "RFC 9111 §4.4",
            "a same-host relative Location is invalidated",
        )
        .cc("max-age=60")
        .step(get().at("{p}/moved").expect(OriginHits("{p}/moved", 1)))
        .step(
            method(Method::POST)
                .status(201)
                .respond("Location: {p}/moved")
                .expect(Status(201)),
        )
        .step(
            get()
                .at("{p}/moved")
                .expect(NotHit)
                .expect(OriginHits("{p}/moved", 2)),
        ),
        Case::new(
            "RFC 9111 §4.4",
            "a same-host absolute Content-Location is invalidated",
        )
        .cc("max-age=60")
        .step(get().at("{p}/content").expect(OriginHits("{p}/content", 1)))
        .step(
            method(Method::PUT)
                .respond("Content-Location: http://{host}{p}/content")
                .expect(Status(200)),
        )
        .step(
            get()
                .at("{p}/content")
                .expect(NotHit)
                .expect(OriginHits("{p}/content", 2)),
        ),
        Case::new(
            "RFC 9111 §4.4",
            "a Location on another host is not invalidated",
        )
        .cc("max-age=60")
        .step(
            get()
                .at("{p}/elsewhere")
                .h(other_host.0, other_host.1)
                .expect(OriginHits("{p}/elsewhere", 1)),
        )
        .step(
            method(Method::POST)
                .status(201)
                .respond("Location: http://other.example{p}/elsewhere")
                .expect(Status(201)),
        )
        .step(
            get()
                .at("{p}/elsewhere")
                .h(other_host.0, other_host.1)
                .expect(Hit)
                .expect(OriginHits("{p}/elsewhere", 1)),
        ),
        Case::new(
            "RFC 9111 §4.4",
            "an error response does not invalidate its Location",
        )
        .cc("max-age=60")
        .step(get().at("{p}/kept").expect(OriginHits("{p}/kept", 1)))
        .step(
            method(Method::POST)
                .status(500)
                .respond("Location: {p}/kept")
                .expect(Status(500)),
        )
        .step(
            get()
                .at("{p}/kept")
                .expect(Hit)
                .expect(OriginHits("{p}/kept", 1)),
        ),
        Case::new("RFC 9111 §4.4", "a safe method invalidates nothing")
            .cc("max-age=60")
            .step(get().fetched(1))
            .step(method(Method::OPTIONS).expect(Status(200)))
            .step(get().hit(2)),
    ];
    run("inval", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
