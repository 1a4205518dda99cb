//! `ws-clients`: many concurrent WebSocket clients, each sending one small
//! message per interval to an echo server (through a proxy) and checking
//! every echo, for `bench/websocket`.
//!
//! `ws-clients run`: the clients connect at a bounded rate (`--ramp-rate`
//! per second), so the proxy's accept backlog is not what is measured; once
//! all are connected (or at `--start-at`, a wall-clock instant shared by
//! several client processes) the message clock starts: client `g` (its
//! global index, `--first-index` + local index) sends its `k`-th message at
//! `start + (g / total) x interval + k x interval`, which spreads the
//! messages of all clients evenly over each interval. Each message carries
//! the client and sequence number; the echo must come back in order and
//! unchanged. The round trip is timed from just before the send to the
//! echo's arrival (the timer's lateness, `send_lag`, is reported apart).
//! After the last message every client waits up to `--drain` for its
//! outstanding echoes; then all clients close with a close handshake at one
//! instant, 1 s after the last message of the clock was due (a client that
//! closed as soon as it was done would load the proxy with its close while
//! others still send, and the round trips of the last second would measure
//! that); the close handshakes are timed apart (`close_ms`).
//!
//! Everything is bounded: connects by `--connect-timeout`, the run by
//! `start + duration + drain + 10 s` (clients still running then are
//! abandoned and counted as `unfinished`).
//!
//! Output: one JSON line (counters, round-trip and connect percentiles).
//! `--samples FILE` also writes the raw round trips and connect times, and
//! `ws-clients merge A.json B.json ...` combines the summaries of several
//! processes (exact percentiles from their sample files) into one line.

use calmcache_loadgen::parse_duration;
use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Extra time after start + duration + drain before everything is abandoned.
const HARD_STOP_GRACE: Duration = Duration::from_secs(10);
/// How long a client waits for the server's reply to its close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// All clients close this long after the last message of the clock was due.
const CLOSE_AFTER: Duration = Duration::from_secs(1);

#[derive(Parser, Debug)]
#[command(
    name = "ws-clients",
    about = "Concurrent WebSocket echo clients: connect at a bounded rate, one message per interval, round-trip percentiles"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the clients and print one JSON summary line
    Run(RunArgs),
    /// Combine the JSON summaries (files) of several `run` processes
    Merge {
        /// Summary files, each one `run` output line
        files: Vec<PathBuf>,
    },
}

#[derive(Parser, Debug, Clone)]
struct RunArgs {
    /// WebSocket URL (ws:// only), e.g. ws://127.0.0.1:8080/ws
    #[arg(long)]
    url: String,
    /// Clients in this process
    #[arg(long)]
    clients: usize,
    /// Clients over all processes (spreads the send phases); default --clients
    #[arg(long)]
    total_clients: Option<usize>,
    /// Global index of this process's first client
    #[arg(long, default_value_t = 0)]
    first_index: usize,
    /// New connections per second opened by this process
    #[arg(long, default_value_t = 500.0)]
    ramp_rate: f64,
    /// Start the message clock at this wall-clock time (Unix epoch ms);
    /// default: when every client of this process has connected, plus --settle
    #[arg(long)]
    start_at: Option<u64>,
    /// Pause between the end of the ramp and the clock start (without --start-at)
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    settle: Duration,
    /// How long each client sends (messages = duration / interval)
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Time between two messages of one client
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Size of each text message in bytes (at least 24)
    #[arg(long, default_value_t = 64)]
    message_bytes: usize,
    /// TCP connect + WebSocket handshake timeout
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    connect_timeout: Duration,
    /// After its last message, how long a client waits for missing echoes
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    drain: Duration,
    /// Write the raw round trips and connect times (µs) to this file
    #[arg(long)]
    samples: Option<PathBuf>,
    /// Runtime worker threads (1: a current-thread runtime)
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// Nearest-rank percentile (`p` in 0..=100) of an ascending slice.
fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Microseconds, saturating.
fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// `{"p50": ms, "p95": ms, "p99": ms, "max": ms, "mean": ms}` of µs samples
/// (sorted in place).
fn dist_json(samples: &mut [u32]) -> Value {
    samples.sort_unstable();
    let ms = |v: Option<u32>| v.map(|v| round3(f64::from(v) / 1000.0));
    let mean = if samples.is_empty() {
        None
    } else {
        let sum: f64 = samples.iter().map(|&v| f64::from(v)).sum();
        Some(round3(sum / samples.len() as f64 / 1000.0))
    };
    json!({
        "n": samples.len(),
        "p50": ms(percentile(samples, 50.0)),
        "p95": ms(percentile(samples, 95.0)),
        "p99": ms(percentile(samples, 99.0)),
        "max": ms(samples.last().copied()),
        "mean": mean,
    })
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// What one client saw.
#[derive(Debug, Default)]
struct ClientReport {
    connected: bool,
    connect_error: Option<String>,
    connect_us: Option<u32>,
    /// When the connection was established, relative to the process start.
    connected_at: Option<Duration>,
    sent: u64,
    echoed: u64,
    /// Echoes that were not the next expected message (or not text).
    wrong: u64,
    /// Sent, but no echo by the end of the drain (or before a drop).
    missing: u64,
    /// Due while the connection was already gone.
    unsent: u64,
    /// Why the connection ended before its last echo, if it did.
    dropped: Option<String>,
    /// The close handshake completed (server's close came back).
    clean_close: bool,
    /// How long the close handshake took.
    close_us: Option<u32>,
    rtt_us: Vec<u32>,
    lag_sum_us: u64,
    lag_max_us: u32,
    /// Per second of the message clock (by send time): the largest round
    /// trip, the round trips over `SLOW_US`, the largest send lag (µs).
    sec_rtt_max: Vec<u32>,
    sec_slow: Vec<u32>,
    sec_lag_max: Vec<u32>,
}

/// A round trip over this counts as slow in the per-second timeline.
const SLOW_US: u32 = 10_000;

/// Index of the timeline second of `at` (sends before the clock: 0).
fn second_of(at: Instant, clock: Instant, len: usize) -> usize {
    let s = at.saturating_duration_since(clock).as_secs() as usize;
    s.min(len.saturating_sub(1))
}

/// The message of client `g`, sequence `k`, padded to `bytes`.
fn message(g: usize, k: u64, bytes: usize) -> String {
    let mut m = format!("c{g} s{k} ");
    while m.len() < bytes {
        m.push('x');
    }
    m
}

/// The sequence number in an echo of client `g`, if it is one of its messages.
fn echoed_seq(text: &str, g: usize) -> Option<u64> {
    let mut parts = text.split(' ');
    let c = parts.next()?.strip_prefix('c')?.parse::<usize>().ok()?;
    let s = parts.next()?.strip_prefix('s')?.parse::<u64>().ok()?;
    (c == g).then_some(s)
}

fn error_kind(e: &str) -> String {
    let e = e.to_ascii_lowercase();
    for (needle, kind) in [
        ("timed out", "timeout"),
        ("timeout", "timeout"),
        ("refused", "refused"),
        ("reset", "reset"),
        ("broken pipe", "broken pipe"),
        ("too many open files", "emfile"),
        ("address not available", "no local port"),
        ("http error", "http status"),
        ("connection closed", "closed"),
        ("already closed", "closed"),
        ("protocol", "protocol"),
    ] {
        if e.contains(needle) {
            return kind.to_string();
        }
    }
    let short: String = e.chars().take(60).collect();
    short
}

struct Plan {
    url: String,
    addr: String,
    g: usize,
    connect_at: Instant,
    connect_timeout: Duration,
    clock: Instant,
    phase: Duration,
    interval: Duration,
    messages: u64,
    message_bytes: usize,
    drain: Duration,
    close_at: Instant,
    process_start: Instant,
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
}

async fn client(plan: Plan) -> ClientReport {
    let mut r = ClientReport::default();
    sleep_until(plan.connect_at).await;
    let started = Instant::now();
    let connect = async {
        let stream = TcpStream::connect(&plan.addr).await?;
        let _ = stream.set_nodelay(true);
        let (ws, _resp) =
            tokio_tungstenite::client_async_with_config(&plan.url, stream, Some(ws_config()))
                .await
                .map_err(std::io::Error::other)?;
        Ok::<_, std::io::Error>(ws)
    };
    let mut ws = match timeout(plan.connect_timeout, connect).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            r.connect_error = Some(error_kind(&e.to_string()));
            r.unsent = plan.messages;
            return r;
        }
        Err(_) => {
            r.connect_error = Some("timeout".into());
            r.unsent = plan.messages;
            return r;
        }
    };
    r.connected = true;
    r.connect_us = Some(micros(started.elapsed()));
    r.connected_at = Some(started.duration_since(plan.process_start));

    let first = plan.clock + plan.phase;
    let last_due = first + plan.interval * plan.messages.saturating_sub(1) as u32;
    let drain_until = last_due + plan.drain;
    let mut pending: VecDeque<(u64, Instant)> = VecDeque::new();
    let mut k: u64 = 0;
    r.rtt_us.reserve(plan.messages as usize);
    let secs = (last_due + plan.drain).duration_since(plan.clock).as_secs() as usize + 1;
    r.sec_rtt_max = vec![0; secs];
    r.sec_slow = vec![0; secs];
    r.sec_lag_max = vec![0; secs];
    loop {
        let due = first + plan.interval * k as u32;
        tokio::select! {
            biased;
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(text))) => {
                    match (echoed_seq(text.as_str(), plan.g), pending.front()) {
                        (Some(s), Some(&(want, sent_at))) if s == want => {
                            pending.pop_front();
                            r.echoed += 1;
                            let rtt = micros(sent_at.elapsed());
                            r.rtt_us.push(rtt);
                            let i = second_of(sent_at, plan.clock, secs);
                            r.sec_rtt_max[i] = r.sec_rtt_max[i].max(rtt);
                            r.sec_slow[i] += u32::from(rtt > SLOW_US);
                        }
                        _ => r.wrong += 1,
                    }
                }
                Some(Ok(Message::Binary(_))) | Some(Ok(Message::Frame(_))) => r.wrong += 1,
                Some(Ok(Message::Ping(_))) | Some(Ok(Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) => {
                    r.dropped = Some("closed by server".into());
                    break;
                }
                Some(Err(e)) => {
                    r.dropped = Some(error_kind(&e.to_string()));
                    break;
                }
                None => {
                    r.dropped = Some("eof".into());
                    break;
                }
            },
            () = sleep_until(due), if k < plan.messages => {
                let now = Instant::now();
                let lag = micros(now.saturating_duration_since(due));
                r.lag_sum_us += u64::from(lag);
                r.lag_max_us = r.lag_max_us.max(lag);
                let i = second_of(now, plan.clock, secs);
                r.sec_lag_max[i] = r.sec_lag_max[i].max(lag);
                pending.push_back((k, now));
                let text = message(plan.g, k, plan.message_bytes);
                k += 1;
                if let Err(e) = ws.send(Message::text(text)).await {
                    r.sent += 1;
                    r.dropped = Some(error_kind(&e.to_string()));
                    break;
                }
                r.sent += 1;
            },
            () = sleep_until(drain_until), if k >= plan.messages => break,
        }
        if k >= plan.messages && pending.is_empty() {
            break;
        }
    }
    r.missing = pending.len() as u64;
    r.unsent = plan.messages - k;
    if r.dropped.is_none() {
        sleep_until(plan.close_at).await;
        let closing_from = Instant::now();
        // Close handshake: send ours, read until the server's close (or EOF).
        let closing = async {
            ws.close(None).await.ok()?;
            while let Some(msg) = ws.next().await {
                match msg {
                    Ok(Message::Close(_)) => return Some(()),
                    Ok(_) => {}
                    Err(_) => return None,
                }
            }
            Some(())
        };
        r.clean_close = matches!(timeout(CLOSE_WAIT, closing).await, Ok(Some(())));
        if r.clean_close {
            r.close_us = Some(micros(closing_from.elapsed()));
        }
    }
    r
}

fn ws_addr(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("ws://")
        .context("--url must start with ws://")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.is_empty() {
        bail!("--url has no host");
    }
    Ok(if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    })
}

fn epoch_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn run(args: RunArgs) -> Result<Value> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    if !(args.ramp_rate.is_finite() && args.ramp_rate > 0.0) {
        bail!("--ramp-rate must be positive");
    }
    if args.interval.is_zero() {
        bail!("--interval must be positive");
    }
    let total = args.total_clients.unwrap_or(args.clients).max(1);
    let addr = ws_addr(&args.url)?;
    let messages =
        (args.duration.as_secs_f64() / args.interval.as_secs_f64() + 1e-9).floor() as u64;
    let message_bytes = args.message_bytes.max(24);
    let process_start = Instant::now();
    let ramp = Duration::from_secs_f64(args.clients as f64 / args.ramp_rate);
    // The clock: either the shared wall-clock instant, or the end of our own ramp.
    let (clock, clock_source) = match args.start_at {
        Some(at) => {
            let now = epoch_ms_now();
            let ahead = Duration::from_millis(at.saturating_sub(now));
            if at < now {
                eprintln!(
                    "ws-clients: --start-at is {} ms in the past: starting now",
                    now - at
                );
            }
            (process_start + ahead, "start_at")
        }
        None => (process_start + ramp + args.settle, "ramp"),
    };
    if clock < process_start + ramp {
        eprintln!(
            "ws-clients: the clock starts {:.1} s before the ramp can end ({} clients at {}/s)",
            (process_start + ramp - clock).as_secs_f64(),
            args.clients,
            args.ramp_rate
        );
    }
    let close_at = clock + args.interval * messages as u32 + CLOSE_AFTER;
    let hard_stop =
        clock + args.interval + args.duration + args.drain + CLOSE_WAIT + HARD_STOP_GRACE;

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.clients {
        let g = args.first_index + i;
        let plan = Plan {
            url: args.url.clone(),
            addr: addr.clone(),
            g,
            connect_at: process_start + Duration::from_secs_f64(i as f64 / args.ramp_rate),
            connect_timeout: args.connect_timeout,
            clock,
            phase: args.interval.mul_f64((g % total) as f64 / total as f64),
            interval: args.interval,
            messages,
            message_bytes,
            drain: args.drain,
            close_at,
            process_start,
        };
        tasks.spawn(client(plan));
    }

    let mut reports = Vec::with_capacity(args.clients);
    let deadline = sleep_until(hard_stop);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(Ok(r)) => reports.push(r),
                Some(Err(e)) => eprintln!("ws-clients: a client task failed: {e}"),
                None => break,
            },
            () = &mut deadline => {
                eprintln!("ws-clients: hard stop: {} clients still running, abandoned", tasks.len());
                break;
            }
        }
    }
    let unfinished = args.clients - reports.len();
    tasks.abort_all();
    Ok(summarize(
        &args,
        &reports,
        unfinished,
        messages,
        clock_source,
        clock.saturating_duration_since(process_start),
    ))
}

fn tally(map: &mut BTreeMap<String, u64>, key: &str) {
    *map.entry(key.to_string()).or_insert(0) += 1;
}

fn summarize(
    args: &RunArgs,
    reports: &[ClientReport],
    unfinished: usize,
    messages: u64,
    clock_source: &str,
    clock_at: Duration,
) -> Value {
    let mut connect_errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut drops: BTreeMap<String, u64> = BTreeMap::new();
    let (mut connected, mut sent, mut echoed, mut wrong, mut missing, mut unsent) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut clean_closes, mut lag_sum, mut lag_max) = (0u64, 0u64, 0u32);
    let mut rtt: Vec<u32> = Vec::with_capacity(reports.len() * messages as usize);
    let mut connect: Vec<u32> = Vec::with_capacity(reports.len());
    let mut close: Vec<u32> = Vec::with_capacity(reports.len());
    let mut last_connected = Duration::ZERO;
    let (mut t_rtt, mut t_slow, mut t_lag) = (Vec::new(), Vec::new(), Vec::new());
    for r in reports {
        fold(&mut t_rtt, &r.sec_rtt_max, u32::max);
        fold(&mut t_slow, &r.sec_slow, |a, b| a + b);
        fold(&mut t_lag, &r.sec_lag_max, u32::max);
        if let Some(e) = &r.connect_error {
            tally(&mut connect_errors, e);
        }
        if let Some(d) = &r.dropped {
            tally(&mut drops, d);
        }
        connected += u64::from(r.connected);
        sent += r.sent;
        echoed += r.echoed;
        wrong += r.wrong;
        missing += r.missing;
        unsent += r.unsent;
        clean_closes += u64::from(r.clean_close);
        lag_sum += r.lag_sum_us;
        lag_max = lag_max.max(r.lag_max_us);
        rtt.extend_from_slice(&r.rtt_us);
        connect.extend(r.connect_us);
        close.extend(r.close_us);
        last_connected = last_connected.max(r.connected_at.unwrap_or_default());
    }
    // Clients abandoned at the hard stop: all their messages count as unsent.
    unsent += unfinished as u64 * messages;
    let samples_file = args.samples.as_ref().map(|p| {
        if let Err(e) = write_samples(p, &rtt, &connect, &close) {
            eprintln!("ws-clients: cannot write {}: {e:#}", p.display());
        }
        p.display().to_string()
    });
    let lag_mean = if sent > 0 {
        round3(lag_sum as f64 / sent as f64 / 1000.0)
    } else {
        0.0
    };
    json!({
        "url": args.url,
        "clients": args.clients,
        "first_index": args.first_index,
        "messages_per_client": messages,
        "interval_ms": args.interval.as_millis() as u64,
        "message_bytes": args.message_bytes.max(24),
        "connected": connected,
        "connect_errors": connect_errors.values().sum::<u64>(),
        "connect_error_kinds": connect_errors,
        "ramp_s": round3(last_connected.as_secs_f64()),
        "clock": clock_source,
        "clock_at_s": round3(clock_at.as_secs_f64()),
        "late_ramp_s": round3(last_connected.saturating_sub(clock_at).as_secs_f64()),
        "expected": args.clients as u64 * messages,
        "sent": sent,
        "echoed": echoed,
        "wrong": wrong,
        "missing": missing,
        "unsent": unsent,
        "message_errors": wrong + missing + unsent,
        "dropped": drops.values().sum::<u64>(),
        "drop_kinds": drops,
        "clean_closes": clean_closes,
        "unfinished": unfinished,
        "rtt_ms": dist_json(&mut rtt),
        "connect_ms": dist_json(&mut connect),
        "close_ms": dist_json(&mut close),
        "send_lag_ms": {"mean": lag_mean, "max": round3(f64::from(lag_max) / 1000.0)},
        "samples_file": samples_file,
        "timeline": timeline_json(&t_rtt, &t_slow, &t_lag),
    })
}

/// Element-wise `f` of `from` into `into` (grown as needed).
fn fold(into: &mut Vec<u32>, from: &[u32], f: impl Fn(u32, u32) -> u32) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, &b) in into.iter_mut().zip(from) {
        *a = f(*a, b);
    }
}

/// Per second of the message clock: the largest round trip (ms), round
/// trips over 10 ms, the largest send lag (ms).
fn timeline_json(rtt_max: &[u32], slow: &[u32], lag_max: &[u32]) -> Value {
    let ms = |v: &[u32]| -> Vec<f64> { v.iter().map(|&x| round3(f64::from(x) / 1000.0)).collect() };
    json!({
        "rtt_max_ms": ms(rtt_max),
        "slow_10ms": slow,
        "lag_max_ms": ms(lag_max),
    })
}

/// A timeline array of a summary, back in µs (or counts).
fn timeline_of(v: &Value, key: &str, scale: f64) -> Vec<u32> {
    v["timeline"][key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| (x.as_f64().unwrap_or(0.0) * scale).round() as u32)
                .collect()
        })
        .unwrap_or_default()
}

/// Three lists, each `u32 n` then n values: round trips, connect times,
/// close handshakes; all µs, little-endian.
fn write_samples(path: &PathBuf, rtt: &[u32], connect: &[u32], close: &[u32]) -> Result<()> {
    let mut out = Vec::with_capacity(12 + 4 * (rtt.len() + connect.len() + close.len()));
    for list in [rtt, connect, close] {
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for v in list {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::File::create(path)?.write_all(&out)?;
    Ok(())
}

type Samples = (Vec<u32>, Vec<u32>, Vec<u32>);

fn read_samples(path: &str) -> Result<Samples> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .with_context(|| format!("open {path}"))?
        .read_to_end(&mut bytes)?;
    let mut words = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let mut take = || -> Result<Vec<u32>> {
        let n = words.next().context("truncated samples file")? as usize;
        let v: Vec<u32> = words.by_ref().take(n).collect();
        if v.len() != n {
            bail!("truncated samples file {path}");
        }
        Ok(v)
    };
    let rtt = take()?;
    let connect = take()?;
    let close = take()?;
    Ok((rtt, connect, close))
}

/// Sums the counters of several summaries, merges their tallies, and takes
/// the percentiles over all their samples (each must have a samples file).
fn merge(files: &[PathBuf]) -> Result<Value> {
    if files.is_empty() {
        bail!("merge needs at least one summary file");
    }
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    let counters = [
        "clients",
        "connected",
        "connect_errors",
        "expected",
        "sent",
        "echoed",
        "wrong",
        "missing",
        "unsent",
        "message_errors",
        "dropped",
        "clean_closes",
        "unfinished",
    ];
    let mut kinds: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    let (mut rtt, mut connect, mut close) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ramp, mut late, mut lag_max, mut lag_weighted) = (0f64, 0f64, 0f64, 0f64);
    let mut first: Option<Value> = None;
    let (mut t_rtt, mut t_slow, mut t_lag) = (Vec::new(), Vec::new(), Vec::new());
    for f in files {
        let text = std::fs::read_to_string(f).with_context(|| format!("read {}", f.display()))?;
        let line = text
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .with_context(|| format!("{}: no JSON line", f.display()))?;
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("{}: bad JSON", f.display()))?;
        for c in counters {
            *sums.entry(c).or_insert(0) += v[c].as_u64().unwrap_or(0);
        }
        for k in ["connect_error_kinds", "drop_kinds"] {
            if let Some(obj) = v[k].as_object() {
                let m = kinds.entry(k).or_default();
                for (name, n) in obj {
                    *m.entry(name.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
                }
            }
        }
        ramp = ramp.max(v["ramp_s"].as_f64().unwrap_or(0.0));
        late = late.max(v["late_ramp_s"].as_f64().unwrap_or(0.0));
        lag_max = lag_max.max(v["send_lag_ms"]["max"].as_f64().unwrap_or(0.0));
        lag_weighted +=
            v["send_lag_ms"]["mean"].as_f64().unwrap_or(0.0) * v["sent"].as_f64().unwrap_or(0.0);
        let samples = v["samples_file"]
            .as_str()
            .with_context(|| format!("{}: no samples_file (run with --samples)", f.display()))?;
        fold(&mut t_rtt, &timeline_of(&v, "rtt_max_ms", 1000.0), u32::max);
        fold(&mut t_slow, &timeline_of(&v, "slow_10ms", 1.0), |a, b| {
            a + b
        });
        fold(&mut t_lag, &timeline_of(&v, "lag_max_ms", 1000.0), u32::max);
        let (r, c, cl) = read_samples(samples)?;
        rtt.extend(r);
        connect.extend(c);
        close.extend(cl);
        first.get_or_insert(v);
    }
    let first = first.unwrap_or(Value::Null);
    let mut out = json!({
        "processes": files.len(),
        "url": first["url"],
        "messages_per_client": first["messages_per_client"],
        "interval_ms": first["interval_ms"],
        "message_bytes": first["message_bytes"],
        "ramp_s": round3(ramp),
        "late_ramp_s": round3(late),
        "rtt_ms": dist_json(&mut rtt),
        "connect_ms": dist_json(&mut connect),
        "close_ms": dist_json(&mut close),
        "timeline": timeline_json(&t_rtt, &t_slow, &t_lag),
    });
    for (c, n) in sums {
        out[c] = json!(n);
    }
    for (k, m) in kinds {
        out[k] = json!(m);
    }
    let sent = out["sent"].as_f64().unwrap_or(0.0);
    out["send_lag_ms"] = json!({
        "mean": if sent > 0.0 { round3(lag_weighted / sent) } else { 0.0 },
        "max": lag_max,
    });
    Ok(out)
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let out = match cli.cmd {
        Cmd::Merge { files } => merge(&files)?,
        Cmd::Run(args) => {
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
            let out = rt.block_on(run(args))?;
            rt.shutdown_timeout(Duration::from_millis(100));
            out
        }
    };
    println!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_their_sequence() {
        let m = message(42, 7, 64);
        assert_eq!(m.len(), 64);
        assert_eq!(echoed_seq(&m, 42), Some(7));
        assert_eq!(echoed_seq(&m, 41), None);
        assert_eq!(echoed_seq("garbage", 42), None);
        assert!(message(123_456, 1_000_000, 24).len() >= 24);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn addresses_from_urls() {
        assert_eq!(
            ws_addr("ws://127.0.0.1:9/ws").ok(),
            Some("127.0.0.1:9".into())
        );
        assert_eq!(ws_addr("ws://127.0.0.1").ok(), Some("127.0.0.1:80".into()));
        assert!(ws_addr("http://x/").is_err());
    }

    #[test]
    fn samples_file_round_trips() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("ws-clients-test-{}", std::process::id()));
        write_samples(&dir, &[1, 2, 3], &[9], &[4, 5])?;
        let got = read_samples(&dir.display().to_string())?;
        std::fs::remove_file(&dir)?;
        assert_eq!(got, (vec![1, 2, 3], vec![9], vec![4, 5]));
        Ok(())
    }

    #[test]
    fn timelines_fold_and_round_trip() {
        let mut into = vec![1, 5];
        fold(&mut into, &[3, 2, 7], u32::max);
        assert_eq!(into, vec![3, 5, 7]);
        let v = json!({ "timeline": timeline_json(&[1500, 20], &[2, 0], &[0, 0]) });
        assert_eq!(timeline_of(&v, "rtt_max_ms", 1000.0), vec![1500, 20]);
        assert_eq!(timeline_of(&v, "slow_10ms", 1.0), vec![2, 0]);
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("1y").is_err());
    }
}
