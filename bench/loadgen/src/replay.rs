//! `replay`: sends the paths of a trace file (one per line) to one HTTP/1.1
//! server, in the file's order, on a few keepalive connections, as fast as
//! they answer (closed loop), for `bench/hitratio`.
//!
//! What a hit-ratio run measures is which requests reach the origin, not
//! speed: the order of the trace is what matters, so `--connections` stays
//! small (request `i` starts after every request `< i - connections` has
//! started). It prints one JSON line: requests sent, answers by class
//! (2xx, other, errors) and the answers whose cache header said hit
//! (`Cache-Status: ...; hit`, `X-Cache-Status: HIT`), a cross-check on the
//! origin's own count.
//!
//! Bounded in count (the trace's lines) and in time (`--max-time`: what is
//! left then is not sent, and the run exits non-zero).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use calmcache_loadgen::parse_duration;
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "replay",
    about = "Replay a trace of paths against one HTTP/1.1 server, in order, closed loop"
)]
struct Args {
    /// Server address, e.g. 127.0.0.1:8080
    #[arg(long)]
    addr: String,
    /// Trace file: one request path per line (`/obj/17`)
    #[arg(long)]
    trace: String,
    /// Keepalive connections (requests in flight at once)
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Stop sending after this long (the run then fails)
    #[arg(long, default_value = "600s", value_parser = parse_duration)]
    max_time: Duration,
    /// Per-request timeout
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
}

/// Shared by the connections: the trace and the tallies.
struct Run {
    addr: String,
    paths: Vec<String>,
    next: AtomicUsize,
    deadline: Instant,
    timeout: Duration,
    ok: AtomicU64,
    other: AtomicU64,
    errors: AtomicU64,
    hits: AtomicU64,
}

impl Run {
    /// The next path of the trace, unless the trace or the time is over.
    fn take(&self) -> Option<&str> {
        if Instant::now() >= self.deadline {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.paths.get(i).map(String::as_str)
    }

    async fn connect(&self) -> Result<SendRequest<Empty<Bytes>>> {
        let stream = TcpStream::connect(&self.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// One request: its status and whether the cache said hit.
    async fn send(
        &self,
        sender: &mut SendRequest<Empty<Bytes>>,
        path: &str,
    ) -> Result<(u16, bool)> {
        sender.ready().await?;
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, &self.addr)
            .body(Empty::new())?;
        let resp = sender.send_request(req).await?;
        let hit = resp.headers().iter().any(|(name, value)| {
            let name = name.as_str();
            let value = value.to_str().unwrap_or("").to_ascii_lowercase();
            (name == "cache-status" && value.contains("; hit"))
                || (name == "x-cache-status" && value == "hit")
        });
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok((status, hit))
    }

    /// One connection's loop: take the next path, send it, tally; a failed
    /// connection is replaced.
    async fn worker(self: Arc<Self>) {
        let mut sender = None;
        while let Some(path) = self.take() {
            if sender.is_none() {
                sender = self.connect().await.ok();
            }
            let Some(s) = sender.as_mut() else {
                self.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            match tokio::time::timeout(self.timeout, self.send(s, path)).await {
                Ok(Ok((status, hit))) => {
                    let class = if (200..300).contains(&status) {
                        &self.ok
                    } else {
                        &self.other
                    };
                    class.fetch_add(1, Ordering::Relaxed);
                    if hit {
                        self.hits.fetch_add(1, Ordering::Relaxed);
                    }
                }
                _ => {
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    sender = None;
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    let text = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("reading trace {}", args.trace))?;
    let paths: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let total = paths.len();
    let started = Instant::now();
    let run = Arc::new(Run {
        addr: args.addr,
        paths,
        next: AtomicUsize::new(0),
        deadline: started + args.max_time,
        timeout: args.timeout,
        ok: AtomicU64::new(0),
        other: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        hits: AtomicU64::new(0),
    });
    let workers: Vec<_> = (0..args.connections)
        .map(|_| tokio::spawn(run.clone().worker()))
        .collect();
    for w in workers {
        w.await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let sent = run.next.load(Ordering::Relaxed).min(total);
    let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "requests": sent,
            "trace": total,
            "ok": load(&run.ok),
            "other": load(&run.other),
            "errors": load(&run.errors),
            "hits": load(&run.hits),
            "seconds": (secs * 1000.0).round() / 1000.0,
        })
    );
    if sent < total {
        bail!("time ran out after {sent} of {total} requests");
    }
    Ok(())
}
