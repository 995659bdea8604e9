//! PostgreSQL against the embedded backend: random sequences of enqueue
//! (priorities, delays, caller ids), clock moves, lease, ack, nack now or
//! later, release, fail, priority changes and cancels, applied to both with
//! one hand-moved clock, compared after every step: the job each lease
//! gets (body, attempt, priority), what each call answers, the counts and
//! the waiting list. The embedded backend is the model (it is checked
//! against its own in `tests/jobs_model.rs`).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use dque::jobs::{
    Backoff, JobLease, JobOptions, JobQueue, ManualClock, NewJob, PgOptions, Retry, WaitState,
};
use dque::Options;
use proptest::prelude::*;

mod pg;
mod skip;
use pg::PgServer;

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
    SetPriority(u8, i32),
    Cancel(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (-1..3i32, prop_oneof![3 => Just(0u64), 2 => 1..6u64], proptest::option::weighted(0.5, 0..4u8))
            .prop_map(|(priority, delay, id)| Op::Enqueue { priority, delay, id }),
        2 => (1..4u64).prop_map(Op::Advance),
        4 => Just(Op::Lease),
        2 => any::<usize>().prop_map(Op::Ack),
        2 => (any::<usize>(), prop_oneof![Just(0u64), 1..4u64]).prop_map(|(k, d)| Op::Nack(k, d)),
        1 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => (0..4u8, -1..3i32).prop_map(|(id, p)| Op::SetPriority(id, p)),
        1 => (0..4u8).prop_map(Op::Cancel),
    ]
}

/// What a call answered, comparable across backends (made-up ids differ).
fn outcome<T: std::fmt::Debug>(result: &dque::Result<T>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(dque::Error::NoSuchJob { .. }) => "no such job".into(),
        Err(dque::Error::JobLeased { .. }) => "leased".into(),
        Err(e) => format!("error {e}"),
    }
}

fn view(queue: &dyn JobQueue) -> (dque::jobs::Counts, Vec<(String, WaitState, u32, i32)>) {
    let waiting = queue
        .waiting(usize::MAX)
        .unwrap()
        .into_iter()
        .map(|w| {
            (
                String::from_utf8(w.job.body).unwrap(),
                w.state,
                w.job.attempt,
                w.job.priority,
            )
        })
        .collect();
    (queue.counts().unwrap(), waiting)
}

fn run(ops: Vec<Op>, case: usize) -> Result<(), TestCaseError> {
    let server = PgServer::get().expect("checked by the test");
    let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let backoff = Backoff::new(Duration::from_secs(1), 1.0, Duration::from_secs(1)).jitter(0.0);
    let dir = tempfile::tempdir().unwrap();
    let embedded = JobOptions::new()
        .queue(Options::new().max_attempts(3).segment_items(3))
        .backoff(backoff)
        .clock(Arc::new(clock.clone()))
        .create(dir.path().join("q"))
        .unwrap();
    let postgres = PgOptions::new()
        .max_attempts(3)
        .backoff(backoff)
        .clock(Arc::new(clock.clone()))
        .connect(
            &server.url(),
            &format!("model-{}-{case}", std::process::id()),
        )
        .unwrap();
    let queues: [&dyn JobQueue; 2] = [&embedded, &postgres];
    let mut leases: [Vec<JobLease>; 2] = [Vec::new(), Vec::new()];
    let mut bodies = 0;
    for (step, op) in ops.into_iter().enumerate() {
        let context = format!("step {step}: {op:?}");
        let mut answers = Vec::new();
        match op {
            Op::Advance(seconds) => clock.advance(Duration::from_secs(seconds)),
            Op::Enqueue {
                priority,
                delay,
                id,
            } => {
                bodies += 1;
                for queue in queues {
                    let mut job = NewJob::new(format!("job{bodies}")).priority(priority);
                    if delay > 0 {
                        job = job.delay(Duration::from_secs(delay));
                    }
                    if let Some(id) = id {
                        job = job.id(format!("id{id}"));
                    }
                    answers.push(format!("{}", queue.enqueue(job).unwrap().is_added()));
                }
            }
            Op::Lease => {
                for (queue, held) in queues.iter().zip(leases.iter_mut()) {
                    let lease = queue.lease().unwrap();
                    answers.push(format!(
                        "{:?}",
                        lease.as_ref().map(|l| (
                            String::from_utf8(l.body.clone()).unwrap(),
                            l.attempt,
                            l.priority
                        ))
                    ));
                    held.extend(lease);
                }
            }
            Op::Ack(k) | Op::Nack(k, _) | Op::Release(k) | Op::Fail(k) => {
                if leases[0].is_empty() {
                    continue;
                }
                let k = k % leases[0].len();
                for (queue, held) in queues.iter().zip(leases.iter_mut()) {
                    // Leases are taken in the same order on both sides.
                    let lease = held.remove(k);
                    let answer = match op {
                        Op::Ack(_) => outcome(&queue.ack(lease)),
                        Op::Release(_) => outcome(&queue.release(lease)),
                        Op::Fail(_) => outcome(&queue.fail(lease, "failed: model")),
                        Op::Nack(_, delay) => {
                            let retry = Retry::After(Duration::from_secs(delay));
                            format!("{:?}", queue.nack(lease, retry, "again").unwrap())
                        }
                        _ => unreachable!(),
                    };
                    answers.push(answer);
                }
            }
            Op::SetPriority(id, priority) => {
                for queue in queues {
                    answers.push(outcome(&queue.set_priority(&format!("id{id}"), priority)));
                }
            }
            Op::Cancel(id) => {
                for queue in queues {
                    answers.push(outcome(&queue.cancel(&format!("id{id}"))));
                }
            }
        }
        if let [embedded, postgres] = answers.as_slice() {
            prop_assert_eq!(postgres, embedded, "{}", context);
        }
        prop_assert_eq!(view(queues[1]), view(queues[0]), "{}", context);
    }
    Ok(())
}

#[test]
fn postgres_behaves_as_the_embedded_backend() {
    if PgServer::get().is_none() {
        return;
    }
    let case = std::sync::atomic::AtomicUsize::new(0);
    proptest!(ProptestConfig { cases: 48, ..ProptestConfig::default() }, |(ops in proptest::collection::vec(op(), 1..60))| {
        run(ops, case.fetch_add(1, std::sync::atomic::Ordering::Relaxed))?;
    });
}
