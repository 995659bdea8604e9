//! The Jobs API on the embedded queue ([`EmbeddedJobs`]): priorities, a
//! delay, headers, a caller's id enqueued twice (added once), a worker
//! loop that leases, acks and nacks with a [`Retry`](dque::jobs::Retry),
//! dead letters, counts and statistics. The tour itself
//! (`examples/jobs_tour/mod.rs`) is written against `&dyn JobQueue`; the
//! `postgres_jobs` and `redis_jobs` examples run it unchanged on a server.
//!
//! Run with `cargo run --example jobs`. It uses a temporary queue and
//! takes about two seconds (the worker waits a second for more work
//! before it stops).

mod jobs_tour;

use std::time::Duration;

use dque::jobs::{EmbeddedJobs, JobOptions};
use dque::Options;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // A job queue is a directory: one lane queue per priority, a schedule
    // for delayed jobs, caller ids and statistics. `Options::shared(true)`
    // would let worker processes open it together.
    let queue: EmbeddedJobs = JobOptions::new()
        .queue(
            Options::new()
                .visibility_timeout(Duration::from_secs(60)) // the lease time
                .max_attempts(jobs_tour::MAX_ATTEMPTS),
        )
        .create(dir.path().join("mail"))?;
    jobs_tour::tour(&queue)?;
    Ok(())
}
