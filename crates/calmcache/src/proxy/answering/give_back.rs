//! `return`: a fixed status with a `Location` (the redirects) or a body,
//! each rendered from the request as a key template is; NGINX's page for a
//! status from 300 up that has no body of its own. HEAD gets the head alone.
//!
//! Must not read anything but the admitted request: `$host` is the edge's
//! checked Host (no CR/LF can reach it), without its port as NGINX's.

use http::{header, HeaderValue, Method, Response, StatusCode};

use super::Asked;
use crate::config::answering::Return;
use crate::config::key_template::RequestView;
use crate::http::body::ResponseBody;
use crate::net::conn::Peer;

/// The answer `give_back` makes for `asked`.
pub(super) fn respond(
    give_back: &Return,
    asked: &Asked<'_>,
    client: Peer,
) -> Response<ResponseBody> {
    let view = RequestView {
        scheme: client.scheme(),
        method: asked.method,
        host: without_port(asked.host),
        path_and_query: asked.path_and_query,
        headers: asked.headers,
    };
    let mut text = String::new();
    let (body, content_type) = match &give_back.body {
        Some(body) => {
            body.render(&view, &mut text);
            (std::mem::take(&mut text), give_back.content_type.as_str())
        }
        None if give_back.status.as_u16() >= 300 => {
            (super::nginx_page(give_back.status), "text/html")
        }
        None => (String::new(), ""),
    };
    let location = match &give_back.location {
        Some(location) => {
            location.render(&view, &mut text);
            match location_value(&text) {
                Some(value) => Some(value),
                None => return super::plain(StatusCode::BAD_REQUEST),
            }
        }
        None => None,
    };
    let len = body.len();
    let body = if *asked.method == Method::HEAD || give_back.status == StatusCode::NO_CONTENT {
        ResponseBody::empty()
    } else {
        ResponseBody::full(body)
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = give_back.status;
    let headers = resp.headers_mut();
    if let Some(location) = location {
        headers.insert(header::LOCATION, location);
    }
    if !content_type.is_empty() {
        if let Ok(value) = HeaderValue::from_str(content_type) {
            headers.insert(header::CONTENT_TYPE, value);
        }
    }
    if give_back.status != StatusCode::NO_CONTENT {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    resp
}

/// The rendered `Location` as a field value; `None` when a variable
/// brought in a byte a field cannot carry (answered 400). A path that
/// starts with `//` or `/\` (a `$request_uri` with `merge_slashes = false`)
/// would send the client to another host: its leading slashes become one.
fn location_value(text: &str) -> Option<HeaderValue> {
    let trimmed = if text.starts_with("//") || text.starts_with("/\\") {
        let rest = text.trim_start_matches(['/', '\\']);
        format!("/{rest}")
    } else {
        text.to_owned()
    };
    HeaderValue::from_str(&trimmed).ok()
}

/// NGINX's `$host`: the Host without its port (`[::1]:8080` -> `[::1]`).
fn without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon) if !host[colon..].contains(']') => &host[..colon],
        _ => host,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn host_without_port_and_locations_that_stay_home() {
        assert_eq!(without_port("example.com:8080"), "example.com");
        assert_eq!(without_port("example.com"), "example.com");
        assert_eq!(without_port("[::1]:8080"), "[::1]");
        assert_eq!(without_port("[::1]"), "[::1]");
        assert_eq!(
            location_value("//evil.example/x").unwrap(),
            "/evil.example/x"
        );
        assert_eq!(location_value("/\\evil.example").unwrap(), "/evil.example");
        assert_eq!(location_value("https://a/b").unwrap(), "https://a/b");
        assert!(location_value("https://a/\r\nSet-Cookie: x").is_none());
    }
}
