//! Validation: RFC 9111 §4.3.1 (a stale response is revalidated with its
//! validators), §4.3.3-§4.3.4 (a 304 freshens the stored response and updates
//! its headers, the body stays), §4.3.2 (client conditionals answered from the
//! cache), RFC 9110 §13.1.2-§13.1.3, §13.2.2 (evaluating them).

use calmcache_testkit::{http_date_ago, http_date_in, Origin};

use crate::cases::{get, run, Case, Expect::*};

const V1: &str = "\"v1\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_responses_are_revalidated_with_their_validators() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let last_modified = http_date_ago(86_400);
    let revalidated = || {
        get()
            .expect(Status(200))
            .expect(OriginHits("{p}", 2))
            .expect(SameBodyAs(0))
            .expect(Param("fwd", "stale"))
            .expect(Param("fwd-status", "304"))
            .expect(Has("stored"))
    };
    let cases = vec![
        Case::new("RFC 9111 §4.3.1", "an ETag is sent back in If-None-Match")
            .cc("max-age=1")
            .respond(format!("ETag: {V1}"))
            .step(get().fetched(1))
            .after(revalidated().expect(OriginSaw("{p}", "if-none-match", Some(V1.into())))),
        Case::new("RFC 9111 §4.3.1", "a weak ETag is sent back as it is")
            .cc("max-age=1")
            .respond("ETag: W/\"w1\"")
            .step(get().fetched(1))
            .after(revalidated().expect(OriginSaw(
                "{p}",
                "if-none-match",
                Some("W/\"w1\"".into()),
            ))),
        Case::new(
            "RFC 9111 §4.3.1",
            "Last-Modified alone is sent back in If-Modified-Since",
        )
        .cc("max-age=1")
        .respond(format!("Last-Modified: {last_modified}"))
        .step(get().fetched(1))
        .after(
            revalidated()
                .expect(OriginSaw(
                    "{p}",
                    "if-modified-since",
                    Some(last_modified.clone()),
                ))
                .expect(OriginDidNotSee("{p}", "if-none-match")),
        ),
        Case::new("RFC 9111 §4.3.1", "with both validators the ETag is sent")
            .cc("max-age=1")
            .respond(format!("ETag: {V1}"))
            .respond(format!("Last-Modified: {last_modified}"))
            .step(get().fetched(1))
            .after(revalidated().expect(OriginSaw("{p}", "if-none-match", Some(V1.into())))),
        Case::new(
            "RFC 9111 §4.3.1",
            "without validators the stale response is fetched anew",
        )
        .cc("max-age=1")
        .step(get().fetched(1))
        .after(
            get()
                .fetched(2)
                .expect(OriginDidNotSee("{p}", "if-none-match"))
                .expect(OriginDidNotSee("{p}", "if-modified-since"))
                .expect(OtherBodyThan(0))
                .expect(Param("fwd", "stale"))
                .expect(Param("fwd-status", "200"))
                .expect(Has("stored")),
        ),
        Case::new(
            "RFC 9111 §4.3.3",
            "a 200 to the revalidation replaces the stored response",
        )
        .cc("max-age=1")
        .step(get().respond(format!("ETag: {V1}")).fetched(1))
        .after(
            get()
                .respond("ETag: \"v2\"")
                .cc("max-age=60")
                .fetched(2)
                .expect(OriginSaw("{p}", "if-none-match", Some(V1.into())))
                .expect(Status(200))
                .expect(OtherBodyThan(0))
                .expect(Header("etag", "\"v2\"".into())),
        )
        .after(get().respond("ETag: \"v2\"").hit(2).expect(SameBodyAs(1))),
        Case::new(
            "RFC 9111 §4.3.4",
            "a 304 freshens the stored response and updates its headers, not its body",
        )
        .step(
            get()
                .cc("max-age=1")
                .respond(format!("ETag: {V1}"))
                .respond("X-Version: 1")
                .fetched(1)
                .expect(Header("x-version", "1".into())),
        )
        .after(
            get()
                .cc("max-age=60")
                .respond(format!("ETag: {V1}"))
                .respond("X-Version: 2")
                .expect(OriginHits("{p}", 2))
                .expect(Status(200))
                .expect(SameBodyAs(0))
                .expect(Header("x-version", "2".into()))
                .expect(HeaderContains("cache-control", "max-age=60".into())),
        )
        .after(
            get()
                .hit(2)
                .expect(SameBodyAs(0))
                .expect(Header("x-version", "2".into()))
                .expect(HeaderContains("cache-control", "max-age=60".into()))
                .expect(TtlBetween(55.0, 60.0)),
        ),
    ];
    run("reval", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_conditionals_are_answered_from_the_cache() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let last_modified = http_date_ago(86_400);
    let stored = |section, name| {
        Case::new(section, name)
            .cc("max-age=60")
            .respond("ETag: \"a\"")
            .respond(format!("Last-Modified: {last_modified}"))
            .step(get().fetched(1))
    };
    let not_modified = || {
        get()
            .expect(Status(304))
            .expect(EmptyBody)
            .expect(Header("etag", "\"a\"".into()))
            .expect(OriginHits("{p}", 1))
    };
    let full = || {
        get()
            .expect(Status(200))
            .expect(SameBodyAs(0))
            .expect(OriginHits("{p}", 1))
    };
    let inm = "if-none-match";
    let ims = "if-modified-since";
    let cases = vec![
        stored("RFC 9110 §13.1.2", "a matching If-None-Match gets a 304").step(
            not_modified()
                .h(inm, "\"a\"")
                .expect(HeaderContains("cache-control", "max-age=60".into())),
        ),
        stored("RFC 9110 §13.1.2", "If-None-Match uses the weak comparison")
            .step(not_modified().h(inm, "W/\"a\"")),
        stored(
            "RFC 9110 §13.1.2",
            "any tag of an If-None-Match list matches",
        )
        .step(not_modified().h(inm, "\"x\", \"a\"")),
        stored("RFC 9110 §13.1.2", "If-None-Match: * matches").step(not_modified().h(inm, "*")),
        stored("RFC 9110 §13.1.2", "another tag gets the full response")
            .step(full().h(inm, "\"b\"")),
        stored(
            "RFC 9110 §13.1.3",
            "If-Modified-Since at Last-Modified gets a 304",
        )
        .step(not_modified().h(ims, last_modified.clone())),
        stored(
            "RFC 9110 §13.1.3",
            "If-Modified-Since after Last-Modified gets a 304",
        )
        .step(not_modified().h(ims, http_date_ago(60))),
        stored(
            "RFC 9110 §13.1.3",
            "If-Modified-Since before Last-Modified gets the response",
        )
        .step(full().h(ims, http_date_ago(2 * 86_400))),
        stored(
            "RFC 9110 §13.1.3",
            "an invalid If-Modified-Since is ignored",
        )
        .step(full().h(ims, "yesterday")),
        stored(
            "RFC 9110 §13.2.2",
            "If-None-Match takes precedence over If-Modified-Since",
        )
        .step(full().h(inm, "\"b\"").h(ims, http_date_in(60))),
    ];
    run("cond", &proxy, &origin, cases, crate::STALE_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidations_of_a_stale_key_coalesce() {
    // RFC 9111 §4 allows a cache to collapse requests; calmcache revalidates a
    // stale key once, like a miss, whatever the number of clients.
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let url = proxy.url("/coalesce/stale");
    let steer: [(&'static str, &'static str); 3] = [
        ("x-origin-cache-control", "max-age=1"),
        ("x-origin-header", "ETag: \"v1\""),
        ("x-origin-delay-ms", "300"),
    ];
    let first = crate::burst(&url, 1, &steer).await;
    assert_eq!(first[0].status, 200);
    tokio::time::sleep(crate::STALE_WAIT).await;
    let replies = crate::burst(&url, 20, &steer).await;
    assert_eq!(
        origin.hits_for("/coalesce/stale"),
        2,
        "[RFC 9111 §4] 20 requests for a stale key: one revalidation"
    );
    let revalidation = origin.requests_for("/coalesce/stale").pop().unwrap();
    assert_eq!(
        revalidation.header("if-none-match"),
        Some("\"v1\""),
        "[RFC 9111 §4.3.1] the one request was a revalidation"
    );
    for r in &replies {
        assert_eq!(r.status, 200, "{}", r.cache_status());
        assert_eq!(
            r.body, first[0].body,
            "[RFC 9111 §4.3.4] everyone got the freshened stored body"
        );
    }
}
