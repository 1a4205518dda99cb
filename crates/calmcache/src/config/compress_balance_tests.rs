//! Config tests for a route's `compress_passed*` keys and an upstream's
//! `balance` / `hash_key`: defaults, good values, and each bad value
//! reported with its TOML path.

#![allow(clippy::unwrap_used)]

use super::{Balance, Config, ConfigError, Problem};
use crate::http::compress::Coding;
use crate::http::compress_passed::MediaRange;

fn toml(upstream: &str, route: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\n[upstreams.app]\nservers = [\"127.0.0.1:8081\"]\n\
         {upstream}\n\n[[routes]]\nupstream = \"app\"\n{route}\n"
    )
}

fn problems(text: &str) -> Vec<(String, String)> {
    match Config::from_toml(text, "test.toml") {
        Err(ConfigError::Invalid { problems, .. }) => problems
            .iter()
            .map(|p: &Problem| (p.path.clone(), p.to_string()))
            .collect(),
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

#[test]
fn defaults_change_nothing() {
    let config = Config::from_toml(&toml("", ""), "test.toml").unwrap();
    let passed = &config.routes[0].answers.compress_passed;
    assert!(passed.codings.is_empty());
    assert_eq!(passed.min_length, 20);
    assert!(passed.types.contains(&MediaRange::Type("text".into())));
    assert!(passed
        .types
        .contains(&MediaRange::Exact("application/json".into())));
    assert_eq!(config.upstreams[0].balance, Balance::RoundRobin);
}

#[test]
fn good_values_are_typed() {
    let route = "compress_passed = [\"gzip\"]\ncompress_passed_types = [\"text/html\", \"*\"]\n\
                 compress_passed_min_length = 1000";
    let upstream = "balance = \"hash\"\nhash_key = \"$request_uri\"";
    let config = Config::from_toml(&toml(upstream, route), "test.toml").unwrap();
    let passed = &config.routes[0].answers.compress_passed;
    assert_eq!(passed.codings, [Coding::Gzip]);
    assert_eq!(
        passed.types,
        [MediaRange::Exact("text/html".into()), MediaRange::Any]
    );
    assert_eq!(passed.min_length, 1000);
    assert!(matches!(config.upstreams[0].balance, Balance::Hash(_)));
    let least = Config::from_toml(&toml("balance = \"least_conn\"", ""), "test.toml").unwrap();
    assert_eq!(least.upstreams[0].balance, Balance::LeastConn);
}

#[test]
fn bad_compression_values_are_explained() {
    let route = "compress_passed = [\"gzip\", \"br\", \"zstd\", \"GZIP\"]\n\
                 compress_passed_types = [\"text/html; charset=utf-8\", \"text/*\", \"TEXT/*\"]\n\
                 compress_passed_min_length = -1";
    let found = problems(&toml("", route));
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[0].compress_passed_types[0]",
            "routes[0].compress_passed_types[2]",
            "routes[0].compress_passed_min_length",
            "routes[0].compress_passed[1]",
            "routes[0].compress_passed[2]",
            "routes[0].compress_passed[3]",
        ],
        "{found:#?}"
    );
    let text = |i: usize| found[i].1.as_str();
    assert!(text(0).contains("is not a media type"), "{}", text(0));
    assert!(text(3).contains("br is not made on the fly"), "{}", text(3));
    assert!(text(3).contains("compress = [\\\"br\\\"]") || text(3).contains("compress = [\"br\"]"));
    assert!(text(4).contains("\"zstd\" is not a coding"), "{}", text(4));
    assert!(text(5).contains("listed twice"), "{}", text(5));
}

#[test]
fn bad_balance_values_are_explained() {
    let found = problems(&toml("balance = \"least_con\"", ""));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].0, "upstreams.app.balance");
    assert!(found[0].1.contains("least_conn"), "{}", found[0].1);

    let found = problems(&toml("balance = \"hash\"", ""));
    assert_eq!(found[0].0, "upstreams.app.hash_key");
    assert!(found[0].1.contains("missing"), "{}", found[0].1);

    let found = problems(&toml("balance = \"hash\"\nhash_key = \"$request_urx\"", ""));
    assert_eq!(found[0].0, "upstreams.app.hash_key");
    assert!(found[0].1.contains("$request_uri"), "{}", found[0].1);

    let found = problems(&toml("hash_key = \"$request_uri\"", ""));
    assert_eq!(found[0].0, "upstreams.app.hash_key");
    assert!(
        found[0].1.contains("only read with balance"),
        "{}",
        found[0].1
    );
}

#[test]
fn the_summary_names_both() {
    let route = "compress_passed = [\"gzip\"]";
    let upstream = "balance = \"hash\"\nhash_key = \"$request_uri\"";
    let summary = Config::from_toml(&toml(upstream, route), "test.toml")
        .unwrap()
        .summary();
    assert!(
        summary.contains("app: 1 server, hash \"$request_uri\""),
        "{summary}"
    );
    assert!(
        summary.contains("no cache, compress_passed gzip"),
        "{summary}"
    );
    let least = Config::from_toml(&toml("balance = \"least_conn\"", ""), "test.toml")
        .unwrap()
        .summary();
    assert!(least.contains("app: 1 server, least_conn"), "{least}");
}
