//! The cache key template (`key = "..."`, RFC 9111 §2: the primary cache key
//! defaults to the method and target URI) and request conditions that skip
//! the cache (`bypass`) or keep a response out of it (`no_store`).

use calmcache_testkit::Origin;

use crate::cases::{get, run, Case, Expect::*};

const SECTION: &str = "RFC 9111 §2 (calmcache key)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_without_the_query_shares_one_object() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "key = \"$scheme$host$uri\"").await;
    let cases = vec![Case::new(SECTION, "$scheme$host$uri ignores the query")
        .cc("max-age=60")
        .step(get().at("{p}?x=1").fetched(1))
        .step(get().at("{p}?x=2").hit(1).expect(SameBodyAs(0)))
        .step(get().hit(1).expect(SameBodyAs(0)))];
    run("key-uri", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_cookie_arg_and_header_variables_separates_by_them() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "key = \"$uri$cookie_lang$arg_v$http_x_device\"").await;
    let cases = vec![
        Case::new(SECTION, "$cookie_lang separates by cookie")
            .cc("max-age=60")
            .step(get().h("cookie", "lang=en").fetched(1))
            .step(
                get()
                    .h("cookie", "lang=fr")
                    .fetched(2)
                    .expect(OtherBodyThan(0)),
            )
            .step(get().h("cookie", "lang=en").hit(2).expect(SameBodyAs(0)))
            .step(
                get()
                    .h("cookie", "a=1; lang=fr; b=2")
                    .hit(2)
                    .expect(SameBodyAs(1)),
            ),
        Case::new(SECTION, "$arg_v separates by one argument only")
            .cc("max-age=60")
            .step(get().at("{p}?v=1&x=1").fetched(1))
            .step(get().at("{p}?x=2&v=1").hit(1).expect(SameBodyAs(0)))
            .step(get().at("{p}?v=2").fetched(2)),
        Case::new(SECTION, "$http_x_device separates by a header")
            .cc("max-age=60")
            .step(get().h("x-device", "phone").fetched(1))
            .step(get().h("x-device", "desktop").fetched(2))
            .step(get().h("x-device", "phone").hit(2).expect(SameBodyAs(0))),
    ];
    run("key-vars", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypass_conditions_go_to_the_origin_even_when_a_copy_exists() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(
        &origin,
        "key = \"$scheme$host$uri\"\n\
         bypass = [\"cookie:wordpress_logged_in\", \"header:X-Debug\", \"arg:preview\"]",
    )
    .await;
    let s = "calmcache bypass (RFC 9211 §2.2 fwd=bypass)";
    let bypassed = |n| get().fetched(n).expect(Param("fwd", "bypass"));
    let stored = |name| Case::new(s, name).cc("max-age=60").step(get().fetched(1));
    let cases = vec![
        stored("a cookie whose name starts with wordpress_logged_in bypasses")
            .step(bypassed(2).h("cookie", "wordpress_logged_in_abc=1"))
            .step(get().expect(Hit).expect(OriginHits("{p}", 2))),
        stored("other cookies do not bypass").step(
            get()
                .h("cookie", "theme=dark; xwordpress_logged_in=1")
                .hit(1),
        ),
        stored("a header condition bypasses").step(bypassed(2).h("x-debug", "1")),
        stored("an argument condition bypasses").step(bypassed(2).at("{p}?preview=1")),
        stored("an argument without a value bypasses").step(bypassed(2).at("{p}?preview")),
        stored("an argument equal to 0 does not bypass").step(get().at("{p}?preview=0").hit(1)),
        stored("another argument does not bypass").step(get().at("{p}?page=2").hit(1)),
    ];
    run("bypass", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_store_conditions_fetch_without_storing() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "no_store = [\"arg:preview\", \"cookie:session\"]").await;
    let s = "calmcache no_store";
    let cases = vec![
        Case::new(s, "?preview=1 is fetched and not stored")
            .cc("max-age=60")
            .step(get().at("{p}?preview=1").fetched(1).expect(Lacks("stored")))
            .step(get().at("{p}?preview=1").fetched(2).expect(Lacks("stored"))),
        Case::new(s, "a session cookie is fetched and not stored")
            .cc("max-age=60")
            .step(
                get()
                    .h("cookie", "session=1")
                    .fetched(1)
                    .expect(Lacks("stored")),
            )
            .step(get().fetched(2).expect(Has("stored")))
            .step(get().hit(2)),
        Case::new(s, "without the condition it is stored")
            .cc("max-age=60")
            .step(get().at("{p}?preview=0").fetched(1).expect(Has("stored")))
            .step(get().at("{p}?preview=0").hit(1)),
    ];
    run("nostore", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
