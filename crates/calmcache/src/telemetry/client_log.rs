//! The Redis client's own log lines, rate-limited like calmcache's.
//!
//! The `redis` crate logs through `log` (not `tracing`): during a cluster
//! outage its reconnect loop writes about 9 lines a second per node
//! ("Failed to connect to node", "beginning slot refresh"...), which would
//! bury everything else. [`install`] puts a `log` logger of our own in
//! front of tracing-log's bridge: records whose target is the `redis`
//! crate's go through a [`WarnLimit`] per call site (the first logged, then
//! one per [`WARN_EVERY`] ending with how many were suppressed); every
//! other record passes as it came. The fleet's own warnings (breaker,
//! link) are rate-limited where they are written.
//!
//! Owns the bridge from `log` to `tracing` only; the subscriber (format,
//! filter, colour) is main.rs's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use calmcache_core::warn_limit::{WarnLimit, WARN_EVERY};

/// Targets of the crates whose lines are rate-limited.
const LIMITED: &[&str] = &["redis"];

/// Whether `target` (a module path) is one of a [`LIMITED`] crate's.
fn limited(target: &str) -> bool {
    LIMITED.iter().any(|krate| {
        target
            .strip_prefix(krate)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

/// A call site: the record's target, file and line (its own text varies:
/// node addresses, errors).
type Site = (String, Option<&'static str>, Option<u32>);

/// `log` records into `tracing`, the limited crates' ones rate-limited.
struct ClientLog {
    bridge: tracing_log::LogTracer,
    /// One limit per call site met (a crate has a bounded number of them).
    sites: Mutex<HashMap<Site, Arc<WarnLimit>>>,
}

impl ClientLog {
    fn limit_of(&self, record: &log::Record<'_>) -> Arc<WarnLimit> {
        let site = (
            record.target().to_owned(),
            record.file_static(),
            record.line(),
        );
        // Plain data: a panic elsewhere leaves the map usable.
        let mut sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
        sites.entry(site).or_default().clone()
    }
}

impl log::Log for ClientLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        log::Log::enabled(&self.bridge, metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        // Filtered out (the subscriber's level): counts for nothing.
        if !self.enabled(record.metadata()) {
            return;
        }
        if !limited(record.target()) {
            return self.bridge.log(record);
        }
        match self.limit_of(record).admit(WARN_EVERY) {
            None => {}
            Some(0) => self.bridge.log(record),
            Some(suppressed) => self.bridge.log(
                &log::Record::builder()
                    .metadata(record.metadata().clone())
                    .module_path(record.module_path())
                    .file(record.file())
                    .line(record.line())
                    .args(format_args!(
                        "{} ({suppressed} more like this suppressed)",
                        record.args()
                    ))
                    .build(),
            ),
        }
    }

    fn flush(&self) {
        log::Log::flush(&self.bridge);
    }
}

/// Sends `log` records to the global `tracing` subscriber, the Redis
/// client's rate-limited (call it once, after setting the subscriber, in
/// place of `tracing_log::LogTracer::init`). Fails when a logger is set.
pub fn install() -> Result<(), log::SetLoggerError> {
    log::set_boxed_logger(Box::new(ClientLog {
        bridge: tracing_log::LogTracer::new(),
        sites: Mutex::new(HashMap::new()),
    }))?;
    log::set_max_level(tracing_log::AsLog::as_log(
        &tracing::level_filters::LevelFilter::current(),
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_redis_crates_targets_are_limited() {
        for target in ["redis", "redis::cluster_handling::async_connection"] {
            assert!(limited(target), "{target}");
        }
        for target in ["redisx", "calmcache::fleet", "hyper::proto", "rediss"] {
            assert!(!limited(target), "{target}");
        }
    }
}
