//! `catalog-origin`: the origin of `bench/fleet-many`. It serves the URL
//! catalog of [`calmcache_loadgen::catalog`] (per-URL sizes from 1 KiB to
//! 50 MiB, `Vary: Accept-Language` on a tenth of them) and logs every fetch,
//! so the bench can count origin fetches per object per lifetime.
//!
//! Every page waits `--ttfb-ms` before its head (a remote origin's first
//! byte), then streams its body in 64 KiB slices of the shared pattern (one period each) (no
//! copy), at most `--mibps` MiB/s per fetch (0: as fast as the socket
//! takes it), with `Cache-Control: public, max-age=--max-age`. No
//! validators: every fetch is a whole body.
//!
//! Endpoints besides the catalog: `GET /__origin/stats` (`{"requests",
//! "in_flight", "bytes"}`, the shape `bench/lib.sh` reads), `POST
//! /__origin/reset` (zeroes the counts and the log), `GET /__origin/log`
//! (one line per fetch since the reset: `unix_ms path variant bytes`, the
//! variant being the `Accept-Language` index for a Vary'd URL, else 0).
//! Unknown paths get 404 and are not logged. It must not know which product
//! fetches from it.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use bytes::Bytes;
use calmcache_loadgen::catalog::{self, Catalog, CatalogArgs, Item};
use clap::Parser;
use futures_util::stream;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Bytes per body frame (one pattern period: [`catalog::window`]'s longest slice).
const CHUNK: usize = catalog::PATTERN_LEN;

#[derive(Parser, Debug)]
#[command(
    name = "catalog-origin",
    about = "The many-URL origin of bench/fleet-many: per-URL sizes, Vary, a fetch log"
)]
struct Args {
    /// Where it listens
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: String,
    #[command(flatten)]
    catalog: CatalogArgs,
    /// Cache-Control max-age of every page, seconds
    #[arg(long, default_value_t = 20)]
    max_age: u64,
    /// Wait before the response head, ms
    #[arg(long, default_value_t = 20)]
    ttfb_ms: u64,
    /// Body rate per fetch, MiB/s (0: unlimited)
    #[arg(long, default_value_t = 100)]
    mibps: u64,
}

/// One fetch, as logged.
struct Fetch {
    unix_ms: u64,
    id: u64,
    variant: u8,
    bytes: u64,
}

struct Origin {
    catalog: Catalog,
    args: Args,
    requests: AtomicU64,
    in_flight: Arc<AtomicU64>,
    bytes: AtomicU64,
    log: Mutex<Vec<Fetch>>,
}

/// Decrements `in_flight` when the body is done or dropped.
struct InFlight(Arc<AtomicU64>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Origin {
    fn lock_log(&self) -> std::sync::MutexGuard<'_, Vec<Fetch>> {
        self.log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn stats(&self) -> Response<Body> {
        let json = format!(
            "{{\"requests\": {}, \"in_flight\": {}, \"bytes\": {}}}\n",
            self.requests.load(Ordering::Relaxed),
            self.in_flight.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed)
        );
        text(StatusCode::OK, json, "application/json")
    }

    fn reset(&self) -> Response<Body> {
        self.requests.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        self.lock_log().clear();
        text(StatusCode::OK, "reset\n".into(), "text/plain")
    }

    fn log_text(&self) -> Response<Body> {
        let mut out = String::new();
        for f in self.lock_log().iter() {
            let item = self.catalog.item(f.id);
            let path = item.map(|i| i.path()).unwrap_or_default();
            let _ = writeln!(out, "{}\t{}\t{}\t{}", f.unix_ms, path, f.variant, f.bytes);
        }
        text(StatusCode::OK, out, "text/tab-separated-values")
    }

    /// A catalog page: logged, then its head after the first-byte wait,
    /// then its body at the fetch rate.
    async fn page(self: Arc<Self>, item: Item, accept_language: Option<String>) -> Response<Body> {
        let variant = item.variant(accept_language.as_deref());
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(item.size, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = InFlight(self.in_flight.clone());
        self.lock_log().push(Fetch {
            unix_ms: unix_ms(),
            id: item.id,
            variant: variant as u8,
            bytes: item.size,
        });
        tokio::time::sleep(Duration::from_millis(self.args.ttfb_ms)).await;
        let body = body_stream(item, variant, self.args.mibps, guard);
        let mut resp = Response::new(body);
        let h = resp.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/octet-stream"),
        );
        h.insert(hyper::header::CONTENT_LENGTH, item.size.into());
        if let Ok(cc) = format!("public, max-age={}", self.args.max_age).parse() {
            h.insert(hyper::header::CACHE_CONTROL, cc);
        }
        if item.vary {
            h.insert(
                hyper::header::VARY,
                hyper::header::HeaderValue::from_static("Accept-Language"),
            );
        }
        resp
    }
}

/// The body of `item`'s `variant`: 64 KiB slices of the pattern, paced to
/// `mibps` (0: unpaced); `guard` lives as long as the body.
fn body_stream(item: Item, variant: usize, mibps: u64, guard: InFlight) -> Body {
    let offset = item.offset(variant);
    let start = Instant::now();
    let state = (0u64, guard);
    let frames = stream::unfold(state, move |(at, guard)| async move {
        if at >= item.size {
            return None;
        }
        if mibps > 0 {
            let due = start + Duration::from_secs_f64(at as f64 / (mibps as f64 * 1_048_576.0));
            tokio::time::sleep_until(due).await;
        }
        let len = (item.size - at).min(CHUNK as u64) as usize;
        let chunk = Bytes::from_static(catalog::window(offset, at, len));
        Some((
            Ok::<_, Infallible>(Frame::data(chunk)),
            (at + len as u64, guard),
        ))
    });
    BodyExt::boxed_unsync(StreamBody::new(frames))
}

async fn handle(origin: Arc<Origin>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    Ok(match (req.method(), path.as_str()) {
        (_, "/__origin/stats") => origin.stats(),
        (&Method::POST, "/__origin/reset") => origin.reset(),
        (&Method::GET, "/__origin/log") => origin.log_text(),
        (&Method::GET | &Method::HEAD, _) => match origin.catalog.parse(&path) {
            Some(item) => {
                let lang = req
                    .headers()
                    .get(hyper::header::ACCEPT_LANGUAGE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                origin.page(item, lang).await
            }
            None => text(
                StatusCode::NOT_FOUND,
                "not in the catalog\n".into(),
                "text/plain",
            ),
        },
        _ => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET only\n".into(),
            "text/plain",
        ),
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let catalog = args.catalog.catalog();
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    catalog::pattern();
    let origin = Arc::new(Origin {
        catalog,
        args,
        requests: AtomicU64::new(0),
        in_flight: Arc::new(AtomicU64::new(0)),
        bytes: AtomicU64::new(0),
        log: Mutex::new(Vec::new()),
    });
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let origin = origin.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(origin.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
