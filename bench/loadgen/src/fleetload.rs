//! `fleetload`: the client of `bench/fleet-many`, a closed-loop load spread
//! over several nodes the way a round-robin balancer spreads it, over the
//! URL catalog of [`calmcache_loadgen::catalog`] with Zipf popularity.
//!
//! `--connections` workers each send one request at a time until
//! `--duration` is over (each request bounded by `--timeout`). A request
//! picks its URL by Zipf rank (`--zipf` exponent over `--urls`, or only the
//! `--top` hottest) and an `Accept-Language` of [`catalog::LANGS`], then the
//! next node in round-robin order that is not marked down. Like a balancer
//! (NGINX `proxy_next_upstream error`) it moves an idempotent GET to the
//! next node, and marks the node down for `--down-ms`, when the node
//! **refuses the connection** or **closes it before any byte of an
//! answer**: those are counted (`retried_refused`, `retried_closed`), not
//! failed. A request **fails** (`errors`) when every node was tried, or
//! when its answer is not 200, its body is cut short, too long or not the
//! URL's exact bytes (every byte is checked against the catalog), or it
//! outlasts `--timeout`.
//!
//! It prints one JSON object: requests, errors by kind, retries, bytes,
//! req/s, latency p50/p99/max (all answers, and small bodies alone), answers
//! by cache status (`local_hit`, `fleet_hit`: `Cache-Status: ...; hit;
//! ...detail=fleet`, `forwarded`, `unknown`) and requests per node.
//! It must not know what product the nodes run beyond reading the two
//! cache-status headers.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use calmcache_loadgen::catalog::{self, Catalog, CatalogArgs, Item, LANGS};
use calmcache_loadgen::parse_duration;
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "fleetload",
    about = "Closed-loop Zipf load over a URL catalog, spread over nodes like a round-robin balancer"
)]
struct Args {
    /// Nodes, comma-separated host:port
    #[arg(long)]
    targets: String,
    /// Workers (requests in flight at once), over all nodes
    #[arg(long, default_value_t = 24)]
    connections: usize,
    /// Length of the run
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Per-request timeout (whole body)
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    catalog: CatalogArgs,
    /// Zipf exponent of the popularity ranks
    #[arg(long, default_value_t = 1.0)]
    zipf: f64,
    /// Only the K hottest URLs (0: all)
    #[arg(long, default_value_t = 0)]
    top: u64,
    /// Leave out large URLs (a probe of small hits)
    #[arg(long)]
    small_only: bool,
    /// Host header of every request (the balancer's name: one key on every node)
    #[arg(long, default_value = "fleet.bench")]
    host: String,
    /// How long a node that refused or closed stays skipped, ms
    #[arg(long, default_value_t = 200)]
    down_ms: u64,
    /// Seed of the URL and language picks
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runtime worker threads
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// A node and what the balancer knows of it.
struct Node {
    addr: String,
    down_until: AtomicU64,
    answered: AtomicU64,
}

/// How one request ended.
enum Outcome {
    /// A 200 with the URL's exact bytes.
    Ok { status: CacheClass, bytes: u64 },
    /// Answered wrongly (status, body) or cut mid-answer.
    Failed(Failure),
}

#[derive(Clone, Copy)]
enum Failure {
    Status,
    Body,
    Transport,
    NoNode,
    Timeout,
}

#[derive(Clone, Copy)]
enum CacheClass {
    LocalHit,
    FleetHit,
    Forwarded,
    Unknown,
}

/// One worker's tally (merged at the end).
#[derive(Default)]
struct Tally {
    requests: u64,
    ok: u64,
    bytes: u64,
    failures: [u64; 5],
    retried_refused: u64,
    retried_closed: u64,
    classes: [u64; 4],
    lat_us: Vec<u32>,
    lat_small_us: Vec<u32>,
}

struct Run {
    nodes: Vec<Node>,
    rr: AtomicUsize,
    catalog: Catalog,
    cdf: Vec<f64>,
    args: Args,
    started: Instant,
}

/// Cumulative Zipf weights of ranks 1..=n (normalised to end at 1).
fn zipf_cdf(n: u64, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            acc += 1.0 / (k as f64).powf(s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

/// xorshift64*: the workers' picks, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn classify(headers: &hyper::HeaderMap) -> CacheClass {
    if let Some(v) = headers.get("cache-status").and_then(|v| v.to_str().ok()) {
        let v = v.to_ascii_lowercase();
        return match (v.contains("; hit"), v.contains("detail=fleet")) {
            (true, true) => CacheClass::FleetHit,
            (true, false) => CacheClass::LocalHit,
            _ => CacheClass::Forwarded,
        };
    }
    match headers.get("x-cache-status").and_then(|v| v.to_str().ok()) {
        Some("HIT" | "STALE" | "UPDATING" | "REVALIDATED") => CacheClass::LocalHit,
        Some(_) => CacheClass::Forwarded,
        None => CacheClass::Unknown,
    }
}

fn now_ms(run: &Run) -> u64 {
    run.started.elapsed().as_millis() as u64
}

impl Run {
    /// The next node in round-robin order that is not marked down (the
    /// plain next one when all are).
    fn next_node(&self) -> usize {
        let n = self.nodes.len();
        let now = now_ms(self);
        let first = self.rr.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| (first + k) % n)
            .find(|&i| self.nodes[i].down_until.load(Ordering::Relaxed) <= now)
            .unwrap_or(first % n)
    }

    fn mark_down(&self, node: usize) {
        let until = now_ms(self) + self.args.down_ms;
        self.nodes[node]
            .down_until
            .fetch_max(until, Ordering::Relaxed);
    }

    fn pick(&self, rng: &mut Rng) -> (Item, usize) {
        loop {
            let top = if self.args.top > 0 {
                self.args.top.min(self.catalog.urls)
            } else {
                self.catalog.urls
            };
            let u = rng.unit() * self.cdf[(top - 1) as usize];
            let rank = self.cdf.partition_point(|&c| c < u) as u64;
            let lang = (rng.next() % LANGS.len() as u64) as usize;
            if let Some(item) = self.catalog.item(rank.min(top - 1)) {
                if !(self.args.small_only && item.large) {
                    return (item, lang);
                }
            }
        }
    }

    async fn connect(&self, node: usize) -> Result<SendRequest<Empty<Bytes>>> {
        let stream = TcpStream::connect(&self.nodes[node].addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// One request, moved to the next node while nodes refuse or close
    /// before answering.
    async fn fetch(
        &self,
        conns: &mut [Option<SendRequest<Empty<Bytes>>>],
        item: Item,
        lang: usize,
        tally: &mut Tally,
    ) -> Outcome {
        let path = item.path();
        for _ in 0..2 * self.nodes.len() {
            let node = self.next_node();
            if conns[node].is_none() {
                match self.connect(node).await {
                    Ok(s) => conns[node] = Some(s),
                    Err(_) => {
                        tally.retried_refused += 1;
                        self.mark_down(node);
                        continue;
                    }
                }
            }
            let Some(sender) = conns[node].as_mut() else {
                continue;
            };
            let head = async {
                sender.ready().await?;
                let req = hyper::Request::get(path.as_str())
                    .header(hyper::header::HOST, &self.args.host)
                    .header(hyper::header::ACCEPT_LANGUAGE, LANGS[lang])
                    .body(Empty::new())?;
                anyhow::Ok(sender.send_request(req).await?)
            };
            let resp = match head.await {
                Ok(resp) => resp,
                Err(_) => {
                    // Closed before any byte of an answer: an idempotent GET
                    // a balancer moves to the next node.
                    conns[node] = None;
                    tally.retried_closed += 1;
                    self.mark_down(node);
                    continue;
                }
            };
            self.nodes[node].answered.fetch_add(1, Ordering::Relaxed);
            let outcome = read_answer(resp, item, lang).await;
            if matches!(outcome, Outcome::Failed(Failure::Transport | Failure::Body)) {
                conns[node] = None;
            }
            return outcome;
        }
        Outcome::Failed(Failure::NoNode)
    }

    async fn worker(self: Arc<Self>, seed: u64) -> Tally {
        let mut rng = Rng(catalog::mix(seed) | 1);
        let mut conns: Vec<Option<SendRequest<Empty<Bytes>>>> =
            (0..self.nodes.len()).map(|_| None).collect();
        let mut tally = Tally::default();
        let deadline = self.started + self.args.duration;
        while Instant::now() < deadline {
            let (item, lang) = self.pick(&mut rng);
            let t0 = Instant::now();
            let outcome = tokio::time::timeout(
                self.args.timeout,
                self.fetch(&mut conns, item, lang, &mut tally),
            )
            .await;
            let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
            tally.requests += 1;
            match outcome {
                Ok(Outcome::Ok { status, bytes }) => {
                    tally.ok += 1;
                    tally.bytes += bytes;
                    tally.classes[status as usize] += 1;
                    tally.lat_us.push(us);
                    if !item.large {
                        tally.lat_small_us.push(us);
                    }
                }
                Ok(Outcome::Failed(f)) => tally.failures[f as usize] += 1,
                Err(_) => {
                    tally.failures[Failure::Timeout as usize] += 1;
                    conns.iter_mut().for_each(|c| *c = None);
                }
            }
        }
        tally
    }
}

/// Reads and checks an answer: status 200, every body byte the URL's.
async fn read_answer(
    resp: hyper::Response<hyper::body::Incoming>,
    item: Item,
    lang: usize,
) -> Outcome {
    if resp.status() != hyper::StatusCode::OK {
        let _ = resp.into_body().collect().await;
        return Outcome::Failed(Failure::Status);
    }
    let class = classify(resp.headers());
    let offset = item.offset(item.variant(Some(LANGS[lang])));
    let mut body = resp.into_body();
    let mut at = 0u64;
    let mut good = true;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Outcome::Failed(Failure::Transport);
        };
        if let Ok(data) = frame.into_data() {
            good &=
                at + data.len() as u64 <= item.size && catalog::chunk_matches(offset, at, &data);
            at += data.len() as u64;
        }
    }
    if !good || at != item.size {
        return Outcome::Failed(Failure::Body);
    }
    Outcome::Ok {
        status: class,
        bytes: at,
    }
}

fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    (f64::from(sorted[i]) / 1000.0 * 1000.0).round() / 1000.0
}

fn merge(tallies: Vec<Tally>) -> Tally {
    let mut t = Tally::default();
    for x in tallies {
        t.requests += x.requests;
        t.ok += x.ok;
        t.bytes += x.bytes;
        t.retried_refused += x.retried_refused;
        t.retried_closed += x.retried_closed;
        for i in 0..5 {
            t.failures[i] += x.failures[i];
        }
        for i in 0..4 {
            t.classes[i] += x.classes[i];
        }
        t.lat_us.extend(x.lat_us);
        t.lat_small_us.extend(x.lat_small_us);
    }
    t.lat_us.sort_unstable();
    t.lat_small_us.sort_unstable();
    t
}

fn report(run: &Run, t: &Tally, secs: f64) -> serde_json::Value {
    let f = |k: Failure| t.failures[k as usize];
    let errors: u64 = t.failures.iter().sum();
    json!({
        "requests": t.requests,
        "ok": t.ok,
        "errors": errors,
        "errors_status": f(Failure::Status),
        "errors_body": f(Failure::Body),
        "errors_transport": f(Failure::Transport),
        "errors_no_node": f(Failure::NoNode),
        "errors_timeout": f(Failure::Timeout),
        "retried_refused": t.retried_refused,
        "retried_closed": t.retried_closed,
        "seconds": (secs * 1000.0).round() / 1000.0,
        "rps": (t.requests as f64 / secs * 10.0).round() / 10.0,
        "mib": (t.bytes as f64 / 1_048_576.0 * 10.0).round() / 10.0,
        "p50_ms": percentile_ms(&t.lat_us, 50.0),
        "p99_ms": percentile_ms(&t.lat_us, 99.0),
        "max_ms": percentile_ms(&t.lat_us, 100.0),
        "p99_small_ms": percentile_ms(&t.lat_small_us, 99.0),
        "local_hit": t.classes[CacheClass::LocalHit as usize],
        "fleet_hit": t.classes[CacheClass::FleetHit as usize],
        "forwarded": t.classes[CacheClass::Forwarded as usize],
        "unknown": t.classes[CacheClass::Unknown as usize],
        "per_node": run.nodes.iter().map(|n| n.answered.load(Ordering::Relaxed)).collect::<Vec<_>>(),
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.connections == 0 || args.catalog.urls == 0 {
        bail!("--connections and --urls must be at least 1");
    }
    let nodes: Vec<Node> = args
        .targets
        .split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| Node {
            addr: t.trim().to_owned(),
            down_until: AtomicU64::new(0),
            answered: AtomicU64::new(0),
        })
        .collect();
    if nodes.is_empty() {
        bail!("--targets names no node");
    }
    let catalog = args.catalog.catalog();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async move {
        catalog::pattern();
        let run = Arc::new(Run {
            nodes,
            rr: AtomicUsize::new(0),
            catalog,
            cdf: zipf_cdf(args.catalog.urls, args.zipf),
            started: Instant::now(),
            args,
        });
        let workers: Vec<_> = (0..run.args.connections)
            .map(|w| {
                tokio::spawn(
                    run.clone()
                        .worker(run.args.seed.wrapping_mul(1000) + w as u64),
                )
            })
            .collect();
        let mut tallies = Vec::new();
        for w in workers {
            tallies.push(w.await?);
        }
        let secs = run.started.elapsed().as_secs_f64();
        let t = merge(tallies);
        println!("{}", report(&run, &t, secs));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_at_one_gives_the_hundred_hottest_about_half() {
        let cdf = zipf_cdf(10_000, 1.0);
        assert!((cdf[9_999] - 1.0).abs() < 1e-9);
        assert!((0.52..0.54).contains(&cdf[99]), "{}", cdf[99]);
    }

    #[test]
    fn cache_status_headers_are_classified() {
        let class = |name: &'static str, value: &'static str| {
            let mut h = hyper::HeaderMap::new();
            h.insert(name, hyper::header::HeaderValue::from_static(value));
            classify(&h) as usize
        };
        assert_eq!(
            class("cache-status", "calmcache; hit; ttl=5"),
            CacheClass::LocalHit as usize
        );
        assert_eq!(
            class("cache-status", "calmcache; hit; ttl=9; detail=fleet"),
            CacheClass::FleetHit as usize
        );
        assert_eq!(
            class(
                "cache-status",
                "calmcache; fwd=uri-miss; fwd-status=200; stored"
            ),
            CacheClass::Forwarded as usize
        );
        assert_eq!(
            class("x-cache-status", "UPDATING"),
            CacheClass::LocalHit as usize
        );
        assert_eq!(
            class("x-cache-status", "MISS"),
            CacheClass::Forwarded as usize
        );
        assert_eq!(
            classify(&hyper::HeaderMap::new()) as usize,
            CacheClass::Unknown as usize
        );
    }
}
