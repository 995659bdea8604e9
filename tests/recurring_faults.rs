//! Recurring jobs (issue 27) and faults on the embedded queue: firing a
//! schedule enqueues its tick's job, then writes the schedule's next tick
//! (another file). A failure or a crash between the two fires the tick
//! again later; the tick's caller id `NAME@TICK` dedupes only while the
//! first job waits, so once it ran (acked by another process) the tick
//! made a second job. Every tick must make exactly one job, whichever step
//! fails and whatever ran meanwhile.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dque::faults::{FaultOp, FaultPlan};
use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, KeepCompleted, ManualClock, Schedule};
use dque::{Durability, Options};

const EVERY: Duration = Duration::from_secs(60);

fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_900_000_000)
}

fn open(path: &Path, clock: &ManualClock) -> EmbeddedJobs {
    JobOptions::new()
        .queue(Options::new().durability(Durability::Safe))
        .clock(Arc::new(clock.clone()))
        // Acked jobs not kept: a kept one holds its id only until pruned.
        .keep_completed(KeepCompleted::NONE)
        .open_or_create(path)
        .unwrap()
}

/// Leases and acks every ready job, counting them by id in `ran`.
fn run_all(queue: &EmbeddedJobs, ran: &mut BTreeMap<String, u32>) {
    while let Some(lease) = queue.lease().unwrap() {
        *ran.entry(lease.id.clone()).or_default() += 1;
        queue.ack(lease).unwrap();
    }
}

/// A queue at `path` whose schedule `s` (every minute) was fired once at
/// the start and its job run: the next fire is the one under test.
fn prepared(path: &Path, clock: &ManualClock) -> BTreeMap<String, u32> {
    let queue = open(path, clock);
    queue
        .schedule(Schedule::every("s", EVERY).body("b"))
        .unwrap();
    let mut ran = BTreeMap::new();
    run_all(&queue, &mut ran);
    clock.set(start() + EVERY);
    ran
}

/// After the fire under test: the job (if any) runs, then the next fire
/// (a restart, or another process's lease) and its job; every tick made
/// exactly one job.
fn check_one_job_per_tick(queue: &EmbeddedJobs, mut ran: BTreeMap<String, u32>, case: &str) {
    run_all(queue, &mut ran);
    queue.fire_schedules().unwrap();
    run_all(queue, &mut ran);
    assert_eq!(ran.len(), 2, "{case}: both ticks ran: {ran:?}");
    assert!(
        ran.values().all(|&n| n == 1),
        "{case}: a tick made two jobs: {ran:?}"
    );
}

// Pins the bug: a fire whose schedules-file write fails (after its job was
// enqueued) fired the tick again once that job had run: two jobs for one
// tick. Every write of the fire fails in turn.
#[test]
fn a_fire_that_fails_at_any_write_makes_one_job_per_tick() {
    let mut n = 1;
    loop {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let clock = ManualClock::new(start());
        let mut ran = prepared(&path, &clock);
        let queue = open(&path, &clock);
        let plan = FaultPlan::install(&path);
        plan.fail_nth(FaultOp::Write, n, ErrorKind::Other);
        let failed = queue.fire_schedules().is_err();
        drop(plan);
        if failed && queue.counts().unwrap().ready == 1 {
            // The job was added, its next tick not written. The schedules
            // file stays unwritable (a full disk: the queue's segments
            // have room, a new file has none) while the job runs: its
            // lease's own fire fails too, quietly.
            let plan = FaultPlan::install(&path);
            plan.fail_nth(FaultOp::Write, 1, ErrorKind::StorageFull);
            run_all(&queue, &mut ran);
            drop(plan);
            assert_eq!(
                queue.schedules().unwrap()[0].next_run,
                start() + EVERY,
                "write {n}: the lease's fire failed"
            );
        }
        check_one_job_per_tick(&queue, ran, &format!("write {n} failed"));
        if !failed {
            break;
        }
        n += 1;
    }
    assert!(n > 2, "the fire wrote more than once");
}

// The same for a crash (power loss) before any sync of the fire, or after.
#[test]
fn a_crash_during_a_fire_makes_one_job_per_tick() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let clock = ManualClock::new(start());
    let ran = prepared(&path, &clock);
    let queue = open(&path, &clock);
    let plan = FaultPlan::install(&path);
    plan.capture_before_syncs(3);
    queue.fire_schedules().unwrap();
    let mut images = plan.take_captured();
    images.extend((0..4).map(|seed| plan.crash_image(seed)));
    drop(plan);
    drop(queue);
    assert!(images.len() > 4, "the fire synced");
    for (at, image) in images.iter().enumerate() {
        let restored = tempfile::tempdir().unwrap();
        image.write_to(restored.path()).unwrap();
        let again = open(restored.path(), &clock);
        check_one_job_per_tick(
            &again,
            ran.clone(),
            &format!("image {at} of {}", images.len()),
        );
    }
}
