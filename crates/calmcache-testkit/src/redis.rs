//! Real `redis-server` processes for tests (fleet mode, issue 14): one
//! server, or a Redis Cluster of three masters, each on a free loopback port
//! with no persistence, killed when dropped. A server can be killed (`kill
//! -9`) and started again on the same port, or hung (`SIGSTOP`) and resumed,
//! to test a node's behaviour when its shared tier fails.
//!
//! [`Redis::start_in`] runs one inside a test's network namespace
//! ([`NetNs`]), bound to the namespace's address, for partition tests.
//!
//! [`Redis::start_tls`] and [`RedisCluster::start_tls`] speak TLS only
//! (`--port 0 --tls-port P`): certificates of a throw-away CA ([`RedisTls`]:
//! the server's for `127.0.0.1`, a client's for mutual TLS), clients
//! required to show one or not ([`ClientCerts`]). [`Redis::command`] then
//! goes over TLS with the fixture's client certificate.
//!
//! Debian's `redis-server` (and `redis-cli`, for `--cluster create`) must be
//! installed: `./scripts/test` installs them.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::ServerName;

use crate::netns::{self, NetNs};
use crate::tls::{Leaf, TestCa};

/// How long a server gets to answer `PING` after it was started.
const START_WITHIN: Duration = Duration::from_secs(10);

/// One `redis-server` on `127.0.0.1` (or inside a [`NetNs`]), killed when
/// dropped.
pub struct Redis {
    ip: IpAddr,
    port: u16,
    /// The namespace it runs in, by name: started with `ip netns exec`.
    netns: Option<String>,
    dir: PathBuf,
    cluster: bool,
    /// TLS only, with these certificates.
    tls: Option<Arc<RedisTls>>,
    child: Option<Child>,
}

impl Redis {
    /// A server on a free port, answering `PING`.
    pub fn start() -> Redis {
        Redis::spawn_on_free_port(false, None)
    }

    /// A server on a free port speaking TLS only, with a new CA's
    /// certificates ([`tls`](Self::tls)), answering `PING` over TLS. Its
    /// [`url`](Self::url) is `rediss://127.0.0.1:P`. Panics, saying why,
    /// if this `redis-server` cannot do TLS.
    pub fn start_tls(client_certs: ClientCerts) -> Redis {
        Redis::spawn_on_free_port(false, Some(RedisTls::new(client_certs)))
    }

    fn spawn_on_free_port(cluster: bool, tls: Option<Arc<RedisTls>>) -> Redis {
        // A port free a moment ago may be taken by the time the server binds
        // it: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
            let mut redis = Redis::unstarted(ip, free_port(), None, cluster, tls.clone());
            match redis.launch() {
                Ok(()) => return redis,
                Err(e) => last = e,
            }
        }
        let tls = if tls.is_some() {
            " (with TLS: is this redis-server built with it? Debian's is, \
             `ldd $(which redis-server)` shows libssl)"
        } else {
            ""
        };
        panic!("redis-server did not start{tls}: {last}");
    }

    /// A server inside `ns`, bound to its inside address ([`NetNs::addr`])
    /// on the namespace's next port, answering `PING` from the host. It must
    /// not outlive `ns` (dropping `ns` kills it).
    pub fn start_in(ns: &NetNs) -> Redis {
        let ip = IpAddr::V4(ns.addr());
        let mut redis =
            Redis::unstarted(ip, ns.next_port(), Some(ns.name().to_owned()), false, None);
        if let Err(e) = redis.launch() {
            panic!("redis-server did not start in {}: {e}", ns.name());
        }
        redis
    }

    /// Its data directory made, nothing running yet.
    fn unstarted(
        ip: IpAddr,
        port: u16,
        netns: Option<String>,
        cluster: bool,
        tls: Option<Arc<RedisTls>>,
    ) -> Redis {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("calmcache-redis-{pid}-{ip}-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("cannot create {}: {e}", dir.display());
        }
        Redis {
            ip,
            port,
            netns,
            dir,
            cluster,
            tls,
            child: None,
        }
    }

    /// Starts the process and waits for `PING`; the error says why not.
    fn launch(&mut self) -> Result<(), String> {
        let mut cmd = match &self.netns {
            Some(ns) => netns::command_in(ns, "redis-server"),
            None => Command::new("redis-server"),
        };
        cmd.args(["--bind", &self.ip.to_string()]);
        match &self.tls {
            None => cmd.args(["--port", &self.port.to_string()]),
            Some(tls) => cmd
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .args(tls.server_args(self.cluster)),
        };
        cmd.args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "local", "--loglevel", "warning"])
            .arg("--dir")
            .arg(&self.dir)
            // Its log (a TLS setup error, say) is in the error if it exits.
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if self.netns.is_some() {
            // The host dials the namespace's address, which protected mode
            // refuses (-DENIED) without a password; only the test's veth
            // reaches that address.
            cmd.args(["--protected-mode", "no"]);
        }
        if self.cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                .args(["--cluster-config-file", "nodes.conf"]);
        }
        let child = cmd.spawn().map_err(|e| {
            format!(
                "cannot run redis-server ({e}): install Debian's redis-server \
                 (./scripts/test does)"
            )
        })?;
        self.child = Some(child);
        let deadline = Instant::now() + START_WITHIN;
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let mut err = String::new();
                if let Some(mut stderr) = self.child.take().and_then(|mut c| c.stderr.take()) {
                    let _ = stderr.read_to_string(&mut err);
                }
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(5)..].join("\n");
                return Err(format!("redis-server exited with {status}: {err}{tail}"));
            }
            if self.command(&["PING"]).is_ok_and(|r| r == "+PONG") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
        Err(format!(
            "no PONG from {} within {START_WITHIN:?}",
            self.addr()
        ))
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// `redis://IP:PORT` (`127.0.0.1`, or the namespace's address), or
    /// `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{}", self.addr())
    }

    /// Its certificates, if it speaks TLS.
    pub fn tls(&self) -> Option<&RedisTls> {
        self.tls.as_deref()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `kill -9`: the server is gone at once, its data with it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed server again on the same port (empty).
    pub fn restart(&mut self) {
        self.kill9();
        if let Err(e) = self.launch() {
            panic!("redis-server did not start again on {}: {e}", self.addr());
        }
    }

    /// `kill -STOP`: the server hangs with its connections open.
    pub fn pause(&self) {
        self.signal(rustix::process::Signal::STOP);
    }

    /// `kill -CONT` after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal(rustix::process::Signal::CONT);
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let Some(pid) = self
            .pid()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        else {
            panic!("redis-server on {} is not running", self.addr());
        };
        if let Err(e) = rustix::process::kill_process(pid, signal) {
            panic!("cannot signal redis-server {pid:?}: {e}");
        }
    }

    /// Sends one command (an array of bulk strings) and returns the reply
    /// as text: `+OK`, `-ERR ...`, `:5`, or a bulk string's contents.
    /// Errors are connection failures and timeouts (1 s).
    pub fn command(&self, args: &[&str]) -> std::io::Result<String> {
        command(
            self.addr(),
            self.tls.as_ref().map(|t| t.config.clone()),
            args,
        )
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused server must not outlive the test either.
            let _ = self
                .pid()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
                .map(|pid| rustix::process::kill_process(pid, rustix::process::Signal::CONT));
        }
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters (no replicas) on free loopback ports,
/// every slot assigned and `cluster_state:ok`; killed when dropped.
pub struct RedisCluster {
    /// The masters, in the order they were created.
    pub nodes: Vec<Redis>,
}

impl RedisCluster {
    /// Three masters, slots split by `redis-cli --cluster create`.
    pub fn start() -> RedisCluster {
        RedisCluster::spawn(None)
    }

    /// The same speaking TLS only, clients and the cluster bus alike
    /// (`--tls-cluster yes`), every node with the certificates of one CA.
    pub fn start_tls(client_certs: ClientCerts) -> RedisCluster {
        RedisCluster::spawn(Some(RedisTls::new(client_certs)))
    }

    fn spawn(tls: Option<Arc<RedisTls>>) -> RedisCluster {
        let nodes: Vec<Redis> = (0..3)
            .map(|_| Redis::spawn_on_free_port(true, tls.clone()))
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
        let mut cli = Command::new("redis-cli");
        if let Some(tls) = &tls {
            cli.arg("--tls")
                .arg("--cacert")
                .arg(&tls.ca.ca_pem)
                .arg("--cert")
                .arg(&tls.client.cert)
                .arg("--key")
                .arg(&tls.client.key);
        }
        let out = cli
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): install Debian's redis-tools"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + START_WITHIN;
        while !cluster.ok() {
            assert!(
                Instant::now() < deadline,
                "cluster_state not ok within {START_WITHIN:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// Every node says `cluster_state:ok`.
    pub fn ok(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.command(&["CLUSTER", "INFO"])
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        })
    }

    /// `redis://` (or `rediss://`) URLs of every node (a client's seed
    /// list).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Redis::url).collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot(&self, key: &str) -> u16 {
        let reply = self.nodes[0]
            .command(&["CLUSTER", "KEYSLOT", key])
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT: {e}"));
        reply
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("CLUSTER KEYSLOT answered {reply:?}"))
    }
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// Whether a TLS server asks its clients for a certificate
/// (`tls-auth-clients`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCerts {
    /// `yes`, Redis' default: a client without a certificate of the CA is
    /// refused.
    Required,
    /// `no`: any client completes the handshake (a password may still be
    /// needed).
    NotAsked,
}

/// The certificates of a TLS server, written in a directory of their own
/// (removed with the last server using them).
pub struct RedisTls {
    /// The CA that signed the server's and the client's certificates; its
    /// certificate is `ca.ca_pem` (a node's `tls_ca`).
    pub ca: TestCa,
    /// The server's certificate, for `127.0.0.1` and `localhost`.
    pub server: Leaf,
    /// A client certificate of the CA (a node's `tls_cert` and `tls_key`).
    pub client: Leaf,
    /// What the server asks of its clients.
    pub client_certs: ClientCerts,
    dir: PathBuf,
    /// The fixture's own client: trusts the CA, shows `client`.
    config: Arc<rustls::ClientConfig>,
}

impl RedisTls {
    fn new(client_certs: ClientCerts) -> Arc<RedisTls> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("calmcache-redis-tls-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ca = TestCa::new(&dir);
        let server = ca.leaf("redis-server", &["127.0.0.1", "localhost"]);
        let client = ca.leaf("redis-client", &[]);
        let config = ca.client_with_cert(&client);
        Arc::new(RedisTls {
            ca,
            server,
            client,
            client_certs,
            dir,
            config,
        })
    }

    /// `[fleet]` keys of a node that trusts the CA and shows the client
    /// certificate: `tls_ca`, `tls_cert` and `tls_key`.
    pub fn fleet_keys(&self) -> String {
        format!(
            "tls_ca = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
            self.ca.ca_pem.display(),
            self.client.cert.display(),
            self.client.key.display()
        )
    }

    /// `redis-server`'s TLS options (after `--tls-port`).
    fn server_args(&self, cluster: bool) -> Vec<std::ffi::OsString> {
        let auth = match self.client_certs {
            ClientCerts::Required => "yes",
            ClientCerts::NotAsked => "no",
        };
        let mut args: Vec<std::ffi::OsString> = vec![
            "--tls-cert-file".into(),
            self.server.cert.clone().into(),
            "--tls-key-file".into(),
            self.server.key.clone().into(),
            "--tls-ca-cert-file".into(),
            self.ca.ca_pem.clone().into(),
            "--tls-auth-clients".into(),
            auth.into(),
        ];
        if cluster {
            // The bus (port + 10000) speaks TLS too; the nodes dial each
            // other with the same certificate, which the CA signed.
            args.extend(["--tls-cluster".into(), "yes".into()]);
        }
        args
    }
}

impl Drop for RedisTls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One RESP command over a fresh connection, over TLS with the client
/// `tls` if given (tests only: simple replies).
fn command(
    addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    args: &[&str],
) -> std::io::Result<String> {
    let timeout = Duration::from_secs(1);
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    match tls {
        None => exchange(stream, args),
        Some(tls) => {
            let name = ServerName::IpAddress(addr.ip().into());
            let conn = rustls::ClientConnection::new(tls, name).map_err(std::io::Error::other)?;
            exchange(rustls::StreamOwned::new(conn, stream), args)
        }
    }
}

/// Sends `args` as one command on `stream` and reads the reply.
fn exchange(mut stream: impl Read + Write, args: &[&str]) -> std::io::Result<String> {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(req.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        if complete(&reply) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&reply).into_owned();
    Ok(match text.strip_prefix('$') {
        // A bulk string: its contents after the length line.
        Some(rest) => rest.split_once("\r\n").map_or(String::new(), |(_, body)| {
            body.trim_end_matches("\r\n").to_owned()
        }),
        None => text.trim_end_matches("\r\n").to_owned(),
    })
}

/// A whole simple reply or bulk string has arrived.
fn complete(reply: &[u8]) -> bool {
    let text = String::from_utf8_lossy(reply);
    match text.strip_prefix('$') {
        Some(rest) => rest.split_once("\r\n").is_some_and(|(len, body)| {
            len.parse::<usize>().is_ok_and(|len| body.len() >= len + 2) || len == "-1"
        }),
        None => text.ends_with("\r\n"),
    }
}

#[cfg(test)]
#[path = "redis_tests.rs"]
mod tests;
