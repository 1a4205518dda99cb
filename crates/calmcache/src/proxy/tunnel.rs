//! WebSocket tunnels: an `Upgrade: websocket` request handed to the upstream
//! with its handshake headers and, after `101 Switching Protocols`, bytes
//! copied both ways until either side closes.
//!
//! ```text
//! proxy::answer ─ Connection: upgrade + Upgrade: websocket, route.websocket ─> open
//!   Upstream::send_upgrade (exactly Connection: upgrade + Upgrade: websocket,
//!   the end-to-end Sec-WebSocket-* fields, X-Forwarded-*; a connection of
//!   its own, never the pool's)
//!   ├─ error ──── 502/504 as for any request
//!   ├─ not 101 ── relayed as it came (status, headers, body)
//!   ├─ 101 that is not this handshake's (Upgrade other than websocket, no
//!   │   Connection: upgrade, Sec-WebSocket-Accept not the client key's) ── 502
//!   └─ 101 ────── the 101 with the upstream's headers to the client, and a
//!                 net::tunnel::Tunnel (the client's hyper::upgrade::on, the
//!                 upstream's stream upstream::Switched, the limits) handed
//!                 to the HTTP/1.1 connection's TunnelSlot: its own task
//!                 pumps both directions once hyper lets the connection go
//!                 (HTTP/2, h2c-detect: a task of its own); idle = no byte
//!                 either way for the upstream's read_timeout (as NGINX's
//!                 proxy_read_timeout), each write bounded by send_timeout
//! ```
//!
//! The pump (net/tunnel.rs) drives the connections directly (`conn::Clocked`
//! over the client's TCP or TLS stream, the upstream's stream), not through
//! hyper's boxed `Upgraded`, its adapters and a lock per half; reads go
//! through a stack scratch buffer, so an idle tunnel holds no buffer.
//!
//! The client side's writes also run under the connection's `[server]
//! send_timeout` (the pump writes through `conn::Clocked`): a client that
//! stops reading is cut by whichever limit comes first.
//!
//! Over HTTP/2 (RFC 8441, extended CONNECT; the listeners' SETTINGS enable
//! it, net/conn.rs) the handshake is a `CONNECT` with `:protocol =
//! websocket` ([`Handshake::Connect`], found by the edge): the upstream gets
//! the HTTP/1.1 handshake ([`Asked::of`]: a `GET`, a key of calmcache's,
//! the client's `Sec-WebSocket-Version`/`-Protocol`/`-Extensions`), and the
//! client a `200` on its stream for the upstream's 101 (RFC 8441 §5: no
//! `Sec-WebSocket-Accept`). The stream is hyper's `Upgraded` (its own
//! flow control per stream: a stalled tunnel holds only its window), pumped
//! as any other. An upstream that does not switch is relayed as on
//! HTTP/1.1, except a 2xx, which would open the stream: 502.
//!
//! A tunnel never looks up, stores or joins a flight: nothing of it is
//! cached. As in NGINX, an end of stream from either side ends the tunnel:
//! what was read before it is written on, the other side gets a FIN, and
//! both connections close (a WebSocket peer closes TCP only after the close
//! handshake, so the handshake runs end to end first).
//! Tunnels are counted in `Metrics::websockets_*` while open, and each
//! worker's [`Tunnels`](crate::net::shutdown::Tunnels) closes its own when the worker stops (after its
//! connections have drained), so a tunnel never holds up a shutdown.

use calmcache_core::CacheStatus;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::http::body::{ResponseBody, TimeoutBody};
use crate::http::error::{ErrorKind, ProxyError};
use crate::http::headers::{add_forwarded, has_token, set_cache_status, strip_hop_by_hop};
use crate::net::conn::TunnelSlot;
use crate::net::tunnel::{Limits, Open, Tunnel};
use crate::proxy::answer::Answer;
use crate::proxy::edge::Handshake;
use crate::proxy::respond::error_response;
use crate::proxy::state::{Route, Worker};

/// The GUID of RFC 6455 §1.3, hashed with the client's key into the accept value.
const WEBSOCKET_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The `Sec-WebSocket-Accept` a server must answer `key` with (RFC 6455 §4.2.2).
pub fn accept_for(key: &[u8]) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    let mut sha = sha1::Sha1::new();
    sha.update(key);
    sha.update(WEBSOCKET_GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Marks a message as a WebSocket handshake: exactly `Upgrade: websocket`
/// and `Connection: upgrade`, whatever else the client's lists held (the
/// edge has already removed every hop-by-hop field).
fn set_upgrade(headers: &mut HeaderMap) {
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// Why an upstream's 101 is not a WebSocket handshake we may tunnel, or
/// `None` when it is: it must upgrade to `websocket` and prove it read
/// this client's key (RFC 6455 §4.1, the client's checks).
fn bad_switch(headers: &HeaderMap, key: &HeaderValue) -> Option<&'static str> {
    if !has_token(headers, &header::UPGRADE, "websocket") {
        return Some("a 101 without Upgrade: websocket");
    }
    if !has_token(headers, &header::CONNECTION, "upgrade") {
        return Some("a 101 without Connection: upgrade");
    }
    let accept = headers.get_all(header::SEC_WEBSOCKET_ACCEPT);
    let mut values = accept.iter();
    match (values.next(), values.next()) {
        (Some(got), None) if got.as_bytes() == accept_for(key.as_bytes()).as_bytes() => None,
        _ => Some("a 101 with a wrong Sec-WebSocket-Accept"),
    }
}

/// The client's side of a handshake: what it asked in, and the key the
/// upstream's `Sec-WebSocket-Accept` must answer.
struct Asked {
    handshake: Handshake,
    key: HeaderValue,
}

impl Asked {
    /// Rewrites `parts` into the HTTP/1.1 handshake the upstream gets, or
    /// says why the client's handshake is refused (400).
    ///
    /// RFC 8441 §5: an HTTP/2 `CONNECT` with `:protocol = websocket` becomes
    /// a `GET` with `Upgrade: websocket`; it carries no `Sec-WebSocket-Key`
    /// (the `:protocol` replaced it), so calmcache makes one, and checks the
    /// upstream's Accept against it. `Sec-WebSocket-Version`, `-Protocol`
    /// and `-Extensions` go end to end, as on HTTP/1.1 (RFC 6455 §4.1 makes
    /// the version required).
    fn of(parts: &mut http::request::Parts, handshake: Handshake) -> Result<Asked, &'static str> {
        if handshake != Handshake::Connect {
            let key = parts.headers.get(header::SEC_WEBSOCKET_KEY).cloned();
            let key = key.ok_or("no Sec-WebSocket-Key")?;
            return Ok(Asked { handshake, key });
        }
        if !parts.headers.contains_key(header::SEC_WEBSOCKET_VERSION) {
            return Err("no Sec-WebSocket-Version");
        }
        parts.method = Method::GET;
        parts.extensions.remove::<hyper::ext::Protocol>();
        crate::proxy::edge::ensure_host(&mut parts.headers, &parts.uri);
        let key = new_key();
        parts.headers.insert(header::SEC_WEBSOCKET_KEY, key.clone());
        Ok(Asked { handshake, key })
    }
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (RFC 6455 §4.1).
fn new_key() -> HeaderValue {
    use base64::Engine as _;
    let nonce: [u8; 16] = rand::random();
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    // Invariant: base64 is visible ASCII.
    HeaderValue::from_str(&key).unwrap_or(HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="))
}

/// Sends the handshake to the upstream and answers the client: the 101 (or,
/// to an HTTP/2 client, the 200 that opens its stream; the tunnel then runs
/// in a task of its own) or whatever else came.
pub(crate) async fn open<'r>(
    worker: &Worker,
    route: &'r Route,
    mut req: Request<Incoming>,
    (client, handshake): (crate::net::conn::Peer, Handshake),
    held: crate::proxy::limit::Held,
) -> Answer<'r> {
    let report = CacheStatus::Bypass.report();
    let upstream = &route.upstream;
    let client_side = hyper::upgrade::on(&mut req);
    let slot = req.extensions_mut().remove::<TunnelSlot>();
    let (mut parts, body) = req.into_parts();
    let asked = match Asked::of(&mut parts, handshake) {
        Ok(asked) => asked,
        Err(why) => {
            let e = ProxyError::downstream(ErrorKind::BadRequest, why);
            return Answer::answered(route, &report, error_response(&e, &report));
        }
    };
    set_upgrade(&mut parts.headers);
    add_forwarded(&mut parts.headers, client.addr.ip(), client.scheme());
    let (method, uri) = (&parts.method, &parts.uri);
    crate::proxy::header_rules::to_upstream(route, method, uri, &mut parts.headers, client);
    let body = TimeoutBody::new(body, upstream.send_timeout)
        .map_err(Into::into)
        .boxed();
    let sent = upstream
        .send_upgrade(Request::from_parts(parts, body))
        .await;
    route.activity.upstream_call(&sent);
    let (resp, switched) = match sent {
        Ok(sent) => sent,
        Err(e) => {
            if !e.repeats() {
                // Per request: a dead upstream must not flood the log.
                static FAILED: calmcache_core::warn_limit::WarnLimit =
                    calmcache_core::warn_limit::WarnLimit::new();
                calmcache_core::warn_limited!(FAILED, "websocket handshake failed",
                    upstream = %upstream.name, error = %e);
            }
            return crate::proxy::respond::failed(route, &e, report);
        }
    };
    let report = report.fwd_status(resp.status().as_u16());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return not_switched(route, &asked, resp, report);
    }
    if let Some(why) = bad_switch(resp.headers(), &asked.key) {
        // Dropping `resp` closes the upstream connection: it was switched.
        return broken(route, why);
    }
    let Some(upstream_side) = switched else {
        // send_upgrade gives every 101 its connection: not reached.
        return broken(route, "a 101 without its connection");
    };
    let (mut parts, _empty) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    switched_head(&mut parts, asked.handshake);
    let sides = (client_side, upstream_side);
    start_pump(worker, upstream, sides, held, slot);
    Answer::answered(
        route,
        &report,
        Response::from_parts(parts, ResponseBody::empty()),
    )
}

/// Starts the pump of an opened tunnel: in the HTTP/1.1 connection's own
/// task when it left a slot (net/tunnel.rs), else in a task of its own
/// (HTTP/2 streams, an h2c-detecting listener's connections).
fn start_pump(
    worker: &Worker,
    upstream: &crate::net::upstream::Upstream,
    (client_side, upstream_side): (hyper::upgrade::OnUpgrade, crate::net::upstream::Switched),
    held: crate::proxy::limit::Held,
    slot: Option<TunnelSlot>,
) {
    let limits = Limits {
        idle: upstream.read_timeout,
        write: upstream.send_timeout,
    };
    // The tunnel's connections places (limits) are left when it ends.
    let open = Open::new(worker.proxy.metrics.tunnel(), held.boxed());
    let stop = worker.tunnels.enter();
    let tunnel = Tunnel::new(
        client_side,
        upstream_side,
        limits,
        stop,
        (open, upstream.name.clone()),
    );
    match slot {
        // An HTTP/1.1 connection's own task pumps it (net/tunnel.rs).
        Some(slot) => slot.hand(tunnel),
        None => {
            tokio::spawn(tunnel.run());
        }
    }
}

/// The head the client gets for the upstream's 101 (its hop-by-hop fields
/// gone). HTTP/1.1: the 101 with exactly `Upgrade: websocket`,
/// `Connection: upgrade`. HTTP/2 (RFC 8441 §5): a 200 opens the stream,
/// and `Sec-WebSocket-Accept` is not used (the key was calmcache's).
fn switched_head(parts: &mut http::response::Parts, handshake: Handshake) {
    if handshake == Handshake::Connect {
        parts.status = StatusCode::OK;
        parts.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
    } else {
        set_upgrade(&mut parts.headers);
    }
}

/// An upstream that did not switch: its answer passed back as it came
/// (status, headers, body), except that an HTTP/2 client never gets a 2xx
/// for it: RFC 9113 §8.5, a 2xx to a CONNECT opens the stream as a tunnel,
/// and this upstream has not opened one (502).
fn not_switched<'r>(
    route: &'r Route,
    asked: &Asked,
    resp: Response<crate::net::origin_body::OriginBody>,
    report: calmcache_core::Report,
) -> Answer<'r> {
    if asked.handshake == Handshake::Connect && resp.status().is_success() {
        return broken(route, "a 2xx instead of 101 to a websocket handshake");
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    route.strip_targeted(&mut parts.headers);
    set_cache_status(&mut parts.headers, &report, None);
    let read_timeout = route.upstream.read_timeout;
    let body = ResponseBody::stream(TimeoutBody::new(body, read_timeout));
    Answer::answered(route, &report, Response::from_parts(parts, body))
}

/// A 502 for an upstream answer that is not a handshake we may tunnel.
fn broken<'r>(route: &'r Route, why: &'static str) -> Answer<'r> {
    route.activity.upstream_errors.inc();
    static REFUSED: calmcache_core::warn_limit::WarnLimit =
        calmcache_core::warn_limit::WarnLimit::new();
    calmcache_core::warn_limited!(REFUSED, "websocket handshake refused",
        upstream = %route.upstream.name, why);
    let report = CacheStatus::Bypass.report();
    let e = ProxyError::upstream(ErrorKind::Broken, &route.upstream.name, why);
    Answer::answered(route, &report, error_response(&e, &report))
}

#[cfg(test)]
#[path = "tunnel_tests.rs"]
mod tests;
