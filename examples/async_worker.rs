//! A tokio program over an embedded jobs queue: enqueues 1,000 jobs into
//! the queue at the directory given as the first argument (created if
//! missing), runs 8 concurrent async workers that lease, handle and ack
//! them, and prints `done 1000` last.
//!
//! ```text
//! cargo run --example async_worker --features tokio -- /tmp/async-jobs
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, JobOptions, NewJob, Retry};

const JOBS: usize = 1000;
const WORKERS: usize = 8;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .ok_or("usage: async_worker DIRECTORY")?;
    std::fs::create_dir_all(&dir)?;
    let queue: Arc<dyn AsyncJobQueue> = Arc::new(AsyncEmbeddedJobs::new(
        JobOptions::new().open_or_create(&dir)?,
    ));

    // The producer: one batch (one fsync per lane in Safe mode).
    let jobs = (0..JOBS).map(|i| NewJob::new(format!("job {i}"))).collect();
    queue.enqueue_batch(jobs).await?;

    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (queue, done) = (Arc::clone(&queue), Arc::clone(&done));
            tokio::spawn(async move {
                // Stops when every job is done: the last ack ends the wait
                // of the others at their next look.
                while done.load(Ordering::SeqCst) < JOBS {
                    let Some(lease) = queue.lease_timeout(Duration::from_millis(100)).await? else {
                        continue;
                    };
                    if lease.body.is_empty() {
                        queue.nack(lease, Retry::Backoff, "empty body").await?;
                        continue;
                    }
                    // The work: a job's body is its name.
                    tokio::task::yield_now().await;
                    queue.ack(lease).await?;
                    done.fetch_add(1, Ordering::SeqCst);
                }
                Ok::<(), dque::Error>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    queue.close().await?;
    println!("done {}", done.load(Ordering::SeqCst));
    Ok(())
}
