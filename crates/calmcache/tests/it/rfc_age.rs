//! Age: RFC 9111 §4.2.3 (corrected initial age from `Date` and an upstream
//! `Age`, plus resident time) and §5.1 (the `Age` sent to clients).

use std::time::Duration;

use calmcache_testkit::{http_date_ago, http_date_in, Origin};

use crate::cases::{get, run, Case, Expect::*};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn age_counts_upstream_age_apparent_age_and_time_in_the_cache() {
    let origin = Origin::start().await;
    let proxy = crate::rfc_proxy(&origin, "").await;
    // `later` is checked after the shared 1.2 s wait: one or two seconds more.
    let aged = |section, name, now: (u64, u64), ttl: (f64, f64)| {
        Case::new(section, name)
            .step(get().fetched(1))
            .step(
                get()
                    .hit(1)
                    .expect(AgeBetween(now.0, now.1))
                    .expect(TtlBetween(ttl.0, ttl.1)),
            )
            .after(get().hit(1).expect(AgeBetween(now.0 + 1, now.1 + 2)))
    };
    let cases = vec![
        aged(
            "RFC 9111 §4.2.3",
            "resident time alone",
            (0, 1),
            (58.0, 60.0),
        )
        .cc("max-age=60"),
        aged(
            "RFC 9111 §4.2.3",
            "an upstream Age is added",
            (50, 51),
            (8.0, 10.0),
        )
        .cc("max-age=60")
        .respond("Age: 50"),
        aged(
            "RFC 9111 §4.2.3",
            "apparent age from an old Date",
            (29, 31),
            (28.0, 31.0),
        )
        .cc("max-age=60")
        .respond(format!("Date: {}", http_date_ago(30))),
        aged(
            "RFC 9111 §4.2.3",
            "apparent age wins over a smaller Age",
            (29, 31),
            (28.0, 31.0),
        )
        .cc("max-age=60")
        .respond(format!("Date: {}", http_date_ago(30)))
        .respond("Age: 10"),
        aged(
            "RFC 9111 §4.2.3",
            "Age wins over a smaller apparent age",
            (40, 41),
            (18.0, 20.0),
        )
        .cc("max-age=60")
        .respond(format!("Date: {}", http_date_ago(10)))
        .respond("Age: 40"),
        aged(
            "RFC 9111 §4.2.1, §4.2.3",
            "Expires counts from Date; the apparent age is charged",
            (29, 31),
            (27.0, 31.0),
        )
        .respond(format!("Date: {}", http_date_ago(30)))
        .respond(format!("Expires: {}", http_date_in(30))),
        Case::new("RFC 9111 §5.1", "a miss forwards at least the upstream Age")
            .cc("max-age=60")
            .respond("Age: 50")
            .step(get().fetched(1).expect(AgeBetween(50, 51))),
        Case::new(
            "RFC 9111 §4.2.3",
            "a response older than its lifetime is not fresh",
        )
        .cc("max-age=60")
        .respond("Age: 100")
        .not_reused(),
    ];
    run("age", &proxy, &origin, cases, Duration::from_millis(1200)).await;
}
