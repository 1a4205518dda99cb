//! The request a fill sends upstream.

use bytes::Bytes;
use calmcache_core::CachedObject;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Empty};

use super::*;
use crate::http::conditional;

pub(crate) fn upstream_request(
    fetch: &FetchRequest,
    revalidating: Option<&CachedObject>,
) -> Request<crate::http::body::StreamBody> {
    let mut req = Request::new(
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed(),
    );
    *req.method_mut() = Method::GET;
    *req.uri_mut() = Uri::from(fetch.path_and_query.clone());
    *req.headers_mut() = fetch.headers.clone();
    if let Some(stale) = revalidating {
        conditional::add_validators(req.headers_mut(), &stale.headers());
    }
    req
}
