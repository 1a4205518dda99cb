//! Blame as a table: which failed exchanges charge the server, with
//! explicit clocks.

use std::time::{Duration, Instant};

use super::*;

const FT: Duration = Duration::from_secs(10);

fn key(path: &str) -> PathKey {
    PathKey::new(b"example.com", path)
}

/// Each row: the paths that fail in turn, 1 ms apart (whether the server
/// answered 5 s before the first), and the blame of each.
#[test]
fn only_several_paths_failing_on_a_silent_server_blame_the_server() {
    use Blame::{Server, Url};
    let rows: &[(&str, bool, &[&str], &[Blame])] = &[
        ("one URL hammered", false, &["/a"; 6], &[Url; 6]),
        ("one URL hammered, answering", true, &["/a"; 4], &[Url; 4]),
        (
            "three paths, silent",
            false,
            &["/a", "/b", "/c"],
            &[Url, Url, Server],
        ),
        (
            "three paths, answering others",
            true,
            &["/a", "/b", "/c", "/d"],
            &[Url; 4],
        ),
        (
            "counted once, then three paths again",
            false,
            &["/a", "/b", "/c", "/d", "/e", "/f"],
            &[Url, Url, Server, Url, Url, Server],
        ),
        (
            "a path repeated is one",
            false,
            &["/a", "/a", "/b", "/a", "/c"],
            &[Url, Url, Url, Url, Server],
        ),
    ];
    for (name, answering, paths, want) in rows {
        let blame = UrlBlame::new();
        let mut failed = FailedPaths::default();
        let t0 = Instant::now() + Duration::from_secs(20);
        if *answering {
            blame.answered(t0 - Duration::from_secs(5));
        }
        let got: Vec<Blame> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let at = t0 + Duration::from_millis(i as u64);
                blame.judge(&mut failed, key(p), at, FT)
            })
            .collect();
        assert_eq!(&got, want, "{name}");
    }
}

#[test]
fn the_query_is_not_part_of_the_path_but_the_host_is() {
    let get = |uri: &str, host: &str| {
        let req = http::Request::get(uri)
            .header("host", host)
            .body(())
            .unwrap();
        PathKey::of(&req)
    };
    assert_eq!(get("/a?x=1", "h"), get("/a?x=2", "h"));
    assert_ne!(get("/a", "h"), get("/b", "h"));
    assert_ne!(get("/a", "h"), get("/a", "g"));
}

#[test]
fn paths_and_answers_older_than_the_window_are_forgotten() {
    let blame = UrlBlame::new();
    let mut failed = FailedPaths::default();
    let t0 = Instant::now() + Duration::from_secs(20);
    blame.answered(t0);
    assert_eq!(blame.judge(&mut failed, key("/a"), t0, FT), Blame::Url);
    assert_eq!(blame.judge(&mut failed, key("/b"), t0 + FT, FT), Blame::Url);
    // The answer at t0 is a window old now, and so is /a's failure.
    let at = t0 + FT + Duration::from_millis(1);
    assert_eq!(blame.judge(&mut failed, key("/c"), at, FT), Blame::Url);
    let at = t0 + FT + Duration::from_millis(2);
    assert_eq!(blame.judge(&mut failed, key("/d"), at, FT), Blame::Server);
}

#[test]
fn a_recent_answer_keeps_the_stamp_fresh() {
    let blame = UrlBlame::new();
    let t0 = Instant::now() + Duration::from_secs(20);
    blame.answered(t0);
    blame.answered(t0 + Duration::from_secs(8));
    assert!(blame.answered_within(t0 + Duration::from_secs(17), FT));
    assert!(!blame.answered_within(t0 + Duration::from_secs(19), FT));
    assert!(!UrlBlame::new().answered_within(t0, FT), "never answered");
}

#[test]
fn the_first_answer_is_noted_at_once() {
    let blame = UrlBlame::new();
    blame.answered(Instant::now());
    assert!(blame.answered_within(Instant::now(), FT));
}
