//! Waking workers blocked on a job queue: any write that may make a job
//! ready moves a counter (and, shared between processes, the root queue's
//! futex word, which every process's waiters sleep on).

use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::queue::processes::Waker;

/// What a waiter saw before it looked for a job.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    generation: u64,
    word: u32,
}

#[derive(Debug, Default)]
pub struct Signal {
    generation: Mutex<u64>,
    changed: Condvar,
    /// Shared mode: the root queue's wake-up word.
    waker: Option<Waker>,
    /// The async side's wake-ups (feature `tokio`), told of every notify.
    #[cfg(feature = "tokio")]
    wakeups: std::sync::Arc<crate::queue::asynchronous::wakeups::Wakeups>,
}

impl Signal {
    pub fn new(waker: Option<Waker>) -> Self {
        Signal {
            waker,
            ..Signal::default()
        }
    }

    /// Read before looking for a job: a write after it ends the wait at once.
    pub fn observe(&self) -> Seen {
        Seen {
            generation: *self.generation.lock(),
            word: self.waker.as_ref().map_or(0, Waker::wake_word),
        }
    }

    /// Wakes every waiter of every process.
    pub fn notify(&self) {
        *self.generation.lock() += 1;
        self.changed.notify_all();
        #[cfg(feature = "tokio")]
        self.wakeups.available();
        if let Some(waker) = &self.waker {
            waker.wake_all();
        }
    }

    /// The async side's wake-ups; in shared mode they start watching the
    /// root queue's word (one thread per handle) on first use.
    #[cfg(feature = "tokio")]
    pub fn wakeups(&self) -> &std::sync::Arc<crate::queue::asynchronous::wakeups::Wakeups> {
        if let Some(waker) = &self.waker {
            // Without the thread a task still wakes on this process's
            // writes and on its poll timer; the error has no one to go to.
            let _ = self.wakeups.watch(waker.clone());
        }
        &self.wakeups
    }

    /// Sleeps until a write after `seen`, or `until`. May return early.
    pub fn wait(&self, seen: Seen, until: Instant) {
        if let Some(waker) = &self.waker {
            // In-process writes move the word too (`notify`).
            waker.sleep(seen.word, Some(until));
            return;
        }
        let mut generation = self.generation.lock();
        if *generation == seen.generation {
            let _ = self.changed.wait_until(&mut generation, until);
        }
    }
}
