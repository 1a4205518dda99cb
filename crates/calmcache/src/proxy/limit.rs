//! The request path's limit step: a route's `limits` (net/limit/ keeps the
//! tables) applied to the client a request comes from, before anything
//! reaches the origin.
//!
//! Two gates, each a small step of handle.rs: [`admit`] right after the
//! route is found (limits with `applies_to = "all"`, NGINX's meaning), and
//! [`to_origin`] where the request really goes to the origin (a pass, a
//! bypass, a tunnel, a fetch as its flight's leader through [`ToOrigin`];
//! `applies_to = "origin"`), so an answer from the cache, or from another
//! request's fetch, is never limited. A refusal never touches the origin:
//! the limit's status with `Retry-After`, marked as calmcache's own so the
//! route's error pages apply; a refusal by the origin gate gives back what
//! the `all` gate took. A request within a burst waits here, in its
//! own future, until the rate lets it through. A connections limit's place
//! is held until the answer's body ends ([`Held::attach`]).
//!
//! Must not decide what a request is (edge.rs) nor count answers (handle's
//! `record` does, from [`Told::Limited`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::http::body::{BoxError, ResponseBody};
use crate::net::conn::Peer;
use crate::net::limit::{ClientKey, Entered, Limit, Verdict};
use crate::proxy::answer::{Answer, Told};
use crate::proxy::state::Route;

/// What a request holds of its limits until its answer ends, and whether
/// its origin gate was passed (a request passes it once, whichever step of
/// the path finds it origin-bound first).
#[derive(Default)]
pub(crate) struct Held {
    entered: Vec<Entered>,
    origin: Gate,
}

/// Whether a request went through its route's origin limits yet.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Gate {
    #[default]
    Ahead,
    Passed,
}

impl Held {
    /// `answer`, its body holding what was taken until it ends.
    pub(crate) fn answer(self, answer: Answer<'_>) -> Answer<'_> {
        Answer {
            resp: self.attach(answer.resp),
            ..answer
        }
    }

    /// The places held, for a WebSocket tunnel to keep until it ends
    /// (net/tunnel.rs); `None`, without an allocation, when nothing is.
    pub(crate) fn boxed(self) -> Option<Box<dyn Send>> {
        if self.entered.is_empty() {
            return None;
        }
        Some(Box::new(self.entered))
    }

    /// `resp` with the places held moved into its body, left when the body
    /// ends or is dropped; `resp` as it was when nothing is held.
    pub(crate) fn attach(self, resp: Response<ResponseBody>) -> Response<ResponseBody> {
        if self.entered.is_empty() {
            return resp;
        }
        resp.map(|body| {
            ResponseBody::stream(HeldBody {
                body,
                _held: self.entered,
            })
        })
    }

    /// Gives back what the `all` gate took, for a request a later gate
    /// refused: NGINX accounts a request in its limit_req zones only when
    /// all of them let it through (ngx_http_limit_req_account), and a
    /// refused request is not in progress.
    fn give_back(&mut self, route: &Route, key: ClientKey) {
        route.limits.all.iter().for_each(|l| l.give_back(key));
        self.entered.clear();
    }
}

/// The route's `applies_to = "all"` limits, for a request just routed.
pub(crate) async fn admit<'w, B>(
    route: &'w Route,
    req: &Request<B>,
    client: Peer,
    held: &mut Held,
) -> Result<(), Answer<'w>> {
    if route.limits.all.is_empty() {
        return Ok(());
    }
    let key = client_key(route, req, client);
    Box::pin(apply(route, &route.limits.all, key, held)).await
}

/// The route's `applies_to = "origin"` limits, for a request about to go to
/// the origin (once per request). A refusal gives back what the `all`
/// gate took ([`Held::give_back`]).
pub(crate) async fn to_origin<'w, B>(
    route: &'w Route,
    req: &Request<B>,
    client: Peer,
    held: &mut Held,
) -> Result<(), Answer<'w>> {
    if route.limits.origin.is_empty() || held.origin == Gate::Passed {
        return Ok(());
    }
    held.origin = Gate::Passed;
    let key = client_key(route, req, client);
    // Boxed whole: the request's future (handle.rs) holds only a pointer.
    Box::pin(async move {
        let passed = apply(route, &route.limits.origin, key, held).await;
        if passed.is_err() {
            held.give_back(route, key);
        }
        passed
    })
    .await
}

/// A request's way through its route's origin limits, handed to the step
/// that learns whether it really goes to the origin: a fetch passes it
/// only as the flight's leader (or alone), never as a follower that the
/// leader's answer serves (fetch.rs).
pub(crate) struct ToOrigin<'q, 'w, B> {
    pub(crate) route: &'w Route,
    pub(crate) req: &'q Request<B>,
    pub(crate) client: Peer,
    pub(crate) held: &'q mut Held,
}

impl<'w, B> ToOrigin<'_, 'w, B> {
    /// [`to_origin`] for this request.
    pub(crate) async fn pass(&mut self) -> Result<(), Answer<'w>> {
        to_origin(self.route, self.req, self.client, self.held).await
    }
}

/// The client `req` is limited as: the address behind the route's
/// trusted proxies (edge.rs).
fn client_key<B>(route: &Route, req: &Request<B>, client: Peer) -> ClientKey {
    ClientKey::of(crate::proxy::edge::client_ip(
        &route.cfg,
        req.headers(),
        client.addr.ip(),
    ))
}

/// `limits` in order for `key`: a refusal answers at once (and gives back
/// what the limits before it took); a wait sleeps here; a connections
/// place is kept in `held`.
async fn apply<'w>(
    route: &'w Route,
    limits: &[Arc<Limit>],
    key: ClientKey,
    held: &mut Held,
) -> Result<(), Answer<'w>> {
    for (at, limit) in limits.iter().enumerate() {
        let room_in = match limit.take(key, Instant::now()) {
            Verdict::Go => None,
            Verdict::Wait(delay) => {
                limit.stats.delayed.inc();
                tokio::time::sleep(delay).await;
                None
            }
            Verdict::Refuse(room_in) => Some(room_in),
        };
        let room_in = room_in.or_else(|| match limit.enter(key) {
            Some(entered) if entered.holds() => {
                held.entered.push(entered);
                None
            }
            Some(_) => None,
            None => Some(std::time::Duration::from_secs(1)),
        });
        if let Some(room_in) = room_in {
            // A refused request is in progress nowhere (to_origin gives
            // back the `all` gate's tokens too).
            limits[..at].iter().for_each(|before| before.give_back(key));
            held.entered.clear();
            return Err(refusal(route, limit, room_in));
        }
    }
    Ok(())
}

/// The limit's status with `Retry-After` (RFC 9110 §10.2.3: whole seconds,
/// at least 1), counted by the limit here and by the route where it leaves.
fn refusal<'w>(route: &'w Route, limit: &Limit, room_in: std::time::Duration) -> Answer<'w> {
    limit.stats.rejected.inc();
    let status = StatusCode::from_u16(limit.cfg.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut resp = crate::http::reply::plain(status, "too many requests\n".to_owned());
    let secs = room_in.as_secs() + u64::from(room_in.subsec_nanos() > 0);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    // calmcache's own answer: the route's `error_pages` may replace it.
    resp.extensions_mut().insert(crate::http::error::Made);
    Answer {
        resp,
        told: Told::Limited(&route.activity),
        placed: None,
    }
}

/// A response body that keeps its request's connection places until it
/// ends or is dropped. It hands on each frame of the body it wraps as that
/// body makes it, so a paged hit still offers its pages for the zero-copy
/// send (http/paged.rs: the offer is made in `ResponseBody::poll_frame`,
/// on the thread that writes it; tests/it/zero_copy.rs checks the splice
/// with a connections limit on the route).
struct HeldBody {
    body: ResponseBody,
    _held: Vec<Entered>,
}

impl Body for HeldBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::net::IpAddr;
    use std::sync::Arc;

    use http::{HeaderMap, HeaderValue, Response};

    use super::Held;
    use crate::config::Config;
    use crate::http::body::ResponseBody;
    use crate::proxy::edge::client_ip;
    use crate::proxy::state::{Proxy, Route};

    fn route(trusted: &str) -> Arc<Route> {
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.app]\nservers = [\"127.0.0.1:9\"]\n\
             [[routes]]\nupstream = \"app\"\ntrusted_proxies = [{trusted}]\n"
        );
        let config = Config::from_toml(&text, "t").unwrap();
        let proxy = Proxy::new(&config, None, &mut Vec::new()).unwrap();
        proxy.routes[0].clone()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    #[test]
    fn the_client_is_the_first_untrusted_address_from_the_right() {
        let route = route("\"10.0.0.0/8\", \"127.0.0.1\"");
        let proxy = ip("10.1.1.1");
        let cases: [(&[&str], &str); 8] = [
            (&[], "10.1.1.1"),
            (&["192.0.2.7"], "192.0.2.7"),
            (&["6.6.6.6, 192.0.2.7"], "192.0.2.7"),
            (&["192.0.2.7, 10.2.2.2"], "192.0.2.7"),
            (&["192.0.2.7", "10.2.2.2, 127.0.0.1"], "192.0.2.7"),
            (&["10.3.3.3, 10.2.2.2"], "10.3.3.3"),
            (&["6.6.6.6, garbage, 10.2.2.2"], "10.2.2.2"),
            (&["2001:db8::1"], "2001:db8::1"),
        ];
        for (values, want) in cases {
            let got = client_ip(&route.cfg, &xff(values), proxy);
            assert_eq!(got, ip(want), "{values:?}");
        }
        // From an untrusted peer, X-Forwarded-For is the client's own claim.
        let peer = ip("192.0.2.99");
        assert_eq!(client_ip(&route.cfg, &xff(&["192.0.2.7"]), peer), peer);
        // A route that trusts nobody.
        let none = route_without_trust();
        assert_eq!(client_ip(&none.cfg, &xff(&["192.0.2.7"]), proxy), proxy);
    }

    fn route_without_trust() -> Arc<Route> {
        route("")
    }

    #[test]
    fn nothing_held_leaves_the_answer_as_it_was() {
        let resp = Response::new(ResponseBody::full("x"));
        let resp = Held::default().attach(resp);
        assert!(matches!(resp.body(), ResponseBody::Full(Some(_))));
    }
}
