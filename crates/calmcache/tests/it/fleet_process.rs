//! A fleet node as a process of the real binary (`calmcache serve`), on
//! fixed loopback ports so that it can be killed, stopped and started
//! again on them, and the waits on in-test peers that find its lease. Used
//! by `fleet_handover` and `fleet_midstream`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use calmcache_testkit::client::request;
use calmcache_testkit::{Proxy, Wires};
use http::Method;

use crate::fleet_harness::{fleet_status, TOKEN};
use crate::{free_port, signal, wait_listening, wait_until, Child};

/// A node as a process of the real binary on fixed loopback ports, its
/// config kept in a file so that it can be started again on them.
pub struct ProcessNode {
    child: Option<Child>,
    pub port: u16,
    pub admin: u16,
    config: PathBuf,
}

/// Writes `proxy`'s config to `config` with its listener and admin
/// listener on two free ports, for a process of the real binary to start
/// on (again, after a kill); (proxy port, admin port).
pub fn write_on_free_ports(proxy: &Proxy, config: &Path) -> (u16, u16) {
    let (port, admin) = (free_port(), free_port());
    let text = proxy
        .toml()
        .replacen("127.0.0.1:0", &format!("127.0.0.1:{port}"), 1)
        .replacen("127.0.0.1:0", &format!("127.0.0.1:{admin}"), 1);
    std::fs::write(config, text).unwrap();
    (port, admin)
}

impl ProcessNode {
    /// `proxy`'s config on two free ports, written to `config`, started.
    pub async fn start(proxy: &Proxy, config: &Path) -> ProcessNode {
        let (port, admin) = write_on_free_ports(proxy, config);
        let mut node = ProcessNode {
            child: None,
            port,
            admin,
            config: config.to_owned(),
        };
        node.start_again().await;
        node
    }

    /// Starts the process (again) on its ports; returns once it listens.
    pub async fn start_again(&mut self) {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_calmcache"))
            .args(["serve", "--config", self.config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(Child(child));
        wait_listening(self.port).await;
        wait_listening(self.admin).await;
    }

    pub fn child(&self) -> &Child {
        self.child.as_ref().expect("the node runs")
    }

    /// SIGTERM, then waits (at most `limit`) for the process to end.
    pub async fn terminate(&mut self, limit: Duration) {
        signal(self.child(), "-TERM");
        self.ended(limit).await;
    }

    /// Waits (at most `limit`) for the process to end (after a signal).
    pub async fn ended(&mut self, limit: Duration) {
        let mut child = self.child.take().expect("the node runs");
        let what = format!("the node on {} ended", self.port);
        wait_until(limit, &what, async || {
            matches!(child.0.try_wait(), Ok(Some(_)))
        })
        .await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub async fn fleet(&self) -> serde_json::Value {
        let url = format!("http://127.0.0.1:{}/status", self.admin);
        let auth = format!("Bearer {TOKEN}");
        let r = request(Method::GET, &url, &[("authorization", &auth)]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["fleet"].clone()
    }

    /// Waits until its breaker is closed and Redis has answered it: it
    /// shares with the fleet (a load balancer's readiness check).
    pub async fn wait_on_redis(&self) {
        let what = format!("the node on {} uses redis", self.port);
        wait_until(Duration::from_secs(15), &what, async || {
            let f = self.fleet().await;
            f["breaker"] == "closed" && f["calls_ok"].as_u64() > Some(0)
        })
        .await;
    }
}

/// Waits until every peer has found the holder's lease and waits for it.
pub async fn peers_waiting(peers: &[Arc<Wires>]) {
    wait_until(Duration::from_secs(10), "every peer waits", async || {
        let mut all = true;
        for peer in peers {
            all &= fleet_status(peer).await["leases_held"].as_u64() > Some(0);
        }
        all
    })
    .await;
}

/// `field` of every peer's fleet block, summed.
pub async fn peers_total(peers: &[Arc<Wires>], field: &str) -> u64 {
    let mut sum = 0;
    for peer in peers {
        sum += fleet_status(peer).await[field].as_u64().unwrap_or(0);
    }
    sum
}
