//! The async handle over the embedded queue (feature `tokio`): waiting
//! without threads, wake-ups from every source (an async or blocking
//! enqueue, a give-back, an expired lease, another process), the
//! streams, and shutdown (seal, close).

mod child;

use std::sync::Arc;
use std::time::Duration;

use dque::{AsyncQueue, DQue, Durability, Error, Options};
use futures::StreamExt;

const LONG: Duration = Duration::from_secs(30);

fn queue(dir: &tempfile::TempDir, durability: Durability) -> AsyncQueue<u32> {
    let q = Options::new()
        .durability(durability)
        .create(dir.path().join("q"))
        .unwrap();
    AsyncQueue::new(q)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_go_through_in_every_durability() {
    for durability in [
        Durability::Safe,
        Durability::Turbo,
        Durability::Periodic(Duration::from_millis(5)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(&dir, durability);
        q.enqueue(&1).await.unwrap();
        q.enqueue_batch([2, 3, 4]).await.unwrap();
        assert_eq!(q.dequeue().await.unwrap(), Some(1), "{durability:?}");
        let job = q.lease().await.unwrap().expect("an item");
        assert_eq!((*job, job.attempt()), (2, 1));
        job.touch().unwrap();
        job.ack().await.unwrap();
        let batch = q.lease_batch(10).await.unwrap();
        assert_eq!(batch.iter().map(|j| **j).collect::<Vec<_>>(), [3, 4]);
        q.ack_batch(batch).await.unwrap();
        assert!(q.queue().is_empty(), "{durability:?}");
        assert_eq!(q.try_lease().await.unwrap().map(|j| *j), None);
        assert_eq!(
            q.lease_timeout(Duration::from_millis(20))
                .await
                .unwrap()
                .map(|j| *j),
            None
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_gives_the_item_back_without_counting_the_attempt() {
    for durability in [Durability::Safe, Durability::Turbo] {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(&dir, durability);
        q.enqueue(&7).await.unwrap();
        for _ in 0..10 {
            let job = q.lease_timeout(LONG).await.unwrap().expect("the item");
            assert_eq!(
                job.attempt(),
                1,
                "{durability:?}: a drop counted an attempt"
            );
            drop(job);
        }
        // Settling calls still count as their sync forms do.
        let job = q.lease_timeout(LONG).await.unwrap().expect("the item");
        job.nack().await.unwrap();
        let job = q.lease_timeout(LONG).await.unwrap().expect("the item");
        assert_eq!(job.attempt(), 2, "{durability:?}: a nack counts");
        job.release().await.unwrap();
        let job = q.lease_timeout(LONG).await.unwrap().expect("the item");
        assert_eq!(job.attempt(), 2, "{durability:?}: a release does not");
        job.fail("bad").await.unwrap();
        assert_eq!(q.queue().dead_letters().unwrap()[0].reason, "bad");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_wake_on_async_and_blocking_enqueues_and_give_backs() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, Durability::Turbo);
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let job = q
                    .lease_timeout(LONG)
                    .await
                    .unwrap()
                    .expect("woken with an item");
                let item = *job;
                job.ack().await.unwrap();
                item
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Half through this handle, half through the blocking handle (another
    // thread, as blocking code would), one at a time and in batches.
    for i in 0..10 {
        q.enqueue(&i).await.unwrap();
    }
    q.enqueue_batch(10..25).await.unwrap();
    let blocking = Arc::clone(q.queue());
    std::thread::spawn(move || {
        for i in 25..35 {
            blocking.enqueue(&i).unwrap();
        }
        blocking.enqueue_batch(35..50).unwrap();
    })
    .join()
    .unwrap();
    let mut got = Vec::new();
    for waiter in waiters {
        got.push(waiter.await.unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, (0..50).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_waiter_wakes_on_an_async_enqueue() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, Durability::Safe);
    let blocking = Arc::clone(q.queue());
    let waiter = std::thread::spawn(move || blocking.lease_timeout(LONG).map(|j| j.map(|j| *j)));
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.enqueue(&9).await.unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), Some(9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lease_takes_an_item_whose_lease_expired() {
    let dir = tempfile::tempdir().unwrap();
    let q: DQue<u32> = Options::new()
        .durability(Durability::Turbo)
        .visibility_timeout(Duration::from_millis(50))
        .create(dir.path().join("q"))
        .unwrap();
    let q = AsyncQueue::new(q);
    q.enqueue(&1).await.unwrap();
    let first = q.lease().await.unwrap().expect("the item");
    // No one signals an expiry: the waiter's own timer must.
    let again = q
        .lease_timeout(LONG)
        .await
        .unwrap()
        .expect("back after 50 ms");
    assert_eq!((*again, again.attempt()), (1, 2));
    again.ack().await.unwrap();
    assert!(matches!(first.ack().await, Err(Error::LeaseLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_makes_enqueue_timeout_wait_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let q: DQue<u32> = Options::new()
        .durability(Durability::Turbo)
        .max_items(1)
        .create(dir.path().join("q"))
        .unwrap();
    let q = AsyncQueue::new(q);
    q.enqueue(&1).await.unwrap();
    let full = q.enqueue_timeout(&2, Duration::from_millis(10)).await;
    assert!(matches!(full, Err(Error::Full { .. })), "{full:?}");
    let producer = tokio::spawn({
        let q = q.clone();
        async move { q.enqueue_timeout(&2, LONG).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.lease().await.unwrap().expect("1").ack().await.unwrap();
    producer.await.unwrap().unwrap();
    assert_eq!(q.dequeue().await.unwrap(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_queue_drains_every_item_then_its_streams_end() {
    for durability in [Durability::Safe, Durability::Turbo] {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(&dir, durability);
        let consumers: Vec<_> = (0..4)
            .map(|n| {
                let q = q.clone();
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    let mut leases = q.lease_batches(3);
                    while let Some(batch) = leases.next().await {
                        for job in batch.unwrap() {
                            // One nack on the way: the item must come back
                            // to someone, not be left behind by the drain.
                            if n == 0 && *job % 10 == 0 && job.attempt() == 1 {
                                job.nack().await.unwrap();
                                continue;
                            }
                            done.push(*job);
                            job.ack().await.unwrap();
                        }
                    }
                    done
                })
            })
            .collect();
        for i in 0..100 {
            q.enqueue(&i).await.unwrap();
        }
        q.seal();
        assert!(matches!(q.enqueue(&100).await, Err(Error::Closed)));
        let mut got = Vec::new();
        for consumer in consumers {
            got.extend(consumer.await.unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, (0..100).collect::<Vec<_>>(), "{durability:?}");
        assert!(q.queue().is_empty());
        // Once sealed and empty, a lease answers at once.
        assert!(q.lease().await.unwrap().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_item_stream_drains_a_sealed_queue() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, Durability::Turbo);
    q.enqueue_batch(0..10).await.unwrap();
    q.seal();
    let items: Vec<u32> = q.items().map(Result::unwrap).collect().await;
    assert_eq!(items, (0..10).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_wakes_waiters_with_closed_and_ends_streams() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, Durability::Safe);
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.lease().await.map(|j| j.map(|j| *j)) }
    });
    let stream = tokio::spawn({
        let q = q.clone();
        async move { q.leases().count().await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.close().await.unwrap();
    let waited = tokio::time::timeout(LONG, waiter).await.unwrap().unwrap();
    assert!(matches!(waited, Err(Error::Closed)), "{waited:?}");
    assert_eq!(
        tokio::time::timeout(LONG, stream).await.unwrap().unwrap(),
        0
    );
}

/// Shared mode: the child enqueues into the queue the parent's tasks wait
/// on; only the futex word, through the parent's watcher thread, can wake them.
#[test]
fn a_waiting_task_wakes_on_an_enqueue_from_another_process() {
    let path = std::env::var("DQUE_ASYNC_CHILD_QUEUE");
    if child::run_as_child(|| {
        let q: DQue<u32> = Options::new()
            .shared(true)
            .open(path.as_ref().unwrap())
            .unwrap();
        for i in 0..20 {
            q.enqueue(&i).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    }) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = Options::new().shared(true).create(&path).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let q = AsyncQueue::new(q);
        let waiters: Vec<_> = (0..20)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    // A lease without a deadline: only a wake-up ends its
                    // wait (the timeout is the test's, a failure).
                    let job = tokio::time::timeout(LONG, q.lease()).await;
                    let job = job.expect("never woken").unwrap().expect("an item");
                    let item = *job;
                    job.ack().await.unwrap();
                    item
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut enqueuer = {
            let _one_at_a_time = child::one_spawner_at_a_time();
            child::command("a_waiting_task_wakes_on_an_enqueue_from_another_process")
                .env("DQUE_ASYNC_CHILD_QUEUE", &path)
                .spawn()
                .unwrap()
        };
        // Waited for off the runtime's one thread: the tasks wake meanwhile.
        let status = tokio::task::spawn_blocking(move || enqueuer.wait().unwrap());
        assert!(status.await.unwrap().success());
        let mut got = Vec::new();
        for waiter in waiters {
            got.push(waiter.await.unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    });
}

// The seal is the handle's, one state for both APIs: a seal through
// either side ends the other side's waiting consumers and refuses its
// enqueues (the blocking DQue had no seal before; AsyncQueue kept its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_through_either_api_ends_the_other_sides_consumers() {
    for seal_blocking in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(&dir, Durability::Turbo);
        let blocking = Arc::clone(q.queue());
        let thread_consumer = std::thread::spawn({
            let blocking = Arc::clone(&blocking);
            move || blocking.items().map(Result::unwrap).collect::<Vec<u32>>()
        });
        let task_consumer = tokio::spawn({
            let q = q.clone();
            async move { q.items().map(Result::unwrap).collect::<Vec<u32>>().await }
        });
        q.enqueue_batch(0..50).await.unwrap();
        if seal_blocking {
            blocking.seal();
        } else {
            q.seal();
        }
        assert!(q.is_sealed() && blocking.is_sealed());
        assert!(matches!(q.enqueue(&50).await, Err(Error::Closed)));
        assert!(matches!(blocking.enqueue(&51), Err(Error::Closed)));
        let mut got = task_consumer.await.unwrap();
        got.extend(
            tokio::task::spawn_blocking(move || thread_consumer.join().unwrap())
                .await
                .unwrap(),
        );
        got.sort_unstable();
        assert_eq!(
            got,
            (0..50).collect::<Vec<_>>(),
            "sealed blocking: {seal_blocking}"
        );
    }
}
