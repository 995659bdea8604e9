//! Native search of the embedded queue: one walk over the lanes and the
//! schedule (`walk`), then the dead letters, testing the filter on each
//! record's id and headers where it lies (the body is not read), and
//! decoding the body of the matches only.
//!
//! It answers what the default search (`search::by_reading`) answers:
//! the same jobs in the same order, and the same `scanned` and
//! `complete`, which are those of its reading in growing steps (64 or
//! four times `max` jobs, then four times more each step, up to the
//! bound): [`Front`] follows those steps over the one walk, so a search
//! stops where the default's last step would have, without its re-reads
//! from the front.

use std::ops::ControlFlow;

use super::envelope::Envelope;
use super::walk::Met;
use super::EmbeddedJobs;
use crate::error::{Error, Result};
use crate::jobs::job::WaitState;
use crate::jobs::search::{Found, FoundJob, JobFilter, JobPlace};

/// The default search's reading of one list (waiting or dead) in
/// growing steps, followed item by item: when it would stop, and what it
/// would say it read.
struct Front {
    max: usize,
    bound: usize,
    /// The end of the current step.
    look: usize,
    read: usize,
    kept: usize,
}

/// Where a [`Front`] stopped: items read, and whether the list ended
/// within them.
type Stop = (usize, bool);

impl Front {
    /// A reading of `max` matches at most within `bound` items; `Err`:
    /// it reads nothing (a bound or a `max` of 0), with what it says.
    fn new(max: usize, bound: usize) -> std::result::Result<Front, Stop> {
        if bound == 0 || max == 0 {
            return Err((0, max == 0 && bound > 0));
        }
        Ok(Front {
            max,
            bound,
            look: max.saturating_mul(4).max(64).min(bound),
            read: 0,
            kept: 0,
        })
    }

    /// Whether a match now would be kept (fewer than `max` so far).
    fn wants(&self) -> bool {
        self.kept < self.max
    }

    /// One more item read (`kept`: it was kept); `Some` when the reading
    /// stops after it (a step ended with `max` kept, or at the bound).
    fn step(&mut self, kept: bool) -> Option<Stop> {
        self.read += 1;
        self.kept += usize::from(kept);
        if self.read < self.look {
            return None;
        }
        if self.kept >= self.max || self.look == self.bound {
            return Some((self.read, false));
        }
        self.look = self.look.saturating_mul(4).min(self.bound);
        None
    }

    /// The list ended: everything read.
    fn end(&self) -> Stop {
        (self.read, true)
    }
}

impl EmbeddedJobs {
    /// `search` in one walk; a plain FIFO queue (bodies only, no heads to
    /// read) searches as the default does.
    pub(super) fn search_now(&self, filter: &JobFilter, max: usize, scan: usize) -> Result<Found> {
        let mut found = Found {
            complete: true,
            ..Found::default()
        };
        let mut budget = scan;
        if filter.reads_waiting() {
            let (jobs, (read, ended)) = self.search_waiting(filter, max, budget)?;
            found.jobs = jobs;
            found.scanned += read as u64;
            found.complete &= ended;
            budget -= read;
        }
        if filter.reads_dead() && found.jobs.len() < max {
            let (jobs, (read, ended)) = self.search_dead(filter, max - found.jobs.len(), budget)?;
            found.jobs.extend(jobs);
            found.scanned += read as u64;
            found.complete &= ended;
        } else if filter.reads_dead() {
            // Stopped at `max` before the dead letters: they were not read.
            found.complete = false;
        }
        Ok(found)
    }

    /// The waiting part of a search.
    fn search_waiting(
        &self,
        filter: &JobFilter,
        max: usize,
        bound: usize,
    ) -> Result<(Vec<FoundJob>, Stop)> {
        let mut front = match Front::new(max, bound) {
            Ok(front) => front,
            Err(stop) => return Ok((Vec::new(), stop)),
        };
        let _no_look_past = self.lock_limited_leases()?;
        let mut jobs = Vec::new();
        let mut stop = None;
        // Tested while the walk is before its `max`-th match only (after
        // it, records are counted, not read).
        let wanting = std::cell::Cell::new(true);
        let keep = |bytes: &[u8], state: WaitState| -> Result<bool> {
            Ok(wanting.get() && head_matches(filter, bytes, &JobPlace::Waiting(state))?)
        };
        let mut visit = |met: Met<'_>| -> Result<ControlFlow<()>> {
            let kept = met.kept && front.wants();
            if kept {
                jobs.push(FoundJob {
                    job: self.job_met(&met)?,
                    place: JobPlace::Waiting(met.state),
                });
            }
            stop = front.step(kept);
            wanting.set(front.wants());
            Ok(match stop {
                Some(_) => ControlFlow::Break(()),
                None => ControlFlow::Continue(()),
            })
        };
        self.walk_waiting(None, None, &keep, max, &mut visit)?;
        let stop = stop.unwrap_or_else(|| front.end());
        Ok((jobs, stop))
    }

    /// The dead part of a search: the letters of each lane, oldest first,
    /// as `dead` lists them; each read at most once.
    fn search_dead(
        &self,
        filter: &JobFilter,
        max: usize,
        bound: usize,
    ) -> Result<(Vec<FoundJob>, Stop)> {
        let mut front = match Front::new(max, bound) {
            Ok(front) => front,
            Err(stop) => return Ok((Vec::new(), stop)),
        };
        let mut jobs = Vec::new();
        for (_, lane) in self.lanes.all()? {
            // The letters this reading can still reach, no more.
            for letter in lane.dead_letters_up_to(bound - front.read)? {
                let place = JobPlace::Dead(letter.reason);
                let kept = front.wants() && head_matches(filter, &letter.payload, &place)?;
                if kept {
                    let envelope =
                        self.job_of(letter.payload, letter.original_id, letter.attempts)?;
                    jobs.push(FoundJob {
                        job: envelope.job,
                        place,
                    });
                }
                if let Some(stop) = front.step(kept) {
                    return Ok((jobs, stop));
                }
            }
        }
        Ok((jobs, front.end()))
    }

    /// The job of a record a walk met, body and all.
    pub(super) fn job_met(&self, met: &Met<'_>) -> Result<crate::jobs::Job> {
        let (record, bytes) = match (met.slot, met.bytes) {
            (super::walk::Slot::Lane(_, record), Some(bytes)) => {
                let envelope = self.job_of(bytes.to_vec(), record, met.lane_attempts)?;
                return Ok(envelope.job);
            }
            (
                super::walk::Slot::Due(_, _, record) | super::walk::Slot::Later(_, record),
                Some(bytes),
            ) => (record, bytes),
            // Not reached: the walk keeps the bytes of the first `room`
            // kept records of each part, and no caller takes more.
            (slot, None) => {
                debug_assert!(false, "a kept record without its bytes: {slot:?}");
                return Err(Error::InvalidJob {
                    reason: format!("internal: record {slot:?} read without its bytes"),
                });
            }
        };
        Envelope::decode(bytes)
            .map(|envelope| envelope.job)
            .map_err(|source| Error::Decode { id: record, source })
    }
}

/// Whether `filter` keeps the job of envelope `bytes` in `place`, read
/// from the head (id, headers), the body untouched; an id that cannot
/// match is seen from the id alone.
fn head_matches(filter: &JobFilter, bytes: &[u8], place: &JobPlace) -> Result<bool> {
    if let (Some(prefix), Some(id)) = (&filter.id_prefix, Envelope::id_of(bytes)) {
        if !id.starts_with(prefix.as_str()) {
            return Ok(false);
        }
    }
    let (envelope, _) =
        Envelope::decode_head(bytes).map_err(|source| Error::Decode { id: 0, source })?;
    Ok(filter.matches(&envelope.job, place))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::jobs::search::{by_reading, SearchState};
    use crate::jobs::{JobOptions, JobQueue, ManualClock, NewJob, Retry};

    /// Rounds of the randomized comparison: `DQUE_SEARCH_ROUNDS` (small by
    /// default: each builds a queue).
    fn rounds() -> u64 {
        std::env::var("DQUE_SEARCH_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(12)
    }

    /// xorshift64*: reproducible from the round's seed, no dependency.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
        fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
            &from[self.below(from.len() as u64) as usize]
        }
    }

    /// A queue of every kind of waiting job and dead letters, in an
    /// order the seed picks: lanes of several priorities, leased jobs,
    /// jobs delayed and backed off, some fallen due and not yet moved to
    /// their lanes (no write since the clock moved), caller and made-up
    /// ids.
    fn random_queue(rng: &mut Rng, dir: &std::path::Path) -> (EmbeddedJobs, ManualClock) {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        let q = JobOptions::new()
            .clock(Arc::new(clock.clone()))
            .create(dir.join("q"))
            .unwrap();
        let jobs = 5 + rng.below(70);
        for i in 0..jobs {
            let mut job = NewJob::new(format!("body {i}"))
                .priority(*rng.pick(&[-2, 0, 0, 1, 3]))
                .header("klass", *rng.pick(&["send_email", "render", "report"]));
            if rng.below(3) == 0 {
                job = job.header("tenant", *rng.pick(&["a", "b"]));
            }
            if rng.below(2) == 0 {
                job = job.id(format!("{}-{i}", rng.pick(&["order", "mail", "ord"])));
            }
            if rng.below(4) == 0 {
                job = job.delay(Duration::from_secs(rng.below(100)));
            }
            q.enqueue(job).unwrap();
            match rng.below(10) {
                0 | 1 => {
                    if let Some(lease) = q.lease().unwrap() {
                        let reason = *rng.pick(&["exit 3: smtp timeout", "exit 1: bad address"]);
                        q.fail(lease, reason).unwrap();
                    }
                }
                2 => {
                    if let Some(lease) = q.lease().unwrap() {
                        q.nack(lease, Retry::After(Duration::from_secs(rng.below(50))), "x")
                            .unwrap();
                    }
                }
                3 => drop(q.lease().unwrap()),
                _ => {}
            }
        }
        // Some scheduled jobs fall due; no write moves them yet.
        clock.advance(Duration::from_secs(rng.below(60)));
        (q, clock)
    }

    fn random_filter(rng: &mut Rng) -> JobFilter {
        let mut filter = JobFilter::new().state(*rng.pick(&[
            SearchState::Any,
            SearchState::Waiting,
            SearchState::Ready,
            SearchState::Leased,
            SearchState::Scheduled,
            SearchState::Dead,
        ]));
        if rng.below(2) == 0 {
            filter = filter.header("klass", *rng.pick(&["send_email", "render", "none"]));
        }
        if rng.below(4) == 0 {
            filter = filter.header("tenant", *rng.pick(&["a", "b"]));
        }
        if rng.below(3) == 0 {
            filter = filter.id_prefix(*rng.pick(&["ord", "order-1", "mail", "", "0"]));
        }
        if rng.below(5) == 0 {
            filter = filter.reason(*rng.pick(&["timeout", "exit", "nothing"]));
        }
        filter
    }

    // The native search must answer exactly what the default (reading
    // `waiting` and `dead` from the front in growing steps) answers: the
    // same jobs in the same order, the same `scanned` and `complete`.
    #[test]
    fn native_search_answers_what_reading_from_the_front_answers() {
        for round in 0..rounds() {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (round + 1).wrapping_mul(0x1000_0001));
            let dir = tempfile::tempdir().unwrap();
            let (q, _clock) = random_queue(&mut rng, dir.path());
            for _ in 0..40 {
                let filter = random_filter(&mut rng);
                let max = *rng.pick(&[0, 1, 2, 3, 5, 16, 17, 100]);
                let scan = *rng.pick(&[0, 1, 5, 20, 63, 64, 65, 100, 10_000]);
                let native = q.search(&filter, max, scan).unwrap();
                let read = by_reading(&filter, max, scan, |n| q.waiting(n), |n| q.dead(n));
                assert_eq!(
                    native,
                    read.unwrap(),
                    "round {round}: {filter:?}, max {max}, scan {scan}"
                );
            }
        }
    }

    // Past the default's first steps: a search matching none of many
    // jobs reads to the bound, and one matching few stops at its step.
    #[test]
    fn a_long_search_stops_where_the_steps_would() {
        let dir = tempfile::tempdir().unwrap();
        let q = EmbeddedJobs::create(dir.path().join("q")).unwrap();
        // More jobs than a walk reads under one hold of the lane's lock.
        let jobs = (0..9000).map(|i| {
            let kind = if i % 2100 == 5 { "rare" } else { "common" };
            NewJob::new(vec![0u8; 100]).header("klass", kind)
        });
        q.enqueue_batch(jobs.collect()).unwrap();
        for (filter, max, scan) in [
            (JobFilter::new().header("klass", "none"), 50, 2000),
            (JobFilter::new().header("klass", "none"), 50, 5000),
            (JobFilter::new().header("klass", "rare"), 3, 2000),
            (JobFilter::new().header("klass", "rare"), 50, 10_000),
            (JobFilter::new().header("klass", "rare"), 4, 10_000),
            (JobFilter::new().state(SearchState::Dead), 50, 10_000),
        ] {
            let native = q.search(&filter, max, scan).unwrap();
            let read = by_reading(&filter, max, scan, |n| q.waiting(n), |n| q.dead(n)).unwrap();
            assert_eq!(native, read, "{filter:?} {max} {scan}");
        }
        let all = q.waiting(10_000).unwrap();
        let first = q.waiting_page(None, 5000).unwrap();
        let second = q.waiting_page(first.next.as_ref(), 5000).unwrap();
        assert!(second.next.is_none());
        assert_eq!([first.jobs, second.jobs].concat(), all);
    }
}
