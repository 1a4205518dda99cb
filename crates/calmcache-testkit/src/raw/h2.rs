//! A hand-made HTTP/2 client for hostile-input tests: h2c prior knowledge
//! over TCP or ALPN `h2` over TLS, frames built by hand (HEADERS,
//! CONTINUATION, DATA, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE) with header
//! blocks that say exactly what the test wants ([`super::hpack`]), and the
//! server's frames read back into one [`H2Outcome`] per stream.
//!
//! It acknowledges the server's SETTINGS and PINGs, returns flow-control
//! credit for every DATA frame it gets, and respects the server's windows
//! when asked to ([`H2Conn::send_body`]). Every read and write has a time
//! limit: a stalled server fails the test instead of hanging it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::hpack::{encode_literal, Decoder};
use super::Io;

/// How long one write, or a wait for an answer, may take.
pub const H2_LIMIT: Duration = Duration::from_secs(5);

/// Frame types (RFC 9113 §6).
pub mod frame {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY.
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE.
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    /// END_STREAM (DATA, HEADERS).
    pub const END_STREAM: u8 = 0x1;
    /// ACK (SETTINGS, PING).
    pub const ACK: u8 = 0x1;
    /// END_HEADERS (HEADERS, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED (DATA, HEADERS).
    pub const PADDED: u8 = 0x8;
    /// PRIORITY (HEADERS).
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 §7).
pub mod code {
    /// NO_ERROR.
    pub const NO_ERROR: u32 = 0x0;
    /// PROTOCOL_ERROR.
    pub const PROTOCOL_ERROR: u32 = 0x1;
    /// INTERNAL_ERROR.
    pub const INTERNAL_ERROR: u32 = 0x2;
    /// FLOW_CONTROL_ERROR.
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    /// REFUSED_STREAM.
    pub const REFUSED_STREAM: u32 = 0x7;
    /// CANCEL.
    pub const CANCEL: u32 = 0x8;
    /// COMPRESSION_ERROR.
    pub const COMPRESSION_ERROR: u32 = 0x9;
    /// ENHANCE_YOUR_CALM.
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// One frame from the server.
#[derive(Clone, Debug)]
pub struct Frame {
    /// Type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream id.
    pub stream: u32,
    /// Payload.
    pub payload: Vec<u8>,
}

/// What happened to one stream (and to the connection, as far as it touches
/// the stream).
#[derive(Clone, Debug, Default)]
pub struct H2Outcome {
    /// The final `:status`, when response headers came.
    pub status: Option<u16>,
    /// Response header fields (the pseudo ones too), in order.
    pub headers: Vec<(String, String)>,
    /// The response body.
    pub body: Vec<u8>,
    /// The RST_STREAM error code, when the server reset the stream.
    pub rst: Option<u32>,
    /// The connection's GOAWAY error code, when one came.
    pub goaway: Option<u32>,
    /// True when the connection closed.
    pub closed: bool,
    /// True when the stream ended (END_STREAM, reset, or the connection ended).
    pub ended: bool,
    /// True when nothing decided the stream within the time limit.
    pub timed_out: bool,
}

impl H2Outcome {
    /// True when the server refused the request as malformed: a reset
    /// (any code), a GOAWAY, or a 4xx status.
    pub fn refused(&self) -> bool {
        self.rst.is_some()
            || self.goaway.is_some_and(|c| c != code::NO_ERROR)
            || self.status.is_some_and(|s| (400..500).contains(&s))
    }

    /// A short description for messages, e.g. `200`, `RST(PROTOCOL_ERROR)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(s) = self.status {
            parts.push(s.to_string());
        }
        if let Some(c) = self.rst {
            parts.push(format!("RST_STREAM({})", code_name(c)));
        }
        if let Some(c) = self.goaway {
            parts.push(format!("GOAWAY({})", code_name(c)));
        }
        if self.closed {
            parts.push("closed".into());
        }
        if self.timed_out {
            parts.push("no answer in time".into());
        }
        if parts.is_empty() {
            parts.push("nothing".into());
        }
        parts.join(" ")
    }
}

/// The name of an HTTP/2 error code.
pub fn code_name(c: u32) -> String {
    let name = match c {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("0x{c:x}"),
    };
    name.into()
}

/// A raw HTTP/2 client connection.
pub struct H2Conn {
    io: Box<dyn Io>,
    rbuf: Vec<u8>,
    decoder: Decoder,
    streams: HashMap<u32, H2Outcome>,
    /// The GOAWAY error code, once one came.
    pub goaway: Option<u32>,
    /// The GOAWAY's last stream id.
    pub goaway_last_stream: Option<u32>,
    /// True once the server closed its side.
    pub closed: bool,
    /// Why the last write failed, if one did.
    pub write_error: Option<String>,
    /// Frames of each type received so far, by type.
    pub frames_seen: HashMap<u8, usize>,
    next_stream: u32,
    /// Header block being assembled: stream, bytes, END_STREAM.
    pending: Option<(u32, Vec<u8>, bool)>,
    initial_window: i64,
    conn_window: i64,
    /// Per stream: credit from WINDOW_UPDATE minus bytes sent.
    stream_credit: HashMap<u32, i64>,
    max_frame: usize,
}

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl H2Conn {
    /// h2c with prior knowledge over TCP.
    pub async fn h2c(addr: SocketAddr) -> std::io::Result<H2Conn> {
        let tcp = tokio::time::timeout(H2_LIMIT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect"))??;
        tcp.set_nodelay(true)?;
        H2Conn::handshake(Box::new(tcp)).await
    }

    /// HTTP/2 over TLS with SNI `name`; `config` must offer ALPN `h2`
    /// (e.g. `TestCa::client(&[b"h2"])`); fails unless the server picks it.
    pub async fn tls(
        addr: SocketAddr,
        name: &str,
        config: Arc<rustls::ClientConfig>,
    ) -> std::io::Result<H2Conn> {
        let tcp = tokio::time::timeout(H2_LIMIT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect"))??;
        tcp.set_nodelay(true)?;
        let server_name = ServerName::try_from(name.to_string())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let connector = tokio_rustls::TlsConnector::from(config);
        let tls = tokio::time::timeout(H2_LIMIT, connector.connect(server_name, tcp))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "tls"))??;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(std::io::Error::other("the server did not choose ALPN h2"));
        }
        H2Conn::handshake(Box::new(tls)).await
    }

    /// Sends the preface and an empty SETTINGS over `io`, then waits for the
    /// server's SETTINGS (acknowledged on arrival).
    pub async fn handshake(io: Box<dyn Io>) -> std::io::Result<H2Conn> {
        let mut conn = H2Conn {
            io,
            rbuf: Vec::new(),
            decoder: Decoder::new(),
            streams: HashMap::new(),
            goaway: None,
            goaway_last_stream: None,
            closed: false,
            write_error: None,
            frames_seen: HashMap::new(),
            next_stream: 1,
            pending: None,
            initial_window: 65_535,
            conn_window: 65_535,
            stream_credit: HashMap::new(),
            max_frame: 16_384,
        };
        let mut hello = PREFACE.to_vec();
        hello.extend(frame_bytes(frame::SETTINGS, 0, 0, &[]));
        conn.write(&hello).await;
        let deadline = Instant::now() + H2_LIMIT;
        while !conn.frames_seen.contains_key(&frame::SETTINGS) {
            if conn.read_frame_until(deadline).await.is_none() {
                return Err(std::io::Error::other(format!(
                    "no SETTINGS from the server (closed: {}, goaway: {:?})",
                    conn.closed, conn.goaway
                )));
            }
        }
        Ok(conn)
    }

    /// The next client stream id (1, 3, 5, ...).
    pub fn next_stream(&mut self) -> u32 {
        let id = self.next_stream;
        self.next_stream += 2;
        id
    }

    async fn write(&mut self, bytes: &[u8]) -> bool {
        if self.write_error.is_some() {
            return false;
        }
        let io = &mut self.io;
        let done = tokio::time::timeout(H2_LIMIT, async {
            io.write_all(bytes).await?;
            io.flush().await
        })
        .await;
        match done {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                self.write_error = Some(e.to_string());
                false
            }
            Err(_) => {
                self.write_error = Some(format!("a write stalled for {H2_LIMIT:?}"));
                false
            }
        }
    }

    /// Sends one frame as given; false when the write failed.
    pub async fn send_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> bool {
        let bytes = frame_bytes(kind, flags, stream, payload);
        self.write(&bytes).await
    }

    /// Sends several frames in one write; false when it failed.
    pub async fn send_frames(&mut self, frames: &[(u8, u8, u32, Vec<u8>)]) -> bool {
        let mut bytes = Vec::new();
        for (kind, flags, stream, payload) in frames {
            bytes.extend(frame_bytes(*kind, *flags, *stream, payload));
        }
        self.write(&bytes).await
    }

    /// HEADERS with `fields` encoded as literals (names exactly as given),
    /// END_HEADERS set, END_STREAM when `end_stream`.
    pub async fn headers(
        &mut self,
        stream: u32,
        fields: &[(&str, &str)],
        end_stream: bool,
    ) -> bool {
        let mut flags = flag::END_HEADERS;
        if end_stream {
            flags |= flag::END_STREAM;
        }
        self.send_frame(frame::HEADERS, flags, stream, &encode_literal(fields))
            .await
    }

    /// HEADERS with a header block fragment and flags exactly as given.
    pub async fn headers_raw(&mut self, stream: u32, block: &[u8], flags: u8) -> bool {
        self.send_frame(frame::HEADERS, flags, stream, block).await
    }

    /// CONTINUATION with a fragment, END_HEADERS when `end_headers`.
    pub async fn continuation(&mut self, stream: u32, block: &[u8], end_headers: bool) -> bool {
        let flags = if end_headers { flag::END_HEADERS } else { 0 };
        self.send_frame(frame::CONTINUATION, flags, stream, block)
            .await
    }

    /// One DATA frame, ignoring flow control (counted against the windows).
    pub async fn data(&mut self, stream: u32, bytes: &[u8], end_stream: bool) -> bool {
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        self.conn_window -= bytes.len() as i64;
        *self.stream_credit.entry(stream).or_default() -= bytes.len() as i64;
        self.send_frame(frame::DATA, flags, stream, bytes).await
    }

    /// Sends `body` as DATA frames within the server's flow-control windows
    /// and frame size, reading the server's frames while it waits for credit;
    /// false when the stream or connection ended first, or no credit came
    /// within the time limit.
    pub async fn send_body(&mut self, stream: u32, body: &[u8], end_stream: bool) -> bool {
        let mut rest = body;
        let deadline = Instant::now() + H2_LIMIT * 6;
        // Bounded: each round sends a frame or reads one, until the deadline.
        for _ in 0..1_000_000 {
            if self.stream_ended(stream) || self.closed || self.write_error.is_some() {
                return false;
            }
            let window = self.conn_window.min(self.stream_window(stream));
            if rest.is_empty() {
                return if end_stream {
                    self.data(stream, &[], true).await
                } else {
                    true
                };
            }
            let n = usize::try_from(window.max(0))
                .unwrap_or(0)
                .min(self.max_frame)
                .min(rest.len());
            if n == 0 {
                if self.read_frame_until(deadline).await.is_none() {
                    return false;
                }
                continue;
            }
            let (chunk, tail) = rest.split_at(n);
            let last = tail.is_empty() && end_stream;
            if !self.data(stream, chunk, last).await {
                return false;
            }
            rest = tail;
            if last {
                return true;
            }
            // Take in what the server sent meanwhile (credit, settings).
            self.drain(Duration::ZERO).await;
        }
        false
    }

    fn stream_window(&self, stream: u32) -> i64 {
        self.initial_window + self.stream_credit.get(&stream).copied().unwrap_or(0)
    }

    /// RST_STREAM with `code`.
    pub async fn rst(&mut self, stream: u32, code: u32) -> bool {
        self.send_frame(frame::RST_STREAM, 0, stream, &code.to_be_bytes())
            .await
    }

    /// SETTINGS with (identifier, value) pairs.
    pub async fn settings(&mut self, pairs: &[(u16, u32)]) -> bool {
        let mut payload = Vec::new();
        for (id, value) in pairs {
            payload.extend(id.to_be_bytes());
            payload.extend(value.to_be_bytes());
        }
        self.send_frame(frame::SETTINGS, 0, 0, &payload).await
    }

    /// PING with `data`.
    pub async fn ping(&mut self, data: [u8; 8]) -> bool {
        self.send_frame(frame::PING, 0, 0, &data).await
    }

    /// WINDOW_UPDATE of `increment` on `stream` (0: the connection).
    pub async fn window_update(&mut self, stream: u32, increment: u32) -> bool {
        self.send_frame(frame::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
            .await
    }

    fn stream_ended(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.ended)
    }

    /// Reads one frame (handling SETTINGS, PING, WINDOW_UPDATE, GOAWAY and
    /// stream bookkeeping) or `None` when the connection closed or the
    /// deadline passed.
    pub async fn read_frame_until(&mut self, deadline: Instant) -> Option<Frame> {
        let frame = loop {
            if self.rbuf.len() >= 9 {
                let len = (usize::from(self.rbuf[0]) << 16)
                    | (usize::from(self.rbuf[1]) << 8)
                    | usize::from(self.rbuf[2]);
                if self.rbuf.len() >= 9 + len {
                    let head: Vec<u8> = self.rbuf.drain(..9).collect();
                    let payload: Vec<u8> = self.rbuf.drain(..len).collect();
                    let stream =
                        u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    break Frame {
                        kind: head[3],
                        flags: head[4],
                        stream,
                        payload,
                    };
                }
            }
            if self.closed {
                return None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let mut chunk = [0u8; 32 * 1024];
            match tokio::time::timeout(left, self.io.read(&mut chunk)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => {
                    self.closed = true;
                    self.end_all();
                    return None;
                }
                Ok(Ok(n)) => self.rbuf.extend_from_slice(&chunk[..n]),
            }
        };
        *self.frames_seen.entry(frame.kind).or_default() += 1;
        self.handle(&frame).await;
        Some(frame)
    }

    fn end_all(&mut self) {
        for s in self.streams.values_mut() {
            s.closed = true;
            s.ended = true;
        }
    }

    async fn handle(&mut self, f: &Frame) {
        match f.kind {
            frame::SETTINGS if f.flags & flag::ACK == 0 => {
                for pair in f.payload.chunks_exact(6) {
                    let id = u16::from_be_bytes([pair[0], pair[1]]);
                    let value = u32::from_be_bytes([pair[2], pair[3], pair[4], pair[5]]);
                    match id {
                        0x4 => self.initial_window = i64::from(value),
                        0x5 => self.max_frame = value as usize,
                        _ => {}
                    }
                }
                self.send_frame(frame::SETTINGS, flag::ACK, 0, &[]).await;
            }
            frame::PING if f.flags & flag::ACK == 0 => {
                let payload = f.payload.clone();
                self.send_frame(frame::PING, flag::ACK, 0, &payload).await;
            }
            frame::WINDOW_UPDATE if f.payload.len() == 4 => {
                let inc =
                    u32::from_be_bytes([f.payload[0], f.payload[1], f.payload[2], f.payload[3]])
                        & 0x7fff_ffff;
                if f.stream == 0 {
                    self.conn_window += i64::from(inc);
                } else {
                    *self.stream_credit.entry(f.stream).or_default() += i64::from(inc);
                }
            }
            frame::GOAWAY if f.payload.len() >= 8 => {
                let last =
                    u32::from_be_bytes([f.payload[0], f.payload[1], f.payload[2], f.payload[3]])
                        & 0x7fff_ffff;
                let c =
                    u32::from_be_bytes([f.payload[4], f.payload[5], f.payload[6], f.payload[7]]);
                self.goaway = Some(c);
                self.goaway_last_stream = Some(last);
                for (id, s) in self.streams.iter_mut() {
                    s.goaway = Some(c);
                    if *id > last {
                        s.ended = true;
                    }
                }
            }
            frame::RST_STREAM if f.payload.len() == 4 => {
                let c =
                    u32::from_be_bytes([f.payload[0], f.payload[1], f.payload[2], f.payload[3]]);
                let s = self.streams.entry(f.stream).or_default();
                s.rst = Some(c);
                s.ended = true;
            }
            frame::DATA => {
                let body = strip_padding(f.flags, &f.payload, false);
                let n = f.payload.len() as u32;
                let s = self.streams.entry(f.stream).or_default();
                s.body.extend_from_slice(body);
                if f.flags & flag::END_STREAM != 0 {
                    s.ended = true;
                }
                if n > 0 {
                    let ended = f.flags & flag::END_STREAM != 0;
                    let mut frames = vec![(frame::WINDOW_UPDATE, 0, 0, n.to_be_bytes().to_vec())];
                    if !ended {
                        frames.push((frame::WINDOW_UPDATE, 0, f.stream, n.to_be_bytes().to_vec()));
                    }
                    self.send_frames(&frames).await;
                }
            }
            frame::HEADERS => {
                let block = strip_padding(f.flags, &f.payload, true).to_vec();
                let end_stream = f.flags & flag::END_STREAM != 0;
                if f.flags & flag::END_HEADERS != 0 {
                    self.header_block(f.stream, &block, end_stream);
                } else {
                    self.pending = Some((f.stream, block, end_stream));
                }
            }
            frame::CONTINUATION => {
                if let Some((stream, mut block, end_stream)) = self.pending.take() {
                    block.extend_from_slice(&f.payload);
                    if f.flags & flag::END_HEADERS != 0 {
                        self.header_block(stream, &block, end_stream);
                    } else {
                        self.pending = Some((stream, block, end_stream));
                    }
                }
            }
            _ => {}
        }
    }

    fn header_block(&mut self, stream: u32, block: &[u8], end_stream: bool) {
        let fields = self
            .decoder
            .decode(block)
            .unwrap_or_else(|e| vec![(":decode-error".into(), e)]);
        let s = self.streams.entry(stream).or_default();
        let status = fields
            .iter()
            .find(|(n, _)| n == ":status")
            .and_then(|(_, v)| v.parse::<u16>().ok());
        match status {
            // Interim answers (100 Continue) do not decide the stream.
            Some(code) if (100..200).contains(&code) => {}
            Some(code) => {
                s.status = Some(code);
                s.headers = fields;
            }
            // Trailers.
            None => s.headers.extend(fields),
        }
        if end_stream {
            s.ended = true;
        }
    }

    /// Reads frames for up to `limit`, returning early when nothing arrives
    /// for a moment (`Duration::ZERO`: only what is already readable).
    pub async fn drain(&mut self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit.max(Duration::from_millis(1));
        let mut n = 0;
        while n < 100_000 && self.read_frame_until(deadline).await.is_some() {
            n += 1;
        }
        n
    }

    /// Reads until `stream` ends, the connection ends, or `limit` passes.
    pub async fn outcome(&mut self, stream: u32, limit: Duration) -> H2Outcome {
        let deadline = Instant::now() + limit;
        let mut timed_out = false;
        while !self.stream_ended(stream) && !self.closed {
            if self.read_frame_until(deadline).await.is_none() {
                timed_out = !self.closed;
                break;
            }
        }
        let mut out = self.streams.get(&stream).cloned().unwrap_or_default();
        out.goaway = self.goaway;
        out.closed |= self.closed;
        out.timed_out = timed_out && !out.ended && self.goaway.is_none();
        out
    }

    /// Opens a stream with `fields` (END_STREAM when `body` is `None`),
    /// sends `body` within flow control, and waits for the outcome.
    pub async fn request(&mut self, fields: &[(&str, &str)], body: Option<&[u8]>) -> H2Outcome {
        let stream = self.next_stream();
        self.headers(stream, fields, body.is_none()).await;
        if let Some(body) = body {
            self.send_body(stream, body, true).await;
        }
        self.outcome(stream, H2_LIMIT).await
    }

    /// True when the server closes within `limit` (GOAWAY or not).
    pub async fn closes_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.closed {
            if self.read_frame_until(deadline).await.is_none() {
                break;
            }
        }
        self.closed
    }
}

fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = Vec::with_capacity(9 + len);
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn strip_padding(flags: u8, payload: &[u8], headers: bool) -> &[u8] {
    let mut p = payload;
    let mut pad = 0usize;
    if flags & flag::PADDED != 0 {
        let Some((&n, rest)) = p.split_first() else {
            return &[];
        };
        pad = usize::from(n);
        p = rest;
    }
    if headers && flags & flag::PRIORITY != 0 {
        p = p.get(5..).unwrap_or_default();
    }
    &p[..p.len().saturating_sub(pad)]
}

/// The usual request pseudo-headers for `method` and `path` on `authority`
/// (scheme `http`), to extend with fields.
pub fn pseudo<'a>(method: &'a str, path: &'a str, authority: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
    ]
}
