//! How an access log line looks: NGINX's `combined` plus the cache fields,
//! or one JSON object; times in UTC without a time-zone database.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{Uri, Version};
use serde::Serialize;

use crate::config::access_log::LogFormat;

/// Everything a line says.
pub(super) struct Entry<'a> {
    pub(super) time: SystemTime,
    pub(super) remote_addr: IpAddr,
    /// The PROXY protocol sender (the TCP peer) when `remote_addr` came
    /// from its header (json only; absent otherwise).
    pub(super) realip_remote_addr: Option<IpAddr>,
    pub(super) method: &'a str,
    pub(super) uri: &'a str,
    pub(super) protocol: &'a str,
    pub(super) status: u16,
    pub(super) bytes_sent: u64,
    pub(super) referer: Option<&'a [u8]>,
    pub(super) user_agent: Option<&'a [u8]>,
    pub(super) host: Option<&'a [u8]>,
    pub(super) cache_status: &'a str,
    /// The server as configured (`host:port`, `unix:/path`).
    pub(super) upstream_addr: Option<&'a str>,
    pub(super) upstream_time: Option<Duration>,
    /// Time waited for an origin slot (json only; absent when none).
    pub(super) origin_wait: Option<Duration>,
    /// `new` or `reused` (json only; absent without an upstream answer).
    pub(super) upstream_connection: Option<&'static str>,
    pub(super) request_time: Duration,
}

/// A JSON line; the keys are a public interface.
#[derive(Serialize)]
pub(super) struct JsonLine<'a> {
    time: &'a str,
    remote_addr: IpAddr,
    method: &'a str,
    uri: &'a str,
    protocol: &'a str,
    status: u16,
    bytes_sent: u64,
    referer: Option<Cow<'a, str>>,
    user_agent: Option<Cow<'a, str>>,
    cache_status: &'a str,
    upstream_addr: Option<&'a str>,
    upstream_time: Option<f64>,
    request_time: f64,
    host: Option<Cow<'a, str>>,
    /// Milliseconds this request waited for an origin slot (`max_inflight`).
    #[serde(skip_serializing_if = "Option::is_none")]
    origin_wait_ms: Option<u64>,
    /// `new` when the upstream answer came over a connection opened for
    /// it, `reused` over one from the pool (NGINX has no such variable).
    #[serde(skip_serializing_if = "Option::is_none")]
    upstream_connection: Option<&'static str>,
    /// The load balancer's address when `remote_addr` came from its PROXY
    /// protocol header (NGINX's `$realip_remote_addr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    realip_remote_addr: Option<IpAddr>,
}

/// Appends `e` as one line (with its `\n`) to `out`.
pub(super) fn format_line<'a>(format: LogFormat, e: &Entry<'a>, out: &mut String) {
    let civil = Civil::of(e.time);
    match format {
        LogFormat::Combined => {
            // $remote_addr - $remote_user [$time_local] "$request" $status
            // $body_bytes_sent "$http_referer" "$http_user_agent"
            let _ = write!(out, "{} - - [", e.remote_addr);
            civil.write_local(out);
            out.push_str("] \"");
            escape(e.method.as_bytes(), out);
            out.push(' ');
            escape(e.uri.as_bytes(), out);
            let _ = write!(out, " {}\" {} {} \"", e.protocol, e.status, e.bytes_sent);
            escape_or_dash(e.referer, out);
            out.push_str("\" \"");
            escape_or_dash(e.user_agent, out);
            out.push_str("\" \"");
            escape(e.cache_status.as_bytes(), out);
            out.push_str("\" ");
            match e.upstream_addr {
                Some(addr) => {
                    let _ = write!(out, "{addr}");
                }
                None => out.push('-'),
            }
            out.push(' ');
            match e.upstream_time {
                Some(t) => seconds(t, out),
                None => out.push('-'),
            }
            out.push(' ');
            seconds(e.request_time, out);
        }
        LogFormat::Json => {
            let mut time = String::with_capacity(24);
            civil.write_rfc3339(&mut time);
            let text = |v: Option<&'a [u8]>| v.map(String::from_utf8_lossy);
            let line = JsonLine {
                time: &time,
                remote_addr: e.remote_addr,
                method: e.method,
                uri: e.uri,
                protocol: e.protocol,
                status: e.status,
                bytes_sent: e.bytes_sent,
                referer: text(e.referer),
                user_agent: text(e.user_agent),
                cache_status: e.cache_status,
                upstream_addr: e.upstream_addr,
                upstream_time: e.upstream_time.map(millis_f64),
                request_time: millis_f64(e.request_time),
                host: text(e.host),
                origin_wait_ms: e
                    .origin_wait
                    .map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
                upstream_connection: e.upstream_connection,
                realip_remote_addr: e.realip_remote_addr,
            };
            match serde_json::to_string(&line) {
                Ok(json) => out.push_str(&json),
                // Unreachable for these types; a line is still written.
                Err(_) => out.push_str("{}"),
            }
        }
    }
    out.push('\n');
}

/// Seconds with millisecond resolution, as a JSON number.
pub(super) fn millis_f64(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}

/// `1.234`: seconds with milliseconds, as NGINX prints `$request_time`.
pub(super) fn seconds(d: Duration, out: &mut String) {
    let _ = write!(out, "{}.{:03}", d.as_secs(), d.subsec_millis());
}

pub(super) fn escape_or_dash(value: Option<&[u8]>, out: &mut String) {
    match value {
        Some(v) => escape(v, out),
        None => out.push('-'),
    }
}

/// NGINX's log escaping: `"`, `\`, control characters and every byte from
/// 0x7F up become `\xHH`, so a line stays one line of printable ASCII.
pub(super) fn escape(bytes: &[u8], out: &mut String) {
    for &b in bytes {
        if !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\' {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
}

/// The request target in origin form (`path?query`, as the client sent
/// it) whatever the protocol: an HTTP/2 request's target is built from its
/// `:scheme`, `:authority` and `:path` (RFC 9113 §8.3.1) and an HTTP/1.1
/// one may come in absolute form (RFC 9112 §3.2.2), but one resource must
/// read the same in every line. The host is the line's `host` field. A
/// target without a path (CONNECT's authority form) is written as it is.
pub(super) fn uri_text(uri: &Uri) -> Cow<'_, str> {
    match (uri.path_and_query(), uri.authority()) {
        (Some(pq), _) if !pq.as_str().is_empty() => Cow::Borrowed(pq.as_str()),
        (_, Some(authority)) => Cow::Borrowed(authority.as_str()),
        _ => Cow::Borrowed("/"),
    }
}

pub(super) fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

/// A UTC calendar time (times before 1970 print as 1970).
pub(super) struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    millis: u32,
}

impl Civil {
    pub(super) fn of(time: SystemTime) -> Civil {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let in_day = secs % 86_400;
        Civil {
            year,
            month: u32::try_from(month).unwrap_or(1),
            day: u32::try_from(day).unwrap_or(1),
            hour: in_day / 3_600,
            minute: in_day % 3_600 / 60,
            second: in_day % 60,
            millis: since.subsec_millis(),
        }
    }

    /// `2024-05-01T12:34:56.789Z`
    pub(super) fn write_rfc3339(&self, out: &mut String) {
        let _ = write!(
            out,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millis
        );
    }

    /// `01/May/2024:12:34:56 +0000` (NGINX's `$time_local`, in UTC).
    pub(super) fn write_local(&self, out: &mut String) {
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let month = MONTHS
            .get(self.month.saturating_sub(1) as usize)
            .unwrap_or(&"Jan");
        let _ = write!(
            out,
            "{:02}/{month}/{:04}:{:02}:{:02}:{:02} +0000",
            self.day, self.year, self.hour, self.minute, self.second
        );
    }
}
