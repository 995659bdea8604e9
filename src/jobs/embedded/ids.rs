//! Caller-chosen job ids: the records are the truth, an index in memory
//! the way to them. Every envelope of a job with a caller id carries the
//! id (FORMAT.md, "Envelope"), so an id becomes durable with its job's own
//! write, and no file per id exists: each handle keeps `id → the unsettled
//! records of its job` in memory, built at its first caller-id operation
//! by reading the waiting records once, and kept current with what other
//! processes write by reading the records they added since.
//!
//! Every decision about an id (is it taken? is this record a leftover?)
//! and every write of a record of a job with a caller id happens under the
//! ids' lock ([`Ids::lock`]: this handle's mutex, and in shared mode an
//! exclusive `flock` on `jobs/ids/.lock` between processes). A writer
//! first bumps the write count kept in that file, so a holder of the lock
//! that finds the count it saw last knows that no record with a caller id
//! appeared since, and one that finds another reads the new records first.
//! So the index a decision reads holds every unsettled record of the id.

mod table;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::envelope::Envelope;
use super::unique::{Claims, Held};
use crate::error::{Error, Result};
use crate::log::lock::lock_exclusive;
use crate::queue::dque::RawQueue;
use table::IdTable;

/// Where a job's record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// In the lane of this priority, record id.
    Lane(i32, u64),
    /// In the schedule, record id.
    Scheduled(u64),
}

impl Location {
    /// An order of locations: by part, then record.
    fn key(self) -> (i64, u64) {
        match self {
            Location::Lane(priority, record) => (i64::from(priority), record),
            Location::Scheduled(record) => (i64::MAX, record),
        }
    }

    /// The record's id in its queue.
    pub fn record(self) -> u64 {
        match self {
            Location::Lane(_, record) | Location::Scheduled(record) => record,
        }
    }
}

/// A queue that holds job records: a lane, or the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    Lane(i32),
    Schedule,
}

impl Part {
    /// Whether `location` is in this part.
    fn holds(self, location: Location) -> bool {
        match (self, location) {
            (Part::Lane(part), Location::Lane(priority, _)) => part == priority,
            (Part::Schedule, Location::Scheduled(_)) => true,
            _ => false,
        }
    }

    fn at(self, record: u64) -> Location {
        match self {
            Part::Lane(priority) => Location::Lane(priority, record),
            Part::Schedule => Location::Scheduled(record),
        }
    }
}

/// The records of one id: nearly always one (kept inline, no allocation);
/// two while a job moves, or after a move a crash cut. (16 bytes: the
/// index's entry stays small.)
#[derive(Debug, Clone)]
enum Records {
    One(Location),
    // Boxed: a pointer fits beside `One`'s location, a `Vec` does not.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Location>>),
}

impl Records {
    fn as_slice(&self) -> &[Location] {
        match self {
            Records::One(at) => std::slice::from_ref(at),
            Records::Many(all) => all,
        }
    }

    /// Adds `location` if it is not there yet; whether it was added.
    fn add(&mut self, location: Location) -> bool {
        if self.as_slice().contains(&location) {
            return false;
        }
        *self = match std::mem::replace(self, Records::One(location)) {
            Records::One(at) => Records::Many(Box::new(vec![at, location])),
            Records::Many(mut all) => {
                all.push(location);
                Records::Many(all)
            }
        };
        true
    }

    /// Keeps the records `keep` says; false if none is left.
    fn retain(&mut self, mut keep: impl FnMut(Location) -> bool) -> bool {
        match self {
            Records::One(at) => keep(*at),
            Records::Many(all) => {
                all.retain(|&at| keep(at));
                if let [one] = all.as_slice() {
                    *self = Records::One(*one);
                }
                !self.as_slice().is_empty()
            }
        }
    }
}

#[derive(Debug)]
struct Index {
    /// Ids are callers' strings, perhaps an attacker's: a seeded hash, but
    /// a fast one (SipHash was 7 % of an enqueue with an id).
    by_id: IdTable,
    /// Records from this id on in each part are not read yet.
    seen_to: HashMap<Part, u64>,
    /// Whether the waiting records were read once.
    built: bool,
    /// The write count of `.lock` when the index was last made current
    /// (shared mode).
    seen_count: u64,
    /// Records noted since the last sweep of settled ones.
    added_since_sweep: usize,
    /// Ids held just after the last sweep.
    held_after_sweep: usize,
    /// Ids held by jobs that ran or died within their uniqueness period
    /// (`jobs/ids/unique`), read with the records.
    claims: Claims,
}

#[derive(Debug)]
pub struct Ids {
    lock_path: PathBuf,
    /// Shared mode: other processes write records too.
    shared: bool,
    index: Mutex<Index>,
}

/// The ids' lock, held, with the index. Made current with
/// [`refresh`](Self::refresh) before a decision.
pub struct IdsLock<'a> {
    index: MutexGuard<'a, Index>,
    /// `.lock`, `flock`ed (shared mode).
    file: Option<File>,
    lock_path: &'a Path,
    /// Whether this hold bumped the write count already.
    bumped: bool,
}

impl Ids {
    /// The ids of the jobs queue whose `jobs/ids/` directory is `dir`.
    pub fn new(dir: PathBuf, shared: bool) -> Self {
        Ids {
            lock_path: dir.join(".lock"),
            shared,
            index: Mutex::new(Index {
                by_id: IdTable::default(),
                seen_to: HashMap::new(),
                built: false,
                seen_count: 0,
                added_since_sweep: 0,
                held_after_sweep: 0,
                claims: Claims::new(&dir),
            }),
        }
    }

    /// Takes the ids' lock: hold it from a decision about an id until the
    /// record written on it is placed and noted.
    pub fn lock(&self) -> Result<IdsLock<'_>> {
        let index = self.index.lock();
        let file = match self.shared {
            true => Some(lock_exclusive(&self.lock_path)?),
            false => None,
        };
        Ok(IdsLock {
            index,
            file,
            lock_path: &self.lock_path,
            bumped: false,
        })
    }

    /// Forgets record `location` of `id`, settled for good (acked, dead,
    /// cancelled) by this handle. This handle's memory only: other
    /// handles find it settled when they look.
    pub fn forget(&self, id: &str, location: Location) {
        let mut index = self.index.lock();
        index
            .by_id
            .update(id, |records| records.retain(|at| at != location));
    }
}

impl IdsLock<'_> {
    /// The write count in `.lock`: bumped before every write of a record
    /// with a caller id (shared mode).
    fn count(&self) -> Result<u64> {
        let Some(file) = &self.file else {
            return Ok(0);
        };
        let mut bytes = [0u8; 8];
        match file.read_at(&mut bytes, 0) {
            Ok(8) => Ok(u64::from_le_bytes(bytes)),
            // Made empty by the first lock: nothing written yet.
            Ok(_) => Ok(0),
            Err(e) => Err(Error::io(self.lock_path, e)),
        }
    }

    /// Makes the index hold every unsettled record with a caller id in
    /// `parts()` (every lane and the schedule): the first time by reading
    /// them all, then by reading what other processes added since.
    pub fn refresh(
        &mut self,
        parts: impl FnOnce() -> Result<Vec<(Part, Arc<RawQueue>)>>,
    ) -> Result<()> {
        let count = self.count()?;
        if self.index.built && count == self.index.seen_count {
            return Ok(());
        }
        let changed = count != self.index.seen_count;
        self.index.claims.refresh(changed, 0)?;
        for (part, queue) in &parts()? {
            let from = self.index.seen_to.get(part).copied().unwrap_or(0);
            let end = read_from(queue, from, |record, id| {
                self.index.note(id, part.at(record));
            })?;
            self.index.seen_to.insert(*part, end);
        }
        self.index.built = true;
        self.index.seen_count = count;
        Ok(())
    }

    /// Says a record with a caller id is about to be written: the write
    /// count goes up first, so a write that fails afterwards only makes
    /// others read for nothing, and none is ever missed.
    pub fn will_write(&mut self) -> Result<()> {
        if self.bumped {
            return Ok(());
        }
        if let Some(file) = &self.file {
            let count = self.count()?;
            crate::faults::check(crate::faults::FaultOp::Write, self.lock_path)
                .and_then(|()| file.write_all_at(&(count + 1).to_le_bytes(), 0))
                .map_err(|e| Error::io(self.lock_path, e))?;
            // Up to date but for this hold's own writes, which it notes.
            if self.index.seen_count == count {
                self.index.seen_count = count + 1;
            }
        }
        self.bumped = true;
        Ok(())
    }

    /// Whether `id` is held at `now_ms` by a job that ran or died within
    /// its uniqueness period (the index made current).
    pub fn held(&self, id: &str, now_ms: u64) -> Option<Held> {
        self.index.claims.held(id, now_ms)
    }

    /// Writes that `id` is held by a job settled as `held` says (`None`:
    /// free again), before the record's end it stands for (`durable`:
    /// synced first).
    pub fn note_held(
        &mut self,
        id: &str,
        held: Option<Held>,
        durable: bool,
        now_ms: u64,
    ) -> Result<()> {
        self.will_write()?;
        self.index.claims.append(id, held, durable, now_ms)
    }

    /// Notes the record just written at `location` for `id`.
    pub fn add(&mut self, id: &str, location: Location) {
        self.index.note(id, location);
    }

    /// Takes record `location` of `id` out again (its write is undone).
    pub fn remove(&mut self, id: &str, location: Location) {
        self.index
            .by_id
            .update(id, |records| records.retain(|at| at != location));
    }

    /// The records of `id` the index holds, oldest noted first (some may
    /// have ended since: settled by another handle).
    pub fn records(&self, id: &str) -> Vec<Location> {
        self.index
            .by_id
            .get(id)
            .map_or_else(Vec::new, |records| records.as_slice().to_vec())
    }

    /// A live record of `id` other than those in `except`, if there is
    /// one; `live` says whether a record is unsettled (the ones that are
    /// not are dropped from the index on the way).
    pub fn live_record(
        &mut self,
        id: &str,
        except: &[Location],
        live: impl Fn(Location) -> Result<bool>,
    ) -> Result<Option<Location>> {
        let mut found = None;
        self.each_live(id, live, |at| {
            if found.is_none() && !except.contains(&at) {
                found = Some(at);
            }
        })?;
        Ok(found)
    }

    /// Every live record of `id`, oldest noted first; `live` as for
    /// [`live_record`](Self::live_record).
    pub fn live_records(
        &mut self,
        id: &str,
        live: impl Fn(Location) -> Result<bool>,
    ) -> Result<Vec<Location>> {
        let mut found = Vec::new();
        self.each_live(id, live, |at| found.push(at))?;
        Ok(found)
    }

    /// Calls `found` on every live record of `id`, oldest noted first,
    /// dropping the settled ones from the index.
    fn each_live(
        &mut self,
        id: &str,
        live: impl Fn(Location) -> Result<bool>,
        mut found: impl FnMut(Location),
    ) -> Result<()> {
        let mut failed = None;
        self.index.by_id.update(id, |records| {
            records.retain(|at| match live(at) {
                Ok(true) => {
                    found(at);
                    true
                }
                Ok(false) => false,
                Err(e) => {
                    failed.get_or_insert(e);
                    true
                }
            })
        });
        failed.map_or(Ok(()), Err)
    }

    /// Drops the settled records of every id once as many records were
    /// noted as the index held after its last sweep (so a sweep costs O(1)
    /// per record noted, and settled ids take at most half the index).
    /// `parts()` lists the queues holding job records; each is asked
    /// about its records a chunk at a time under one lock, not one lock a
    /// record (a record of a part not listed, or of a chunk whose look
    /// failed, is kept).
    pub fn sweep_if_due(
        &mut self,
        parts: impl FnOnce() -> Result<Vec<(Part, Arc<RawQueue>)>>,
    ) -> Result<()> {
        if self.index.added_since_sweep < self.index.held_after_sweep.max(1024) {
            return Ok(());
        }
        let parts = parts()?;
        let mut records: Vec<Vec<u64>> = vec![Vec::new(); parts.len()];
        for at in self.index.by_id.all_records().flat_map(Records::as_slice) {
            if let Some(i) = parts.iter().position(|(part, _)| part.holds(*at)) {
                records[i].push(at.record());
            }
        }
        let mut failed = None;
        let mut settled: Vec<Location> = Vec::new();
        for ((part, queue), records) in parts.iter().zip(&records) {
            for chunk in records.chunks(SWEEP_CHUNK) {
                match queue.unsettled_among(chunk) {
                    Ok(live) => settled.extend(
                        chunk
                            .iter()
                            .zip(live)
                            .filter(|(_, live)| !live)
                            .map(|(&record, _)| part.at(record)),
                    ),
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
        }
        drop(records);
        if !settled.is_empty() {
            settled.sort_unstable_by_key(|at| at.key());
            let is_settled = |at: Location| settled.binary_search_by_key(&at.key(), |s| s.key());
            self.index
                .by_id
                .retain(|records| records.retain(|at| is_settled(at).is_err()));
        }
        self.index.added_since_sweep = 0;
        self.index.held_after_sweep = self.index.by_id.len();
        failed.map_or(Ok(()), Err)
    }
}

/// Records a sweep asks a queue about under one lock (the lock is not
/// held for long however many ids are held).
const SWEEP_CHUNK: usize = 4096;

impl Index {
    fn note(&mut self, id: &str, location: Location) {
        let added = self.by_id.add(id, location);
        self.added_since_sweep += usize::from(added);
    }
}

/// Calls `found(record, id)` for every unsettled record with a caller id
/// in `queue` from record `from` on; returns the end it read to.
fn read_from(queue: &RawQueue, from: u64, mut found: impl FnMut(u64, &str)) -> Result<u64> {
    let end = queue.end_id()?;
    let mut at = from;
    while at < end {
        let chunk = queue.pending_chunk(at)?;
        let Some(last) = chunk.last() else {
            break;
        };
        at = last.id + 1;
        for record in &chunk {
            if let Some(id) = Envelope::caller_id_of(&record.payload) {
                found(record.id, id);
            }
        }
    }
    Ok(end.max(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 24: a sweep of settled ids looked each record up with a lock
    // and a lane lookup of its own (a third of an enqueue with an id's
    // extra cost); it now asks each part about its records a chunk at a
    // time. Pins that it still drops exactly the settled records, in every
    // part, keeps the live ones (and the ids with one left), and keeps
    // what it cannot look at.
    #[test]
    fn a_sweep_drops_exactly_the_settled_records_of_every_part() {
        let dir = tempfile::tempdir().unwrap();
        let turbo = crate::Options::new().durability(crate::Durability::Turbo);
        let queue =
            |name: &str| Arc::new(RawQueue::create_with(dir.path().join(name), &turbo).unwrap());
        let parts = vec![
            (Part::Lane(0), queue("lane0")),
            (Part::Lane(-3), queue("lane-3")),
            (Part::Schedule, queue("schedule")),
        ];
        let ids = Ids::new(dir.path().join("ids"), false);
        let mut locked = ids.lock().unwrap();
        let n = 3 * SWEEP_CHUNK as u64 / 2;
        let mut expected = Vec::new();
        for i in 0..n {
            let (part, queue) = &parts[(i % 3) as usize];
            let record = queue.enqueue_encoded(b"job").unwrap();
            let at = part.at(record);
            let id = format!("id-{i}");
            locked.add(&id, at);
            // Every fifth settled by someone else.
            let settled = i % 5 == 0;
            if settled {
                queue.cancel(record).unwrap();
            }
            expected.push((id, at, settled));
        }
        // An id with a settled record and a live one (a move), and one in
        // a part no one lists.
        let (_, lane) = &parts[0];
        let old = lane.enqueue_encoded(b"job").unwrap();
        let new = lane.enqueue_encoded(b"job").unwrap();
        locked.add("moved", Location::Lane(0, old));
        locked.add("moved", Location::Lane(0, new));
        lane.cancel(old).unwrap();
        locked.add("unlisted", Location::Lane(9, 0));
        locked.sweep_if_due(|| Ok(parts.clone())).unwrap();
        for (id, at, settled) in &expected {
            let want = if *settled { vec![] } else { vec![*at] };
            assert_eq!(locked.records(id), want, "{id}");
        }
        assert_eq!(locked.records("moved"), vec![Location::Lane(0, new)]);
        assert_eq!(locked.records("unlisted"), vec![Location::Lane(9, 0)]);
        assert_eq!(locked.index.held_after_sweep, locked.index.by_id.len());
    }
}
