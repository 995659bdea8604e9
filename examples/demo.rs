//! The main job on a temporary queue: enqueue, close, reopen, drain; then
//! the same as a job queue (priorities, a delay, a header, a caller's id).
//!
//! Run with `cargo run --example demo`. Pass a directory to keep the queue.

use std::time::Duration;

use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
use dque::{DQue, Options};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u32,
    task: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let path = match std::env::args().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => temp.path().join("jobs"),
    };

    // Small segments so the demo shows them rolling over.
    let queue: DQue<Job> = Options::new().segment_items(4).open_or_create(&path)?;
    println!("opened {} holding {} items", path.display(), queue.len());
    for id in 1..=10 {
        queue.enqueue(&Job {
            id,
            task: format!("resize image {id}"),
        })?;
    }
    println!(
        "enqueued 10 jobs: len {}, segments {:?}",
        queue.len(),
        queue.segment_numbers()?
    );
    let first = queue.dequeue()?.expect("just enqueued");
    println!("dequeued {first:?}");
    queue.close()?;
    println!("closed; reopening");

    let queue: DQue<Job> = DQue::open(&path)?;
    println!(
        "reopened: len {}, segments {:?}, report clean: {}",
        queue.len(),
        queue.segment_numbers()?,
        queue.open_report().is_clean()
    );
    while let Some(job) = queue.dequeue()? {
        println!("dequeued {job:?} (left {})", queue.len());
    }
    println!("drained; segments {:?}", queue.segment_numbers()?);

    // The same directory kind of queue, as a job queue: priorities, a
    // delay, a header and a caller's id, and a worker that runs them.
    let jobs = EmbeddedJobs::create(temp.path().join("job-queue"))?;
    jobs.enqueue(NewJob::new("send newsletter").priority(5))?;
    jobs.enqueue(
        NewJob::new("page on-call")
            .priority(-1)
            .header("team", "db"),
    )?;
    jobs.enqueue(NewJob::new("weekly report").delay(Duration::from_secs(3600)))?;
    jobs.enqueue(NewJob::new("charge order 7").id("order-7"))?;
    let again = jobs.enqueue(NewJob::new("charge order 7").id("order-7"))?;
    println!("\njob queue: order-7 again added? {}", again.is_added());
    while let Some(job) = jobs.lease()? {
        println!(
            "ran job {} priority {} headers {:?}: {}",
            job.id,
            job.priority,
            job.headers,
            String::from_utf8_lossy(&job.body)
        );
        jobs.ack(job)?;
    }
    let counts = jobs.counts()?;
    println!("left: {} scheduled (due in an hour)", counts.scheduled);
    Ok(())
}
