//! Shared mode (issue 12): several handles, in one process or several, on
//! one queue directory.

use std::time::Duration;

use dque::{DQue, Durability, Error, Options};

fn shared() -> Options {
    Options::new().shared(true).durability(Durability::Turbo)
}

#[test]
fn two_handles_see_one_fifo_with_an_exact_len() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = shared().segment_items(3).open_or_create(&path).unwrap();
    let b: DQue<u32> = shared().open(&path).unwrap();
    for i in 0..10 {
        a.enqueue(&i).unwrap();
    }
    assert_eq!((a.len(), b.len()), (10, 10));
    assert_eq!(b.peek().unwrap(), Some(0));
    assert_eq!(b.dequeue().unwrap(), Some(0));
    assert_eq!(a.dequeue().unwrap(), Some(1));
    assert_eq!(b.dequeue_batch(4).unwrap(), vec![2, 3, 4, 5]);
    assert_eq!((a.len(), b.len()), (4, 4));
    b.enqueue(&10).unwrap();
    let mut rest = Vec::new();
    while let Some(item) = a.dequeue().unwrap() {
        rest.push(item);
    }
    assert_eq!(rest, vec![6, 7, 8, 9, 10]);
    assert_eq!(b.dequeue().unwrap(), None);
    assert_eq!((a.len(), b.len()), (0, 0));
    // Consumed segments are gone, whoever consumed them.
    assert_eq!(a.segment_numbers().unwrap(), b.segment_numbers().unwrap());
    a.close().unwrap();
    b.close().unwrap();
    let again: DQue<u32> = Options::new().open(&path).unwrap();
    assert!(again.is_empty());
}

#[test]
fn exclusive_and_shared_handles_exclude_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let exclusive: DQue<u32> = DQue::create(&path).unwrap();
    let refused = shared().open::<u32, dque::Bincode>(&path);
    assert!(matches!(refused, Err(Error::Locked { .. })), "{refused:?}");
    exclusive.close().unwrap();
    let one: DQue<u32> = shared().open(&path).unwrap();
    let refused = DQue::<u32>::open(&path);
    assert!(matches!(refused, Err(Error::Locked { .. })), "{refused:?}");
    drop(one);
    DQue::<u32>::open(&path).unwrap();
}

#[test]
fn a_blocked_dequeue_wakes_for_another_handles_enqueue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = shared().open_or_create(&path).unwrap();
    let b: DQue<u32> = shared().open(&path).unwrap();
    let waiter = std::thread::spawn(move || b.dequeue_timeout(Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(50));
    a.enqueue(&42).unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), Some(42));
}

#[test]
fn a_lease_held_by_one_handle_is_invisible_to_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = shared().open_or_create(&path).unwrap();
    let b: DQue<u32> = shared().open(&path).unwrap();
    a.enqueue_batch([0, 1, 2]).unwrap();
    let first = a.lease().unwrap().unwrap();
    assert_eq!(*first, 0);
    let second = b.lease().unwrap().unwrap();
    assert_eq!(*second, 1, "the other handle's lease is skipped");
    assert_eq!(b.peek().unwrap(), Some(2));
    assert_eq!((a.leased_len(), b.leased_len()), (2, 2));
    assert_eq!((a.len(), b.len()), (3, 3));
    // A nack in one handle makes the item the other's next one.
    first.nack().unwrap();
    let again = b.lease().unwrap().unwrap();
    assert_eq!((*again, again.attempt()), (0, 2));
    let err = b.cancel(1).unwrap_err();
    assert!(matches!(err, Error::Leased { id: 1 }), "{err}");
    second.ack().unwrap();
    again.ack().unwrap();
    assert_eq!(a.dequeue().unwrap(), Some(2));
    assert_eq!(b.dequeue().unwrap(), None);
    assert_eq!((a.len(), b.len(), a.leased_len()), (0, 0, 0));
}

#[test]
fn workers_lists_every_handle_with_its_leases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = shared().open_or_create(&path).unwrap();
    let b: DQue<u32> = shared().open(&path).unwrap();
    a.enqueue_batch([0, 1, 2]).unwrap();
    let _held_by_a = a.lease_batch(2).unwrap();
    let _held_by_b = b.lease().unwrap().unwrap();
    let workers = b.workers().unwrap();
    assert_eq!(workers.len(), 2, "{workers:?}");
    let mut leases: Vec<_> = workers
        .iter()
        .map(|w| (w.this_handle, w.leases.clone()))
        .collect();
    leases.sort();
    assert_eq!(leases, vec![(false, vec![0, 1]), (true, vec![2])]);
    assert!(workers.iter().all(|w| w.pid == std::process::id()));
    drop(_held_by_a);
    drop(a);
    let workers = b.workers().unwrap();
    assert_eq!(workers.len(), 1, "a closed handle leaves: {workers:?}");
}

#[test]
fn a_closed_handles_leases_come_back_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let long = Options::new()
        .shared(true)
        .visibility_timeout(Duration::from_secs(3600));
    let a: DQue<u32> = long.open_or_create(&path).unwrap();
    let b: DQue<u32> = long.open(&path).unwrap();
    a.enqueue_batch([0, 1]).unwrap();
    let held = a.lease_batch(2).unwrap();
    assert_eq!(b.lease().unwrap().map(|l| *l), None);
    drop(held);
    a.close().unwrap();
    let back = b.lease_batch(5).unwrap();
    let got: Vec<_> = back.iter().map(|l| (**l, l.attempt())).collect();
    assert_eq!(got, vec![(0, 2), (1, 2)], "attempts still count");
}

#[test]
fn a_handle_reopened_alone_starts_over_and_a_joiner_sees_the_same_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    {
        let a: DQue<String> = shared().segment_items(2).open_or_create(&path).unwrap();
        for i in 0..7 {
            a.enqueue(&format!("item {i}")).unwrap();
        }
        assert_eq!(a.dequeue().unwrap().as_deref(), Some("item 0"));
    }
    let a: DQue<String> = shared().open(&path).unwrap();
    let b: DQue<String> = shared().open(&path).unwrap();
    assert_eq!((a.len(), b.len()), (6, 6));
    assert_eq!(b.dequeue().unwrap().as_deref(), Some("item 1"));
    assert_eq!(a.dequeue().unwrap().as_deref(), Some("item 2"));
    let c: DQue<String> = shared().open(&path).unwrap();
    assert_eq!(c.len(), 4);
    assert_eq!(c.dequeue().unwrap().as_deref(), Some("item 3"));
    assert_eq!(a.len(), 3);
}

/// An item whose encoding panics (a codec bug in the caller's type).
#[derive(Debug)]
struct Explosive;

impl serde::Serialize for Explosive {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("boom")
    }
}

impl<'de> serde::Deserialize<'de> for Explosive {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        panic!("boom")
    }
}

// Review of issue 12: a panic inside a call (here the item's Serialize) held
// the cross-process mutex for ever, blocking every process of the queue and
// the same thread's next call.
#[test]
fn a_panic_inside_a_call_releases_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<Explosive> = shared().open_or_create(&path).unwrap();
    let b: DQue<Explosive> = shared().open(&path).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.enqueue(&Explosive)));
    assert!(panicked.is_err());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(b.len()).unwrap());
    let len = rx.recv_timeout(Duration::from_secs(20));
    assert_eq!(len, Ok(0), "another handle is not blocked");
    assert_eq!(a.len(), 0, "nor this thread");
}

// Review of issue 12: a damaged sealed segment that another handle made the
// head (by consuming the one before it) panicked in the catch-up, holding
// the mutex, instead of failing with Corrupted.
#[test]
fn a_damaged_segment_reached_through_another_handle_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = shared().segment_items(2).open_or_create(&path).unwrap();
    let b: DQue<u32> = shared().open(&path).unwrap();
    a.enqueue_batch([0, 1, 2, 3, 4]).unwrap();
    assert_eq!(b.len(), 5);
    // `a` takes 0, 1 and 2: it retires segment 1 and maps segment 2, which
    // `b` has never read. Then one bit of item 3's payload flips there.
    assert_eq!(a.dequeue_batch(3).unwrap(), vec![0, 1, 2]);
    let second = path.join(format!("{:020}.seg", 2));
    let mut bytes = std::fs::read(&second).unwrap();
    let record_3 = 40 + 12;
    bytes[record_3 + 8] ^= 1;
    std::fs::write(&second, bytes).unwrap();
    for _ in 0..2 {
        let err = b.dequeue().unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }
    assert_eq!(a.len(), 2, "the other handle goes on");
}

#[test]
fn a_producer_blocked_by_max_items_wakes_when_another_handle_takes_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let limited = shared().max_items(2);
    let a: DQue<u32> = limited.open_or_create(&path).unwrap();
    let b: DQue<u32> = limited.open(&path).unwrap();
    a.enqueue_batch([1, 2]).unwrap();
    let err = b.enqueue_timeout(&3, Duration::ZERO).unwrap_err();
    assert!(matches!(err, Error::Full { .. }), "{err}");
    let producer = std::thread::spawn(move || b.enqueue_timeout(&3, Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(a.dequeue().unwrap(), Some(1));
    producer.join().unwrap().unwrap();
    let rest: Vec<u32> = a.iter().map(|p| p.unwrap().item).collect();
    assert_eq!(rest, vec![2, 3]);
    assert_eq!(a.clear().unwrap(), 2);
    assert_eq!(a.len(), 0);
}

// Found by tests/job_ids.rs (many processes moving jobs): a handle that
// had not looked since a segment was made, filled, partly consumed by
// another handle and left behind the tail took the consumed records off
// a count that never held them ("attempt to subtract with overflow" while
// catching up), and the panic left the queue's shared mutex held, so the
// handle's own drop, and every other process, waited for ever.
#[test]
fn a_handle_catching_up_over_a_segment_consumed_meanwhile_counts_right() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = shared().segment_items(4).open_or_create(&path).unwrap();
    let b: DQue<u32> = shared().open(&path).unwrap();
    assert_eq!(b.len(), 0, "b looks once, at an empty queue");
    a.enqueue_batch(0..12).unwrap();
    // 0 stays leased, so its segment stays; 4 and 5 are consumed from the
    // next one, which b never saw.
    let held = a.lease().unwrap().expect("0");
    for expected in 1..6 {
        assert_eq!(a.dequeue().unwrap(), Some(expected));
    }
    assert_eq!(b.len(), 7);
    assert_eq!(b.dequeue().unwrap(), Some(6));
    assert_eq!((a.len(), b.len()), (6, 6));
    held.ack().unwrap();
    assert_eq!((a.len(), b.len()), (5, 5));
    a.close().unwrap();
    b.close().unwrap();
}

// Issue 24 (the raw queue's shared producers): a view that attached a tail
// another handle had made read every whole frame in it, not only those
// published with it, so the frame of a process that died before publishing
// it (whole, but never acknowledged) was counted and delivered by the
// views that attached the tail afterwards, and not by the others. (It also
// checked every frame's CRC again: a quarter of four producers' CPU.)
#[test]
fn a_view_attaching_a_new_tail_reads_only_the_published_frames() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = shared().segment_items(2).open_or_create(&path).unwrap();
    let b: DQue<u32> = shared().open(&path).unwrap();
    assert_eq!(b.len(), 0, "b looks once, before the tail moves on");
    // 0 and 1 fill segment 1; 2 is the first record of segment 2.
    a.enqueue_batch([0, 1, 2]).unwrap();
    // A process that died holding the mutex left a whole frame after the
    // published end of segment 2: a copy of record 2's frame.
    let second = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join(format!("{:020}.seg", 2)))
        .unwrap();
    let header_len = 40;
    let mut word = [0u8; 4];
    second.read_exact_at(&mut word, header_len).unwrap();
    let payload_len = (u32::from_le_bytes(word) & ((1 << 30) - 1)) as usize;
    let frame_len = (8 + payload_len).next_multiple_of(4);
    let mut frame = vec![0u8; frame_len];
    second.read_exact_at(&mut frame, header_len).unwrap();
    second
        .write_all_at(&frame, header_len + frame_len as u64)
        .unwrap();
    assert_eq!(b.len(), 3, "b counted a frame nobody published");
    assert_eq!(b.dequeue_batch(10).unwrap(), vec![0, 1, 2]);
    // The next write goes where the published frames end.
    a.enqueue(&3).unwrap();
    assert_eq!(b.dequeue_batch(10).unwrap(), vec![3]);
    assert_eq!((a.len(), b.len()), (0, 0));
    a.close().unwrap();
    b.close().unwrap();
}
