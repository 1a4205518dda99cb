//! `server.proxy_protocol_listeners` and `server.proxy_protocol_from` ->
//! [`ProxyProtocolConfig`]: each listener one of the server's, each source
//! a network, and neither list without the other.

use std::net::SocketAddr;

use super::Checker;
use crate::config::error::Problem;
use crate::config::proxy_protocol::ProxyProtocolConfig;

impl Checker {
    /// The PROXY protocol keys of `[server]`, checked against its `listen`
    /// and `tls_listen` addresses.
    pub(super) fn proxy_protocol(
        &mut self,
        (listeners, from): (Option<Vec<String>>, Option<Vec<String>>),
        listen: &[SocketAddr],
        tls_listen: &[SocketAddr],
    ) -> ProxyProtocolConfig {
        let (listeners, from) = (listeners.unwrap_or_default(), from.unwrap_or_default());
        // Judged on what was written: a listener refused on its own is
        // not also reported as missing.
        let written = (listeners.is_empty(), from.is_empty());
        let listeners = self.proxy_protocol_listeners(listeners, listen, tls_listen);
        let from = self.networks("server.proxy_protocol_from", &from);
        match written {
            (false, true) => {
                let problem = Problem::new(
                    "server.proxy_protocol_from",
                    "empty while server.proxy_protocol_listeners is set: no source may send \
                     the PROXY header, so every connection to those listeners would be closed",
                );
                self.report(problem.hint(
                    r#"list your load balancers, e.g. proxy_protocol_from = ["10.0.0.0/8"] ("0.0.0.0/0" and "::/0" for anyone)"#,
                ));
            }
            (true, false) => {
                let problem = Problem::new(
                    "server.proxy_protocol_listeners",
                    "empty while server.proxy_protocol_from is set: no listener expects the PROXY protocol",
                );
                self.report(problem.hint(
                    r#"name the listeners behind the load balancer, e.g. proxy_protocol_listeners = ["0.0.0.0:443"]"#,
                ));
            }
            _ => {}
        }
        ProxyProtocolConfig { listeners, from }
    }

    /// Each entry an address as written in `listen` or `tls_listen`.
    fn proxy_protocol_listeners(
        &mut self,
        raw: Vec<String>,
        listen: &[SocketAddr],
        tls_listen: &[SocketAddr],
    ) -> Vec<SocketAddr> {
        let mut out = Vec::with_capacity(raw.len());
        for (i, text) in raw.iter().enumerate() {
            let path = format!("server.proxy_protocol_listeners[{i}]");
            let Some(addr) = self.socket_addr(&path, text.trim()) else {
                continue;
            };
            if !listen.contains(&addr) && !tls_listen.contains(&addr) {
                let known: Vec<String> = listen
                    .iter()
                    .chain(tls_listen)
                    .map(|a| format!("\"{a}\""))
                    .collect();
                let problem = Problem::new(
                    path,
                    format!("\"{addr}\" is neither in server.listen nor in server.tls_listen"),
                );
                self.report(problem.hint(format!("listeners: {}", known.join(", "))));
                continue;
            }
            out.push(addr);
        }
        out
    }
}
