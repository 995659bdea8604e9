//! Every call racing `close()`: a call that returns an error had no effect,
//! and a call that returns `Ok` had its effect (durably, in Safe mode).
//!
//! Bug pinned (issue 11, bug 1): a Safe dequeue whose ack marker was
//! written, and then synced by a concurrent `close()`, ended its wait for
//! the group commit with `Closed` (or `WritesRefused`), so the item was
//! neither returned nor left in the queue; an enqueue made durable by
//! `close()` returned an error, so a retrying producer duplicated it.
//!
//! Each round starts two threads looping on one call over a queue of
//! numbered items, closes the queue from a third after a short random
//! pause, reopens it and checks the books: every item is returned `Ok`
//! exactly once or is still there; every enqueue that returned `Ok` is
//! there and every one that failed is not; errors are only `Closed`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dque::{DQue, Durability, Error, Options};

/// Items in the queue when a round starts.
const STOCK: u64 = 400;
/// Rounds per call and durability (CI); `DQUE_CLOSE_ROUNDS` sets more.
const ROUNDS: u64 = 30;

#[derive(Debug, Clone, Copy)]
enum Call {
    Enqueue,
    EnqueueBatch,
    Dequeue,
    DequeueBatch,
    DequeueBlock,
    LeaseAck,
}

const DURABILITIES: [Durability; 3] = [
    Durability::Safe,
    Durability::Turbo,
    Durability::Periodic(Duration::from_millis(1)),
];

/// What one thread saw: items returned `Ok` (taken, or enqueued), and
/// items whose enqueue failed.
#[derive(Default)]
struct Books {
    ok: Vec<u64>,
    failed: Vec<u64>,
}

fn rounds() -> u64 {
    std::env::var("DQUE_CLOSE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ROUNDS)
}

/// A cheap deterministic pause of 0 to about 3 ms, different each round.
fn pause(round: u64) -> Duration {
    Duration::from_micros((round.wrapping_mul(2_654_435_761) >> 7) % 3_000)
}

/// Only `Closed` may end a call cut short by `close()`.
fn expect_closed(call: Call, durability: Durability, e: &Error) {
    let closed = matches!(e, Error::Closed);
    assert!(
        closed,
        "{call:?} in {durability:?} racing close() failed with {e} ({e:?}), not Closed"
    );
}

fn worker(queue: &DQue<u64>, call: Call, durability: Durability, thread: u64) -> Books {
    let mut books = Books::default();
    // Producers number their items apart from the stock and from each other.
    let mut next = STOCK + thread * 1_000_000;
    loop {
        let result: Result<(), Error> = match call {
            Call::Enqueue => {
                next += 1;
                let r = queue.enqueue(&next);
                match &r {
                    Ok(()) => books.ok.push(next),
                    Err(_) => books.failed.push(next),
                }
                r
            }
            Call::EnqueueBatch => {
                let batch: Vec<u64> = (next + 1..=next + 7).collect();
                next += 7;
                let r = queue.enqueue_batch(&batch);
                match &r {
                    Ok(()) => books.ok.extend(&batch),
                    Err(_) => books.failed.extend(&batch),
                }
                r
            }
            Call::Dequeue => queue.dequeue().map(|item| books.ok.extend(item)),
            Call::DequeueBatch => queue.dequeue_batch(9).map(|items| books.ok.extend(items)),
            Call::DequeueBlock => queue.dequeue_block().map(|item| books.ok.push(item)),
            Call::LeaseAck => match queue.lease() {
                Ok(Some(leased)) => {
                    let item = *leased.item();
                    leased.ack().map(|()| books.ok.push(item))
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            expect_closed(call, durability, &e);
            return books;
        }
    }
}

fn round(call: Call, durability: Durability, shared: bool, round: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let options = Options::new()
        .durability(durability)
        .segment_items(64)
        .shared(shared);
    let queue: Arc<DQue<u64>> = Arc::new(DQue::create_with(&path, &options).unwrap());
    let stock: Vec<u64> = (0..STOCK).collect();
    queue.enqueue_batch(&stock).unwrap();

    let workers: Vec<_> = (0..2)
        .map(|thread| {
            let queue = Arc::clone(&queue);
            thread::spawn(move || worker(&queue, call, durability, thread))
        })
        .collect();
    thread::sleep(pause(round));
    // A second close() may race the first one's end; only one reports Ok.
    let closed = queue.close();
    assert!(
        closed.is_ok(),
        "{call:?} {durability:?}: close failed: {closed:?}"
    );
    let books: Vec<Books> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    drop(queue);

    let reopened: DQue<u64> = DQue::open(&path).unwrap();
    let mut left = Vec::new();
    while let Some(item) = reopened.dequeue().unwrap() {
        left.push(item);
    }
    let left_set: BTreeSet<u64> = left.iter().copied().collect();
    assert_eq!(
        left_set.len(),
        left.len(),
        "{call:?} {durability:?}: duplicates after reopen"
    );
    let ok: Vec<u64> = books.iter().flat_map(|b| b.ok.iter().copied()).collect();
    let failed: Vec<u64> = books
        .iter()
        .flat_map(|b| b.failed.iter().copied())
        .collect();
    let where_ = format!("{call:?} in {durability:?}, round {round}");
    match call {
        Call::Enqueue | Call::EnqueueBatch => {
            let expected: BTreeSet<u64> = stock.iter().chain(&ok).copied().collect();
            assert_eq!(
                left_set, expected,
                "{where_}: enqueues returned Ok are lost, or failed ones kept"
            );
            assert!(
                failed.iter().all(|f| !left_set.contains(f)),
                "{where_}: a failed enqueue took effect"
            );
        }
        _ => {
            let taken: BTreeSet<u64> = ok.iter().copied().collect();
            assert_eq!(
                taken.len(),
                ok.len(),
                "{where_}: an item was returned twice"
            );
            let overlap: Vec<_> = taken.intersection(&left_set).collect();
            assert!(
                overlap.is_empty(),
                "{where_}: returned Ok and still in the queue: {overlap:?}"
            );
            let all: BTreeSet<u64> = taken.union(&left_set).copied().collect();
            let lost: Vec<_> = stock.iter().filter(|i| !all.contains(i)).collect();
            assert!(
                lost.is_empty(),
                "{where_}: lost (neither returned nor left): {lost:?}"
            );
        }
    }
}

/// Each call in every durability, exclusive and shared (issue 12: shared
/// mode has its own wait and durability paths).
fn race_close(call: Call) {
    for shared in [false, true] {
        for durability in DURABILITIES {
            for r in 0..rounds() {
                round(call, durability, shared, r);
            }
        }
    }
}

#[test]
fn enqueue_racing_close() {
    race_close(Call::Enqueue);
}

#[test]
fn enqueue_batch_racing_close() {
    race_close(Call::EnqueueBatch);
}

#[test]
fn dequeue_racing_close() {
    race_close(Call::Dequeue);
}

#[test]
fn dequeue_batch_racing_close() {
    race_close(Call::DequeueBatch);
}

#[test]
fn dequeue_block_racing_close() {
    race_close(Call::DequeueBlock);
}

#[test]
fn lease_and_ack_racing_close() {
    race_close(Call::LeaseAck);
}

// Blocked callers that never started get `Closed`, never `WritesRefused`.
#[test]
fn callers_blocked_on_an_empty_queue_get_closed() {
    for (durability, shared) in DURABILITIES
        .into_iter()
        .flat_map(|d| [(d, false), (d, true)])
    {
        let dir = tempfile::tempdir().unwrap();
        let options = Options::new().durability(durability).shared(shared);
        let queue: Arc<DQue<u64>> =
            Arc::new(DQue::create_with(dir.path().join("q"), &options).unwrap());
        let blocked: Vec<_> = (0..3)
            .map(|i| {
                let queue = Arc::clone(&queue);
                thread::spawn(move || match i {
                    0 => queue.dequeue_block().map(drop),
                    1 => queue.peek_block().map(drop),
                    _ => queue.lease_block().map(drop),
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(50));
        queue.close().unwrap();
        for b in blocked {
            let result = b.join().unwrap();
            let closed = matches!(result, Err(Error::Closed));
            assert!(closed, "{durability:?}: a blocked caller got {result:?}");
        }
    }
}
