//! systemd readiness (`Type=notify`): the `sd_notify(3)` datagrams.
//!
//! Owns the one conversation with the service manager: `READY=1` once every
//! listener is bound and the disk zones' loaders are started,
//! `RELOADING=1` (with `MONOTONIC_USEC=`) then `READY=1` around a reload,
//! `STOPPING=1` at shutdown, and `STATUS=` lines `systemctl status` shows.
//! The socket is `$NOTIFY_SOCKET`: a path, or `@name` for an abstract one
//! (Linux). Without it every call does nothing; a failed send is logged
//! once and never fatal (the manager is an observer, not a dependency).
//!
//! A small module over std's `UnixDatagram` rather than the `sd-notify`
//! crate: the protocol is one text datagram, std names abstract sockets
//! itself (1.70), rustix (already here) reads the monotonic clock, and the
//! crate's other parts (socket activation, watchdog, fd store) are unused.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};

/// Where the service manager listens, if it does.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    target: Option<Target>,
    /// A failed send was logged already.
    warned: AtomicBool,
}

#[derive(Debug)]
struct Target {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// `$NOTIFY_SOCKET` as given, for the log.
    name: String,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`; none (every call a no-op) when it is unset or
    /// empty, or cannot be used (logged).
    pub(crate) fn from_env() -> Notifier {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(name) if !name.is_empty() => Notifier::to(&name.to_string_lossy()),
            _ => Notifier::default(),
        }
    }

    /// Notifications to `name` (a path, or `@name` for an abstract socket).
    pub(crate) fn to(name: &str) -> Notifier {
        let target = address(name).and_then(|addr| {
            let socket = UnixDatagram::unbound()?;
            Ok(Target {
                socket,
                addr,
                name: name.to_owned(),
            })
        });
        match target {
            Ok(target) => Notifier {
                target: Some(target),
                warned: AtomicBool::new(false),
            },
            Err(error) => {
                tracing::warn!(%error, socket = name, "NOTIFY_SOCKET unusable: no readiness notifications");
                Notifier::default()
            }
        }
    }

    /// Serving: every listener bound, the loaders started.
    pub(crate) fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// A reload begins (systemd 253's `Type=notify-reload` protocol; older
    /// managers take it as a state change and `READY=1` ends it).
    pub(crate) fn reloading(&self) {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let usec = u64::try_from(now.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000)
            .saturating_add(u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000);
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading the config"
        ));
    }

    /// Stopping: requests in flight are finishing.
    pub(crate) fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    fn send(&self, message: &str) {
        let Some(target) = &self.target else {
            return;
        };
        if let Err(error) = target.socket.send_to_addr(message.as_bytes(), &target.addr) {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(%error, socket = %target.name, "cannot notify the service manager");
            }
        }
    }
}

/// `/path` or `@abstract` as a socket address.
fn address(name: &str) -> std::io::Result<SocketAddr> {
    match name.strip_prefix('@') {
        #[cfg(target_os = "linux")]
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name.as_bytes())
        }
        #[cfg(not(target_os = "linux"))]
        Some(_) => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "abstract sockets are Linux only",
        )),
        None => SocketAddr::from_pathname(name),
    }
}

/// A `STATUS=` value: one line (a newline would start another field).
fn one_line(status: &str) -> String {
    status.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn received(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn sends_to_a_path_and_to_an_abstract_name() {
        let dir = std::env::temp_dir().join(format!("calmcache-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let by_path = UnixDatagram::bind(&path).unwrap();
        Notifier::to(path.to_str().unwrap()).ready("serving\non :80");
        assert_eq!(received(&by_path), "READY=1\nSTATUS=serving on :80");
        let name = format!("calmcache-notify-test-{}", std::process::id());
        let by_name = UnixDatagram::bind_addr(&address(&format!("@{name}")).unwrap()).unwrap();
        let notifier = Notifier::to(&format!("@{name}"));
        notifier.reloading();
        let reloading = received(&by_name);
        assert!(
            reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{reloading}"
        );
        notifier.stopping("bye");
        assert_eq!(received(&by_name), "STOPPING=1\nSTATUS=bye");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn nothing_to_send_without_a_socket() {
        // No target: a no-op, and no panic on a socket that is gone.
        Notifier::default().ready("x");
        Notifier::to("/nonexistent/calmcache/notify.sock").stopping("x");
    }
}
