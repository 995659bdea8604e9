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
    failed: Option<String>,
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
    pub fn wait_durable(
        &self,
        ticket: u64,
        batch: impl FnOnce() -> Result<SyncBatch>,
        on_failure: impl FnOnce(&Error),
    ) -> Result<()> {
        let mut batch = Some(batch);
        let mut on_failure = Some(on_failure);
        let mut state = self.state.lock();
        loop {
            if let Some(cause) = &state.failed {
                return Err(Error::WritesRefused {
                    cause: cause.clone(),
                });
            }
            if state.durable >= ticket {
                return Ok(());
            }
            if state.syncing {
                self.synced.wait(&mut state);
                continue;
            }
            state.syncing = true;
            drop(state);
            let lead = batch.take().expect("a caller leads at most once");
            let result = lead().and_then(|batch| {
                for (file, path) in &batch.files {
                    crate::faults::check(crate::faults::FaultOp::Sync, path)
                        .and_then(|()| file.sync_data())
                        .map_err(|e| Error::io(path, e))?;
                    crate::faults::synced(path, crate::faults::Durable::File);
                }
                Ok(batch.ticket)
            });
            if let Err(e) = &result {
                (on_failure.take().expect("fails at most once"))(e);
            }
            state = self.state.lock();
            state.syncing = false;
            match &result {
                Ok(covered) => state.durable = state.durable.max(*covered),
                Err(e) => state.failed = Some(e.to_string()),
            }
            self.synced.notify_all();
            result?;
        }
    }
}
