//! The bundled slow origin: a stand-in for the WordPress page of seed 003 (and
//! the 100 ms "DB query" of seed 002), used by `calmcache demo`, the benchmarks
//! and anyone who wants to see calmcache work.
//!
//! Every GET burns `cpu` of busy work on one of `workers` threads (requests
//! queue for a worker), then waits `sleep`, then answers a page carrying the
//! time and a request counter. `GET /__origin/stats` tells how many requests it
//! served and over how many connections it had not seen before
//! (`connections`: a proxy's connection reuse is `1 - connections /
//! requests`); `POST /__origin/reset` zeroes both counts; `POST
//! /__origin/steer?status=503&sleep_ms=2000` changes the status of every page
//! and the idle wait from then on (either may be left out), so benchmarks can
//! make it fail or slow down and heal it without a restart. Started with
//! [`start_with_tags`], it also tags every page (`Cache-Tag: g<k>`) for
//! purge-by-tag benchmarks.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response};
use hyper::body::Incoming;
use tokio::sync::{watch, Semaphore};

use crate::http::body::ResponseBody;
use crate::run::listen::{accept_loop, bind, StartError};

/// How the origin behaves.
#[derive(Clone, Debug)]
pub struct OriginOptions {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Busy CPU work per page.
    pub cpu: Duration,
    /// Idle wait per page after the CPU work (a database round trip).
    pub sleep: Duration,
    /// Threads doing CPU work at once.
    pub workers: usize,
    /// Pad each page to at least this many bytes.
    pub body_bytes: usize,
    /// `Cache-Control` to send, if any.
    pub cache_control: Option<String>,
    /// The status of every page (200 unless failing on purpose).
    pub status: http::StatusCode,
}

/// Request counters.
#[derive(Default, Debug)]
pub struct OriginStats {
    /// Pages served (not counting `/__origin/*`).
    pub requests: AtomicU64,
    /// Pages being produced now.
    pub in_flight: AtomicU64,
    /// Pages that came over a connection no page came over before (since
    /// the last reset; a connection seen before the reset is not new).
    pub connections: AtomicU64,
    /// The client addresses pages came from: one per connection (a port
    /// reused by a later connection is missed, rare within a run).
    seen: std::sync::Mutex<std::collections::HashSet<SocketAddr>>,
}

impl OriginStats {
    /// Notes a page from `peer`, counting its connection when new.
    fn note_peer(&self, peer: SocketAddr) {
        let mut seen = match self.seen.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Bounded: a long benchmark of short connections forgets the oldest
        // all at once rather than growing without end.
        if seen.len() >= 1 << 20 {
            seen.clear();
        }
        if seen.insert(peer) {
            self.connections.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A running origin.
pub struct RunningOrigin {
    /// The bound address.
    pub addr: SocketAddr,
    /// Its counters.
    pub stats: Arc<OriginStats>,
    stop: watch::Sender<bool>,
}

impl RunningOrigin {
    /// Stops accepting connections.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

struct Origin {
    opts: OriginOptions,
    /// The page status and idle wait now (`/__origin/steer` changes them).
    status: std::sync::atomic::AtomicU16,
    sleep_ms: AtomicU64,
    stats: Arc<OriginStats>,
    workers: Semaphore,
    tag_groups: u64,
}

/// Binds and starts the origin on the current runtime.
pub async fn start(opts: OriginOptions) -> Result<RunningOrigin, StartError> {
    start_with_tags(opts, 0).await
}

/// Like [`start`], and when `tag_groups` > 0 every page carries
/// `Cache-Tag: g<k>`, k = [`tag_group`] of its path: one of `tag_groups`
/// tags, known in advance for each URL (`/p7/obj/123` with 1000 groups is
/// `g123`).
pub async fn start_with_tags(
    opts: OriginOptions,
    tag_groups: u64,
) -> Result<RunningOrigin, StartError> {
    let listener = bind(opts.listen)?;
    let addr = listener.local_addr().unwrap_or(opts.listen);
    let stats = Arc::new(OriginStats::default());
    let workers = Semaphore::new(opts.workers.max(1));
    let origin = Arc::new(Origin {
        status: std::sync::atomic::AtomicU16::new(opts.status.as_u16()),
        sleep_ms: AtomicU64::new(u64::try_from(opts.sleep.as_millis()).unwrap_or(u64::MAX)),
        opts,
        stats: stats.clone(),
        workers,
        tag_groups,
    });
    let (stop, stopped) = watch::channel(false);
    let serve = move |req: Request<Incoming>, peer: crate::net::conn::Peer| {
        handle(origin.clone(), req, peer.addr)
    };
    tokio::spawn(accept_loop(
        listener,
        stopped,
        None,
        serve,
        crate::run::listen::Listening::plain(),
    ));
    Ok(RunningOrigin { addr, stats, stop })
}

async fn handle(
    origin: Arc<Origin>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Response<ResponseBody>, Infallible> {
    let stats = &origin.stats;
    match (req.method(), req.uri().path()) {
        (_, "/__origin/stats") => {
            let json = format!(
                "{{\"requests\": {}, \"in_flight\": {}, \"connections\": {}}}\n",
                stats.requests.load(Ordering::Relaxed),
                stats.in_flight.load(Ordering::Relaxed),
                stats.connections.load(Ordering::Relaxed)
            );
            return Ok(typed(json, "application/json"));
        }
        (&Method::POST, "/__origin/reset") => {
            stats.requests.store(0, Ordering::Relaxed);
            stats.connections.store(0, Ordering::Relaxed);
            return Ok(typed("reset\n".to_string(), "text/plain"));
        }
        (&Method::POST, "/__origin/steer") => {
            return Ok(steer(&origin, req.uri().query().unwrap_or("")));
        }
        _ => {}
    }
    let n = stats.requests.fetch_add(1, Ordering::Relaxed) + 1;
    stats.note_peer(peer);
    stats.in_flight.fetch_add(1, Ordering::Relaxed);
    if !origin.opts.cpu.is_zero() {
        // The permit is held by this task while a blocking thread burns CPU, so
        // at most `workers` pages are computed at once and the rest queue.
        if let Ok(_worker) = origin.workers.acquire().await {
            let cpu = origin.opts.cpu;
            let _ = tokio::task::spawn_blocking(move || burn(cpu)).await;
        }
    }
    let sleep = origin.sleep_ms.load(Ordering::Relaxed);
    if sleep > 0 {
        tokio::time::sleep(Duration::from_millis(sleep)).await;
    }
    stats.in_flight.fetch_sub(1, Ordering::Relaxed);
    let mut resp = typed(
        page(req.uri().path(), n, origin.opts.body_bytes),
        "text/html; charset=utf-8",
    );
    let status = origin.status.load(Ordering::Relaxed);
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    if let Some(cc) = origin
        .opts
        .cache_control
        .as_deref()
        .and_then(|cc| HeaderValue::from_str(cc).ok())
    {
        resp.headers_mut().insert(CACHE_CONTROL, cc);
    }
    if origin.tag_groups > 0 {
        let tag = format!("g{}", tag_group(req.uri().path(), origin.tag_groups));
        if let Ok(tag) = HeaderValue::from_str(&tag) {
            resp.headers_mut()
                .insert(HeaderName::from_static("cache-tag"), tag);
        }
    }
    Ok(resp)
}

/// `/__origin/steer?status=N&sleep_ms=M`: sets what later pages do.
fn steer(origin: &Origin, query: &str) -> Response<ResponseBody> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let ok = match name {
            "status" => value
                .parse::<u16>()
                .ok()
                .and_then(|s| http::StatusCode::from_u16(s).ok())
                .map(|s| origin.status.store(s.as_u16(), Ordering::Relaxed))
                .is_some(),
            "sleep_ms" => value
                .parse::<u64>()
                .map(|ms| origin.sleep_ms.store(ms, Ordering::Relaxed))
                .is_ok(),
            _ => false,
        };
        if !ok {
            let mut resp = typed(
                format!("bad steer parameter {pair:?}: use status=100..999, sleep_ms=N\n"),
                "text/plain",
            );
            *resp.status_mut() = http::StatusCode::BAD_REQUEST;
            return resp;
        }
    }
    typed(
        format!(
            "status={} sleep_ms={}\n",
            origin.status.load(Ordering::Relaxed),
            origin.sleep_ms.load(Ordering::Relaxed)
        ),
        "text/plain",
    )
}

/// The tag group of `path` among `groups` (> 0): the last run of decimal
/// digits in the path, else its 64-bit FNV-1a hash, modulo `groups`.
pub(crate) fn tag_group(path: &str, groups: u64) -> u64 {
    let groups = u128::from(groups.max(1));
    let digits = path
        .rsplit(|c: char| !c.is_ascii_digit())
        .find(|run| !run.is_empty());
    let k = match digits {
        // Digit by digit modulo `groups`: any length, no overflow.
        Some(run) => run
            .bytes()
            .fold(0u128, |k, d| (k * 10 + u128::from(d - b'0')) % groups),
        None => {
            let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            u128::from(hash) % groups
        }
    };
    k as u64
}

/// Busy work for `cpu` of wall time on this thread.
fn burn(cpu: Duration) {
    let start = std::time::Instant::now();
    let mut x = 0u64;
    while start.elapsed() < cpu {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}

fn page(path: &str, n: u64, min_bytes: usize) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let path: String = path
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "/-_.".contains(*c))
        .collect();
    let mut html = format!(
        "<!doctype html>\n<html><head><title>calmcache origin</title></head><body>\n\
         <h1>A slow page: {path}</h1>\n<p>Generated at {}.{:03} (unix time), request #{n} to the origin.</p>\n",
        now.as_secs(),
        now.subsec_millis()
    );
    const TAIL: &str = "</body></html>\n";
    // "<!--" + padding + "-->\n" + TAIL brings the page to exactly min_bytes.
    let fixed = html.len() + 4 + 4 + TAIL.len();
    if fixed < min_bytes {
        html.push_str("<!--");
        html.extend(std::iter::repeat_n('x', min_bytes - fixed));
        html.push_str("-->\n");
    }
    html.push_str(TAIL);
    html
}

fn typed(body: String, content_type: &'static str) -> Response<ResponseBody> {
    let mut resp = Response::new(ResponseBody::full(body));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_padded_to_the_asked_size() {
        assert_eq!(page("/a", 1, 1024).len(), 1024);
        assert_eq!(page("/a", 1, 102_400).len(), 102_400);
        assert!(page("/a", 1, 0).contains("request #1"));
    }

    #[test]
    fn tag_groups_come_from_the_last_digits_of_the_path() {
        assert_eq!(tag_group("/p7/obj/123", 1000), 123);
        assert_eq!(tag_group("/p7/obj/123456", 1000), 456);
        assert_eq!(tag_group("/p7/obj/8", 100), 8);
        assert_eq!(tag_group("/o/12x", 10), 2);
        // Longer than any integer: 10^32 - 1 = 1 (mod 7).
        assert_eq!(tag_group("/o/99999999999999999999999999999999", 7), 1);
        // No digits: a hash, stable and within range.
        let h = tag_group("/about", 1000);
        assert!(h < 1000);
        assert_eq!(h, tag_group("/about", 1000));
        assert_eq!(tag_group("/anything", 1), 0);
    }
}
