//! Reads never write, and a batch that meets an error keeps what it took.
//!
//! Bugs pinned (issue 11, bug 5): `len()` and `Debug` ended expired leases
//! and could move items to the dead letters (formatting a queue with `{:?}`
//! created `dead/`); `dequeue_batch` dropped any error after its first item.

mod disk;

use std::io::ErrorKind;
use std::thread;
use std::time::Duration;

use disk::snapshot;
use dque::faults::{FaultOp, FaultPlan};
use dque::{DQue, Durability, Error, Options};

// Every read of a queue whose leases ran out (one of them for the last
// allowed time) leaves the files as they were, and already counts as the
// next write will leave things.
#[test]
fn reads_of_expired_leases_change_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let options = Options::new()
        .durability(Durability::Safe)
        .max_attempts(1)
        .visibility_timeout(Duration::from_millis(20));
    let q: DQue<u32> = DQue::create_with(&path, &options).unwrap();
    q.enqueue_batch([1, 2, 3]).unwrap();
    // Leased for the one allowed attempt, then forgotten: once its time is
    // up, the next write moves it to the dead letters.
    std::mem::forget(q.lease().unwrap().expect("an item"));
    thread::sleep(Duration::from_millis(40));
    let before = snapshot(&path);

    assert_eq!(q.len(), 2, "the doomed item is not counted");
    assert!(!q.is_empty());
    assert_eq!(q.leased_len(), 0);
    assert!(format!("{q:?}").contains("len: 2"));
    assert_eq!(q.peek().unwrap(), Some(2));
    assert_eq!(q.peek_raw().unwrap().map(|b| b.len()), Some(1));
    let pending: Vec<u32> = q.pending(10).unwrap().into_iter().map(|p| p.item).collect();
    assert_eq!(pending, [2, 3]);
    assert!(q.dead_letters().unwrap().is_empty());
    assert!(q.verify().unwrap().is_healthy());
    assert_eq!(snapshot(&path), before, "a read changed the files");
    assert!(
        !path.join("dead").exists(),
        "a read created the dead letters"
    );

    // The next write settles it as the reads said.
    assert_eq!(q.dequeue().unwrap(), Some(2));
    assert_eq!(q.dead_letters().unwrap().len(), 1);
    assert_eq!(q.len(), 1);
}

// A handed-back item shows at its place to a peek even before a write
// ends the lease (a lease that ran out with attempts left).
#[test]
fn peek_sees_a_lease_that_ran_out_as_handed_back() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new().visibility_timeout(Duration::from_millis(20));
    let q: DQue<u32> = DQue::create_with(dir.path().join("q"), &options).unwrap();
    q.enqueue_batch([1, 2]).unwrap();
    std::mem::forget(q.lease().unwrap().expect("an item"));
    thread::sleep(Duration::from_millis(40));
    assert_eq!(q.peek().unwrap(), Some(1));
    let pending = q.pending(10).unwrap();
    assert!(!pending[0].leased);
    assert_eq!(q.dequeue().unwrap(), Some(1));
}

// A batch that meets an error after taking items returns them; the error
// comes from the next call, which had no effect, and nothing is lost.
#[test]
fn a_batch_interrupted_by_an_error_returns_what_it_took() {
    for durability in [Durability::Safe, Durability::Turbo] {
        for fail_at in 2..=6 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            let options = Options::new().durability(durability);
            let q: DQue<u32> = DQue::create_with(&path, &options).unwrap();
            q.enqueue_batch((0..10).collect::<Vec<_>>()).unwrap();
            let plan = FaultPlan::install(&path);
            // Each dequeue in the batch writes one ack marker.
            plan.fail_nth(FaultOp::Write, fail_at, ErrorKind::StorageFull);
            let taken = q.dequeue_batch(10).unwrap();
            assert_eq!(taken, (0..fail_at as u32 - 1).collect::<Vec<_>>());
            let next = q.dequeue();
            let surfaced = matches!(next, Err(Error::Io { .. }));
            assert!(
                surfaced,
                "{durability:?}: the batch's error was dropped: {next:?}"
            );
            drop(plan);
            let rest = q.dequeue_batch(10).unwrap();
            assert_eq!(rest, (fail_at as u32 - 1..10).collect::<Vec<_>>());
        }
    }
}
