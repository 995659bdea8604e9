//! The async side's wake-ups: tokio notifications told of every wake-up
//! the blocking side gets (the condvars of `Shared`, the jobs layer's
//! signal), and in shared mode one thread per handle that turns the futex
//! word other processes move into the same notifications.
//!
//! No task holds a thread while it waits: it waits on a [`Notify`]; the
//! only thread is the watcher of the futex word (shared mode only).

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::queue::processes::Waker;

/// How long the watcher thread sleeps at most before it checks whether
/// its queue is gone (a close wakes it at once; this is the backstop).
const WATCH_BACKSTOP: Duration = Duration::from_secs(1);

/// What async waiters of one queue handle wait on.
#[derive(Debug, Default)]
pub struct Wakeups {
    /// An item may have become available: one waiter at a time is woken,
    /// and one that takes an item while more are there passes it on.
    available: Notify,
    /// A write may have made room, or (once sealed) settled the last item.
    room: Notify,
    /// The queue was closed: waiters fail with `Closed`.
    closed: AtomicBool,
    /// Shared mode: the watcher thread runs (started once).
    watching: Mutex<bool>,
}

impl Wakeups {
    /// An item may be available: wakes one waiter (or the next to come).
    pub fn available(&self) {
        self.available.notify_one();
    }

    /// Room may have been made, or an item settled: wakes every waiter on it.
    pub fn room(&self) {
        self.room.notify_waiters();
    }

    /// The queue closed: every waiter looks again (and finds it closed).
    pub fn close(&self) {
        self.closed.store(true, SeqCst);
        self.wake_all();
    }

    /// Every waiter looks again (the handle was sealed: consumers that
    /// find the queue empty stop).
    pub fn wake_all(&self) {
        self.available.notify_waiters();
        self.room.notify_waiters();
    }

    /// A future that completes on the next [`available`](Self::available)
    /// (or one stored before it), [`wake_all`](Self::wake_all) or close. Enable it before looking
    /// for an item: a wake-up between the look and the wait is then kept.
    pub fn notified_available(&self) -> Notified<'_> {
        self.available.notified()
    }

    /// A future that completes on the next [`room`](Self::room),
    /// [`wake_all`](Self::wake_all) or close.
    pub fn notified_room(&self) -> Notified<'_> {
        self.room.notified()
    }

    /// Shared mode: starts (once) the thread that turns moves of the futex
    /// word, which every write of every process makes, into wake-ups. It
    /// ends when the queue closes or these wake-ups are dropped.
    pub fn watch(self: &Arc<Self>, waker: Waker) -> std::io::Result<()> {
        let mut watching = self.watching.lock();
        if *watching || self.closed.load(SeqCst) {
            return Ok(());
        }
        let wakeups = Arc::downgrade(self);
        // Read here, not in the thread: a write between a task's look and
        // the thread's start moves the word past this, and wakes it.
        let seen = waker.wake_word();
        std::thread::Builder::new()
            .name("dque-async-waker".into())
            .spawn(move || watch(&waker, &wakeups, seen))?;
        *watching = true;
        Ok(())
    }
}

/// The watcher thread's loop.
fn watch(waker: &Waker, wakeups: &Weak<Wakeups>, mut seen: u32) {
    // Kept across sleeps: a move between two looks is never missed.
    loop {
        waker.sleep(seen, Some(Instant::now() + WATCH_BACKSTOP));
        let Some(wakeups) = wakeups.upgrade() else {
            return;
        };
        if wakeups.closed.load(SeqCst) {
            return;
        }
        let now = waker.wake_word();
        if now != seen {
            seen = now;
            wakeups.available();
            wakeups.room();
        }
    }
}
