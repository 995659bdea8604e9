//! Moves out of the schedule waiting to be settled (Turbo and Periodic
//! mode, a handle alone on its queue): the jobs are written to their
//! lanes without an fsync, and their schedule records are ended only once
//! those lanes are synced, so a power loss (page writeback keeps no order
//! between files) can never keep the end of an old record and lose its
//! copy; the moves are settled by the next `sync()`, `close()`, or a call
//! once [`SETTLE_AFTER`] jobs or [`SETTLE_EVERY`] (bounded by the mode's
//! own interval and the lease time) have passed. Until then the records
//! are out of the due index, so no one moves them again.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Most moves kept waiting for a sync: one fsync of the lanes for this
/// many jobs falling due.
pub const SETTLE_AFTER: usize = 16_384;

/// Longest a move waits for a sync (shorter in `Periodic` mode with a
/// shorter interval, and a quarter of the lease time at most).
pub const SETTLE_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
pub struct PendingMoves {
    state: Mutex<Waiting>,
    /// How many records wait (read without the lock).
    len: AtomicUsize,
    /// Held for reading by each step of a move (from taking due records
    /// to ending them or noting them here), for writing by `close`: a
    /// close never settles and closes the lanes in the middle of a step,
    /// whose records would then stay unended (moved again on reopen), and
    /// a step that starts after it sees the handle closed.
    gate: RwLock<()>,
}

/// Schedule records whose jobs are written to their lanes, not yet synced.
#[derive(Debug, Default)]
pub struct Waiting {
    /// The records, sorted when `sorted` says so.
    records: Vec<u64>,
    sorted: bool,
    /// The lanes holding their copies.
    pub lanes: BTreeSet<i32>,
    /// When the oldest was moved.
    since: Option<Instant>,
}

impl PendingMoves {
    /// Notes moved schedule records whose copies are in `lanes`.
    pub fn add(&self, records: &[u64], lanes: &[i32]) {
        let mut state = self.state.lock();
        state.records.extend_from_slice(records);
        state.sorted = false;
        state.lanes.extend(lanes.iter().copied());
        state.since.get_or_insert_with(Instant::now);
        self.len.store(state.records.len(), Ordering::Relaxed);
    }

    /// Held by one step of a move: checks the handle is still open once
    /// it has the gate.
    pub fn step(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Held by `close` while it settles the moves and closes the queues:
    /// waits for the steps under way.
    pub fn shut(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// How many records wait.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether schedule record `record` waits (its job is in a lane already).
    pub fn contains(&self, record: u64) -> bool {
        if self.len() == 0 {
            return false;
        }
        let mut state = self.state.lock();
        if !state.sorted {
            state.records.sort_unstable();
            state.sorted = true;
        }
        state.records.binary_search(&record).is_ok()
    }

    /// The records waiting now, sorted: what a walk that must not take
    /// this lock under a queue's lock checks instead of [`contains`](Self::contains).
    pub fn records_now(&self) -> Vec<u64> {
        if self.len() == 0 {
            return Vec::new();
        }
        let mut state = self.state.lock();
        if !state.sorted {
            state.records.sort_unstable();
            state.sorted = true;
        }
        state.records.clone()
    }

    /// The waiting moves, locked, if any wait and (unless `force`) they are
    /// due to be settled: `every` passed, or too many wait.
    pub fn to_settle(&self, force: bool, every: Duration) -> Option<MovesGuard<'_>> {
        if self.len() == 0 {
            return None;
        }
        let state = self.state.lock();
        let due = force
            || state.records.len() >= SETTLE_AFTER
            || state.since.is_some_and(|since| since.elapsed() >= every);
        (due && !state.records.is_empty()).then_some(MovesGuard {
            state,
            len: &self.len,
        })
    }
}

/// The waiting moves, held while they are settled.
pub struct MovesGuard<'a> {
    pub state: MutexGuard<'a, Waiting>,
    len: &'a AtomicUsize,
}

impl MovesGuard<'_> {
    /// Takes the records (the lanes are synced): they are ended next,
    /// then [`ended`](Self::ended) or [`put_back`](Self::put_back) is
    /// called. Until then `len` still counts them, so `contains` takes the
    /// lock (held here) and waits: a cancel never ends a record whose
    /// copy is in its lane.
    pub fn take(&mut self) -> Vec<u64> {
        self.state.lanes.clear();
        self.state.since = None;
        self.state.sorted = true;
        std::mem::take(&mut self.state.records)
    }

    /// The records taken are ended.
    pub fn ended(&mut self) {
        self.len.store(self.state.records.len(), Ordering::Relaxed);
    }

    /// Puts back records that could not be ended, to be tried again.
    pub fn put_back(&mut self, records: &[u64]) {
        self.state.records.extend_from_slice(records);
        self.state.sorted = false;
        if !self.state.records.is_empty() {
            self.state.since.get_or_insert_with(Instant::now);
        }
        self.len.store(self.state.records.len(), Ordering::Relaxed);
    }
}
