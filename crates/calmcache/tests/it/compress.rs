//! Compression of stored objects (`compress = ["br", "gzip"]`): the origin is
//! asked without `Accept-Encoding`, the object is stored once, and each client
//! gets the best coding its `Accept-Encoding` allows (RFC 9110 §12.5.3), with
//! `Content-Encoding` (§8.4) and `Vary: Accept-Encoding` (§12.5.5).

use calmcache_testkit::{Origin, Reply};

use crate::cases::{decoded, get, run, Case, Expect::*, Step};

const AE: &str = "accept-encoding";

/// A 4 KB text/html page the origin sends uncompressed, for 60 s.
fn page(section: &'static str, name: &'static str, content_type: &str) -> Case {
    Case::new(section, name)
        .cc("max-age=60")
        .h("x-origin-body-bytes", "4000")
        .respond(format!("Content-Type: {content_type}"))
}

fn looks_like_the_page(r: &Reply) -> Result<(), String> {
    let body = decoded(r)?;
    if body.len() != 4000 || !body.starts_with(b"path=") {
        return Err(format!("{} decoded bytes", body.len()));
    }
    if let Ok(len) = r.header("content-length").parse::<usize>() {
        if len != r.bytes.len() {
            return Err(format!("Content-Length {len} for {} bytes", r.bytes.len()));
        }
    }
    Ok(())
}

fn encoded(step: Step, coding: &str) -> Step {
    let step = step
        .expect(HeaderContains("vary", AE.into()))
        .expect(Check("the page", looks_like_the_page));
    match coding {
        "" => step.expect(NoHeader("content-encoding")),
        coding => step.expect(Header("content-encoding", coding.into())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stored_object_is_served_in_each_accepted_coding() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "compress = [\"br\", \"gzip\"]").await;
    let html = "text/html; charset=utf-8";
    let cases = vec![
        page(
            "RFC 9110 §12.5.3",
            "identity, br and gzip from one origin request",
            html,
        )
        .step(encoded(get().fetched(1), "").expect(OriginDidNotSee("{p}", AE)))
        .step(encoded(get().h(AE, "br").hit(1), "br").expect(DecodesToBodyOf(0)))
        .step(encoded(get().h(AE, "gzip").hit(1), "gzip").expect(DecodesToBodyOf(0)))
        .step(encoded(get().h(AE, "gzip, deflate, br").hit(1), "br").expect(DecodesToBodyOf(0)))
        .step(encoded(get().h(AE, "identity").hit(1), "")),
        page(
            "RFC 9110 §12.5.3",
            "a br client's miss: the origin is asked without Accept-Encoding",
            html,
        )
        .step(encoded(get().h(AE, "br").fetched(1), "br").expect(OriginDidNotSee("{p}", AE)))
        .step(encoded(get().h(AE, "br").hit(1), "br").expect(DecodesToBodyOf(0)))
        .step(encoded(get().hit(1), "").expect(DecodesToBodyOf(0))),
        page("RFC 9110 §12.5.3", "q=0 refuses a coding", html)
            .step(encoded(get().h(AE, "br;q=0, gzip").fetched(1), "gzip"))
            .step(encoded(get().h(AE, "br;q=0, gzip;q=0").hit(1), "")),
        page(
            "RFC 9110 §12.5.3",
            "a gzip-only client gets gzip",
            "text/css",
        )
        .step(encoded(get().h(AE, "gzip").fetched(1), "gzip")),
        page(
            "calmcache compress",
            "image/png is not compressed",
            "image/png",
        )
        .step(
            get()
                .h(AE, "br, gzip")
                .fetched(1)
                .expect(NoHeader("content-encoding")),
        )
        .step(
            get()
                .h(AE, "br, gzip")
                .hit(1)
                .expect(NoHeader("content-encoding")),
        ),
    ];
    run("compress", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
