//! The background flusher of `Durability::Periodic`: fsyncs what was
//! written at most one interval apart, until stopped.

use std::sync::Weak;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};

use crate::queue::shared::Shared;

/// A running flusher thread; stopped (and joined) by [`stop`](Self::stop) or drop.
#[derive(Debug)]
pub struct Flusher {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Starts a thread that syncs `shared` every `interval` while it has
    /// unsynced writes. It holds no strong reference, so it never keeps a
    /// queue alive.
    pub fn start(shared: Weak<Shared>, interval: Duration) -> std::io::Result<Flusher> {
        let (stop, stopped) = bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("dque-flusher".into())
            .spawn(move || loop {
                match stopped.recv_timeout(interval) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                // A failure stops the queue's writes (it is recorded there);
                // a closed queue means the flusher is about to be stopped.
                let _ = shared.sync();
            })?;
        Ok(Flusher {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it, so no sync runs after this returns.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        // Dropping the sender wakes the thread at once.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.halt();
    }
}
