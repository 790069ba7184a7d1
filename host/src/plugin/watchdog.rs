//! A wall-clock deadline for a load's manifest call.
//!
//! Not a tokio timer, because a load runs on a blocking thread: under a paused test clock
//! tokio's time does not advance while a blocking task runs, so a tokio timeout there
//! would never fire. The watchdog's thread sleeps on a channel instead, and ends as soon as
//! the watchdog is dropped, so a load that answers in time leaves no thread behind.

use std::io;
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;

/// Fires once `timeout` has passed, unless dropped first.
#[derive(Debug)]
pub(super) struct Watchdog {
    fired: oneshot::Receiver<()>,
    /// Dropping it wakes the thread, which then ends without firing.
    _cancel: mpsc::Sender<()>,
}

impl Watchdog {
    pub(super) fn start(timeout: Duration) -> io::Result<Self> {
        let (fire, fired) = oneshot::channel();
        let (cancel, cancelled) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("jobhost-load-deadline".to_owned())
            .spawn(move || {
                if cancelled.recv_timeout(timeout) == Err(mpsc::RecvTimeoutError::Timeout) {
                    // The load may have ended meanwhile; then nobody listens.
                    let _ = fire.send(());
                }
            })?;
        Ok(Self {
            fired,
            _cancel: cancel,
        })
    }

    /// Completes when the deadline has passed.
    pub(super) async fn fired(self) {
        // The sender is dropped without firing only when cancelled, which needs `self`.
        let _ = self.fired.await;
    }
}
