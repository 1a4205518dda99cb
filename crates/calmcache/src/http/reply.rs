//! Small answers built in one place: plain text, JSON errors, and the
//! bearer-token check with its 401.

use http::{header, HeaderValue, Response, StatusCode};

use crate::http::body::ResponseBody;

/// `{"error": message}` with `status`.
pub(crate) fn json_error(status: StatusCode, message: &str) -> Response<ResponseBody> {
    let json = serde_json::json!({ "error": message }).to_string() + "\n";
    let mut resp = with_type(Response::new(ResponseBody::full(json)), "application/json");
    *resp.status_mut() = status;
    resp
}

/// True when `headers` carry `Authorization: Bearer <token>` (compared in
/// constant time).
pub(crate) fn bearer_matches(headers: &http::HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
    else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    let diff = a
        .iter()
        .zip(b)
        .fold(a.len() ^ b.len(), |acc, (x, y)| acc | usize::from(x ^ y));
    diff == 0
}

/// 401 with `WWW-Authenticate: Bearer`, saying whether a token is configured.
pub(crate) fn unauthorized(configured: bool) -> Response<ResponseBody> {
    let message = if configured {
        "missing or wrong bearer token"
    } else {
        "no admin token is configured (admin.token, admin.token_file or CALMCACHE_ADMIN_TOKEN)"
    };
    let mut resp = json_error(StatusCode::UNAUTHORIZED, message);
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"calmcache admin\""),
    );
    resp
}

/// A `text/plain` answer with `status`.
pub(crate) fn plain(status: StatusCode, text: String) -> Response<ResponseBody> {
    let mut resp = with_type(
        Response::new(ResponseBody::full(text)),
        "text/plain; charset=utf-8",
    );
    *resp.status_mut() = status;
    resp
}

/// `resp` with `Content-Type: content_type`.
pub(crate) fn with_type(
    mut resp: Response<ResponseBody>,
    content_type: &'static str,
) -> Response<ResponseBody> {
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
