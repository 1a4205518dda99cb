//! An origin's failing answer (a 5xx it does not let us store) handed to
//! the fill's followers, so that one request reaches a failing origin, not
//! one per waiting client.
//!
//! Owns: how much of the answer is shared ([`SHARED_ERROR_MAX`]) and what
//! followers get when it is not. Stores nothing.

use std::sync::Arc;

use crate::net::origin_body::OriginBody;
use calmcache_core::{FetchPermit, NotStorable};
use http::Response;

use super::collect::{collect_limited, Collected};
use super::{fail, finish, FillReply, NotStored};
use crate::http::body::{PrefixedBody, ResponseBody, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};
use crate::proxy::outcome::{ErrorAnswer, FillOutcome, Requester};
use crate::proxy::state::Route;

/// An error answer body larger than this is not handed to followers (they
/// get calmcache's own page with the same status).
pub(crate) const SHARED_ERROR_MAX: usize = 64 * 1024;

/// Hands a failing origin's 5xx answer to the fetch's followers and relays
/// it to its requester. A small body is read whole (within the upstream's
/// read timeout per frame) and shared; a large one streams to the
/// requester while followers get a plain page with the same status.
pub(super) async fn share_error(
    route: &Route,
    permit: Option<FetchPermit<FillOutcome>>,
    parts: http::response::Parts,
    body: TimeoutBody<OriginBody>,
    why: NotStorable,
    requester: Requester,
) -> FillReply {
    let Some(held) = route.inflight.admit() else {
        // No room to read it: the requester gets it as it streams, the
        // followers a plain page with its status.
        let answer = ErrorAnswer::for_followers(parts.status, &parts.headers, None, requester);
        finish(permit, FillOutcome::Answered(Arc::new(answer)));
        let resp = Response::from_parts(parts, ResponseBody::stream(body));
        return FillReply::Relay(resp, NotStored::Response(why));
    };
    match collect_limited(body, SHARED_ERROR_MAX, held, 0).await {
        Collected::Complete(mut bytes) => {
            let bytes = bytes.shared();
            let answer = ErrorAnswer::for_followers(
                parts.status,
                &parts.headers,
                Some(bytes.clone()),
                requester,
            );
            finish(permit, FillOutcome::Answered(Arc::new(answer)));
            let resp = Response::from_parts(parts, ResponseBody::full(bytes));
            FillReply::Relay(resp, NotStored::Response(why))
        }
        Collected::TooLarge(prefix, rest) => {
            let answer = ErrorAnswer::for_followers(parts.status, &parts.headers, None, requester);
            finish(permit, FillOutcome::Answered(Arc::new(answer)));
            let body = ResponseBody::stream(PrefixedBody::new(prefix, rest));
            FillReply::Relay(Response::from_parts(parts, body), NotStored::Response(why))
        }
        Collected::Failed(e) => {
            let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, e);
            fail(permit, e, None, Some(parts.status.as_u16()))
        }
    }
}
