//! A proxy listener's identity: the small number ([`ListenerId`]) a client
//! connection carries in its [`Peer`](crate::net::conn::Peer), so that a
//! route limited to some listeners (`routes.listeners`) is matched by
//! comparing two `u16`s, never an address, on every request.
//!
//! An id stands for a listen address as written in `server.listen` or
//! `server.tls_listen` (port 0 kept as asked). Ids come from one
//! process-wide table that only grows: a reload that reorders, adds or
//! removes listeners gives a kept address the id it had, so a connection
//! accepted before the reload is still routed by the listener it came in
//! on. The table is read when a listener starts and when a generation's
//! routes are built, never per request.
//!
//! Must not: decide which route a listener serves (proxy/state.rs does).

use std::net::SocketAddr;
use std::sync::Mutex;

/// One listen address as configured, interned; see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ListenerId(u16);

/// Every address given an id, at the index of its id (past the reserved ones).
static NAMES: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

impl ListenerId {
    /// A connection not accepted by a proxy listener (the admin listener,
    /// the bundled origin, tests): no route limited to listeners takes it.
    pub(crate) const NONE: ListenerId = ListenerId(u16::MAX);

    /// The id of listen address `addr` as configured: the same for the
    /// same address for the life of the process. Past 65 535 distinct
    /// addresses (never in practice) it is [`ListenerId::NONE`], which
    /// routes limited to listeners never take: refused, not misrouted.
    pub(crate) fn of(addr: SocketAddr) -> ListenerId {
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = names.iter().position(|known| *known == addr) {
            return ListenerId::at(at);
        }
        names.push(addr);
        ListenerId::at(names.len() - 1)
    }

    fn at(index: usize) -> ListenerId {
        match u16::try_from(index) {
            Ok(id) if id != u16::MAX => ListenerId(id),
            _ => ListenerId::NONE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ListenerId;

    #[test]
    fn an_address_keeps_its_id_and_others_get_their_own() {
        let a: std::net::SocketAddr = "127.0.0.1:18080".parse().expect("addr");
        let b: std::net::SocketAddr = "[::1]:18443".parse().expect("addr");
        let first = ListenerId::of(a);
        let other = ListenerId::of(b);
        assert_ne!(first, other);
        assert_eq!(ListenerId::of(a), first, "asked again: the same id");
        assert_ne!(first, ListenerId::NONE);
    }
}
