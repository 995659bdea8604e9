//! The consumer calls that ported suites (Go's dque, queue-file, yaque) had
//! to work around (issue 11): a lazy iterator, batches from any iterator, a
//! blocking batch receive, batch leases acked with one fsync, owned leases,
//! handing an item back without an attempt, clear, a size limit with
//! back-pressure, small segments that take little disk, and the `Options`
//! shortcuts for any codec. Fsync counts come from the fault seam, which
//! sees every sync the queue makes.

mod disk;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use disk::snapshot;
use dque::faults::{FaultOp, FaultPlan};
use dque::{DQue, Durability, Error, Options, RawQueue};

fn safe() -> Options {
    Options::new().durability(Durability::Safe)
}

#[test]
fn iter_walks_every_pending_item_lazily_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    // Four items a segment: the walk crosses the head, middle segments
    // (never mapped) and the tail.
    let q: DQue<u32> = Options::new().segment_items(4).create(&path).unwrap();
    q.enqueue_batch(0..30).unwrap();
    assert_eq!(q.dequeue().unwrap(), Some(0));
    let held = q.lease().unwrap().expect("an item");
    q.cancel(17).unwrap();
    let before = snapshot(&path);
    let walked: Vec<(u64, u32, bool)> = q
        .iter()
        .map(|p| p.map(|p| (p.id, p.item, p.leased)).unwrap())
        .collect();
    let expected: Vec<(u64, u32, bool)> = (1..30)
        .filter(|&n| n != 17)
        .map(|n| (u64::from(n), n, n == 1))
        .collect();
    assert_eq!(walked, expected);
    assert_eq!(snapshot(&path), before, "the walk wrote");
    // `for` works on a reference, and the walk is lazy: it can stop early.
    let mut first_three = Vec::new();
    for pending in &q {
        first_three.push(pending.unwrap().item);
        if first_three.len() == 3 {
            break;
        }
    }
    assert_eq!(first_three, [1, 2, 3]);
    held.ack().unwrap();
}

#[test]
// Pins: a walk reports a record that does not decode and goes on to the
// ones after it (issue 23: it ended there, hiding what followed).
fn a_walk_reports_a_record_that_does_not_decode_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let bytes: DQue<Vec<u8>> = DQue::create(&path).unwrap();
    bytes
        .enqueue_batch([b"ok".to_vec(), vec![0xff], b"later".to_vec()])
        .unwrap();
    drop(bytes);
    let strings: DQue<String> = dque::Options::new()
        .check_item_type(false)
        .open(&path)
        .unwrap();
    let mut walk = strings.iter();
    assert_eq!(walk.next().unwrap().unwrap().item, "ok");
    let decode = matches!(walk.next(), Some(Err(Error::Decode { id: 1, .. })));
    assert!(decode);
    assert_eq!(walk.next().unwrap().unwrap().item, "later");
    assert!(walk.next().is_none());
    assert_eq!(strings.len(), 3);
}

#[test]
fn batches_take_any_iterator() {
    let dir = tempfile::tempdir().unwrap();
    let q: DQue<String> = DQue::create(dir.path().join("q")).unwrap();
    let owned = vec!["a".to_string(), "b".to_string()];
    q.enqueue_batch(&owned).unwrap();
    q.enqueue_batch(owned.iter().rev()).unwrap();
    q.enqueue_batch(["c".to_string()]).unwrap();
    q.enqueue_batch((0..2).map(|n| n.to_string())).unwrap();
    q.enqueue_batch(Vec::<String>::new()).unwrap();
    assert_eq!(
        q.dequeue_batch(10).unwrap(),
        ["a", "b", "b", "a", "c", "0", "1"]
    );
}

#[test]
fn dequeue_batch_timeout_waits_for_the_first_item_then_takes_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let q = Arc::new(DQue::<u32>::create(dir.path().join("q")).unwrap());
    assert!(q
        .dequeue_batch_timeout(5, Duration::ZERO)
        .unwrap()
        .is_empty());
    assert!(q
        .dequeue_batch_timeout(5, Duration::from_millis(20))
        .unwrap()
        .is_empty());
    let waiter = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.dequeue_batch_timeout(5, Duration::MAX))
    };
    thread::sleep(Duration::from_millis(50));
    q.enqueue_batch([1, 2, 3, 4, 5, 6, 7]).unwrap();
    let got = waiter.join().unwrap().unwrap();
    assert!(!got.is_empty() && got.len() <= 5, "{got:?}");
    let rest = q.dequeue_batch(10).unwrap();
    assert_eq!([got, rest].concat(), [1, 2, 3, 4, 5, 6, 7]);
    assert!(q
        .dequeue_batch_timeout(0, Duration::MAX)
        .unwrap()
        .is_empty());
    // Closed while waiting.
    let waiter = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.dequeue_batch_timeout(5, Duration::MAX))
    };
    thread::sleep(Duration::from_millis(50));
    q.close().unwrap();
    let closed = matches!(waiter.join().unwrap(), Err(Error::Closed));
    assert!(closed);
}

// Cost pinned: 50 leases and their 50 acks are one fsync each way in Safe
// mode (before: one per call, 100 fsyncs).
#[test]
fn batch_leases_and_their_acks_cost_one_fsync_each() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = safe().create(&path).unwrap();
    q.enqueue_batch(0..50).unwrap();
    let plan = FaultPlan::install(&path);
    let mut leased = q.lease_batch(50).unwrap();
    assert_eq!(plan.count(FaultOp::Sync), 1, "lease_batch(50)");
    assert_eq!(
        leased.iter().map(|l| **l).collect::<Vec<_>>(),
        (0..50).collect::<Vec<_>>()
    );
    assert!(leased.iter().all(|l| l.attempt() == 1));
    assert_eq!(q.leased_len(), 50);
    q.ack_batch(&mut leased).unwrap();
    assert!(leased.is_empty());
    assert_eq!(plan.count(FaultOp::Sync), 2, "ack_batch of 50");
    assert!(q.is_empty());
    // And a plain dequeue_batch(50), for comparison: one.
    q.enqueue_batch(0..50).unwrap();
    let before = plan.count(FaultOp::Sync);
    q.dequeue_batch(50).unwrap();
    assert_eq!(plan.count(FaultOp::Sync) - before, 1);
}

#[test]
fn ack_batch_with_a_lost_lease_acks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let q: DQue<u32> = Options::new()
        .visibility_timeout(Duration::from_millis(30))
        .create(dir.path().join("q"))
        .unwrap();
    q.enqueue_batch([1, 2]).unwrap();
    let first = q.lease_batch(1).unwrap();
    thread::sleep(Duration::from_millis(60));
    let second = q.lease_batch(2).unwrap();
    // The first lease ran out, and item 1 is now with the second batch.
    assert_eq!(second.iter().map(|l| **l).collect::<Vec<_>>(), [1, 2]);
    let mut both: Vec<_> = first.into_iter().chain(second).collect();
    let lost = q.ack_batch(&mut both);
    let lease_lost = matches!(lost, Err(Error::LeaseLost { id: 0, attempt: 1 }));
    assert!(lease_lost, "{lost:?}");
    assert_eq!(q.len(), 2, "nothing was acked");
    assert_eq!(both.len(), 3, "every guard is given back");
    // Drop the lost one and retry: the rest are acked.
    drop(both.remove(0));
    q.ack_batch(&mut both).unwrap();
    assert!(q.is_empty());
    // From another queue: refused, nothing acked.
    let other: DQue<u32> = DQue::create(dir.path().join("other")).unwrap();
    other.enqueue(&9).unwrap();
    let mut foreign = other.lease_batch(1).unwrap();
    let refused = q.ack_batch(&mut foreign);
    let invalid = matches!(refused, Err(Error::InvalidOption { .. }));
    assert!(invalid, "{refused:?}");
    other.ack_batch(&mut foreign).unwrap();
    assert!(other.is_empty());
}

// A write that fails midway (a full disk) leaves the leases it did not ack
// in the vector, still held: a retry acks them, none is redelivered.
#[test]
fn ack_batch_failing_midway_gives_back_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = Options::new()
        .durability(Durability::Turbo)
        .create(&path)
        .unwrap();
    q.enqueue_batch(0..3).unwrap();
    let mut jobs = q.lease_batch(3).unwrap();
    let plan = FaultPlan::install(&path);
    plan.fail_nth(FaultOp::Write, 2, std::io::ErrorKind::StorageFull);
    let failed = q.ack_batch(&mut jobs);
    assert!(failed.is_err());
    assert_eq!(jobs.iter().map(|j| **j).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(q.len(), 2);
    drop(plan);
    q.ack_batch(&mut jobs).unwrap();
    assert!(q.is_empty());
    assert_eq!(q.lease().unwrap().map(|j| j.id()), None);
}

// An error a batch deferred belongs to the next dequeue, lease or enqueue,
// never to a lease guard's call (which would spend the guard for nothing).
#[test]
fn a_deferred_error_does_not_spend_a_lease_guard() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = Options::new()
        .durability(Durability::Turbo)
        .create(&path)
        .unwrap();
    q.enqueue_batch(0..5).unwrap();
    let job = q.lease().unwrap().expect("an item");
    let plan = FaultPlan::install(&path);
    plan.fail_nth(FaultOp::Write, 2, std::io::ErrorKind::StorageFull);
    assert_eq!(q.dequeue_batch(3).unwrap(), [1]);
    drop(plan);
    job.ack().unwrap();
    let deferred = matches!(q.dequeue(), Err(Error::Io { .. }));
    assert!(deferred, "the next dequeue gets the batch's error");
    assert_eq!(q.dequeue_batch(10).unwrap(), [2, 3, 4]);
}

#[test]
fn a_lease_is_owned_moves_to_another_thread_and_outlives_a_borrow() {
    fn needs_static<T: Send + 'static>(_: &T) {}
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<String> = DQue::create(&path).unwrap();
    q.enqueue_batch(["one".to_string(), "two".to_string()])
        .unwrap();
    let job = q.lease().unwrap().expect("an item");
    needs_static(&job);
    let acked = thread::spawn(move || job.ack()).join().unwrap();
    acked.unwrap();
    // A guard that outlives its queue's handle: its calls fail with
    // Closed, and the item is there at the next open.
    let job = q.lease().unwrap().expect("an item");
    q.close().unwrap();
    drop(q);
    let closed = matches!(job.ack(), Err(Error::Closed));
    assert!(closed);
    let q: DQue<String> = DQue::open(&path).unwrap();
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("two"));
}

// release gives the item back without an attempt: on disk too, so an item
// handed back by shutting-down workers never reaches max_attempts.
#[test]
fn release_does_not_count_an_attempt_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let options = Options::new().max_attempts(2);
    let q: DQue<u32> = options.create(&path).unwrap();
    q.enqueue(&7).unwrap();
    q.lease().unwrap().expect("the item").release().unwrap();
    drop(q);
    let q: DQue<u32> = options.open(&path).unwrap();
    assert_eq!(q.pending(1).unwrap()[0].attempts, 0, "a release counts");
    for _ in 0..5 {
        q.lease().unwrap().expect("the item").release().unwrap();
    }
    let job = q.lease().unwrap().expect("never dead-lettered");
    assert_eq!(job.attempt(), 1);
    job.nack().unwrap();
    let last = q.lease().unwrap().expect("the item");
    assert_eq!(last.attempt(), 2);
    last.ack().unwrap();
    assert!(q.dead_letters().unwrap().is_empty());
}

#[test]
fn clear_removes_what_no_one_holds_with_one_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = safe().segment_items(10).create(&path).unwrap();
    q.enqueue_batch(0..95).unwrap();
    let held = q.lease().unwrap().expect("an item");
    let plan = FaultPlan::install(&path);
    assert_eq!(q.clear().unwrap(), 94);
    let syncs = plan.count(FaultOp::Sync);
    drop(plan);
    assert_eq!(q.len(), 1);
    assert_eq!(q.dequeue().unwrap(), None);
    // The held item pins the head segment; once acked, the next call that
    // takes items retires every emptied segment.
    held.ack().unwrap();
    assert!(q.is_empty());
    assert_eq!(q.dequeue().unwrap(), None);
    // One group commit: an fdatasync of each segment file it wrote into.
    assert_eq!(syncs, 10, "{syncs} syncs");
    let segments = std::fs::read_dir(&path)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count();
    assert!(segments <= 2, "{segments} segments left");
    drop(q);
    let q: DQue<u32> = DQue::open(&path).unwrap();
    assert!(q.is_empty());
}

#[test]
fn max_items_refuses_with_full_and_enqueue_timeout_waits_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q = Arc::new(
        Options::new()
            .max_items(3)
            .create::<u32, dque::Bincode>(&path)
            .unwrap(),
    );
    q.enqueue_batch([1, 2]).unwrap();
    let too_many = q.enqueue_batch([3, 4]);
    let full = matches!(
        too_many,
        Err(Error::Full {
            len: 2,
            adding: 2,
            max: 3
        })
    );
    assert!(full, "{too_many:?}");
    let never = q.enqueue_batch([5, 6, 7, 8]).unwrap_err();
    assert!(never.to_string().contains("can never fit"), "{never}");
    q.enqueue(&3).unwrap();
    let timed_out = q.enqueue_timeout(&4, Duration::from_millis(20));
    let full = matches!(timed_out, Err(Error::Full { .. }));
    assert!(full, "{timed_out:?}");
    assert_eq!(q.len(), 3);
    // A blocked producer gets in once a consumer makes room.
    let producer = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.enqueue_timeout(&4, Duration::MAX))
    };
    thread::sleep(Duration::from_millis(50));
    assert_eq!(q.dequeue().unwrap(), Some(1));
    producer.join().unwrap().unwrap();
    assert_eq!(q.dequeue_batch(10).unwrap(), [2, 3, 4]);
    // Closed while blocked.
    q.enqueue_batch([1, 2, 3]).unwrap();
    let producer = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.enqueue_timeout(&4, Duration::MAX))
    };
    thread::sleep(Duration::from_millis(50));
    q.close().unwrap();
    let closed = matches!(producer.join().unwrap(), Err(Error::Closed));
    assert!(closed);
    let invalid = Options::new()
        .max_items(0)
        .create::<u32, dque::Bincode>(dir.path().join("z"));
    assert!(matches!(
        invalid,
        Err(Error::InvalidOption {
            name: "max_items",
            ..
        })
    ));
}

// Pinned: with 3 items a segment, 2,000 small items took 670 MiB of disk
// (a megabyte preallocated per segment).
#[test]
fn small_segments_take_little_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u64> = Options::new()
        .durability(Durability::Turbo)
        .segment_items(3)
        .create(&path)
        .unwrap();
    q.enqueue_batch(0..2_000).unwrap();
    let bytes: u64 = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(bytes < 8 << 20, "{} MiB for 2,000 items", bytes >> 20);
    assert_eq!(q.dequeue_batch(5_000).unwrap().len(), 2_000);
}

// The Options shortcuts were for the default codec only.
#[test]
fn options_shortcuts_take_any_codec() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw");
    let raw: RawQueue = Options::new().segment_items(5).create(&path).unwrap();
    raw.enqueue_bytes(b"bytes as they are").unwrap();
    drop(raw);
    let raw: RawQueue = Options::new().open(&path).unwrap();
    assert_eq!(
        raw.peek().unwrap().as_deref(),
        Some(&b"bytes as they are"[..])
    );
    drop(raw);
    let raw: RawQueue = Options::new().open_or_create(&path).unwrap();
    assert_eq!(raw.len(), 1);
    drop(raw);
    let typed: Result<DQue<u32>, Error> = Options::new().open(&path);
    let mismatch = matches!(typed, Err(Error::CodecMismatch { .. }));
    assert!(mismatch, "a raw queue opened with bincode");
}
