//! [`RawConfig`]: the config file exactly as written, deserialized by serde.
//!
//! Owns the key names (a public interface: renaming one breaks users' files);
//! `parse.rs` reads a file into them, reporting every key that does not fit.
//! Every key is optional here and durations and sizes stay text: defaults,
//! ranges and cross references belong to `validate.rs`, so that it can
//! report all of them at once instead of serde stopping at the first.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub(crate) server: Option<RawServer>,
    pub(crate) admin: Option<RawAdmin>,
    #[serde(default)]
    pub(crate) upstreams: BTreeMap<String, RawUpstream>,
    #[serde(default)]
    pub(crate) zones: BTreeMap<String, RawZone>,
    #[serde(default)]
    pub(crate) routes: Vec<RawRoute>,
    pub(crate) access_log: Option<RawAccessLog>,
    pub(crate) fleet: Option<RawFleet>,
    #[serde(default)]
    pub(crate) limits: BTreeMap<String, RawLimit>,
}

/// `[limits.<name>]`: a per-client limit routes share (NGINX's
/// limit_req_zone / limit_conn_zone).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimit {
    pub(crate) rate: Option<String>,
    pub(crate) burst: Option<i64>,
    pub(crate) delay: Option<RawDelay>,
    pub(crate) connections: Option<i64>,
    pub(crate) status: Option<i64>,
    pub(crate) applies_to: Option<String>,
    pub(crate) max_clients: Option<i64>,
}

/// `delay`: `"nodelay"` or a count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawDelay {
    Count(i64),
    Text(String),
}

/// `[fleet]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFleet {
    pub(crate) redis: Option<RawRedisNodes>,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) password_file: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) max_object_size: Option<Text>,
    pub(crate) max_pieces_in_flight: Option<Text>,
    pub(crate) stream_from_peers: Option<bool>,
    pub(crate) timeout: Option<Text>,
    pub(crate) lease: Option<Text>,
    pub(crate) tls_ca: Option<String>,
    pub(crate) tls_cert: Option<String>,
    pub(crate) tls_key: Option<String>,
    pub(crate) secret_file: Option<String>,
}

/// `fleet.redis`: one URL (a single instance) or a list (cluster nodes).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawRedisNodes {
    One(String),
    Cluster(Vec<String>),
}

/// `[access_log]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccessLog {
    pub(crate) path: Option<String>,
    pub(crate) format: Option<String>,
}

/// `[server]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub(crate) listen: Option<Vec<String>>,
    // Signed so that `threads = 0` or `-1` is a validation problem reported
    // with the others rather than a serde error that hides them.
    pub(crate) threads: Option<i64>,
    pub(crate) max_connections: Option<i64>,
    pub(crate) backlog: Option<i64>,
    pub(crate) keepalive_timeout: Option<Text>,
    pub(crate) keepalive_requests: Option<i64>,
    pub(crate) max_header_size: Option<Text>,
    pub(crate) header_read_timeout: Option<Text>,
    pub(crate) shutdown_timeout: Option<Text>,
    pub(crate) tls_listen: Option<Vec<String>>,
    pub(crate) tls: Option<Vec<RawTls>>,
    pub(crate) h2c: Option<bool>,
    pub(crate) max_inflight_body: Option<Text>,
    pub(crate) send_timeout: Option<Text>,
    pub(crate) http2_keepalive_interval: Option<Text>,
    pub(crate) http2_keepalive_timeout: Option<Text>,
    // The PROXY protocol on listeners (config/proxy_protocol.rs).
    pub(crate) proxy_protocol_listeners: Option<Vec<String>>,
    pub(crate) proxy_protocol_from: Option<Vec<String>>,
}

/// `[[server.tls]]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub(crate) cert: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) names: Option<Vec<String>>,
}

/// `[admin]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmin {
    pub(crate) listen: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) token_file: Option<String>,
    pub(crate) purge_allow: Option<Vec<String>>,
    pub(crate) names: Option<Vec<String>>,
    pub(crate) purge_token: Option<bool>,
}

/// `[upstreams.<name>]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUpstream {
    pub(crate) servers: Option<Vec<RawUpstreamServer>>,
    pub(crate) keepalive: Option<i64>,
    pub(crate) connect_timeout: Option<Text>,
    pub(crate) read_timeout: Option<Text>,
    pub(crate) send_timeout: Option<Text>,
    pub(crate) refresh_concurrency: Option<i64>,
    pub(crate) max_inflight: Option<i64>,
    pub(crate) queue_timeout: Option<Text>,
    pub(crate) fleet_max_inflight: Option<i64>,
    pub(crate) max_fails: Option<i64>,
    pub(crate) fail_timeout: Option<Text>,
    pub(crate) fail_statuses: Option<Vec<i64>>,
    pub(crate) health_check: Option<RawHealthCheck>,
    pub(crate) tls: Option<bool>,
    pub(crate) tls_server_name: Option<String>,
    pub(crate) tls_ca_file: Option<String>,
    pub(crate) tls_verify: Option<bool>,
    pub(crate) tls_client_cert: Option<String>,
    pub(crate) tls_client_key: Option<String>,
    // Server selection (issue 28).
    pub(crate) balance: Option<String>,
    pub(crate) hash_key: Option<String>,
}

/// One entry of `servers`: `"host:port"` (or `"https://host:port"`), or a
/// table with its own weight and passive health settings, `{ address =
/// "host:port", weight = 3, max_fails = 3, fail_timeout = "30s" }` (NGINX's
/// `server address weight=3 max_fails=3 fail_timeout=30s`).
#[derive(Debug)]
pub(crate) enum RawUpstreamServer {
    /// `"host:port"`.
    Address(String),
    /// `{ address = ..., ... }`.
    Table(RawServerTable),
}

/// The table form of a `servers` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServerTable {
    pub(crate) address: Option<String>,
    pub(crate) weight: Option<i64>,
    pub(crate) max_fails: Option<i64>,
    pub(crate) fail_timeout: Option<Text>,
}

impl<'de> Deserialize<'de> for RawUpstreamServer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ServerVisitor)
    }
}

struct ServerVisitor;

impl<'de> Visitor<'de> for ServerVisitor {
    type Value = RawUpstreamServer;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#""host:port" or { address = "host:port", weight = 3 }"#)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawUpstreamServer, E> {
        Ok(RawUpstreamServer::Address(value.to_owned()))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RawUpstreamServer, A::Error> {
        let table = RawServerTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(RawUpstreamServer::Table(table))
    }
}

/// `[upstreams.<name>] health_check = { path = "/healthz", interval = "5s" }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealthCheck {
    pub(crate) path: Option<String>,
    pub(crate) interval: Option<Text>,
    pub(crate) timeout: Option<Text>,
    pub(crate) fails: Option<i64>,
    pub(crate) passes: Option<i64>,
}

/// `[zones.<name>]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawZone {
    pub(crate) kind: Option<String>,
    pub(crate) max_size: Option<Text>,
    pub(crate) max_object_size: Option<Text>,
    pub(crate) path: Option<String>,
    pub(crate) inactive: Option<Text>,
    pub(crate) min_free: Option<Text>,
    pub(crate) admission: Option<String>,
    pub(crate) weight: Option<i64>,
}

/// `[[routes]]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub(crate) name: Option<String>,
    #[serde(rename = "match")]
    pub(crate) pattern: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) upstream: Option<String>,
    pub(crate) zone: Option<String>,
    #[serde(default)]
    pub(crate) zones: Vec<String>,
    pub(crate) memory: Option<String>,
    pub(crate) key: Option<String>,
    #[serde(default)]
    pub(crate) bypass: Vec<String>,
    #[serde(default)]
    pub(crate) no_store: Vec<String>,
    // Keys are status codes or "any"; checked in validate.rs.
    #[serde(default)]
    pub(crate) ttl: BTreeMap<String, Text>,
    pub(crate) override_origin: Option<bool>,
    pub(crate) heuristic_fraction: Option<f64>,
    pub(crate) heuristic_max: Option<Text>,
    pub(crate) client_cache_control: Option<String>,
    pub(crate) convert_head: Option<bool>,
    pub(crate) cache_post: Option<bool>,
    pub(crate) body_key: Option<String>,
    pub(crate) max_body_key: Option<Text>,
    pub(crate) refresh: Option<String>,
    pub(crate) per_beta: Option<f64>,
    pub(crate) stale_while_revalidate: Option<Text>,
    pub(crate) stale_if_error: Option<Text>,
    pub(crate) stale_if_busy: Option<Text>,
    pub(crate) lock_timeout: Option<Text>,
    pub(crate) sus_stale: Option<Text>,
    pub(crate) hit_for_miss: Option<Text>,
    #[serde(default)]
    pub(crate) warm: Vec<String>,
    pub(crate) warm_host: Option<String>,
    pub(crate) hosts: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) compress: Vec<String>,
    pub(crate) forward_targeted_cache_control: Option<bool>,
    pub(crate) cache_status_key: Option<bool>,
    pub(crate) expose_cache_tags: Option<bool>,
    pub(crate) websocket: Option<bool>,
    pub(crate) merge_slashes: Option<bool>,
    pub(crate) underscores_in_headers: Option<bool>,
    #[serde(default)]
    pub(crate) trusted_proxies: Vec<String>,
    pub(crate) early_hints: Option<bool>,
    #[serde(default)]
    pub(crate) early_hints_links: Vec<String>,
    #[serde(default)]
    pub(crate) early_hints_origins: Vec<String>,
    // Routes that answer without the origin (config/answering.rs).
    #[serde(rename = "return")]
    pub(crate) give_back: Option<RawReturn>,
    pub(crate) root: Option<String>,
    pub(crate) index: Option<Vec<String>>,
    pub(crate) internal: Option<bool>,
    // Status list ("500 502") -> target ("/50x.html", "=200 /x", "@name").
    pub(crate) error_pages: Option<BTreeMap<String, String>>,
    pub(crate) intercept_errors: Option<bool>,
    // A file route's absent file: "next" | "404" (config/answering.rs).
    pub(crate) absent: Option<String>,
    // Listeners and header rules (issue 28).
    pub(crate) listeners: Option<Vec<String>>,
    pub(crate) request_headers: Option<RawRequestHeaders>,
    pub(crate) response_headers: Option<RawResponseHeaders>,
    pub(crate) expires: Option<Text>,
    #[serde(default)]
    pub(crate) limits: Vec<String>,
    // Issue 28: NGINX's proxy_ignore_headers.
    #[serde(default)]
    pub(crate) ignore_headers: Vec<String>,
    // Compression of answers the cache does not store (issue 28).
    #[serde(default)]
    pub(crate) compress_passed: Vec<String>,
    pub(crate) compress_passed_types: Option<Vec<String>>,
    pub(crate) compress_passed_min_length: Option<i64>,
}

/// A route's `return = { status, location, body, content_type }`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReturn {
    pub(crate) status: Option<i64>,
    pub(crate) location: Option<String>,
    pub(crate) body: Option<String>,
    pub(crate) content_type: Option<String>,
}

/// `routes.request_headers`: field name -> value, and names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRequestHeaders {
    #[serde(default)]
    pub(crate) set: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) remove: Vec<String>,
}

/// `routes.response_headers`: field name -> value, and names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResponseHeaders {
    #[serde(default)]
    pub(crate) add: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) always: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) remove: Vec<String>,
}

/// A duration or size as written. A number is kept too (not refused by
/// serde) so that `read_timeout = 60` is reported as `60 is not a duration`
/// alongside every other problem.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Text {
    /// A TOML string, e.g. `"60s"`.
    Str(String),
    /// A bare TOML number, e.g. `60`: always wrong, but worth explaining.
    Number(String),
}

impl fmt::Display for Text {
    /// As the user wrote it: strings quoted, numbers bare.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Str(text) => write!(f, "{text:?}"),
            Text::Number(text) => f.write_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl Visitor<'_> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a quoted duration or size such as "5s" or "64MiB""#)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Text, E> {
        Ok(Text::Str(value.to_owned()))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Text, E> {
        Ok(Text::Number(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Text, E> {
        Ok(Text::Number(value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Text, E> {
        Ok(Text::Number(value.to_string()))
    }
}
