//! One walk over the waiting jobs in `waiting`'s order, reading each
//! record in place (no copy, no body decoded): what native search and
//! keyset paging are made of.
//!
//! The order (as `waiting`): each priority, smallest first, its lane's
//! records (ready and leased) and then the schedule's jobs of that
//! priority that fell due by now, by (due time, record); then the
//! scheduled jobs by (due time, record). A walk may start after a
//! [`Slot`]: lanes resume from a record id (the engine skips the
//! segments before it by their headers), the schedule's parts from a
//! (due time, record) key. The schedule, kept in record order, is read
//! whole once per walk (keys only; bytes kept for the few a caller asks
//! for), as `waiting` reads it.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::ops::ControlFlow;

use super::envelope::Envelope;
use super::EmbeddedJobs;
use crate::error::{Error, Result};
use crate::jobs::clock::{from_unix_ms, unix_ms};
use crate::jobs::job::WaitState;

/// A place in the waiting order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Lane `priority`, record id.
    Lane(i32, u64),
    /// A scheduled job of `priority` due by now: (due ms, record).
    Due(i32, u64, u64),
    /// A scheduled job: (due ms, record).
    Later(u64, u64),
}

/// A waiting record the walk met.
pub(super) struct Met<'a> {
    pub slot: Slot,
    pub state: WaitState,
    /// Attempts of the lane record (0 for the schedule's).
    pub lane_attempts: u16,
    /// Whether the walk's `keep` held for it.
    pub kept: bool,
    /// Its bytes: every lane record's; a schedule record's if `keep`
    /// held and it is among the first `room` kept of its part.
    pub bytes: Option<&'a [u8]>,
}

/// What a walk's visitor answers: go on or stop (errors end the walk).
pub(super) type Visit<'v> = dyn FnMut(Met<'_>) -> Result<ControlFlow<()>> + 'v;

/// A test on a record's bytes in a state (the head decoded, not the body).
pub(super) type Keep<'k> = dyn Fn(&[u8], WaitState) -> Result<bool> + 'k;

/// Records a walk reads under one hold of a lane's lock.
const BURST: usize = 4096;

/// A scheduled record met in the schedule's pass: its key and whether
/// `keep` held.
type Key = (u64, u64, bool);

/// Bytes of kept records by key, the `room` first of a part.
#[derive(Default)]
struct Kept {
    heap: BinaryHeap<(u64, u64, Vec<u8>)>,
}

impl Kept {
    fn offer(&mut self, at: u64, record: u64, bytes: &[u8], room: usize) {
        if room == 0 {
            return;
        }
        if self.heap.len() < room {
            self.heap.push((at, record, bytes.to_vec()));
        } else if self
            .heap
            .peek()
            .is_some_and(|top| (at, record) < (top.0, top.1))
        {
            self.heap.pop();
            self.heap.push((at, record, bytes.to_vec()));
        }
    }

    fn into_map(self) -> HashMap<(u64, u64), Vec<u8>> {
        self.heap
            .into_iter()
            .map(|(at, record, bytes)| ((at, record), bytes))
            .collect()
    }
}

/// The schedule read once: its due jobs by priority, the later ones.
#[derive(Default)]
struct ScheduleRead {
    due: BTreeMap<i32, (Vec<Key>, Kept)>,
    later: (Vec<Key>, Kept),
}

impl EmbeddedJobs {
    /// Walks the waiting records after `from` (`None`: from the start)
    /// in `waiting`'s order, calling `visit` on each until it stops.
    /// Call with the limited leases' lock held, as `waiting` is.
    ///
    /// From a [`Slot::Later`] it lists every scheduled job after that
    /// key (all of them were after `as_of`).
    ///
    /// `as_of` splits the schedule: jobs due by then are listed with
    /// their lanes, the others after every lane (`None`: now). A walk of
    /// pages keeps the first page's, so a job falling due meanwhile keeps
    /// its place in the walk; states are told by the time now.
    pub(super) fn walk_waiting(
        &self,
        from: Option<Slot>,
        as_of: Option<u64>,
        keep: &Keep<'_>,
        room: usize,
        visit: &mut Visit<'_>,
    ) -> Result<()> {
        let now_ms = unix_ms(self.now());
        let read = self.read_schedule(from, keep, room, as_of.unwrap_or(now_ms), now_ms)?;
        if !matches!(from, Some(Slot::Later(..))) {
            let lanes: BTreeMap<i32, _> = self.lanes.all()?.into_iter().collect();
            let mut priorities: Vec<i32> = lanes.keys().chain(read.due.keys()).copied().collect();
            priorities.sort_unstable();
            priorities.dedup();
            let mut due = read.due;
            for priority in priorities {
                let (lane_from, due_from) = match from {
                    None => (Some(0), None),
                    Some(Slot::Lane(p, _) | Slot::Due(p, ..)) if priority < p => continue,
                    Some(Slot::Lane(p, record)) if priority == p => {
                        (Some(record.saturating_add(1)), None)
                    }
                    Some(Slot::Due(p, at, record)) if priority == p => (None, Some((at, record))),
                    _ => (Some(0), None),
                };
                if let (Some(start), Some(lane)) = (lane_from, lanes.get(&priority)) {
                    if self
                        .walk_lane(priority, lane, start, keep, visit)?
                        .is_break()
                    {
                        return Ok(());
                    }
                }
                if let Some((keys, kept)) = due.remove(&priority) {
                    let flow = walk_keys(keys, kept, due_from, visit, |at, record| {
                        (Slot::Due(priority, at, record), state_at(at, now_ms))
                    })?;
                    if flow.is_break() {
                        return Ok(());
                    }
                }
            }
        }
        let (keys, kept) = read.later;
        let after = match from {
            Some(Slot::Later(at, record)) => Some((at, record)),
            _ => None,
        };
        // The end of the walk either way.
        let _ = walk_keys(keys, kept, after, visit, |at, record| {
            (Slot::Later(at, record), state_at(at, now_ms))
        })?;
        Ok(())
    }

    /// Lane `priority`'s records from id `start` on, in place.
    fn walk_lane(
        &self,
        priority: i32,
        lane: &crate::queue::dque::RawQueue,
        start: u64,
        keep: &Keep<'_>,
        visit: &mut Visit<'_>,
    ) -> Result<ControlFlow<()>> {
        let mut from = start;
        loop {
            let mut outcome = Ok(ControlFlow::Continue(()));
            let mut burst = 0;
            let mut resume = None;
            lane.visit_pending_from(from, |record, attempts, leased, bytes| {
                // The lane's lock is let go between bursts: workers' leases
                // and acks go on during a long walk.
                if burst == BURST {
                    resume = Some(record);
                    return ControlFlow::Break(());
                }
                burst += 1;
                let state = match leased {
                    true => WaitState::Leased,
                    false => WaitState::Ready,
                };
                let met = keep(bytes, state).and_then(|kept| {
                    visit(Met {
                        slot: Slot::Lane(priority, record),
                        state,
                        lane_attempts: attempts,
                        kept,
                        bytes: Some(bytes),
                    })
                });
                match met {
                    Ok(ControlFlow::Continue(())) => ControlFlow::Continue(()),
                    stop => {
                        outcome = stop;
                        ControlFlow::Break(())
                    }
                }
            })?;
            match (outcome?, resume) {
                (ControlFlow::Continue(()), Some(record)) => from = record,
                (flow, _) => return Ok(flow),
            }
        }
    }

    /// One pass over the schedule: the keys of the records the walk
    /// will meet (after `from`), split into due by now (by priority) and
    /// later; the bytes of the first `room` kept of each part.
    fn read_schedule(
        &self,
        from: Option<Slot>,
        keep: &Keep<'_>,
        room: usize,
        split_ms: u64,
        now_ms: u64,
    ) -> Result<ScheduleRead> {
        let mut read = ScheduleRead::default();
        let Some(schedule) = &self.schedule else {
            return Ok(read);
        };
        let mut failed = None;
        let decode = |record: u64, e| Error::Decode {
            id: record,
            source: e,
        };
        // Read before the pass: the moves' lock is not taken under the
        // schedule's.
        let moved = self.moves.records_now();
        let mut on_record = |record: u64, bytes: &[u8]| -> Result<()> {
            // Moved to its lane already (its record waits for a sync).
            if moved.binary_search(&record).is_ok() {
                return Ok(());
            }
            let at = Envelope::due_ms_of(bytes).unwrap_or(0);
            match from {
                Some(Slot::Later(from_at, from_record)) => {
                    if (at, record) > (from_at, from_record) {
                        let kept = keep(bytes, state_at(at, now_ms))?;
                        if kept {
                            read.later.1.offer(at, record, bytes, room);
                        }
                        read.later.0.push((at, record, kept));
                    }
                }
                _ if at <= split_ms => {
                    let priority = Envelope::priority_of(bytes).map_err(|e| decode(record, e))?;
                    // Before the walk's start: not met, not kept.
                    let met = match from {
                        Some(Slot::Lane(p, _)) => priority >= p,
                        Some(Slot::Due(p, from_at, from_record)) => {
                            priority > p || (priority == p && (at, record) > (from_at, from_record))
                        }
                        _ => true,
                    };
                    if !met {
                        return Ok(());
                    }
                    let kept = keep(bytes, state_at(at, now_ms))?;
                    let (keys, bytes_kept) = read.due.entry(priority).or_default();
                    if kept {
                        bytes_kept.offer(at, record, bytes, room);
                    }
                    keys.push((at, record, kept));
                }
                _ => {
                    let kept = keep(bytes, state_at(at, now_ms))?;
                    if kept {
                        read.later.1.offer(at, record, bytes, room);
                    }
                    read.later.0.push((at, record, kept));
                }
            }
            Ok(())
        };
        // A segment at a time: the schedule's lock is let go between them.
        let mut next = Some(0);
        while let Some(from_record) = next {
            next = schedule
                .queue
                .visit_pending_chunk(from_record, |record, bytes| {
                    if failed.is_none() {
                        failed = on_record(record, bytes).err();
                    }
                })?;
            if failed.is_some() {
                break;
            }
        }
        failed.map_or(Ok(read), Err)
    }
}

/// The state of a scheduled job due at `at`, `now_ms` now.
fn state_at(at: u64, now_ms: u64) -> WaitState {
    match at <= now_ms {
        true => WaitState::Ready,
        false => WaitState::Scheduled(from_unix_ms(at)),
    }
}

/// The schedule's records of one part in (due, record) order from key
/// after key `after` (`None`: all), each visited as `place` names it.
fn walk_keys(
    mut keys: Vec<Key>,
    kept: Kept,
    after: Option<(u64, u64)>,
    visit: &mut Visit<'_>,
    place: impl Fn(u64, u64) -> (Slot, WaitState),
) -> Result<ControlFlow<()>> {
    keys.sort_unstable_by_key(|&(at, record, _)| (at, record));
    let bytes = kept.into_map();
    for (at, record, is_kept) in keys {
        // The same test as the schedule's pass: a key met has its bytes.
        if after.is_some_and(|after| (at, record) <= after) {
            continue;
        }
        let (slot, state) = place(at, record);
        let met = Met {
            slot,
            state,
            lane_attempts: 0,
            kept: is_kept,
            bytes: bytes.get(&(at, record)).map(Vec::as_slice),
        };
        if visit(met)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}
