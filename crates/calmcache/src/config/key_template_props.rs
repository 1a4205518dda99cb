//! Property tests for key templates: any template text compiles or returns
//! an error without panicking; any request renders without panicking;
//! templates built from literal text and variables keep their text and
//! render the literals verbatim and each variable as the request's value;
//! and distinct header values never render the same.

#![allow(clippy::unwrap_used)]

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use proptest::prelude::*;

use super::{KeyTemplate, RequestView};

/// Text where `$`, braces, name characters and other text meet often.
fn template_soup() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        r"(\$|\{|\}|_|[a-z]{1,6}|(scheme|host|uri|args|is_args|request_uri|method|arg_|http_|cookie_)|[A-Z0-9]|\PC){0,10}",
    )
    .unwrap()
}

/// Any bytes a header value may hold.
fn value_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..24).prop_map(|mut v| {
        for b in &mut v {
            if (*b < 0x20 && *b != b'\t') || *b == 0x7f {
                *b = b';';
            }
        }
        v
    })
}

fn method() -> impl Strategy<Value = Method> {
    prop::sample::select(vec![
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::from_bytes(b"PURGE").unwrap(),
    ])
}

/// A request with arbitrary parts: `(scheme, host, path_and_query, method,
/// headers)`.
fn any_request() -> impl Strategy<Value = (String, String, String, Method, HeaderMap)> {
    let header = (
        prop::sample::select(vec!["cookie", "accept", "x-a", "x-b"]),
        value_bytes(),
    );
    (
        prop_oneof![
            Just("http".to_owned()),
            Just("https".to_owned()),
            "\\PC{0,6}"
        ],
        "\\PC{0,16}",
        r"([/?&=;]|[a-z]{1,3}|\PC){0,16}",
        method(),
        proptest::collection::vec(header, 0..6),
    )
        .prop_map(|(scheme, host, target, method, pairs)| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(name, HeaderValue::from_bytes(&value).unwrap());
            }
            (scheme, host, target, method, headers)
        })
}

fn render(template: &KeyTemplate, req: &RequestView<'_>) -> String {
    let mut out = String::from("left over");
    template.render(req, &mut out);
    out
}

/// One piece of a generated template.
#[derive(Clone, Debug)]
enum Piece {
    /// Literal text, no `$`.
    Lit(String),
    /// A variable: its name after `$`, and whether it is written `${...}`.
    Var(String, bool),
}

fn piece() -> impl Strategy<Value = Piece> {
    let fixed = prop::sample::select(super::FIXED.to_vec()).prop_map(str::to_owned);
    let name = prop_oneof![
        fixed,
        "[a-c_]{1,2}".prop_map(|n| format!("arg_{n}")),
        "[a-c]{1,2}".prop_map(|n| format!("cookie_{n}")),
        "x_[a-c]".prop_map(|n| format!("http_{n}")),
    ];
    prop_oneof![
        "[^$]{1,8}".prop_map(Piece::Lit),
        (name, any::<bool>()).prop_map(|(n, braced)| Piece::Var(n, braced)),
    ]
}

/// A request whose parts are known: query arguments (`None`: a bare
/// name), cookies, and `x-*` headers with visible-ASCII values.
#[derive(Clone, Debug)]
struct Known {
    scheme: &'static str,
    host: String,
    path: String,
    /// Whether a `?` is written even with no arguments.
    question: bool,
    args: Vec<(String, Option<String>)>,
    cookies: Vec<(String, String)>,
    headers: Vec<(&'static str, String)>,
    method: Method,
}

fn known() -> impl Strategy<Value = Known> {
    (
        prop::sample::select(vec!["http", "https"]),
        "[A-Za-z0-9.:-]{0,12}",
        "/[a-z0-9/._%-]{0,10}",
        any::<bool>(),
        proptest::collection::vec(
            ("[a-c_]{1,2}", proptest::option::of("[a-z0-9=%]{0,4}")),
            0..5,
        ),
        proptest::collection::vec(("[a-c]{1,2}", "[a-z0-9]{0,4}"), 0..4),
        proptest::collection::vec(
            (
                prop::sample::select(vec!["x-a", "x-b"]),
                // Visible ASCII and spaces, no backslash: rendered as is.
                r"[ -\[\]-~]{0,8}",
            ),
            0..4,
        ),
        method(),
    )
        .prop_map(
            |(scheme, host, path, question, args, cookies, headers, method)| Known {
                scheme,
                host,
                path,
                question,
                args,
                cookies,
                headers,
                method,
            },
        )
}

impl Known {
    fn query(&self) -> String {
        self.args
            .iter()
            .map(|(name, value)| match value {
                Some(value) => format!("{name}={value}"),
                None => name.clone(),
            })
            .collect::<Vec<_>>()
            .join("&")
    }

    fn target(&self) -> String {
        let query = self.query();
        if query.is_empty() && !self.question {
            self.path.clone()
        } else {
            format!("{}?{query}", self.path)
        }
    }

    fn header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in &self.headers {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        if !self.cookies.is_empty() {
            let line = self
                .cookies
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join("; ");
            map.append("cookie", HeaderValue::from_str(&line).unwrap());
        }
        map
    }

    /// What variable `name` renders to, worked out from the parts.
    fn value(&self, name: &str) -> String {
        let query = self.query();
        match name {
            "scheme" => self.scheme.to_owned(),
            "host" => self.host.to_ascii_lowercase(),
            "uri" => self.path.clone(),
            "args" => query,
            "is_args" => if query.is_empty() { "" } else { "?" }.to_owned(),
            "request_uri" => self.target(),
            "method" => self.method.as_str().to_owned(),
            _ => {
                if let Some(arg) = name.strip_prefix("arg_") {
                    let first = self.args.iter().find(|(n, _)| n == arg);
                    first.and_then(|(_, v)| v.clone()).unwrap_or_default()
                } else if let Some(cookie) = name.strip_prefix("cookie_") {
                    let first = self.cookies.iter().find(|(n, _)| n == cookie);
                    first.map(|(_, v)| v.clone()).unwrap_or_default()
                } else {
                    let header = name.strip_prefix("http_").unwrap().replace('_', "-");
                    self.headers
                        .iter()
                        .filter(|(n, _)| *n == header)
                        .map(|(_, v)| v.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            }
        }
    }
}

/// The template text for `pieces`: a variable is braced when asked, and
/// whenever the next piece starts with a character that would extend its name.
fn template_text(pieces: &[Piece]) -> String {
    let mut text = String::new();
    for (i, piece) in pieces.iter().enumerate() {
        match piece {
            Piece::Lit(lit) => text.push_str(lit),
            Piece::Var(name, braced) => {
                let runs_on = matches!(
                    pieces.get(i + 1),
                    Some(Piece::Lit(next))
                        if next.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                );
                if *braced || runs_on {
                    text.push_str(&format!("${{{name}}}"));
                } else {
                    text.push_str(&format!("${name}"));
                }
            }
        }
    }
    text
}

proptest! {
    /// Any text compiles or is refused with a message, never a panic; a
    /// compiled template keeps its text, has a `$`, and renders any request.
    #[test]
    fn arbitrary_templates_never_panic(
        text in prop_oneof![template_soup(), any::<String>()],
        (scheme, host, target, method, headers) in any_request(),
    ) {
        match KeyTemplate::parse(&text) {
            Ok(template) => {
                prop_assert_eq!(template.as_str(), text.as_str());
                prop_assert!(text.contains('$'));
                let req = RequestView {
                    scheme: &scheme,
                    method: &method,
                    host: &host,
                    path_and_query: &target,
                    headers: &headers,
                };
                let _ = render(&template, &req);
            }
            Err(message) => prop_assert!(!message.is_empty()),
        }
    }

    /// Every variable renders for any request (any target, host, header
    /// bytes and cookies) without a panic, and rendering twice into the same
    /// buffer gives the same key.
    #[test]
    fn arbitrary_requests_never_panic(
        (scheme, host, target, method, headers) in any_request(),
    ) {
        let template = KeyTemplate::parse(
            "$scheme|$host|$uri|$args|$is_args|$request_uri|$method|$arg_a|\
             $http_accept|$http_x_a|$cookie_a|$cookie_b",
        )
        .unwrap();
        let req = RequestView {
            scheme: &scheme,
            method: &method,
            host: &host,
            path_and_query: &target,
            headers: &headers,
        };
        let once = render(&template, &req);
        let mut again = once.clone();
        template.render(&req, &mut again);
        prop_assert_eq!(&once, &again);
        let head = format!("{scheme}|{}|", host.to_ascii_lowercase());
        prop_assert!(once.starts_with(&head), "{:?} {:?}", once, head);
    }

    /// A template of literal text and variables compiles to the same text
    /// and renders each literal as written and each variable as the
    /// request's value (worked out here from the request's parts).
    #[test]
    fn templates_render_their_parts(
        pieces in proptest::collection::vec(piece(), 1..8),
        known in known(),
    ) {
        let text = template_text(&pieces);
        let has_var = pieces.iter().any(|p| matches!(p, Piece::Var(..)));
        let parsed = KeyTemplate::parse(&text);
        if !has_var {
            // Literal text alone: one key for every request, refused.
            let message = parsed.unwrap_err();
            prop_assert!(message.contains("has no variables"), "{}", message);
            return Ok(());
        }
        let template = parsed.unwrap();
        prop_assert_eq!(template.as_str(), text.as_str());
        let want: String = pieces
            .iter()
            .map(|piece| match piece {
                Piece::Lit(lit) => lit.clone(),
                Piece::Var(name, _) => known.value(name),
            })
            .collect();
        let target = known.target();
        let headers = known.header_map();
        let req = RequestView {
            scheme: known.scheme,
            method: &known.method,
            host: &known.host,
            path_and_query: &target,
            headers: &headers,
        };
        prop_assert_eq!(render(&template, &req), want, "{}", text);
    }

    /// Two different header values (any bytes, not UTF-8 or with a
    /// backslash included) never render the same: keys never collide on
    /// the encoding of a header.
    #[test]
    fn distinct_header_values_render_distinctly(a in value_bytes(), b in value_bytes()) {
        prop_assume!(a != b);
        let template = KeyTemplate::parse("$http_x_a").unwrap();
        let name = HeaderName::from_static("x-a");
        let keys: Vec<String> = [&a, &b]
            .iter()
            .map(|value| {
                let mut headers = HeaderMap::new();
                headers.insert(name.clone(), HeaderValue::from_bytes(value).unwrap());
                let req = RequestView {
                    scheme: "https",
                    method: &Method::GET,
                    host: "h",
                    path_and_query: "/",
                    headers: &headers,
                };
                render(&template, &req)
            })
            .collect();
        prop_assert_ne!(&keys[0], &keys[1], "{:?} {:?}", a, b);
    }
}
