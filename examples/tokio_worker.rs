//! The tokio worker runtime on an embedded jobs queue: three kinds of
//! typed async jobs run as tokio tasks, 16 at a time, with retries, dead
//! letters, panics caught, and a graceful stop. The contract of
//! `examples/worker.rs` (the thread runtime), for tokio programs.
//!
//! ```text
//! cargo run --features runtime,tokio --example tokio_worker -- DIR [--until-empty]
//! ```
//!
//! It opens (or creates) an embedded jobs queue at DIR, shared with other
//! processes (DIR may be any ADDRESS: `postgres://…#QUEUE` or
//! `redis://…#QUEUE` too, with features `postgres` or `redis`), and runs
//! its jobs:
//! - `greet`, body `{"name": S}`: prints `hello S` (after an async pause);
//! - `fail`, body `{}`: always fails with a retryable error, `failing on purpose`;
//! - `panic`, body `{}`: panics with `boom`;
//!
//! each with 2 attempts, no back-off delay and a 10 s timeout. It prints one
//! line per finished attempt, `KIND ok`, `KIND retry: REASON` or
//! `KIND dead: REASON`, and runs until SIGTERM or SIGINT (running jobs get
//! 5 s; those it holds then are given back without counting the attempt)
//! or, with `--until-empty`, until no job is ready; then it exits 0. From
//! a shell:
//!
//! ```text
//! dque push DIR --kind greet '{"name":"ada"}'
//! ```

use std::time::Duration;

use dque::jobs::AddressOptions;
use dque::runtime::{
    AsyncContext, AsyncJob, AsyncWorker, Finished, JobError, KindOptions, Outcome,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl AsyncJob for Greet {
    const KIND: &'static str = "greet";

    async fn perform(self, _cx: &AsyncContext) -> Result<(), JobError> {
        // Where a real handler awaits a request or a database.
        tokio::time::sleep(Duration::from_millis(1)).await;
        println!("hello {}", self.name);
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct Fail {}

impl AsyncJob for Fail {
    const KIND: &'static str = "fail";

    async fn perform(self, _cx: &AsyncContext) -> Result<(), JobError> {
        Err(JobError::retry("failing on purpose"))
    }
}

#[derive(Serialize, Deserialize)]
struct Panic {}

impl AsyncJob for Panic {
    const KIND: &'static str = "panic";

    async fn perform(self, _cx: &AsyncContext) -> Result<(), JobError> {
        panic!("boom")
    }
}

/// `KIND ok`, `KIND retry: REASON`, `KIND dead: REASON`.
fn line(finished: &Finished<'_>) -> Option<String> {
    let kind = finished.kind;
    match finished.outcome {
        Outcome::Succeeded => Some(format!("{kind} ok")),
        Outcome::Retrying { reason, .. } => Some(format!("{kind} retry: {reason}")),
        Outcome::Dead { reason } => Some(format!("{kind} dead: {reason}")),
        // Given back at a stop, or lost: not a finished attempt.
        _ => None,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut dir = None;
    let mut until_empty = false;
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--until-empty") => until_empty = true,
            _ if dir.is_none() => dir = Some(arg),
            _ => return Err("usage: tokio_worker DIR [--until-empty]".into()),
        }
    }
    let dir = dir.ok_or("usage: tokio_worker DIR [--until-empty]")?;
    let address = dir.to_str().ok_or("DIR is not UTF-8")?;
    // A directory opens in shared mode: `dque push DIR` and other workers
    // use it meanwhile. The worker owns the queue: `run` closes it.
    let worker = AsyncWorker::open_with(address, &AddressOptions::new().create(true)).await?;
    let each = KindOptions::new()
        .max_attempts(2)
        .no_backoff()
        .timeout(Duration::from_secs(10));
    let summary = worker
        .register_with::<Greet>(each.clone())
        .register_with::<Fail>(each.clone())
        .register_with::<Panic>(each)
        .concurrency(16)
        .until_empty(until_empty)
        .on_finished(|finished| {
            if let Some(line) = line(finished) {
                println!("{line}");
            }
        })
        .run()
        .await?;
    eprintln!(
        "tokio_worker: {} ok, {} retried, {} dead, {} given back ({:?})",
        summary.succeeded, summary.retried, summary.dead, summary.released, summary.stopped
    );
    Ok(())
}
