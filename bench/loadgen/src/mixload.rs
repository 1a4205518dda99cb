//! `mixload`: an open-loop, constant-rate HTTP/1.1 load generator with a mix
//! of request kinds and a per-interval timeline, for `bench/soak` and
//! `bench/chaos`.
//!
//! Request `i` is due at `start + i / rps` (as in `loadgen`: no coordinated
//! omission) and is one of three kinds, picked by a fixed hash of `i` with
//! the `--mix` weights:
//!
//! - `hit`: `GET {hot-prefix}{k}`, k uniform in `0..--hot` (a hot set that is
//!   cached after its first pass);
//! - `miss`: `GET /miss/{nonce}-{i}`, a URL never asked for before;
//! - `post`: `POST /api/post/{i}` with a small body (never cached: passes
//!   through to the origin).
//!
//! A request **failed** when its answer is not 2xx/3xx, or on a transport
//! error (refused, reset, closed) or the per-request timeout. A 200 body is
//! **corrupt** unless it is exactly what `calmcache origin` makes for that
//! path: it starts with `<!doctype html>`, names the requested path in its
//! `<h1>`, ends with `</body></html>\n`, and with `--body-bytes N` is exactly
//! N bytes long with an unbroken `x` padding. A body torn by a crash, cut
//! short, zero-filled or belonging to another URL fails these checks (a
//! changed digit inside the timestamp would not: the origin embeds no hash).
//!
//! `--timeline FILE` writes, per `--bucket-ms` interval of *scheduled* start
//! (unix milliseconds) and kind: requests, failed, corrupt, slow (latency
//! over `--slow-ms`), so a script can split a run into phases afterwards.
//! `--sweep` instead GETs every hot URL once (`--connections` at a time) and
//! checks each body: the corruption check after a crash.
//!
//! Bounded: `rps * duration` requests, everything still running at
//! `duration + 10 s` abandoned and counted failed ("unfinished").

use calmcache_loadgen::parse_duration;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;

/// Extra time after the last scheduled request before the run is cut off.
const HARD_STOP_GRACE: Duration = Duration::from_secs(10);
const KINDS: [&str; 3] = ["hit", "miss", "post"];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "mixload",
    about = "Open-loop constant-rate mixed load (hits, misses, POSTs) with a timeline and body checks"
)]
struct Args {
    /// Proxy base URL (http:// only), e.g. http://127.0.0.1:8080
    #[arg(long)]
    base: String,
    /// Requests per second, all kinds together
    #[arg(long, default_value_t = 100.0)]
    rps: f64,
    /// Length of the run, e.g. 60s, 10m
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Weights of the kinds, e.g. hit:80,miss:10,post:10
    #[arg(long, default_value = "hit:80,miss:10,post:10")]
    mix: String,
    /// Number of hot URLs
    #[arg(long, default_value_t = 10_000)]
    hot: u64,
    /// Path prefix of the hot URLs
    #[arg(long, default_value = "/hot/")]
    hot_prefix: String,
    /// Makes the miss URLs of this run unique (default: the start time)
    #[arg(long)]
    nonce: Option<String>,
    /// Expected body size of a 200 (the origin's --body-bytes); 0: not checked
    #[arg(long, default_value_t = 0)]
    body_bytes: usize,
    /// Maximum number of keepalive connections
    #[arg(long, default_value_t = 256)]
    connections: usize,
    /// Per-request timeout, from the scheduled start
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// A request slower than this (ms) counts as slow
    #[arg(long, default_value_t = 1000.0)]
    slow_ms: f64,
    /// Timeline interval (ms)
    #[arg(long, default_value_t = 1000)]
    bucket_ms: u64,
    /// Write the timeline here: "bucket_unix_ms kind requests failed corrupt slow"
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// GET every hot URL once and check its body, instead of the timed run
    #[arg(long)]
    sweep: bool,
    /// Runtime worker threads
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// Kind weights, cumulative: kind `k` when `hash % total < cum[k]`.
fn parse_mix(s: &str) -> Result<[u64; 3]> {
    let mut w = [0u64; 3];
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (name, weight) = part
            .split_once(':')
            .with_context(|| format!("--mix: {part:?} is not kind:weight"))?;
        let k = KINDS
            .iter()
            .position(|n| *n == name.trim())
            .with_context(|| format!("--mix: unknown kind {name:?} (kinds: hit, miss, post)"))?;
        w[k] = weight
            .trim()
            .parse()
            .with_context(|| format!("--mix: weight {weight:?} is not a whole number"))?;
    }
    let cum = [w[0], w[0] + w[1], w[0] + w[1] + w[2]];
    if cum[2] == 0 {
        bail!("--mix: all weights are 0");
    }
    Ok(cum)
}

/// SplitMix64: a fixed, well-spread hash of the request index.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Kind index and path of request `i`.
fn plan(i: u64, cum: &[u64; 3], args: &Args, nonce: &str) -> (usize, String) {
    let h = mix64(i);
    let r = h % cum[2];
    let kind = cum.iter().position(|&c| r < c).unwrap_or(0);
    let path = match kind {
        0 => format!("{}{}", args.hot_prefix, mix64(h) % args.hot.max(1)),
        1 => format!("/miss/{nonce}-{i}"),
        _ => format!("/api/post/{i}"),
    };
    (kind, path)
}

/// Whether `body` is what `calmcache origin` makes for `path` (see the module doc).
fn body_ok(path: &str, body: &[u8], size: usize) -> bool {
    const HEAD: &[u8] = b"<!doctype html>\n";
    const TAIL: &[u8] = b"</body></html>\n";
    if !body.starts_with(HEAD) || !body.ends_with(TAIL) || (size > 0 && body.len() != size) {
        return false;
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    let h1 = format!("<h1>A slow page: {path}</h1>\n");
    if !text.contains(&h1) {
        return false;
    }
    // The padding, when there is one, is "<!--" x...x "-->\n" right before TAIL.
    match text.find("<!--") {
        Some(at) => {
            let end = text.len() - TAIL.len();
            text[at..end].len() >= 8
                && text[at..end].ends_with("-->\n")
                && text[at + 4..end - 4].bytes().all(|b| b == b'x')
        }
        None => true,
    }
}

type Sender = SendRequest<Full<Bytes>>;

/// Keepalive connections, at most `permits` in use at once.
struct Pool {
    host_port: String,
    authority: String,
    idle: Mutex<Vec<Sender>>,
    permits: Semaphore,
    opened: AtomicU64,
}

/// What one request ended as.
struct Outcome {
    kind: usize,
    /// Bucket start, unix ms (scheduled start).
    bucket: u64,
    latency_ms: f64,
    /// "200", "503", or the transport error.
    status: String,
    failed: bool,
    corrupt: bool,
}

impl Pool {
    async fn connect(&self) -> Result<Sender> {
        let stream = TcpStream::connect(&self.host_port).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(sender)
    }

    async fn sender(&self) -> Result<Sender> {
        loop {
            let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
            match idle {
                Some(mut s) => {
                    if s.ready().await.is_ok() {
                        return Ok(s);
                    }
                }
                None => return self.connect().await,
            }
        }
    }

    /// One request: (status, body).
    async fn request(&self, post: bool, path: &str) -> Result<(u16, Bytes)> {
        let _permit = self.permits.acquire().await?;
        let mut sender = self.sender().await?;
        let builder = hyper::Request::builder()
            .uri(path)
            .header(hyper::header::HOST, self.authority.as_str())
            .header(hyper::header::USER_AGENT, "calmcache-mixload");
        let req = if post {
            builder
                .method(hyper::Method::POST)
                .header(
                    hyper::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(Full::new(Bytes::from_static(b"comment=hello&soak=1")))?
        } else {
            builder.body(Full::new(Bytes::new()))?
        };
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        if !sender.is_closed() {
            if let Ok(mut idle) = self.idle.lock() {
                idle.push(sender);
            }
        }
        Ok((status, body))
    }
}

/// Runs request `path` and judges it.
async fn one(pool: &Pool, args: &Args, kind: usize, path: &str, due: Instant) -> Outcome {
    let deadline = due + args.timeout;
    let res = tokio::time::timeout_at(deadline, pool.request(kind == 2, path)).await;
    let latency_ms = Instant::now().saturating_duration_since(due).as_secs_f64() * 1000.0;
    let (status, failed, corrupt) = match res {
        Ok(Ok((code, body))) => {
            let corrupt = code == 200 && kind != 2 && !body_ok(path, &body, args.body_bytes);
            (code.to_string(), !(200..400).contains(&code), corrupt)
        }
        Ok(Err(e)) => (error_kind(&e), true, false),
        Err(_) => ("timeout".to_string(), true, false),
    };
    Outcome {
        kind,
        bucket: 0,
        latency_ms,
        status,
        failed,
        corrupt,
    }
}

fn error_kind(e: &anyhow::Error) -> String {
    let msg = e.root_cause().to_string();
    msg.chars().take(60).collect()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn new_pool(args: &Args) -> Result<Arc<Pool>> {
    let uri: hyper::Uri = args
        .base
        .parse()
        .with_context(|| format!("bad --base {:?}", args.base))?;
    if uri.scheme_str() != Some("http") {
        bail!("only http:// is supported: {}", args.base);
    }
    let auth = uri.authority().context("--base has no host")?;
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    Ok(Arc::new(Pool {
        host_port: format!("{}:{}", auth.host(), auth.port_u16().unwrap_or(80)),
        authority: auth.as_str().to_string(),
        idle: Mutex::new(Vec::new()),
        permits: Semaphore::new(args.connections),
        opened: AtomicU64::new(0),
    }))
}

/// The timed, open-loop run.
/// How late the dispatcher sent its latest request at worst (µs): a
/// generator that cannot keep up shows here rather than in the proxy's figures.
static MAX_DISPATCH_LAG_US: AtomicU64 = AtomicU64::new(0);

async fn run(args: Arc<Args>) -> Result<(Vec<Outcome>, u64, u64)> {
    if !(args.rps.is_finite() && args.rps > 0.0) {
        bail!("--rps must be a positive number");
    }
    if args.bucket_ms == 0 {
        bail!("--bucket-ms must be at least 1");
    }
    let cum = parse_mix(&args.mix)?;
    let pool = new_pool(&args)?;
    let nonce = args.nonce.clone().unwrap_or_else(|| unix_ms().to_string());
    let total = (args.rps * args.duration.as_secs_f64() + 1e-9).floor() as u64;
    let (tx, mut rx) = mpsc::unbounded_channel::<Outcome>();
    let start = Instant::now() + Duration::from_millis(10);
    let start_unix = unix_ms() + 10;
    let hard_stop = start + args.duration + HARD_STOP_GRACE;
    let handle = tokio::runtime::Handle::current();
    let dispatcher = {
        let (pool, args) = (pool.clone(), args.clone());
        let (start_std, stop_std) = (start.into_std(), hard_stop.into_std());
        // Its own OS thread: std::thread::sleep is precise to tens of µs.
        std::thread::spawn(move || {
            for i in 0..total {
                let offset = Duration::from_secs_f64(i as f64 / args.rps);
                let due = start_std + offset;
                let now = std::time::Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let now = std::time::Instant::now();
                if now >= stop_std {
                    break;
                }
                let lag = now.saturating_duration_since(due).as_micros() as u64;
                MAX_DISPATCH_LAG_US.fetch_max(lag, Ordering::Relaxed);
                let (kind, path) = plan(i, &cum, &args, &nonce);
                let bucket_ms = start_unix + offset.as_millis() as u64;
                let bucket = bucket_ms - bucket_ms % args.bucket_ms;
                let (pool, args, tx) = (pool.clone(), args.clone(), tx.clone());
                handle.spawn(async move {
                    let mut o = one(&pool, &args, kind, &path, Instant::from_std(due)).await;
                    o.bucket = bucket;
                    let _ = tx.send(o);
                });
            }
        })
    };
    let mut out = Vec::with_capacity(total as usize);
    let _ = tokio::time::timeout_at(hard_stop + Duration::from_secs(1), async {
        while let Some(o) = rx.recv().await {
            out.push(o);
        }
    })
    .await;
    let _ = dispatcher.join();
    Ok((out, total, pool.opened.load(Ordering::Relaxed)))
}

/// `--sweep`: every hot URL once.
async fn sweep(args: Arc<Args>) -> Result<(Vec<Outcome>, u64, u64)> {
    let pool = new_pool(&args)?;
    // At most --connections requests at once; each one's timeout starts when
    // it is sent, not when it was queued.
    let slots = Arc::new(Semaphore::new(args.connections));
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..args.hot {
        let (pool, args) = (pool.clone(), args.clone());
        let slot = slots.clone().acquire_owned().await?;
        tasks.spawn(async move {
            let path = format!("{}{}", args.hot_prefix, k);
            let o = one(&pool, &args, 0, &path, Instant::now()).await;
            drop(slot);
            o
        });
    }
    let mut out = Vec::with_capacity(args.hot as usize);
    while let Some(r) = tasks.join_next().await {
        if let Ok(o) = r {
            out.push(o);
        }
    }
    Ok((out, args.hot, pool.opened.load(Ordering::Relaxed)))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The summary line: per kind and in total.
fn summary(args: &Args, out: &[Outcome], scheduled: u64, opened: u64) -> serde_json::Value {
    let mut kinds = serde_json::Map::new();
    for (k, name) in KINDS.iter().enumerate() {
        let mine: Vec<&Outcome> = out.iter().filter(|o| o.kind == k).collect();
        if mine.is_empty() {
            continue;
        }
        let mut lat: Vec<f64> = mine.iter().map(|o| o.latency_ms).collect();
        lat.sort_by(f64::total_cmp);
        let mut status: BTreeMap<&str, u64> = BTreeMap::new();
        for o in &mine {
            *status.entry(o.status.as_str()).or_default() += 1;
        }
        kinds.insert(
            name.to_string(),
            json!({
                "requests": mine.len(),
                "failed": mine.iter().filter(|o| o.failed).count(),
                "corrupt": mine.iter().filter(|o| o.corrupt).count(),
                "slow": mine.iter().filter(|o| o.latency_ms > args.slow_ms).count(),
                "p50_ms": round3(percentile(&lat, 50.0)),
                "p99_ms": round3(percentile(&lat, 99.0)),
                "max_ms": round3(lat.last().copied().unwrap_or(0.0)),
                "status": status,
            }),
        );
    }
    let unfinished = scheduled.saturating_sub(out.len() as u64);
    json!({
        "mode": if args.sweep { "sweep" } else { "run" },
        "rps": args.rps,
        "duration_s": args.duration.as_secs_f64(),
        "scheduled": scheduled,
        "requests": out.len() as u64 + unfinished,
        "failed": out.iter().filter(|o| o.failed).count() as u64 + unfinished,
        "corrupt": out.iter().filter(|o| o.corrupt).count(),
        "unfinished": unfinished,
        "connections_opened": opened,
        "max_dispatch_lag_ms": round3(MAX_DISPATCH_LAG_US.load(Ordering::Relaxed) as f64 / 1000.0),
        "kinds": kinds,
    })
}

fn write_timeline(path: &PathBuf, out: &[Outcome], slow_ms: f64) -> Result<()> {
    // (bucket, kind) -> [requests, failed, corrupt, slow]
    let mut t: BTreeMap<(u64, usize), [u64; 4]> = BTreeMap::new();
    for o in out {
        let c = t.entry((o.bucket, o.kind)).or_default();
        c[0] += 1;
        c[1] += u64::from(o.failed);
        c[2] += u64::from(o.corrupt);
        c[3] += u64::from(o.latency_ms > slow_ms);
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    for ((bucket, kind), c) in &t {
        writeln!(
            f,
            "{bucket} {} {} {} {} {}",
            KINDS[*kind], c[0], c[1], c[2], c[3]
        )?;
    }
    f.flush()?;
    Ok(())
}

fn main() -> Result<()> {
    let args = Arc::new(Args::parse());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let (out, scheduled, opened) = if args.sweep {
        rt.block_on(sweep(args.clone()))?
    } else {
        rt.block_on(run(args.clone()))?
    };
    if let Some(path) = &args.timeline {
        write_timeline(path, &out, args.slow_ms)?;
    }
    println!("{}", summary(&args, &out, scheduled, opened));
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(path: &str, size: usize) -> Vec<u8> {
        let mut s = format!(
            "<!doctype html>\n<html><head><title>calmcache origin</title></head><body>\n\
             <h1>A slow page: {path}</h1>\n<p>Generated at 1.000 (unix time), request #1 to the origin.</p>\n"
        );
        let fixed = s.len() + 8 + 15;
        s.push_str("<!--");
        s.push_str(&"x".repeat(size - fixed));
        s.push_str("-->\n</body></html>\n");
        s.into_bytes()
    }

    #[test]
    fn bodies_are_checked_against_their_path_and_size() {
        let good = page("/hot/7", 1024);
        assert_eq!(good.len(), 1024);
        assert!(body_ok("/hot/7", &good, 1024));
        assert!(body_ok("/hot/7", &good, 0));
        assert!(!body_ok("/hot/8", &good, 1024), "another URL's body");
        assert!(!body_ok("/hot/7", &good[..1000], 1024), "cut short");
        let mut zeroed = good.clone();
        zeroed[500..600].fill(0);
        assert!(!body_ok("/hot/7", &zeroed, 1024), "zero-filled block");
        assert!(!body_ok("/hot/7", &good, 2048), "wrong size");
    }

    #[test]
    fn mix_and_plan() {
        assert_eq!(
            parse_mix("hit:80,miss:10,post:10").expect("ok"),
            [80, 90, 100]
        );
        assert!(parse_mix("hit:0").is_err());
        assert!(parse_mix("get:1").is_err());
        let args = Args::parse_from(["mixload", "--base", "http://127.0.0.1:1", "--hot", "100"]);
        let cum = parse_mix(&args.mix).expect("ok");
        let mut n = [0u64; 3];
        for i in 0..10_000 {
            let (k, path) = plan(i, &cum, &args, "n");
            n[k] += 1;
            if k == 0 {
                let id: u64 = path.trim_start_matches("/hot/").parse().expect("number");
                assert!(id < 100);
            }
        }
        assert!((7_500..8_500).contains(&n[0]), "{n:?}");
        assert!(
            (700..1_300).contains(&n[1]) && (700..1_300).contains(&n[2]),
            "{n:?}"
        );
    }
}
