//! `DQue::seal`, the blocking API's "no more items": enqueues after it
//! fail and had no effect, consumers drain what is there (handed-back
//! items included) and then stop, in exclusive and shared mode.
//!
//! Before it, a blocking consumer had no end but `close` (which cut off
//! what was left) or a sleep-until-empty loop: these pin that a sealed
//! drain ends, and ends only once every item is settled.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dque::{DQue, Durability, Error, Options, RawQueue};

fn modes() -> [Options; 2] {
    [
        Options::new().durability(Durability::Turbo),
        Options::new().durability(Durability::Turbo).shared(true),
    ]
}

#[test]
fn every_enqueue_after_seal_fails_with_closed_and_writes_nothing() {
    for options in modes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let q: DQue<u32> = options.create(&path).unwrap();
        q.enqueue_batch([1, 2]).unwrap();
        assert!(!q.is_sealed());
        q.seal();
        assert!(q.is_sealed());
        let refused = [
            q.enqueue(&3),
            q.enqueue_batch([4, 5]),
            q.enqueue_timeout(&6, Duration::from_millis(1)),
            q.enqueue_timeout(&7, Duration::MAX),
        ];
        for (i, result) in refused.into_iter().enumerate() {
            assert!(
                matches!(result, Err(Error::Closed)),
                "call {i} after seal: {result:?}"
            );
        }
        assert_eq!(q.len(), 2, "a refused enqueue wrote nothing");
        // The queue stays open for consumers; what they read is what was there.
        assert_eq!(q.items().map(Result::unwrap).collect::<Vec<_>>(), [1, 2]);
        q.close().unwrap();
        let again: DQue<u32> = Options::new().open(&path).unwrap();
        assert!(again.is_empty(), "reopened: nothing of the refused calls");
        assert!(!again.is_sealed(), "a seal belongs to a handle");
        again.enqueue(&8).unwrap();
    }
}

#[test]
fn raw_enqueue_bytes_after_seal_fails_too() {
    let dir = tempfile::tempdir().unwrap();
    let q: RawQueue = Options::new().create(dir.path().join("raw")).unwrap();
    q.seal();
    assert!(matches!(q.enqueue_bytes(b"late"), Err(Error::Closed)));
    assert!(q.is_empty());
}

#[test]
fn waiting_consumers_drain_what_is_there_and_then_stop() {
    for options in modes() {
        let dir = tempfile::tempdir().unwrap();
        let q: Arc<DQue<u64>> = Arc::new(options.create(dir.path().join("q")).unwrap());
        // Four kinds of consumer loop, started on an empty queue: they wait.
        let consumers: Vec<thread::JoinHandle<Vec<u64>>> = (0..4)
            .map(|kind| {
                let q = Arc::clone(&q);
                thread::spawn(move || {
                    let mut got = Vec::new();
                    match kind {
                        0 => got.extend(q.items().map(Result::unwrap)),
                        1 => {
                            for job in q.leases() {
                                let job = job.unwrap();
                                got.push(*job);
                                job.ack().unwrap();
                            }
                        }
                        2 => loop {
                            match q.lease_block() {
                                Ok(job) => {
                                    got.push(*job);
                                    job.ack().unwrap();
                                }
                                Err(Error::Closed) => break,
                                Err(e) => panic!("{e}"),
                            }
                        },
                        _ => {
                            while let Some(job) = q.lease_timeout(Duration::MAX).unwrap() {
                                got.push(*job);
                                job.ack().unwrap();
                            }
                        }
                    }
                    got
                })
            })
            .collect();
        let n = 2_000u64;
        for i in 0..n {
            q.enqueue(&i).unwrap();
        }
        q.seal();
        let mut all: Vec<u64> = consumers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>(), "each item once, none left");
        assert!(q.is_empty());
    }
}

#[test]
fn a_consumer_sealed_while_it_waits_on_an_empty_queue_stops() {
    for options in modes() {
        let dir = tempfile::tempdir().unwrap();
        let q: Arc<DQue<u32>> = Arc::new(options.create(dir.path().join("q")).unwrap());
        let waiting = thread::spawn({
            let q = Arc::clone(&q);
            move || {
                let block = q.dequeue_block();
                let batch = q.lease_batch_timeout(8, Duration::MAX).unwrap();
                (block, batch.len())
            }
        });
        thread::sleep(Duration::from_millis(50));
        q.seal();
        let (block, batch) = waiting.join().unwrap();
        assert!(matches!(block, Err(Error::Closed)), "{block:?}");
        assert_eq!(batch, 0);
    }
}

#[test]
fn a_nacked_item_comes_back_to_the_consumers_before_the_drain_ends() {
    for options in modes() {
        let dir = tempfile::tempdir().unwrap();
        let q: Arc<DQue<u32>> = Arc::new(options.create(dir.path().join("q")).unwrap());
        q.enqueue(&7).unwrap();
        let held = q.lease().unwrap().unwrap();
        q.seal();
        // The queue holds only a leased item: the drain must not end yet.
        let consumer = thread::spawn({
            let q = Arc::clone(&q);
            move || {
                let mut seen = Vec::new();
                for job in q.leases() {
                    let job = job.unwrap();
                    seen.push((*job, job.attempt()));
                    job.ack().unwrap();
                }
                seen
            }
        });
        thread::sleep(Duration::from_millis(50));
        assert!(!consumer.is_finished(), "ended with an item still leased");
        held.nack().unwrap();
        assert_eq!(consumer.join().unwrap(), [(7, 2)]);
        assert!(q.is_empty());
    }
}

#[test]
fn a_drain_ends_when_the_last_lease_is_acked_elsewhere() {
    for options in modes() {
        let dir = tempfile::tempdir().unwrap();
        let q: Arc<DQue<u32>> = Arc::new(options.create(dir.path().join("q")).unwrap());
        q.enqueue(&1).unwrap();
        let held = q.lease().unwrap().unwrap();
        q.seal();
        let consumer = thread::spawn({
            let q = Arc::clone(&q);
            move || q.items().count()
        });
        thread::sleep(Duration::from_millis(50));
        assert!(!consumer.is_finished(), "ended with an item still leased");
        held.ack().unwrap();
        assert_eq!(consumer.join().unwrap(), 0);
    }
}

#[test]
fn the_producer_consumer_example_drains_and_exits() {
    // `cargo test` builds the examples beside the tests' directory.
    let example = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/producer_consumer");
    assert!(example.exists(), "{} not built", example.display());
    let out = std::process::Command::new(example).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("40000 items delivered"), "{stdout}");
}
