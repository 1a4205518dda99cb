#![allow(clippy::unwrap_used)]

use super::*;

fn headers(lines: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in lines {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    map
}

fn cond(text: &str) -> Condition {
    Condition::parse(text).unwrap()
}

#[test]
fn parses_each_kind() {
    assert_eq!(
        cond("cookie:wordpress_logged_in"),
        Condition::Cookie("wordpress_logged_in".into())
    );
    assert_eq!(
        cond("header:Authorization"),
        Condition::Header(http::header::AUTHORIZATION)
    );
    assert_eq!(cond("arg:preview"), Condition::Arg("preview".into()));
    assert_eq!(cond("arg:a:b"), Condition::Arg("a:b".into()));
    for text in ["cookie:wp-postpass", "arg:preview", "header:authorization"] {
        assert_eq!(cond(text).to_string(), text);
    }
    assert_eq!(
        cond("header:Authorization").to_string(),
        "header:authorization"
    );
}

#[test]
fn parse_errors_name_the_problem() {
    let error = |text: &str| Condition::parse(text).unwrap_err();
    assert_eq!(
        error("cookies:x"),
        r#""cookies:x": unknown condition kind "cookies" (expected "cookie", "header" or "arg")"#
    );
    assert_eq!(
        error("Cookie:x"),
        r#""Cookie:x": unknown condition kind "Cookie" (expected "cookie", "header" or "arg")"#
    );
    assert_eq!(
        error("preview"),
        r#""preview" is not a condition (expected "cookie:NAME", "header:NAME" or "arg:NAME")"#
    );
    assert_eq!(error("cookie:"), r#""cookie:": the cookie name is empty"#);
    assert_eq!(error("header:"), r#""header:": the header name is empty"#);
    assert_eq!(error("arg:"), r#""arg:": the arg name is empty"#);
    assert_eq!(
        error("header:Bad Name"),
        r#""header:Bad Name": "Bad Name" is not a valid header name"#
    );
    assert_eq!(
        error("cookie: wp"),
        r#""cookie: wp": cookie names cannot contain ' '"#
    );
    assert_eq!(
        error("cookie:a=b"),
        r#""cookie:a=b": cookie names cannot contain '='"#
    );
    assert_eq!(
        error("arg:a&b"),
        r#""arg:a&b": arg names cannot contain '&'"#
    );
}

#[test]
fn odd_conditions_never_panic() {
    for text in [
        ":",
        "::",
        "cookie::",
        "header:é",
        "arg:é",
        "cookie:é",
        "é:x",
        "",
    ] {
        if let Ok(condition) = Condition::parse(text) {
            let request = headers(&[("cookie", ";=;;==")]);
            condition.matches(&request, Some("&&=&é=0"));
        }
    }
    assert_eq!(cond("arg:é"), Condition::Arg("é".into()));
    assert!(cond("arg:é").matches(&HeaderMap::new(), Some("é")));
    assert!(Condition::parse("cookie:é").is_err());
    assert!(Condition::parse("header:é").is_err());
}

#[test]
fn wordpress_cookies_match_by_prefix() {
    let logged_in = cond("cookie:wordpress_logged_in");
    let request = headers(&[("cookie", "wordpress_logged_in_abc=1; other=2")]);
    assert!(logged_in.matches(&request, None));
    assert!(cond("cookie:other").matches(&request, None));
    assert!(!cond("cookie:comment_author").matches(&request, None));
    // The prefix is on the name, not the value or the middle of a name.
    let value_only = headers(&[(
        "cookie",
        "x=wordpress_logged_in_abc; my_wordpress_logged_in=1",
    )]);
    assert!(!logged_in.matches(&value_only, None));
    // Case-sensitive, as browsers send cookie names.
    let upper = headers(&[("cookie", "WORDPRESS_LOGGED_IN_abc=1")]);
    assert!(!logged_in.matches(&upper, None));
    assert!(!logged_in.matches(&HeaderMap::new(), None));
}

#[test]
fn every_cookie_line_is_searched() {
    let request = headers(&[
        ("cookie", "a=1"),
        ("cookie", "b=2;wp-postpass_123=x"),
        ("cookie", "comment_author_42=me"),
    ]);
    assert!(cond("cookie:wp-postpass").matches(&request, None));
    assert!(cond("cookie:comment_author").matches(&request, None));
    assert!(cond("cookie:b").matches(&request, None));
    assert!(!cond("cookie:d").matches(&request, None));
    let bare = headers(&[("cookie", "flag; c = 3")]);
    assert!(cond("cookie:flag").matches(&bare, None));
    assert!(cond("cookie:c").matches(&bare, None));
}

#[test]
fn header_must_be_present_and_non_empty() {
    let auth = cond("header:Authorization");
    assert!(auth.matches(&headers(&[("authorization", "Bearer x")]), None));
    assert!(auth.matches(&headers(&[("Authorization", "Basic y")]), None));
    assert!(!auth.matches(&headers(&[("authorization", "")]), None));
    assert!(!auth.matches(&headers(&[("authorization", "  ")]), None));
    assert!(auth.matches(
        &headers(&[("authorization", ""), ("authorization", "x")]),
        None
    ));
    assert!(!auth.matches(&headers(&[("x-other", "1")]), None));
}

#[test]
fn args_other_than_zero_match() {
    let preview = cond("arg:preview");
    let empty = HeaderMap::new();
    let matches = |query: Option<&str>| preview.matches(&empty, query);
    assert!(matches(Some("preview=1")));
    assert!(matches(Some("preview=true&p=5")));
    assert!(matches(Some("p=5&preview=1&q=2")));
    assert!(matches(Some("p=5&preview=yes")));
    assert!(matches(Some("preview")));
    assert!(matches(Some("a=1&preview")));
    assert!(matches(Some("preview=")));
    assert!(matches(Some("preview=0&preview=1")));
    assert!(!matches(Some("preview=0")));
    assert!(!matches(Some("a=1&preview=0&b=2")));
    assert!(!matches(Some("previews=1&xpreview=1&Preview=1")));
    assert!(!matches(Some("pre%76iew=1")));
    assert!(!matches(Some("")));
    assert!(!matches(None));
    assert!(cond("arg:pre%76iew").matches(&empty, Some("pre%76iew=1")));
}

#[test]
fn any_match_is_an_or() {
    let conditions = [cond("cookie:wordpress_logged_in"), cond("arg:preview")];
    let empty = HeaderMap::new();
    assert!(!any_match(&conditions, &empty, Some("p=1")));
    assert!(any_match(&conditions, &empty, Some("preview=1")));
    let logged_in = headers(&[("cookie", "wordpress_logged_in_x=1")]);
    assert!(any_match(&conditions, &logged_in, None));
    assert!(!any_match(&[], &logged_in, Some("preview=1")));
}
