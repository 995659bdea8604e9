//! A change of an embedded queue's pause or limits whose write fails at
//! any step has no effect: not on the handle that made it, and not after
//! a reopen.
//!
//! Bug pinned (review of issue 27): `settings` is renamed into place before
//! its directory is synced; when that sync failed, `set_limit` and `pause`
//! returned the error with the new settings in the file: the handle went
//! on without them, and a reopen (or any process opened later) had them.

use std::io::ErrorKind;

use dque::faults::{FaultOp, FaultPlan};
use dque::jobs::{EmbeddedJobs, JobQueue, Limit, NewJob};

/// What a handle sees: paused, and the limits.
fn seen(queue: &EmbeddedJobs) -> (bool, Vec<Limit>) {
    (queue.is_paused().unwrap(), queue.limits().unwrap())
}

#[test]
fn a_failed_change_of_pause_or_limits_changes_nothing() {
    type Change = fn(&EmbeddedJobs) -> dque::Result<()>;
    let changes: [(&str, Change); 4] = [
        ("set_limit", |q| q.set_limit("one", 1)),
        ("set_limit again", |q| q.set_limit("two", 5)),
        ("remove_limit", |q| q.remove_limit("two").map(drop)),
        ("pause", |q| q.pause()),
    ];
    for (op, nth) in [
        (FaultOp::Write, 1),
        (FaultOp::Write, 2),
        (FaultOp::Sync, 1),
        (FaultOp::Sync, 2),
    ] {
        for (what, change) in changes {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            let queue = EmbeddedJobs::create(&path).unwrap();
            queue.set_limit("two", 2).unwrap();
            queue.enqueue(NewJob::new("a").limit("one")).unwrap();
            let before = seen(&queue);
            let plan = FaultPlan::install(&path);
            plan.fail_nth(op, nth, ErrorKind::Other);
            let failed = change(&queue);
            drop(plan);
            assert!(
                failed.is_err(),
                "{what}, {op:?} {nth}: the step did not fail"
            );
            assert_eq!(seen(&queue), before, "{what}, {op:?} {nth}: this handle");
            drop(queue);
            let reopened = EmbeddedJobs::open(&path).unwrap();
            assert_eq!(
                seen(&reopened),
                before,
                "{what}, {op:?} {nth}: after a reopen"
            );
            assert!(
                reopened.lease().unwrap().is_some(),
                "{what}: nothing paused"
            );
        }
    }
}
