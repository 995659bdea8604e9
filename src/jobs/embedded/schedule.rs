//! Scheduled jobs: a queue of job records in `jobs/scheduled/`, in the
//! order they were scheduled, and in memory an index of (due time, record)
//! of the ones falling due first: at most [`INDEX_MAX`] entries, whatever
//! the number of jobs scheduled, and one index per process for every
//! handle of a queue in shared mode. The records past the index's horizon
//! are read again (the due time only, in place) once the index runs out.
//!
//! A handle alone on its queue (exclusive mode) moves a job falling due
//! by reading its record, writing it to its lane and ending the record:
//! the index (under its lock) keeps two threads from taking one record.
//! In shared mode it leases the record first, so two processes never both
//! move it. Either way a crash in between leaves the job where it was
//! (moved again, at worst: at least once).

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::envelope::Envelope;
use crate::error::Result;
use crate::queue::dque::RawQueue;
use crate::queue::engine::{ById, Unleased};

/// Most (due, record) entries an index holds: about 40 bytes each, so
/// 2.6 MB a queue at most, however many jobs wait (fewer in unit tests,
/// which then cross its limits with few jobs).
pub const INDEX_MAX: usize = if cfg!(test) { 1 << 10 } else { 1 << 16 };

/// Entries kept when an index is cut back to its earliest: half, so a cut
/// happens at most once per `INDEX_MAX - INDEX_KEEP` entries added. (A
/// refill from the records on disk fills it: [`INDEX_MAX`].)
const INDEX_KEEP: usize = INDEX_MAX / 2;

/// The no horizon: every record is in the index.
const ALL: (u64, u64) = (u64::MAX, u64::MAX);

#[derive(Debug)]
pub struct Schedule {
    pub queue: Arc<RawQueue>,
    index: Arc<DueIndex>,
    /// Shared mode: other processes add and move records.
    shared: bool,
}

/// The due index of one schedule, shared by the handles of one process.
#[derive(Debug)]
struct DueIndex {
    state: Mutex<Index>,
    /// The first due time the index knows of (`u64::MAX` if none, 0
    /// before the first reading): a call with nothing due looks at it, not
    /// the index.
    first_due: AtomicU64,
}

impl Default for DueIndex {
    fn default() -> Self {
        DueIndex {
            state: Mutex::new(Index {
                due: BTreeSet::new(),
                run: VecDeque::new(),
                horizon: ALL,
                seen_to: 0,
                read: false,
                moving: Vec::new(),
                #[cfg(test)]
                refills: 0,
            }),
            first_due: AtomicU64::new(0),
        }
    }
}

#[derive(Debug)]
struct Index {
    /// (due, record) of the scheduled records below `horizon`: those
    /// noted in increasing order (constant delays, the common case) at the
    /// end of `run`, in order; the others in `due`.
    due: BTreeSet<(u64, u64)>,
    run: VecDeque<(u64, u64)>,
    /// Every unsettled record whose (due, record) is below this is in
    /// `due`; the ones at or past it are on disk only ([`ALL`]: none is).
    horizon: (u64, u64),
    /// Records from this id on are not indexed yet.
    seen_to: u64,
    /// Whether the records on disk were indexed once.
    read: bool,
    /// Exclusive mode: records taken out of the index to be moved, until
    /// they are ended, given back, or waiting in the pending moves.
    moving: Vec<u64>,
    /// The refills so far (what the tests look at).
    #[cfg(test)]
    refills: usize,
}

impl Index {
    /// Adds an entry below the horizon; cuts the index back to its
    /// earliest [`INDEX_KEEP`] when it grows past [`INDEX_MAX`].
    fn insert(&mut self, entry: (u64, u64)) {
        if entry >= self.horizon {
            return;
        }
        match self.run.back() {
            // (Noted already: shared, a handle reads its own records too.)
            Some(&last) if entry <= last && self.run.binary_search(&entry).is_ok() => {}
            Some(&last) if entry <= last => {
                self.due.insert(entry);
            }
            _ => self.run.push_back(entry),
        }
        if self.len() > INDEX_MAX {
            let cut = self.merged().nth(INDEX_KEEP).expect("longer");
            drop(self.due.split_off(&cut));
            self.run.truncate(self.run.partition_point(|&e| e < cut));
            self.horizon = cut;
        }
    }

    fn len(&self) -> usize {
        self.due.len() + self.run.len()
    }

    fn is_empty(&self) -> bool {
        self.due.is_empty() && self.run.is_empty()
    }

    /// The earliest entry.
    fn peek(&self) -> Option<(u64, u64)> {
        match (self.due.first(), self.run.front()) {
            (Some(&a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b).copied(),
        }
    }

    /// Takes the earliest entry out.
    fn pop(&mut self) -> Option<(u64, u64)> {
        let first = self.peek()?;
        match self.run.front() {
            Some(&front) if front == first => self.run.pop_front(),
            _ => self.due.pop_first(),
        }
    }

    /// Every entry, in order.
    fn merged(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut due = self.due.iter().copied().peekable();
        let mut run = self.run.iter().copied().peekable();
        std::iter::from_fn(move || match (due.peek(), run.peek()) {
            (Some(a), Some(b)) if a < b => due.next(),
            (Some(_), Some(_)) | (None, Some(_)) => run.next(),
            (Some(_), None) => due.next(),
            (None, None) => None,
        })
    }

    /// The earliest due time of an unsettled record, as far as known.
    fn first(&self) -> u64 {
        match (self.read, self.peek()) {
            (false, _) => 0,
            (true, Some((due, _))) => due,
            (true, None) => self.horizon.0,
        }
    }
}

/// The due indexes of the schedules open in shared mode in this process,
/// by path: every handle of a queue uses the same.
static SHARED_INDEXES: Mutex<Vec<(PathBuf, Weak<DueIndex>)>> = Mutex::new(Vec::new());

fn shared_index(queue: &RawQueue) -> Arc<DueIndex> {
    let path = queue.path();
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut all = SHARED_INDEXES.lock();
    all.retain(|(_, index)| index.strong_count() > 0);
    let found = all
        .iter()
        .find(|(at, _)| *at == key)
        .and_then(|(_, index)| index.upgrade());
    found.unwrap_or_else(|| {
        let made = Arc::new(DueIndex::default());
        all.push((key, Arc::downgrade(&made)));
        made
    })
}

/// A scheduled job fallen due, taken to be moved: read (exclusive mode)
/// or leased (shared mode, `attempt` is the lease's).
#[derive(Debug)]
pub struct Due {
    pub due_ms: u64,
    pub record: u64,
    /// The envelope as stored (it is stored again unchanged).
    pub bytes: Vec<u8>,
    pub attempt: Option<u16>,
}

impl Schedule {
    pub fn new(queue: RawQueue, shared: bool) -> Self {
        let index = match shared {
            true => shared_index(&queue),
            false => Arc::default(),
        };
        if !shared && queue.is_empty() {
            // Alone, on an empty schedule: nothing to read, ever (every
            // record from now on is noted as written).
            let mut state = index.state.lock();
            (state.read, state.seen_to) = (true, u64::MAX);
            index.first_due.store(u64::MAX, Ordering::Relaxed);
        }
        Schedule {
            queue: Arc::new(queue),
            index,
            shared,
        }
    }

    /// Adds record `record`, due at `due_ms`, to the index.
    pub fn note(&self, due_ms: u64, record: u64) {
        let mut index = self.index.state.lock();
        // Before the first reading, the reading will find it.
        if index.read {
            index.insert((due_ms, record));
            // An insert makes the first due time no later, and a cut keeps
            // the earliest: the new first is the old one or this one.
            if due_ms < self.index.first_due.load(Ordering::Relaxed) {
                self.index.first_due.store(due_ms, Ordering::Relaxed);
            }
        }
    }

    /// Whether no record can be due at `now_ms` without a look at the
    /// index: alone (exclusive mode), every record is noted as written,
    /// so the first due time kept beside the index is exact (or earlier).
    pub fn none_due(&self, now_ms: u64) -> bool {
        !self.shared && self.index.first_due.load(Ordering::Relaxed) > now_ms
    }

    /// Sets `first_due` from the index (under its lock).
    fn refresh_first(&self, index: &Index) {
        self.index.first_due.store(index.first(), Ordering::Relaxed);
    }

    /// How many scheduled records are due by `now_ms`, less those `moved`
    /// says were moved already. A read (the index may learn of records
    /// other processes added).
    pub fn due_by(&self, now_ms: u64, moved: impl Fn(u64) -> bool) -> Result<u64> {
        self.catch_up()?;
        let (due, complete): (Vec<u64>, bool) = {
            let index = self.index.state.lock();
            let due = index
                .merged()
                .take_while(|&(due, _)| due <= now_ms)
                .map(|(_, record)| record)
                .collect();
            (due, index.horizon.0 > now_ms)
        };
        if !complete {
            // Past the horizon: the records on disk are counted (`moved`
            // asked after the visit, which holds the queue's lock: a
            // settling of the moves holds theirs while it ends records).
            let mut due = Vec::new();
            self.visit(|record, due_ms| {
                if due_ms <= now_ms {
                    due.push(record);
                }
            })?;
            return Ok(due.into_iter().filter(|&record| !moved(record)).count() as u64);
        }
        let mut count = 0;
        for record in due {
            // Moved by another process meanwhile: no longer scheduled.
            if self.queue.is_unsettled(record)? {
                count += 1;
            }
        }
        Ok(count)
    }

    /// When the next record may fall due.
    pub fn next_due(&self) -> Option<u64> {
        let first = self.index.state.lock().first();
        (first != u64::MAX).then_some(first)
    }

    /// Calls `visit` with the record and due time of every scheduled
    /// record on disk, reading the due times in place. A read.
    fn visit(&self, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        let mut from = 0;
        while let Some(next) = self.queue.visit_pending_chunk(from, |record, payload| {
            // A record that is not an envelope is left for `waiting` and
            // `dque verify` to show; it never falls due.
            if let Ok(due) = Envelope::due_ms_of(payload) {
                visit(record, due);
            }
        })? {
            from = next;
        }
        Ok(())
    }

    /// Indexes the records added since the last look (by any process).
    pub fn catch_up(&self) -> Result<()> {
        let mut index = self.index.state.lock();
        // Alone (exclusive mode), every record after the first reading was
        // added through this handle, which noted it.
        if !self.shared && index.read {
            return Ok(());
        }
        // The end is read under the lock: a record added before it is
        // visited here, one added after it is noted by its writer (whose
        // `note` waits for this lock, then sees `read`).
        let end = self.queue.end_id()?;
        index.read = true;
        let mut from = index.seen_to;
        while from < end {
            let next = self.queue.visit_pending_chunk(from, |record, payload| {
                if let Ok(due) = Envelope::due_ms_of(payload) {
                    index.insert((due, record));
                }
            })?;
            let Some(next) = next else {
                break;
            };
            from = next;
        }
        index.seen_to = index.seen_to.max(end).max(from);
        self.refresh_first(&index);
        Ok(())
    }

    /// Fills an index that ran out with the earliest records on disk, but
    /// those `moved` (moved already, waiting to be ended).
    fn refill(&self, index: &mut Index, moved: &impl Fn(u64) -> bool) -> Result<()> {
        #[cfg(test)]
        {
            index.refills += 1;
        }
        let end = self.queue.end_id()?;
        // The earliest INDEX_MAX + 1 (a full index, the last one its
        // horizon: a backlog is read again once per INDEX_MAX jobs moved,
        // not per INDEX_KEEP; a later insert below the horizon cuts it
        // back as any insert does). Candidates are gathered up to twice
        // that, then cut back to the earliest (a selection, linear), and
        // anything past the latest kept is skipped from then on: a heap
        // and its heapsort were a tenth of a lease in a backlog.
        let keep = INDEX_MAX + 1;
        let mut earliest: Vec<(u64, u64)> = Vec::with_capacity(2 * keep);
        let mut past = ALL;
        let cut = |earliest: &mut Vec<(u64, u64)>| -> (u64, u64) {
            earliest.select_nth_unstable(keep - 1);
            earliest.truncate(keep);
            earliest[keep - 1]
        };
        // Taken by another thread (exclusive mode: read, not leased) and
        // not ended yet: its mover ends it or gives it back.
        let moving: BTreeSet<u64> = index.moving.iter().copied().collect();
        self.visit(|record, due| {
            if (due, record) >= past || moving.contains(&record) {
                return;
            }
            earliest.push((due, record));
            if earliest.len() == 2 * keep {
                past = cut(&mut earliest);
            }
        })?;
        if earliest.len() > keep {
            cut(&mut earliest);
        }
        earliest.sort_unstable();
        // With more than INDEX_MAX, the latest is the new horizon.
        index.horizon = match earliest.len() > INDEX_MAX {
            true => earliest.pop().expect("not empty"),
            false => ALL,
        };
        index.due = BTreeSet::new();
        // Those `moved` are left out after the visit, which holds the
        // queue's lock (a settling of the moves holds theirs while it ends
        // records): every other record below the horizon is kept.
        earliest.retain(|&(_, record)| !moved(record));
        // The candidates' room goes: the index keeps its bound.
        earliest.shrink_to_fit();
        index.run = earliest.into();
        index.read = true;
        index.seen_to = index.seen_to.max(end);
        Ok(())
    }

    /// Takes up to `max` records due at `now_ms`, in due order, skipping
    /// records that are gone and those `moved` (moved already); one another
    /// caller holds is looked at again `retry_ms` later. Empty when none
    /// is due. Each is moved, then ended with [`end`](Self::end) or given
    /// back with [`give_back`](Self::give_back).
    pub fn take_due(
        &self,
        now_ms: u64,
        retry_ms: u64,
        max: usize,
        moved: impl Fn(u64) -> bool,
    ) -> Result<Vec<Due>> {
        loop {
            let due: Vec<(u64, u64)> = {
                let mut index = self.index.state.lock();
                if index.is_empty() && index.horizon.0 <= now_ms {
                    self.refill(&mut index, &moved)?;
                }
                let mut due = Vec::new();
                while due.len() < max {
                    match index.peek() {
                        Some(first) if first.0 <= now_ms => {
                            index.pop();
                            due.push(first);
                        }
                        _ => break,
                    }
                }
                if !self.shared {
                    index.moving.extend(due.iter().map(|&(_, record)| record));
                }
                self.refresh_first(&index);
                due
            };
            if due.is_empty() {
                return Ok(Vec::new());
            }
            let records: Vec<u64> = due.iter().map(|&(_, record)| record).collect();
            let found = match self.read_or_lease(&records) {
                Ok(found) => found,
                Err(e) => {
                    // Looked at again later (a record leased before the
                    // error is busy until its lease ends).
                    self.done_moving(&records);
                    for (due, record) in due {
                        self.note(due, record);
                    }
                    return Err(e);
                }
            };
            let mut taken = Vec::with_capacity(found.len());
            let mut left = Vec::new();
            for ((due_ms, record), found) in due.into_iter().zip(found) {
                match found {
                    Found::Taken(bytes, attempt) => taken.push(Due {
                        due_ms,
                        record,
                        bytes,
                        attempt,
                    }),
                    Found::Busy => {
                        left.push(record);
                        self.note(now_ms.saturating_add(retry_ms), record);
                    }
                    Found::Gone => left.push(record),
                }
            }
            self.done_moving(&left);
            if !taken.is_empty() {
                return Ok(taken);
            }
        }
    }

    /// Records taken by [`take_due`](Self::take_due) are ended, given
    /// back, or waiting in the pending moves: no longer moving.
    pub fn done_moving(&self, records: &[u64]) {
        if self.shared || records.is_empty() {
            return;
        }
        let mut index = self.index.state.lock();
        if index.moving.len() == records.len() {
            index.moving.clear();
        } else {
            let done: BTreeSet<u64> = records.iter().copied().collect();
            index.moving.retain(|record| !done.contains(record));
        }
    }

    /// Runs `op` on scheduled record `record` unless it is being moved
    /// (taken by [`take_due`](Self::take_due), or waiting in the pending
    /// moves, as `moved` says): then `Ok(None)`. Alone (exclusive mode) a
    /// move takes a record without leasing it, so a caller that leases
    /// or ends one by id (a priority change, a cancel) does it here, under
    /// the index's lock, which a move takes to pick its records.
    pub fn unless_moving<R>(
        &self,
        record: u64,
        moved: impl Fn(u64) -> bool,
        op: impl FnOnce(&RawQueue) -> Result<R>,
    ) -> Result<Option<R>> {
        let index = self.index.state.lock();
        if !self.shared && (index.moving.contains(&record) || moved(record)) {
            return Ok(None);
        }
        let result = op(&self.queue)?;
        drop(index);
        Ok(Some(result))
    }

    /// Reads (exclusive mode) or leases (shared mode) records `records`.
    fn read_or_lease(&self, records: &[u64]) -> Result<Vec<Found>> {
        if self.shared {
            let leased = self.queue.lease_ids(records)?;
            return Ok(leased
                .into_iter()
                .map(|found| match found {
                    ById::Leased(leased, _) => {
                        let (bytes, _, attempt) = leased.into_parts();
                        Found::Taken(bytes, Some(attempt))
                    }
                    ById::Busy => Found::Busy,
                    ById::Gone => Found::Gone,
                })
                .collect());
        }
        let read = self.queue.read_unleased(records)?;
        Ok(read
            .into_iter()
            .map(|found| match found {
                Unleased::Read(bytes) => Found::Taken(bytes, None),
                Unleased::Busy => Found::Busy,
                Unleased::Gone => Found::Gone,
            })
            .collect())
    }

    /// Puts a taken record back where it was, to be looked at again.
    pub fn give_back(&self, due: &Due) {
        if let Some(attempt) = due.attempt {
            let _ = self.queue.lessor().release(due.record, attempt);
        }
        self.note(due.due_ms, due.record);
    }

    /// Ends taken records (their jobs are in their lanes): acked if leased,
    /// else settled as a cancel does. On an error the ones before it are
    /// ended: returns how many, and the error.
    pub fn end(&self, records: &[(u64, Option<u16>)]) -> (usize, Result<()>) {
        if records.iter().all(|&(_, attempt)| attempt.is_none()) {
            let ids: Vec<u64> = records.iter().map(|&(record, _)| record).collect();
            return self.queue.cancel_all(&ids);
        }
        let leased: Vec<(u64, u16)> = records
            .iter()
            .map(|&(record, attempt)| (record, attempt.unwrap_or(0)))
            .collect();
        self.queue.lessor().ack_all(&leased)
    }

    /// Dead-letters a taken record that is not a job envelope.
    pub fn fail(&self, due: &Due, reason: &str) -> Result<()> {
        let attempt = match due.attempt {
            Some(attempt) => attempt,
            // Read, not leased: leased now to be failed.
            None => match self.queue.lease_id(due.record)? {
                ById::Leased(leased, _) => leased.into_parts().2,
                _ => return Ok(()),
            },
        };
        self.queue.lessor().fail(due.record, attempt, reason)
    }
}

/// What [`Schedule::read_or_lease`] found of one record.
enum Found {
    Taken(Vec<u8>, Option<u16>),
    Busy,
    Gone,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Index {
        Index {
            due: BTreeSet::new(),
            run: VecDeque::new(),
            horizon: ALL,
            seen_to: 0,
            read: true,
            moving: Vec::new(),
            refills: 0,
        }
    }

    // Issue 24 (jobs falling due in a backlog): an index that ran out was
    // refilled with the earliest INDEX_KEEP records only, so a backlog of
    // N due jobs was read from disk N / 32,768 times (with a heap and its
    // heapsort: a fifth of a lease of the bench's 200,000 due jobs). A
    // refill now fills the index (INDEX_MAX), read once per INDEX_MAX
    // taken, and the jobs still come in (due, record) order, each once.
    #[test]
    fn a_backlog_is_read_again_once_per_index_max_taken_in_due_order() {
        use crate::jobs::job::Job;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let n = 3 * INDEX_MAX as u64 + 10;
        let order = |i: u64| (i * 7919) % n;
        {
            let queue = RawQueue::create(&path).unwrap();
            for i in 0..n {
                let job = Job {
                    id: String::new(),
                    body: Vec::new(),
                    priority: 0,
                    headers: Vec::new(),
                    attempt: 0,
                    enqueued_at: std::time::UNIX_EPOCH,
                    caller_id: false,
                };
                let envelope = Envelope {
                    job,
                    due_ms: 1 + order(i),
                    attempts_before: 0,
                    hold: None,
                };
                queue.enqueue_bytes(&envelope.encode()).unwrap();
            }
            queue.close().unwrap();
        }
        let schedule = Schedule::new(RawQueue::open(&path).unwrap(), false);
        schedule.catch_up().unwrap();
        let mut next = 1;
        loop {
            let taken = schedule.take_due(u64::MAX - 1, 1, 1024, |_| false).unwrap();
            if taken.is_empty() {
                break;
            }
            let ended: Vec<(u64, Option<u16>)> = taken.iter().map(|d| (d.record, None)).collect();
            for due in taken {
                assert_eq!(due.due_ms, next, "out of due order");
                next += 1;
            }
            let records: Vec<u64> = ended.iter().map(|&(r, _)| r).collect();
            schedule.done_moving(&records);
            schedule.end(&ended).1.unwrap();
        }
        assert_eq!(next, n + 1, "each job once");
        let refills = schedule.index.state.lock().refills;
        // The first reading keeps INDEX_KEEP; each refill INDEX_MAX.
        let most = (n - INDEX_KEEP as u64).div_ceil(INDEX_MAX as u64) as usize + 1;
        assert!(
            refills <= most,
            "{refills} readings of the backlog, {most} at most"
        );
    }

    // Issue 24 (memory of delayed jobs): the index keeps entries noted in
    // order in a run beside a tree, and cuts itself back past INDEX_MAX.
    // This pins it against a plain ordered set: the same entries (none
    // twice, though noted twice), popped in the same order, and every
    // entry below the horizon kept.
    #[test]
    fn the_index_pops_what_an_ordered_set_would_below_its_horizon() {
        let mut index = empty();
        let mut model = BTreeSet::new();
        let mut seed = 7u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..(INDEX_MAX as u64 * 2) {
            // Mostly in order (constant delays), some not, some twice.
            let entry = match next() % 10 {
                0 => (next() % (i + 1), i),
                1 if i > 0 => (i - 1, i - 1),
                _ => (i, i),
            };
            index.insert(entry);
            model.insert(entry);
        }
        assert!(index.len() <= INDEX_MAX);
        let kept: Vec<(u64, u64)> = model.range(..index.horizon).copied().collect();
        assert_eq!(index.merged().collect::<Vec<_>>(), kept);
        let mut popped = Vec::new();
        while let Some(entry) = index.pop() {
            popped.push(entry);
        }
        assert_eq!(popped, kept);
    }

    // Issue 24 (delayed enqueue): a note set the first due time kept
    // beside the index by reading the index's earliest entry again (a
    // BTreeSet walk, a tenth of a delayed enqueue's extra cost); it now
    // keeps the earlier of the old one and the note's. Pins that the two
    // agree through notes in and out of order and the cuts of a full
    // index (a later first due time would leave due jobs unmoved).
    #[test]
    fn the_first_due_time_follows_every_note_and_cut() {
        let dir = tempfile::tempdir().unwrap();
        let turbo = crate::Options::new().durability(crate::Durability::Turbo);
        let queue = RawQueue::create_with(dir.path().join("s"), &turbo).unwrap();
        let schedule = Schedule::new(queue, false);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for record in 0..4 * INDEX_MAX as u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Mostly increasing (the sorted run), some earlier (the set).
            let due = match rng % 4 {
                0 => 1_000 + rng % 100_000,
                _ => 100_000 + record,
            };
            schedule.note(due, record);
            let first = schedule.index.state.lock().first();
            assert_eq!(schedule.index.first_due.load(Ordering::Relaxed), first);
        }
    }
}
