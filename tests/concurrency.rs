//! Threads sharing one `Arc<DQue>`: exactly-once delivery between producers
//! and blocking consumers, close waking every blocked caller, timeouts, and
//! wake-ups of peekers.
//!
//! No assertion here depends on how fast the machine is: sleeps only give
//! threads a chance to block before the event that should wake them, and
//! every wait for a thread's answer has a generous limit so a lost wake-up
//! fails the test instead of hanging it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use dque::{DQue, Durability, Error, Options};

/// How long a thread may take to answer before it counts as stuck. Far
/// beyond anything a busy machine needs; only reached by a lost wake-up.
const STUCK: Duration = Duration::from_secs(60);
/// A pause that lets other threads reach their blocking call first. It makes
/// the tests meaningful, never correct: they pass whatever the timing.
const SETTLE: Duration = Duration::from_millis(100);

/// Marks the end of the stream for one consumer.
const STOP: u64 = u64::MAX;

fn queue(path: &Path, durability: Durability, segment_items: u32) -> Arc<DQue<u64>> {
    Arc::new(
        Options::new()
            .durability(durability)
            .segment_items(segment_items)
            .create(path)
            .unwrap(),
    )
}

/// Receives `n` answers, failing if any thread takes longer than [`STUCK`].
fn answers<R>(rx: &Receiver<R>, n: usize, what: &str) -> Vec<R> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(STUCK).unwrap_or_else(|e| {
                panic!("{what}: only {i} of {n} threads answered ({e}); the rest are stuck")
            })
        })
        .collect()
}

fn segment_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".seg")
        })
        .count()
}

/// Producers enqueue `(producer << 32) | seq`; consumers take with
/// `dequeue_block` until each gets a [`STOP`], enqueued after every producer
/// finished (so FIFO puts all items before the stops).
fn exactly_once(
    durability: Durability,
    producers: u64,
    per_producer: u64,
    consumers: usize,
    segment_items: u32,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q = queue(&path, durability, segment_items);
    let start = Arc::new(Barrier::new(producers as usize + consumers));

    let (tx, rx) = mpsc::channel();
    for _ in 0..consumers {
        let (q, start, tx) = (q.clone(), start.clone(), tx.clone());
        thread::spawn(move || {
            start.wait();
            let mut got = Vec::new();
            loop {
                let item = q.dequeue_block().unwrap();
                if item == STOP {
                    break;
                }
                got.push(item);
            }
            tx.send(got).unwrap();
        });
    }
    let mut producer_threads = Vec::new();
    for p in 0..producers {
        let (q, start) = (q.clone(), start.clone());
        producer_threads.push(thread::spawn(move || {
            start.wait();
            for seq in 0..per_producer {
                q.enqueue(&((p << 32) | seq)).unwrap();
            }
        }));
    }
    for producer in producer_threads {
        producer.join().unwrap();
    }
    for _ in 0..consumers {
        q.enqueue(&STOP).unwrap();
    }
    let per_consumer = answers(&rx, consumers, "consumers");

    // One queue, FIFO: each consumer sees each producer's items in order.
    for got in &per_consumer {
        let mut last: HashMap<u64, u64> = HashMap::new();
        for &item in got {
            let (p, seq) = (item >> 32, item & 0xFFFF_FFFF);
            if let Some(&before) = last.get(&p) {
                assert!(
                    seq > before,
                    "producer {p}: item {seq} was dequeued after item {before}"
                );
            }
            last.insert(p, seq);
        }
    }
    let mut all: Vec<u64> = per_consumer.into_iter().flatten().collect();
    all.sort_unstable();
    let expected: Vec<u64> = (0..producers)
        .flat_map(|p| (0..per_producer).map(move |seq| (p << 32) | seq))
        .collect();
    assert_eq!(all.len(), expected.len(), "items lost or duplicated");
    assert_eq!(all, expected, "items lost or duplicated");

    assert!(q.is_empty());
    assert_eq!(q.peek().unwrap(), None);
    let range = q.segment_numbers().unwrap();
    assert_eq!(range.start(), range.end(), "consumed segments left behind");
    assert_eq!(
        segment_files(&path),
        1,
        "consumed segment files left behind"
    );
    q.close().unwrap();
    drop(q);

    let q: DQue<u64> = DQue::open(&path).unwrap();
    assert_eq!(q.len(), 0, "consumed items came back after reopen");
    assert_eq!(q.dequeue().unwrap(), None);
}

#[test]
fn turbo_producers_and_blocking_consumers_deliver_each_item_once() {
    exactly_once(Durability::Turbo, 4, 2_500, 4, 97);
}

#[test]
fn safe_producers_and_blocking_consumers_deliver_each_item_once() {
    exactly_once(Durability::Safe, 3, 80, 3, 16);
}

#[test]
fn more_consumers_than_producers_deliver_each_item_once() {
    exactly_once(Durability::Turbo, 1, 3_000, 6, 250);
}

#[test]
fn close_wakes_blocked_dequeue_and_peek_with_closed() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir.path().join("q"), Durability::Turbo, 10);
    const EACH: usize = 3;
    let start = Arc::new(Barrier::new(4 * EACH + 1));
    let (tx, rx) = mpsc::channel();
    for kind in [
        "dequeue_block",
        "peek_block",
        "dequeue_timeout",
        "peek_timeout",
    ] {
        for _ in 0..EACH {
            let (q, start, tx) = (q.clone(), start.clone(), tx.clone());
            thread::spawn(move || {
                start.wait();
                let result = match kind {
                    "dequeue_block" => q.dequeue_block().map(Some),
                    "peek_block" => q.peek_block().map(Some),
                    "dequeue_timeout" => q.dequeue_timeout(10 * STUCK),
                    _ => q.peek_timeout(10 * STUCK),
                };
                tx.send((kind, result)).unwrap();
            });
        }
    }
    start.wait();
    thread::sleep(SETTLE);
    q.close().unwrap();
    for (kind, result) in answers(&rx, 4 * EACH, "waiters after close") {
        let matched = matches!(result, Err(Error::Closed));
        assert!(
            matched,
            "{kind} after close returned {result:?}, not Closed"
        );
    }
}

#[test]
fn every_call_after_close_fails_with_closed() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir.path().join("q"), Durability::Turbo, 10);
    q.enqueue(&1).unwrap();
    q.close().unwrap();
    let closed = |what: &str, result: Result<(), Error>| {
        let matched = matches!(result, Err(Error::Closed));
        assert!(
            matched,
            "{what} after close returned {result:?}, not Closed"
        );
    };
    closed("enqueue", q.enqueue(&2));
    closed("dequeue", q.dequeue().map(drop));
    closed("peek", q.peek().map(drop));
    closed("dequeue_block", q.dequeue_block().map(drop));
    closed("peek_block", q.peek_block().map(drop));
    closed("dequeue_timeout", q.dequeue_timeout(STUCK).map(drop));
    closed("peek_timeout", q.peek_timeout(STUCK).map(drop));
    closed("segment_numbers", q.segment_numbers().map(drop));
    closed("set_durability", q.set_durability(Durability::Safe));
    closed("sync", q.sync());
    closed("second close", q.close());
    assert_eq!(q.len(), 0);
    assert!(q.is_empty());
}

#[test]
fn dequeue_timeout_on_empty_queue_returns_none() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir.path().join("q"), Durability::Turbo, 10);
    let timeout = Duration::from_millis(50);
    let started = Instant::now();
    assert_eq!(q.dequeue_timeout(timeout).unwrap(), None);
    // A lower bound only: a busy machine can make the wait longer, never shorter.
    assert!(
        started.elapsed() >= timeout,
        "dequeue_timeout gave up before its timeout"
    );
    let started = Instant::now();
    assert_eq!(q.peek_timeout(timeout).unwrap(), None);
    assert!(
        started.elapsed() >= timeout,
        "peek_timeout gave up before its timeout"
    );
    assert_eq!(q.dequeue_timeout(Duration::ZERO).unwrap(), None);
    assert!(q.is_empty());
}

#[test]
fn dequeue_timeout_and_peek_timeout_return_item_enqueued_while_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir.path().join("q"), Durability::Turbo, 10);
    for (kind, item) in [("dequeue_timeout", 42), ("peek_timeout", 43)] {
        let start = Arc::new(Barrier::new(2));
        let (tx, rx) = mpsc::channel();
        {
            let (q, start) = (q.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let result = if kind == "peek_timeout" {
                    q.peek_timeout(STUCK)
                } else {
                    q.dequeue_timeout(STUCK)
                };
                tx.send(result).unwrap();
            });
        }
        start.wait();
        thread::sleep(SETTLE);
        q.enqueue(&item).unwrap();
        let got = answers(&rx, 1, kind).pop().unwrap();
        assert_eq!(got.unwrap(), Some(item), "{kind}");
    }
    // The dequeue took 42; the peek left 43.
    assert_eq!(q.len(), 1);
    assert_eq!(q.dequeue().unwrap(), Some(43));
}

#[test]
fn one_item_goes_to_exactly_one_of_two_dequeue_timeout_waiters() {
    // One waiter gets the item; the other keeps waiting (its timeout is far
    // away) until close() ends it with Closed.
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir.path().join("q"), Durability::Turbo, 10);
    let start = Arc::new(Barrier::new(3));
    let (tx, rx) = mpsc::channel();
    for _ in 0..2 {
        let (q, start, tx) = (q.clone(), start.clone(), tx.clone());
        thread::spawn(move || {
            start.wait();
            tx.send(q.dequeue_timeout(10 * STUCK)).unwrap();
        });
    }
    start.wait();
    thread::sleep(SETTLE);
    q.enqueue(&7).unwrap();
    let first = answers(&rx, 1, "two waiters, one item").pop().unwrap();
    assert_eq!(first.unwrap(), Some(7));
    assert!(q.is_empty());
    q.close().unwrap();
    let second = answers(&rx, 1, "the other waiter after close")
        .pop()
        .unwrap();
    let matched = matches!(second, Err(Error::Closed));
    assert!(
        matched,
        "the waiter without an item returned {second:?}, not Closed"
    );
}

#[test]
fn one_arriving_item_wakes_every_blocked_peeker() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir.path().join("q"), Durability::Turbo, 10);
    const PEEKERS: usize = 6;
    let start = Arc::new(Barrier::new(PEEKERS + 1));
    let (tx, rx) = mpsc::channel();
    for _ in 0..PEEKERS {
        let (q, start, tx) = (q.clone(), start.clone(), tx.clone());
        thread::spawn(move || {
            start.wait();
            tx.send(q.peek_block()).unwrap();
        });
    }
    start.wait();
    thread::sleep(SETTLE);
    q.enqueue(&99).unwrap();
    for result in answers(&rx, PEEKERS, "peekers after one enqueue") {
        assert_eq!(result.unwrap(), 99);
    }
    assert_eq!(q.len(), 1, "peeking must not take the item");
    assert_eq!(q.dequeue().unwrap(), Some(99));
}

#[test]
fn blocked_consumers_each_get_one_of_a_burst() {
    // Items enqueued back to back, each with its own wake-up: no consumer may
    // be left asleep while an item waits.
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir.path().join("q"), Durability::Turbo, 3);
    const CONSUMERS: u64 = 8;
    let start = Arc::new(Barrier::new(CONSUMERS as usize + 1));
    let (tx, rx) = mpsc::channel();
    for _ in 0..CONSUMERS {
        let (q, start, tx) = (q.clone(), start.clone(), tx.clone());
        thread::spawn(move || {
            start.wait();
            tx.send(q.dequeue_block()).unwrap();
        });
    }
    start.wait();
    thread::sleep(SETTLE);
    for i in 0..CONSUMERS {
        q.enqueue(&i).unwrap();
    }
    let mut got: Vec<u64> = answers(&rx, CONSUMERS as usize, "consumers after a burst")
        .into_iter()
        .map(Result::unwrap)
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..CONSUMERS).collect::<Vec<_>>());
    assert!(q.is_empty());
}

#[test]
fn close_during_traffic_keeps_every_returned_enqueue_and_dequeue() {
    // Producers and consumers run until close() stops them. Whatever the
    // timing, every enqueue that returned Ok is either dequeued (Ok) once or
    // still in the queue after reopen, and nothing else is.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q = queue(&path, Durability::Turbo, 64);
    const PRODUCERS: u64 = 3;
    const CONSUMERS: usize = 3;
    let enqueued = Arc::new(std::sync::atomic::AtomicU64::new(0));

    let (done_tx, done_rx) = mpsc::channel();
    for p in 0..PRODUCERS {
        let (q, enqueued, done_tx) = (q.clone(), enqueued.clone(), done_tx.clone());
        thread::spawn(move || {
            let mut seq = 0;
            loop {
                match q.enqueue(&((p << 32) | seq)) {
                    Ok(()) => seq += 1,
                    Err(Error::Closed) => break,
                    Err(e) => panic!("enqueue: {e}"),
                }
                enqueued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            done_tx.send((p, seq, Vec::new())).unwrap();
        });
    }
    for c in 0..CONSUMERS {
        let (q, done_tx) = (q.clone(), done_tx.clone());
        thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match q.dequeue_block() {
                    Ok(item) => got.push(item),
                    Err(Error::Closed) => break,
                    Err(e) => panic!("dequeue_block: {e}"),
                }
            }
            done_tx.send((u64::MAX - c as u64, 0, got)).unwrap();
        });
    }
    // Let some traffic happen first (a count, not a time, decides when).
    let waited = Instant::now();
    while enqueued.load(std::sync::atomic::Ordering::Relaxed) < 3_000 {
        assert!(waited.elapsed() < STUCK, "producers made no progress");
        thread::sleep(Duration::from_millis(1));
    }
    q.close().unwrap();

    let mut produced = HashMap::new();
    let mut delivered = Vec::new();
    for (who, count, got) in answers(&done_rx, PRODUCERS as usize + CONSUMERS, "after close") {
        if who < PRODUCERS {
            produced.insert(who, count);
        } else {
            delivered.extend(got);
        }
    }
    drop(q);

    let q: DQue<u64> = DQue::open(&path).unwrap();
    let mut remaining = Vec::new();
    while let Some(item) = q.dequeue().unwrap() {
        remaining.push(item);
    }
    let mut last: HashMap<u64, u64> = HashMap::new();
    for &item in &remaining {
        let (p, seq) = (item >> 32, item & 0xFFFF_FFFF);
        if let Some(&before) = last.get(&p) {
            assert!(
                seq > before,
                "after reopen: producer {p} item {seq} after {before}"
            );
        }
        last.insert(p, seq);
    }
    let mut all = delivered;
    all.extend(remaining);
    all.sort_unstable();
    let expected: Vec<u64> = (0..PRODUCERS)
        .flat_map(|p| (0..produced[&p]).map(move |seq| (p << 32) | seq))
        .collect();
    assert_eq!(all.len(), expected.len(), "items lost or duplicated");
    assert_eq!(all, expected, "items lost or duplicated");
}
