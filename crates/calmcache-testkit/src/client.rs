//! One HTTP/1.1 request with timing, on a fresh connection.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// What came back.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// Body as text.
    pub body: String,
    /// Time from sending to the end of the body.
    pub elapsed: Duration,
}

impl Reply {
    /// The `Cache-Status` header, or "".
    pub fn cache_status(&self) -> &str {
        self.header("cache-status")
    }

    /// A header as text, or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// `GET url`.
pub async fn get(url: &str) -> Reply {
    get_with(Method::GET, url, &[]).await
}

/// A request with a method and headers; panics on connection errors (tests).
pub async fn get_with(method: Method, url: &str, headers: &[(&str, &str)]) -> Reply {
    let uri: http::Uri = url.parse().expect("url");
    let authority = uri.authority().expect("authority").to_string();
    let started = Instant::now();
    let stream = TcpStream::connect(&authority).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()));
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req = req.header("host", authority);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Empty::<Bytes>::new()).expect("request");
    let resp = sender.send_request(req).await.expect("send");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        elapsed: started.elapsed(),
    }
}
