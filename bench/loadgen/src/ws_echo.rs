//! `ws-echo`: a WebSocket echo server for `bench/websocket` and
//! `bench/artillery-ws`.
//!
//! Every text and binary message is sent back as it came; pings are answered
//! (tungstenite does it) and a close is answered with a close. It prints
//! `listening on ADDR` once bound, and on SIGTERM/SIGINT (or when
//! `--lifetime` runs out: it never outlives a benchmark) one JSON line of
//! counters: connections accepted, handshakes failed, messages echoed,
//! connections still open and the most open at once.

use calmcache_loadgen::parse_duration;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

#[derive(Parser, Debug)]
#[command(
    name = "ws-echo",
    about = "WebSocket echo server (text and binary echoed, pings answered)"
)]
struct Args {
    /// Address to listen on (loopback)
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Runtime worker threads (1: a current-thread runtime)
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Listen backlog
    #[arg(long, default_value_t = 4096)]
    backlog: u32,
    /// Exit on its own after this long, whatever happens (e.g. 2h, 30m)
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    lifetime: Duration,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    handshake_errors: AtomicU64,
    open: AtomicU64,
    peak_open: AtomicU64,
    echoed: AtomicU64,
}

impl Counters {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "accepted": self.accepted.load(Ordering::Relaxed),
            "handshake_errors": self.handshake_errors.load(Ordering::Relaxed),
            "open": self.open.load(Ordering::Relaxed),
            "peak_open": self.peak_open.load(Ordering::Relaxed),
            "echoed": self.echoed.load(Ordering::Relaxed),
        })
    }
}

/// Small buffers: up to ~10,000 sockets in this process.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
}

async fn echo(stream: TcpStream, counters: Arc<Counters>) {
    let _ = stream.set_nodelay(true);
    let mut ws = match tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
    {
        Ok(ws) => ws,
        Err(_) => {
            counters.handshake_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let open = counters.open.fetch_add(1, Ordering::Relaxed) + 1;
    counters.peak_open.fetch_max(open, Ordering::Relaxed);
    while let Some(Ok(msg)) = ws.next().await {
        match msg {
            Message::Text(_) | Message::Binary(_) => {
                if ws.send(msg).await.is_err() {
                    break;
                }
                counters.echoed.fetch_add(1, Ordering::Relaxed);
            }
            // tungstenite queues the pong and the close reply; reading on flushes them.
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_) => {}
        }
    }
    counters.open.fetch_sub(1, Ordering::Relaxed);
}

async fn serve(args: Args) -> Result<()> {
    let socket = if args.listen.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket
        .bind(args.listen)
        .with_context(|| format!("bind {}", args.listen))?;
    let listener = socket.listen(args.backlog)?;
    println!("listening on {}", listener.local_addr()?);
    let counters = Arc::new(Counters::default());
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let lifetime = tokio::time::sleep(args.lifetime);
    tokio::pin!(lifetime);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    counters.accepted.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(echo(stream, counters.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
            () = &mut lifetime => {
                eprintln!("lifetime {:?} over: exiting", args.lifetime);
                break;
            }
        }
    }
    println!("{}", counters.json());
    Ok(())
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
    rt.block_on(serve(args))?;
    // Open connections are dropped with the runtime.
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("x").is_err());
    }
}
