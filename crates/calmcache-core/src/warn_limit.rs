//! Rate-limited warnings: a fault that repeats on every request or every
//! write (a full disk, a failing log file) logs its first occurrence, then at
//! most one line per interval saying how many more like it were suppressed.
//!
//! Owns only the decision "log this one or count it"; the counters that
//! `/status` shows live with whoever owns the fault. One [`WarnLimit`] per
//! site and kind (a field of the zone, or a `static` at the call site); the
//! [`warn_limited!`](crate::warn_limited) macro is the way to use it.
//!
//! Lock-free: two atomics, so a hot path may call it on every failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often a repeated warning is logged again (with the count of those
/// suppressed meanwhile).
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// `last_ms` before anything was logged.
const NEVER: u64 = u64::MAX;

/// The state of one repeated warning.
#[derive(Debug)]
pub struct WarnLimit {
    /// Milliseconds since the process epoch of the last line logged.
    last_ms: AtomicU64,
    /// Occurrences not logged since that line.
    suppressed: AtomicU64,
}

impl Default for WarnLimit {
    fn default() -> Self {
        WarnLimit::new()
    }
}

impl WarnLimit {
    /// Nothing logged yet: the first occurrence will be.
    pub const fn new() -> WarnLimit {
        WarnLimit {
            last_ms: AtomicU64::new(NEVER),
            suppressed: AtomicU64::new(0),
        }
    }

    /// One occurrence: `Some(n)` when it is to be logged now (`n` more like
    /// it were suppressed since the last line), `None` when it is counted
    /// instead. At most one `Some` per `every`, the first one at once.
    pub fn admit(&self, every: Duration) -> Option<u64> {
        self.admit_at(now_ms(), every)
    }

    fn admit_at(&self, now: u64, every: Duration) -> Option<u64> {
        let every = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == NEVER || now.saturating_sub(last) >= every;
        // One thread wins the interval; the others count themselves.
        if due
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[doc(hidden)]
pub use tracing as __tracing;

/// Milliseconds since the first call in this process (monotonic).
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
}

/// `tracing::warn!` through a [`WarnLimit`]: the first occurrence is logged,
/// then at most one line per [`WARN_EVERY`], which ends with
/// `(N more like this suppressed)` when N > 0.
///
/// ```
/// use calmcache_core::warn_limit::WarnLimit;
/// static FAILED: WarnLimit = WarnLimit::new();
/// let path = "/var/cache/x";
/// calmcache_core::warn_limited!(FAILED, "disk write failed", zone = %path);
/// ```
#[macro_export]
macro_rules! warn_limited {
    ($limit:expr, $msg:literal $(, $($field:tt)+)?) => {
        if let Some(suppressed) = $limit.admit($crate::warn_limit::WARN_EVERY) {
            if suppressed == 0 {
                $crate::warn_limit::__tracing::warn!($($($field)+,)? $msg);
            } else {
                $crate::warn_limit::__tracing::warn!(
                    $($($field)+,)?
                    "{} ({} more like this suppressed)", $msg, suppressed
                );
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_logs_then_one_per_interval_with_the_count() {
        let limit = WarnLimit::new();
        let every = Duration::from_secs(10);
        assert_eq!(limit.admit_at(5, every), Some(0));
        for t in 6..1000 {
            assert_eq!(limit.admit_at(t, every), None);
        }
        assert_eq!(limit.admit_at(10_004, every), None);
        assert_eq!(limit.admit_at(10_005, every), Some(995));
        assert_eq!(limit.admit_at(10_006, every), None);
        assert_eq!(limit.admit_at(30_000, every), Some(1));
    }

    #[test]
    fn the_macro_compiles_with_and_without_fields() {
        static LIMIT: WarnLimit = WarnLimit::new();
        let e = std::io::Error::other("x");
        crate::warn_limited!(LIMIT, "plain");
        crate::warn_limited!(LIMIT, "with fields", error = %e, kind = ?e.kind());
    }
}
