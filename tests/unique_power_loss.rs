//! Unique jobs (issue 27) and power loss, embedded, Safe mode: an ack of a
//! job whose period covers "done" writes that its id stays held, durably,
//! before the job's record ends. A power loss at any sync of the ack, or
//! right after it, leaves the job waiting (it runs again) or its id held:
//! never the id free while the job is gone (a duplicate within the period).

use std::io::ErrorKind;
use std::time::Duration;

use dque::faults::{FaultOp, FaultPlan};
use dque::jobs::{Enqueued, JobOptions, JobQueue, NewJob, UniqueStates};
use dque::{Durability, Options};

fn options() -> JobOptions {
    JobOptions::new().queue(Options::new().durability(Durability::Safe))
}

fn unique(id: &str, states: UniqueStates) -> NewJob {
    NewJob::new("b")
        .id(id)
        .unique_for(Duration::from_secs(3600))
        .unique_states(states)
}

// Pins the order of an ack's writes: the hold first (synced, its file's
// name too), the record's end after, for done and for dead.
#[test]
fn a_power_loss_during_a_settle_never_frees_a_held_id() {
    for (case, states) in [
        ("done", UniqueStates::default()),
        ("dead", UniqueStates::ALL),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let queue = options().create(&path).unwrap();
        queue.enqueue(unique("held", states)).unwrap();
        let lease = queue.lease().unwrap().expect("the job");
        let plan = FaultPlan::install(&path);
        plan.capture_before_syncs(7);
        match case {
            "done" => queue.ack(lease).unwrap(),
            _ => queue.fail(lease, "broken").unwrap(),
        }
        let mut images = plan.take_captured();
        images.extend((0..8).map(|seed| plan.crash_image(seed)));
        drop(plan);
        assert!(images.len() > 8, "{case}: the settle synced");
        for (at, image) in images.iter().enumerate() {
            let restored = tempfile::tempdir().unwrap();
            image.write_to(restored.path()).unwrap();
            let again = options().open(restored.path()).unwrap();
            let answer = again.enqueue(unique("held", states)).unwrap();
            assert!(
                !answer.is_added(),
                "{case}, image {at} of {}: the id was free again: {answer:?}",
                images.len()
            );
            if let Enqueued::AlreadyQueued(_) = answer {
                // The settle did not last: the job waits, and runs again.
                assert_eq!(again.counts().unwrap().ready, 1, "{case}, image {at}");
            }
        }
    }
}

// Pins "an error had no effect": a hold that cannot be written fails the
// ack, and the job is still leased (it runs again), its id still taken.
#[test]
fn a_hold_that_cannot_be_written_fails_the_ack_and_keeps_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let lease_time = Duration::from_millis(300);
    let queue = JobOptions::new()
        .queue(
            Options::new()
                .durability(Durability::Safe)
                .visibility_timeout(lease_time),
        )
        .create(&path)
        .unwrap();
    queue
        .enqueue(unique("kept", UniqueStates::default()))
        .unwrap();
    let lease = queue.lease().unwrap().expect("the job");
    let plan = FaultPlan::install(&path);
    plan.fail_nth(FaultOp::Write, 1, ErrorKind::Other);
    assert!(queue.ack(lease).is_err());
    drop(plan);
    assert_eq!(queue.counts().unwrap().leased, 1, "not acked");
    assert_eq!(
        queue
            .enqueue(unique("kept", UniqueStates::default()))
            .unwrap(),
        Enqueued::AlreadyQueued("kept".into())
    );
    // Its lease ends; it runs again, and its ack now holds the id.
    let lease = queue
        .lease_timeout(lease_time * 10)
        .unwrap()
        .expect("the job again");
    queue.ack(lease).unwrap();
    assert!(matches!(
        queue
            .enqueue(unique("kept", UniqueStates::default()))
            .unwrap(),
        Enqueued::Duplicate(_)
    ));
}
