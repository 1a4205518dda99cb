//! Graceful stop of long-lived connections: the registry of a worker's
//! WebSocket tunnels, told to end and waited for when the worker stops.

use tokio::sync::watch;
use tokio::time::Instant;

/// A worker's tunnels: each holds a receiver of the stop flag, so closing
/// can tell them to end and wait until they have.
#[derive(Debug)]
pub(crate) struct Tunnels {
    stop: watch::Sender<bool>,
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels {
            stop: watch::channel(false).0,
        }
    }
}

impl Tunnels {
    /// A tunnel opens: its receiver of the stop flag.
    pub(crate) fn enter(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Lets this worker's tunnels run until `deadline` (graceful shutdown),
    /// then closes the ones still open.
    pub(crate) async fn close_by(&self, deadline: Instant) {
        if tokio::time::timeout_at(deadline, self.stop.closed())
            .await
            .is_err()
        {
            self.close().await;
        }
    }

    /// Ends every tunnel of this worker (both connections closed) and
    /// waits until they are gone; tunnels opened after this end at once.
    pub(crate) async fn close(&self) {
        self.stop.send_replace(true);
        self.stop.closed().await;
    }
}
