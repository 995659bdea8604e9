//! One job's record for [`JobQueue::job_info`](crate::jobs::JobQueue::job_info),
//! found where the queue already says it is, not by listing the queue:
//!
//! - a waiting job (ready, leased or scheduled): its id's location (the
//!   caller ids' index under `jobs/ids`, a plain queue's record number,
//!   or, for an id the backend made up, which encodes no place, a look
//!   through the records up to it), then that one record, read where the
//!   queue keeps it (a mapped segment in place; a segment between the
//!   mapped ones, skipped to by its header, read whole: at most one
//!   segment's records, `segment_items`);
//! - else a dead letter (the dead letters read through) or a kept
//!   completed job (the history's own lookup).

use std::ops::ControlFlow;

use super::envelope::Envelope;
use super::ids::Location;
use super::EmbeddedJobs;
use crate::error::{Error, Result};
use crate::jobs::clock::{from_unix_ms, unix_ms};
use crate::jobs::history::{find_listed, JobInfo, ALL};
use crate::jobs::job::{WaitState, Waiting};
use crate::jobs::{JobQueue, JobState};

/// Lookups of a waiting job with no caller id (made up, or a plain
/// queue's record number) that may race a move of it (a priority change,
/// a retry's, a promotion's) before the answer is "not waiting".
const LOOKUPS: usize = 3;

impl EmbeddedJobs {
    /// `job_info`: the waiting job, else the dead letter or kept
    /// completed job of `id`.
    pub(super) fn info_of(&self, id: &str) -> Result<Option<JobInfo>> {
        self.check_open()?;
        let found = match self.waiting_job(id)? {
            Some((waiting, location)) => {
                let leased = waiting.state == WaitState::Leased;
                let mut info = JobInfo::of_waiting(waiting, &self.name);
                if leased {
                    // Who holds it, since when, as `leases` shows it.
                    if let Some((worker, since)) = self.holder_of(location)? {
                        info.worker = Some(worker);
                        info.started_at = Some(since);
                    }
                }
                Some(info)
            }
            None => find_listed(id, &self.name, Vec::new(), || self.dead(ALL))?,
        };
        // A live job is the newest of its id; a dead letter may be older
        // than a kept completed job of the same id (enqueued after it).
        if found.as_ref().is_some_and(|f| f.state != JobState::Dead) {
            return Ok(found);
        }
        let Some(kept) = &self.history else {
            return Ok(found);
        };
        let done = kept.find(id, unix_ms(self.now()))?;
        Ok(match (found, done) {
            (Some(dead), Some(done)) if done.job.enqueued_at <= dead.job.enqueued_at => Some(dead),
            (dead, None) => dead,
            (_, Some(done)) => Some(super::history::info_of(done, &self.name)),
        })
    }

    /// Waiting job `id` as [`waiting`](JobQueue::waiting) would list it,
    /// read at its location.
    fn waiting_job(&self, id: &str) -> Result<Option<(Waiting, Location)>> {
        // As `waiting`: no limited lease looks past jobs meanwhile (taken
        // before the ids' lock, as every call that takes both does).
        let _no_look_past = self.lock_limited_leases()?;
        if let Some(locked) = self.ids_lock_if(true)? {
            // The index holds every unsettled record of a caller id, and a
            // job with one is moved (taken, copied, ended) only under this
            // lock: read while it is held, its records say where the job
            // is and what state, whoever moves it (another thread, another
            // process). A record named may have ended since (settled by
            // another handle): the next one is read.
            for location in locked.records(id) {
                if let Some(waiting) = self.waiting_at(id, location)? {
                    return Ok(Some((waiting, location)));
                }
            }
            if !super::looks_made_up(id) {
                return Ok(None);
            }
        }
        self.waiting_by_lookups(id)
    }

    /// [`waiting_job`](Self::waiting_job) of an id no index holds: found
    /// by [`locate`](Self::locate) (a made-up id's by a look through the
    /// records), looked up again if it moved in between.
    fn waiting_by_lookups(&self, id: &str) -> Result<Option<(Waiting, Location)>> {
        let mut last = None;
        for _ in 0..LOOKUPS {
            let location = match self.locate(id) {
                Ok(location) => location,
                Err(Error::NoSuchJob { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            if last == Some(location) {
                // Where it was: settled there since, not moved.
                return Ok(None);
            }
            if let Some(waiting) = self.waiting_at(id, location)? {
                return Ok(Some((waiting, location)));
            }
            last = Some(location);
        }
        Ok(None)
    }

    /// The waiting record of job `id` at `location`, if it is still there
    /// (one record read, never the queue's).
    fn waiting_at(&self, id: &str, location: Location) -> Result<Option<Waiting>> {
        let Some(queue) = self.part(location)? else {
            return Ok(None);
        };
        let record = location.record();
        let mut found = None;
        queue.visit_pending_from(record, |at, attempts, leased, payload| {
            if at == record {
                found = Some((attempts, leased, payload.to_vec()));
            }
            ControlFlow::Break(())
        })?;
        let Some((attempts, leased, bytes)) = found else {
            return Ok(None);
        };
        let waiting = match location {
            Location::Lane(..) => Waiting {
                job: self.job_of(bytes, record, attempts)?.job,
                state: match leased {
                    true => WaitState::Leased,
                    false => WaitState::Ready,
                },
            },
            // Moved to its lane already, its record waiting for a sync:
            // the lane's copy is the job (found by the next lookup).
            Location::Scheduled(_) if self.moves.contains(record) => return Ok(None),
            Location::Scheduled(_) => {
                let envelope = Envelope::decode(&bytes)
                    .map_err(|source| Error::Decode { id: record, source })?;
                // Due by now: ready (the next call that writes moves it).
                let state = match envelope.due_ms <= unix_ms(self.now()) {
                    true => WaitState::Ready,
                    false => WaitState::Scheduled(from_unix_ms(envelope.due_ms)),
                };
                Waiting {
                    job: envelope.job,
                    state,
                }
            }
        };
        Ok((waiting.job.id == id).then_some(waiting))
    }
}
