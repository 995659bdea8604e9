//! Group commit: callers whose bytes are written share one fsync.
//!
//! Every write gets a ticket, a number that grows with each write. A caller
//! that needs its ticket durable either finds it durable already, waits for
//! the fsync in flight and then for the next one, or leads the next fsync
//! itself: it takes the files and the newest ticket written so far, syncs
//! outside the queue's lock, and wakes everyone whose ticket is now covered.

use std::fs::File;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// What a leader syncs: the files written since the last sync, and the
/// newest ticket whose bytes are in them.
pub struct SyncBatch {
    /// Open handles of the segments that may hold unsynced bytes.
    pub files: Vec<(Arc<File>, std::path::PathBuf)>,
    /// Every ticket up to this one is in `files` (or already durable).
    pub ticket: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Every ticket up to this one is durable.
    durable: u64,
    /// A leader is syncing now.
    syncing: bool,
    /// Set when a sync failed: nothing after it can be called durable.
    failed: Option<Arc<Error>>,
    /// `close` has the engine: it makes every write durable and then
    /// settles the waiters, so none may lead a sync meanwhile.
    closing: bool,
}

/// The meeting point of callers waiting for durability.
#[derive(Debug, Default)]
pub struct GroupCommit {
    state: Mutex<State>,
    synced: Condvar,
}

impl GroupCommit {
    /// Returns once `ticket` is durable, leading a sync if none is running.
    /// `batch` is called (by a leader only) to learn what to sync; `on_failure`
    /// is called once by the leader whose sync failed, before anyone wakes.
    ///
    /// A write that `close` made durable returns `Ok` here: its caller's
    /// effect happened, so an error would make a retrying caller repeat it.
    pub fn wait_durable(
        &self,
        ticket: u64,
        batch: impl Fn() -> Result<SyncBatch>,
        on_failure: impl FnOnce(&Error),
    ) -> Result<()> {
        let mut on_failure = Some(on_failure);
        let mut state = self.state.lock();
        loop {
            // Before the failure check: a ticket made durable before a later
            // sync failed is durable all the same.
            if state.durable >= ticket {
                return Ok(());
            }
            if let Some(cause) = &state.failed {
                return Err(Error::WritesRefused {
                    cause: Arc::clone(cause),
                });
            }
            if state.syncing || state.closing {
                self.synced.wait(&mut state);
                continue;
            }
            state.syncing = true;
            drop(state);
            let result = batch().and_then(|batch| {
                for (file, path) in &batch.files {
                    // With the file's fault-ins held off (see `mapping`);
                    // exclusive mode: no other process maps the file.
                    crate::log::mapping::sync_data_alone(file, path)
                        .map_err(|e| Error::io(path, e))?;
                }
                Ok(batch.ticket)
            });
            match &result {
                // `close` took the engine after this write: it syncs
                // everything and settles the waiters, this one included.
                Err(Error::Closed) => {}
                Err(e) => (on_failure.take().expect("fails at most once"))(e),
                Ok(_) => {}
            }
            state = self.state.lock();
            state.syncing = false;
            match &result {
                Ok(covered) => state.durable = state.durable.max(*covered),
                Err(Error::Closed) => {}
                Err(e) => {
                    state.failed.get_or_insert_with(|| e.refusal_cause());
                }
            }
            self.synced.notify_all();
            match result {
                Err(Error::Closed) | Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Called by `close` before it takes the engine: waiters wait for it.
    pub fn begin_close(&self) {
        self.state.lock().closing = true;
    }

    /// Called by `close` once it synced (`result`) every write up to
    /// `written`: wakes the waiters with that outcome.
    pub fn finish_close(&self, written: u64, result: &Result<()>) {
        let mut state = self.state.lock();
        match result {
            // After a failed sync nothing more is durable, whatever a later
            // fsync returns.
            Ok(()) if state.failed.is_none() => state.durable = state.durable.max(written),
            Ok(()) => {}
            Err(e) => {
                state.failed.get_or_insert_with(|| e.refusal_cause());
            }
        }
        self.synced.notify_all();
    }
}
