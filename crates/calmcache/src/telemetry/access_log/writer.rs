//! The writer thread: a buffered file (append) or stdout, flushed at most
//! 200 ms after a line arrives, reopened at the same path on request.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use crate::config::access_log::LogTarget;

use super::{Msg, Shared, BUFFER_BYTES, FLUSH_EVERY};

/// Where the writer thread writes.
pub(super) struct Sink {
    path: Option<PathBuf>,
    out: std::io::BufWriter<Box<dyn std::io::Write + Send>>,
    /// A write or flush failed and no success came since: warn once per run.
    failing: bool,
}

impl Sink {
    pub(super) fn open(target: &LogTarget) -> std::io::Result<Sink> {
        let (path, out): (_, Box<dyn std::io::Write + Send>) = match target {
            LogTarget::Stdout => (None, Box::new(std::io::stdout())),
            LogTarget::File(path) => (Some(path.clone()), Box::new(open_append(path)?)),
        };
        Ok(Sink {
            path,
            out: std::io::BufWriter::with_capacity(BUFFER_BYTES, out),
            failing: false,
        })
    }

    pub(super) fn write(&mut self, line: &str, shared: &Shared) {
        let result = self.out.write_all(line.as_bytes());
        if result.is_err() {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.outcome(result);
    }

    pub(super) fn flush(&mut self) {
        let result = self.out.flush();
        self.outcome(result);
    }

    pub(super) fn outcome(&mut self, result: std::io::Result<()>) {
        match result {
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!(path = ?self.path, "access log: writing again");
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                self.failing = true;
                // A disk that fails every other write would flap: limited too.
                static FAILED: calmcache_core::warn_limit::WarnLimit =
                    calmcache_core::warn_limit::WarnLimit::new();
                calmcache_core::warn_limited!(
                    FAILED,
                    "access log: write failed; lines are dropped until it works again",
                    path = ?self.path,
                    error = %e
                );
            }
            Err(_) => {}
        }
    }

    /// A new file at the path; the old one stays on a failure.
    pub(super) fn reopen(&mut self) {
        let Some(path) = self.path.clone() else {
            return;
        };
        match open_append(&path) {
            Ok(file) => {
                self.flush();
                let old = std::mem::replace(
                    &mut self.out,
                    std::io::BufWriter::with_capacity(BUFFER_BYTES, Box::new(file)),
                );
                // Flushed above; what a failed flush held is lost, and counted then.
                let _ = old.into_parts();
                self.failing = false;
                tracing::info!(path = %path.display(), "access log reopened");
            }
            Err(e) => {
                tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "access log: cannot reopen; still writing to the old file"
                );
            }
        }
    }
}

pub(super) fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
}

/// The writer thread: lines in queue order, flushed at most `FLUSH_EVERY`
/// after the first unflushed one; ends (flushed) when every handle is gone.
pub(super) fn write_lines(rx: Receiver<Msg>, mut sink: Sink, shared: &Shared) {
    let mut dirty_since: Option<Instant> = None;
    loop {
        if shared.reopen.swap(false, Ordering::AcqRel) {
            sink.reopen();
        }
        let msg = match dirty_since {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(since) => {
                rx.recv_timeout((since + FLUSH_EVERY).saturating_duration_since(Instant::now()))
            }
        };
        match msg {
            Ok(Msg::Line(line)) => {
                sink.write(&line, shared);
                dirty_since.get_or_insert_with(Instant::now);
            }
            Ok(Msg::Wake) => {}
            Ok(Msg::Flush(ack)) => {
                sink.flush();
                dirty_since = None;
                let _ = ack.send(());
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                sink.flush();
                return;
            }
        }
        if dirty_since.is_some_and(|since| since.elapsed() >= FLUSH_EVERY) {
            sink.flush();
            dirty_since = None;
        }
    }
}
