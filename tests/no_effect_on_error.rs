//! The rules behind every guarantee, pinned where a review of this crate
//! found them broken: a call that returns an error had no effect (and one
//! that returns `Ok` after a failed fsync does not claim durability), and
//! reads never write.

mod disk;

use std::fs;
use std::io::ErrorKind;
use std::time::Duration;

use disk::snapshot;
use dque::faults::{FaultOp, FaultPlan};
use dque::{DQue, Durability, Error, Options};

// Bug pinned: after a failed fsync (a rollover's, here), sync() and close()
// returned Ok: a retried fsync reports success once the failed one consumed
// the error, so nothing after a failure may be called durable.
#[test]
fn sync_and_close_after_a_failed_fsync_report_it() {
    for durability in [Durability::Turbo, Durability::Safe] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let q: DQue<u32> = Options::new()
            .durability(durability)
            .segment_items(2)
            .create(&path)
            .unwrap();
        q.enqueue_batch([1, 2]).unwrap();
        let plan = FaultPlan::install(&path);
        plan.fail_nth(FaultOp::Sync, 1, ErrorKind::Other);
        assert!(q.enqueue(&3).is_err(), "{durability:?}");
        // In Turbo, items 1 and 2 were never synced: sync() cannot promise
        // them. (In Safe they were, before the failure: Ok is the truth.)
        let synced = q.sync();
        let refused = matches!(synced, Err(Error::WritesRefused { .. }));
        assert!(
            refused || durability == Durability::Safe,
            "{durability:?}: sync() after a failed fsync: {synced:?}"
        );
        let closed = q.close();
        let refused = matches!(closed, Err(Error::WritesRefused { .. }));
        assert!(
            refused,
            "{durability:?}: close() after a failed fsync: {closed:?}"
        );
    }
}

// Bug pinned: nack on the last attempt wrote a dead letter after the queue
// had refused writes, then returned the refusal.
#[test]
fn a_nack_after_a_failed_fsync_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = Options::new().max_attempts(1).create(&path).unwrap();
    q.enqueue_batch([1, 2]).unwrap();
    let job = q.lease().unwrap().expect("an item");
    let plan = FaultPlan::install(&path);
    plan.fail_nth(FaultOp::Sync, 1, ErrorKind::Other);
    assert!(q.enqueue(&3).is_err());
    let writes = plan.count(FaultOp::Write);
    let nacked = job.nack();
    let refused = matches!(nacked, Err(Error::WritesRefused { .. }));
    assert!(refused, "{nacked:?}");
    assert_eq!(plan.count(FaultOp::Write), writes, "the refused nack wrote");
    assert!(q.dead_letters().unwrap().is_empty());
}

// Bug pinned: requeue_dead failed after it had put the item back (the
// letter's removal failed), so each retry added another copy. Now the
// call returns Ok once the item is back; the letter is left (both places,
// never neither) and the failure is the next write's error.
#[test]
fn requeue_that_fails_to_remove_the_letter_still_returns_ok() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = DQue::create(&path).unwrap();
    q.enqueue(&7).unwrap();
    q.lease().unwrap().expect("an item").fail("bad").unwrap();
    let letter = q.dead_letters().unwrap()[0].id;
    let plan = FaultPlan::install(&path);
    // Write 1: the item back into the queue; write 2: the letter's ack.
    plan.fail_nth(FaultOp::Write, 2, ErrorKind::StorageFull);
    q.requeue_dead(letter).unwrap();
    drop(plan);
    assert_eq!(q.len(), 1);
    let next = q.enqueue(&8);
    let deferred = matches!(next, Err(Error::Io { .. }));
    assert!(
        deferred,
        "the letter's failure is the next write's: {next:?}"
    );
    assert_eq!(q.dequeue().unwrap(), Some(7));
}

// Bug pinned: with max_items, a lease that ran out on its last attempt still
// filled the queue for enqueue (Full) while len() had let it go.
#[test]
fn a_lease_that_ran_out_on_its_last_attempt_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let q: DQue<u32> = Options::new()
        .max_items(1)
        .max_attempts(1)
        .visibility_timeout(Duration::from_millis(20))
        .create(dir.path().join("q"))
        .unwrap();
    q.enqueue(&1).unwrap();
    std::mem::forget(q.lease().unwrap().expect("an item"));
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(q.len(), 0);
    q.enqueue(&2).unwrap();
    assert_eq!(q.dead_letters().unwrap().len(), 1);
}

// Bug pinned: a peek that reached a segment past the mapped ones mapped it,
// and cut (and copied) its torn tail: a read that wrote.
#[test]
fn a_peek_past_the_mapped_segments_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = Options::new().segment_items(2).create(&path).unwrap();
    q.enqueue_batch(0..6).unwrap();
    q.close().unwrap();
    // Garbage after segment 2's records: a torn run of markers.
    let segment = path.join(format!("{:020}.seg", 2));
    let mut bytes = fs::read(&segment).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes[end.next_multiple_of(4)..end.next_multiple_of(4) + 3].copy_from_slice(&[1, 2, 3]);
    fs::write(&segment, &bytes).unwrap();
    let q: DQue<u32> = Options::new().open(&path).unwrap();
    let a = q.lease().unwrap().expect("item 0");
    let b = q.lease().unwrap().expect("item 1");
    let before = snapshot(&path);
    assert_eq!(q.peek().unwrap(), Some(2));
    assert_eq!(q.iter().count(), 6);
    assert_eq!(snapshot(&path), before, "a read wrote");
    drop((a, b));
}

// Bug pinned: listing the dead letters opened (and mended) `dead/` the
// first time. Now the queue's open opens it, and reports what it mended.
#[test]
fn listing_dead_letters_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = DQue::create(&path).unwrap();
    q.enqueue(&7).unwrap();
    q.lease().unwrap().expect("an item").fail("bad").unwrap();
    q.close().unwrap();
    let dead = path.join("dead").join(format!("{:020}.seg", 1));
    let mut bytes = fs::read(&dead).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes[end.next_multiple_of(4)] = 0x99;
    fs::write(&dead, &bytes).unwrap();
    let q: DQue<u32> = DQue::open(&path).unwrap();
    assert_eq!(q.open_report().repairs.len(), 1, "the open mended dead/");
    let before = snapshot(&path);
    assert_eq!(q.dead_letters().unwrap().len(), 1);
    assert_eq!(snapshot(&path), before, "a read wrote");
}

// Bug pinned: a batch that spilled over into a new segment and failed there
// returned an error with its first items left in the queue, and the handle
// went on writing: a retry added those items twice. Now a failing write
// either leaves the queue as it was or, when earlier items of the call are
// in already, refuses every later write.
#[test]
fn a_batch_failing_after_a_rollover_never_leaves_a_silent_half() {
    for durability in [Durability::Safe, Durability::Turbo] {
        for nth in 1..=8 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            let q: DQue<u32> = Options::new()
                .durability(durability)
                .segment_items(3)
                .create(&path)
                .unwrap();
            q.enqueue(&0).unwrap();
            let plan = FaultPlan::install(&path);
            plan.fail_nth(FaultOp::Write, nth, ErrorKind::StorageFull);
            let result = q.enqueue_batch([1, 2, 3, 4, 5, 6]);
            drop(plan);
            let case = format!("{durability:?}, write #{nth} fails");
            match (result, q.len()) {
                (Ok(()), 7) => assert_eq!(q.dequeue_batch(10).unwrap(), [0, 1, 2, 3, 4, 5, 6]),
                (Err(_), 1) => assert_eq!(q.dequeue_batch(10).unwrap(), [0], "{case}"),
                (Err(_), len) => {
                    let refused = q.enqueue(&7);
                    let refused = matches!(refused, Err(Error::WritesRefused { .. }));
                    assert!(
                        refused,
                        "{case}: {len} items after a failed batch, and writes go on"
                    );
                }
                (Ok(()), len) => panic!("{case}: the batch succeeded with {len} items queued"),
            }
        }
    }
}
