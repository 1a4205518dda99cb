//! `calmcache demo --fleet`: a local `redis-server` (found on `PATH`, no
//! persistence, on a free loopback port), the bundled slow origin and three
//! calmcache nodes with the demo's config plus `[fleet]`, so one can watch
//! the fleet send the origin one fetch per object per TTL window whichever
//! node the requests reach. Redis is killed when the demo stops (or fails
//! to start).

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{Config, ConfigError, FleetSecret};
use crate::demo::origin::{self, RunningOrigin};
use crate::demo::DemoOptions;
use crate::run::listen::StartError;
use crate::run::server::{start, Running};

/// Nodes in the fleet demo.
pub(crate) const NODES: usize = 3;
/// The Host every node's warm-up uses, and the one to send: the nodes share
/// a key only when the requests name the same host, as behind a load
/// balancer.
const HOST: &str = "demo";
/// How long redis-server gets to answer `PING`.
const REDIS_START_WITHIN: Duration = Duration::from_secs(10);
/// Bytes of redis-server's output kept for an error message.
const REDIS_LOG_KEEP: usize = 8 * 1024;

/// Why the fleet demo could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// No `redis-server` on `PATH`.
    #[error(
        "redis-server not found on PATH: the fleet demo runs a local Redis; \
         install Debian's redis-server package (apt-get install redis-server)"
    )]
    RedisMissing,
    /// `redis-server` did not start or answer.
    #[error("redis-server did not start: {0}")]
    Redis(String),
    /// Ports past 65535 asked for (`--listen` or `--admin` too high).
    #[error("{what}: no {NODES} ports from {first} up")]
    Ports {
        /// `--listen` or `--admin`.
        what: &'static str,
        /// The first address asked for.
        first: SocketAddr,
    },
    /// The embedded config did not validate (a bug).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The origin or a node could not start (a port taken, ...).
    #[error(transparent)]
    Start(#[from] StartError),
}

/// A running fleet demo: Redis, the origin and the nodes.
pub struct FleetDemo {
    redis: RedisServer,
    origin: RunningOrigin,
    nodes: Vec<Running>,
}

impl FleetDemo {
    /// Starts Redis, the origin at `opts.origin` and [`NODES`] nodes: their
    /// proxies on `opts.listen` and the next ports, their admin listeners
    /// on `opts.admin` and the next (skipping ports already used; port 0:
    /// free ports).
    pub async fn start(opts: &DemoOptions) -> Result<FleetDemo, DemoError> {
        let redis = RedisServer::start().await?;
        let origin = origin::start(opts.origin_options()).await?;
        let mut used = vec![origin.addr];
        let listens = node_addrs("--listen", opts.listen, &mut used)?;
        let admins = node_addrs("--admin", opts.admin, &mut used)?;
        let mut nodes = Vec::with_capacity(NODES);
        let secret = demo_secret();
        for (listen, admin) in listens.into_iter().zip(admins) {
            let config = node_config(listen, admin, origin.addr, &redis.url(), &secret)?;
            match start(&config).await {
                Ok(node) => nodes.push(node),
                Err(e) => {
                    origin.stop();
                    for node in nodes {
                        node.shutdown(Duration::ZERO).await;
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(FleetDemo {
            redis,
            origin,
            nodes,
        })
    }

    /// The nodes' proxy addresses (real ports).
    pub fn proxies(&self) -> Vec<SocketAddr> {
        self.nodes
            .iter()
            .filter_map(|n| n.proxy_addrs.first().copied())
            .collect()
    }

    /// What the demo prints; the first line is the first node's URL.
    pub fn banner(&self) -> String {
        let admins: Vec<SocketAddr> = self.nodes.iter().filter_map(|n| n.admin_addr).collect();
        banner(
            &self.proxies(),
            &admins,
            self.origin.addr,
            &self.redis.url(),
        )
    }

    /// Stops the nodes (requests in flight get `grace`), the origin, then
    /// Redis.
    pub async fn stop(self, grace: Duration) {
        let FleetDemo {
            mut redis,
            origin,
            nodes,
        } = self;
        origin.stop();
        for node in nodes {
            node.shutdown(grace).await;
        }
        redis.kill();
    }
}

/// [`NODES`] addresses from `first` up, skipping those in `used` (which
/// gets them); port 0 stays 0 (a free port each).
fn node_addrs(
    what: &'static str,
    first: SocketAddr,
    used: &mut Vec<SocketAddr>,
) -> Result<Vec<SocketAddr>, DemoError> {
    if first.port() == 0 {
        return Ok(vec![first; NODES]);
    }
    let mut addrs = Vec::with_capacity(NODES);
    let mut port = first.port();
    while addrs.len() < NODES {
        let addr = SocketAddr::new(first.ip(), port);
        if !used.contains(&addr) {
            addrs.push(addr);
            used.push(addr);
        }
        port = port
            .checked_add(1)
            .ok_or(DemoError::Ports { what, first })?;
    }
    Ok(addrs)
}

/// A fleet secret for one run of the demo (its nodes share it; nothing is
/// written to disk): the demo signs its entries and purges as a real
/// fleet should.
fn demo_secret() -> FleetSecret {
    let current = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect::<String>()
        .into_bytes();
    FleetSecret {
        current,
        also_accepted: None,
    }
}

/// The demo's config for one node, plus the fleet on `redis` (signed with
/// `secret`) and a warm-up on the shared host (so the fleet keeps `/` warm
/// with one fetch per TTL).
fn node_config(
    listen: SocketAddr,
    admin: SocketAddr,
    origin: SocketAddr,
    redis: &str,
    secret: &FleetSecret,
) -> Result<Config, ConfigError> {
    let text = format!(
        "{}warm_host = \"{HOST}\"\n\n\
         # Every node shares the tier, the leases and the purges on Redis.\n\
         [fleet]\nredis = \"{redis}\"\n",
        super::config_text(listen, admin, origin)
    );
    let mut config = Config::from_toml(&text, "<fleet demo config>")?;
    if let Some(fleet) = config.fleet.as_mut() {
        fleet.secret = Some(secret.clone());
    }
    Ok(config)
}

fn banner(
    proxies: &[SocketAddr],
    admins: &[SocketAddr],
    origin: SocketAddr,
    redis: &str,
) -> String {
    let first = proxies.first().map_or_else(String::new, |p| p.to_string());
    let mut out = format!(
        "http://{first}/\n\
         calmcache fleet demo is running: {NODES} nodes share one cache through a local Redis \
         (a 1 s microcache, refresh = \"sus\")\n"
    );
    for (i, (proxy, admin)) in proxies.iter().zip(admins).enumerate() {
        out.push_str(&format!(
            "\x20 node {}: http://{proxy}/   dashboard: http://{admin}/ (Fleet panel; /status, /metrics)\n",
            i + 1
        ));
    }
    let ports: Vec<String> = proxies.iter().map(|p| p.port().to_string()).collect();
    let ip = proxies
        .first()
        .map_or_else(|| "127.0.0.1".to_string(), |p| p.ip().to_string());
    out.push_str(&format!(
        "\x20 redis:  {redis}   (no persistence; stopped with the demo)\n\
         \x20 origin: http://{origin}/   (each page burns ~180 ms of CPU: about 5 pages/s alone)\n\
         try (the same Host on every node, as behind a load balancer: they share one key):\n\
         \x20 for p in {ports}; do curl -s -o /dev/null -D - -H 'Host: {HOST}' http://{ip}:$p/ | grep -i cache-status; done\n\
         \x20 wrk -t2 -c10 -d30s -H 'Host: {HOST}' http://{first}/   (and on the other nodes at once)\n\
         \x20 curl -s http://{origin}/__origin/stats   (origin requests: about one per 1 s window \
         for the whole fleet, not one per node)\n\
         \x20 curl -X PURGE -H 'Host: {HOST}' http://{first}/   (purged on every node and in Redis)\n\
         Ctrl-C stops it, and the Redis it started.",
        ports = ports.join(" "),
    ));
    out
}

/// A `redis-server` child on a free loopback port, killed when dropped.
struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one (a few ports tried: a free port may be taken before
    /// Redis binds it) and waits for its `PONG`.
    async fn start() -> Result<RedisServer, DemoError> {
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port().map_err(|e| DemoError::Redis(e.to_string()))?;
            let log = Arc::new(Mutex::new(String::new()));
            let mut redis = RedisServer {
                port,
                child: Some(spawn_redis(port, &log)?),
            };
            match redis.wait_ready().await {
                Ok(()) => return Ok(redis),
                Err(e) => {
                    redis.kill();
                    let log = log.lock().unwrap_or_else(|p| p.into_inner());
                    last = format!("{e}: {}", log.trim());
                }
            }
        }
        Err(DemoError::Redis(last))
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + REDIS_START_WITHIN;
        while tokio::time::Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("exited with {status}"));
                }
            }
            if ping(self.port).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("no PONG within {REDIS_START_WITHIN:?}"))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// `redis-server` on 127.0.0.1:`port`, no persistence; its output goes to
/// `log` (the first [`REDIS_LOG_KEEP`] bytes, for errors).
fn spawn_redis(port: u16, log: &Arc<Mutex<String>>) -> Result<Child, DemoError> {
    let mut child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--loglevel", "warning"])
        .arg("--dir")
        .arg(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => DemoError::RedisMissing,
            _ => DemoError::Redis(format!("cannot run redis-server: {e}")),
        })?;
    if let Some(out) = child.stdout.take() {
        let log = log.clone();
        // Drained until Redis exits, so a chatty Redis never blocks on a
        // full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                if log.len() < REDIS_LOG_KEEP {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
    }
    Ok(child)
}

/// `PING` answered `+PONG` on 127.0.0.1:`port`.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut conn = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        conn.write_all(b"PING\r\n").await?;
        let mut reply = [0u8; 7];
        conn.read_exact(&mut reply).await?;
        Ok::<bool, std::io::Error>(&reply == b"+PONG\r\n")
    };
    tokio::time::timeout(Duration::from_millis(500), attempt)
        .await
        .is_ok_and(|r| r.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)
    }

    #[test]
    fn nodes_take_the_next_ports_skipping_those_in_use() {
        let mut used = vec![addr(8081)];
        let listens = node_addrs("--listen", addr(8080), &mut used).expect("ports");
        assert_eq!(listens, vec![addr(8080), addr(8082), addr(8083)]);
        let admins = node_addrs("--admin", addr(8083), &mut used).expect("ports");
        assert_eq!(admins, vec![addr(8084), addr(8085), addr(8086)]);
        let free = node_addrs("--listen", addr(0), &mut used).expect("ports");
        assert_eq!(free, vec![addr(0); NODES]);
        assert!(node_addrs("--admin", addr(65535), &mut used).is_err());
    }

    #[test]
    fn every_node_has_the_fleet_and_warms_the_shared_host() {
        let secret = demo_secret();
        let config = node_config(
            addr(8080),
            addr(9090),
            addr(8081),
            "redis://127.0.0.1:7000",
            &secret,
        )
        .expect("a valid config");
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
        let fleet = config.fleet.expect("[fleet]");
        assert_eq!(fleet.secret, Some(secret), "signed");
        assert_eq!(fleet.nodes, vec!["redis://127.0.0.1:7000".to_string()]);
        assert_eq!(config.routes[0].warm.host.as_deref(), Some(HOST));
        assert_eq!(config.routes[0].warm.paths, vec!["/".to_string()]);
    }
}
