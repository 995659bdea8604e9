//! Group commit between processes: every frame any process writes gets a
//! ticket from the control file and marks its segment dirty; a caller that
//! needs its ticket durable takes the sync mutex, and either finds it
//! covered by an fsync that started after its write (another process's),
//! or leads: it takes the dirty segments and the newest ticket, fsyncs
//! them, and moves `synced` on. Callers of every process that queue on the
//! mutex meanwhile share that fsync.

use std::fs::File;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

use rustix::thread::futex;
use std::sync::Arc;

use super::control::{ControlFile, Locked, State};
use super::WAKE_ALL;
use crate::error::{Error, Result};
use crate::faults::{self, Durable, FaultOp};
use crate::layout::QueueDir;

/// Under the queue mutex, after a frame was written into segment `number`:
/// returns its ticket.
pub fn note_write(state: &State, number: u64) -> u64 {
    state.dirty_low.fetch_min(number, Relaxed);
    state.dirty_high.fetch_max(number, Relaxed);
    state.written.fetch_add(1, Relaxed) + 1
}

/// The shared group commit of one queue.
#[derive(Debug, Clone)]
pub struct SharedCommit {
    control: Arc<ControlFile>,
    dir: QueueDir,
}

impl SharedCommit {
    pub fn new(control: Arc<ControlFile>, dir: QueueDir) -> Self {
        SharedCommit { control, dir }
    }

    /// Every ticket written so far, by any process.
    pub fn written(&self) -> u64 {
        self.control.state().written.load(Relaxed)
    }

    /// Returns once `ticket` is durable, sharing fsyncs with every process.
    ///
    /// One caller at a time leads (it holds the sync mutex); the others
    /// sleep until `synced` moves, and all wake at once to see whether it
    /// covers them, so a sync's followers do not go through the mutex one
    /// by one. A sleeper also wakes every [`LEADER_CHECK`] to take over
    /// from a leader that died.
    ///
    /// # Errors
    /// The fsync's error, after which every process refuses writes.
    pub fn make_durable(&self, ticket: u64) -> Result<()> {
        let state = self.control.state();
        let header = self.control.header();
        loop {
            if state.synced.load(SeqCst) >= ticket {
                return Ok(());
            }
            self.refused()?;
            let seen = state.synced_wake.load(SeqCst);
            let locked = header
                .sync_mutex
                .try_lock()
                .map_err(|e| Error::io(self.control.path(), e))?;
            let Some(locked) = locked else {
                if state.synced.load(SeqCst) < ticket {
                    sleep(state, seen);
                }
                continue;
            };
            let led = self.lead(locked, ticket);
            header.sync_mutex.unlock();
            state.synced_wake.fetch_add(1, SeqCst);
            if state.sync_sleepers.load(SeqCst) > 0 {
                let _ = futex::wake(&state.synced_wake, futex::Flags::empty(), WAKE_ALL);
            }
            led?;
        }
    }

    fn refused(&self) -> Result<()> {
        if self.control.state().refused.load(Relaxed) == 0 {
            return Ok(());
        }
        Err(Error::WritesRefused {
            cause: Arc::new(Error::io(
                self.dir.path(),
                std::io::Error::other("an fsync failed in a process sharing the queue"),
            )),
        })
    }

    /// Under the sync mutex: syncs what is dirty unless `ticket` is covered.
    fn lead(&self, locked: Locked, ticket: u64) -> Result<()> {
        let state = self.control.state();
        if locked == Locked::Clean && state.synced.load(Relaxed) >= ticket {
            // Covered by the fsync this caller waited behind.
            return Ok(());
        }
        let (low, high, target) = {
            let queue_locked = self.control.lock()?;
            if queue_locked == Locked::OwnerDied {
                state.mending.store(1, Relaxed);
            }
            if locked == Locked::OwnerDied {
                // A leader died mid-fsync: what it took is dirty again.
                state
                    .dirty_low
                    .fetch_min(state.syncing_low.load(Relaxed), Relaxed);
                state
                    .dirty_high
                    .fetch_max(state.syncing_high.load(Relaxed), Relaxed);
            }
            let taken = (
                state.dirty_low.swap(u64::MAX, Relaxed),
                state.dirty_high.swap(0, Relaxed),
                state.written.load(Relaxed),
            );
            state.syncing_low.store(taken.0, Relaxed);
            state.syncing_high.store(taken.1, Relaxed);
            self.control.unlock();
            taken
        };
        if state.synced.load(Relaxed) >= ticket {
            // Covered while this caller waited for the mutex; what it took
            // goes back for the next leader.
            state.dirty_low.fetch_min(low, Relaxed);
            state.dirty_high.fetch_max(high, Relaxed);
            return Ok(());
        }
        self.refused()?;
        // `low > high`: nothing was written since the last sync began.
        for number in (low <= high).then_some(low..=high).into_iter().flatten() {
            let path = self.dir.segment_path(number);
            let synced = match File::open(&path) {
                // Retired since it was written: nothing to make durable.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => Err(e),
                Ok(file) => faults::check(FaultOp::Sync, &path).and_then(|()| file.sync_data()),
            };
            if let Err(e) = synced {
                state.refused.store(1, Relaxed);
                return Err(Error::io(&path, e));
            }
            faults::synced(&path, Durable::File);
        }
        state.synced.fetch_max(target, SeqCst);
        state.syncing_low.store(u64::MAX, Relaxed);
        state.syncing_high.store(0, Relaxed);
        Ok(())
    }
}

/// How long a caller waiting for durability sleeps before it looks whether
/// the leader died (a robust mutex tells the next locker, not a sleeper).
const LEADER_CHECK: Duration = Duration::from_millis(10);

/// Sleeps until `synced_wake` moves from `seen`, or [`LEADER_CHECK`].
fn sleep(state: &State, seen: u32) {
    let timeout = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: LEADER_CHECK.as_nanos() as i64,
    };
    state.sync_sleepers.fetch_add(1, SeqCst);
    let _ = futex::wait(
        &state.synced_wake,
        futex::Flags::empty(),
        seen,
        Some(&timeout),
    );
    state.sync_sleepers.fetch_sub(1, SeqCst);
}
