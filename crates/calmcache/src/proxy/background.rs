//! Work a request starts that outlives it: a fill that goes on after its
//! client left or got the whole body (the file still to be committed), a
//! background refresh. On a worker thread it is spawned on the worker's
//! runtime and tracked, so that a graceful shutdown lets it finish (up to
//! the shutdown deadline) instead of dropping it with the runtime: that
//! cut refreshes short and left a body's file uncommitted, a copy a
//! restart then did not have. Elsewhere (the admin runtime, tests) it is a
//! plain `tokio::spawn`.

use std::cell::RefCell;
use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

thread_local! {
    /// This worker thread's tracker, while it serves.
    static TRACKER: RefCell<Option<TaskTracker>> = const { RefCell::new(None) };
}

/// Spawns `work` on the current runtime, tracked when this is a worker
/// thread.
pub(crate) fn spawn<F>(work: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tracker = TRACKER.with(|t| t.borrow().clone());
    match tracker {
        Some(tracker) => tracker.spawn(work),
        None => tokio::spawn(work),
    }
}

/// Makes this thread's later [`spawn`]s tracked; the returned tracker
/// waits for them ([`finish_by`]).
pub(crate) fn track_this_thread() -> TaskTracker {
    let tracker = TaskTracker::new();
    TRACKER.with(|t| *t.borrow_mut() = Some(tracker.clone()));
    tracker
}

/// Waits until the work `tracker` tracks has ended, or `deadline`; true
/// when it all ended. Nothing is tracked after this is called.
pub(crate) async fn finish_by(tracker: &TaskTracker, deadline: tokio::time::Instant) -> bool {
    TRACKER.with(|t| *t.borrow_mut() = None);
    tracker.close();
    tokio::time::timeout_at(deadline, tracker.wait())
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn tracked_work_is_waited_for_until_the_deadline() {
        let tracker = track_this_thread();
        let (tx, rx) = tokio::sync::oneshot::channel();
        spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(());
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        assert!(
            finish_by(&tracker, deadline).await,
            "ended before the deadline"
        );
        assert!(rx.await.is_ok(), "it ran to its end");
        // Not tracked any more: a plain spawn.
        let stuck = spawn(std::future::pending::<()>());
        let tracker = track_this_thread();
        let hung = spawn(std::future::pending::<()>());
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        assert!(!finish_by(&tracker, soon).await, "gave up at the deadline");
        stuck.abort();
        hung.abort();
    }
}
