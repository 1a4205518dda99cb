//! `loadgen`: an open-loop, constant-rate HTTP/1.1 load generator for the
//! calmcache benchmarks.
//!
//! Request `i` is due at `start + i / rps`. Its latency is measured from that
//! scheduled instant, not from when a connection happened to be free, so a
//! stalled server cannot slow the generator down and hide its own stalls
//! (no coordinated omission). Requests run on a pool of keepalive connections
//! that grows on demand up to `--connections`; a request that finds every
//! connection busy waits for one, and that wait is part of its latency.
//!
//! The run is bounded in count (`rps * (warmup + duration)` requests) and in
//! time (everything still running at `warmup + duration + 10 s` is abandoned
//! and counted as an error).

use calmcache_loadgen::parse_duration;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;

/// Extra time after the last scheduled request before the run is cut off.
const HARD_STOP_GRACE: Duration = Duration::from_secs(10);

#[derive(Parser, Debug, Clone)]
#[command(
    name = "loadgen",
    about = "Open-loop constant-rate HTTP load generator (latency from the scheduled start)"
)]
struct Args {
    /// Target URL (http:// only), e.g. http://127.0.0.1:8080/hot
    #[arg(long)]
    url: String,
    /// Requests per second (may be fractional)
    #[arg(long)]
    rps: f64,
    /// Measured duration, e.g. 30s, 500ms, 2m
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up before the measured part: requests are sent but not counted
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    warmup: Duration,
    /// Maximum number of keepalive connections
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// A request slower than this (ms, from its scheduled start) counts as "waited"
    #[arg(long, default_value_t = 50.0)]
    miss_threshold_ms: f64,
    /// Per-request timeout (counted from the scheduled start)
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Runtime worker threads (1 keeps the generator off the proxy's core as much as possible)
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print one JSON line instead of a table
    #[arg(long)]
    json: bool,
}

/// The open-loop schedule: `total` requests, request `i` due `i / rps` after start.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Schedule {
    rps: f64,
    total: u64,
    warmup: Duration,
}

impl Schedule {
    fn new(rps: f64, warmup: Duration, duration: Duration) -> Result<Self> {
        if !(rps.is_finite() && rps > 0.0) {
            bail!("--rps must be a positive number");
        }
        let span = (warmup + duration).as_secs_f64();
        // Small epsilon so that e.g. 10 rps * 3 s gives exactly 30, not 29.
        let total = (rps * span + 1e-9).floor() as u64;
        Ok(Schedule { rps, total, warmup })
    }

    /// Offset of request `i` from the start of the run.
    fn offset(&self, i: u64) -> Duration {
        Duration::from_secs_f64(i as f64 / self.rps)
    }

    /// Whether request `i` falls in the measured part (not the warm-up).
    fn counted(&self, i: u64) -> bool {
        self.offset(i) >= self.warmup
    }

    fn counted_total(&self) -> u64 {
        (0..self.total).filter(|&i| self.counted(i)).count() as u64
    }
}

/// Nearest-rank percentile (`p` in 0..=100) of an ascending slice.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let idx = rank.clamp(1, sorted.len()) - 1;
    Some(sorted[idx])
}

/// Reduces a cache-status header to a short tally key.
///
/// RFC 9211 `Cache-Status`: the last list member is the cache nearest the
/// client; the cache name and the `ttl`/`key`/`fwd-status` parameters are
/// dropped, e.g. `calmcache; hit; ttl=0.4; detail=refresh-early` becomes
/// `hit; detail=refresh-early` and `calmcache; fwd=miss; stored` becomes
/// `fwd=miss; stored`. NGINX's `X-Cache-Status` and Varnish's `X-Cache`
/// (set by our VCL) are kept as they are, prefixed with the header name.
fn cache_key(
    cache_status: Option<&str>,
    x_cache_status: Option<&str>,
    x_cache: Option<&str>,
) -> String {
    if let Some(v) = cache_status {
        let last = v.rsplit(',').next().unwrap_or("").trim();
        let params: Vec<&str> = last
            .split(';')
            .skip(1)
            .map(str::trim)
            .filter(|p| {
                !p.is_empty()
                    && !p.starts_with("ttl=")
                    && !p.starts_with("key=")
                    && !p.starts_with("fwd-status=")
            })
            .collect();
        return if params.is_empty() {
            "(empty)".to_string()
        } else {
            params.join("; ")
        };
    }
    if let Some(v) = x_cache_status {
        return format!("x-cache-status={}", v.trim());
    }
    if let Some(v) = x_cache {
        return format!("x-cache={}", v.trim());
    }
    "(none)".to_string()
}

/// Whether a tally key means "served from cache without waiting for the origin".
fn is_hit(key: &str) -> bool {
    if let Some(v) = key.strip_prefix("x-cache-status=") {
        // NGINX: STALE and UPDATING are served from cache; REVALIDATED waited for a 304.
        return matches!(v, "HIT" | "STALE" | "UPDATING");
    }
    if let Some(v) = key.strip_prefix("x-cache=") {
        return v.eq_ignore_ascii_case("hit");
    }
    key.split(';').any(|p| p.trim() == "hit")
}

#[derive(Debug, Clone)]
struct Record {
    /// Latency from the scheduled start, in ms.
    latency_ms: f64,
    /// HTTP status, or `None` on a transport error or timeout.
    status: Option<u16>,
    cache: String,
    /// Short reason when `status` is `None`.
    error: Option<String>,
    /// How late the dispatcher started the request (generator health), in ms.
    dispatch_lag_ms: f64,
}

#[derive(Debug, Default)]
struct Summary {
    requests: u64,
    errors: u64,
    unfinished: u64,
    waited: u64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    mean_ms: f64,
    hits: u64,
    cache_status: BTreeMap<String, u64>,
    status: BTreeMap<String, u64>,
    error_kinds: BTreeMap<String, u64>,
    max_dispatch_lag_ms: f64,
    mean_dispatch_lag_ms: f64,
    connections_opened: u64,
}

/// `expected` is the number of counted requests scheduled; any that produced
/// no record (cut off by the hard stop) are errors, unfinished and waited.
fn summarize(records: &[Record], expected: u64, miss_threshold_ms: f64) -> Summary {
    let mut s = Summary::default();
    let mut lat: Vec<f64> = Vec::with_capacity(records.len());
    for r in records {
        match r.status {
            Some(code) => {
                *s.status.entry(code.to_string()).or_default() += 1;
                if code >= 400 {
                    s.errors += 1;
                }
            }
            None => {
                *s.status.entry("error".to_string()).or_default() += 1;
                let kind = r.error.clone().unwrap_or_else(|| "unknown".to_string());
                *s.error_kinds.entry(kind).or_default() += 1;
                s.errors += 1;
            }
        }
        if r.latency_ms > miss_threshold_ms || r.status.is_none() {
            s.waited += 1;
        }
        if r.status.is_some() {
            if is_hit(&r.cache) {
                s.hits += 1;
            }
            *s.cache_status.entry(r.cache.clone()).or_default() += 1;
        }
        lat.push(r.latency_ms);
        s.max_dispatch_lag_ms = s.max_dispatch_lag_ms.max(r.dispatch_lag_ms);
        s.mean_dispatch_lag_ms += r.dispatch_lag_ms;
    }
    if !records.is_empty() {
        s.mean_dispatch_lag_ms /= records.len() as f64;
    }
    let unfinished = expected.saturating_sub(records.len() as u64);
    s.unfinished = unfinished;
    s.errors += unfinished;
    s.waited += unfinished;
    s.requests = records.len() as u64 + unfinished;
    if unfinished > 0 {
        *s.status.entry("unfinished".to_string()).or_default() += unfinished;
    }
    lat.sort_by(f64::total_cmp);
    s.p50_ms = percentile(&lat, 50.0).unwrap_or(0.0);
    s.p90_ms = percentile(&lat, 90.0).unwrap_or(0.0);
    s.p99_ms = percentile(&lat, 99.0).unwrap_or(0.0);
    s.max_ms = lat.last().copied().unwrap_or(0.0);
    s.mean_ms = if lat.is_empty() {
        0.0
    } else {
        lat.iter().sum::<f64>() / lat.len() as f64
    };
    s
}

struct Target {
    host_port: String,
    host_header: String,
    path: String,
}

fn parse_url(url: &str) -> Result<Target> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("bad --url {url:?}"))?;
    if uri.scheme_str() != Some("http") {
        bail!("only http:// URLs are supported: {url}");
    }
    let auth = uri.authority().context("URL has no host")?;
    let port = auth.port_u16().unwrap_or(80);
    let host = auth.host();
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    Ok(Target {
        host_port: format!("{host}:{port}"),
        host_header: auth.as_str().to_string(),
        path,
    })
}

/// Keepalive connections; concurrency (and so the number of connections) is
/// capped by the semaphore, idle ones wait in the stack.
struct Pool {
    target: Target,
    idle: Mutex<Vec<SendRequest<Empty<Bytes>>>>,
    permits: Semaphore,
    opened: AtomicU64,
}

impl Pool {
    fn take_idle(&self) -> Option<SendRequest<Empty<Bytes>>> {
        self.idle.lock().ok()?.pop()
    }

    fn put_idle(&self, s: SendRequest<Empty<Bytes>>) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(s);
        }
    }

    async fn connect(&self) -> Result<SendRequest<Empty<Bytes>>> {
        let stream = TcpStream::connect(&self.target.host_port).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(sender)
    }

    /// One request on a pooled connection: (status, cache tally key).
    async fn request(&self) -> Result<(u16, String)> {
        let _permit = self.permits.acquire().await?;
        let mut sender = loop {
            match self.take_idle() {
                Some(mut s) => {
                    if s.ready().await.is_ok() {
                        break s;
                    }
                }
                None => break self.connect().await?,
            }
        };
        let req = hyper::Request::get(self.target.path.as_str())
            .header(hyper::header::HOST, self.target.host_header.as_str())
            .header(hyper::header::USER_AGENT, "calmcache-loadgen")
            .body(Empty::<Bytes>::new())?;
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let h = resp.headers();
        let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let key = cache_key(
            get("cache-status").as_deref(),
            get("x-cache-status").as_deref(),
            get("x-cache").as_deref(),
        );
        // Read the whole body: the latency is the time to the last byte.
        resp.into_body().collect().await?;
        if !sender.is_closed() {
            self.put_idle(sender);
        }
        Ok((status, key))
    }
}

async fn run(args: Args) -> Result<Summary> {
    let schedule = Schedule::new(args.rps, args.warmup, args.duration)?;
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    let pool = Arc::new(Pool {
        target: parse_url(&args.url)?,
        idle: Mutex::new(Vec::new()),
        permits: Semaphore::new(args.connections),
        opened: Default::default(),
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<Record>();
    let start = Instant::now() + Duration::from_millis(10);
    let hard_stop = start + args.warmup + args.duration + HARD_STOP_GRACE;
    let timeout = args.timeout;

    // The schedule runs on its own OS thread: `std::thread::sleep` wakes within
    // tens of microseconds, where the runtime's millisecond timer wheel would
    // add about 1.5 ms of the generator's own lateness to every latency.
    let stop = Arc::new(AtomicBool::new(false));
    let dispatcher = {
        let pool = pool.clone();
        let stop = stop.clone();
        let handle = tokio::runtime::Handle::current();
        let (start, hard_stop) = (start.into_std(), hard_stop.into_std());
        std::thread::spawn(move || {
            for i in 0..schedule.total {
                let due = start + schedule.offset(i);
                let now = std::time::Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if stop.load(Ordering::Relaxed) || std::time::Instant::now() >= hard_stop {
                    break;
                }
                let counted = schedule.counted(i);
                let lag = std::time::Instant::now().saturating_duration_since(due);
                let pool = pool.clone();
                let tx = tx.clone();
                let (due, hard_stop) = (Instant::from_std(due), Instant::from_std(hard_stop));
                handle.spawn(async move {
                    let deadline = (due + timeout).min(hard_stop);
                    let res = tokio::time::timeout_at(deadline, pool.request()).await;
                    let latency = Instant::now().saturating_duration_since(due);
                    let (status, cache, error) = match res {
                        Ok(Ok((status, key))) => (Some(status), key, None),
                        Ok(Err(e)) => (None, String::new(), Some(error_kind(&e))),
                        Err(_) => (None, String::new(), Some("timeout".to_string())),
                    };
                    if counted {
                        let _ = tx.send(Record {
                            latency_ms: latency.as_secs_f64() * 1000.0,
                            status,
                            cache,
                            error,
                            dispatch_lag_ms: lag.as_secs_f64() * 1000.0,
                        });
                    }
                });
            }
        })
    };

    let mut records = Vec::with_capacity(schedule.counted_total() as usize);
    let collect = async {
        while let Some(r) = rx.recv().await {
            records.push(r);
        }
    };
    // The channel closes once the dispatcher and every request task are done;
    // the hard stop bounds the wait in any case.
    let _ = tokio::time::timeout_at(hard_stop + Duration::from_secs(1), collect).await;
    stop.store(true, Ordering::Relaxed);
    let _ = dispatcher.join();
    let mut summary = summarize(&records, schedule.counted_total(), args.miss_threshold_ms);
    summary.connections_opened = pool.opened.load(Ordering::Relaxed);
    Ok(summary)
}

fn to_json(args: &Args, s: &Summary) -> serde_json::Value {
    serde_json::json!({
        "url": args.url,
        "rps": args.rps,
        "duration_s": args.duration.as_secs_f64(),
        "warmup_s": args.warmup.as_secs_f64(),
        "miss_threshold_ms": args.miss_threshold_ms,
        "requests": s.requests,
        "errors": s.errors,
        "unfinished": s.unfinished,
        "waited": s.waited,
        "hits": s.hits,
        "p50_ms": round3(s.p50_ms),
        "p90_ms": round3(s.p90_ms),
        "p99_ms": round3(s.p99_ms),
        "max_ms": round3(s.max_ms),
        "mean_ms": round3(s.mean_ms),
        "max_dispatch_lag_ms": round3(s.max_dispatch_lag_ms),
        "mean_dispatch_lag_ms": round3(s.mean_dispatch_lag_ms),
        "connections_opened": s.connections_opened,
        "status": s.status,
        "cache_status": s.cache_status,
        "error_kinds": s.error_kinds,
    })
}

/// The innermost cause of an error, trimmed, as a tally key.
fn error_kind(e: &anyhow::Error) -> String {
    let msg = e.root_cause().to_string();
    msg.chars().take(80).collect()
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn print_table(args: &Args, s: &Summary) {
    println!(
        "url {}  rate {}/s  duration {:?} (+{:?} warm-up, not counted)",
        args.url, args.rps, args.duration, args.warmup
    );
    println!(
        "{:>9} {:>7} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "requests", "errors", "waited", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms"
    );
    println!(
        "{:>9} {:>7} {:>8} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
        s.requests, s.errors, s.waited, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms, s.mean_ms
    );
    println!(
        "waited = latency > {} ms from the scheduled start; hits (served from cache) = {}",
        args.miss_threshold_ms, s.hits
    );
    println!("status: {:?}", s.status);
    if !s.error_kinds.is_empty() {
        println!("errors: {:?}", s.error_kinds);
    }
    println!("cache status tally:");
    for (k, v) in &s.cache_status {
        println!("  {v:>8}  {k}");
    }
    println!(
        "dispatch lag (generator health): mean {:.2} ms, max {:.2} ms; connections opened: {}",
        s.mean_dispatch_lag_ms, s.max_dispatch_lag_ms, s.connections_opened
    );
}

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    let summary = rt.block_on(run(args.clone()))?;
    if args.json {
        println!("{}", to_json(&args, &summary));
    } else {
        print_table(&args, &summary);
    }
    // Abandoned requests (hard stop) must not keep the process alive.
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("3 parsecs").is_err());
    }

    #[test]
    fn schedule_is_bounded_and_evenly_spaced() {
        let s = Schedule::new(10.0, Duration::from_secs(3), Duration::from_secs(20)).expect("ok");
        assert_eq!(s.total, 230);
        assert_eq!(s.counted_total(), 200);
        assert_eq!(s.offset(0), Duration::ZERO);
        assert_eq!(s.offset(1), Duration::from_millis(100));
        assert_eq!(s.offset(229), Duration::from_millis(22_900));
        // The first counted request is exactly at the end of the warm-up.
        assert!(!s.counted(29));
        assert!(s.counted(30));
    }

    #[test]
    fn schedule_fractional_rates() {
        let s = Schedule::new(0.5, Duration::ZERO, Duration::from_secs(10)).expect("ok");
        assert_eq!(s.total, 5);
        assert_eq!(s.offset(4), Duration::from_secs(8));
        let s = Schedule::new(3.0, Duration::ZERO, Duration::from_secs(1)).expect("ok");
        assert_eq!(s.total, 3);
        assert!(Schedule::new(0.0, Duration::ZERO, Duration::from_secs(1)).is_err());
        assert!(Schedule::new(f64::NAN, Duration::ZERO, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        // With 10 samples p99 is the maximum (nearest rank 10).
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), Some(10.0));
        assert_eq!(percentile(&v, 90.0), Some(9.0));
    }

    #[test]
    fn cache_status_keys() {
        assert_eq!(
            cache_key(Some("calmcache; hit; ttl=0.6"), None, None),
            "hit"
        );
        assert_eq!(
            cache_key(
                Some("calmcache; hit; ttl=0.4; detail=refresh-early"),
                None,
                None
            ),
            "hit; detail=refresh-early"
        );
        assert_eq!(
            cache_key(Some("calmcache; fwd=miss; stored"), None, None),
            "fwd=miss; stored"
        );
        assert_eq!(
            cache_key(
                Some("origin-cdn; hit, calmcache; fwd=stale; stored"),
                None,
                None
            ),
            "fwd=stale; stored"
        );
        assert_eq!(
            cache_key(None, Some("UPDATING"), None),
            "x-cache-status=UPDATING"
        );
        assert_eq!(cache_key(None, None, Some("HIT")), "x-cache=HIT");
        assert_eq!(cache_key(None, None, None), "(none)");
        assert!(is_hit("hit; detail=stale-while-revalidate"));
        assert!(!is_hit("fwd=miss; collapsed"));
        assert!(is_hit("x-cache-status=STALE"));
        assert!(!is_hit("x-cache-status=EXPIRED"));
        assert!(!is_hit("x-cache-status=REVALIDATED"));
        assert!(is_hit("x-cache=HIT"));
        assert!(!is_hit("(none)"));
    }

    #[test]
    fn summary_counts_waited_errors_and_unfinished() {
        let rec = |ms: f64, status: Option<u16>, cache: &str| Record {
            latency_ms: ms,
            status,
            cache: cache.to_string(),
            error: status.is_none().then(|| "timeout".to_string()),
            dispatch_lag_ms: 0.0,
        };
        let records = vec![
            rec(1.0, Some(200), "hit"),
            rec(2.0, Some(200), "hit"),
            rec(120.0, Some(200), "fwd=miss; stored"),
            rec(3.0, Some(502), "fwd=miss"),
            rec(10_000.0, None, ""),
        ];
        let s = summarize(&records, 6, 50.0);
        assert_eq!(s.requests, 6);
        assert_eq!(s.errors, 3); // 502, transport error, unfinished
        assert_eq!(s.unfinished, 1);
        assert_eq!(s.waited, 3); // 120 ms, the failed one, the unfinished one
        assert_eq!(s.hits, 2);
        assert_eq!(s.cache_status.get("hit"), Some(&2));
        assert_eq!(s.max_ms, 10_000.0);
        assert_eq!(s.p50_ms, 3.0);
        assert_eq!(s.error_kinds.get("timeout"), Some(&1));
    }

    #[test]
    fn urls_parse() {
        let t = parse_url("http://127.0.0.1:8080/hot?x=1").expect("ok");
        assert_eq!(t.host_port, "127.0.0.1:8080");
        assert_eq!(t.path, "/hot?x=1");
        let t = parse_url("http://localhost").expect("ok");
        assert_eq!(t.host_port, "localhost:80");
        assert_eq!(t.path, "/");
        assert!(parse_url("https://127.0.0.1/").is_err());
    }
}
