#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn bodies_name_exactly_one_selector() {
    let p = Purge::from_json(br#"{"url": "/blog/post?id=1"}"#).unwrap();
    assert_eq!(
        p.selector,
        Selector::Url {
            host: None,
            path_and_query: "/blog/post?id=1".into()
        }
    );
    assert_eq!(p.mode, PurgeMode::Hard);
    let p = Purge::from_json(br#"{"url": "http://Example.COM/a", "soft": true}"#).unwrap();
    assert_eq!(
        p.selector,
        Selector::Url {
            host: Some("example.com".into()),
            path_and_query: "/a".into()
        }
    );
    assert_eq!(p.mode, PurgeMode::Soft);
    // Normalised as requests are: the purge reaches what they stored.
    let p = Purge::from_json(br#"{"url": "https://Example.COM:443/%61//./b?x=%61"}"#).unwrap();
    assert_eq!(
        p.selector,
        Selector::Url {
            host: Some("example.com".into()),
            path_and_query: "/a/b?x=%61".into()
        }
    );
    assert!(Purge::from_json(br#"{"url": "http://a b/x"}"#).is_err());
    assert!(Purge::from_json(br#"{"url": "/%zz"}"#).is_err());
    let p = Purge::from_json(br#"{"prefix": "/blog/"}"#).unwrap();
    assert_eq!(
        p.selector,
        Selector::Prefix {
            host: None,
            path: "/blog/".into()
        }
    );
    assert_eq!(
        Purge::from_json(br#"{"tag": "post-1"}"#).unwrap().selector,
        Selector::Tag("post-1".into())
    );
    assert_eq!(
        Purge::from_json(br#"{"all": true}"#).unwrap().selector,
        Selector::All
    );
    for bad in [
        &br#"{}"#[..],
        br#"{"url": "/a", "tag": "t"}"#,
        br#"{"all": false}"#,
        br#"{"url": "blog"}"#,
        br#"{"tag": "a b"}"#,
        br#"{"purge": "/"}"#,
        br#"not json"#,
    ] {
        assert!(
            Purge::from_json(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn prefixes_and_tags_match_keys_and_tag_lists() {
    let key = CacheKey::new("http", "a.example", "/blog/1?x");
    let prefix = |host: Option<&str>, path: &str| Selector::Prefix {
        host: host.map(str::to_owned),
        path: path.into(),
    };
    assert!(matches(&prefix(None, "/blog/"), &key, std::iter::empty));
    assert!(matches(
        &prefix(Some("a.example"), "/blog"),
        &key,
        std::iter::empty
    ));
    assert!(!matches(
        &prefix(Some("b.example"), "/blog"),
        &key,
        std::iter::empty
    ));
    assert!(!matches(&prefix(None, "/blogs"), &key, std::iter::empty));
    let tag = Selector::Tag("post-1".into());
    assert!(matches(&tag, &key, || ["x", "post-1"].into_iter()));
    assert!(!matches(&tag, &key, || ["post-10"].into_iter()));
}

#[test]
fn a_path_scan_matches_the_path_and_its_variants_on_any_host() {
    let any_host = Selector::Url {
        host: None,
        path_and_query: "/x?a=1".into(),
    };
    let on = |scheme: &str, host: &str, pq: &str| {
        matches(
            &any_host,
            &CacheKey::new(scheme, host, pq),
            std::iter::empty,
        )
    };
    assert!(on("http", "a.example", "/x?a=1"));
    assert!(on("https", "b.example:8443", "/x?a=1"));
    assert!(on("http", "a.example", "/x?a=1\0v1f\0en"));
    assert!(!on("http", "a.example", "/x?a=10"));
    assert!(!on("http", "a.example", "/x"));
    // A rendered key is never taken by a path scan.
    assert!(!on("", "", "/x?a=1"));
    let one_host = Selector::Url {
        host: Some("a.example".into()),
        path_and_query: "/x?a=1".into(),
    };
    let key = CacheKey::new("http", "a.example", "/x?a=1");
    assert!(!matches(&one_host, &key, std::iter::empty));
}

#[test]
fn body_keys_as_cache_status_shows_them_split_into_their_parts() {
    let digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let shown = format!("http://h/graphql?x=1 POST sha256:{digest}");
    assert_eq!(
        body_key_parts(&shown),
        Some(("http://h/graphql?x=1", "POST", digest))
    );
    let rendered = format!("GET|h|/q with space QUERY sha256:{digest}");
    assert_eq!(
        body_key_parts(&rendered),
        Some(("GET|h|/q with space", "QUERY", digest))
    );
    for text in [
        "http://h/graphql".to_owned(),
        format!("http://h/g post sha256:{digest}"),
        format!("http://h/g POST sha256:{}", &digest[1..]),
        format!("http://h/g POST sha256:{}", digest.to_uppercase()),
        format!("http://h/g POSTsha256:{digest}"),
    ] {
        assert_eq!(body_key_parts(&text), None, "{text}");
    }
}

#[test]
fn default_keys_as_cache_status_shows_them_split_into_their_parts() {
    let k = default_key_parts("http://127.0.0.1:28080/tag2?x=1").unwrap();
    assert_eq!(
        (k.scheme, k.host, k.path_and_query),
        ("http", "127.0.0.1:28080", "/tag2?x=1")
    );
    let k = default_key_parts("https://calm.test/").unwrap();
    assert_eq!(
        (k.scheme, k.host, k.path_and_query),
        ("https", "calm.test", "/")
    );
    // The parts hash as the stored key's.
    let stored = CacheKey::new("https", "calm.test", "/");
    assert_eq!(k.to_owned_key(), stored);
    for text in ["calm.test/x", "ftp://h/x", "http:///x", "http://host", "/x"] {
        assert!(default_key_parts(text).is_none(), "{text}");
    }
}

#[test]
fn refusals_keep_their_words() {
    let refused = |body: &[u8]| Purge::from_json(body).unwrap_err().to_string();
    assert_eq!(refused(br#"{"key": ""}"#), r#""key" is empty"#);
    assert_eq!(refused(br#"{"tag": " a b "}"#), r#""a b" is not one tag"#);
    assert_eq!(
        refused(br#"{"all": false}"#),
        r#""all" must be true when given"#
    );
    assert_eq!(
        refused(br#"{}"#),
        r#"give exactly one of "url", "key", "prefix", "tag", "all": true"#
    );
    assert_eq!(
        refused(br#"{"url": "blog"}"#),
        r#""blog" is neither a path (/...) nor an http(s) URL"#
    );
    assert_eq!(
        refused(br#"{"prefix": "http:///x"}"#),
        r#""http:///x" has no host"#
    );
    let unknown = refused(br#"{"purge": "/"}"#);
    assert!(
        unknown.starts_with("bad JSON: unknown field `purge`"),
        "{unknown}"
    );
    for (body, start) in [
        (&br#"{"url": "/%zz"}"#[..], r#""/%zz": "#),
        (br#"{"url": "http://a b/x"}"#, r#""http://a b/x": "#),
    ] {
        let bad = refused(body);
        assert!(bad.starts_with(start) && bad.len() > start.len(), "{bad}");
    }
}
