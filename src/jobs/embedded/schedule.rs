//! Scheduled jobs: a queue of job records in `jobs/scheduled/`, in the
//! order they were scheduled, and in memory an index of (due time, record)
//! for every one of them (about 40 bytes a job). Each handle indexes the
//! records other processes add as it sees them. A job falling due is
//! moved to its lane under a lease on its schedule record, so two
//! processes never both move it and a crash in between leaves it where it
//! was (moved again, at worst: at least once).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::envelope::Envelope;
use crate::error::Result;
use crate::queue::dque::RawQueue;
use crate::queue::engine::ById;
use crate::queue::lease::Leased;

#[derive(Debug)]
pub struct Schedule {
    pub queue: Arc<RawQueue>,
    index: Mutex<Index>,
    /// Shared mode: other processes add records.
    shared: bool,
    /// The first due time in the index (`u64::MAX` if none, 0 before the
    /// first reading): a call with nothing due looks at it, not the index.
    first_due: AtomicU64,
}

#[derive(Debug, Default)]
struct Index {
    /// (due, record) of every scheduled record this handle knows of.
    due: BTreeSet<(u64, u64)>,
    /// Records from this id on are not indexed yet.
    seen_to: u64,
    /// Whether the records on disk were indexed once.
    read: bool,
}

/// How many due records one step of [`Schedule::take_due`] leases (with
/// one write, and one fsync in Safe mode). A process killed in the middle
/// of a step leaves its jobs in the schedule and in their lanes both: they
/// may run twice, so the batch is small. Sixteen make the fsyncs of a move
/// a fifth of those of the lease and ack that follow.
const DUE_BATCH: usize = 16;

impl Schedule {
    pub fn new(queue: RawQueue, shared: bool) -> Self {
        Schedule {
            queue: Arc::new(queue),
            index: Mutex::new(Index::default()),
            shared,
            first_due: AtomicU64::new(0),
        }
    }

    /// Adds record `record`, due at `due_ms`, to the index.
    pub fn note(&self, due_ms: u64, record: u64) {
        let mut index = self.index.lock();
        index.due.insert((due_ms, record));
        self.first_due.fetch_min(due_ms, Ordering::Relaxed);
    }

    /// Whether no record can be due at `now_ms` without a look at the
    /// index: alone (exclusive mode), every record is noted as written,
    /// so the first due time kept beside the index is exact (or earlier).
    pub fn none_due(&self, now_ms: u64) -> bool {
        !self.shared && self.first_due.load(Ordering::Relaxed) > now_ms
    }

    /// Sets `first_due` from the index (under its lock).
    fn refresh_first(&self, index: &Index) {
        let first = match (index.read, index.due.first()) {
            (false, _) => 0,
            (true, Some(&(due, _))) => due,
            (true, None) => u64::MAX,
        };
        self.first_due.store(first, Ordering::Relaxed);
    }

    /// How many scheduled records are due by `now_ms` and not moved yet.
    /// A read (the index may learn of records other processes added).
    pub fn due_by(&self, now_ms: u64) -> Result<u64> {
        self.catch_up()?;
        let due: Vec<u64> = {
            let index = self.index.lock();
            index
                .due
                .range(..(now_ms.saturating_add(1), 0))
                .map(|&(_, record)| record)
                .collect()
        };
        let mut count = 0;
        for record in due {
            // Moved by another process meanwhile: no longer scheduled.
            if self.queue.is_unsettled(record)? {
                count += 1;
            }
        }
        Ok(count)
    }

    /// When the next indexed record falls due.
    pub fn next_due(&self) -> Option<u64> {
        self.index.lock().due.first().map(|&(due, _)| due)
    }

    /// Indexes the records added since the last look (by any process).
    pub fn catch_up(&self) -> Result<()> {
        // Alone (exclusive mode), every record after the first reading was
        // added through this handle, which noted it.
        if !self.shared && self.index.lock().read {
            return Ok(());
        }
        let end = self.queue.end_id()?;
        let mut index = self.index.lock();
        index.read = true;
        let mut from = index.seen_to;
        while from < end {
            let chunk = self.queue.pending_chunk(from)?;
            let Some(last) = chunk.last() else {
                break;
            };
            from = last.id + 1;
            for record in chunk {
                // A record that is not an envelope is left for `waiting`
                // and `dque verify` to show; it never falls due.
                if let Ok(due) = Envelope::due_ms_of(&record.payload) {
                    index.due.insert((due, record.id));
                }
            }
        }
        index.seen_to = index.seen_to.max(end).max(from);
        self.refresh_first(&index);
        Ok(())
    }

    /// Leases the first records due at `now_ms` (up to a batch), in due
    /// order (move each, then ack it), skipping records that are gone; one another caller holds is
    /// looked at again `retry_ms` later. Empty when none is due.
    pub fn take_due(&self, now_ms: u64, retry_ms: u64) -> Result<Vec<Leased<Vec<u8>>>> {
        loop {
            let due: Vec<(u64, u64)> = {
                let mut index = self.index.lock();
                let mut due = Vec::new();
                while due.len() < DUE_BATCH {
                    match index.due.first().copied() {
                        Some(first) if first.0 <= now_ms => {
                            index.due.remove(&first);
                            due.push(first);
                        }
                        _ => break,
                    }
                }
                self.refresh_first(&index);
                due
            };
            if due.is_empty() {
                return Ok(Vec::new());
            }
            let records: Vec<u64> = due.iter().map(|&(_, record)| record).collect();
            let found = match self.queue.lease_ids(&records) {
                Ok(found) => found,
                Err(e) => {
                    // Looked at again later (a record leased before the
                    // error is busy until its lease ends).
                    for (due, record) in due {
                        self.note(due, record);
                    }
                    return Err(e);
                }
            };
            let mut taken = Vec::new();
            for ((_, record), found) in due.into_iter().zip(found) {
                match found {
                    ById::Leased(leased, _) => taken.push(leased),
                    ById::Busy => self.note(now_ms.saturating_add(retry_ms), record),
                    ById::Gone => {}
                }
            }
            if !taken.is_empty() {
                return Ok(taken);
            }
        }
    }
}
