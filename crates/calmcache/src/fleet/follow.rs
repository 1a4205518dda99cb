//! Following the fleet's purge bus: the loop that reads the purges other
//! nodes send and hands each to this node's own tiers, saving the stream
//! position once they are applied.
//!
//! Owns: the order of a follow (wait for the local stores to finish
//! loading, poll, apply, save the position) and when it stops. Does not
//! know what a purge does: the request path applies it through [`Local`],
//! so this file, like the rest of `fleet/`, never imports `proxy/`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::purge_floor::SharedRule;
use super::Fleet;

/// How often a node reads the fleet's purge stream.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// How often a follow looks again whether the local stores have loaded.
const LOADING_EVERY: Duration = Duration::from_millis(50);

/// This node's side of a follow: its local tiers, as the request path
/// sees them.
pub(crate) trait Local: Send + Sync {
    /// True while a local store is still indexing what it held at start:
    /// purges wait until it has (the stream position is kept).
    fn loading(&self) -> bool;
    /// True when the local stores hold objects from before this start
    /// (what their loaders found).
    fn held(&self) -> bool;
    /// Applies one purge order, in its `POST /purge` JSON, and says what it
    /// was for the shared tier (its purge floors); an error says why it was
    /// not understood.
    fn apply(&self, json: &str) -> impl Future<Output = Result<SharedRule, String>> + Send;
    /// Marks everything held stale (a soft purge of all): after a gap in
    /// the stream, nothing held is trusted fresh any more.
    fn distrust_all(&self) -> impl Future<Output = ()> + Send;
}

/// Applies the purges other nodes of the fleet send, to `local`, until
/// `stop` says true (a reload starts the next one; the stream position is
/// the fleet's, so nothing is skipped or applied twice).
pub(crate) async fn follow(fleet: Arc<Fleet>, local: impl Local, mut stop: watch::Receiver<bool>) {
    // Purges apply to what the disk zones hold once their loaders have
    // indexed it all; until then the stream waits (its position is kept).
    while local.loading() {
        tokio::select! {
            _ = tokio::time::sleep(LOADING_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
    // Objects from before this start: what the loaders found (not what
    // was stored since, which saw every purge from here on).
    let held = local.held();
    loop {
        let polled = fleet.poll_purges(held).await;
        if polled.gap {
            // Some purges may never reach this node: nothing it holds is
            // trusted fresh any more (each object is revalidated once).
            local.distrust_all().await;
        }
        for sent in polled.purges {
            match local.apply(&sent.json).await {
                Ok(rule) => fleet.purge_applied(&sent, rule),
                // The target it had in proxy/purge.rs, where a filter may name it.
                Err(e) => tracing::warn!(
                    target: "calmcache::proxy::purge",
                    error = %e,
                    "a purge from the fleet was not understood"
                ),
            }
        }
        // What the disk zones hold has seen every purge up to here.
        fleet.save_position().await;
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
