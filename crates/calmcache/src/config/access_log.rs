//! `[access_log]`: where request lines go and how they look (the writer is
//! [`crate::telemetry::access_log`]).

use std::path::PathBuf;

/// `access_log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// NGINX's `combined`, then `"$cache_status" $upstream_addr
    /// $upstream_response_time $request_time`.
    Combined,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// Every format, in the spelling the config uses.
    pub const ALL: [LogFormat; 2] = [LogFormat::Combined, LogFormat::Json];

    /// The config spelling of this format.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Combined => "combined",
            LogFormat::Json => "json",
        }
    }
}

/// `access_log.path`: where lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// `path = "stdout"`.
    Stdout,
    /// An absolute file path, opened for append (created if missing).
    File(PathBuf),
}

/// `[access_log]`: the validated table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogConfig {
    /// Where lines go.
    pub target: LogTarget,
    /// How a line looks (default combined).
    pub format: LogFormat,
}
