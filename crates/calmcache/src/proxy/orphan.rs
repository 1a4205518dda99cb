//! A fill's task as its requester awaits it, and what becomes of the fill
//! when the requester goes away first (kept as background work within the
//! upstream's `refresh_concurrency`, or cancelled).
//!
//! Must not answer clients or touch the cache itself.

use std::sync::Arc;

use calmcache_core::Interest;

use crate::proxy::fill::FillReply;
use crate::proxy::outcome::FillOutcome;
use crate::proxy::state::Route;

/// A fill's task as its requester awaits it. If the requester goes away
/// first (client closed, HTTP/2 stream reset) and no other request waits
/// for the fill, the fill goes on only as background work: within the
/// upstream's `refresh_concurrency` slots, else it is cancelled. Without
/// that bound, HTTP/2 rapid resets (CVE-2023-44487) would turn each reset
/// stream into an origin request running with nobody waiting for it.
pub(crate) struct Orphaned {
    task: Option<tokio::task::JoinHandle<FillReply>>,
    interest: Option<Interest<FillOutcome>>,
    route: Arc<Route>,
}

impl Orphaned {
    pub(crate) fn new(
        task: tokio::task::JoinHandle<FillReply>,
        interest: Option<Interest<FillOutcome>>,
        route: &Arc<Route>,
    ) -> Self {
        Orphaned {
            task: Some(task),
            interest,
            route: route.clone(),
        }
    }
}

impl std::future::Future for Orphaned {
    type Output = Result<FillReply, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let Some(task) = self.task.as_mut() else {
            // Polled after completion: a logic error, never done here.
            return std::task::Poll::Pending;
        };
        let polled = std::pin::Pin::new(task).poll(cx);
        if polled.is_ready() {
            self.task = None;
        }
        polled
    }
}

impl Drop for Orphaned {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let interest = self.interest.take();
        // Decided here, before the fill task gets its first turn on this
        // worker's thread: a stream reset with its request never reaches
        // the origin.
        if !interest.as_ref().is_some_and(Interest::has_followers) {
            keep_or_cancel(task, &self.route);
            return;
        }
        // Followers wait: the fill goes on for them, and is judged again
        // when they have gone too (two streams reset one after the other
        // must not leave a fetch running unbounded).
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let route = self.route.clone();
                runtime.spawn(watch_orphan(task, interest, route));
            }
            Err(_) => task.abort(),
        }
    }
}

/// An orphaned fill nobody waits for: background work within the
/// upstream's `refresh_concurrency`, else cancelled and counted.
fn keep_or_cancel(task: tokio::task::JoinHandle<FillReply>, route: &Arc<Route>) {
    let slot = route.upstream.try_refresh_slot();
    match (slot, tokio::runtime::Handle::try_current()) {
        (Some(slot), Ok(runtime)) => {
            runtime.spawn(async move {
                let _slot = slot;
                let _ = task.await;
            });
        }
        _ => {
            route.activity.fills_cancelled.inc();
            task.abort();
        }
    }
}

/// Follows an orphaned fill while followers wait for it (checked every
/// 50 ms); once none do, [`keep_or_cancel`] decides.
async fn watch_orphan(
    mut task: tokio::task::JoinHandle<FillReply>,
    interest: Option<Interest<FillOutcome>>,
    route: Arc<Route>,
) {
    while interest.as_ref().is_some_and(Interest::has_followers) {
        tokio::select! {
            _ = &mut task => return,
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
        }
    }
    if !task.is_finished() {
        keep_or_cancel(task, &route);
    }
}
