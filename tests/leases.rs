//! At-least-once delivery: leases, ack/nack, visibility timeout, attempts on
//! disk, dead letters, browse and cancel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dque::{DQue, Durability, Error, Options};

fn queue(dir: &tempfile::TempDir, options: &Options) -> DQue<u32> {
    DQue::open_or_create_with(dir.path().join("q"), options).unwrap()
}

fn turbo() -> Options {
    Options::new()
        .durability(Durability::Turbo)
        .segment_items(3)
}

/// Polls `done` until it holds, for at most 30 s: waits for a lease to
/// expire without claiming anything about how fast.
fn eventually(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "condition never held");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// Guarantee: a leased item is invisible to other consumers, stays counted,
// and ack removes it for good.
#[test]
fn a_lease_hides_the_item_and_ack_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, &turbo());
    q.enqueue_batch([1, 2, 3, 4, 5]).unwrap();
    let first = q.lease().unwrap().unwrap();
    let second = q.lease().unwrap().unwrap();
    assert_eq!((*first, *second), (1, 2));
    assert_eq!((first.attempt(), first.id()), (1, 0));
    assert_eq!(q.len(), 5);
    assert_eq!(q.leased_len(), 2);
    assert_eq!(q.peek().unwrap(), Some(3), "peek skips leased items");
    assert_eq!(q.dequeue().unwrap(), Some(3), "dequeue skips leased items");
    second.ack().unwrap();
    first.ack().unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(q.leased_len(), 0);
    drop(q);
    let q = queue(&dir, &turbo());
    assert_eq!(q.dequeue_batch(10).unwrap(), vec![4, 5]);
}

// Guarantee: nack (and dropping the guard) hands the item back in front of
// newer items, with its attempt counted.
#[test]
fn nack_and_drop_hand_the_item_back_first() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, &turbo());
    q.enqueue_batch([1, 2, 3]).unwrap();
    let one = q.lease().unwrap().unwrap();
    let two = q.lease().unwrap().unwrap();
    two.nack().unwrap();
    drop(one);
    let again = q.lease().unwrap().unwrap();
    assert_eq!((*again, again.attempt()), (1, 2));
    let next = q.lease().unwrap().unwrap();
    assert_eq!((*next, next.attempt()), (2, 2));
    assert_eq!(*q.lease().unwrap().unwrap(), 3);
}

// Guarantee: a lease not acked within the visibility timeout makes the item
// available again; acking the expired lease fails and does not remove the
// item that another consumer now holds; touch() keeps a lease alive.
#[test]
fn an_expired_lease_is_redelivered_and_cannot_be_acked() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, &turbo().visibility_timeout(Duration::from_millis(30)));
    q.enqueue(&7).unwrap();
    let stale = q.lease().unwrap().unwrap();
    let mut fresh = None;
    eventually(|| {
        fresh = q.lease().unwrap();
        fresh.is_some()
    });
    let fresh = fresh.unwrap();
    assert_eq!((*fresh, fresh.attempt()), (7, 2));
    let lost = stale.ack().unwrap_err();
    let matched = matches!(lost, Error::LeaseLost { id: 0, attempt: 1 });
    assert!(matched, "got {lost}");
    assert_eq!(q.len(), 1, "the expired ack removed the item");
    fresh.ack().unwrap();
    assert!(q.is_empty());

    // A touched lease outlives its first timeout.
    q.enqueue(&8).unwrap();
    let held = q.lease().unwrap().unwrap();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(10));
        held.touch().unwrap();
        assert!(q.lease().unwrap().is_none(), "a touched lease expired");
    }
    held.ack().unwrap();
}

// Guarantee: lease_block wakes up for an item whose lease expires, not
// only for new enqueues.
#[test]
fn lease_block_wakes_when_a_lease_expires() {
    let dir = tempfile::tempdir().unwrap();
    let q = Arc::new(queue(
        &dir,
        &turbo().visibility_timeout(Duration::from_millis(20)),
    ));
    q.enqueue(&1).unwrap();
    let held = q.lease().unwrap().unwrap();
    let waiter = {
        let q = Arc::clone(&q);
        std::thread::spawn(move || {
            let leased = q.lease_block().unwrap();
            (*leased, leased.attempt())
        })
    };
    assert_eq!(waiter.join().unwrap(), (1, 2));
    drop(held);
}

// Guarantee: attempts are counted on disk: a handle that dies holding a
// lease (here: closed without ack) gives the item back on reopen, with the
// attempt remembered; an acked item never comes back.
#[test]
fn attempts_survive_reopen_and_acked_items_never_return() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, &Options::new().segment_items(2));
    q.enqueue_batch([1, 2, 3]).unwrap();
    let one = q.lease().unwrap().unwrap();
    let two = q.lease().unwrap().unwrap();
    two.ack().unwrap();
    std::mem::forget(one); // a consumer that never answers
    q.close().unwrap();
    drop(q);

    let q = queue(&dir, &Options::new());
    assert_eq!(q.len(), 2);
    let again = q.lease().unwrap().unwrap();
    assert_eq!((*again, again.attempt()), (1, 2));
    again.ack().unwrap();
    assert_eq!(*q.lease().unwrap().unwrap(), 3);
}

// Guarantee: a poison item fails max_attempts times and lands in the dead
// letters with its reason, while the rest of the queue keeps flowing;
// fail() dead-letters at once; dead letters can be listed, requeued and
// purged, and survive reopen.
#[test]
fn poison_items_go_to_the_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let options = turbo().max_attempts(3);
    let q = queue(&dir, &options);
    q.enqueue_batch([666, 1, 2, 999]).unwrap();
    let mut done = Vec::new();
    while let Some(job) = q.lease().unwrap() {
        match *job {
            666 => job.nack().unwrap(),
            999 => job.fail("cannot parse").unwrap(),
            n => {
                done.push(n);
                job.ack().unwrap();
            }
        }
    }
    assert_eq!(done, vec![1, 2]);
    assert!(q.is_empty());
    let dead = q.dead_letters().unwrap();
    let summary: Vec<_> = dead
        .iter()
        .map(|d| {
            (
                d.item::<u32, dque::Bincode>().unwrap(),
                d.attempts,
                d.reason.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        // A handed-back item comes first, so 666 uses up its attempts before 999 is reached.
        vec![
            (666, 3, "not acked after 3 attempts".to_string()),
            (999, 1, "cannot parse".to_string()),
        ]
    );
    drop(q);

    let q = queue(&dir, &options);
    assert_eq!(
        q.dead_letters().unwrap(),
        dead,
        "dead letters survive reopen"
    );
    q.requeue_dead(dead[1].id).unwrap();
    assert_eq!(
        q.lease().unwrap().map(|j| (*j, j.attempt())),
        Some((999, 1))
    );
    assert_eq!(q.purge_dead().unwrap(), 1);
    assert!(q.dead_letters().unwrap().is_empty());
    assert!(matches!(
        q.requeue_dead(dead[0].id),
        Err(Error::NotPending { .. })
    ));
}

// Guarantee: an item leased max_attempts times by handles that died (no
// nack ever came) is dead-lettered instead of delivered again.
#[test]
fn an_item_that_crashed_its_consumers_is_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new().max_attempts(2);
    for _ in 0..2 {
        let q = queue(&dir, &options);
        q.enqueue(&5).unwrap();
        std::mem::forget(q.lease().unwrap().unwrap());
        // The handle dies without a word (close stands in for the crash).
        q.close().unwrap();
    }
    let q = queue(&dir, &options);
    // Item 0 was leased by both dead handles: it is dead-lettered, and
    // item 1 (enqueued by the second, never leased) comes next.
    let job = q.lease().unwrap().unwrap();
    assert_eq!((job.id(), job.attempt()), (1, 1));
    job.ack().unwrap();
    assert!(q.lease().unwrap().is_none());
    let dead = q.dead_letters().unwrap();
    assert_eq!(
        (dead.len(), dead[0].original_id, dead[0].attempts),
        (1, 0, 2)
    );
}

// Guarantee: pending() browses without consuming (ids, attempts, leased
// flags, across segments), and cancel removes one pending item but never a
// leased or missing one.
#[test]
fn browse_and_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, &turbo());
    q.enqueue_batch((0..10).collect::<Vec<_>>()).unwrap();
    let held = q.lease().unwrap().unwrap();
    let pending = q.pending(100).unwrap();
    assert_eq!(pending.len(), 10);
    assert_eq!(
        pending
            .iter()
            .map(|p| (p.id, p.item, p.leased))
            .collect::<Vec<_>>()[..2],
        [(0, 0, true), (1, 1, false)]
    );
    assert_eq!(q.pending(4).unwrap().len(), 4);
    assert!(matches!(q.cancel(0), Err(Error::Leased { id: 0 })));
    q.cancel(7).unwrap();
    assert!(matches!(q.cancel(7), Err(Error::NotPending { id: 7 })));
    assert!(matches!(q.cancel(99), Err(Error::NotPending { id: 99 })));
    held.ack().unwrap();
    assert_eq!(q.len(), 8);
    let rest = q.dequeue_batch(100).unwrap();
    assert_eq!(rest, vec![1, 2, 3, 4, 5, 6, 8, 9]);
    drop(q);
    let q = queue(&dir, &turbo());
    assert!(q.is_empty(), "cancelled item came back after reopen");
}

// Guarantee: many consumer threads leasing and acking concurrently ack
// each item exactly once.
#[test]
fn concurrent_consumers_ack_each_item_once() {
    const ITEMS: u32 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let q = Arc::new(queue(&dir, &turbo().segment_items(50)));
    for chunk in (0..ITEMS).collect::<Vec<_>>().chunks(100) {
        q.enqueue_batch(chunk).unwrap();
    }
    let consumers: Vec<_> = (0..6)
        .map(|c| {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                while let Some(job) = q.lease().unwrap() {
                    // Every third consumer hands one in five back first.
                    if c % 3 == 0 && job.attempt() == 1 && *job % 5 == 0 {
                        job.nack().unwrap();
                        continue;
                    }
                    acked.push(*job);
                    job.ack().unwrap();
                }
                acked
            })
        })
        .collect();
    let mut all: Vec<u32> = consumers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..ITEMS).collect::<Vec<_>>());
    assert!(q.is_empty());
    assert_eq!(q.segment_numbers().unwrap().count(), 1);
}

// Bug: pending() opened the segments after the front run for writing, and
// so cut (changed on disk) a junk tail in them while only looking.
#[test]
fn browsing_changes_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    {
        let q = queue(&dir, &turbo().segment_items(2));
        q.enqueue_batch((0..7).collect::<Vec<_>>()).unwrap();
    }
    let middle = path.join(format!("{:020}.seg", 2));
    let mut bytes = std::fs::read(&middle).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes[end + 8] = 0x5A; // junk after the last frame
    std::fs::write(&middle, &bytes).unwrap();

    let q = queue(&dir, &turbo());
    assert_eq!(q.pending(100).unwrap().len(), 7);
    assert_eq!(
        std::fs::read(&middle).unwrap(),
        bytes,
        "browsing changed a segment"
    );
}

// Bug class pinned: `len()` looks at each lease only once the earliest
// known end has come (a floor kept beside the leases, so a lease of jobs
// does not read the clock or walk every lease). A floor left too high
// (a lease started or touched later that ends sooner) would keep counting
// an item whose last attempt ran out. Several leases ending at different
// times, exclusive and shared.
#[test]
fn len_leaves_out_each_last_attempt_as_its_lease_runs_out() {
    for shared in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let options = turbo()
            .shared(shared)
            .max_attempts(1)
            .visibility_timeout(Duration::from_millis(1500));
        let q = queue(&dir, &options);
        for i in 0..3 {
            q.enqueue(&i).unwrap();
        }
        let first = q.lease().unwrap().expect("0");
        assert_eq!(q.len(), 3, "shared {shared}: a lease still running counts");
        std::thread::sleep(Duration::from_millis(500));
        let second = q.lease().unwrap().expect("1");
        // Touched: its end moves later than the floor seen so far.
        second.touch().unwrap();
        assert_eq!(q.len(), 3, "shared {shared}");
        eventually(|| q.len() == 2);
        assert_eq!(
            q.len(),
            2,
            "shared {shared}: the first ran out, the second runs"
        );
        eventually(|| q.len() == 1);
        let third = q.lease().unwrap().expect("2");
        assert_eq!(*third.item(), 2);
        third.ack().unwrap();
        assert_eq!(q.len(), 0, "shared {shared}");
        drop((first, second));
    }
}
