//! A job waiting on a full limit is waiting, whatever leases run beside:
//! a lease that looks past it (on the embedded queue, by leasing it for a
//! moment and giving it back) must not make it look leased to `cancel`,
//! `set_priority`, `counts` or `waiting`.
//!
//! Bug pinned (review of issue 27): on the embedded queue a lease on a
//! queue with limits leased each job it looked past and released it, with
//! no lock that `cancel` and `set_priority` take: either, at that moment,
//! failed with `JobLeased` for a job no lease returned (and `counts` and
//! `waiting` counted it leased).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dque::jobs::{EmbeddedJobs, JobQueue, NewJob, WaitState};
use dque::Error;

/// Rounds of the race (`DQUE_LIMIT_SKIP_ROUNDS`, 50 by default).
fn rounds() -> usize {
    std::env::var("DQUE_LIMIT_SKIP_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50)
}

#[test]
fn a_job_waiting_on_a_full_limit_never_looks_leased() {
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(EmbeddedJobs::create(dir.path().join("q")).unwrap());
    queue.set_limit("one", 1).unwrap();
    queue.enqueue(NewJob::new("holder").limit("one")).unwrap();
    let holder = queue.lease().unwrap().expect("the holder");
    let stop = Arc::new(AtomicBool::new(false));
    let leaser = {
        let (queue, stop) = (Arc::clone(&queue), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let found = queue.lease().unwrap();
                assert!(found.is_none(), "the limit is full: {found:?}");
            }
        })
    };
    let mut refused = Vec::new();
    for round in 0..rounds() {
        let id = format!("w{round}");
        queue
            .enqueue(NewJob::new("waiter").id(&id).limit("one"))
            .unwrap();
        for priority in 1..=5 {
            if let Err(e) = queue.set_priority(&id, priority) {
                refused.push(format!("set_priority {id}: {e}"));
            }
            let leased = queue.counts().unwrap().leased;
            if leased != 1 {
                refused.push(format!("counts: {leased} leased"));
            }
            let listed = queue.waiting(10).unwrap();
            let state = listed.iter().find(|w| w.job.id == id).map(|w| w.state);
            if state != Some(WaitState::Ready) {
                refused.push(format!("waiting {id}: {state:?}"));
            }
        }
        match queue.cancel(&id) {
            Ok(()) => {}
            Err(e @ Error::JobLeased { .. }) => {
                refused.push(format!("cancel {id}: {e}"));
                // Gone for sure before the next round.
                while queue.cancel(&id).is_err() {}
            }
            Err(e) => panic!("cancel {id}: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    leaser.join().unwrap();
    queue.ack(holder).unwrap();
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        &refused[..refused.len().min(5)]
    );
}
