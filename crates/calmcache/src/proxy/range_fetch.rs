//! Range requests sent on to the origin.

use http::{HeaderMap, Response};

use crate::http::body::{ResponseBody, TimeoutBody};
use crate::http::error::ProxyError;
use crate::http::headers::strip_hop_by_hop;
use crate::net::budget::Admission;
use crate::proxy::fill::{upstream_request, FetchRequest};
use crate::proxy::state::Route;

/// Sends a range request on to the origin with the client's `Range` and
/// `If-Range` (RFC 9110 §14.2), for an object too large to store: the client
/// gets the origin's 206 instead of the whole body.
pub(crate) async fn fetch_range(
    route: &Route,
    fetch: &FetchRequest,
    client: &HeaderMap,
) -> Result<Response<ResponseBody>, ProxyError> {
    let upstream = &route.upstream;
    let mut req = upstream_request(fetch, None);
    for name in [http::header::RANGE, http::header::IF_RANGE] {
        if let Some(value) = client.get(&name) {
            req.headers_mut().insert(name, value.clone());
        }
    }
    // No copy to fall back on (too large to store): it waits for a slot.
    let resp = upstream.send(req, Admission::Wait).await;
    route.activity.upstream_call(&resp);
    let resp = resp?;
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = ResponseBody::stream(TimeoutBody::new(body, upstream.read_timeout));
    Ok(Response::from_parts(parts, body))
}
