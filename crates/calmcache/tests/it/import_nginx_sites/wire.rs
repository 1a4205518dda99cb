//! What the table runs on: the origin each proxy has (TCP and a unix
//! socket, counting requests per path), the client (HTTP/1.1, plain or
//! TLS), and localising a fixture and starting calmcache from its import.

use std::collections::HashMap;
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Answer, Listener, Row, Site};
use crate::free_port;
use crate::import_nginx::imported;

/// The origin of one proxy: TCP listeners and a unix socket, answering
/// `path=<path?query> host=<Host> n=<count for this path?query>` and a
/// gzip-able filler as text/html; the query steers it: `st=N` status N,
/// `cc=V` Cache-Control V, `sc=1` a Set-Cookie.
pub(super) struct SiteOrigin {
    tcp: Vec<SocketAddr>,
    counts: Arc<Counts>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct Counts {
    by_target: Mutex<HashMap<String, u64>>,
}

impl SiteOrigin {
    async fn start(tcp: usize, unix: &Path) -> SiteOrigin {
        let counts = Arc::new(Counts::default());
        let mut origin = SiteOrigin {
            tcp: Vec::new(),
            counts,
            tasks: Vec::new(),
        };
        let mut listeners = Vec::new();
        for _ in 0..tcp {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            origin.tcp.push(listener.local_addr().unwrap());
            listeners.push(listener);
        }
        let own = Arc::new(origin.tcp.clone());
        for listener in listeners {
            let (counts, own) = (origin.counts.clone(), own.clone());
            origin.tasks.push(tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, counts.clone(), own.clone()));
                }
            }));
        }
        let listener = tokio::net::UnixListener::bind(unix).unwrap();
        let counts = origin.counts.clone();
        origin.tasks.push(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, counts.clone(), own.clone()));
            }
        }));
        origin
    }

    /// Requests so far whose target resolves to `path`'s.
    pub(super) fn for_path(&self, path: &str) -> u64 {
        let want = resolved(path);
        let by = self.counts.by_target.lock().unwrap();
        by.iter()
            .filter(|(t, _)| resolved(t) == want)
            .map(|(_, n)| n)
            .sum()
    }
}

impl Drop for SiteOrigin {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn serve<S>(stream: S, counts: Arc<Counts>, own: Arc<Vec<SocketAddr>>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let (counts, own) = (counts.clone(), own.clone());
        async move { Ok::<_, std::convert::Infallible>(answer(&counts, &own, &req)) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), svc)
        .await;
}

/// Some text, so every answer is long enough for gzip.
const FILLER: &str = "The quick brown fox jumps over the lazy dog; \
                      pack my box with five dozen liquor jugs.\n";

/// `own`: this origin's TCP addresses; a Host naming one (NGINX's
/// `$proxy_host` for a `proxy_pass` to an address) is written `origin-<i>`,
/// as each side's origin has ports of its own.
fn answer(
    counts: &Counts,
    own: &[SocketAddr],
    req: &http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let target = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let n = {
        let mut by = counts.by_target.lock().unwrap();
        let n = by.entry(target.clone()).or_default();
        *n += 1;
        *n
    };
    let host = req
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("-");
    let host = match own.iter().position(|a| a.to_string() == host) {
        Some(i) => format!("origin-{i}"),
        None => host.to_owned(),
    };
    let body = format!("path={target} host={host} n={n}\n{}", FILLER.repeat(8));
    let mut resp = http::Response::builder().header("content-type", "text/html");
    let query = req.uri().query().unwrap_or("");
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("st", v)) => resp = resp.status(v.parse::<u16>().unwrap()),
            Some(("cc", v)) => resp = resp.header("cache-control", v),
            Some(("sc", "1")) => resp = resp.header("set-cookie", format!("sid={n}; Path=/")),
            _ => {}
        }
    }
    resp.body(Full::new(Bytes::from(body))).unwrap()
}

// ---- the client ----

/// Where a proxy listens.
#[derive(Clone, Copy)]
pub(super) struct Ports {
    pub(super) plain: u16,
    tls: u16,
}

/// One GET over HTTP/1.1 on a new connection (TLS with SNI = Host for
/// [`Listener::Tls`]).
pub(super) async fn send(ports: Ports, tls: &Arc<rustls::ClientConfig>, row: &Row) -> Answer {
    let headers = row.headers();
    let exchange = async {
        match row.listener {
            Listener::Plain => {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", ports.plain))
                    .await
                    .unwrap();
                exchange(tcp, row.path, &headers).await
            }
            Listener::Tls => {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", ports.tls))
                    .await
                    .unwrap();
                let name = rustls_pki_types::ServerName::try_from(row.host.to_owned()).unwrap();
                let stream = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .unwrap();
                exchange(stream, row.path, &headers).await
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .unwrap_or_else(|_| panic!("{}: no answer within 20 s", row.label()))
}

async fn exchange<S>(io: S, path: &str, headers: &[(&str, &str)]) -> Answer
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder().uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let field = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let encoding = field("content-encoding");
    let mut body = Vec::new();
    if encoding == "gzip" {
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut body)
            .unwrap();
    } else {
        body = bytes.to_vec();
    }
    Answer {
        status: parts.status.as_u16(),
        body: String::from_utf8_lossy(&body).into_owned(),
        location: field("location"),
        encoding,
        x_cache_status: field("x-cache-status"),
        set_cookie: field("set-cookie"),
        cache_status: field("cache-status"),
    }
}

// ---- localising and starting ----

/// One proxy's side: its directory, ports and origin.
pub(super) struct Side {
    pub(super) dir: PathBuf,
    pub(super) ports: Ports,
    pub(super) origin: SiteOrigin,
}

impl Side {
    pub(super) async fn new(dir: PathBuf, site: &Site) -> Side {
        std::fs::create_dir_all(dir.join("cache")).unwrap();
        for file in site.files {
            let path = dir.join("www").join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("file {file}\n{}", FILLER.repeat(8))).unwrap();
        }
        let origin = SiteOrigin::start(2, &dir.join("app.sock")).await;
        let ports = Ports {
            plain: free_port(),
            tls: free_port(),
        };
        Side { dir, ports, origin }
    }

    /// The fixture's text with this side's ports, origin, paths and
    /// certificate.
    fn localise(&self, text: &str, cert: &Path, key: &Path) -> String {
        let d = self.dir.display();
        text.replace("127.0.0.1:8080", &format!("127.0.0.1:{}", self.ports.plain))
            .replace(
                "127.0.0.1:8443 ssl;",
                &format!(
                    "127.0.0.1:{} ssl;\nssl_certificate {};\nssl_certificate_key {};",
                    self.ports.tls,
                    cert.display(),
                    key.display()
                ),
            )
            .replace("127.0.0.1:8081", &self.origin.tcp[0].to_string())
            .replace("127.0.0.1:8082", &self.origin.tcp[1].to_string())
            .replace("unix:/run/app.sock", &format!("unix:{d}/app.sock"))
            .replace("/var/cache/nginx/", &format!("{d}/cache/"))
            .replace("/tmp/cache", &format!("{d}/cache/tmp"))
            .replace("/var/www/forum/public", &format!("{d}/www"))
            .replace("/home/social/live/public", &format!("{d}/www"))
            .replace("/srv/app/static/", &format!("{d}/www/static/"))
    }

    /// Writes the localised fixture (and its includes) into this side's
    /// directory; returns the main file.
    pub(super) fn write_localised(&self, site: &Site, cert: &Path, key: &Path) -> PathBuf {
        for include in site.includes {
            let path = self.dir.join(include);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let text = std::fs::read_to_string(fixture(include)).unwrap();
            std::fs::write(&path, self.localise(&text, cert, key)).unwrap();
        }
        let text = std::fs::read_to_string(fixture(site.file)).unwrap();
        let path = self.dir.join("site.conf");
        std::fs::write(&path, self.localise(&text, cert, key)).unwrap();
        path
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nginx")
        .join(name)
}

/// calmcache from the import of `conf`; the PLACEHOLDER upstream the
/// importer writes for locations without proxy_pass points at a port
/// nothing listens on. An error starting it (a picked port taken since,
/// by another test's connection) is returned for the caller to pick again.
pub(super) async fn start_calm(
    conf: &Path,
    dir: &Path,
) -> Result<calmcache::Running, calmcache::StartError> {
    let dead = format!("servers = [\"127.0.0.1:{}\"]", free_port());
    let toml = imported(conf).replace("servers = [\"127.0.0.1:8080\"]", &dead);
    let path = dir.join("calmcache.toml");
    std::fs::write(&path, &toml).unwrap();
    let config = calmcache::load_config(&path).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    calmcache::start(&config).await
}

/// `target` with `%2e` decoded and dot segments resolved (RFC 3986
/// §5.2.4, clamped at /), the query kept.
fn resolved(target: &str) -> String {
    let (path, query) = target
        .split_once('?')
        .map_or((target, None), |(p, q)| (p, Some(q)));
    let path = path.replace("%2e", ".").replace("%2E", ".");
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/').skip(1) {
        match seg {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut r = format!("/{}", out.join("/"));
    if let Some(q) = query {
        r = format!("{r}?{q}");
    }
    r
}
