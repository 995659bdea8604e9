//! Stopping a worker: a stop handle for programs, SIGINT/SIGTERM for
//! operators, and the grace period running jobs get. `dque work` stops by
//! the same handle and signals.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long running jobs get to finish once a worker stops, unless set
/// otherwise ([`Worker::grace`](super::Worker::grace)).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Why a worker stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// Its [`StopHandle`] was used.
    Handle,
    /// SIGINT or SIGTERM.
    Signal,
    /// No job was ready (`until_empty`).
    Empty,
    /// An error that a worker cannot go on after (returned by `run`).
    Error,
}

const RUNNING: u8 = 0;

fn reason_code(reason: StopReason) -> u8 {
    match reason {
        StopReason::Handle => 1,
        StopReason::Signal => 2,
        StopReason::Empty => 3,
        StopReason::Error => 4,
    }
}

#[derive(Debug, Default)]
struct StopState {
    stopping: AtomicBool,
    /// Set by a second stop: the grace period ends at once.
    now: AtomicBool,
    reason: AtomicU8,
    lock: Mutex<()>,
    changed: Condvar,
}

/// Stops a worker (or `dque work`): from another thread, a signal handler
/// thread, or a job. Clones stop the same worker.
///
/// ```
/// use dque::runtime::{StopHandle, StopReason};
///
/// let stop = StopHandle::new();
/// assert!(!stop.is_stopping());
/// stop.stop();
/// assert!(stop.is_stopping());
/// assert_eq!(stop.reason(), Some(StopReason::Handle));
/// ```
#[derive(Debug, Clone, Default)]
pub struct StopHandle(Arc<StopState>);

impl StopHandle {
    /// A handle not stopped yet.
    pub fn new() -> Self {
        StopHandle::default()
    }

    /// Stops the worker: no new lease; running jobs get the grace period.
    /// A second call ends the grace period at once.
    pub fn stop(&self) {
        self.stop_for(StopReason::Handle);
    }

    pub(crate) fn stop_for(&self, reason: StopReason) {
        let _ = self.0.reason.compare_exchange(
            RUNNING,
            reason_code(reason),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        if self.0.stopping.swap(true, Ordering::SeqCst) && reason != StopReason::Empty {
            self.0.now.store(true, Ordering::SeqCst);
        }
        let _guard = self.0.lock.lock();
        self.0.changed.notify_all();
    }

    /// Whether the worker was told to stop.
    pub fn is_stopping(&self) -> bool {
        self.0.stopping.load(Ordering::SeqCst)
    }

    /// Whether the grace period was cut short (a second stop or signal).
    pub fn is_stopping_now(&self) -> bool {
        self.0.now.load(Ordering::SeqCst)
    }

    /// Why the worker stops, once it does.
    pub fn reason(&self) -> Option<StopReason> {
        match self.0.reason.load(Ordering::SeqCst) {
            1 => Some(StopReason::Handle),
            2 => Some(StopReason::Signal),
            3 => Some(StopReason::Empty),
            4 => Some(StopReason::Error),
            _ => None,
        }
    }

    /// Waits up to `wait` for a stop (or a later stop's "now"); returns
    /// whether the worker is stopping.
    pub fn wait(&self, wait: Duration) -> bool {
        let mut guard = self.0.lock.lock();
        if !self.is_stopping() {
            self.0.changed.wait_for(&mut guard, wait);
        }
        self.is_stopping()
    }

    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.0.stopping
    }

    /// Stops on SIGINT and SIGTERM until the returned guard is dropped: the
    /// first signal stops (grace period), a second one stops now. While
    /// the guard lives the signals do not end the process.
    ///
    /// ```no_run
    /// let stop = dque::runtime::StopHandle::new();
    /// let _signals = stop.on_signals()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The operating system's, if the handlers cannot be installed.
    pub fn on_signals(&self) -> std::io::Result<SignalGuard> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let handle = signals.handle();
        let stop = self.clone();
        let thread = std::thread::Builder::new()
            .name("dque-signals".into())
            .spawn(move || {
                for _ in signals.forever() {
                    stop.stop_for(StopReason::Signal);
                }
            })?;
        Ok(SignalGuard {
            handle,
            thread: Some(thread),
        })
    }
}

/// SIGINT and SIGTERM stop a [`StopHandle`] while this lives
/// ([`StopHandle::on_signals`]). Dropping it unregisters them (the
/// process keeps ignoring them: signal-hook cannot restore the default).
#[derive(Debug)]
pub struct SignalGuard {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
