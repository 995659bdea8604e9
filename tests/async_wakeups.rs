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
fn a_task_waiting_right_after_new_wakes_on_another_handles_enqueue() {
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

// Review (AsyncEmbeddedJobs in Turbo): "in Turbo and Periodic mode it runs
// inline" (README: "no fsync") — but a nack with a delay makes the job's
// schedule copy durable before it ends the lane record
// (`durable_before_moving_on`: an fsync in Turbo), and moves of due jobs
// with caller ids or the settling of deferred moves fsync too, all on the
// task's thread: a current-thread runtime stops for the fsync. A slow
// disk shows it: a ticker task gets no turn while the nack waits.
#[test]
fn an_async_turbo_nack_with_a_delay_does_not_fsync_on_the_task() {
    use dque::faults::FaultPlan;
    use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, JobOptions, NewJob, Retry};
    use dque::Durability;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let jobs = JobOptions::new()
        .queue(Options::new().durability(Durability::Turbo))
        .create(&path)
        .unwrap();
    let queue = AsyncEmbeddedJobs::new(jobs);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        queue.enqueue(NewJob::new("a")).await.unwrap();
        let lease = queue.lease().await.unwrap().expect("a job");
        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = tokio::spawn({
            let ticks = Arc::clone(&ticks);
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    ticks.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _slow = FaultPlan::slow_disk(path.join("jobs/scheduled"), Duration::from_millis(300));
        let before = ticks.load(Ordering::SeqCst);
        queue
            .nack(lease, Retry::After(Duration::from_secs(3600)), "later")
            .await
            .unwrap();
        let during = ticks.load(Ordering::SeqCst) - before;
        ticker.abort();
        assert!(during > 0, "the task's thread was held for the whole fsync");
    });
}
