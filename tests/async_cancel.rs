//! Cancel safety of the async queue: lease futures and guards dropped at
//! random points (tiny timeouts, lost `select!` branches, guards dropped
//! unsettled) never leave an item leased with no owner, never lose one,
//! and never count an attempt. Rounds: `DQUE_ASYNC_ROUNDS` (default small).

use std::collections::BTreeMap;
use std::time::Duration;

use dque::{AsyncQueue, DQue, Durability, Options};
use futures::StreamExt;

/// A small deterministic generator (xorshift), seeded per task.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn rounds() -> u64 {
    std::env::var("DQUE_ASYNC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

async fn cancel_storm(durability: Durability) {
    const ITEMS: u32 = 200;
    let dir = tempfile::tempdir().unwrap();
    let q: DQue<u32> = Options::new()
        .durability(durability)
        // Long: an item must come back by a give-back, not by expiry.
        .visibility_timeout(Duration::from_secs(3600))
        .create(dir.path().join("q"))
        .unwrap();
    let q = AsyncQueue::new(q);
    q.enqueue_batch(0..ITEMS).await.unwrap();
    let tasks: Vec<_> = (0..8u64)
        .map(|seed| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut rng = Rng(seed * 7919 + 17);
                for _ in 0..rounds() {
                    let tiny = Duration::from_micros(rng.below(200));
                    match rng.below(5) {
                        // A lease whose future a tiny timeout may drop at
                        // any await: while it waits, or its fsync (Safe).
                        0 => {
                            if let Ok(Ok(Some(job))) = tokio::time::timeout(tiny, q.lease()).await {
                                drop(job); // given back, uncounted
                            }
                        }
                        // A batch, the same way.
                        1 => {
                            let _ = tokio::time::timeout(tiny, q.lease_batch(5)).await;
                        }
                        // A lease losing a select! to a timer.
                        2 => {
                            tokio::select! {
                                job = q.lease() => drop(job),
                                () = tokio::time::sleep(tiny) => {}
                            }
                        }
                        // A stream dropped while it waits, or after one lease.
                        3 => {
                            let mut leases = q.leases();
                            let _ = tokio::time::timeout(tiny, leases.next()).await;
                        }
                        // A settling call dropped before its first poll.
                        _ => {
                            if let Some(job) = q.try_lease().await.unwrap() {
                                drop(job.ack());
                            }
                        }
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // In Safe mode dropped guards give back on the blocking pool: every
    // item is back once no lease is held.
    let mut waited = 0;
    while q.queue().leased_len() > 0 {
        waited += 1;
        assert!(waited < 3000, "an item stays leased with no owner");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        q.queue().len(),
        ITEMS as usize,
        "{durability:?}: an item was lost"
    );
    // Drain: every item exactly once, on its first counted attempt.
    q.seal();
    let mut seen = BTreeMap::new();
    let mut leases = q.leases();
    while let Some(job) = leases.next().await {
        let job = job.unwrap();
        assert_eq!(
            job.attempt(),
            1,
            "{durability:?}: a dropped lease counted an attempt"
        );
        *seen.entry(*job).or_insert(0) += 1;
        job.ack().await.unwrap();
    }
    assert_eq!(seen.len(), ITEMS as usize, "{durability:?}");
    assert!(
        seen.values().all(|&n| n == 1),
        "{durability:?}: delivered twice"
    );
    assert!(q.queue().is_empty());
    assert!(q.queue().dead_letters().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lease_futures_lose_nothing_and_count_nothing_in_turbo() {
    cancel_storm(Durability::Turbo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lease_futures_lose_nothing_and_count_nothing_in_safe_mode() {
    cancel_storm(Durability::Safe).await;
}
