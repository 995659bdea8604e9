//! Reviewer's reproducers for moves out of the schedule (FORMAT.md, "Moves").

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, UNIX_EPOCH};

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, ManualClock, NewJob};
use dque::{Durability, Options};

fn manual_queue(path: &Path, durability: Durability) -> (EmbeddedJobs, ManualClock) {
    let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let queue = JobOptions::new()
        .queue(Options::new().durability(durability))
        .clock(Arc::new(clock.clone()))
        .open_or_create(path)
        .unwrap();
    (queue, clock)
}

// Review (bounded due index, exclusive mode): when the index runs out past
// its horizon, `Schedule::refill` reads every unsettled schedule record
// from disk, skipping those in the pending moves but not those another
// thread has taken (`Index::moving`) and not yet ended. Alone on its queue a
// move takes records without a lease, so the second thread reads and moves
// them again: one job lands twice in its lane.
#[test]
fn review_threads_moving_past_the_index_horizon_move_each_job_once() {
    const JOBS: usize = 70_000;
    const THREADS: usize = 4;
    let rounds: usize = std::env::var("REVIEW_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    for durability in [Durability::Turbo, Durability::Safe] {
        for round in 0..rounds {
            let dir = tempfile::tempdir().unwrap();
            let (queue, clock) = manual_queue(&dir.path().join("q"), durability);
            for chunk in 0..JOBS / 10_000 {
                let jobs = (chunk * 10_000..(chunk + 1) * 10_000)
                    .map(|i| NewJob::new(i.to_string()).delay(Duration::from_secs(10)))
                    .collect();
                queue.enqueue_batch(jobs).unwrap();
            }
            clock.advance(Duration::from_secs(20));
            let barrier = Barrier::new(THREADS);
            std::thread::scope(|scope| {
                for _ in 0..THREADS {
                    scope.spawn(|| {
                        barrier.wait();
                        // An empty batch moves the jobs fallen due.
                        queue.enqueue_batch(Vec::new()).unwrap();
                    });
                }
            });
            queue.sync().unwrap();
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for waiting in queue.waiting(usize::MAX).unwrap() {
                *seen
                    .entry(String::from_utf8(waiting.job.body).unwrap())
                    .or_insert(0) += 1;
            }
            let twice: Vec<&String> = seen
                .iter()
                .filter(|(_, &n)| n > 1)
                .map(|(body, _)| body)
                .collect();
            assert!(
                twice.is_empty(),
                "{durability:?} round {round}: {} jobs twice, e.g. {:?}",
                twice.len(),
                &twice[..twice.len().min(5)]
            );
            assert_eq!(seen.len(), JOBS, "{durability:?} round {round}");
        }
    }
}
