//! Model test of the embedded job queue: random sequences of enqueue (with
//! priorities, delays and caller ids), clock moves, lease, ack, nack now or
//! later, release, fail, priority change, cancel and restart, applied to
//! `EmbeddedJobs` and to a model of the contract, compared after every
//! step: the job each lease gets (equal-priority order, due-time order),
//! attempts, counts, and the waiting list.
//!
//! The clock is a `ManualClock`: nothing here sleeps.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use dque::jobs::{
    Backoff, EmbeddedJobs, JobLease, JobOptions, JobQueue, ManualClock, Nacked, NewJob, Retry,
    WaitState,
};
use dque::{Error, Options};
use proptest::prelude::*;

const MAX_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        priority: i32,
        delay: u64,
        id: Option<u8>,
    },
    Advance(u64),
    Lease,
    Ack(usize),
    Nack(usize, u64),
    Release(usize),
    Fail(usize),
    SetPriority(usize, i32),
    Cancel(usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (-1..3i32, prop_oneof![3 => Just(0u64), 2 => 1..6u64], proptest::option::weighted(0.3, 0..4u8))
            .prop_map(|(priority, delay, id)| Op::Enqueue { priority, delay, id }),
        2 => (1..4u64).prop_map(Op::Advance),
        4 => Just(Op::Lease),
        2 => any::<usize>().prop_map(Op::Ack),
        2 => (any::<usize>(), prop_oneof![Just(0u64), 1..4u64]).prop_map(|(k, d)| Op::Nack(k, d)),
        1 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => (any::<usize>(), -1..3i32).prop_map(|(k, p)| Op::SetPriority(k, p)),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone, PartialEq)]
struct Job {
    id: String,
    body: String,
    priority: i32,
    /// Attempts counted so far.
    attempts: u32,
}

/// A job's place among the ready ones: (priority, order it became ready).
type Place = (i32, u64);

#[derive(Debug, Default)]
struct Model {
    now: u64,
    ready: Vec<(Place, Job)>,
    /// (due, order it was scheduled, job)
    scheduled: Vec<(u64, u64, Job)>,
    /// Leased: the job, its place, and the real lease.
    held: Vec<(Place, Job)>,
    dead: usize,
    next_ready: u64,
    next_scheduled: u64,
}

impl Model {
    fn promote(&mut self) {
        self.scheduled.sort_by_key(|(due, order, _)| (*due, *order));
        while self
            .scheduled
            .first()
            .is_some_and(|(due, _, _)| *due <= self.now)
        {
            let (_, _, job) = self.scheduled.remove(0);
            self.make_ready(job);
        }
    }

    fn make_ready(&mut self, job: Job) {
        self.next_ready += 1;
        self.ready.push(((job.priority, self.next_ready), job));
    }

    fn schedule(&mut self, due: u64, job: Job) {
        self.next_scheduled += 1;
        self.scheduled.push((due, self.next_scheduled, job));
    }

    fn has_id(&self, id: &str) -> bool {
        self.ready.iter().chain(&self.held).any(|(_, j)| j.id == id)
            || self.scheduled.iter().any(|(_, _, j)| j.id == id)
    }

    /// The next lease: the job and its attempt, dead-lettering jobs whose
    /// attempts are used up.
    fn lease(&mut self) -> Option<Job> {
        self.promote();
        loop {
            self.ready.sort_by_key(|(place, _)| *place);
            if self.ready.is_empty() {
                return None;
            }
            let (place, mut job) = self.ready.remove(0);
            job.attempts += 1;
            if job.attempts > MAX_ATTEMPTS {
                self.dead += 1;
                continue;
            }
            self.held.push((place, job.clone()));
            return Some(job);
        }
    }

    /// Waiting jobs in the order `waiting()` lists them: by priority, each
    /// priority's ready (and leased) jobs then its jobs due by now and not
    /// moved yet (they will be appended, in due order); then the scheduled
    /// jobs by due time.
    fn waiting(&mut self) -> Vec<(String, WaitState, u32)> {
        let mut ready: Vec<_> = self
            .ready
            .iter()
            .map(|(place, job)| (*place, job, WaitState::Ready))
            .chain(
                self.held
                    .iter()
                    .map(|(place, job)| (*place, job, WaitState::Leased)),
            )
            .collect();
        self.scheduled.sort_by_key(|(due, order, _)| (*due, *order));
        // A due job sorts after every ready job of its priority.
        ready.extend(
            self.scheduled
                .iter()
                .filter(|(due, _, _)| *due <= self.now)
                .enumerate()
                .map(|(n, (_, _, job))| {
                    (
                        (job.priority, u64::MAX / 2 + n as u64),
                        job,
                        WaitState::Ready,
                    )
                }),
        );
        ready.sort_by_key(|(place, _, _)| *place);
        let mut listed: Vec<_> = ready
            .into_iter()
            .map(|(_, job, state)| (job.body.clone(), state, job.attempts))
            .collect();
        listed.extend(
            self.scheduled
                .iter()
                .filter(|(due, _, _)| *due > self.now)
                .map(|(due, _, job)| {
                    (
                        job.body.clone(),
                        WaitState::Scheduled(at(*due)),
                        job.attempts,
                    )
                }),
        );
        listed
    }

    /// Jobs due by now and not moved yet (ready, as far as reads go).
    fn due(&self) -> usize {
        self.scheduled
            .iter()
            .filter(|(due, _, _)| *due <= self.now)
            .count()
    }

    /// Every waiting or leased job, for ops that pick one.
    fn all_ids(&self) -> Vec<(String, bool)> {
        let mut ids: Vec<(String, bool)> = self
            .ready
            .iter()
            .map(|(_, j)| (j.id.clone(), false))
            .chain(self.scheduled.iter().map(|(_, _, j)| (j.id.clone(), false)))
            .chain(self.held.iter().map(|(_, j)| (j.id.clone(), true)))
            .collect();
        ids.sort();
        ids
    }
}

const START: u64 = 1_800_000_000;

fn at(seconds: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(START + seconds)
}

fn open(path: &std::path::Path, clock: &ManualClock, create: bool) -> EmbeddedJobs {
    let options = JobOptions::new()
        .queue(
            Options::new()
                .max_attempts(MAX_ATTEMPTS as u16)
                .segment_items(3),
        )
        .backoff(Backoff::new(Duration::from_secs(1), 1.0, Duration::from_secs(1)).jitter(0.0))
        .clock(Arc::new(clock.clone()));
    if create {
        options.create(path).expect("create")
    } else {
        options.open(path).expect("reopen")
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let clock = ManualClock::new(at(0));
    let mut queue = open(&path, &clock, true);
    let mut model = Model::default();
    let mut leases: Vec<JobLease> = Vec::new();
    let mut bodies = 0u32;
    for (step, op) in ops.into_iter().enumerate() {
        let context = format!("step {step}: {op:?}");
        match op {
            Op::Enqueue {
                priority,
                delay,
                id,
            } => {
                bodies += 1;
                let body = format!("job{bodies}");
                let mut job = NewJob::new(body.clone()).priority(priority);
                if delay > 0 {
                    job = job.delay(Duration::from_secs(delay));
                }
                let caller_id = id.map(|id| format!("id{id}"));
                if let Some(id) = &caller_id {
                    job = job.id(id.clone());
                }
                let enqueued = queue.enqueue(job).expect("enqueue");
                model.promote();
                let duplicate = caller_id.as_deref().is_some_and(|id| model.has_id(id));
                prop_assert_eq!(enqueued.is_added(), !duplicate, "{}", context);
                if !duplicate {
                    let job = Job {
                        id: enqueued.id().to_owned(),
                        body,
                        priority,
                        attempts: 0,
                    };
                    if delay > 0 {
                        model.schedule(model.now + delay, job);
                    } else {
                        model.make_ready(job);
                    }
                }
            }
            Op::Advance(seconds) => {
                clock.advance(Duration::from_secs(seconds));
                model.now += seconds;
            }
            Op::Lease => {
                let got = queue.lease().expect("lease");
                let expected = model.lease();
                let got_view = got.as_ref().map(|l| {
                    (
                        l.id.clone(),
                        String::from_utf8(l.body.clone()).unwrap(),
                        l.attempt,
                        l.priority,
                    )
                });
                let expected_view = expected
                    .as_ref()
                    .map(|j| (j.id.clone(), j.body.clone(), j.attempts, j.priority));
                prop_assert_eq!(got_view, expected_view, "{}", context);
                if let Some(lease) = got {
                    leases.push(lease);
                }
            }
            Op::Ack(k) | Op::Nack(k, _) | Op::Release(k) | Op::Fail(k) => {
                if leases.is_empty() {
                    continue;
                }
                let k = k % leases.len();
                let lease = leases.remove(k);
                let held = model
                    .held
                    .iter()
                    .position(|(_, j)| j.id == lease.id)
                    .expect("modelled lease");
                let (place, mut job) = model.held.remove(held);
                match op {
                    Op::Ack(_) => queue.ack(lease).expect("ack"),
                    Op::Fail(_) => {
                        queue.fail(lease, "failed").expect("fail");
                        model.dead += 1;
                    }
                    Op::Release(_) => {
                        queue.release(lease).expect("release");
                        job.attempts -= 1;
                        model.ready.push((place, job));
                    }
                    Op::Nack(_, delay) => {
                        let nacked = queue
                            .nack(lease, Retry::After(Duration::from_secs(delay)), "nack")
                            .expect("nack");
                        if job.attempts >= MAX_ATTEMPTS {
                            prop_assert_eq!(nacked, Nacked::Dead, "{}", context);
                            model.dead += 1;
                        } else if delay == 0 {
                            prop_assert_eq!(nacked, Nacked::Retrying { at: at(model.now) });
                            model.ready.push((place, job));
                        } else {
                            prop_assert_eq!(
                                nacked,
                                Nacked::Retrying {
                                    at: at(model.now + delay)
                                }
                            );
                            model.schedule(model.now + delay, job);
                        }
                    }
                    _ => unreachable!(),
                }
            }
            Op::SetPriority(k, _) | Op::Cancel(k) => {
                model.promote();
                let ids = model.all_ids();
                if ids.is_empty() {
                    continue;
                }
                let (id, leased) = ids[k % ids.len()].clone();
                let result = match op {
                    Op::SetPriority(_, priority) => queue.set_priority(&id, priority),
                    _ => queue.cancel(&id),
                };
                if leased {
                    let busy = matches!(result, Err(Error::JobLeased { .. }));
                    prop_assert!(busy, "{}: {:?}", context, result);
                    continue;
                }
                prop_assert!(result.is_ok(), "{}: {:?}", context, result);
                let ready_at = model.ready.iter().position(|(_, j)| j.id == id);
                let scheduled_at = model.scheduled.iter().position(|(_, _, j)| j.id == id);
                match (op, ready_at, scheduled_at) {
                    (Op::SetPriority(_, priority), Some(i), _) => {
                        if model.ready[i].1.priority != priority {
                            let (_, mut job) = model.ready.remove(i);
                            job.priority = priority;
                            model.make_ready(job);
                        }
                    }
                    (Op::SetPriority(_, priority), None, Some(i)) => {
                        if model.scheduled[i].2.priority != priority {
                            let (due, _, mut job) = model.scheduled.remove(i);
                            job.priority = priority;
                            model.schedule(due, job);
                        }
                    }
                    (Op::Cancel(_), Some(i), _) => {
                        model.ready.remove(i);
                    }
                    (Op::Cancel(_), None, Some(i)) => {
                        model.scheduled.remove(i);
                    }
                    other => panic!("{context}: {other:?}"),
                }
            }
            Op::Reopen => {
                leases.clear();
                queue.close().expect("close");
                drop(queue);
                queue = open(&path, &clock, false);
                // Leases end with the handle; their attempts stay counted.
                let held = std::mem::take(&mut model.held);
                model.ready.extend(held);
            }
        }
        let counts = queue.counts().expect("counts");
        let expected = (
            (model.ready.len() + model.due()) as u64,
            (model.scheduled.len() - model.due()) as u64,
            model.held.len() as u64,
            model.dead as u64,
        );
        prop_assert_eq!(
            (counts.ready, counts.scheduled, counts.leased, counts.dead),
            expected,
            "{}",
            context
        );
        let listed: Vec<(String, WaitState, u32)> = queue
            .waiting(usize::MAX)
            .expect("waiting")
            .into_iter()
            .map(|w| {
                (
                    String::from_utf8(w.job.body).unwrap(),
                    w.state,
                    w.job.attempt,
                )
            })
            .collect();
        prop_assert_eq!(listed, model.waiting(), "{}", context);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_job_queue_behaves_as_its_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}
