//! Fleet nodes that end in the middle of a large body (issue 30: "a node
//! killed mid-stream"). Large bodies go to Redis as they arrive, as pieces
//! listed by a writing record, and a manifest committed last
//! (fleet/stream_out.rs); the other nodes stream the pieces while the
//! holder still fetches (read-while-write across the fleet,
//! fleet/stream_in.rs).
//!
//! - Peers stream the holder's slow 32 MiB body while it arrives: each of
//!   their clients (HTTP/1.1, h2c, HTTP/2 over TLS) has bytes before the
//!   origin sent the whole body and before any manifest is committed, and
//!   every one ends with the body byte for byte; one origin fetch.
//! - The lease holder killed (`kill -9`) mid-body: its own clients and the
//!   peers' clients that streamed from it see a cut, never a complete
//!   answer; its pieces are listed by no manifest; the next request is
//!   served whole (one peer takes over, the other streams it): two fetches.
//! - The holder stopped with SIGTERM and a drain shorter than the rest of
//!   the body: its lease is handed over at once, so the peers' clients are
//!   cut well before the lease would lapse; no manifest comes from the cut
//!   fill; the next request is served whole.
//! - A piece changed in Redis mid-stream (its length kept): the peers'
//!   clients are cut before its bytes.
//! - A purge mid-stream: the commit is refused, the peers' clients are
//!   cut, the fill's pieces are deleted, no peer stored it. (The purging
//!   node's own fill still stores its copy locally: a purge does not stop
//!   a fill in flight, as on a single node.)
//! - A node killed while it reads the pieces of a committed object (its
//!   Redis link slowed): the object in Redis stays whole, and the node,
//!   started again, serves it byte for byte from Redis.
//!
//! Throughout, a watch on Redis reads every manifest committed (each
//! entry's generation, every 25 ms): none ever lists a dead fill.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use calmcache_testkit::redis::Redis;
use calmcache_testkit::tls::TestCa;
use calmcache_testkit::wire::{open, BoxError, TLS_NAME};
use calmcache_testkit::{stream_byte, DelayProxy, Origin, Proxy, Wire, Wires};
use http::Method;
use http_body_util::BodyExt;
use tokio::task::JoinHandle;

use crate::fleet_harness::{fleet_status, HOST, TOKEN};
use crate::fleet_process::{peers_total, peers_waiting, ProcessNode};
use crate::{free_port, scratch, signal, wait_listening, wait_until};

const MIB: u64 = 1024 * 1024;
/// The slow object: 32 MiB, in 64 KiB pieces 10 ms apart (about 5 s).
const LEN: u64 = 32 * MIB;
const PAUSE_MS: u64 = 10;
/// Redis is not what is tested: a call slower than usual on a loaded
/// machine must not make a node fetch alone.
/// Peers stream the holder's body (`stream_from_peers`, off by default).
const FLEET: &str = "timeout = \"1s\"\nstream_from_peers = true";
/// Objects live long (one lifetime per test), and one key whatever the
/// scheme, so that clients over TLS share with the others (the default
/// key has the scheme).
const ROUTE: &str =
    "ttl = { 200 = \"60s\" }\nkey = \"$host$uri$is_args$args\"\nlock_timeout = \"5s\"";
/// The one-way delay of a slowed Redis link: 4 piece calls at once, 50 ms
/// a round trip, make a 32 MiB object's pieces take over a second.
const SLOW_LINK: Duration = Duration::from_millis(25);

/// A node's config: a zone that keeps 64 MiB objects, on `redis`.
fn config(origin: &Origin, redis: &str, fleet: &str) -> Proxy {
    Proxy::new(origin)
        .admin(&format!("listen = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\""))
        .zone("512MiB", "64MiB")
        .route(ROUTE)
        .fleet(redis, fleet)
}

/// Two waiting peers in the test, on every wire.
async fn two_peers(origin: &Origin, redis: &Redis, fleet: &str) -> Vec<Arc<Wires>> {
    let mut peers = Vec::new();
    for _ in 0..2 {
        let peer = config(origin, &redis.url(), fleet);
        peers.push(Arc::new(Wires::start(peer, "").await));
    }
    peers
}

/// The slow generated body at `/mid/<name>`.
fn slow_big(name: &str) -> String {
    format!("/mid/{name}?x-origin-stream-bytes={LEN}&x-origin-stream-pause-ms={PAUSE_MS}")
}

/// The path the origin counts hits under (no query).
fn counted(path: &str) -> &str {
    path.split_once('?').map_or(path, |(p, _)| p)
}

/// How a client's answer ended, its bytes checked as they came.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "the fields are read through Debug, in assertion messages"
)]
enum Ending {
    /// Complete, and every byte of the generated body.
    Whole,
    /// Presented as complete with other bytes: short, long or wrong.
    Wrong { got: u64, first_wrong: Option<u64> },
    /// The client saw the body cut (an error) after `got` right bytes.
    Cut { got: u64, error: String },
    /// No answer: the connection failed before a response head, or the
    /// head was not a 200.
    Unanswered(String),
}

/// Reads the answer to a GET, checking each byte against the generated
/// body of [`LEN`] bytes; `progress` counts the bytes read so far.
async fn read_answer(
    head: Result<http::Response<hyper::body::Incoming>, BoxError>,
    progress: Arc<AtomicU64>,
) -> Ending {
    let response = match head {
        Ok(r) if r.status() == 200 => r,
        Ok(r) => return Ending::Unanswered(format!("status {}", r.status())),
        Err(e) => return Ending::Unanswered(e.to_string()),
    };
    let mut body = response.into_body();
    let (mut got, mut first_wrong) = (0u64, None);
    loop {
        match body.frame().await {
            None => break,
            Some(Err(e)) if first_wrong.is_none() => {
                let error = e.to_string();
                return Ending::Cut { got, error };
            }
            Some(Err(_)) => break,
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if first_wrong.is_none() {
                    first_wrong = data
                        .iter()
                        .zip(got..)
                        .position(|(b, i)| *b != stream_byte(i))
                        .map(|p| got + p as u64);
                }
                got += data.len() as u64;
                progress.store(got, Ordering::Relaxed);
            }
        }
    }
    match (got == LEN, first_wrong) {
        (true, None) => Ending::Whole,
        _ => Ending::Wrong { got, first_wrong },
    }
}

/// One client's GET of `path` over `wire` to `addr`, read in a task.
struct Asked {
    label: String,
    progress: Arc<AtomicU64>,
    task: JoinHandle<Ending>,
}

fn ask(label: String, wire: Wire, addr: SocketAddr, path: &str) -> Asked {
    let progress = Arc::new(AtomicU64::new(0));
    let read = progress.clone();
    let path = path.to_owned();
    let task = tokio::spawn(async move {
        let head = open(&wire, addr, Method::GET, HOST, &path, &[], Bytes::new()).await;
        read_answer(head, read).await
    });
    Asked {
        label,
        progress,
        task,
    }
}

/// One client per wire to each peer, all at once.
fn ask_peers(peers: &[Arc<Wires>], path: &str) -> Vec<Asked> {
    let mut asked = Vec::new();
    for (p, peer) in peers.iter().enumerate() {
        for wire in peer.all.clone() {
            let addr = match wire {
                Wire::H2Tls(_) => peer.proxy.tls_addr(),
                _ => peer.proxy.running().proxy_addrs[0],
            };
            let label = format!("peer {p} over {}", wire.label());
            asked.push(ask(label, wire, addr, path));
        }
    }
    asked
}

/// Every client's ending, bounded in time.
async fn endings(asked: Vec<Asked>) -> Vec<(String, Ending)> {
    let mut out = Vec::new();
    for a in asked {
        let ending = tokio::time::timeout(Duration::from_secs(60), a.task)
            .await
            .unwrap_or_else(|_| panic!("{}: no ending within 60 s", a.label))
            .unwrap();
        out.push((a.label, ending));
    }
    out
}

/// Every client got the whole body, byte for byte.
async fn all_whole(asked: Vec<Asked>) {
    for (label, ending) in endings(asked).await {
        assert!(matches!(ending, Ending::Whole), "{label}: {ending:?}");
    }
}

/// Every client of a node that ended mid-body saw that its answer was not
/// complete: a cut body (an error), or no answer; never a complete one.
async fn all_cut(asked: Vec<Asked>) {
    for (label, ending) in endings(asked).await {
        eprintln!("{label}: {ending:?}");
        match ending {
            Ending::Cut { got, .. } => assert!(got < LEN, "{label}: cut after {got}"),
            Ending::Unanswered(_) => {}
            other => panic!("{label}: the cut fill answered as complete: {other:?}"),
        }
    }
}

/// Waits until the holder's fetch is mid-body (a quarter of it streamed by
/// the origin, some of it read by every `own` client); asserts it is.
async fn mid_body(origin: &Origin, own: &[Asked]) {
    wait_until(
        Duration::from_secs(20),
        "the holder is mid-body",
        async || {
            origin.bytes_streamed() >= LEN / 4
                && own.iter().all(|a| a.progress.load(Ordering::Relaxed) > 0)
        },
    )
    .await;
    let streamed = origin.bytes_streamed();
    assert!(
        streamed < LEN,
        "killed mid-body: {streamed} of {LEN} streamed"
    );
}

/// The piece keys in Redis (`cc:{H.G.i}:b`), counted by generation `G`.
fn piece_gens(redis: &Redis) -> BTreeMap<String, usize> {
    let script = "return table.concat(redis.call('KEYS', 'cc:*:b'), ' ')";
    let reply = redis.command(&["EVAL", script, "0"]).unwrap_or_default();
    assert!(!reply.starts_with('-'), "KEYS: {reply}");
    let mut gens = BTreeMap::new();
    for key in reply.split_whitespace() {
        let gen = key.split('.').nth(1).unwrap_or("?").to_owned();
        *gens.entry(gen).or_insert(0) += 1;
    }
    gens
}

/// The generation of every manifest committed in Redis (`whole` for an
/// entry with its value inline), as `{gen:016x}`, the piece keys' form.
fn manifest_gens(redis: &Redis) -> Vec<String> {
    // The generation is the 8 bytes after the magic, little-endian.
    let script = "local out = {}\n\
        for _, k in ipairs(redis.call('KEYS', 'cc:*:m')) do\n\
          local b = redis.call('HGET', k, 'blob')\n\
          if b and string.sub(b, 1, 3) == 'CCM' then\n\
            local g = ''\n\
            for i = 12, 5, -1 do g = g .. string.format('%02x', string.byte(b, i)) end\n\
            table.insert(out, g)\n\
          elseif b then table.insert(out, 'whole') end\n\
        end\n\
        return table.concat(out, ' ')";
    let reply = redis.command(&["EVAL", script, "0"]).unwrap_or_default();
    assert!(!reply.starts_with('-'), "manifests: {reply}");
    reply.split_whitespace().map(str::to_owned).collect()
}

/// Every manifest generation seen in Redis while it runs (read every
/// 25 ms, for at most two minutes).
struct ManifestWatch {
    stop: Arc<AtomicBool>,
    task: JoinHandle<BTreeSet<String>>,
}

impl ManifestWatch {
    fn start(redis: Arc<Redis>) -> ManifestWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let seen = Arc::new(Mutex::new(BTreeSet::new()));
            let began = Instant::now();
            while !stopped.load(Ordering::Relaxed) && began.elapsed() < Duration::from_secs(120) {
                let (redis, seen) = (redis.clone(), seen.clone());
                tokio::task::spawn_blocking(move || {
                    seen.lock().unwrap().extend(manifest_gens(&redis));
                })
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            let seen = seen.lock().unwrap().clone();
            seen
        });
        ManifestWatch { stop, task }
    }

    /// Every generation seen, once more read after the stop.
    async fn stop(self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// After a takeover: one manifest was ever committed, it lists every piece
/// of its own generation, and that generation is none of `dead`.
fn one_manifest(redis: &Redis, seen: &BTreeSet<String>, dead: &BTreeSet<String>) {
    let now = manifest_gens(redis);
    assert_eq!(now.len(), 1, "one entry in redis: {now:?}");
    let gen = &now[0];
    assert_eq!(seen, &BTreeSet::from([gen.clone()]), "manifests ever seen");
    assert!(!dead.contains(gen), "the manifest lists a dead fill: {gen}");
    let pieces = piece_gens(redis);
    // The body's pieces (written as it arrived: the head is in the manifest).
    let listed = pieces.get(gen).copied().unwrap_or(0);
    assert_eq!(listed as u64, LEN / (256 * 1024), "pieces: {pieces:?}");
}

/// The holder's TLS listener (a port picked here) and its client.
struct HolderTls {
    port: u16,
    keys: String,
    client: Wire,
}

fn holder_tls(dir: &Path) -> HolderTls {
    let ca = TestCa::new(dir);
    let leaf = ca.leaf("holder", &[TLS_NAME]);
    let port = free_port();
    let keys = format!(
        "h2c = true\ntls_listen = [\"127.0.0.1:{port}\"]\n\
         [[server.tls]]\ncert = {:?}\nkey = {:?}\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    HolderTls {
        port,
        keys,
        client: Wire::H2Tls(ca.client(&[b"h2"])),
    }
}

/// The holder's own clients of `path`: over HTTP/1.1, and with `tls` also
/// over h2c and HTTP/2 over TLS.
fn own_clients(holder: &ProcessNode, tls: Option<&HolderTls>, path: &str) -> Vec<Asked> {
    let plain: SocketAddr = ([127, 0, 0, 1], holder.port).into();
    let mut wires = vec![(Wire::Http1, plain)];
    if let Some(tls) = tls {
        wires.push((Wire::H2c, plain));
        wires.push((tls.client.clone(), ([127, 0, 0, 1], tls.port).into()));
    }
    wires
        .into_iter()
        .map(|(wire, addr)| ask(format!("holder over {}", wire.label()), wire, addr, path))
        .collect()
}

/// Waits until the holder's fetch reached the origin, then asks the peers
/// and waits until each waits on the holder's lease.
async fn peers_wait_on_holder(origin: &Origin, peers: &[Arc<Wires>], path: &str) -> Vec<Asked> {
    let what = "the holder's fetch began";
    wait_until(Duration::from_secs(10), what, async || {
        origin.hits_for(counted(path)) == 1
    })
    .await;
    let asked = ask_peers(peers, path);
    peers_waiting(peers).await;
    asked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_stream_a_body_while_the_holder_still_fetches_it() {
    let redis = Arc::new(Redis::start());
    let origin = Origin::start().await;
    let holder = Arc::new(Wires::start(config(&origin, &redis.url(), FLEET), "").await);
    let peers = two_peers(&origin, &redis, FLEET).await;
    let watch = ManifestWatch::start(redis.clone());
    let path = slow_big("streamed");
    let own = ask_peers(std::slice::from_ref(&holder), &path);
    let asked = peers_wait_on_holder(&origin, &peers, &path).await;
    // The order of events: every peer client has bytes while the origin
    // is still sending and no manifest is committed.
    wait_until(
        Duration::from_secs(20),
        "every peer client has bytes",
        async || asked.iter().all(|a| a.progress.load(Ordering::Relaxed) > 0),
    )
    .await;
    let (streamed, manifests) = (origin.bytes_streamed(), manifest_gens(&redis));
    assert!(streamed < LEN, "the origin had sent {streamed} of {LEN}");
    assert!(manifests.is_empty(), "committed already: {manifests:?}");
    all_whole(own).await;
    all_whole(asked).await;
    let seen = watch.stop().await;
    assert_eq!(
        origin.hits_for(counted(&path)),
        1,
        "one fetch for the fleet"
    );
    assert_eq!(peers_total(&peers, "leases_acquired").await, 0);
    let streams: u64 = {
        let mut n = 0;
        for peer in &peers {
            n += fleet_status(peer).await["pieces"]["streams"]
                .as_u64()
                .unwrap_or(0);
        }
        n
    };
    assert_eq!(
        streams, 2,
        "each peer streamed it once (its clients share it)"
    );
    one_manifest(&redis, &seen, &BTreeSet::new());
}

/// The peers' streams cut so far.
async fn streams_cut(peers: &[Arc<Wires>]) -> u64 {
    let mut n = 0;
    for peer in peers {
        n += fleet_status(peer).await["pieces"]["streams_cut"]
            .as_u64()
            .unwrap_or(0);
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_mid_body_cuts_every_client_and_the_next_request_is_served_whole() {
    let redis = Arc::new(Redis::start());
    let origin = Origin::start().await;
    let dir = scratch("fleet-mid-killed");
    let tls = holder_tls(&dir);
    let holder_config = config(&origin, &redis.url(), FLEET).server(&tls.keys);
    let holder = ProcessNode::start(&holder_config, &dir.join("holder.toml")).await;
    wait_listening(tls.port).await;
    let peers = two_peers(&origin, &redis, FLEET).await;
    holder.wait_on_redis().await;
    let watch = ManifestWatch::start(redis.clone());
    let path = slow_big("killed");
    let own = own_clients(&holder, Some(&tls), &path);
    let asked = peers_wait_on_holder(&origin, &peers, &path).await;
    mid_body(&origin, &own).await;
    wait_until(Duration::from_secs(20), "the peers stream it", async || {
        asked.iter().all(|a| a.progress.load(Ordering::Relaxed) > 0)
    })
    .await;
    signal(holder.child(), "-KILL");
    let dead: BTreeSet<String> = piece_gens(&redis).into_keys().collect();
    assert_eq!(dead.len(), 1, "its pieces went as the body arrived");
    assert!(
        manifest_gens(&redis).is_empty(),
        "no manifest of a body not whole"
    );
    all_cut(own).await;
    // The peers' clients streamed from it: cut once its lease lapsed.
    all_cut(asked).await;
    assert_eq!(streams_cut(&peers).await, 2);
    // The next request is served whole: one peer takes over, the other
    // streams the takeover's body.
    let again = ask_peers(&peers, &path);
    all_whole(again).await;
    let seen = watch.stop().await;
    assert_eq!(
        origin.hits_for(counted(&path)),
        2,
        "the cut fetch and one takeover"
    );
    assert_eq!(peers_total(&peers, "leases_acquired").await, 1);
    one_manifest(&redis, &seen, &dead);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_mid_body_hands_its_lease_over_and_commits_nothing() {
    // The drain (500 ms) ends long before the body (about 5 s): the fill is
    // cut. Without the hand-over a peer would wait for the lease to lapse:
    // up to 10 s here (renewed every 3.3 s, so at least 6.7 s after the stop).
    const LEASE: Duration = Duration::from_secs(10);
    let redis = Arc::new(Redis::start());
    let origin = Origin::start().await;
    let dir = scratch("fleet-mid-stopped");
    let fleet = format!("{FLEET}\nlease = \"10s\"");
    let holder_config =
        config(&origin, &redis.url(), &fleet).server("shutdown_timeout = \"500ms\"");
    let mut holder = ProcessNode::start(&holder_config, &dir.join("holder.toml")).await;
    let peers = two_peers(&origin, &redis, &fleet).await;
    holder.wait_on_redis().await;
    let watch = ManifestWatch::start(redis.clone());
    let path = slow_big("stopped");
    let own = own_clients(&holder, None, &path);
    let asked = peers_wait_on_holder(&origin, &peers, &path).await;
    mid_body(&origin, &own).await;
    let stopped = Instant::now();
    signal(holder.child(), "-TERM");
    wait_until(
        LEASE / 2,
        "the peers' streams cut at the hand-over",
        async || streams_cut(&peers).await == 2,
    )
    .await;
    let cut_after = stopped.elapsed();
    // It ends after its drain (and the hand-over), cutting its client: a
    // process whose stop waited for its worker threads on the runtime's
    // blocking pool served the whole body first (run/server.rs).
    holder.ended(Duration::from_secs(10)).await;
    let ended_after = stopped.elapsed();
    all_cut(own).await;
    all_cut(asked).await;
    // The next request is served whole.
    all_whole(ask_peers(&peers, &path)).await;
    let seen = watch.stop().await;
    eprintln!(
        "stopped mid-body: the peers' streams were cut {cut_after:?} after SIGTERM, \
         the holder ended after {ended_after:?}"
    );
    assert_eq!(
        origin.hits_for(counted(&path)),
        2,
        "the cut fetch and one more"
    );
    let mut dead: BTreeSet<String> = piece_gens(&redis).into_keys().collect();
    dead.retain(|g| !seen.contains(g));
    one_manifest(&redis, &seen, &dead);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Calls of `GET` Redis has answered (`INFO commandstats`): a node reading
/// pieces sends one per piece.
fn get_calls(redis: &Redis) -> u64 {
    let info = redis.command(&["INFO", "commandstats"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Kills `reader` while it reads the pieces of the committed object at
/// `path` (its Redis link is slow): `Some` once the kill landed mid-read,
/// with how many pieces it had asked for; `None` when the read was over
/// first (the caller tries again, a bounded number of times).
async fn kill_mid_read(redis: &Redis, reader: &mut ProcessNode, path: &str) -> Option<u64> {
    let before = get_calls(redis);
    let plain: SocketAddr = ([127, 0, 0, 1], reader.port).into();
    let client = ask("reader over HTTP/1.1".into(), Wire::Http1, plain, path);
    wait_until(
        Duration::from_secs(20),
        "the reader reads pieces",
        async || get_calls(redis) >= before + 8,
    )
    .await;
    signal(reader.child(), "-KILL");
    let asked = get_calls(redis) - before;
    let ending = endings(vec![client]).await.pop().unwrap().1;
    eprintln!("reader killed after {asked} GETs: {ending:?}");
    assert!(
        !matches!(ending, Ending::Wrong { .. }),
        "a wrong answer presented as complete: {ending:?}"
    );
    reader.start_again().await;
    reader.wait_on_redis().await;
    let whole = LEN / (256 * 1024);
    (asked < whole && !matches!(ending, Ending::Whole)).then_some(asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_killed_mid_pieces_leaves_the_object_whole_and_serves_it_again() {
    let redis = Arc::new(Redis::start());
    let slow = DelayProxy::start(redis.addr()).await;
    slow.set_delay(SLOW_LINK);
    let origin = Origin::start().await;
    let dir = scratch("fleet-mid-reader");
    let writer = Wires::start(config(&origin, &redis.url(), FLEET), "").await;
    let reader_config = config(&origin, &format!("redis://{}", slow.addr()), FLEET);
    let mut reader = ProcessNode::start(&reader_config, &dir.join("reader.toml")).await;
    reader.wait_on_redis().await;
    let path = format!("/mid/read?x-origin-stream-bytes={LEN}");
    let plain = writer.proxy.running().proxy_addrs[0];
    let first = ask("writer".into(), Wire::Http1, plain, &path);
    all_whole(vec![first]).await;
    wait_until(
        Duration::from_secs(20),
        "the writer committed",
        async || fleet_status(&writer).await["commits"].as_u64() == Some(1),
    )
    .await;
    let (manifests, pieces) = (manifest_gens(&redis), piece_gens(&redis));
    let mut landed = None;
    for _ in 0..3 {
        landed = kill_mid_read(&redis, &mut reader, &path).await;
        if landed.is_some() {
            break;
        }
    }
    let asked = landed.expect("one of three kills landed mid-read");
    assert_eq!(manifest_gens(&redis), manifests, "the entry is untouched");
    assert_eq!(piece_gens(&redis), pieces, "every piece is still there");
    let plain: SocketAddr = ([127, 0, 0, 1], reader.port).into();
    let again = ask("reader started again".into(), Wire::Http1, plain, &path);
    all_whole(vec![again]).await;
    let shared = reader.fleet().await["shared_hits"].as_u64();
    eprintln!("reader killed after asking for {asked} pieces; served again from redis");
    assert_eq!(shared, Some(1), "the copy came from redis");
    assert_eq!(origin.hits_for(counted(&path)), 1, "one fetch in all");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The key of piece `i` of the one fill writing now.
fn piece_key(redis: &Redis, i: usize) -> String {
    let script = "return table.concat(redis.call('KEYS', 'cc:*:b'), ' ')";
    let reply = redis.command(&["EVAL", script, "0"]).unwrap_or_default();
    let suffix = format!(".{i}}}:b");
    let key = reply.split_whitespace().find(|k| k.ends_with(&suffix));
    key.unwrap_or_else(|| panic!("no piece {i}: {reply}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_changed_in_redis_mid_stream_cuts_the_followers_before_its_bytes() {
    let redis = Arc::new(Redis::start());
    let origin = Origin::start().await;
    let holder = Arc::new(Wires::start(config(&origin, &redis.url(), FLEET), "").await);
    let peers = two_peers(&origin, &redis, FLEET).await;
    let path = slow_big("changed");
    let own = ask_peers(std::slice::from_ref(&holder), &path);
    wait_until(
        Duration::from_secs(20),
        "eight pieces written",
        async || piece_gens(&redis).values().sum::<usize>() >= 8,
    )
    .await;
    // Two bytes of piece 3 changed (two body bytes in a row are never
    // both `z`), its length kept; the peers then stream from piece 0.
    let changed = piece_key(&redis, 3);
    redis
        .command(&["SETRANGE", &changed, "1000", "zz"])
        .unwrap();
    let asked = ask_peers(&peers, &path);
    let piece = 256 * 1024;
    for (label, ending) in endings(asked).await {
        match ending {
            // A client that read a changed byte ends `Wrong`, not `Cut`.
            Ending::Cut { got, .. } => assert!(got <= 3 * piece, "{label}: {got} bytes"),
            other => panic!("{label}: {other:?}"),
        }
    }
    all_whole(own).await;
    assert!(peers_total(&peers, "bad_entries").await + streams_cut(&peers).await >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_mid_stream_leaves_nothing_of_that_fill_in_the_fleet() {
    let redis = Arc::new(Redis::start());
    let origin = Origin::start().await;
    let holder = Arc::new(Wires::start(config(&origin, &redis.url(), FLEET), "").await);
    let peers = two_peers(&origin, &redis, FLEET).await;
    let path = slow_big("purged");
    let own = ask_peers(std::slice::from_ref(&holder), &path);
    let asked = peers_wait_on_holder(&origin, &peers, &path).await;
    wait_until(Duration::from_secs(20), "the peers stream it", async || {
        asked.iter().all(|a| a.progress.load(Ordering::Relaxed) > 0)
    })
    .await;
    let selector = format!(r#"{{"url": "{path}"}}"#);
    let answer = holder.proxy.purge(TOKEN, &selector).await;
    assert!(answer.get("fleet_pending").is_none(), "{answer}");
    all_whole(own).await;
    // The commit is refused (the purge came after the lease): the peers'
    // clients are cut, and its pieces are deleted.
    all_cut(asked).await;
    assert!(
        manifest_gens(&redis).is_empty(),
        "no entry from the purged fill"
    );
    wait_until(Duration::from_secs(10), "its pieces deleted", async || {
        piece_gens(&redis).is_empty()
    })
    .await;
    // The peers stored nothing: the next request is a fetch.
    all_whole(ask_peers(&peers, &path)).await;
    assert_eq!(
        origin.hits_for(counted(&path)),
        2,
        "fetched again after the purge"
    );
}
