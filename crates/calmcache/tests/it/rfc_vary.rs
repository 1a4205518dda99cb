//! Vary: RFC 9111 §4.1 (secondary keys: one stored variant per value of the
//! selecting header fields; `Vary: *` never matches), RFC 9110 §12.5.5.

use calmcache_testkit::Origin;

use crate::cases::{get, run, Case, Expect::*};

const AL: &str = "accept-language";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_variant_is_stored_and_matched_on_its_selecting_headers() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let cases = vec![
        Case::new(
            "RFC 9111 §4.1",
            "two Accept-Language values are two variants",
        )
        .cc("max-age=60")
        .respond("Vary: Accept-Language")
        .step(
            get()
                .h(AL, "en")
                .fetched(1)
                .expect(Param("fwd", "uri-miss")),
        )
        .step(
            get()
                .h(AL, "fr")
                .fetched(2)
                .expect(OtherBodyThan(0))
                .expect(Param("fwd", "vary-miss")),
        )
        .step(get().h(AL, "en").hit(2).expect(SameBodyAs(0)))
        .step(get().h(AL, "fr").hit(2).expect(SameBodyAs(1))),
        Case::new(
            "RFC 9111 §4.1",
            "an absent selecting header is a value of its own",
        )
        .cc("max-age=60")
        .respond("Vary: Accept-Language")
        .step(get().fetched(1))
        .step(get().h(AL, "en").fetched(2).expect(OtherBodyThan(0)))
        .step(get().hit(2).expect(SameBodyAs(0)))
        .step(get().h(AL, "en").hit(2).expect(SameBodyAs(1))),
        Case::new("RFC 9111 §4.1", "header names in Vary are case-insensitive")
            .cc("max-age=60")
            .respond("Vary: accept-LANGUAGE")
            .step(get().h(AL, "en").fetched(1))
            .step(get().h(AL, "de").fetched(2).expect(OtherBodyThan(0)))
            .step(get().h(AL, "en").hit(2).expect(SameBodyAs(0))),
        Case::new("RFC 9111 §4.1", "every header Vary lists selects")
            .cc("max-age=60")
            .respond("Vary: Accept-Language, X-Tenant")
            .step(get().h(AL, "en").h("x-tenant", "a").fetched(1))
            .step(get().h(AL, "en").h("x-tenant", "b").fetched(2))
            .step(
                get()
                    .h(AL, "en")
                    .h("x-tenant", "a")
                    .hit(2)
                    .expect(SameBodyAs(0)),
            )
            .step(
                get()
                    .h(AL, "en")
                    .h("x-tenant", "b")
                    .hit(2)
                    .expect(SameBodyAs(1)),
            ),
        Case::new("RFC 9111 §4.1", "Vary on two field lines combines")
            .cc("max-age=60")
            .respond("Vary: Accept-Language")
            .respond("Vary: X-Tenant")
            .step(get().h(AL, "en").h("x-tenant", "a").fetched(1))
            .step(
                get()
                    .h(AL, "en")
                    .h("x-tenant", "b")
                    .fetched(2)
                    .expect(OtherBodyThan(0)),
            )
            .step(
                get()
                    .h(AL, "en")
                    .h("x-tenant", "a")
                    .hit(2)
                    .expect(SameBodyAs(0)),
            ),
        Case::new("RFC 9111 §4.1", "Vary: * never matches")
            .cc("max-age=60")
            .respond("Vary: *")
            .step(get().fetched(1))
            .step(get().fetched(2))
            .step(get().fetched(3)),
        Case::new(
            "RFC 9111 §4.1, RFC 9110 §12.5.3",
            "equivalent Accept-Encoding values share a variant",
        )
        .cc("max-age=60")
        .respond("Vary: Accept-Encoding")
        .step(get().h("accept-encoding", "gzip, deflate, br").fetched(1))
        .step(
            get()
                .h("accept-encoding", "br, gzip")
                .hit(1)
                .expect(SameBodyAs(0)),
        ),
        Case::new(
            "RFC 9111 §4.1",
            "Accept-Encoding that accepts nothing compressed is another variant",
        )
        .cc("max-age=60")
        .respond("Vary: Accept-Encoding")
        .step(get().h("accept-encoding", "gzip, br").fetched(1))
        .step(get().h("accept-encoding", "identity").fetched(2))
        .step(
            get()
                .h("accept-encoding", "identity")
                .hit(2)
                .expect(SameBodyAs(1)),
        ),
    ];
    run("vary", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
