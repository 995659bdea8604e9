//! Jobs falling due: moved from the schedule to the end of their lanes, in
//! due order, before any call adds a ready job to a lane (so that equal
//! priorities keep the order in which jobs became ready) and before a
//! lease looks at the lanes.

use super::ids::Location;
use super::schedule::{Due, Schedule};
use super::{EmbeddedJobs, Envelope};
use crate::error::{Error, Result};
use crate::jobs::clock::unix_ms;
use crate::queue::dque::RawQueue;
use crate::queue::engine::ById;
use crate::queue::lease::Leased;
use std::time::SystemTime;

/// How many due records one step of a move takes when each step is made
/// durable before the next (Safe mode, shared mode, caller ids): a process
/// killed in the middle of a step leaves its jobs in the schedule and in
/// their lanes both (they may run twice), so the batch is small. Sixteen
/// make the fsyncs of a move a fifth of those of the lease and ack that
/// follow.
const DUE_BATCH: usize = 16;

/// The same when the moves wait for a sync of their lanes (see `moves`):
/// a kill leaves those to run twice anyway, up to `SETTLE_AFTER` of them.
const DEFERRED_BATCH: usize = 1024;

/// A scheduled job fallen due, taken to be moved to its lane.
struct FallingDue {
    envelope: Envelope,
    due: Due,
}

impl EmbeddedJobs {
    /// Before a call adds jobs: moves the jobs due now first if one of
    /// them goes to a lane (`ready`), so that equal priorities keep the
    /// order in which jobs became ready; a job going to the schedule joins
    /// no lane, and leaves the moves to the next call that needs them.
    pub(super) fn promote_before_adding(&self, ready: bool, now: SystemTime) -> Result<()> {
        match ready {
            true => self.promote_due(now),
            // No moves wait (the common case): not even the call.
            false if self.moves.len() == 0 => Ok(()),
            false => self.settle_moves(false),
        }
    }

    /// Moves every scheduled job due now into its lane: a batch at a time,
    /// each lane's share with one write, and the schedule's records ended
    /// together once their jobs are placed (and durable: at once, or at
    /// the next settling of the moves).
    pub(super) fn promote_due(&self, now: SystemTime) -> Result<()> {
        self.promote_due_at(unix_ms(now))
    }

    /// As [`promote_due`](Self::promote_due) at `now_ms` (Unix
    /// milliseconds), already read by a lease: one conversion a call.
    pub(super) fn promote_due_at(&self, now_ms: u64) -> Result<()> {
        let Some(schedule) = &self.schedule else {
            return Ok(());
        };
        // No moves wait (the common case): not even the call.
        if self.moves.len() != 0 {
            self.settle_moves(false)?;
        }
        // The common case, nothing due: no lock taken.
        if schedule.none_due(now_ms) {
            return Ok(());
        }
        schedule.catch_up()?;
        let retry_ms = u64::try_from(self.lease_time.as_millis()).unwrap_or(u64::MAX);
        let batch = match self.defer_moves {
            Some(_) => DEFERRED_BATCH,
            None => DUE_BATCH,
        };
        let mut moved = false;
        let result = loop {
            // A close waits for this step, or this step sees it: a step is
            // done (records ended or waiting in `moves`) or not begun.
            let step = self.moves.step();
            if let Err(e) = self.check_open() {
                break Err(e);
            }
            let taken = schedule.take_due(now_ms, retry_ms, batch, |record| {
                self.moves.contains(record)
            });
            let taken = match taken {
                Ok(taken) if taken.is_empty() => break Ok(()),
                Ok(taken) => taken,
                Err(e) => break Err(e),
            };
            let records: Vec<u64> = taken.iter().map(|due| due.record).collect();
            let result = self.move_due(schedule, taken);
            schedule.done_moving(&records);
            drop(step);
            match result {
                Ok(any) => moved |= any,
                Err(e) => break Err(e),
            }
            // A long backlog: its moves settle as they go.
            if let Err(e) = self.settle_moves(false) {
                break Err(e);
            }
        };
        if moved {
            self.signal.notify();
        }
        result
    }

    /// Moves one batch of taken records to their lanes; whether any moved.
    fn move_due(&self, schedule: &Schedule, taken: Vec<Due>) -> Result<bool> {
        let mut falling = Vec::with_capacity(taken.len());
        let mut taken = taken.into_iter();
        while let Some(due) = taken.next() {
            // The body stays in `bytes`, stored again as it is.
            match Envelope::decode_for_move(&due.bytes) {
                Ok(envelope) => falling.push(FallingDue { envelope, due }),
                Err(e) => {
                    if let Err(e) = schedule.fail(&due, &format!("not a job envelope: {e}")) {
                        // Every record taken is looked at again later.
                        schedule.give_back(&due);
                        falling.iter().for_each(|f| schedule.give_back(&f.due));
                        taken.for_each(|due| schedule.give_back(&due));
                        return Err(e);
                    }
                }
            }
        }
        // By lane, each in due order (the sort is stable).
        falling.sort_by_key(|f| f.envelope.job.priority);
        // Jobs with caller ids are placed and noted under the ids' lock,
        // held until their old records end (see `ids`).
        let with_ids = falling.iter().any(|f| f.envelope.job.caller_id);
        let mut locked = match self.ids_lock_if(with_ids) {
            Ok(locked) => locked,
            Err(e) => {
                falling.iter().for_each(|f| schedule.give_back(&f.due));
                return Err(e);
            }
        };
        let mut failed = None;
        let mut placed: Vec<(u64, Option<u16>)> = Vec::with_capacity(falling.len());
        // The same, to be given back if their copies cannot be made durable.
        let mut placed_due: Vec<Due> = Vec::new();
        if let Some(locked) = &mut locked {
            let mut kept = Vec::with_capacity(falling.len());
            // Two records of one job in this batch (a move of a scheduled
            // job cut by a crash): the first found a leftover is no copy
            // for the second, which stays the job.
            let mut ending = Vec::new();
            for f in falling {
                let at = Location::Scheduled(f.due.record);
                match self.prepare_move(Some(locked), &f.envelope.job, at, &ending) {
                    // Moved by a process that died before ending this
                    // record: only the ending is left to do.
                    Ok(true) => {
                        ending.push(at);
                        placed.push((f.due.record, f.due.attempt));
                        placed_due.push(f.due);
                    }
                    Ok(false) => kept.push(f),
                    Err(e) => {
                        schedule.give_back(&f.due);
                        failed.get_or_insert(e);
                    }
                }
            }
            falling = kept;
        }
        let defer = self.defer_moves.is_some() && !with_ids;
        let mut written_lanes = Vec::new();
        for group in falling.chunk_by_mut(|a, b| a.envelope.job.priority == b.envelope.job.priority)
        {
            let priority = group[0].envelope.job.priority;
            if failed.is_some() {
                // Left where they are, looked at again later.
                group.iter().for_each(|f| schedule.give_back(&f.due));
                continue;
            }
            let bytes: Vec<Vec<u8>> = group
                .iter_mut()
                .map(|f| std::mem::take(&mut f.due.bytes))
                .collect();
            let written = self
                .lanes
                .get_or_make(priority)
                .and_then(|lane| lane.enqueue_encoded_batch(&bytes));
            match written {
                Ok(first) => {
                    written_lanes.push(priority);
                    for (offset, f) in group.iter_mut().enumerate() {
                        let location = Location::Lane(priority, first + offset as u64);
                        self.note(locked.as_mut(), &f.envelope.job, location);
                        placed.push((f.due.record, f.due.attempt));
                        if !defer {
                            placed_due.push(Due {
                                bytes: Vec::new(),
                                ..f.due
                            });
                        }
                    }
                }
                Err(e) => {
                    group.iter().for_each(|f| schedule.give_back(&f.due));
                    failed = Some(e);
                }
            }
        }
        // The placed jobs leave the schedule, even if a lane failed, once
        // they are durable in their lanes: at once, or (no caller ids)
        // once the lanes are synced, see `settle_moves`.
        if !defer {
            for &priority in &written_lanes {
                if let Err(e) = self.durable_before_moving_on(Location::Lane(priority, 0)) {
                    // Each stays where it was, looked at again later (its
                    // copy may run too).
                    placed_due.iter().for_each(|due| schedule.give_back(due));
                    return Err(e);
                }
            }
        }
        // The old records end before the ids' lock goes: a decision about
        // an id in between would see two live records.
        let ended = if defer {
            let records: Vec<u64> = placed.iter().map(|&(record, _)| record).collect();
            self.moves.add(&records, &written_lanes);
            Ok(())
        } else {
            schedule.end(&placed).1
        };
        drop(locked);
        if let Some(e) = failed {
            if !placed.is_empty() {
                self.signal.notify();
            }
            return Err(e);
        }
        ended.map(|()| !placed.is_empty())
    }

    /// Leases waiting record `location` by id (a priority change), unless
    /// a move took it (`Busy`, as if leased: its job is on its way to
    /// its lane).
    pub(super) fn lease_waiting(
        &self,
        queue: &RawQueue,
        location: Location,
    ) -> Result<ById<Leased<Vec<u8>>>> {
        match (location, &self.schedule) {
            (Location::Scheduled(record), Some(schedule)) => Ok(schedule
                .unless_moving(record, |r| self.moves.contains(r), |q| q.lease_id(record))?
                .unwrap_or(ById::Busy)),
            _ => queue.lease_id(location.record()),
        }
    }

    /// Ends waiting record `location` (a cancel), unless a move took it
    /// (`Leased`, as if leased: its job is on its way to its lane).
    pub(super) fn cancel_waiting(&self, queue: &RawQueue, location: Location) -> Result<()> {
        let record = location.record();
        match (location, &self.schedule) {
            (Location::Scheduled(_), Some(schedule)) => schedule
                .unless_moving(record, |r| self.moves.contains(r), |q| q.cancel(record))?
                .ok_or(Error::Leased { id: record }),
            _ => queue.cancel(record),
        }
    }

    /// Ends the schedule records of moved jobs once their lanes are
    /// synced: all of them with `force`, else when they are due to (see
    /// `moves`).
    pub(super) fn settle_moves(&self, force: bool) -> Result<()> {
        let (Some(every), Some(schedule)) = (self.defer_moves, &self.schedule) else {
            return Ok(());
        };
        let Some(mut waiting) = self.moves.to_settle(force, every) else {
            return Ok(());
        };
        for &priority in &waiting.state.lanes {
            if let Some(lane) = self.lanes.get(priority)? {
                lane.sync()?;
            }
        }
        let records = waiting.take();
        let ended: Vec<(u64, Option<u16>)> = records.iter().map(|&record| (record, None)).collect();
        let (done, result) = schedule.end(&ended);
        match result.is_err() {
            true => waiting.put_back(&records[done..]),
            false => waiting.ended(),
        }
        result
    }
}
