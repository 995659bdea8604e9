//! Reviewer's reproducers for the async side (feature `tokio`).

use std::time::Duration;

use dque::{AsyncQueue, DQue, Options};

// Review (lost wake-up, shared mode): `Wakeups::watch` spawns the watcher
// thread, which reads the futex word only once it runs. A task that looked
// (nothing) and went to sleep before that, with an enqueue by another
// handle (another process) in between, is never woken: the watcher's first
// reading already includes the enqueue's move of the word. A lease without
// a deadline and no lease held has no timer either, so it waits until the
// next write.
#[test]
fn review_a_task_waiting_right_after_new_wakes_on_another_handles_enqueue() {
    let trials: usize = std::env::var("REVIEW_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut lost = 0;
    for _ in 0..trials {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let ours: DQue<u32> = Options::new().shared(true).create(&path).unwrap();
        // Another handle of the queue: as another process, it reaches our
        // tasks through the futex word only.
        let other: DQue<u32> = Options::new().shared(true).open(&path).unwrap();
        runtime.block_on(async {
            let q = AsyncQueue::new(ours);
            let mut lease = Box::pin(q.lease());
            assert!(futures::poll!(&mut lease).is_pending());
            other.enqueue(&1).unwrap();
            match tokio::time::timeout(Duration::from_secs(1), lease).await {
                Ok(job) => job.unwrap().expect("an item").ack().await.unwrap(),
                Err(_) => lost += 1,
            }
        });
    }
    assert_eq!(lost, 0, "{lost} of {trials} waiting tasks never woke");
}
