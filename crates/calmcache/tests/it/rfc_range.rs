//! Range requests answered from a stored full response: RFC 9110 §14.1.2
//! (byte ranges), §14.2 (Range), §14.4 (Content-Range), §14.6 and §15.3.7
//! (multipart/byteranges, 206), §15.5.17 (416), §13.1.5 (If-Range, strong
//! comparison).

use calmcache_testkit::{Origin, Reply};

use crate::cases::{get, run, Case, Expect::*, Step};

const BODY: &str = "0123456789";

/// `{p}` answers `0123456789` with a strong ETag for 60 s, stored first.
fn stored(section: &'static str, name: &'static str) -> Case {
    unstored(section, name).step(get().fetched(1).expect(Body(BODY.into())))
}

fn unstored(section: &'static str, name: &'static str) -> Case {
    Case::new(section, name)
        .cc("max-age=60")
        .h("x-origin-body", BODY)
        .respond("ETag: \"r1\"")
        .respond("Content-Type: text/plain")
}

fn range(spec: &str) -> Step {
    get().h("range", spec)
}

fn partial(spec: &str, content_range: &str, body: &str) -> Step {
    range(spec)
        .expect(Status(206))
        .expect(Header("content-range", content_range.into()))
        .expect(Body(body.into()))
        .expect(Header("content-length", body.len().to_string()))
        .expect(OriginHits("{p}", 1))
}

fn full() -> Step {
    get()
        .expect(Status(200))
        .expect(Body(BODY.into()))
        .expect(NoHeader("content-range"))
        .expect(OriginHits("{p}", 1))
}

fn two_parts(r: &Reply) -> Result<(), String> {
    let ct = r.header("content-type");
    let boundary = ct
        .strip_prefix("multipart/byteranges")
        .and_then(|rest| rest.split("boundary=").nth(1))
        .map(|b| b.trim_matches('"'))
        .ok_or_else(|| format!("content-type {ct:?}"))?;
    let body = &r.body;
    for (cr, data) in [("bytes 0-1/10", "01"), ("bytes 5-6/10", "56")] {
        let part = body
            .split(&format!("--{boundary}"))
            .find(|p| {
                p.to_ascii_lowercase()
                    .contains(&format!("content-range: {cr}"))
            })
            .ok_or_else(|| format!("no part with Content-Range: {cr}"))?;
        let content = part
            .split_once("\r\n\r\n")
            .map(|(_, c)| c.trim_end_matches("\r\n"))
            .ok_or("a part without a blank line")?;
        if content != data {
            return Err(format!("part {cr} holds {content:?}, not {data:?}"));
        }
    }
    if !body.trim_end().ends_with(&format!("--{boundary}--")) {
        return Err("no closing boundary".into());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_are_served_from_the_stored_response() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    let s = "RFC 9110 §14.1.2";
    let cases = vec![
        stored(s, "first bytes").step(partial("bytes=0-3", "bytes 0-3/10", "0123")),
        stored(s, "a suffix range").step(partial("bytes=-3", "bytes 7-9/10", "789")),
        stored(s, "an open-ended range").step(partial("bytes=7-", "bytes 7-9/10", "789")),
        stored(s, "one byte").step(partial("bytes=0-0", "bytes 0-0/10", "0")),
        stored(s, "a last-pos past the end is clamped").step(partial(
            "bytes=5-100",
            "bytes 5-9/10",
            "56789",
        )),
        stored("RFC 9110 §14.6", "two ranges are a multipart/byteranges").step(
            range("bytes=0-1,5-6")
                .expect(Status(206))
                .expect(NoHeader("content-range"))
                .expect(Check("both parts", two_parts))
                .expect(OriginHits("{p}", 1)),
        ),
        stored("RFC 9110 §15.5.17", "an unsatisfiable range is a 416").step(
            range("bytes=20-")
                .expect(Status(416))
                .expect(Header("content-range", "bytes */10".into()))
                .expect(OriginHits("{p}", 1)),
        ),
        stored("RFC 9110 §14.2", "an unknown range unit is ignored")
            .step(full().h("range", "items=0-3")),
        stored("RFC 9110 §14.2", "an invalid range is ignored")
            .step(full().h("range", "bytes=abc")),
        stored(
            "RFC 9110 §13.1.5",
            "If-Range with the stored strong ETag gets the range",
        )
        .step(partial("bytes=0-3", "bytes 0-3/10", "0123").h("if-range", "\"r1\"")),
        stored(
            "RFC 9110 §13.1.5",
            "If-Range with another ETag gets the whole",
        )
        .step(full().h("range", "bytes=0-3").h("if-range", "\"other\"")),
        stored(
            "RFC 9110 §13.1.5",
            "If-Range compares strongly: a weak tag gets the whole",
        )
        .step(full().h("range", "bytes=0-3").h("if-range", "W/\"r1\"")),
        unstored(
            "RFC 9111 §3.4, RFC 9110 §14.2",
            "a range miss stores the whole and answers 206",
        )
        .step(partial("bytes=0-3", "bytes 0-3/10", "0123").expect(OriginDidNotSee("{p}", "range")))
        .step(full().expect(Hit)),
    ];
    run("range", &proxy, &origin, cases, crate::STALE_WAIT).await;
}
