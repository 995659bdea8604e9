//! A limited lease's search (FORMAT.md, "Limits and pause"): the first
//! ready job whose limits have room, found by reading the lanes' pending
//! records, then leased alone. The jobs looked past are never leased, so
//! a process killed while looking leaves nothing leased to the dead (a
//! lease given back after a death counts an attempt: looking past a job
//! by leasing it for a moment charged jobs that never ran).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use super::envelope::Envelope;
use super::limits::MAX_SKIPPED;
use super::unix_ms;
use super::{EmbeddedJobs, Location, Settled};
use crate::error::Result;
use crate::jobs::job::{Job, JobLease, LeaseToken};
use crate::queue::dque::RawQueue;
use crate::queue::engine::ById;
use crate::queue::lease::Leased;

/// What a read of a lane found: the record to lease, and whether records
/// no one holds were looked past before it in this lane.
struct Pick {
    record: u64,
    first: bool,
}

impl EmbeddedJobs {
    /// Leases the first ready job that `accept` takes (called with the
    /// job, its lane, record and lane attempt; it may be called on a job
    /// more than once, the last call with the lease's attempt). Jobs it
    /// does not take are only read; after [`MAX_SKIPPED`] of them, none.
    pub(super) fn lease_with_room(
        &self,
        mut accept: impl FnMut(&Job, i32, u64, u16) -> bool,
    ) -> Result<Option<JobLease>> {
        let now = self.now();
        let now_ms = unix_ms(now);
        if self.due_schedules.due(now_ms) {
            self.fire_due_quietly(now);
        }
        self.promote_due_at(now_ms)?;
        let mut looked = 0;
        for (priority, lane) in self.lanes.list()?.iter() {
            let priority = *priority;
            if lane.is_empty() {
                continue;
            }
            let mut from = 0;
            // After a lease of the lane's next record brought another one,
            // records are leased by id only (no loop on that lane).
            let mut by_id = false;
            loop {
                let Some(pick) = self.pick(lane, priority, from, &mut looked, &mut accept)? else {
                    if looked >= MAX_SKIPPED {
                        return Ok(None);
                    }
                    break;
                };
                // The lane's next record: an ordinary lease, which also
                // gives back dead processes' leases and dead-letters
                // records whose attempts ran out.
                let leased = match pick.first && !by_id {
                    true => lane.lease()?,
                    false => match lane.lease_id(pick.record)? {
                        ById::Leased(leased, _) => Some(leased),
                        ById::Busy | ById::Gone => None,
                    },
                };
                from = pick.record + 1;
                let Some(leased) = leased else {
                    continue;
                };
                if leased.id() != pick.record {
                    by_id = true;
                    from = pick.record;
                }
                if let Some(found) = self.take(lane, priority, leased, now_ms, &mut accept)? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// Reads lane `lane` from record `from` on for the first record no one
    /// holds that `accept` takes, or that a lease must end (not a job, or
    /// its attempts used up); counts those looked past in `looked`.
    fn pick(
        &self,
        lane: &RawQueue,
        priority: i32,
        from: u64,
        looked: &mut usize,
        accept: &mut impl FnMut(&Job, i32, u64, u16) -> bool,
    ) -> Result<Option<Pick>> {
        let mut pick = None;
        let mut first = true;
        lane.visit_pending_from(from, |record, attempts, leased, payload| {
            if leased {
                return ControlFlow::Continue(());
            }
            let attempt = attempts.saturating_add(1);
            let wanted = match self.job_of(payload.to_vec(), record, attempt) {
                Err(_) => true,
                Ok(envelope) => {
                    let job = envelope.job;
                    job.attempt > self.max_attempts || accept(&job, priority, record, attempt)
                }
            };
            if wanted {
                pick = Some(Pick { record, first });
                return ControlFlow::Break(());
            }
            first = false;
            *looked += 1;
            match *looked >= MAX_SKIPPED {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            }
        })?;
        Ok(pick)
    }

    /// Ends or hands out a record leased from `lane`: a record that is not
    /// a job is failed, a job whose attempts ran out is dead-lettered, a
    /// job `accept` takes is returned, and any other goes back uncounted.
    /// The one place a lane's leased record becomes a job's lease.
    #[inline]
    pub(super) fn take(
        &self,
        lane: &Arc<RawQueue>,
        priority: i32,
        leased: Leased<Vec<u8>>,
        now_ms: u64,
        accept: &mut impl FnMut(&Job, i32, u64, u16) -> bool,
    ) -> Result<Option<JobLease>> {
        let (bytes, record, lane_attempt) = leased.into_parts();
        // Read before the decode takes the bytes (a plain queue's records
        // are no envelopes, and it keeps no statistics).
        let ready_ms = match self.is_plain() {
            true => None,
            false => Envelope::ready_ms_of(&bytes),
        };
        let lessor = lane.lessor();
        let envelope = match self.job_of(bytes, record, lane_attempt) {
            Ok(envelope) => envelope,
            Err(e) => {
                let reason = format!("not a job envelope: {e}");
                lessor.fail(record, lane_attempt, &reason)?;
                self.record_stats(now_ms, |day| day.record_failure(&reason));
                return Ok(None);
            }
        };
        let hold = envelope.hold;
        let job = envelope.job;
        if job.attempt > self.max_attempts {
            let reason = format!(
                "attempts used up: {} attempts, the last ones never ended",
                job.attempt - 1
            );
            self.settle_holding(&job, hold, Settled::Dead, || {
                lessor.fail(record, lane_attempt, &reason)
            })?;
            self.record_stats(now_ms, |day| day.record_failure(&reason));
            self.forget(&job, Location::Lane(priority, record));
            return Ok(None);
        }
        if !accept(&job, priority, record, lane_attempt) {
            // Leased a moment only: what was read changed meanwhile.
            lessor.release(record, lane_attempt)?;
            return Ok(None);
        }
        if let (1, Some(ready_ms)) = (job.attempt, ready_ms) {
            let waited = Duration::from_millis(now_ms.saturating_sub(ready_ms));
            self.record_stats(now_ms, |day| day.wait.record(waited));
        }
        Ok(Some(JobLease {
            job,
            token: LeaseToken {
                part: i64::from(priority),
                record,
                attempt: u32::from(lane_attempt),
                queue: self.handle,
                leased_ms: now_ms,
                hold,
            },
        }))
    }
}
