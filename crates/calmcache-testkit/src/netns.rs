//! [`NetNs`]: a network namespace a test creates for itself, joined to the
//! host by a veth pair, so a peer inside (a `redis-server`, fleet mode's
//! shared tier, issue 14) can be cut off by a real partition: the link goes
//! down, connections stay open, packets stop, and the link comes back.
//!
//! Addresses come from 198.18.0.0/15 (RFC 2544, benchmarking; never routed):
//! one /30 per namespace, the host end `.1`, the inside end `.2`. Nothing
//! else is configured, so nothing inside can reach anything but the host's
//! end of its link. Everything is removed on drop, after a panic too:
//! processes inside are killed (with the link up, so the host's connections
//! to them see their FIN or RST), the veth pair and the namespace deleted;
//! leftovers of a test process that was killed (`cctest-<pid>-*` of a pid
//! that no longer runs) are removed by the next one.
//!
//! Tests stay on the machine: the namespace has no default route (only its
//! /30), and the host gets an `unreachable` route for the whole
//! 198.18.0.0/15 ([`guard_range`], once per process, idempotent, left in
//! place: the range is never routed anyway). A namespace's /30 is more
//! specific and wins while its veth is up; once the host end is down or the
//! veth gone, a packet for the address fails here (`EHOSTUNREACH`) instead
//! of following the default route off the host.
//!
//! Needs root and iproute2 (`ip`). [`NetNs::create_or_skip`] skips a test
//! with a message where namespaces cannot be created, and fails it under
//! `CI=true`.

use std::ffi::OsStr;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

/// Prefix of every namespace this testkit creates.
const PREFIX: &str = "cctest-";
/// The first address of 198.18.0.0/15.
const RANGE_START: u32 = u32::from_be_bytes([198, 18, 0, 0]);
/// /30 blocks in the /15.
const BLOCKS: u32 = (1 << 17) / 4;
/// Blocks tried before giving up (another process may hold a few).
const CLAIM_TRIES: u32 = 64;
/// The veth end inside every namespace (names are per namespace).
const INSIDE_IF: &str = "cc0";
/// The first port handed out by [`NetNs::next_port`]: the namespace is the
/// test's own, so ports cannot be taken by anyone else.
const FIRST_PORT: u16 = 6379;

/// Namespaces created by this process, for unique names.
static CREATED: AtomicU32 = AtomicU32::new(0);

/// A network namespace with a veth link to the host; removed on drop.
pub struct NetNs {
    name: String,
    /// The host end of the veth pair, once created (`cct<block>`).
    host_if: Option<String>,
    block: u32,
    ports: AtomicU16,
}

impl NetNs {
    /// Whether network namespaces can be created here, cached: `Err` says
    /// why not (not root, no `ip`, `ip netns add` or veth refused).
    pub fn available() -> Result<(), String> {
        static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
        AVAILABLE
            .get_or_init(|| {
                let euid = rustix::process::geteuid();
                if !euid.is_root() {
                    return Err(format!("not root (euid {})", euid.as_raw()));
                }
                // A real one, created and removed: the only proof.
                NetNs::try_create().map(drop)
            })
            .clone()
    }

    /// A namespace, or `None` after printing to stderr why a test is
    /// skipped here. Under `CI=true` it panics instead: CI never skips.
    pub fn create_or_skip() -> Option<NetNs> {
        match NetNs::available() {
            Ok(()) => Some(NetNs::create()),
            Err(reason) => {
                skip(&reason, SkipPolicy::from_env());
                None
            }
        }
    }

    /// A namespace with its link up; panics if it cannot be created (see
    /// [`create_or_skip`](Self::create_or_skip) for tests that may skip).
    pub fn create() -> NetNs {
        NetNs::try_create().unwrap_or_else(|e| panic!("cannot create a network namespace: {e}"))
    }

    fn try_create() -> Result<NetNs, String> {
        guard_range()?;
        sweep_stale();
        let pid = std::process::id();
        let n = CREATED.fetch_add(1, Ordering::SeqCst);
        let name = format!("{PREFIX}{pid}-{n}");
        {
            // Concurrent `ip netns add` may race on setting up /run/netns.
            static ADD: Mutex<()> = Mutex::new(());
            let _one = ADD.lock().unwrap_or_else(|e| e.into_inner());
            ip(["netns", "add", &name])?;
        }
        // From here on, Drop removes whatever exists.
        let mut ns = NetNs {
            name,
            host_if: None,
            block: 0,
            ports: AtomicU16::new(FIRST_PORT),
        };
        ns.claim_link(pid.wrapping_mul(64).wrapping_add(n) % BLOCKS)?;
        let host_if = ns.host_interface().to_owned();
        ip([
            "addr",
            "add",
            &format!("{}/30", ns.host_addr()),
            "dev",
            &host_if,
        ])?;
        ip(["link", "set", &host_if, "up"])?;
        let inside = format!("{}/30", ns.addr());
        ip(["-n", &ns.name, "addr", "add", &inside, "dev", INSIDE_IF])?;
        ip(["-n", &ns.name, "link", "set", INSIDE_IF, "up"])?;
        ip(["-n", &ns.name, "link", "set", "lo", "up"])?;
        // No default route inside: the /30 is all the namespace reaches.
        Ok(ns)
    }

    /// Creates the veth pair for the first free /30 from `start`: the host
    /// end's name `cct<block>` is the claim, so another test process
    /// (another worktree's tests) never gets the same addresses.
    fn claim_link(&mut self, start: u32) -> Result<(), String> {
        for i in 0..CLAIM_TRIES {
            let block = (start + i) % BLOCKS;
            let host_if = format!("cct{block}");
            let peer = ["peer", "name", INSIDE_IF, "netns", &self.name];
            match ip(["link", "add", &host_if, "type", "veth"]
                .into_iter()
                .chain(peer))
            {
                Ok(()) => {
                    self.host_if = Some(host_if);
                    self.block = block;
                    return Ok(());
                }
                Err(e) if e.contains("File exists") => continue,
                Err(e) => return Err(e),
            }
        }
        Err(format!(
            "no free /30 in {CLAIM_TRIES} tries from block {start}"
        ))
    }

    /// The namespace's name (`cctest-<pid>-<n>`), for `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address of the inside end: what a server inside binds, and what
    /// the host dials.
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(RANGE_START + self.block * 4 + 2)
    }

    /// The address of the host end (connections from the host come from it).
    pub fn host_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(RANGE_START + self.block * 4 + 1)
    }

    /// The host end of the veth pair (`cct<block>`).
    pub fn host_interface(&self) -> &str {
        // Set by try_create before any NetNs is handed out.
        self.host_if.as_deref().unwrap_or_default()
    }

    /// A port no server in this namespace was given yet (from 6379 up).
    pub fn next_port(&self) -> u16 {
        self.ports.fetch_add(1, Ordering::SeqCst)
    }

    /// A `Command` that runs `program` inside (`ip netns exec NAME
    /// program`, which execs: the child's pid is the program's). Processes
    /// started this way are killed when the namespace is dropped.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        command_in(&self.name, program)
    }

    /// Starts `program args...` inside, stdin and stdout closed.
    pub fn spawn_in<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> std::io::Result<Child>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
    }

    /// A partition: the inside end of the link goes down. Open connections
    /// stay open (nobody sends a FIN or an RST), packets in both directions
    /// are dropped silently, new connections time out, until
    /// [`link_up`](Self::link_up).
    ///
    /// The inside end, not the host end: a host end that is down loses its
    /// route to the /30, and the host's packets for the inside address meet
    /// the range's `unreachable` route ([`guard_range`]): connections fail at
    /// once instead of hanging. With the inside end down, the host end keeps
    /// its route (`linkdown`, no carrier) and drops them silently.
    pub fn link_down(&self) {
        self.set_link("down");
    }

    /// Ends [`link_down`](Self::link_down): TCP retransmits what was held.
    pub fn link_up(&self) {
        self.set_link("up");
    }

    fn set_link(&self, state: &str) {
        if let Err(e) = ip(["-n", &self.name, "link", "set", INSIDE_IF, state]) {
            panic!("cannot set the link of {} {state}: {e}", self.name);
        }
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Link up first, so the FINs and RSTs of the processes killed inside
        // reach the host's sockets: once the link is gone, the host has only
        // the range's `unreachable` route for this address.
        let _ = ip(["-n", &self.name, "link", "set", INSIDE_IF, "up"]);
        kill_inside(&self.name);
        wait_until_empty(&self.name);
        // Deleting one end deletes the pair (and the host's route with it).
        if let Some(host_if) = &self.host_if {
            let _ = ip(["link", "del", host_if]);
        }
        let _ = ip(["netns", "del", &self.name]);
    }
}

/// The whole of 198.18.0.0/15.
pub const RANGE: &str = "198.18.0.0/15";

/// Gives the host an `unreachable` route for [`RANGE`], once per process
/// (`replace`: idempotent, and concurrent test processes agree). A
/// namespace's /30 is more specific and wins while its link is up; past
/// it (the host end down, the veth deleted, a namespace dropped) an address
/// of the range fails on this machine instead of following the default
/// route out of it. Left in place at exit: the range is never routed
/// (RFC 2544), so the route only makes its failures local and at once.
pub fn guard_range() -> Result<(), String> {
    static GUARDED: OnceLock<Result<(), String>> = OnceLock::new();
    GUARDED
        .get_or_init(|| ip(["route", "replace", "unreachable", RANGE]))
        .clone()
}

/// `ip netns exec NAME program` (shared with `Redis::start_in`).
pub(crate) fn command_in(ns: &str, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).arg(program);
    cmd
}

/// What to do when a test cannot create a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SkipPolicy {
    /// Print why and let the test pass.
    Skip,
    /// `CI=true`: fail, so CI never passes a test it did not run.
    Fail,
}

impl SkipPolicy {
    fn from_env() -> SkipPolicy {
        match std::env::var("CI").as_deref() {
            Ok("true") => SkipPolicy::Fail,
            _ => SkipPolicy::Skip,
        }
    }
}

fn skip(reason: &str, policy: SkipPolicy) {
    // libtest names each test's thread after the test.
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let message = format!(
        "skipped: cannot create network namespaces (needs root and iproute2): {reason} [{test}]"
    );
    match policy {
        // Straight to fd 2: libtest captures `eprintln!` of a passing test,
        // which would make the skip silent.
        SkipPolicy::Skip => {
            let _ = writeln!(std::io::stderr(), "{message}");
        }
        SkipPolicy::Fail => panic!("{message} (CI=true: a test may not skip)"),
    }
}

/// Runs `ip ARGS`; the error is its stderr (or why it did not run).
fn ip<I, S>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new("ip");
    cmd.args(args).stdin(Stdio::null());
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run `ip` ({e}): install iproute2"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// `kill -9` to every process inside `ns` (`ip netns pids`). They are not
/// reaped here: their `Child`, if any, still is someone's.
fn kill_inside(ns: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let pid = pid.parse().ok().and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Waits (at most 2 s) until no process runs inside `ns` (a killed process
/// leaves it as it dies, before it is reaped), then a little longer for the
/// packets its sockets sent on the way out to cross the link.
fn wait_until_empty(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let pids = Command::new("ip").args(["netns", "pids", ns]).output();
        if pids.map_or(true, |out| out.stdout.trim_ascii().is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// Removes, once per process and before it creates any, the namespaces of
/// test processes that no longer run (killed before their Drop ran), with
/// their processes and veth pairs (pids as this pid namespace sees them).
fn sweep_stale() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            let Some(pid) = name
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            // Ours are stale too: this runs before this process creates
            // any, so they belong to an earlier process with the same pid.
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
            if !alive || pid == std::process::id() {
                kill_inside(name);
                // The veth pair explicitly: the namespace itself may live on
                // for minutes, held by the killed processes' orphaned sockets
                // (FINs retransmitted on a link left down).
                let _ = ip(["-n", name, "link", "del", INSIDE_IF]);
                let _ = ip(["netns", "del", name]);
            }
        }
    });
}

#[cfg(test)]
#[path = "netns_tests.rs"]
mod tests;
