#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::time::UNIX_EPOCH;

use crate::config::access_log::LogTarget;

use super::format::*;
use super::*;
use calmcache_core::CacheStatus;

fn entry() -> Entry<'static> {
    Entry {
        // 2023-11-14T22:13:20.042Z
        time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_042),
        remote_addr: IpAddr::from([192, 0, 2, 7]),
        method: "GET",
        uri: "/a?b=1",
        protocol: "HTTP/1.1",
        status: 200,
        bytes_sent: 1234,
        referer: None,
        user_agent: Some(b"curl/8.5.0".as_slice()),
        host: Some(b"example.com".as_slice()),
        cache_status: "HIT",
        upstream_addr: None,
        upstream_time: None,
        origin_wait: None,
        upstream_connection: None,
        realip_remote_addr: None,
        request_time: Duration::from_micros(1_500),
    }
}

fn line(format: LogFormat, e: &Entry<'_>) -> String {
    let mut out = String::new();
    format_line(format, e, &mut out);
    assert!(
        out.ends_with('\n') && out.matches('\n').count() == 1,
        "{out:?}"
    );
    out.pop();
    out
}

#[test]
fn combined_is_nginx_combined_plus_cache_fields() {
    assert_eq!(
        line(LogFormat::Combined, &entry()),
        r#"192.0.2.7 - - [14/Nov/2023:22:13:20 +0000] "GET /a?b=1 HTTP/1.1" 200 1234 "-" "curl/8.5.0" "HIT" - - 0.001"#
    );
    let upstream = Entry {
        cache_status: "MISS",
        referer: Some(b"https://example.com/".as_slice()),
        upstream_addr: Some("127.0.0.1:8081"),
        upstream_time: Some(Duration::from_millis(180)),
        origin_wait: None,
        upstream_connection: None,
        request_time: Duration::from_millis(2_181),
        ..entry()
    };
    assert_eq!(
        line(LogFormat::Combined, &upstream),
        r#"192.0.2.7 - - [14/Nov/2023:22:13:20 +0000] "GET /a?b=1 HTTP/1.1" 200 1234 "https://example.com/" "curl/8.5.0" "MISS" 127.0.0.1:8081 0.180 2.181"#
    );
}

#[test]
fn combined_escapes_quotes_backslashes_controls_and_high_bytes() {
    let e = Entry {
        uri: "/q?x=\"1\"",
        user_agent: Some(b"a\"b\\c\td\ne\x7f\xc3\xa9".as_slice()),
        referer: Some(b"".as_slice()),
        ..entry()
    };
    let text = line(LogFormat::Combined, &e);
    assert!(text.contains(r#""GET /q?x=\x221\x22 HTTP/1.1""#), "{text}");
    assert!(
        text.contains(r#" "" "a\x22b\x5Cc\x09d\x0Ae\x7F\xC3\xA9" "#),
        "{text}"
    );
}

#[test]
fn json_has_every_key_and_escapes_through_serde() {
    let e = Entry {
        user_agent: Some(b"a\"b\n\xff".as_slice()),
        upstream_addr: Some("[::1]:8081"),
        upstream_time: Some(Duration::from_millis(5)),
        origin_wait: Some(Duration::from_millis(12)),
        upstream_connection: Some("reused"),
        ..entry()
    };
    let text = line(LogFormat::Json, &e);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["time"], "2023-11-14T22:13:20.042Z");
    assert_eq!(v["remote_addr"], "192.0.2.7");
    assert_eq!(v["method"], "GET");
    assert_eq!(v["uri"], "/a?b=1");
    assert_eq!(v["protocol"], "HTTP/1.1");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes_sent"], 1234);
    assert_eq!(v["referer"], serde_json::Value::Null);
    assert_eq!(v["user_agent"], "a\"b\n\u{fffd}");
    assert_eq!(v["cache_status"], "HIT");
    assert_eq!(v["upstream_addr"], "[::1]:8081");
    assert_eq!(v["upstream_time"], 0.005);
    assert_eq!(v["request_time"], 0.001);
    assert_eq!(v["host"], "example.com");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(v["origin_wait_ms"], 12, "the wait for an origin slot");
    assert_eq!(v["upstream_connection"], "reused");
    assert_eq!(keys.len(), 16, "{keys:?}");
    let bare = line(LogFormat::Json, &entry());
    let v: serde_json::Value = serde_json::from_str(&bare).unwrap();
    assert!(v.get("origin_wait_ms").is_none(), "absent without a wait");
    assert!(
        v.get("upstream_connection").is_none(),
        "absent without an answer"
    );
    assert_eq!(v["upstream_addr"], serde_json::Value::Null);
    assert_eq!(v["upstream_time"], serde_json::Value::Null);
}

#[test]
fn times_match_httpdate_for_many_instants() {
    let mut t: u64 = 0;
    while t < 5_000_000_000 {
        let at = UNIX_EPOCH + Duration::from_secs(t);
        let civil = Civil::of(at);
        let mut local = String::new();
        civil.write_local(&mut local);
        // "Tue, 14 Nov 2023 22:13:20 GMT" -> "14/Nov/2023:22:13:20 +0000"
        let http = httpdate::fmt_http_date(at);
        let parts: Vec<&str> = http.split(' ').collect();
        let want = format!("{}/{}/{}:{} +0000", parts[1], parts[2], parts[3], parts[4]);
        assert_eq!(local, want, "at {t}");
        t += 7_919_993; // about three months, never on a boundary twice
    }
    let mut text = String::new();
    Civil::of(UNIX_EPOCH + Duration::from_millis(951_782_400_999)).write_rfc3339(&mut text);
    assert_eq!(text, "2000-02-29T00:00:00.999Z");
    let mut text = String::new();
    Civil::of(UNIX_EPOCH - Duration::from_secs(5)).write_rfc3339(&mut text);
    assert_eq!(text, "1970-01-01T00:00:00.000Z");
}

fn logged(served: Option<Served>) -> &'static str {
    // Even with our member in the header, the class comes from Served.
    let mut resp = Response::new(());
    resp.headers_mut().insert(
        "cache-status",
        HeaderValue::from_static("calmcache; hit; ttl=3"),
    );
    if let Some(served) = served {
        resp.extensions_mut().insert(served);
    }
    served_of(&resp).0
}

#[test]
fn cache_status_is_the_class_of_the_answer() {
    let words = [
        (CacheStatus::Hit, "HIT"),
        (CacheStatus::HitRefreshEarly, "HIT"),
        (CacheStatus::SharedHit, "HIT"),
        (CacheStatus::StaleWhileRevalidate, "STALE"),
        (CacheStatus::StaleRefreshInFlight, "STALE"),
        (CacheStatus::StaleIfError, "STALE"),
        (CacheStatus::MissStored, "MISS"),
        (CacheStatus::MissNotStored, "MISS"),
        (CacheStatus::MissCollapsed, "MISS"),
        (CacheStatus::ExpiredStored, "MISS"),
        (CacheStatus::ExpiredCollapsed, "MISS"),
        (CacheStatus::Revalidated, "REVALIDATED"),
        (CacheStatus::RequestForced, "MISS"),
        (CacheStatus::RefreshedEarly, "MISS"),
        (CacheStatus::Bypass, "BYPASS"),
    ];
    assert_eq!(words.len(), CacheStatus::ALL.len());
    for (status, word) in words {
        let served = Served {
            class: Some(status.class()),
            upstream: None,
        };
        assert_eq!(logged(Some(served)), word, "{status:?}");
        assert_eq!(word, status.class().as_str().to_ascii_uppercase());
    }
    // No class noted, or no Served at all: `-`.
    let none = Served {
        class: None,
        upstream: None,
    };
    assert_eq!(logged(Some(none)), "-");
    assert_eq!(logged(None), "-");
}

#[test]
fn the_writer_appends_flushes_and_reopens() {
    let dir = std::env::temp_dir().join(format!(
        "calmcache-access-log-unit-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    std::fs::write(&path, "old\n").unwrap();
    let config = AccessLogConfig {
        target: LogTarget::File(path.clone()),
        format: LogFormat::Combined,
    };
    let log = AccessLog::open(&config).unwrap();
    log.send("one\n".into());
    assert!(log.flush(Duration::from_secs(5)));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\none\n");
    let rotated = dir.join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    log.reopen();
    log.send("two\n".into());
    assert!(log.flush(Duration::from_secs(5)));
    assert_eq!(std::fs::read_to_string(&rotated).unwrap(), "old\none\n");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
    // Without an explicit flush, a line shows up within FLUSH_EVERY.
    log.send("three\n".into());
    let sent = Instant::now();
    while std::fs::read_to_string(&path).unwrap() != "two\nthree\n" {
        assert!(sent.elapsed() < Duration::from_secs(5), "never flushed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(log.dropped(), 0);
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unopenable_path_fails_at_open() {
    let config = AccessLogConfig {
        target: LogTarget::File("/nonexistent-calmcache-dir/access.log".into()),
        format: LogFormat::Json,
    };
    assert!(AccessLog::open(&config).is_err());
}

/// Issue 25: HTTP/2 targets (and HTTP/1.1 absolute ones) were written as
/// full URLs, HTTP/1.1 ones as paths, so one resource read two ways.
#[test]
fn uri_is_the_origin_form_whatever_the_target_form() {
    for (target, logged) in [
        ("/a/b?x=1", "/a/b?x=1"),
        ("https://calm.test/a/b?x=1", "/a/b?x=1"),
        ("http://calm.test:8080/a%20b", "/a%20b"),
        ("http://calm.test", "/"),
        ("*", "*"),
        ("calm.test:443", "calm.test:443"),
    ] {
        let uri: http::Uri = target.parse().unwrap();
        assert_eq!(uri_text(&uri), logged, "{target}");
    }
}
