//! `listen ... proxy_protocol`, `set_real_ip_from` and `real_ip_header`:
//! the PROXY protocol on listeners (`server.proxy_protocol_listeners`,
//! `server.proxy_protocol_from`).
//!
//! NGINX reads the header on every `listen ... proxy_protocol` from anyone,
//! and makes its address `$remote_addr` only with `real_ip_header
//! proxy_protocol` for the sources in `set_real_ip_from`. calmcache takes
//! the header only from `proxy_protocol_from` and always makes its address
//! the client: the balancers of `set_real_ip_from` become
//! `proxy_protocol_from`, and where NGINX's meaning differs a comment says
//! how; its comments go on `[server]` (written after the top ones).
//! Must not: write routes (a route's `trusted_proxies` is theirs).

use super::*;

/// What the config said about the PROXY protocol and the real client.
#[derive(Default)]
pub(super) struct RealIp {
    /// Addresses (as calmcache writes them) of `listen ... proxy_protocol`.
    listeners: Vec<String>,
    /// `set_real_ip_from` directives.
    from: Vec<Directive>,
    /// `real_ip_header` directives.
    header: Vec<Directive>,
    /// `real_ip_recursive` directives.
    recursive: Vec<Directive>,
}

impl RealIp {
    /// A `listen ... proxy_protocol` on `address`.
    pub(super) fn listener(&mut self, address: &str) {
        if !self.listeners.iter().any(|a| a == address) {
            self.listeners.push(address.to_owned());
        }
    }

    /// `set_real_ip_from`, `real_ip_header` or `real_ip_recursive`
    /// (anywhere: NGINX takes them in http, server and location).
    pub(super) fn directive(&mut self, d: &Directive) {
        match d.name.as_str() {
            "set_real_ip_from" => self.from.push(d.clone()),
            "real_ip_header" => self.header.push(d.clone()),
            _ => self.recursive.push(d.clone()),
        }
    }

    /// Whether a `real_ip_header proxy_protocol` was seen.
    fn header_names_client(&self) -> bool {
        self.header
            .iter()
            .any(|d| d.args.first().map(String::as_str) == Some("proxy_protocol"))
    }
}

impl Converter<'_> {
    /// Writes the PROXY protocol keys of `[server]` (called once the
    /// listen addresses are known) and comments what does not carry over.
    pub(super) fn finish_real_ip(&mut self) {
        let real = std::mem::take(&mut self.real_ip);
        let by_header = real.header_names_client();
        for d in &real.recursive {
            self.server.note(note_skipped(
                d,
                "calmcache's trusted_proxies walk X-Forwarded-For past every trusted address (always recursive)",
            ));
        }
        // Only addresses calmcache listens on (a TLS one without a
        // certificate is not carried over).
        let known = self.listened();
        let listeners: Vec<Value> = (real.listeners.iter().cloned().map(Value::Str))
            .filter(|a| known.contains(a))
            .collect();
        if listeners.is_empty() {
            let why =
                "no `listen ... proxy_protocol` carried over; for X-Forwarded-For from a proxy \
                       in front, list its addresses in the routes' trusted_proxies";
            for d in real.from.iter().chain(&real.header) {
                self.server.note(note_skipped(d, why));
            }
            return;
        }
        let mut from = Vec::new();
        for d in &real.from {
            match d.args.first().map(String::as_str) {
                Some(net)
                    if net.parse::<ipnet::IpNet>().is_ok()
                        || net.parse::<std::net::IpAddr>().is_ok() =>
                {
                    ledger::carried(d);
                    from.push(Value::Str(net.to_owned()));
                }
                _ => self.server.note(note_skipped(
                    d,
                    "calmcache takes addresses and CIDR networks only",
                )),
            }
        }
        for d in &real.header {
            if d.args.first().map(String::as_str) == Some("proxy_protocol") {
                ledger::carried(d);
            } else {
                self.server.note(note_skipped(
                    d,
                    "on a proxy_protocol listener calmcache takes the client from the PROXY header",
                ));
            }
        }
        self.server
            .set("proxy_protocol_listeners", Value::List(listeners))
            .note("From `listen ... proxy_protocol`: every connection there starts with a PROXY header (v1 or v2).");
        let note = match (from.is_empty(), by_header) {
            (false, true) => "From `set_real_ip_from` with `real_ip_header proxy_protocol`: only these may send the header.",
            (false, false) => "From `set_real_ip_from`: only these may send the header. NGINX kept the balancer as \
                               $remote_addr without `real_ip_header proxy_protocol`; calmcache makes the header's \
                               client the client ($remote_addr, limits, X-Forwarded-For).",
            (true, _) => "NGINX took the header from any source (no `set_real_ip_from`): narrow this to your load \
                          balancers. calmcache makes the header's client the client ($remote_addr, limits, \
                          X-Forwarded-For).",
        };
        if from.is_empty() {
            from = vec![Value::Str("0.0.0.0/0".into()), Value::Str("::/0".into())];
        }
        self.server
            .set("proxy_protocol_from", Value::List(from))
            .note(note);
    }

    /// The addresses `[server]` listens on, plain and TLS.
    fn listened(&self) -> Vec<Value> {
        let mut known = Vec::new();
        for key in ["listen", "tls_listen"] {
            if let Some(Value::List(l)) = self.server.get(key) {
                known.extend(l.iter().cloned());
            }
        }
        known
    }
}
